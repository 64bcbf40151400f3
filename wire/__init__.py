"""Wire formats: every header the project puts on the wire, one protocol a
file (constants, Scapy layers, `bind_layers` at the bottom, struct codecs
where a hot path needs them). The bottom layer: it imports Scapy only.

ecn.py             RFC 3168 ECN codepoints
roce.py            RoCEv2 (BTH, CNP) data and CNP packets, the agent's fixed offsets
int_telemetry.py   INT v2.1 and Telemetry Report v2.0, metadata codec, reference source/transit/sink
source_routing.py  the fabric's source route (INT probes, heartbeats)
aggregation.py     in-network aggregation (SwitchML/ATP-style) packets and codec
plane_failover.py  host plane failover's flow data and acks
trimming.py        a trimmed packet (packet trimming): its DSCP, and the model of a trim
"""
