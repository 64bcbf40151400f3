"""DCQCN on the RDMA transport: the ECN feature's reaction point
(hostagent/ecn/dcqcn.py: equations, parameters and their scaling) behind
the congestion-control interface (cc/base.py). Rate-based: no window; CNPs
cut the rate, the timers and the byte counter raise it; ACKs and timeouts
are not its signals."""
from __future__ import annotations

from typing import Optional

from hostagent.ecn.dcqcn import DcqcnParams, ReactionPoint
from hostagent.rdma.cc.base import Feedback


class Dcqcn:
    name = "dcqcn"
    window_packets: Optional[float] = None

    def __init__(self, params: DcqcnParams = DcqcnParams(), now: float = 0.0):
        self.params = params
        self.rp = ReactionPoint(params, now=now)

    @property
    def rate_pps(self) -> float:
        return self.rp.rate

    def on_send(self, now: float, nbytes: int) -> None:
        self.rp.on_sent(nbytes, now)

    def on_ack(self, fb: Feedback) -> None:
        pass

    def on_cnp(self, now: float) -> None:
        self.rp.on_cnp(now)

    def on_timeout(self, now: float) -> None:
        pass

    def advance(self, now: float) -> None:
        self.rp.advance(now)
