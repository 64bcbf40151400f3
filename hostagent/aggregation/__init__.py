"""Host side of in-network aggregation: the all-reduce worker (allreduce.py), parameter server, ring all-reduce baseline, data-parallel training, and running them on a live network (runs.py)."""
