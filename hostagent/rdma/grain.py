"""How long an RDMA agent's loop sleeps when no frame arrives: the grain of
its pacing, its pauses and its timers.

A frame wakes the loop at once (select, a socket timeout); these bound the
sleep when none comes. They are in the network's time: on a network dilated
D times (--dilation, emulator/dilation.py) the gaps between packets, the
pauses and the timers are all D times longer, so the loop sleeps D times
longer for the same precision. Undilated, a paced sender and a receiver wake
2,000 times a second each whatever their rate; at x16 that fixed cost, which
the budget does not count, would not fall with the dilation.
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass

from emulator.dilation import Dilation


@dataclass(frozen=True)
class LoopGrain:
    """The sleeps of one agent's loop, in seconds, undilated; an agent on a
    dilated network takes Dilation(D).params(LoopGrain): every one x D (the
    `_s` suffix makes each a time)."""
    pace_s: float = 0.0005      # a paced sender: the longest sleep before its next send time
    idle_s: float = 0.001       # a sender with nothing to send (its window full, or idle): until a frame or its timers
    paused_s: float = 0.0002    # a sender whose class PFC pauses: how often it looks at the pause again
    receive_s: float = 0.0005   # a receiver: its socket's timeout, the grain of its timers (ACK coalescing, reordering)


def loop_grain(a: argparse.Namespace) -> LoopGrain:
    """The grain at the agent's --dilation (1 where its options have none)."""
    return Dilation(getattr(a, "dilation", 1.0)).params(LoopGrain)
