"""Swift (Kumar et al., "Swift: Delay is Simple and Effective for
Congestion Control in the Datacenter", SIGCOMM 2020): a window from the
delay against a target.

  target = base_target + hops * per_hop + fs,
  fs     = clamp(alpha / sqrt(cwnd) + beta_fs, 0, fs_range)       (flow scaling:
           alpha = fs_range / (1/sqrt(fs_min_cwnd) - 1/sqrt(fs_max_cwnd)),
           beta_fs = -alpha / sqrt(fs_max_cwnd); small windows get more delay)
  per ACK, delay < target:  cwnd += ai * acked / cwnd   (cwnd >= 1; ai per RTT)
                            cwnd += ai * acked          (cwnd < 1)
  delay >= target, at most once per RTT:
                            cwnd *= max(1 - beta (delay - target) / delay, 1 - max_mdf)
  retransmission timeout:   retransmit_cnt += 1; if retransmit_cnt >= retx_reset_threshold:
                            cwnd = min_cwnd, else (at most once per RTT) cwnd *= 1 - max_mdf;
                            an ACK of new data sets retransmit_cnt to 0
cwnd within [min_cwnd, max_cwnd]. Below one packet Swift paces: one
packet every rtt / cwnd; at or above, the window limits and the NIC rate paces.

Scaling (paper -> here): see timely.py for the RTTs (7.2 ms unloaded on
a leaf-spine path, ~77 ms more behind a full BMv2 queue).

| constant | paper | here | why |
|---|---|---|---|
| base_target | ~tens of us | 8 ms | just above the unloaded RTT (7.2 ms) |
| per_hop | ~1-2 us per hop | 0.5 ms | a BMv2 hop's queueing at a few packets |
| hops | from the TTL | 3 (a leaf-spine path) | the agent does not read the TTL |
| fs_range | 5 x base | 4 ms | half the base target: a leaf-spine incast is small |
| fs_min_cwnd, fs_max_cwnd | 0.1, 100 | 0.1, 100 | packets |
| ai | 1 packet per RTT | 1 | |
| beta | 0.8 | 0.8 | |
| max_mdf | 0.5 | 0.5 | |
| min_cwnd, max_cwnd | 0.001, ~BDP | 0.01, 128 | packets; 128 is the transport's cap |
| retx_reset_threshold | named, no value given | 5 | timeouts in a row before the window drops to min_cwnd |
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

from hostagent.rdma.cc.base import Feedback


@dataclass(frozen=True)
class SwiftParams:
    line_rate_pps: float = 1000.0
    base_target_s: float = 0.008
    per_hop_s: float = 0.0005
    hops: int = 3
    fs_range_s: float = 0.004
    fs_min_cwnd: float = 0.1
    fs_max_cwnd: float = 100.0
    ai: float = 1.0
    beta: float = 0.8
    max_mdf: float = 0.5
    min_cwnd: float = 0.01
    max_cwnd: float = 128.0
    init_cwnd: float = 16.0
    retx_reset_threshold: int = 5
    mtu_bytes: int = 1024

    def __post_init__(self):
        problems = []
        if not self.line_rate_pps > 0:
            problems.append(f"line_rate_pps must be > 0, got {self.line_rate_pps}")
        for name in ("base_target_s", "fs_range_s", "ai"):
            if not getattr(self, name) > 0:
                problems.append(f"{name} must be > 0, got {getattr(self, name)}")
        if self.per_hop_s < 0 or self.hops < 0:
            problems.append(f"per_hop_s and hops must be >= 0, got {self.per_hop_s} and {self.hops}")
        if not 0 < self.fs_min_cwnd < self.fs_max_cwnd:
            problems.append(f"fs_min_cwnd must be > 0 and below fs_max_cwnd, got {self.fs_min_cwnd}")
        for name in ("beta", "max_mdf"):
            if not 0 < getattr(self, name) <= 1:
                problems.append(f"{name} must be within (0, 1], got {getattr(self, name)}")
        if not 0 < self.min_cwnd <= self.init_cwnd <= self.max_cwnd:
            problems.append(f"need 0 < min_cwnd <= init_cwnd <= max_cwnd, got {self.min_cwnd}, "
                            f"{self.init_cwnd}, {self.max_cwnd}")
        if self.retx_reset_threshold < 1:
            problems.append(f"retx_reset_threshold must be >= 1, got {self.retx_reset_threshold}")
        if problems:
            raise ValueError("invalid Swift parameters: " + "; ".join(problems))

    @property
    def fs_alpha(self) -> float:
        return self.fs_range_s / (1 / math.sqrt(self.fs_min_cwnd) - 1 / math.sqrt(self.fs_max_cwnd))

    @property
    def fs_beta(self) -> float:
        return -self.fs_alpha / math.sqrt(self.fs_max_cwnd)


class Swift:
    name = "swift"

    def __init__(self, params: SwiftParams = SwiftParams(), now: float = 0.0):
        self.p = params
        self.cwnd = params.init_cwnd
        self.rtt = params.base_target_s          # the latest RTT sample (pacing below one packet)
        self.last_decrease: Optional[float] = None
        self.increases = self.decreases = 0
        self.retransmit_cnt = 0                  # timeouts since the last ACK of new data

    def target(self) -> float:
        p = self.p
        fs = min(max(p.fs_alpha / math.sqrt(self.cwnd) + p.fs_beta, 0.0), p.fs_range_s)
        return p.base_target_s + p.hops * p.per_hop_s + fs

    @property
    def window_packets(self) -> float:
        return max(1.0, self.cwnd)

    @property
    def rate_pps(self) -> float:
        if self.cwnd >= 1:
            return self.p.line_rate_pps
        return min(self.p.line_rate_pps, self.cwnd / self.rtt)

    def _can_decrease(self, now: float) -> bool:
        return self.last_decrease is None or now - self.last_decrease >= self.rtt

    def on_ack(self, fb: Feedback) -> None:
        if fb.rtt_s is None:
            return
        p = self.p
        if fb.acked_packets:
            self.retransmit_cnt = 0
        delay = self.rtt = fb.rtt_s
        target = self.target()
        if delay < target:
            if fb.acked_packets:
                step = p.ai * fb.acked_packets / self.cwnd if self.cwnd >= 1 else p.ai * fb.acked_packets
                self._set(self.cwnd + step)
        elif self._can_decrease(fb.now):
            self._set(self.cwnd * max(1 - p.beta * (delay - target) / delay, 1 - p.max_mdf))
            self.last_decrease = fb.now

    def on_timeout(self, now: float) -> None:
        self.retransmit_cnt += 1
        if self.retransmit_cnt >= self.p.retx_reset_threshold:
            self._set(self.p.min_cwnd)
        elif self._can_decrease(now):
            self._set(self.cwnd * (1 - self.p.max_mdf))
            self.last_decrease = now

    def _set(self, cwnd: float) -> None:
        if cwnd > self.cwnd:
            self.increases += 1
        elif cwnd < self.cwnd:
            self.decreases += 1
        self.cwnd = min(self.p.max_cwnd, max(self.p.min_cwnd, cwnd))

    def on_send(self, now: float, nbytes: int) -> None:
        pass

    def on_cnp(self, now: float) -> None:
        pass

    def advance(self, now: float) -> None:
        pass
