"""UET's reliable unordered delivery (RUD, Ultra Ethernet 1.0's packet
delivery sublayer): the sending and receiving halves of a packet delivery
context (PDC), as pure logic with time passed in, beside the RoCEv2 RC
transport's go-back-N and selective repeat (transport.py). The headers are
wire/uet.py's; docs/rdma.md ("UET") says what is UE's and what the
project chose.

Sender: a message of N bytes is cut into MTU-sized packets with
consecutive PSNs (32 bits from a start PSN; kept here as sequence numbers
from 0), each carrying the message id, its byte offset and the message's
length, so the receiver can place it whatever the order. Every packet
leaves with an entropy value (the UDP source port the switches hash), the
next in rotation among the PDC's `entropies`, skipping any value that
brought an ECN mark, a trim or a loss within its rest (REPS-like path
penalties: a sender steers away from the paths that complain). A rest is
`penalty_s`, doubled for each penalty since the entropy's last clean ACK
(up to 64 times: a dead path is tried again rarely, a hot one soon). New packets
go while fewer than the congestion control's window are unacknowledged, at
its pace. Until its first ACK the PDC is being set up: its packets carry
SYN and their offset from the start PSN, so the receiver learns the start
from whichever arrives first.

Acknowledgements: an ACK_CC carries the cumulative PSN (every packet up to
it arrived), the PSN it answers and a 64-bit SACK after the cumulative one.
A message completes when all its packets are acknowledged, in any order.
Loss: a NACK for a trimmed packet resends that packet at once (no timer); a
packet still unacknowledged when `reorder_packets` packets sent after it
are acknowledged, or a smoothed RTT and a quarter after it was sent while
a later one is acknowledged, is lost (RACK's rules: spraying reorders) and
resent at once; a tail loss probe (2 SRTT of silence) resends the newest
packet once, so its ACK's SACK shows what else was lost; the retransmission
timeout (RFC 6298 from packets sent once, at least rto_s) of the oldest
unacknowledged packet resends every packet not acknowledged, and doubles. After `retry_cnt` timeouts
without progress the PDC enters the error state: every message not
completed completes with a UetError, as every later one does at once.

Receiver: keeps, per PDC, which PSNs arrived (the cumulative PSN and the
set above it), writes each packet's payload at its offset, and delivers a
message, exactly once, when all its bytes are in, whatever the order. A
duplicate is acknowledged at once and not delivered again. ACKs are
coalesced: one per `ack_every` new packets, at once for a packet that asks
(the last of a message), a CE-marked packet (so the ACK names the packet,
and the path, that was marked), a duplicate or a packet that fills a
hole, or
`ack_delay_s` after the first packet not yet acknowledged. A trimmed
packet (the switch cut its payload) is NACKed (NACK_TRIMMED) at once. An
ACK says whether packets it covers arrived CE-marked (NSCC's ECN signal).
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Optional, cast

from hostagent.rdma.cc.base import CongestionControl, CreditBased, Feedback
from hostagent.rdma.cc.rccc import CreditScheduler
from hostagent.rdma.transport import capped_window, rto_of, rtt_sample
from wire.uet_codec import (CC_CREDIT, CC_NSCC, NACK_INVALID_DPDCID, NACK_MODE_MISMATCH, NACK_PSN_OUT_OF_WINDOW,
                            NACK_TRIMMED, PSN_MOD, SACK_BITS, SYN_OFFSET_MAX, AckCc, Credit, Nack, Request)

RETRY_EXCEEDED = "retry count exceeded"
UNKNOWN_PDC = "unknown to the receiver"
MISMATCHED_ENDS = "mismatched ends"
MAX_RETRY_CNT = 7
TRACKED_PSNS = 1 << 14
MAX_PENALTY_DOUBLINGS = 6       # a rest is at most 64 x penalty_s          # the receiver keeps PSNs up to this far beyond the cumulative one


@dataclass(frozen=True)
class UetParams:
    mtu_bytes: int = 1024               # payload bytes per packet
    max_outstanding: int = 128          # packets in flight at most (< 4096: a SYN packet's offset has 12 bits)
    ack_every: int = 4                  # receiver: an ACK every this many new packets
    ack_delay_s: float = 0.002          # ... or this long after the first one not yet acknowledged
    rto_s: float = 0.200
    rto_max_s: float = 1.0
    retry_cnt: int = 7
    reorder_packets: int = 16           # acknowledged packets sent after one still missing before it is lost
    entropies: tuple[int, ...] = tuple(range(0xC000, 0xC010))    # UDP source ports to spray over
    penalty_s: float = 0.050            # an entropy that brought a mark, trim or loss rests this long

    def __post_init__(self):
        problems = []
        if not 1 <= self.mtu_bytes <= 4096:
            problems.append(f"mtu_bytes must be within 1..4096, got {self.mtu_bytes}")
        if not 1 <= self.max_outstanding <= SYN_OFFSET_MAX:
            problems.append(f"max_outstanding must be within 1..{SYN_OFFSET_MAX}, got {self.max_outstanding}")
        if self.ack_every < 1:
            problems.append(f"ack_every must be >= 1, got {self.ack_every}")
        if not 0 <= self.retry_cnt <= MAX_RETRY_CNT:
            problems.append(f"retry_cnt must be within 0..{MAX_RETRY_CNT}, got {self.retry_cnt}")
        if self.reorder_packets < 1:
            problems.append(f"reorder_packets must be >= 1, got {self.reorder_packets}")
        if not self.entropies or any(not 0 <= e <= 0xFFFF for e in self.entropies) \
                or len(set(self.entropies)) != len(self.entropies):
            problems.append(f"entropies must be distinct UDP ports (0..65535), at least one, got {self.entropies!r}")
        for name in ("ack_delay_s", "rto_s", "rto_max_s", "penalty_s"):
            if not getattr(self, name) > 0:
                problems.append(f"{name} must be > 0, got {getattr(self, name)}")
        if self.rto_max_s < self.rto_s:
            problems.append(f"rto_max_s ({self.rto_max_s}) must be >= rto_s ({self.rto_s})")
        if problems:
            raise ValueError("invalid UET parameters: " + "; ".join(problems))


class UetError(RuntimeError):
    """A PDC in the error state, and why: what every message it had, or is
    given later, completes with."""

    def __init__(self, peer: str, pdc: int, cause: str, detail: str):
        self.peer, self.pdc, self.cause, self.detail = peer, pdc, cause, detail
        super().__init__(f"PDC {pdc} to {peer}: {cause}: {detail}")


@dataclass
class UetMessage:
    id: int
    size: int
    first_seq: int
    last_seq: int
    posted_at: float
    completed_at: Optional[float] = None
    error: Optional[UetError] = None
    _missing: int = 0


@dataclass(frozen=True)
class Outgoing:
    """A data packet to send: its PDS request and message header, its
    payload, and the entropy (UDP source port) it leaves with."""
    request: Request
    payload: bytes
    entropy: int


@dataclass
class SenderStats:
    sent: int = 0
    retransmitted: int = 0
    timeouts: int = 0
    probes: int = 0               # tail loss probes: the newest packet resent, no ACK for 2 SRTT
    trim_nacks: int = 0
    lost: int = 0                 # found lost by later packets' acknowledgements
    acks: int = 0
    stale: int = 0                # ACKs/NACKs naming nothing in flight
    penalties: int = 0            # entropies rested for a mark, trim or loss
    by_entropy: dict = field(default_factory=dict)     # entropy -> packets sent with it


class UetSender:
    """The sending half of PDC `spdcid` to `peer`, driven by a congestion
    control (hostagent/rdma/cc: NSCC for UET, or any of the others)."""

    def __init__(self, params: UetParams, cc: CongestionControl, now: float = 0.0, start_psn: int = 0,
                 spdcid: int = 1, peer: str = "the peer"):
        self.p, self.cc, self.peer = params, cc, peer
        # RCCC: new packets go against the receiver's credit
        self.credits: Optional[CreditBased] = cast(CreditBased, cc) if getattr(cc, "credit_based", False) else None
        self._unsent_bytes = 0                    # posted, never sent: RCCC's credit target
        self._unacked_bytes = 0                   # posted, not acknowledged
        self.spdcid, self.dpdcid = spdcid, 0          # the receiver's PDC id: known from its first ACK
        self.start_psn = start_psn % PSN_MOD
        self.error: Optional[UetError] = None
        self.stats = SenderStats()
        self.messages: list[UetMessage] = []
        self._packets: dict[int, tuple[UetMessage, int, bytes]] = {}     # seq -> (message, offset, payload)
        self.next_seq = 0
        self.posted_seq = 0
        self.una = 0                  # the oldest packet not acknowledged
        self._acked: set[int] = set()           # acknowledged above una
        self._sent_at: dict[int, float] = {}
        self._order: dict[int, int] = {}         # seq -> number of its latest transmission, in that order
        self._entropy_of: dict[int, int] = {}
        self._retransmitted: set[int] = set()
        self._resend: deque[int] = deque()
        self._resend_set: set[int] = set()
        self._newest_acked_order = 0             # the latest transmission number acknowledged
        self._rotation = 0
        self._rested_until: dict[int, float] = {}
        self._strikes: dict[int, int] = {}        # entropy -> penalties since its last clean ACK
        self._last_send = now
        self._probed = False                      # a tail loss probe went since the last progress
        self._next_send = now
        self._last_progress = now
        self.rto = params.rto_s
        self.retries = 0
        self.srtt: Optional[float] = None
        self.rttvar = 0.0

    # -- posting ---------------------------------------------------------------

    def post(self, size: int, now: float, data: bytes | None = None) -> UetMessage:
        if size < 1:
            raise ValueError(f"a message has at least 1 byte, got {size}")
        if data is not None and len(data) != size:
            raise ValueError(f"message of {size} bytes given {len(data)} bytes of data")
        mtu = self.p.mtu_bytes
        n = -(-size // mtu)
        msg = UetMessage(len(self.messages), size, self.posted_seq, self.posted_seq + n - 1, now, _missing=n)
        for i in range(n):
            chunk = data[i * mtu:(i + 1) * mtu] if data is not None else bytes(min(mtu, size - i * mtu))
            self._packets[self.posted_seq + i] = (msg, i * mtu, chunk)
        self.posted_seq += n
        self._unsent_bytes += size
        self._unacked_bytes += size
        self.messages.append(msg)
        if self.error is not None:
            self._complete_with_error(now)
        return msg

    @property
    def done(self) -> bool:
        return self.una == self.posted_seq

    @property
    def unacked_bytes(self) -> int:
        """Payload bytes posted and not yet acknowledged (0 in the error state)."""
        return self._unacked_bytes

    @property
    def outstanding(self) -> int:
        """Packets sent and not acknowledged."""
        return self.next_seq - self.una - len(self._acked)

    def window(self) -> int:
        return capped_window(self.cc, self.p.max_outstanding)

    # -- sending ---------------------------------------------------------------

    def next_packet(self, now: float) -> Optional[Outgoing]:
        """The packet to send now, if the pace and the window allow one."""
        if self.error is not None:
            return None
        self.cc.advance(now)
        self._check_timeout(now)
        if now < self._next_send:
            return None
        seq = None
        while self._resend:
            s = self._resend.popleft()
            self._resend_set.discard(s)
            if s >= self.una and s not in self._acked:
                seq = s
                break
        if seq is None:
            if self.next_seq >= self.posted_seq or self.outstanding >= self.window() \
                    or self.next_seq - self.una >= self.p.max_outstanding:
                return None
            size = len(self._packets[self.next_seq][2])
            if self.credits is not None:
                if not self.credits.may_send(size, self.outstanding):
                    return None
                self.credits.spend(size)
            seq = self.next_seq
            self.next_seq += 1
            self._unsent_bytes -= size
        else:
            self.stats.retransmitted += 1
            self._retransmitted.add(seq)
        msg, offset, payload = self._packets[seq]
        entropy = self._entropy(now)
        self.stats.sent += 1
        self.stats.by_entropy[entropy] = self.stats.by_entropy.get(entropy, 0) + 1
        self._sent_at[seq] = now
        self._order.pop(seq, None)                # (re)inserted last: the dict stays in transmission order
        self._order[seq] = self.stats.sent
        self._entropy_of[seq] = entropy
        self.cc.on_send(now, len(payload))
        self._next_send = max(self._next_send + 1.0 / max(self.cc.rate_pps, 1e-3), now - 0.01)
        self._last_send = now
        syn = self.dpdcid == 0
        request = Request(psn=(self.start_psn + seq) % PSN_MOD, spdcid=self.spdcid, dpdcid=self.dpdcid,
                          msg_id=msg.id, offset=offset, length=msg.size, ackreq=seq == msg.last_seq,
                          retrans=seq in self._retransmitted, syn=syn, syn_offset=seq if syn else 0,
                          clear_psn_offset=min(seq - self.una, 0xFFFF),
                          credit_target=None if self.credits is None else self._unsent_bytes)
        return Outgoing(request, payload, entropy)

    def next_send_time(self) -> float:
        return self._next_send

    def _entropy(self, now: float) -> int:
        """The next entropy in rotation that is not resting (all resting:
        the one whose rest ends first)."""
        values = self.p.entropies
        for i in range(len(values)):
            e = values[(self._rotation + i) % len(values)]
            if self._rested_until.get(e, 0.0) <= now:
                self._rotation = (self._rotation + i + 1) % len(values)
                return e
        e = min(values, key=lambda v: self._rested_until[v])
        self._rotation = (values.index(e) + 1) % len(values)
        return e

    def _penalise(self, seq: int, now: float) -> None:
        e = self._entropy_of.get(seq)
        if e is not None and len(self.p.entropies) > 1:
            strikes = self._strikes.get(e, 0)
            self._rested_until[e] = now + self.p.penalty_s * (1 << min(strikes, MAX_PENALTY_DOUBLINGS))
            self._strikes[e] = strikes + 1
            self.stats.penalties += 1

    def _check_timeout(self, now: float) -> None:
        if self.done or self.una >= self.next_seq or self.una in self._resend_set:
            return
        self._probe_tail(now)
        sent_at = self._sent_at.get(self.una, self._last_progress)
        if now - sent_at < self.rto:
            return
        self.stats.timeouts += 1
        if self.retries >= self.p.retry_cnt:
            self.fail(UetError(self.peer, self.spdcid, RETRY_EXCEEDED,
                               f"no acknowledgement for {now - self._last_progress:.1f} s, {self.retries} retries "
                               f"(retry_cnt {self.p.retry_cnt})"), now)
            return
        self.retries += 1
        self.cc.on_timeout(now)
        self._penalise(self.una, now)
        self._queue_resend(range(self.una, self.next_seq))     # what is not acknowledged
        self.rto = min(self.rto * 2, self.p.rto_max_s)
        self._last_progress = now

    def _probe_tail(self, now: float) -> None:
        """A tail loss probe (RFC 8985): nothing sent and no ACK for 2 SRTT
        (at least 10 ms) while packets are out: resend the newest one, once
        per silence, on the next entropy. Its ACK's SACK lets RACK find the
        others lost, instead of waiting for the timeout (a packet at the end
        of a burst, on a dead path, has no later packet to be found by)."""
        if self._probed or not self._order or self._resend:
            return
        pto = max(2 * (self.srtt if self.srtt is not None else self.p.rto_s / 2), 0.010)
        if now - max(self._last_send, self._last_progress) < pto or now - self._last_send >= self.rto:
            return
        newest = next(reversed(self._order))
        self._probed = True
        self.stats.probes += 1
        self._queue_resend([newest])

    def _queue_resend(self, seqs) -> None:
        for s in seqs:
            if s not in self._acked and s not in self._resend_set and s >= self.una:
                self._resend.append(s)
                self._resend_set.add(s)

    def fail(self, error: UetError, now: float) -> None:
        if self.error is not None:
            return
        self.error = error
        self._resend.clear()
        self._resend_set.clear()
        self._complete_with_error(now)

    def _complete_with_error(self, now: float) -> None:
        for msg in self.messages:
            if msg.completed_at is None:
                msg.completed_at, msg.error = now, self.error
        self._packets.clear()
        self._unacked_bytes = 0

    # -- feedback --------------------------------------------------------------

    def _seq(self, psn: int) -> int:
        """The sequence number of `psn` nearest to una."""
        d = (psn - self.start_psn - self.una) % PSN_MOD
        return self.una + d - (PSN_MOD if d >= PSN_MOD // 2 else 0)

    def on_ack(self, ack: AckCc, now: float, arrived: Optional[float] = None) -> int:
        """An ACK_CC; returns how many packets it newly acknowledged.
        `arrived`: the kernel's receive timestamp, if earlier than `now`."""
        if self.error is not None:
            return 0
        cum = self._seq(ack.cack_psn) + 1          # every packet below is acknowledged
        answered = self._seq(ack.ack_psn)
        if not self.una - 1 <= cum - 1 < self.next_seq or not 0 <= answered < self.next_seq:
            self.stats.stale += 1
            return 0
        self.stats.acks += 1
        if self.dpdcid == 0 and ack.spdcid:
            self.dpdcid = ack.spdcid                   # set up: SYN no more
        newly = [s for s in range(self.una, cum) if s not in self._acked]
        if answered >= cum and answered not in self._acked:
            newly.append(answered)
        base = self._seq(ack.sack_base)
        bitmap = ack.sack_bitmap
        while bitmap:
            low = bitmap & -bitmap
            s = base + low.bit_length() - 1
            bitmap ^= low
            if cum <= s < self.next_seq and s not in self._acked and s != answered:
                newly.append(s)
        rtt = None
        if answered in self._sent_at and answered not in self._retransmitted:
            sent_at = self._sent_at[answered]
            rtt = (arrived if arrived is not None and sent_at < arrived <= now else now) - sent_at
        if ack.ecn_marked:
            self._penalise(answered, now)
        elif answered in self._entropy_of:
            self._strikes.pop(self._entropy_of[answered], None)      # a clean answer: its path is good again
        if self.credits is not None and ack.cc_type == CC_CREDIT and ack.credit:
            self.credits.on_credit(now, ack.credit)
        for s in newly:
            self._acknowledge(s, now)
        while self.una in self._acked:
            self._acked.discard(self.una)
            self.una += 1
        if newly:
            self.retries = 0
            self._last_progress = now
            self._probed = False
            if rtt is not None:
                self._rtt_sample(rtt)
            self.rto = self._rto()
            self._detect_losses(now)
        self.cc.on_ack(Feedback(now=now, acked_packets=len(newly), acked_seq=self.una, rtt_s=rtt,
                                ecn_echo=ack.ecn_marked, next_seq=self.next_seq))
        return len(newly)

    def _acknowledge(self, s: int, now: float) -> None:
        self._acked.add(s)
        self._newest_acked_order = max(self._newest_acked_order, self._order.get(s, 0))
        entry = self._packets.pop(s, None)
        for d in (self._sent_at, self._order, self._entropy_of):
            d.pop(s, None)
        self._retransmitted.discard(s)
        if entry is not None:
            self._unacked_bytes -= len(entry[2])
            msg = entry[0]
            msg._missing -= 1
            if msg._missing == 0 and msg.completed_at is None:
                msg.completed_at = now

    def _detect_losses(self, now: float) -> None:
        """A packet still missing, sent before the newest acknowledged one,
        is lost (RACK, RFC 8985, in both its forms): when `reorder_packets`
        transmissions after it are acknowledged, or when it has been out a
        smoothed RTT and a quarter longer (a small window never has 16
        packets after it). Resend them now."""
        horizon = self._newest_acked_order - self.p.reorder_packets
        waited = (self.srtt if self.srtt is not None else self.p.rto_s) * 1.25
        lost = []
        for s, order in self._order.items():      # oldest transmission first
            if order >= self._newest_acked_order:
                break
            if s not in self._resend_set and (order <= horizon or now - self._sent_at.get(s, now) >= waited):
                lost.append(s)
        for s in lost:
            self.stats.lost += 1
            self._penalise(s, now)
        if lost:
            self._tell_loss(now)
        self._queue_resend(sorted(lost))

    def _tell_loss(self, now: float) -> None:
        """A packet known lost (trimmed, or found by RACK): the congestion
        controls that react to it have on_loss (NSCC's quick adapt)."""
        loss = getattr(self.cc, "on_loss", None)
        if loss is not None:
            loss(now)

    def on_nack(self, nack: Nack, now: float) -> None:
        """A NACK: NACK_TRIMMED resends the packet named at once; the PDC's
        receiver knowing nothing of it (INVALID_DPDCID) sets it up again."""
        if self.error is not None:
            return
        s = self._seq(nack.psn)
        if not self.una <= s < self.next_seq or s in self._acked:
            self.stats.stale += 1
            return
        if nack.code == NACK_TRIMMED:
            self.stats.trim_nacks += 1
            self._penalise(s, now)
            self._tell_loss(now)
            self._queue_resend([s])
        elif nack.code == NACK_MODE_MISMATCH:
            self.fail(UetError(self.peer, self.spdcid, MISMATCHED_ENDS,
                               f"this end runs {self.cc.name}, which needs credit; {self.peer} grants none"), now)
        elif nack.code == NACK_INVALID_DPDCID:
            self.fail(UetError(self.peer, self.spdcid, UNKNOWN_PDC,
                               f"{self.peer} has no PDC {self.spdcid} (restarted?)"), now)

    def on_credit(self, credit: Credit, now: float) -> None:
        """A CREDIT packet: RCCC's credit without an ACK to carry it."""
        if self.error is None and self.credits is not None:
            self.credits.on_credit(now, credit.credit)

    def _rtt_sample(self, rtt: float) -> None:
        self.srtt, self.rttvar = rtt_sample(self.srtt, self.rttvar, rtt)

    def _rto(self) -> float:
        return rto_of(self.srtt, self.rttvar, self.p.rto_s, self.p.rto_max_s)


# ---- receiver ------------------------------------------------------------------

@dataclass
class ReceiverStats:
    received: int = 0
    duplicates: int = 0
    out_of_order: int = 0
    delivered_messages: int = 0
    acks: int = 0
    nacks: int = 0
    trimmed: int = 0
    malformed: int = 0            # a message header that contradicts itself or an earlier packet
    unknown_pdc: int = 0          # no SYN, and no PDC of that id
    refused: int = 0              # RCCC's packets to a receiver that grants no credit
    credits: int = 0              # CREDIT packets sent


@dataclass
class DeliveredMessage:
    msg_id: int
    data: bytes
    at: float


@dataclass
class _Assembly:
    length: int
    data: bytearray
    missing: int


@dataclass
class _Pdc:
    """A receiver's state for one sender's PDC."""
    peer: str                     # the sender's address
    dpdcid: int                   # the sender's id
    spdcid: int                   # ours
    start_psn: int
    cum: int = 0                  # every sequence number below has arrived
    above: set = field(default_factory=set)
    assemblies: dict = field(default_factory=dict)     # msg_id -> _Assembly
    done_messages: set = field(default_factory=set)
    pending: int = 0              # new packets not yet acknowledged
    pending_since: Optional[float] = None
    pending_bytes: int = 0
    ce_pending: bool = False
    last_seq: int = 0
    credit_based: bool = False    # its sender runs RCCC: its ACKs carry credit
    credit_pending: int = 0       # bytes granted, not yet sent


class UetReceiver:
    """The receiving half of every PDC that reaches a host, by the sender's
    address and PDC id. `credit`: RCCC's scheduler of the host's link; None:
    this end grants no credit and refuses RCCC's packets."""

    def __init__(self, params: UetParams, first_spdcid: int = 1, credit: Optional[CreditScheduler] = None):
        self.p, self.credit = params, credit
        self.stats = ReceiverStats()
        self.pdcs: dict[tuple[str, int], _Pdc] = {}
        self._next_id = first_spdcid

    def on_request(self, r: Request, payload: bytes, now: float, ce: bool = False,
                   peer: str = "the peer") -> tuple[list[AckCc | Nack], list[DeliveredMessage]]:
        """A data packet from `peer`: (ACKs/NACKs to send it now, messages completed)."""
        self.stats.received += 1
        pdc = self._pdc(r, peer)
        if pdc is None:
            self.stats.unknown_pdc += 1
            return [Nack(NACK_INVALID_DPDCID, r.psn, spdcid=0, dpdcid=r.spdcid)], []
        if r.credit_target is not None and self.credit is None:
            self.stats.refused += 1
            return [Nack(NACK_MODE_MISMATCH, r.psn, spdcid=pdc.spdcid, dpdcid=pdc.dpdcid)], []
        seq = self._seq(pdc, r.psn)
        if seq - pdc.cum >= TRACKED_PSNS:
            self.stats.nacks += 1
            return [Nack(NACK_PSN_OUT_OF_WINDOW, r.psn, spdcid=pdc.spdcid, dpdcid=pdc.dpdcid)], []
        if seq < pdc.cum or seq in pdc.above:
            self.stats.duplicates += 1
            return [self._ack(pdc, seq)], []
        problem = self._check(pdc, r, payload)
        if problem:
            self.stats.malformed += 1
            return [], []
        if seq > pdc.cum:
            self.stats.out_of_order += 1
        if r.credit_target is not None and self.credit is not None:
            pdc.credit_based = True
            self.credit.on_data((peer, pdc.dpdcid), r.credit_target, len(payload))
        delivered = self._place(pdc, r, payload, now)
        pdc.above.add(seq)
        filled = seq == pdc.cum and len(pdc.above) > 1
        while pdc.cum in pdc.above:
            pdc.above.discard(pdc.cum)
            pdc.cum += 1
        pdc.pending += 1
        pdc.pending_bytes += len(payload)
        pdc.ce_pending |= ce
        pdc.last_seq = seq
        if pdc.pending_since is None:
            pdc.pending_since = now
        if r.ackreq or ce or pdc.pending >= self.p.ack_every or filled:
            return [self._ack(pdc, seq)], delivered
        return [], delivered

    def on_trimmed(self, r: Request, now: float, peer: str = "the peer") -> list[AckCc | Nack]:
        """A data packet whose payload a switch cut (its PDS header is all
        that counts): NACK it, so the sender resends it now."""
        self.stats.received += 1
        self.stats.trimmed += 1
        pdc = self._pdc(r, peer)
        if pdc is None:
            self.stats.unknown_pdc += 1
            return [Nack(NACK_INVALID_DPDCID, r.psn, spdcid=0, dpdcid=r.spdcid)]
        seq = self._seq(pdc, r.psn)
        if seq < pdc.cum or seq in pdc.above:
            return [self._ack(pdc, seq)]          # a copy arrived whole already
        self.stats.nacks += 1
        return [Nack(NACK_TRIMMED, r.psn, spdcid=pdc.spdcid, dpdcid=pdc.dpdcid)]

    def poll(self, now: float) -> list[tuple[str, AckCc | Credit]]:
        """(peer, reply): ACKs due by their delay, then RCCC's credit granted
        now, in a CREDIT packet."""
        out: list[tuple[str, AckCc | Credit]] = []
        for pdc in self.pdcs.values():
            if pdc.pending and pdc.pending_since is not None and now - pdc.pending_since >= self.p.ack_delay_s:
                out.append((pdc.peer, self._ack(pdc, pdc.last_seq)))
        if self.credit is not None:
            for key, nbytes in self.credit.grant(now).items():
                owner = self.pdcs.get(key)
                if owner is not None:
                    owner.credit_pending += nbytes
            for pdc in self.pdcs.values():
                if pdc.credit_pending:
                    out.append((pdc.peer, Credit(pdc.credit_pending, spdcid=pdc.spdcid, dpdcid=pdc.dpdcid)))
                    pdc.credit_pending = 0
                    self.stats.credits += 1
        return out

    def next_timer(self) -> Optional[float]:
        times = [pdc.pending_since + self.p.ack_delay_s for pdc in self.pdcs.values()
                 if pdc.pending and pdc.pending_since is not None]
        return min(times, default=None)

    def _pdc(self, r: Request, peer: str) -> Optional[_Pdc]:
        pdc = self.pdcs.get((peer, r.spdcid))
        if pdc is None and r.syn:
            pdc = _Pdc(peer=peer, dpdcid=r.spdcid, spdcid=self._next_id, start_psn=(r.psn - r.syn_offset) % PSN_MOD)
            self._next_id = self._next_id % 0xFFFF + 1
            self.pdcs[(peer, r.spdcid)] = pdc
        return pdc

    @staticmethod
    def _seq(pdc: _Pdc, psn: int) -> int:
        d = (psn - pdc.start_psn - pdc.cum) % PSN_MOD
        return pdc.cum + d - (PSN_MOD if d >= PSN_MOD // 2 else 0)

    def _check(self, pdc: _Pdc, r: Request, payload: bytes) -> Optional[str]:
        if r.msg_id in pdc.done_messages:
            return None
        if r.length < 1 or r.offset + len(payload) > r.length or not payload:
            return f"message {r.msg_id}: {len(payload)} bytes at offset {r.offset} of a {r.length}-byte message"
        a = pdc.assemblies.get(r.msg_id)
        if a is not None and a.length != r.length:
            return f"message {r.msg_id}: length {r.length}, earlier packets said {a.length}"
        return None

    def _place(self, pdc: _Pdc, r: Request, payload: bytes, now: float) -> list[DeliveredMessage]:
        if r.msg_id in pdc.done_messages:
            return []                                   # (a new PSN of a message already whole: a resend)
        a = pdc.assemblies.get(r.msg_id)
        if a is None:
            a = pdc.assemblies[r.msg_id] = _Assembly(r.length, bytearray(r.length), r.length)
        a.data[r.offset:r.offset + len(payload)] = payload
        a.missing -= len(payload)
        if a.missing > 0:
            return []
        del pdc.assemblies[r.msg_id]
        pdc.done_messages.add(r.msg_id)
        self.stats.delivered_messages += 1
        return [DeliveredMessage(r.msg_id, bytes(a.data), now)]

    def _ack(self, pdc: _Pdc, seq: int) -> AckCc:
        bitmap = 0
        for s in pdc.above:
            if pdc.cum + 1 <= s <= pdc.cum + SACK_BITS:
                bitmap |= 1 << (s - pdc.cum - 1)
        answered = seq if pdc.cum - 1 <= seq < pdc.cum + 0xFFFF else pdc.cum - 1
        ack = AckCc(cack_psn=(pdc.start_psn + pdc.cum - 1) % PSN_MOD,
                    ack_psn=(pdc.start_psn + answered) % PSN_MOD, spdcid=pdc.spdcid, dpdcid=pdc.dpdcid,
                    ecn_marked=pdc.ce_pending, sack_base=(pdc.start_psn + pdc.cum + 1) % PSN_MOD,
                    sack_bitmap=bitmap, cc_type=CC_CREDIT if pdc.credit_based else CC_NSCC,
                    rcvd_bytes=pdc.pending_bytes & 0xFFFFFF, credit=pdc.credit_pending,
                    ooo_count=min(len(pdc.above), 0xFFFF))
        pdc.pending, pdc.pending_since, pdc.pending_bytes, pdc.ce_pending = 0, None, 0, False
        pdc.credit_pending = 0
        self.stats.acks += 1
        return ack


class AckSpray:
    """Which entropy (UDP source port) a receiver's ACKs to one peer leave
    with. The reverse path is the switches' hash of the ACK's own flow key,
    not the data's, so an ACK sent on the entropy of the packet it answers
    may take a dead or hot path the data avoided. The receiver rotates its
    ACKs over the last `keep` entropy values the peer used, and a duplicate
    data packet (the peer resent it: its ACK was lost, or the data was)
    rests the entropy of the ACK sent before it, as the sender rests its
    own: `rest_s`, doubled for each rest since that entropy's last ACK
    followed by new data, up to 64 times."""

    def __init__(self, keep: int = 16, rest_s: float = 0.050):
        self.seen: deque[int] = deque(maxlen=keep)
        self.rest_s = rest_s
        self._rested_until: dict[int, float] = {}
        self._strikes: dict[int, int] = {}
        self._turn = 0
        self.last: Optional[int] = None

    def on_data(self, entropy: int, duplicate: bool, now: float) -> None:
        if entropy not in self.seen:
            self.seen.append(entropy)
        if duplicate and self.last is not None:
            strikes = self._strikes.get(self.last, 0)
            self._rested_until[self.last] = now + self.rest_s * (1 << min(strikes, MAX_PENALTY_DOUBLINGS))
            self._strikes[self.last] = strikes + 1
        elif not duplicate and self.last is not None:
            self._strikes.pop(self.last, None)        # new data after that ACK: it (probably) arrived

    def pick(self, now: float, default: int) -> int:
        """The entropy of the next ACK: the next one seen and not resting
        (all resting, or none seen: `default`, the data packet's)."""
        n = len(self.seen)
        for i in range(n):
            e = self.seen[(self._turn + i) % n]
            if self._rested_until.get(e, 0.0) <= now:
                self._turn = (self._turn + i + 1) % n
                self.last = e
                return e
        self.last = default
        return default

