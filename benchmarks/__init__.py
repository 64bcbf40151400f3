"""Benchmarks: `fabric bench` (forwarding_rate.py: packets/s of the pipeline
and of each feature, off and on) and instructions_per_packet.py (callgrind)."""
