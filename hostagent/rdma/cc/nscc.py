"""NSCC, UET's network signal-based congestion control (Ultra Ethernet 1.0;
Hoefler et al., arXiv 2508.08906; its research form is SMaRTT, arXiv
2404.01630): a sender window from two signals a sprayed flow gets per ACK,
the queueing delay (RTT - base RTT) against a target and the ECN mark.

  per ACK of `acked` packets, delay = rtt - base_rtt:
  no mark, delay <  target:  proportional increase
                             cwnd += pi_gain * bdp * (target - delay) / target * acked / cwnd
                             (near an empty path the window reaches the BDP in about an RTT)
  no mark, delay >= target:  fair increase (congestion draining: marks stopped, the delay
                             has not caught up)   cwnd += fi_packets * acked / cwnd
  mark,    delay >= target:  multiplicative decrease, at most once per RTT:
                             cwnd *= 1 - min(md_gain * (d - target) / d, max_md),
                             d = max(delay, its moving average)
  mark,    delay <  target:  nothing (one path is hot, the others are not: the
                             transport's path penalties move off it)
  a trim or a loss:          quick adapt, at most once per RTT: cwnd = what was
                             acknowledged over the last RTT (at least min_cwnd)
  retransmission timeout:    cwnd halves (at least min_cwnd)
cwnd within [min_cwnd, 1.5 * bdp], bdp = line rate x base RTT. The window
limits; the pacing rate is the line rate.

Scaling (paper -> here), with TIMELY's and Swift's RTTs (timely.py):

| constant | UET / SMaRTT | here | why |
|---|---|---|---|
| base_rtt | ~µs, the unloaded RTT | 7.2 ms | a leaf-spine path on BMv2 (timely.py) |
| target_qdelay | ~0.75 x base RTT | 4 ms | half of Swift's target above its base (8 ms) |
| bdp | link rate x base RTT | line_rate_pps x base_rtt_s | packets |
| max window | 1.25-1.5 x BDP | 1.5 x BDP | |
| pi_gain, fi_packets | scaled by BDP | 1.0, 1.0 | the BDP per RTT at an empty path; 1 packet per RTT |
| md_gain, max_md | 0.8 (Swift's beta), 0.5 | 0.8, 0.5 | |

`fabric tune` derives base_rtt_s and target_qdelay_s for a topology (0.75
x its RTT, as the UEC's htsim model with trimming: docs/tuning.md).
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Optional

from hostagent.rdma.cc.base import Feedback


@dataclass(frozen=True)
class NsccParams:
    line_rate_pps: float = 1000.0
    base_rtt_s: float = 0.0072
    target_qdelay_s: float = 0.004
    pi_gain: float = 1.0
    fi_packets: float = 1.0
    md_gain: float = 0.8
    max_md: float = 0.5
    delay_gain: float = 0.125           # the delay's moving average
    min_cwnd: float = 1.0
    init_cwnd: Optional[float] = None   # None: the BDP
    mtu_bytes: int = 1024

    def __post_init__(self):
        problems = []
        for name in ("line_rate_pps", "base_rtt_s", "target_qdelay_s", "pi_gain", "fi_packets", "min_cwnd"):
            if not getattr(self, name) > 0:
                problems.append(f"{name} must be > 0, got {getattr(self, name)}")
        for name in ("md_gain", "max_md", "delay_gain"):
            if not 0 < getattr(self, name) <= 1:
                problems.append(f"{name} must be within (0, 1], got {getattr(self, name)}")
        if self.init_cwnd is not None and not self.min_cwnd <= self.init_cwnd <= self.max_cwnd:
            problems.append(f"init_cwnd must be within min_cwnd..1.5 x BDP ({self.min_cwnd}..{self.max_cwnd:g}), "
                            f"got {self.init_cwnd}")
        if problems:
            raise ValueError("invalid NSCC parameters: " + "; ".join(problems))

    @property
    def bdp(self) -> float:
        return self.line_rate_pps * self.base_rtt_s

    @property
    def max_cwnd(self) -> float:
        return max(self.min_cwnd, 1.5 * self.bdp)


class Nscc:
    name = "nscc"

    def __init__(self, params: NsccParams = NsccParams(), now: float = 0.0):
        self.p = params
        self.cwnd = params.init_cwnd if params.init_cwnd is not None else min(params.max_cwnd,
                                                                               max(params.min_cwnd, params.bdp))
        self.avg_delay = 0.0
        self.rtt = params.base_rtt_s
        self.last_decrease: Optional[float] = None
        self.last_adapt: Optional[float] = None
        self._acked: deque[tuple[float, int]] = deque()     # (when, packets) over the last RTT
        self.counts = {"proportional": 0, "fair": 0, "decrease": 0, "noop": 0, "quick_adapt": 0}

    @property
    def window_packets(self) -> float:
        return self.cwnd

    @property
    def rate_pps(self) -> float:
        return self.p.line_rate_pps

    def _set(self, cwnd: float) -> None:
        self.cwnd = min(self.p.max_cwnd, max(self.p.min_cwnd, cwnd))

    def _once_per_rtt(self, last: Optional[float], now: float) -> bool:
        return last is None or now - last >= self.rtt

    def on_send(self, now: float, nbytes: int) -> None:
        pass

    def on_ack(self, fb: Feedback) -> None:
        p = self.p
        if fb.acked_packets:
            self._acked.append((fb.now, fb.acked_packets))
        while self._acked and fb.now - self._acked[0][0] > self.rtt:
            self._acked.popleft()
        if fb.rtt_s is not None:
            self.rtt = fb.rtt_s
            delay = max(0.0, fb.rtt_s - p.base_rtt_s)
            self.avg_delay += p.delay_gain * (delay - self.avg_delay)
        else:
            delay = self.avg_delay
        target = p.target_qdelay_s
        if not fb.ecn_echo:
            if not fb.acked_packets:
                return
            if delay < target:
                self.counts["proportional"] += 1
                self._set(self.cwnd + p.pi_gain * p.bdp * (target - delay) / target * fb.acked_packets / self.cwnd)
            else:
                self.counts["fair"] += 1
                self._set(self.cwnd + p.fi_packets * fb.acked_packets / self.cwnd)
        elif delay >= target:
            if self._once_per_rtt(self.last_decrease, fb.now):
                d = max(delay, self.avg_delay)
                self.counts["decrease"] += 1
                self._set(self.cwnd * (1 - min(p.md_gain * (d - target) / d, p.max_md)))
                self.last_decrease = fb.now
        else:
            self.counts["noop"] += 1

    def on_loss(self, now: float) -> None:
        """A trimmed or lost packet: quick adapt to what the path delivered
        over the last RTT."""
        if not self._once_per_rtt(self.last_adapt, now):
            return
        self.last_adapt = now
        delivered = sum(n for t, n in self._acked if now - t <= self.rtt)
        if delivered < self.cwnd:
            self.counts["quick_adapt"] += 1
            self._set(delivered)

    def on_cnp(self, now: float) -> None:
        pass                                 # ECN comes in the ACKs

    def on_timeout(self, now: float) -> None:
        self._set(self.cwnd / 2)

    def advance(self, now: float) -> None:
        pass
