"""Collective communication over the fabric (docs/collectives.md):
all-reduce (ring, recursive halving-doubling, double binary tree),
reduce-scatter, all-gather, broadcast and all-to-all, as schedules
(schedule.py) that an executor carries out.
"""
