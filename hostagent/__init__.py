"""The host agent: what runs on a host of the fabric.

headers.py      every header put on the wire, as Scapy layers (one definition)
int_headers.py  INT v2.1 and Telemetry Report v2.0 layers, metadata codec, reference source/transit/sink
sender.py       fast transmission of prebuilt frames on a persistent raw socket
dcqcn.py        DCQCN rate control (reaction point, notification point)
roce.py         RoCEv2 sender/receiver with DCQCN: `python -m hostagent.ecn.roce`
reorder.py      receiver-side reorder buffer for sprayed/flowlet traffic (by BTH PSN)
plb.py          PLB-style repathing: a new UDP source port after persistent congestion
traffic.py      elephants and fixed-size transfers with completion times:
                `python -m hostagent.traffic`
ecmp_math.py    ECMP collision math (paths used, max/mean load) for load-balancing experiments
"""
