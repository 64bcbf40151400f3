"""The interface every congestion control of the RDMA transport implements.

The transport (hostagent/rdma/transport.py) paces a queue pair's packets at
`rate_pps` and keeps at most `window_packets` unacknowledged packets in
flight (None: no window). It calls the algorithm with what it learns, time
passed in (seconds, the sender's monotonic clock), so every algorithm is
pure logic a unit test can drive with known inputs:

    on_send(now, nbytes)      a data packet left (first transmission or not)
    on_ack(feedback)          an ACK arrived (Feedback below)
    on_cnp(now)               a CNP arrived (DCQCN's signal; others ignore it)
    on_timeout(now)           the retransmission timer fired
    advance(now)              timers up to now (called before each send)

Units: packets of the queue pair's MTU (`mtu_bytes`), packets/s, seconds.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Protocol


@dataclass(frozen=True)
class HopInfo:
    """One switch's INT data for HPCC, as the receiver echoes it in an ACK:
    the egress port's timestamp, bytes it has sent (cumulative, wrapping at
    2**32), its queue in bytes when the packet left, and its link rate."""
    ts_s: float
    tx_bytes: int
    qlen_bytes: int
    link_bytes_per_s: float


@dataclass(frozen=True)
class Feedback:
    """What one ACK tells the sender."""
    now: float                      # when it arrived (s)
    acked_packets: int              # packets newly acknowledged (0: a duplicate)
    acked_seq: int                  # cumulative: packets acknowledged so far (unwrapped PSN + 1)
    rtt_s: Optional[float] = None   # from the timestamp the ACK echoes; None: no sample
    ecn_echo: bool = False          # the acknowledged packet arrived CE-marked
    hops: tuple[HopInfo, ...] = ()  # HPCC: the INT stack the receiver echoed, first hop first
    next_seq: int = 0               # the sender's next new sequence number when the ACK arrived (HPCC)


class CongestionControl(Protocol):
    name: str

    @property
    def rate_pps(self) -> float: ...           # pacing rate, packets/s

    @property
    def window_packets(self) -> Optional[float]: ...   # packets in flight at most; None: no window

    def on_send(self, now: float, nbytes: int) -> None: ...

    def on_ack(self, fb: Feedback) -> None: ...

    def on_cnp(self, now: float) -> None: ...

    def on_timeout(self, now: float) -> None: ...

    def advance(self, now: float) -> None: ...


class CreditBased(Protocol):
    """A congestion control the receiver drives with credit (RCCC, rccc.py):
    the transport asks it before each new packet, and hands it the credit
    the receiver's ACKs and CREDIT packets carry."""
    credit_bytes: float

    def may_send(self, nbytes: int, in_flight: int) -> bool: ...

    def spend(self, nbytes: int) -> None: ...

    def on_credit(self, now: float, nbytes: int) -> None: ...

