"""Host side of failover: heartbeats (heartbeat.py) and host plane failover on dual-plane fabrics (plane_failover.py)."""
