"""TIMELY (Mittal et al., "TIMELY: RTT-based Congestion Control for the
Datacenter", SIGCOMM 2015): a rate from the RTT and its gradient.

Once per RTT (the first RTT sample from an ACK beyond what was sent when
the rate last changed, as the reference ns-3 code of the HPCC authors
updates TIMELY; per ACK, a queue's worth of ACKs would cut the rate many
times for one congestion event), or from any ACK once an RTT (that ACK's
sample) has passed since the last update: under go-back-N with losses the
cumulative ACK can stay below that mark for many RTTs, and a first version
then held its rate for seconds with the queue full (4:1 lossy: 0.20
utilisation):
  new_diff = rtt - prev_rtt;  diff = (1 - alpha) diff + alpha new_diff
  gradient = diff / min_rtt
  rtt < T_low:          R = R + delta                       (additive)
  rtt > T_high:         R = R (1 - beta (1 - T_high / rtt))  (multiplicative, on the RTT)
  gradient <= 0:        R = R + N delta, N = 5 after 5 such samples in a row
                        (hyperactive increase), else 1
  otherwise:            R = R (1 - beta gradient)
R within [min_rate, line_rate]. Rate-based: no window.

Scaling (paper -> here): the paper's NICs see RTTs of tens of us; a BMv2
leaf-spine path (three switches) with Python agents measured 7.2 ms at
least (experiments/rdma.py, h1 -> r1 at 833 packets/s), and a full
64-packet queue at 833 packets/s adds ~77 ms.

| constant | paper / ns-3 | here | why |
|---|---|---|---|
| T_low | 50 us | 10 ms | just above the unloaded RTT (7.2 ms) |
| T_high | 500 us | 50 ms | the unloaded RTT and half a full bottleneck queue |
| min_rtt | ~20 us | 7 ms | the unloaded RTT: the gradient's scale |
| delta | 10 Mbit/s | 10 packets/s | ~1% of a 833 packets/s link per step |
| alpha (EWMA) | 0.875 (ns-3) | 0.875 | unitless |
| beta | 0.8 | 0.8 | unitless |
| hyperactive after | 5 | 5 | samples |
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from hostagent.rdma.cc.base import Feedback


@dataclass(frozen=True)
class TimelyParams:
    line_rate_pps: float = 1000.0
    min_rate_pps: float = 10.0
    t_low_s: float = 0.010
    t_high_s: float = 0.050
    min_rtt_s: float = 0.007
    delta_pps: float = 10.0
    alpha: float = 0.875
    beta: float = 0.8
    hai_after: int = 5
    mtu_bytes: int = 1024

    def __post_init__(self):
        problems = []
        if not 0 < self.min_rate_pps <= self.line_rate_pps:
            problems.append(f"min_rate_pps must be within (0, line_rate_pps], got {self.min_rate_pps}")
        if not 0 < self.t_low_s < self.t_high_s:
            problems.append(f"t_low_s must be > 0 and below t_high_s, got {self.t_low_s} and {self.t_high_s}")
        if not self.min_rtt_s > 0:
            problems.append(f"min_rtt_s must be > 0, got {self.min_rtt_s}")
        if self.delta_pps < 0:
            problems.append(f"delta_pps must be >= 0, got {self.delta_pps}")
        for name in ("alpha", "beta"):
            if not 0 < getattr(self, name) <= 1:
                problems.append(f"{name} must be within (0, 1], got {getattr(self, name)}")
        if self.hai_after < 1:
            problems.append(f"hai_after must be >= 1, got {self.hai_after}")
        if problems:
            raise ValueError("invalid TIMELY parameters: " + "; ".join(problems))


class Timely:
    name = "timely"
    window_packets: Optional[float] = None

    def __init__(self, params: TimelyParams = TimelyParams(), now: float = 0.0):
        self.p = params
        self.rate_pps = params.line_rate_pps
        self.prev_rtt: Optional[float] = None
        self.diff = 0.0
        self.negative_run = 0
        self.increases = self.decreases = 0
        self.last_update_seq = 0
        self.last_update_at: Optional[float] = None

    def on_ack(self, fb: Feedback) -> None:
        rtt = fb.rtt_s
        if rtt is None:
            return
        rtt_passed = self.last_update_at is not None and fb.now - self.last_update_at >= rtt
        if fb.acked_seq <= self.last_update_seq and not rtt_passed:
            return
        self.last_update_seq, self.last_update_at = fb.next_seq, fb.now
        p = self.p
        if self.prev_rtt is None:
            self.prev_rtt = rtt
            return
        self.diff = (1 - p.alpha) * self.diff + p.alpha * (rtt - self.prev_rtt)
        self.prev_rtt = rtt
        gradient = self.diff / p.min_rtt_s
        if rtt < p.t_low_s:
            self.negative_run = 0
            self._set(self.rate_pps + p.delta_pps)
        elif rtt > p.t_high_s:
            self.negative_run = 0
            self._set(self.rate_pps * (1 - p.beta * (1 - p.t_high_s / rtt)))
        elif gradient <= 0:
            self.negative_run += 1
            n = 5 if self.negative_run >= p.hai_after else 1
            self._set(self.rate_pps + n * p.delta_pps)
        else:
            self.negative_run = 0
            self._set(self.rate_pps * (1 - p.beta * gradient))

    def _set(self, rate: float) -> None:
        if rate > self.rate_pps:
            self.increases += 1
        elif rate < self.rate_pps:
            self.decreases += 1
        self.rate_pps = min(self.p.line_rate_pps, max(self.p.min_rate_pps, rate))

    def on_send(self, now: float, nbytes: int) -> None:
        pass

    def on_cnp(self, now: float) -> None:
        pass

    def on_timeout(self, now: float) -> None:
        pass

    def advance(self, now: float) -> None:
        pass
