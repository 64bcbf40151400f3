"""Host side of ECN: DCQCN rate control (dcqcn.py) and a RoCEv2 sender/receiver that uses it (roce.py)."""
