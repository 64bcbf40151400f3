"""Telemetry: the INT report collector and the switches' Prometheus exporter.

decode.py           fast decoding of Telemetry Report v2.0 datagrams (offsets from the Scapy layers)
sequence.py         lost / reordered / duplicate reports per (node id, hw id), across the 22-bit wrap
flows.py            per-flow paths, hop and end-to-end latency, queues, drops, congestion
metrics.py          every Prometheus metric name the collector and the exporter produce
collector.py        `python -m telemetry.collector`: UDP receiver, CSV/JSON outputs, /metrics
switch_exporter.py  `python -m telemetry.switch_exporter`: port counters, drops, ECN marks, queue depth
prometheus.py       running a real Prometheus (monitor, tests)
monitor.py          `python -m telemetry.monitor`: collector + exporter + Prometheus next to a network
alerts.py           the Prometheus alerting rules, written from metrics.py into alerts.yml (docs/operations.md)
"""
