"""RCCC, UET's receiver credit congestion control (Ultra Ethernet 1.0;
Hoefler et al., arXiv 2508.08906): the receiver, which sees every sender
of an incast at its own link, hands out its link's capacity as credit
(bytes), and a sender sends new data only against credit it holds. Two
halves:

  Rccc             the sender's: credit held, spent by each new packet
                   (retransmissions need none); it starts with
                   `initial_credit_packets` (a BDP: what a sender may send
                   before the receiver has heard of it), gets more from
                   the receiver's ACKs and CREDIT packets, and each of its
                   packets tells the receiver how many bytes it has left to
                   send (RUD_CC_REQ's credit target). A sender with nothing
                   in flight may send one packet without credit: it asks
                   for credit (UE's CREDIT_REQ, carried by data).
  CreditScheduler  the receiver's: credit accrues at its link's rate (at
                   most `burst_s` of it banked) and goes round-robin, a
                   packet's worth at a time, to the senders that still
                   need some (their credit target minus the credit they
                   hold and have not used), with at most a BDP of its link
                   granted and not yet used in all: N senders share the
                   link, none can queue more than a BDP at its last hop.
                   Credit whose data never came (the packets it paid for
                   were lost: a dead path) is written off after
                   `credit_ttl_rtts` base RTTs without data from that PDC,
                   or the sender would wait for a timeout with nothing to
                   spend.

Scaling: base_rtt as NSCC's (7.2 ms on a leaf-spine path here); the
receiver's rate is its link's packets/s (the agent's --credit-pps).
`fabric tune` derives the sender's base_rtt_s for a topology (docs/tuning.md).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Hashable, Optional

from hostagent.rdma.cc.base import Feedback


@dataclass(frozen=True)
class RcccParams:
    line_rate_pps: float = 1000.0
    base_rtt_s: float = 0.0072
    initial_credit_packets: Optional[float] = None     # None: a BDP (line rate x base RTT)
    mtu_bytes: int = 1024

    def __post_init__(self):
        problems = []
        for name in ("line_rate_pps", "base_rtt_s"):
            if not getattr(self, name) > 0:
                problems.append(f"{name} must be > 0, got {getattr(self, name)}")
        if self.initial_credit_packets is not None and self.initial_credit_packets < 0:
            problems.append(f"initial_credit_packets must be >= 0, got {self.initial_credit_packets}")
        if not 1 <= self.mtu_bytes <= 4096:
            problems.append(f"mtu_bytes must be within 1..4096, got {self.mtu_bytes}")
        if problems:
            raise ValueError("invalid RCCC parameters: " + "; ".join(problems))


class Rccc:
    """The sender's half: a gate on new packets, no window of its own."""
    name = "rccc"
    credit_based = True

    def __init__(self, params: RcccParams = RcccParams(), now: float = 0.0):
        self.p = params
        initial = params.initial_credit_packets
        self.credit_bytes = (params.line_rate_pps * params.base_rtt_s if initial is None else initial) \
            * params.mtu_bytes
        self.granted_bytes = 0

    @property
    def window_packets(self) -> Optional[float]:
        return None

    @property
    def rate_pps(self) -> float:
        return self.p.line_rate_pps

    def may_send(self, nbytes: int, in_flight: int) -> bool:
        """A new packet of `nbytes` may go: credit for it, or nothing in flight
        (a packet that asks for credit)."""
        return self.credit_bytes >= nbytes or in_flight == 0

    def on_send(self, now: float, nbytes: int) -> None:
        pass                          # the transport spends credit for new packets only (spend)

    def spend(self, nbytes: int) -> None:
        self.credit_bytes = max(0, self.credit_bytes - nbytes)

    def on_credit(self, now: float, nbytes: int) -> None:
        self.credit_bytes += nbytes
        self.granted_bytes += nbytes

    def on_ack(self, fb: Feedback) -> None:
        pass

    def on_cnp(self, now: float) -> None:
        pass

    def on_timeout(self, now: float) -> None:
        pass

    def advance(self, now: float) -> None:
        pass


@dataclass
class CreditScheduler:
    """The receiver's half, for every credit-based PDC that reaches it."""
    rate_pps: float                   # the receiver's link
    mtu_bytes: int = 1024
    base_rtt_s: float = 0.0072
    burst_s: float = 0.002            # credit banked while no one needed it, at most this long's worth
    now: float = 0.0
    tokens: float = 0.0
    want: dict = field(default_factory=dict)            # PDC -> bytes it has left to send (its latest target)
    unused: dict = field(default_factory=dict)          # PDC -> bytes granted, not yet arrived as data
    credit_ttl_rtts: float = 4.0      # credit unused this many base RTTs after its PDC's last data: lost
    last_data: dict = field(default_factory=dict)       # PDC -> when its last data packet arrived
    granted_bytes: int = 0
    _turn: int = 0

    def __post_init__(self):
        if not self.rate_pps > 0:
            raise ValueError(f"the receiver's credit rate must be > 0 packets/s, got {self.rate_pps}")

    @property
    def bdp_bytes(self) -> float:
        return self.rate_pps * self.base_rtt_s * self.mtu_bytes

    def on_data(self, pdc: Hashable, credit_target: int, nbytes: int) -> None:
        """A data packet of a credit-based PDC: `nbytes` of its credit used,
        `credit_target` bytes still to come."""
        self.want[pdc] = credit_target
        self.unused[pdc] = max(0, self.unused.get(pdc, 0) - nbytes)
        self.last_data[pdc] = self.now

    def forget(self, pdc: Hashable) -> None:
        self.want.pop(pdc, None)
        self.unused.pop(pdc, None)
        self.last_data.pop(pdc, None)

    def grant(self, now: float) -> dict:
        """Credit to hand out now: {PDC: bytes}."""
        self.tokens = min(self.tokens + (now - self.now) * self.rate_pps * self.mtu_bytes,
                          max(self.mtu_bytes, self.burst_s * self.rate_pps * self.mtu_bytes))
        self.now = now
        for p, when in self.last_data.items():    # granted, and nothing came for a while: that credit was lost
            if self.unused.get(p) and now - when >= self.credit_ttl_rtts * self.base_rtt_s:
                self.unused[p] = 0
        out: dict = {}
        needy = [p for p in self.want if self.want[p] - self.unused.get(p, 0) > 0]
        while needy and self.tokens >= self.mtu_bytes and sum(self.unused.values()) < self.bdp_bytes:
            p = needy[self._turn % len(needy)]
            give = min(self.mtu_bytes, self.want[p] - self.unused.get(p, 0))
            self.tokens -= give
            self.unused[p] = self.unused.get(p, 0) + give
            self.granted_bytes += give
            out[p] = out.get(p, 0) + give
            self._turn += 1
            needy = [q for q in needy if self.want[q] - self.unused.get(q, 0) > 0]
        return out
