"""What a topology's link is when its file says nothing (control/topology.py
validates and applies it). A module of its own so that code needing only
these values does not import the topology model: emulator/dilation.py, which
the RDMA host agent imports, read them from control.topology, which brings
gRPC and P4Runtime along (0.3 s of every agent's start, on two cores shared
with the switches)."""

DEFAULT_LINK = {"bandwidth_mbps": 100.0, "delay_ms": 0.0, "loss_pct": 0.0}
