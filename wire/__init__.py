"""Wire formats: every header the project puts on the wire, one protocol a
file (constants, Scapy layers, `bind_layers` at the bottom, struct codecs
where a hot path needs them). The bottom layer: it imports Scapy only.
Where an agent needs a protocol's codecs and not its layers, they live in
<protocol>_codec.py, which imports no Scapy (a process that imports Scapy
pays about 0.2 s of CPU), and <protocol>.py re-exports them; roce.py and
lossless.py, which re-export Scapy's own layers, import Scapy only when
one is asked for.

ecn.py             RFC 3168 ECN codepoints
ipv4.py            Ethernet/IPv4/UDP headers as the agents write them, the IPv4 checksum
roce.py            RoCEv2 (BTH, CNP) data and CNP packets, the agent's fixed offsets
int_telemetry.py   INT v2.1 and Telemetry Report v2.0, reference source/transit/sink
int_telemetry_codec.py  INT's numbers and per-hop metadata codec (no Scapy)
source_routing.py  the fabric's source route (INT probes, heartbeats)
aggregation.py     in-network aggregation (SwitchML/ATP-style) packets; aggregation_codec.py its codec
plane_failover.py  host plane failover's flow data and acks
trimming.py        a trimmed packet (packet trimming): its DSCP, and the model of a trim
lossless.py        PFC frames (802.1Qbb) and the traffic classes' DSCP marks
rdma.py            the RoCEv2 reliable connection's headers (RETH, AETH, SACK/INT extension); rdma_codec.py
uet.py             Ultra Ethernet's packet delivery (PDS) headers; uet_codec.py
nonminimal_routing.py  the Valiant tag
"""
