"""The host agent: what runs on a host of the fabric.

headers.py  every header put on the wire, as Scapy layers (one definition)
sender.py   fast transmission of prebuilt frames on a persistent raw socket
dcqcn.py    DCQCN rate control (reaction point, notification point)
roce.py     RoCEv2 sender/receiver with DCQCN: `python -m hostagent.roce`
"""
