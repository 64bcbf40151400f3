"""A RoCEv2 reliable connection (RC): the requester and responder halves of
a queue pair, as pure logic with time passed in. The agent's loops
(hostagent/rdma/agent.py) move their packets over raw sockets; unit tests
move them over a channel that loses, duplicates and reorders.

Requester (sender): a message (SEND or RDMA WRITE of N bytes) is cut into
MTU-sized packets with FIRST/MIDDLE/LAST (or ONLY) opcodes and consecutive
PSNs (24 bits, wrapping; kept here as an unwrapped sequence number). It
sends new packets while fewer than `window` are unacknowledged (the
congestion control's window, capped by `max_outstanding`, IRN's BDP cap)
at the congestion control's rate. ACKs are cumulative (BTH PSN = the last
PSN received in order, AETH MSN = messages completed). The packet an ACK
names gives the congestion control an RTT sample from its latest
transmission to the ACK's arrival (the kernel's receive timestamp when the
agent has one, as a NIC timestamps a completion); the timeout's estimator
takes only packets sent once (Karn), where the sample is unambiguous.

  go-back-N (RoCE):   a NAK (PSN sequence error) names the PSN the responder
                      expects; the requester resends everything from there.
  selective repeat    (IRN): the responder keeps out-of-order packets and its
                      NAKs carry a SACK bitmap; the requester resends only
                      the holes below the highest PSN SACKed, each once per
                      recovery; a resent hole still missing when a packet
                      sent after it was SACKed was lost again (the path is
                      in order, so a later packet cannot overtake it: RACK's
                      rule, RFC 8985, in send order), and is resent at once
                      rather than after a timeout.

Retransmission timeout (RFC 6298's srtt + 4 rttvar, at least rto_s): the
oldest unacknowledged packet sent that long ago (and not already waiting to
be resent) resends from there (go-back-N: all; selective repeat: what is
not SACKed), and doubles the timeout up to rto_max until an ACK makes
progress. Retry limit (verbs' retry_cnt): after `retry_cnt` such retries
without progress, the next timeout puts the queue pair in the error state
(verbs: IBV_WC_RETRY_EXC_ERR): every message not yet completed completes
with a QpError naming the peer and the cause, and so does every message
posted later; nothing more is sent. Time the host's link was paused (PFC,
told by `paused()`: the requester's packets held, its ACKs perhaps held in
a paused switch too) does not count toward the timeout: a pause, however
long and however often refreshed, costs no retry.

Terms: each data packet states the requester's retransmission mode and
congestion control (wire/rdma.py: Terms, in the BTH). A responder that runs
another mode, or expects another congestion control, enters the error state
naming both, and refuses that packet and every later one with a NAK
invalid request stating its own terms; the requester, refused, enters the
error state naming both too.

Responder (receiver): accepts the expected PSN, and delivers each message
whole, in order, exactly once. It coalesces ACKs: one per `ack_every`
packets, for a packet that asks (ackreq: the last of a message), for a
duplicate (its ACK may have been lost), when a hole is filled, or
`ack_delay` after the first packet not yet acknowledged. Out of order,
go-back-N drops the packet and sends one NAK per gap; selective repeat
keeps it (within SACK_BITS of the expected PSN) and answers every one with
a NAK carrying the SACK. The
responder also answers CE marks with CNPs (DCQCN's notification point) and
echoes a packet's INT hops in its ACK (HPCC).

Time constants are scaled to BMv2 (docs/rdma.md): a 10 Mbit/s bottleneck
serves ~800 packets/s, and the unloaded RTT across a leaf-spine is a few ms.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Optional

from hostagent.rdma.cc.base import CongestionControl, Feedback, HopInfo
from wire.rdma_codec import (DATA_OPCODES, FIRST_OPCODES, GO_BACK_N, LAST_OPCODES, MODES, MSN_MOD, PSN_MOD, SACK_BITS,
                             SELECTIVE_REPEAT, SEND_FIRST, SEND_LAST, SEND_MIDDLE, SEND_ONLY, SYNDROME_ACK,
                             SYNDROME_NAK_INVALID_REQUEST, SYNDROME_NAK_PSN_SEQUENCE_ERROR, SYNDROME_NAK_TRIMMED,
                             WRITE_FIRST, WRITE_LAST,
                             WRITE_MIDDLE, WRITE_ONLY, HopRecord, Terms, terms_bits)

# GO_BACK_N, SELECTIVE_REPEAT, MODES: the retransmission modes, named where the wire codes them

SEND, WRITE = "send", "write"
MAX_RETRY_CNT = 7                       # verbs: a 3-bit field
# Why a queue pair entered the error state (QpError.cause)
RETRY_EXCEEDED = "retry count exceeded"           # verbs: IBV_WC_RETRY_EXC_ERR
MISMATCHED_ENDS = "mismatched ends"               # the two ends' terms differ
REFUSED = "refused by the peer"                   # a NAK invalid request stating no terms
OPCODES = {SEND: (SEND_FIRST, SEND_MIDDLE, SEND_LAST, SEND_ONLY),
           WRITE: (WRITE_FIRST, WRITE_MIDDLE, WRITE_LAST, WRITE_ONLY)}


@dataclass(frozen=True)
class TransportParams:
    mode: str = GO_BACK_N
    mtu_bytes: int = 1024               # payload bytes per packet
    max_outstanding: int = 128          # packets in flight at most (IRN's BDP cap; PSN space allows 2^23)
    ack_every: int = 4                  # responder: an ACK every this many packets in order
    ack_delay_s: float = 0.002          # ... or this long after the first one not yet acknowledged
    rto_s: float = 0.200                # the least retransmission timeout (above a full queue and a pause)
    rto_max_s: float = 1.0
    retry_cnt: int = 7                  # retries after timeouts without progress, then the error state (verbs)
    cnp_interval_s: float = 0.020       # responder: at most one CNP per interval (DCQCN's N, scaled)

    def __post_init__(self):
        problems = []
        if self.mode not in MODES:
            problems.append(f"mode must be one of {', '.join(MODES)}, got {self.mode!r}")
        if not 1 <= self.mtu_bytes <= 4096:
            problems.append(f"mtu_bytes must be within 1..4096, got {self.mtu_bytes}")
        if not 1 <= self.max_outstanding <= PSN_MOD // 2:
            problems.append(f"max_outstanding must be within 1..{PSN_MOD // 2}, got {self.max_outstanding}")
        if self.ack_every < 1:
            problems.append(f"ack_every must be >= 1, got {self.ack_every}")
        if not 0 <= self.retry_cnt <= MAX_RETRY_CNT:
            problems.append(f"retry_cnt must be within 0..{MAX_RETRY_CNT} (as verbs'), got {self.retry_cnt}")
        for name in ("ack_delay_s", "rto_s", "rto_max_s", "cnp_interval_s"):
            if not getattr(self, name) > 0:
                problems.append(f"{name} must be > 0, got {getattr(self, name)}")
        if self.rto_max_s < self.rto_s:
            problems.append(f"rto_max_s ({self.rto_max_s}) must be >= rto_s ({self.rto_s})")
        if problems:
            raise ValueError("invalid transport parameters: " + "; ".join(problems))


def capped_window(cc: CongestionControl, cap: int) -> int:
    """Packets in flight at most: the congestion control's window (at least
    1), within `cap`; `cap` when it has none."""
    w = cc.window_packets
    return cap if w is None else max(1, min(cap, int(w)))


def rtt_sample(srtt: Optional[float], rttvar: float, rtt: float) -> tuple[float, float]:
    """RFC 6298's smoothed RTT and its variation after one sample."""
    if srtt is None:
        return rtt, rtt / 2
    return 0.875 * srtt + 0.125 * rtt, 0.75 * rttvar + 0.25 * abs(srtt - rtt)


def rto_of(srtt: Optional[float], rttvar: float, lo: float, hi: float) -> float:
    """srtt + 4 rttvar, at least `lo` (RFC 6298, with this minimum), at most `hi`."""
    return lo if srtt is None else min(hi, max(lo, srtt + 4 * rttvar))


class QpError(RuntimeError):
    """A queue pair in the error state (verbs: IBV_QPS_ERR) and why: the
    status every message it had, or is given later, completes with."""

    def __init__(self, peer: str, qp: int, outgoing: bool, cause: str, detail: str):
        self.peer, self.qp, self.outgoing, self.cause, self.detail = peer, qp, outgoing, cause, detail
        super().__init__(f"queue pair {qp} {'to' if outgoing else 'from'} {peer}: {cause}: {detail}")


def psn_of(seq: int) -> int:
    return seq % PSN_MOD


def unwrap(psn: int, near: int) -> int:
    """The sequence number with PSN `psn` closest to sequence number `near`."""
    d = (psn - near) % PSN_MOD
    return near + d - (PSN_MOD if d >= PSN_MOD // 2 else 0)


@dataclass(frozen=True)
class DataPacket:
    """A data packet as the requester sends it (the agent adds the headers):
    its sequence number in the QP (from 0) and its PSN on the wire."""
    seq: int
    psn: int
    opcode: int
    payload: bytes
    ackreq: bool
    retransmission: bool = False


@dataclass(frozen=True)
class Ack:
    """An ACK or NAK as the responder sends it: BTH psn, AETH syndrome and
    MSN, the extension's SACK (base PSN, bitmap) and echoed INT hops; a
    refusal states the responder's terms."""
    psn: int
    syndrome: int
    msn: int
    sack: Optional[tuple[int, int]] = None
    hops: tuple[HopRecord, ...] = ()
    terms: Optional[Terms] = None

    @property
    def is_nak(self) -> bool:
        return self.syndrome == SYNDROME_NAK_PSN_SEQUENCE_ERROR

    @property
    def is_refusal(self) -> bool:
        return self.syndrome == SYNDROME_NAK_INVALID_REQUEST

    @property
    def is_trim_nak(self) -> bool:
        return self.syndrome == SYNDROME_NAK_TRIMMED


@dataclass
class Message:
    id: int
    kind: str
    size: int
    first_seq: int
    last_seq: int
    posted_at: float
    completed_at: Optional[float] = None      # acknowledged, or failed: then `error` says why
    error: Optional[QpError] = None


@dataclass
class RequesterStats:
    sent: int = 0
    retransmitted: int = 0
    timeouts: int = 0
    lost_again: int = 0           # selective repeat: retransmissions found lost by a later packet's SACK
    acks: int = 0
    naks: int = 0
    trim_naks: int = 0            # selective repeat: NAKs for a packet that reached the receiver trimmed
    stale_acks: int = 0           # ACKs for PSNs outside the window (old, or nonsense)


class Requester:
    """The sending half of a queue pair to `peer` (an address, for errors),
    driven by a congestion control."""

    def __init__(self, params: TransportParams, cc: CongestionControl, now: float = 0.0, initial_psn: int = 0,
                 peer: str = "the peer", qp: int = 0):
        self.p = params
        self.cc = cc
        self.peer, self.qp = peer, qp
        self.terms = Terms(params.mode, cc.name)      # stated on every data packet
        terms_bits(self.terms)                        # a congestion control the wire cannot name: refused here
        self.initial_psn = initial_psn % PSN_MOD      # agreed with the responder when the QP is set up
        self.error: Optional[QpError] = None
        self.stats = RequesterStats()
        self.messages: list[Message] = []
        self._payload: dict[int, tuple[int, bytes, bool]] = {}   # seq -> (opcode, payload, ackreq)
        self.next_seq = 0             # next new packet
        self.una = 0                  # oldest not acknowledged
        self.posted_seq = 0           # packets posted so far
        self._unacked_bytes = 0       # payload bytes posted and not yet acknowledged (queued or in flight)
        self._resend: deque[int] = deque()
        self._resend_set: set[int] = set()
        self._sacked: set[int] = set()
        self._recovered: set[int] = set()     # selective repeat: holes resent in this recovery
        self._sent_at: dict[int, float] = {}
        self._send_order: dict[int, int] = {}       # seq -> the number of its latest transmission
        self._retransmitted: set[int] = set()
        self._next_send = now
        self._last_progress = now
        self.paused_s = 0.0           # seconds the link was paused (PFC): not counted toward the timeout
        self._paused_at_send: dict[int, float] = {}     # seq -> paused_s when it was last sent
        self._paused_at_progress = 0.0                  # paused_s at the last progress
        self.rto = params.rto_s
        self.retries = 0              # retries after timeouts since the last progress
        self._stalled_since = now     # the oldest unacknowledged packet's send time at the first of them
        self.srtt: Optional[float] = None
        self.rttvar = 0.0
        self.min_rtt: Optional[float] = None
        self._msg_by_last: dict[int, Message] = {}

    # -- posting ---------------------------------------------------------------

    def post(self, size: int, now: float, kind: str = SEND, data: bytes | None = None) -> Message:
        """Queue a message of `size` bytes (its bytes `data`, or zeros). In
        the error state it completes at once with the error."""
        if kind not in OPCODES:
            raise ValueError(f"message kind must be {SEND!r} or {WRITE!r}, got {kind!r}")
        if size < 1:
            raise ValueError(f"a message has at least 1 byte, got {size}")
        if data is not None and len(data) != size:
            raise ValueError(f"message of {size} bytes given {len(data)} bytes of data")
        first, middle, last, only = OPCODES[kind]
        n = -(-size // self.p.mtu_bytes)
        start = self.posted_seq
        for i in range(n):
            chunk = (data[i * self.p.mtu_bytes:(i + 1) * self.p.mtu_bytes] if data is not None
                     else bytes(min(self.p.mtu_bytes, size - i * self.p.mtu_bytes)))
            op = only if n == 1 else first if i == 0 else last if i == n - 1 else middle
            self._payload[start + i] = (op, chunk, i == n - 1)
        self.posted_seq += n
        self._unacked_bytes += size
        msg = Message(len(self.messages), kind, size, start, start + n - 1, now)
        self.messages.append(msg)
        self._msg_by_last[msg.last_seq] = msg
        if self.error is not None:
            self._complete_with_error(now)
        return msg

    def fail(self, error: QpError, now: float) -> None:
        """Enter the error state: every message not yet completed completes
        with `error`, as will every later one; nothing more is sent."""
        if self.error is not None:
            return
        self.error = error
        self._resend.clear()
        self._resend_set.clear()
        self._complete_with_error(now)

    def _complete_with_error(self, now: float) -> None:
        for msg in self._msg_by_last.values():
            msg.completed_at, msg.error = now, self.error
        self._msg_by_last.clear()
        self._payload.clear()
        self._unacked_bytes = 0

    @property
    def outstanding(self) -> int:
        return self.next_seq - self.una

    @property
    def unacked_bytes(self) -> int:
        """Payload bytes posted and not yet acknowledged: still queued
        (waiting for the pace or the window) or sent and unacknowledged (0 in
        the error state). What HPN's sender counts per connection to choose
        the least-loaded one."""
        return self._unacked_bytes

    @property
    def pending_messages(self) -> int:
        """Messages posted and not yet completed."""
        return len(self._msg_by_last)

    @property
    def done(self) -> bool:
        return self.una == self.posted_seq

    def window(self) -> int:
        return capped_window(self.cc, self.p.max_outstanding)

    # -- sending ---------------------------------------------------------------

    def next_packet(self, now: float) -> Optional[DataPacket]:
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
            if s >= self.una and s not in self._sacked and s < self.next_seq:
                seq = s
                break
        retrans = seq is not None
        if seq is None:
            if self.next_seq >= self.posted_seq or self.outstanding >= self.window():
                return None
            seq = self.next_seq
            self.next_seq += 1
        op, payload, last = self._payload[seq]
        ackreq = last or (seq + 1) % self.p.ack_every == 0
        if retrans:
            self.stats.retransmitted += 1
            self._retransmitted.add(seq)
        self.stats.sent += 1
        self._sent_at[seq] = now
        self._send_order[seq] = self.stats.sent
        self._paused_at_send[seq] = self.paused_s
        self.cc.on_send(now, len(payload))
        rate = max(self.cc.rate_pps, 1e-3)
        self._next_send = max(self._next_send + 1.0 / rate, now - 0.01)   # no catch-up burst after a stall
        return DataPacket(seq, psn_of(self.initial_psn + seq), op, payload, ackreq, retrans)

    def next_send_time(self) -> float:
        return self._next_send

    def next_due(self) -> Optional[float]:
        """When next_packet() next has something to do that no ACK brings:
        the pace's next slot while a packet may go (one to resend, or a new
        one within the window), else the retransmission timeout of the
        oldest packet unacknowledged (later by any pause meanwhile); None
        when everything is acknowledged or the queue pair failed. A progress
        loop sleeps until then unless a frame arrives first."""
        if self.error is not None:
            return None
        if self._resend or (self.next_seq < self.posted_seq and self.outstanding < self.window()):
            return self._next_send
        if self.una >= self.next_seq:
            return None
        if self.una in self._sent_at:
            sent_at, paused_then = self._sent_at[self.una], self._paused_at_send[self.una]
        else:
            sent_at, paused_then = self._last_progress, self._paused_at_progress
        return sent_at + self.rto + (self.paused_s - paused_then)

    def paused(self, seconds: float) -> None:
        """The host's link was paused (PFC) for `seconds` more: the caller
        held this requester's packets meanwhile. That time does not count
        toward the retransmission timeout of what was sent before it (RTT
        samples still measure real time)."""
        if seconds < 0:
            raise ValueError(f"paused seconds must be >= 0, got {seconds}")
        self.paused_s += seconds

    def _check_timeout(self, now: float) -> None:
        """The oldest unacknowledged packet was (re)sent more than `rto` ago,
        and is not already waiting to be resent: retry, or after `retry_cnt`
        retries without progress, fail."""
        if self.una >= self.next_seq or self.una in self._resend_set:
            return
        if self.una in self._sent_at:
            sent_at, paused_then = self._sent_at[self.una], self._paused_at_send[self.una]
        else:
            sent_at, paused_then = self._last_progress, self._paused_at_progress
        if now - sent_at - (self.paused_s - paused_then) < self.rto:     # the time paused since is not counted
            return
        self.stats.timeouts += 1
        if self.retries == 0:
            self._stalled_since = sent_at
        if self.retries >= self.p.retry_cnt:
            self.fail(QpError(self.peer, self.qp, True, RETRY_EXCEEDED,
                              f"no ACK for {now - self._stalled_since:.1f} s, {self.retries} retries "
                              f"(retry_cnt {self.p.retry_cnt})"), now)
            return
        self.retries += 1
        self.cc.on_timeout(now)
        self._recovered.clear()
        self._queue_resend(range(self.una, self.next_seq))
        self.rto = min(self.rto * 2, self.p.rto_max_s)
        self._last_progress = now
        self._paused_at_progress = self.paused_s

    def _queue_resend(self, seqs) -> None:
        for s in seqs:
            if s not in self._sacked and s not in self._resend_set:
                self._resend.append(s)
                self._resend_set.add(s)

    # -- feedback --------------------------------------------------------------

    def on_ack(self, ack: Ack, now: float, ecn_echo: bool = False,
               hops: tuple[HopInfo, ...] = (), arrived: Optional[float] = None) -> int:
        """An ACK or NAK; returns how many packets it newly acknowledged.
        `arrived`: when the host received it (the kernel's timestamp, as a
        NIC's), if known and earlier than `now`: the RTT sample ends there,
        so the time the agent took to read it is not counted as the fabric's."""
        if self.error is not None:
            return 0
        if ack.is_refusal:
            self.stats.naks += 1
            if ack.terms is None:
                self.fail(QpError(self.peer, self.qp, True, REFUSED, "NAK invalid request, no terms stated"), now)
            else:
                self.fail(QpError(self.peer, self.qp, True, MISMATCHED_ENDS,
                                  f"this end sends {self.terms}, {self.peer} receives {ack.terms}"), now)
            return 0
        named = unwrap((ack.psn - self.initial_psn) % PSN_MOD, self.una)
        trimmed: Optional[int] = None
        if ack.is_trim_nak and ack.sack is not None:
            self.stats.trim_naks += 1
            trimmed = named                # resent now; the SACK's base is the receiver's next expected
            expected = unwrap((ack.sack[0] - self.initial_psn) % PSN_MOD, self.una)
            acked_to = expected
        elif ack.is_nak:
            self.stats.naks += 1
            expected = named
            acked_to = named               # everything before the expected PSN arrived
        else:
            self.stats.acks += 1
            expected = None
            acked_to = named + 1
        if not self.una <= acked_to <= self.next_seq:
            self.stats.stale_acks += 1
            return 0
        newly = acked_to - self.una
        rtt = None
        newest = acked_to - 1
        if newly > 0:
            once = newest not in self._retransmitted
            if newest in self._sent_at:
                sent_at = self._sent_at[newest]
                rtt = (arrived if arrived is not None and sent_at < arrived <= now else now) - sent_at
            for s in range(self.una, acked_to):
                entry = self._payload.pop(s, None)
                if entry is not None:
                    self._unacked_bytes -= len(entry[1])
                self._sent_at.pop(s, None)
                self._send_order.pop(s, None)
                self._paused_at_send.pop(s, None)
                self._retransmitted.discard(s)
                self._sacked.discard(s)
                self._recovered.discard(s)
                msg = self._msg_by_last.pop(s, None)
                if msg is not None:
                    msg.completed_at = now
            self.una = acked_to
            self._last_progress = now
            self._paused_at_progress = self.paused_s
            self.retries = 0
            if rtt is not None and once:
                self._rtt_sample(rtt)
            self.rto = self._rto()
        if expected is not None:
            if self.p.mode == GO_BACK_N:
                self._recovered.clear()
                self._resend.clear()
                self._resend_set.clear()
                self._queue_resend(range(expected, self.next_seq))
            else:
                self._selective(expected, ack.sack)
                if trimmed is not None and self.una <= trimmed < self.next_seq and trimmed not in self._sacked \
                        and trimmed not in self._resend_set:
                    self._recovered.add(trimmed)          # resent in this recovery: once, unless lost again
                    self._queue_resend([trimmed])
        self.cc.on_ack(Feedback(now=now, acked_packets=newly, acked_seq=self.una, rtt_s=rtt, ecn_echo=ecn_echo,
                                hops=hops, next_seq=self.next_seq))
        return newly

    def _rtt_sample(self, rtt: float) -> None:
        self.min_rtt = rtt if self.min_rtt is None else min(self.min_rtt, rtt)
        self.srtt, self.rttvar = rtt_sample(self.srtt, self.rttvar, rtt)

    def _rto(self) -> float:
        return rto_of(self.srtt, self.rttvar, self.p.rto_s, self.p.rto_max_s)

    def _selective(self, expected: int, sack: Optional[tuple[int, int]]) -> None:
        """Resend the holes below the highest SACKed packet, each once per
        recovery, and again a resent hole sent before a packet the SACK
        holds (that packet arrived; the resend, on the same path before it,
        did not)."""
        highest = expected
        latest = 0                    # the latest transmission among the packets SACKed
        if sack is not None:
            base = unwrap((sack[0] - self.initial_psn) % PSN_MOD, expected)
            for i in range(SACK_BITS):
                if sack[1] >> i & 1:
                    s = base + 1 + i
                    if self.una <= s < self.next_seq:
                        self._sacked.add(s)
                        highest = max(highest, s)
                        latest = max(latest, self._send_order.get(s, 0))
        resend = []
        for s in range(self.una, highest):          # one pass over the window below the highest SACKed
            if s in self._sacked:
                continue
            if s not in self._recovered:            # a hole: resent once in this recovery
                self._recovered.add(s)
                resend.append(s)
            elif s not in self._resend_set and self._send_order.get(s, latest) < latest:   # its resend lost
                self.stats.lost_again += 1
                resend.append(s)
        self._queue_resend(resend)

    def on_cnp(self, now: float) -> None:
        self.cc.on_cnp(now)


@dataclass
class ResponderStats:
    received: int = 0
    delivered_messages: int = 0
    duplicates: int = 0
    out_of_order: int = 0
    dropped_out_of_order: int = 0     # go-back-N, or beyond the SACK window
    acks: int = 0
    naks: int = 0
    cnps: int = 0
    malformed: int = 0                # an opcode out of place (a MIDDLE with no FIRST, ...)
    refused: int = 0                  # data packets refused: terms that differ, or the error state
    trimmed: int = 0                  # data packets that arrived trimmed (their payload cut by a switch)


@dataclass
class Delivered:
    msn: int
    kind: str
    data: bytes
    at: float


@dataclass
class Responder:
    """The receiving half of queue pair `qp` from `peer` (an address, for
    errors); `initial_psn` as agreed with the requester; `cc`: the congestion
    control the requester must run (None: any; what the responder does, CNPs
    and INT echoes, serves every one)."""
    params: TransportParams
    initial_psn: int = 0
    peer: str = "the peer"
    qp: int = 0
    cc: Optional[str] = None
    error: Optional[QpError] = None
    stats: ResponderStats = field(default_factory=ResponderStats)
    expected: int = 0                   # next sequence number in order
    msn: int = 0                        # messages completed
    _held: dict = field(default_factory=dict)     # selective repeat: seq -> (opcode, payload)
    _message: list = field(default_factory=list)  # payloads of the message being received
    _message_kind: Optional[str] = None
    _pending: int = 0                   # packets in order not yet acknowledged
    _pending_since: Optional[float] = None
    _nak_sent_for: Optional[int] = None
    _last_cnp: Optional[float] = None
    _hops: tuple = ()

    @property
    def terms(self) -> Terms:
        return Terms(self.params.mode, self.cc)

    def on_data(self, psn: int, opcode: int, payload: bytes, now: float, ackreq: bool = False, ce: bool = False,
                hops: tuple[HopRecord, ...] = (),
                terms: Optional[Terms] = None) -> tuple[list[Ack], list[Delivered], bool]:
        """A data packet, with the requester's terms if it states them: (ACKs/NAKs to send now,
        messages completed, send a CNP)."""
        self.stats.received += 1
        if self.error is None and terms is not None and not (
                terms.mode == self.params.mode and (self.cc is None or terms.cc == self.cc)):
            self.error = QpError(self.peer, self.qp, False, MISMATCHED_ENDS,
                                 f"{self.peer} sends {terms}, this end receives {self.terms}")
        if self.error is not None:
            self.stats.refused += 1
            return [Ack(psn, SYNDROME_NAK_INVALID_REQUEST, self.msn, terms=self.terms)], [], False
        cnp = False
        if ce and (self._last_cnp is None or now - self._last_cnp >= self.params.cnp_interval_s):
            self._last_cnp = now
            self.stats.cnps += 1
            cnp = True
        if opcode not in DATA_OPCODES:
            self.stats.malformed += 1
            return [], [], cnp
        seq = unwrap((psn - self.initial_psn) % PSN_MOD, self.expected)
        if hops:
            self._hops = hops
        if seq < self.expected:
            self.stats.duplicates += 1
            return [self._ack()], [], cnp          # its ACK may have been lost: say where we are
        if seq > self.expected:
            self.stats.out_of_order += 1
            if self.params.mode == SELECTIVE_REPEAT and seq - self.expected <= SACK_BITS:
                self._held.setdefault(seq, (opcode, payload))
                return [self._nak()], [], cnp
            self.stats.dropped_out_of_order += 1
            if self._nak_sent_for != self.expected:
                self._nak_sent_for = self.expected
                return [self._nak()], [], cnp
            return [], [], cnp
        delivered: list[Delivered] = []
        if not self._accept(opcode, payload, now, delivered):
            return [], delivered, cnp
        filled = self.expected in self._held
        while self.expected in self._held:            # selective repeat: what was waiting for this one
            op, pl = self._held.pop(self.expected)
            if not self._accept(op, pl, now, delivered):
                break
        if self._pending_since is None:
            self._pending_since = now
        acks = []
        if ackreq or self._pending >= self.params.ack_every or self._held or filled:
            acks.append(self._nak() if self._held else self._ack())
        return acks, delivered, cnp

    def on_trimmed(self, psn: int, now: float) -> list[Ack]:
        """A data packet that arrived trimmed: a switch cut its payload rather
        than drop it (packet trimming), so it is lost, and known lost now.
        Selective repeat: a NAK naming it (SYNDROME_NAK_TRIMMED, with the
        SACK), and the requester resends it at once. Go-back-N: if it is the
        packet expected next, the NAK go-back-N sends for a gap (every time:
        a resend cut again is new news); a later one is resent from the gap
        anyway. Nothing is delivered."""
        self.stats.received += 1
        if self.error is not None:
            return []
        self.stats.trimmed += 1
        seq = unwrap((psn - self.initial_psn) % PSN_MOD, self.expected)
        if seq < self.expected or seq in self._held:
            return [self._ack()]                       # a copy already arrived whole: say where we are
        if self.params.mode == SELECTIVE_REPEAT:
            if seq - self.expected > SACK_BITS:
                return []                              # beyond what a SACK names: the requester's timeout
            nak = self._nak()
            return [Ack(psn, SYNDROME_NAK_TRIMMED, nak.msn, sack=nak.sack, hops=nak.hops)]
        if seq == self.expected:                       # each time: a cut resend is news, not the same gap
            self._nak_sent_for = self.expected
            return [self._nak()]
        return []

    def _accept(self, opcode: int, payload: bytes, now: float, delivered: list[Delivered]) -> bool:
        """The packet with the expected PSN; False if its opcode is out of place (dropped, counted)."""
        starts, ends = opcode in FIRST_OPCODES, opcode in LAST_OPCODES
        if starts == bool(self._message_kind):       # a FIRST inside a message, or a MIDDLE/LAST outside one
            self.stats.malformed += 1
            return False
        kind = "send" if opcode in OPCODES[SEND] else "write"
        if self._message_kind is not None and kind != self._message_kind:
            self.stats.malformed += 1
            return False
        self.expected += 1
        self._pending += 1
        self._nak_sent_for = None
        self._message.append(payload)
        self._message_kind = None if ends else kind
        if ends:
            self.msn = (self.msn + 1) % MSN_MOD
            self.stats.delivered_messages += 1
            delivered.append(Delivered(self.msn, kind, b"".join(self._message), now))
            self._message = []
        return True

    def next_due(self) -> Optional[float]:
        """When poll() sends the delayed ACK (None: no ACK pending)."""
        if self._pending and self._pending_since is not None:
            return self._pending_since + self.params.ack_delay_s
        return None

    def poll(self, now: float) -> Optional[Ack]:
        """The delayed ACK, when it is due."""
        if self._pending and self._pending_since is not None and now - self._pending_since >= self.params.ack_delay_s:
            return self._ack()
        return None

    def _ack(self) -> Ack:
        self.stats.acks += 1
        self._pending, self._pending_since = 0, None
        return Ack(psn_of(self.initial_psn + self.expected - 1), SYNDROME_ACK, self.msn, hops=self._hops)

    def _nak(self) -> Ack:
        self.stats.naks += 1
        self._pending, self._pending_since = 0, None
        sack = None
        if self.params.mode == SELECTIVE_REPEAT:
            bitmap = 0
            for s in self._held:
                if 0 < s - self.expected <= SACK_BITS:
                    bitmap |= 1 << (s - self.expected - 1)
            sack = (psn_of(self.initial_psn + self.expected), bitmap)
        return Ack(psn_of(self.initial_psn + self.expected), SYNDROME_NAK_PSN_SEQUENCE_ERROR, self.msn, sack=sack,
                   hops=self._hops)
