"""HPCC (Li et al., "HPCC: High Precision Congestion Control", SIGCOMM
2019): a window from every hop's INT, per ACK. The reference is the
authors' ns-3 code (alibaba-edu/High-Precision-Congestion-Control,
rdma-hw.cc: UpdateRateHp, FastReactHp).

Per ACK carrying the hops (first hop first), against the previous ACK's:
  for each hop i:  tx_rate = (tx_bytes - prev tx_bytes) mod 2^32 / (ts - prev ts)
                   u_i = min(qlen, prev qlen) / (B T) + tx_rate / B     (B: the hop's link, bytes/s)
  u = max u_i, tau = that hop's ts - prev ts, tau = min(tau, T)
  U = (1 - tau/T) U + (tau/T) u
  U >= eta or inc_stage >= max_stage:  W = Wc / (U / eta) + W_AI   (multiplicative)
  otherwise:                           W = Wc + W_AI               (additive)
Wc and inc_stage (0 after a multiplicative step, +1 after an additive one)
change only once per RTT: for the first ACK beyond the sequence number that
was next when Wc last changed (ack.seq > last_update_seq); the ACKs between
"fast react" from the same Wc. W within [W_min, W_init]; rate = W / T.
W_init = the NIC's rate x T (one BDP); W_AI = W_init (1 - eta) / N.

Here queues are BMv2's, in packets (the agent turns them into bytes of
full-size frames), the tx time is in us, and the link rate comes from the
hop itself (Mbit/s).

| constant | paper / ns-3 | here | why |
|---|---|---|---|
| T (base RTT) | ~5-13 us | 8 ms | a leaf-spine path's unloaded RTT with Python agents (7.2 ms measured) |
| eta | 0.95 | 0.95 | target utilisation |
| max_stage | 5 | 5 | additive steps before a multiplicative one is forced |
| N (flows expected, for W_AI) | W_AI of ~80 bytes at 100 Gbit/s | 10 | W_AI = 0.5% of a BDP |
| W_min | one packet's worth of rate | 1 packet | |
| U at start | | 0 | nothing seen yet |
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from hostagent.rdma.cc.base import Feedback, HopInfo

TX_BYTES_MOD = 1 << 32


@dataclass(frozen=True)
class HpccParams:
    line_rate_pps: float = 1000.0
    mtu_bytes: int = 1024
    base_rtt_s: float = 0.008
    eta: float = 0.95
    max_stage: int = 5
    expected_flows: int = 10
    min_window_packets: float = 1.0

    def __post_init__(self):
        problems = []
        if not self.line_rate_pps > 0:
            problems.append(f"line_rate_pps must be > 0, got {self.line_rate_pps}")
        if not self.base_rtt_s > 0:
            problems.append(f"base_rtt_s must be > 0, got {self.base_rtt_s}")
        if not 0 < self.eta <= 1:
            problems.append(f"eta must be within (0, 1], got {self.eta}")
        if self.max_stage < 0 or self.expected_flows < 1:
            problems.append(f"max_stage must be >= 0 and expected_flows >= 1, got {self.max_stage} and "
                            f"{self.expected_flows}")
        if not self.min_window_packets > 0:
            problems.append(f"min_window_packets must be > 0, got {self.min_window_packets}")
        if problems:
            raise ValueError("invalid HPCC parameters: " + "; ".join(problems))

    @property
    def w_init_bytes(self) -> float:
        return self.line_rate_pps * self.mtu_bytes * self.base_rtt_s

    @property
    def w_ai_bytes(self) -> float:
        return self.w_init_bytes * (1 - self.eta) / self.expected_flows


class Hpcc:
    name = "hpcc"

    def __init__(self, params: HpccParams = HpccParams(), now: float = 0.0):
        self.p = params
        self.w = self.wc = params.w_init_bytes
        self.u = 0.0
        self.inc_stage = 0
        self.last_update_seq = 0
        self.prev: Optional[tuple[HopInfo, ...]] = None
        self.multiplicative = self.additive = 0

    @property
    def window_packets(self) -> float:
        return self.w / self.p.mtu_bytes

    @property
    def rate_pps(self) -> float:
        return self.w / (self.p.base_rtt_s * self.p.mtu_bytes)

    def measure(self, hops: tuple[HopInfo, ...]) -> Optional[tuple[float, float]]:
        """(u, tau) of the most utilised hop against the previous ACK's hops; None if nothing moved."""
        assert self.prev is not None
        t = self.p.base_rtt_s
        best: Optional[tuple[float, float]] = None
        for h, ph in zip(hops, self.prev):
            dt = h.ts_s - ph.ts_s
            if dt <= 0 or not h.link_bytes_per_s > 0:
                continue
            tx_rate = ((h.tx_bytes - ph.tx_bytes) % TX_BYTES_MOD) / dt
            u = min(h.qlen_bytes, ph.qlen_bytes) / (h.link_bytes_per_s * t) + tx_rate / h.link_bytes_per_s
            if best is None or u > best[0]:
                best = (u, dt)
        return best

    def on_ack(self, fb: Feedback) -> None:
        if not fb.hops:
            return
        if self.prev is None or len(self.prev) != len(fb.hops):     # the first, or the path changed
            self.prev = fb.hops
            return
        p = self.p
        measured = self.measure(fb.hops)
        self.prev = fb.hops
        if measured is None:
            return
        u, tau = measured
        tau = min(tau, p.base_rtt_s)
        self.u = (1 - tau / p.base_rtt_s) * self.u + (tau / p.base_rtt_s) * u
        update = fb.acked_seq > self.last_update_seq
        if self.u >= p.eta or self.inc_stage >= p.max_stage:
            # (U = 0: every hop idle between its two stamps; the largest window then)
            w = self.wc / (self.u / p.eta) + p.w_ai_bytes if self.u > 0 else p.w_init_bytes
            if update:
                self.inc_stage = 0
                self.multiplicative += 1
        else:
            w = self.wc + p.w_ai_bytes
            if update:
                self.inc_stage += 1
                self.additive += 1
        self.w = min(p.w_init_bytes, max(p.min_window_packets * p.mtu_bytes, w))
        if update:
            self.wc = self.w
            self.last_update_seq = fb.next_seq

    def on_send(self, now: float, nbytes: int) -> None:
        pass

    def on_cnp(self, now: float) -> None:
        pass

    def on_timeout(self, now: float) -> None:
        pass

    def advance(self, now: float) -> None:
        pass
