"""Congestion controls of the RDMA transport: one interface (base.py), one
module per algorithm (dcqcn, timely, swift, hpcc)."""
