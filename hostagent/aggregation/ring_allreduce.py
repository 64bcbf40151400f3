"""Ring all-reduce over plain UDP: the baseline that in-network aggregation is
compared against. Run one worker per host, inside the host's namespace:

    python -m hostagent.aggregation.ring_allreduce --rank 0 --addresses 10.0.1.1,10.0.2.1,10.0.3.1 \\
        --port 47000 --elements 1000000 --dtype float32 --seed 1 [--repeat 5] [--out PREFIX]

(the same command on every host, with --rank 1, 2, ...). Each worker makes its
input from (seed, rank), all-reduces it --repeat times, checks the result
against the sum it computes itself from all workers' inputs, and writes
PREFIX.json (default ring-results/ring-rank<R>.json); exit status 1 if the
check failed.

The algorithm is the classic ring: n workers, worker r sends to (r + 1) % n and
receives from (r - 1) % n; the array is split into n nearly equal segments
(segment i is [i*L//n, (i+1)*L//n)); n - 1 reduce-scatter steps, after which
worker r holds the complete sum of segment (r + 1) % n, then n - 1 all-gather
steps that pass the complete segments around. Every worker ends with the same
bytes for every segment (each segment is summed once, in one order, and then
copied), so float results are identical on all workers.

Wire format (UDP payload; all fields big-endian, the layout is HEADER):

    offset size field
    0      1    magic    0xA7
    1      1    version  1
    2      1    flags    FLAG_ACK (0x01) on acknowledgements, 0 on data
    3      1    step     0 .. 2(n-1)-1: reduce-scatter steps, then all-gather steps
    4      2    call     number of the allreduce() call on this ring, mod 2**16
    6      2    count    elements that follow (data); 0 on an ACK
    8      4    seq      data: the packet's number within its step;
                         ACK: cumulative, every packet with seq < this arrived
    12     ...  data: count elements of the wire dtype (big-endian), at most
                DATA_BYTES = 256 bytes: 64 float32, or 32 int64;
                ACK: 4 bytes, the seq of the data packet that triggered it

A data packet therefore carries the same 256 data bytes as the aggregation
protocol's (docs/protocols/aggregation.md), behind a 12-byte header (the same size as the
aggregation header). An Ethernet frame adds FRAME_OVERHEAD = 42 bytes (UDP 8,
IPv4 20, Ethernet 14) to every UDP payload counted in RingStats.

Dtypes: float32 sums in float32 (wire: 64 float32 per packet); int64 sums in
int64 (wire: 32 int64 per packet, wrapping on overflow like numpy); int32
inputs are summed in int64 and returned as int64 so that integer sums are
exact, which costs 32 int64 per packet (twice the packets of float32: the ring
has no overflow fallback such as the switch's).

Reliability (UDP over BMv2 drops packets; tests add loss):
  * Sender: per step, a window of at most `window` unacknowledged packets.
    Each packet has its own retransmission timer. The base timeout is
    rto_initial_s (20 ms) until round-trip samples exist, then RFC 6298's
    srtt + 4 rttvar (samples only from packets sent once: Karn), never below
    rto_initial_s; every retry of a packet doubles its timeout, up to rto_max_s
    (500 ms).
  * Receiver: acknowledges every data packet, duplicates included (a
    duplicate means the ACK was lost), with a cumulative ACK (all seq below it
    arrived) plus the seq just received (selective), so one lost ACK costs
    nothing once a later one arrives. Duplicates are counted and ignored.
  * A step ends for a worker when everything it sent in the step is
    acknowledged AND it received everything it expects in the step; then it
    folds the received segment in (reduce-scatter: adds, all-gather: copies)
    and starts the next step.
  * Early packets are buffered, not refused: the left neighbour may be one or
    more steps ahead (it finished its step when we acknowledged its packets).
    Data of a later step of the current call goes straight into that step's
    receive buffer and is acknowledged at once; data of the next call (the
    neighbour already returned and called allreduce() again) is kept as raw
    packets, acknowledged, and replayed when the next call starts. So a sender
    never waits on a receiver that merely lags, and nothing is sent twice
    because of it.
  * Packets of finished steps and of earlier calls are answered with an ACK
    (the receiver has them all) and otherwise ignored. Between calls nobody
    reads the socket, so a lost final ACK is answered at the start of the next
    call (the neighbour's call lasts until then); close() lingers (default:
    until 1 s passed without any packet) answering such retransmissions so
    that the neighbour's last call can finish; linger(until=...) does the same
    until the caller knows that every worker is done (workers that are threads
    of one process).
  * Overall timeout: an allreduce() call that has not finished after
    timeout_s raises TimeoutError naming the rank, the step and the packets it
    still misses from the left neighbour / still waits ACKs for from the right
    one. After an error the ring is unusable (the workers' call numbers no
    longer agree): close it.
All workers must call allreduce() the same number of times, with arrays of the
same length and dtype (a packet whose element count does not fit the expected
layout raises ValueError).
"""
from __future__ import annotations

import argparse
import heapq
import ipaddress
import json
import math
import select
import socket
import struct
import sys
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

# --- wire format (see the module docstring) --------------------------------
HEADER = struct.Struct("!BBBBHHI")   # magic, version, flags, step, call, count, seq
ACK_BODY = struct.Struct("!I")       # the seq that triggered the ACK
MAGIC = 0xA7
VERSION = 1
FLAG_ACK = 0x01
DATA_BYTES = 256                     # data bytes per packet: 64 x 4-byte or 32 x 8-byte elements
MAX_ELEMENTS = DATA_BYTES // 4       # 64
FRAME_OVERHEAD = 8 + 20 + 14         # UDP + IPv4 + Ethernet headers around a UDP payload
MAX_WORKERS = 128                    # step is 8 bits: 2 (n - 1) steps must fit
CALL_MOD = 1 << 16
RECV_BUFFER = 4 << 20                # SO_RCVBUF asked for (the kernel caps it at rmem_max)

# dtype of the input -> dtype summed and returned (native) and carried on the wire (big-endian)
SUM_DTYPES: dict[np.dtype, np.dtype] = {
    np.dtype(np.float32): np.dtype(np.float32),
    np.dtype(np.int32): np.dtype(np.int64),
    np.dtype(np.int64): np.dtype(np.int64),
}


@dataclass(frozen=True)
class PacketHeader:
    """The 12-byte header of every packet (layout: HEADER, module docstring)."""
    flags: int
    step: int
    call: int
    count: int
    seq: int
    magic: int = MAGIC
    version: int = VERSION

    @property
    def is_ack(self) -> bool:
        return bool(self.flags & FLAG_ACK)


def pack_header(flags: int, step: int, call: int, count: int, seq: int) -> bytes:
    return HEADER.pack(MAGIC, VERSION, flags, step, call, count, seq)


def unpack_header(packet: bytes) -> PacketHeader | None:
    """The packet's header, or None if it is too short or not ours (magic, version)."""
    if len(packet) < HEADER.size:
        return None
    magic, version, flags, step, call, count, seq = HEADER.unpack_from(packet)
    if magic != MAGIC or version != VERSION:
        return None
    return PacketHeader(flags=flags, step=step, call=call, count=count, seq=seq)


def pack_data(step: int, call: int, seq: int, elements: bytes, itemsize: int) -> bytes:
    """A data packet: header + elements (already big-endian bytes of the wire dtype)."""
    if len(elements) > DATA_BYTES or len(elements) % itemsize:
        raise ValueError(f"elements: {len(elements)} bytes, expected a multiple of {itemsize} up to {DATA_BYTES}")
    return pack_header(0, step, call, len(elements) // itemsize, seq) + elements


def pack_ack(step: int, call: int, cumulative: int, received_seq: int) -> bytes:
    """An ACK: every seq < cumulative arrived, and received_seq just arrived."""
    return pack_header(FLAG_ACK, step, call, 0, cumulative) + ACK_BODY.pack(received_seq)


def segment_bounds(length: int, n: int) -> list[int]:
    """Start of each of the n segments, then the end: segment i is [b[i], b[i+1])."""
    return [i * length // n for i in range(n + 1)]


def ring_segments(rank: int, n: int, step: int) -> tuple[int, int]:
    """(segment sent, segment received) by `rank` in global step `step`:
    reduce-scatter steps 0 .. n-2, then all-gather steps n-1 .. 2n-3."""
    if step < n - 1:
        return (rank - step) % n, (rank - step - 1) % n
    s = step - (n - 1)
    return (rank + 1 - s) % n, (rank - s) % n


@dataclass
class RingStats:
    """Counters of a RingAllReduce. In `stats` they are cumulative since the
    ring was created, except elapsed_s (the last call); `last_stats` holds the
    last call alone. Bytes are UDP payload bytes (header included); add
    FRAME_OVERHEAD per packet for Ethernet frames."""
    calls: int = 0
    packets_sent: int = 0          # data + ACK packets handed to the socket (retransmissions included)
    packets_received: int = 0      # datagrams read from the socket, whatever they were
    bytes_sent: int = 0
    bytes_received: int = 0
    data_packets_sent: int = 0
    ack_packets_sent: int = 0
    retransmissions: int = 0       # data packets sent again after a timeout
    duplicates: int = 0            # data packets that had already arrived
    early_next_call: int = 0       # data packets of the next call, kept until it starts
    ignored: int = 0               # not ours, from a host that is not a neighbour, malformed, stale ACKs
    elapsed_s: float = 0.0

    def __sub__(self, other: "RingStats") -> "RingStats":
        diff = {f.name: getattr(self, f.name) - getattr(other, f.name) for f in fields(self)}
        diff["elapsed_s"] = self.elapsed_s
        return RingStats(**diff)

    def copy(self) -> "RingStats":
        return RingStats(**asdict(self))


class _SendStep:
    """The sender's side of one step: the segment's bytes, the window, timers."""

    def __init__(self, step: int, payload: bytes, itemsize: int):
        self.step = step
        self.payload = payload
        self.itemsize = itemsize
        self.packet_bytes = (DATA_BYTES // itemsize) * itemsize
        self.packets = math.ceil(len(payload) / self.packet_bytes)
        self.next_new = 0                    # first seq never sent
        self.acked = bytearray(self.packets)
        self.n_acked = 0
        self.cum = 0                         # every seq < cum is marked acked
        self.attempts = [0] * self.packets   # times each packet was sent
        self.sent_at = [0.0] * self.packets  # time of the last transmission
        self.timers: list[tuple[float, int, int]] = []   # heap of (deadline, seq, attempt)

    def elements(self, seq: int) -> bytes:
        return self.payload[seq * self.packet_bytes:(seq + 1) * self.packet_bytes]

    @property
    def outstanding(self) -> int:
        return self.next_new - self.n_acked

    @property
    def done(self) -> bool:
        return self.n_acked == self.packets


class _RecvStep:
    """The receiver's side of one step: the segment's bytes as they arrive."""

    def __init__(self, step: int, length: int, itemsize: int):
        self.step = step
        self.length = length
        self.itemsize = itemsize
        self.per_packet = DATA_BYTES // itemsize
        self.packets = math.ceil(length / self.per_packet)
        self.buffer = bytearray(length * itemsize)
        self.have = bytearray(self.packets)
        self.n_have = 0
        self.cum = 0                         # every seq < cum arrived

    def expected_count(self, seq: int) -> int:
        return min(self.per_packet, self.length - seq * self.per_packet)

    @property
    def done(self) -> bool:
        return self.n_have == self.packets


class RingAllReduce:
    """One worker of a ring all-reduce over UDP (see the module docstring).

    rank: this worker, 0 <= rank < len(addresses).
    addresses: worker i's IPv4 address is addresses[i]; every worker uses `port`.
    window: unacknowledged data packets allowed per step.
    timeout_s: an allreduce() call that takes longer raises TimeoutError.
    bind_address: address to bind (default addresses[rank]); peers recognise
        this worker by the source address addresses[rank].
    rto_initial_s, rto_max_s: retransmission timeout floor/start and cap.
    linger_s: close() answers late retransmissions until no packet arrived for
        this long (0: close at once; safe when every peer's call has returned).
    """

    def __init__(self, rank: int, addresses: Sequence[str], port: int, window: int = 64,
                 timeout_s: float = 60.0, bind_address: str | None = None, *,
                 rto_initial_s: float = 0.02, rto_max_s: float = 0.5, linger_s: float = 1.0):
        addresses = list(addresses)
        n = len(addresses)
        if n < 1:
            raise ValueError("addresses: need at least one worker address")
        if n > MAX_WORKERS:
            raise ValueError(f"addresses: {n} workers, at most {MAX_WORKERS} (the step field is 8 bits)")
        for i, a in enumerate(addresses):
            try:
                ipaddress.IPv4Address(a)
            except ValueError:
                raise ValueError(f"addresses[{i}]: {a!r} is not an IPv4 address") from None
        if len(set(addresses)) != n:
            raise ValueError(f"addresses: duplicates in {addresses} (all workers share one port)")
        if not 0 <= rank < n:
            raise ValueError(f"rank: {rank} is not in 0..{n - 1}")
        if not 0 < port < 65536:
            raise ValueError(f"port: {port} is not in 1..65535")
        if window < 1:
            raise ValueError(f"window: {window}, need at least 1")
        if not timeout_s > 0:
            raise ValueError(f"timeout_s: {timeout_s}, need > 0")
        if not 0 < rto_initial_s <= rto_max_s:
            raise ValueError(f"rto_initial_s/rto_max_s: need 0 < {rto_initial_s} <= {rto_max_s}")
        if linger_s < 0:
            raise ValueError(f"linger_s: {linger_s}, need >= 0")
        self.rank = rank
        self.addresses = addresses
        self.n = n
        self.port = port
        self.window = window
        self.timeout_s = timeout_s
        self.rto_initial_s = rto_initial_s
        self.rto_max_s = rto_max_s
        self.linger_s = linger_s
        self.left = (rank - 1) % n
        self.right = (rank + 1) % n
        self._left_addr = (addresses[self.left], port)
        self._right_addr = (addresses[self.right], port)
        self.stats = RingStats()
        self.last_stats = RingStats()
        self._call = 0                   # number of the current/last call, mod CALL_MOD
        self._in_call = False
        self._broken: str | None = None
        self._srtt: float | None = None
        self._rttvar = 0.0
        self._rto = rto_initial_s
        self._send: _SendStep | None = None
        self._recv: dict[int, _RecvStep] = {}
        self._layout: tuple[list[int], np.dtype] | None = None   # (segment bounds, wire dtype) of the call
        self._next_call_packets: list[bytes] = []
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RECV_BUFFER)
            self._sock.bind((bind_address or addresses[rank], port))
        except OSError as exc:
            self._sock.close()
            raise OSError(exc.errno, f"rank {rank}: cannot bind UDP {bind_address or addresses[rank]}:{port}: "
                                     f"{exc.strerror}") from exc
        self._sock.setblocking(False)

    # -- public API ----------------------------------------------------------

    def allreduce(self, array: np.ndarray) -> np.ndarray:
        """The element-wise sum of every worker's `array` (1-D, length >= 1,
        float32, int32 or int64; the same length and dtype on every worker).
        Returns a new array: float32 for float32, int64 for int32 and int64."""
        if self._sock.fileno() < 0:
            raise RuntimeError(f"rank {self.rank}: the ring is closed")
        if self._broken:
            raise RuntimeError(f"rank {self.rank}: the ring is unusable after an earlier error: {self._broken}")
        array = np.asarray(array)
        if array.ndim != 1:
            raise ValueError(f"array: expected 1-D, got shape {array.shape}")
        if array.size < 1:
            raise ValueError("array: empty, need at least one element")
        if array.dtype not in SUM_DTYPES:
            raise ValueError(f"array: dtype {array.dtype} not supported (float32, int32, int64)")
        acc = array.astype(SUM_DTYPES[array.dtype], copy=True)
        wire = acc.dtype.newbyteorder(">")
        before = self.stats.copy()
        start = time.monotonic()
        self._call = (self._call + 1) % CALL_MOD
        self._layout = (segment_bounds(acc.size, self.n), wire)
        self._recv = {}
        self._in_call = True
        try:
            replay, self._next_call_packets = self._next_call_packets, []
            for packet in replay:
                self._handle(packet, self._left_addr[0], replay=True)
            deadline = start + self.timeout_s
            for step in range(2 * (self.n - 1)):
                self._run_step(step, acc, deadline)
        except BaseException as exc:
            self._broken = f"{type(exc).__name__}: {exc}"
            raise
        finally:
            self._in_call = False
            self._send = None
            self.stats.calls += 1
            self.stats.elapsed_s = time.monotonic() - start
            self.last_stats = self.stats - before
        return acc

    def linger(self, quiet_s: float, until: Callable[[], bool] | None = None,
               max_s: float | None = None) -> int:
        """Answer late packets while no call runs: retransmissions of finished
        calls get their ACK (the neighbour's last ACK may have been lost, and it
        cannot finish its call without one). Returns when no packet arrived for
        quiet_s, when until() is true (checked every 10 ms), or after max_s
        (default timeout_s). Returns how many packets it handled."""
        if self._in_call:
            raise RuntimeError(f"rank {self.rank}: linger() during an all-reduce call")
        handled = 0
        now = time.monotonic()
        end = now + (self.timeout_s if max_s is None else max_s)
        quiet_until = now + quiet_s
        while not (until is not None and until()):
            now = time.monotonic()
            if now >= min(quiet_until, end):
                break
            wait = min(quiet_until, end) - now
            ready, _, _ = select.select([self._sock], [], [], wait if until is None else min(wait, 0.01))
            count = self._drain() if ready else 0
            if count:
                handled += count
                quiet_until = time.monotonic() + quiet_s
        return handled

    def close(self, linger_s: float | None = None) -> None:
        """Close the socket. After a successful call, first linger(linger_s)
        (default: the ring's linger_s) so that the left neighbour gets the ACKs
        of its last call; 0 closes at once, which is safe when every worker's
        last call has returned."""
        if self._sock.fileno() < 0:
            return
        linger = self.linger_s if linger_s is None else linger_s
        try:
            if linger > 0 and self.stats.calls and not self._broken:
                self.linger(linger)
        finally:
            self._sock.close()

    def __enter__(self) -> "RingAllReduce":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close(linger_s=0.0 if exc_info[0] is not None else None)

    # -- one step -------------------------------------------------------------

    def _run_step(self, step: int, acc: np.ndarray, deadline: float) -> None:
        assert self._layout is not None  # set by allreduce() before its steps
        bounds, wire = self._layout
        send_seg, recv_seg = ring_segments(self.rank, self.n, step)
        payload = acc[bounds[send_seg]:bounds[send_seg + 1]].astype(wire).tobytes()
        snd = _SendStep(step, payload, wire.itemsize)
        self._send = snd
        rcv = self._recv_step(step)
        while not (snd.done and rcv.done):
            while snd.next_new < snd.packets and snd.outstanding < self.window:
                self._send_data(snd, snd.next_new)
                snd.next_new += 1
            now = time.monotonic()
            self._retransmit_expired(snd, now)
            if now >= deadline:
                raise TimeoutError(self._timeout_message(snd, rcv))
            wait = deadline - now
            if snd.timers:
                wait = min(wait, max(0.0, snd.timers[0][0] - now))
            ready, _, _ = select.select([self._sock], [], [], wait)
            if ready:
                self._drain()
        segment = slice(bounds[recv_seg], bounds[recv_seg + 1])
        received = np.frombuffer(rcv.buffer, dtype=wire)
        if step < self.n - 1:
            acc[segment] += received
        else:
            acc[segment] = received
        del self._recv[step]
        self._send = None

    def _recv_step(self, step: int) -> _RecvStep:
        rcv = self._recv.get(step)
        if rcv is None:
            assert self._layout is not None  # only during a call, after allreduce() set it
            bounds, wire = self._layout
            seg = ring_segments(self.rank, self.n, step)[1]
            rcv = self._recv[step] = _RecvStep(step, bounds[seg + 1] - bounds[seg], wire.itemsize)
        return rcv

    def _timeout_message(self, snd: _SendStep, rcv: _RecvStep) -> str:
        n, step = self.n, snd.step
        phase = (f"reduce-scatter {step + 1}/{n - 1}" if step < n - 1
                 else f"all-gather {step - n + 2}/{n - 1}")
        missing = []
        if not rcv.done:
            first = rcv.have.find(0)
            missing.append(f"received {rcv.n_have} of {rcv.packets} data packets from rank {self.left} "
                           f"({self._left_addr[0]}:{self.port}), first missing seq {first}")
        if not snd.done:
            missing.append(f"{snd.packets - snd.n_acked} of {snd.packets} data packets sent to rank {self.right} "
                           f"({self._right_addr[0]}:{self.port}) not acknowledged")
        return (f"rank {self.rank}: all-reduce call {self.stats.calls + 1} timed out after {self.timeout_s} s in "
                f"step {step} ({phase}): " + "; ".join(missing))

    # -- sending --------------------------------------------------------------

    def _send_datagram(self, packet: bytes, addr: tuple[str, int]) -> None:
        """Hand one datagram to the kernel (tests override this to lose packets).
        A full socket buffer, or a packet the host's own filter drops
        (EPERM), counts as a loss: the timer retransmits."""
        try:
            self._sock.sendto(packet, addr)
        except (BlockingIOError, ConnectionRefusedError, PermissionError):
            pass

    def _count_sent(self, packet: bytes) -> None:
        self.stats.packets_sent += 1
        self.stats.bytes_sent += len(packet)

    def _send_data(self, snd: _SendStep, seq: int) -> None:
        packet = pack_data(snd.step, self._call, seq, snd.elements(seq), snd.itemsize)
        now = time.monotonic()
        attempt = snd.attempts[seq]
        if attempt:
            self.stats.retransmissions += 1
        snd.attempts[seq] = attempt + 1
        snd.sent_at[seq] = now
        rto = min(self._rto * (2 ** attempt), self.rto_max_s)
        heapq.heappush(snd.timers, (now + rto, seq, attempt + 1))
        self.stats.data_packets_sent += 1
        self._count_sent(packet)
        self._send_datagram(packet, self._right_addr)

    def _send_ack(self, step: int, call: int, cumulative: int, seq: int) -> None:
        packet = pack_ack(step, call, cumulative, seq)
        self.stats.ack_packets_sent += 1
        self._count_sent(packet)
        self._send_datagram(packet, self._left_addr)

    def _retransmit_expired(self, snd: _SendStep, now: float) -> None:
        timers = snd.timers
        while timers:
            deadline, seq, attempt = timers[0]
            if snd.acked[seq] or attempt != snd.attempts[seq]:
                heapq.heappop(timers)        # acknowledged or superseded
            elif deadline <= now:
                heapq.heappop(timers)
                self._send_data(snd, seq)
            else:
                break

    # -- receiving ------------------------------------------------------------

    def _drain(self) -> int:
        """Read and handle every datagram waiting on the socket; how many."""
        count = 0
        while True:
            try:
                packet, (host, _port) = self._sock.recvfrom(2048)
            except (BlockingIOError, InterruptedError):
                return count
            except ConnectionRefusedError:
                continue
            count += 1
            self.stats.packets_received += 1
            self.stats.bytes_received += len(packet)
            self._handle(packet, host)

    def _handle(self, packet: bytes, host: str, replay: bool = False) -> None:
        header = unpack_header(packet)
        if header is None:
            self.stats.ignored += 1
        elif header.is_ack:
            if host == self._right_addr[0] and len(packet) == HEADER.size + ACK_BODY.size:
                self._handle_ack(header, ACK_BODY.unpack_from(packet, HEADER.size)[0])
            else:
                self.stats.ignored += 1
        elif host == self._left_addr[0]:
            self._handle_data(header, packet, replay)
        else:
            self.stats.ignored += 1

    def _handle_ack(self, header: PacketHeader, seq: int) -> None:
        snd = self._send
        if (snd is None or not self._in_call or header.call != self._call or header.step != snd.step
                or header.seq > snd.next_new or seq >= snd.next_new):
            self.stats.ignored += 1          # stale (an earlier step or call) or nonsense
            return
        now = time.monotonic()
        if not snd.acked[seq] and snd.attempts[seq] == 1:
            self._rtt_sample(now - snd.sent_at[seq])   # Karn: only packets sent once
        self._mark_acked(snd, seq)
        while snd.cum < header.seq:
            self._mark_acked(snd, snd.cum)
            snd.cum += 1

    @staticmethod
    def _mark_acked(snd: _SendStep, seq: int) -> None:
        if not snd.acked[seq]:
            snd.acked[seq] = 1
            snd.n_acked += 1

    def _rtt_sample(self, rtt: float) -> None:
        """RFC 6298 smoothing; the RTO never goes below rto_initial_s."""
        if self._srtt is None:
            self._srtt, self._rttvar = rtt, rtt / 2
        else:
            self._rttvar = 0.75 * self._rttvar + 0.25 * abs(self._srtt - rtt)
            self._srtt = 0.875 * self._srtt + 0.125 * rtt
        self._rto = min(max(self.rto_initial_s, self._srtt + 4 * self._rttvar), self.rto_max_s)

    def _handle_data(self, header: PacketHeader, packet: bytes, replay: bool) -> None:
        age = (self._call - header.call) % CALL_MOD
        if age == CALL_MOD - 1 and self._in_call:
            # the next call: the left neighbour is ahead of us; keep it for then
            self._next_call_packets.append(packet)
            self.stats.early_next_call += 1
            self._send_ack(header.step, header.call, 0, header.seq)
            return
        if age != 0 or not self._in_call:
            if age < CALL_MOD // 2:
                # an earlier call (or ours, finished): we have it all; the ACK was lost
                self.stats.duplicates += 1
                self._send_ack(header.step, header.call, header.seq + 1, header.seq)
            else:
                self.stats.ignored += 1
            return
        if header.step >= 2 * (self.n - 1):
            self.stats.ignored += 1
            return
        current = self._send.step if self._send is not None else 0
        if header.step < current:
            # a finished step: everything arrived; answer the retransmission
            self.stats.duplicates += 1
            self._send_ack(header.step, header.call, header.seq + 1, header.seq)
            return
        rcv = self._recv_step(header.step)
        seq = header.seq
        if seq >= rcv.packets or header.count != rcv.expected_count(seq) \
                or len(packet) != HEADER.size + header.count * rcv.itemsize:
            raise ValueError(
                f"rank {self.rank}: data packet from rank {self.left} (step {header.step}, seq {seq}) has "
                f"{header.count} elements in {len(packet) - HEADER.size} bytes; expected "
                f"{rcv.expected_count(seq) if seq < rcv.packets else 0} of {rcv.itemsize} bytes for "
                f"{rcv.packets} packets: do all workers all-reduce arrays of the same length and dtype?")
        if rcv.have[seq]:
            self.stats.duplicates += 1
        else:
            rcv.have[seq] = 1
            rcv.n_have += 1
            offset = seq * rcv.per_packet * rcv.itemsize
            rcv.buffer[offset:offset + len(packet) - HEADER.size] = packet[HEADER.size:]
            while rcv.cum < rcv.packets and rcv.have[rcv.cum]:
                rcv.cum += 1
        if not replay:
            self._send_ack(header.step, header.call, rcv.cum, seq)


# --- command line ------------------------------------------------------------

def make_input(seed: int, rank: int, elements: int, dtype: str) -> np.ndarray:
    """Worker `rank`'s input: float32 standard normal, or integers in [-1000, 1000]."""
    rng = np.random.default_rng([seed, rank])
    if dtype == "float32":
        return rng.standard_normal(elements, dtype=np.float32)
    if dtype in ("int32", "int64"):
        return rng.integers(-1000, 1001, size=elements, dtype=np.dtype(dtype))
    raise ValueError(f"dtype: {dtype!r} not supported (float32, int32, int64)")


def check_result(result: np.ndarray, inputs: Sequence[np.ndarray]) -> tuple[bool, float]:
    """(passed, largest absolute error) of an all-reduce result against the sum
    of `inputs`: exact for integers; for float32 within the float32 rounding
    bound n * 2**-23 * sum_i |x_i| of each element (plus a tiny absolute)."""
    exact = np.sum([x.astype(np.float64 if x.dtype.kind == "f" else np.int64) for x in inputs], axis=0)
    if result.shape != exact.shape:
        return False, math.inf
    if result.dtype.kind in "iu":
        error = np.abs(result.astype(np.int64) - exact)
        return bool(np.all(error == 0)), float(error.max())
    error = np.abs(result.astype(np.float64) - exact)
    bound = len(inputs) * 2.0 ** -23 * np.sum([np.abs(x.astype(np.float64)) for x in inputs], axis=0) + 1e-30
    return bool(np.all(error <= bound)), float(error.max())


def _positive(kind: Callable[[str], float | int], name: str) -> Callable[[str], float | int]:
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name}: {text!r} is not a number") from None
        if value <= 0:
            raise argparse.ArgumentTypeError(f"{name}: {text} must be > 0")
        return value
    return parse


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rank", type=int, required=True, help="this worker's index in --addresses")
    ap.add_argument("--addresses", required=True, help="comma-separated IPv4 addresses of workers 0, 1, ...")
    ap.add_argument("--port", type=int, default=47000, help="UDP port of every worker (default 47000)")
    ap.add_argument("--elements", type=_positive(int, "--elements"), required=True, help="array length")
    ap.add_argument("--dtype", choices=["float32", "int32", "int64"], default="float32")
    ap.add_argument("--seed", type=int, default=0, help="inputs come from (seed, rank)")
    ap.add_argument("--repeat", type=_positive(int, "--repeat"), default=1, help="all-reduces to run")
    ap.add_argument("--window", type=_positive(int, "--window"), default=64,
                    help="unacknowledged packets per step (default 64)")
    ap.add_argument("--timeout", type=_positive(float, "--timeout"), default=60.0,
                    help="give up an all-reduce after this many seconds (default 60)")
    ap.add_argument("--rto-initial", type=_positive(float, "--rto-initial"), default=0.02,
                    help="retransmission timeout floor/start, seconds (default 0.02)")
    ap.add_argument("--rto-max", type=_positive(float, "--rto-max"), default=0.5,
                    help="retransmission timeout cap, seconds (default 0.5)")
    ap.add_argument("--bind", help="address to bind (default: this worker's address)")
    ap.add_argument("--start-at", type=float, default=0.0,
                    help="wall-clock time to start the first all-reduce (to start workers together)")
    ap.add_argument("--out", help="output prefix: writes <out>.json (default ring-results/ring-rank<R>)")
    a = ap.parse_args(argv)
    addresses = [x.strip() for x in a.addresses.split(",") if x.strip()]
    if not 0 <= a.rank < len(addresses):
        ap.error(f"--rank: {a.rank} is not in 0..{len(addresses) - 1} ({len(addresses)} addresses)")
    out = Path((a.out or f"ring-results/ring-rank{a.rank}") + ".json")
    n = len(addresses)
    x = make_input(a.seed, a.rank, a.elements, a.dtype)
    inputs = [x if r == a.rank else make_input(a.seed, r, a.elements, a.dtype) for r in range(n)]
    try:
        ring = RingAllReduce(a.rank, addresses, a.port, window=a.window, timeout_s=a.timeout,
                             bind_address=a.bind, rto_initial_s=a.rto_initial, rto_max_s=a.rto_max)
    except (ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if a.start_at:
        time.sleep(max(0.0, a.start_at - time.time()))
    mb = x.nbytes / 1e6
    print(f"rank {a.rank}/{n}: {a.elements} {a.dtype} ({mb:.2f} MB), {a.repeat} all-reduce(s), "
          f"ring {addresses[(a.rank - 1) % n]} -> {addresses[a.rank]} -> {addresses[(a.rank + 1) % n]}")
    elapsed, per_repeat, errors = [], [], []
    passed = True
    try:
        with ring:
            for i in range(a.repeat):
                result = ring.allreduce(x)
                ok, err = check_result(result, inputs)
                passed &= ok
                errors.append(err)
                elapsed.append(ring.last_stats.elapsed_s)
                per_repeat.append(asdict(ring.last_stats))
                s = ring.last_stats
                print(f"repeat {i + 1}/{a.repeat}: {s.elapsed_s:.3f} s, {mb / s.elapsed_s:.2f} MB/s, "
                      f"{s.data_packets_sent} data + {s.ack_packets_sent} ACK packets sent, "
                      f"{s.retransmissions} retransmitted, check {'ok' if ok else 'FAILED'} (max error {err:.3g})",
                      flush=True)
    except (TimeoutError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        passed = False
    total = ring.stats
    mean = sum(elapsed) / len(elapsed) if elapsed else math.nan
    summary = {
        "rank": a.rank, "n_workers": n, "addresses": addresses, "port": a.port,
        "elements": a.elements, "dtype": a.dtype, "seed": a.seed, "repeat": a.repeat,
        "completed": len(elapsed), "window": a.window,
        "elapsed_s": elapsed, "mean_elapsed_s": mean,
        "elements_per_s": a.elements / mean if elapsed else None,
        "mb_per_s": mb / mean if elapsed else None,
        "check_passed": passed and len(elapsed) == a.repeat, "max_abs_error": max(errors) if errors else None,
        "frame_overhead_bytes": FRAME_OVERHEAD,
        "stats": asdict(total), "stats_per_repeat": per_repeat,
    }
    print(f"summary: {len(elapsed)}/{a.repeat} all-reduces, mean {mean:.3f} s "
          f"({summary['mb_per_s'] or 0:.2f} MB/s, {summary['elements_per_s'] or 0:.3g} elements/s); "
          f"sent {total.packets_sent} packets / {total.bytes_sent} B, received {total.packets_received} / "
          f"{total.bytes_received} B, {total.retransmissions} retransmissions, {total.duplicates} duplicates; "
          f"check {'passed' if summary['check_passed'] else 'FAILED'}")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(summary, indent=2) + "\n")
    print(f"wrote {out.resolve()}")
    return 0 if summary["check_passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
