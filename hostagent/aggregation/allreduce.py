"""All-reduce through the switch: the worker side of in-network aggregation
(docs/protocols/aggregation.md), SwitchML's protocol with ATP's fallback.

    worker = AggregationWorker(job=1, server_ip="10.0.9.1", n_workers=4)
    total = worker.allreduce(gradient)     # float32: sum over the job's workers

The array is cut into blocks of block_elements values (the job's: 64 to
256, ah.BLOCK_SIZES), each sent as one packet to
the job's parameter server; the switch that serves the server adds the
workers' packets in its slot registers and multicasts the sum back. Every
worker of the job calls allreduce with arrays of the same size, in the same
order, and starts from the same `seq_base`: a job's sequence numbers must
not repeat those of an earlier run whose results the switch still holds
(the command line derives the base from the agreed start time).

Quantisation (float arrays): blocks travel as int32. A block with largest
magnitude below 2^e on some worker is scaled by 2^(B - E) and rounded, where
E is the largest e over the workers and B = 30 - ceil(log2 n), so a sum of n
quantised values stays within int32: no overflow by construction. The
workers agree on E through the switch, which aggregates the maximum of the
packets' exponent fields: packet p carries block p's exponent, and the
elements of block p - L quantised with E(p - L), learned from packet p - L's
result (L = the window; the first L packets carry exponents only). The
error of a result element is at most n * 2^(E - B - 1) (half a unit per
worker): `error_bound()`. Integer arrays (integer=True) travel as they are,
exact; a sum that overflows int32 comes back flagged OVERFLOW and that block
is summed by the parameter server in int64.

Reliability: a window of W packets in flight; packet p uses slot p mod W and
shadow set (p / W) mod 2, and is sent only once the result of packet p - W
is in (the slot's previous use is then finished for every worker). A packet
without a result after the retransmission timeout (RFC 6298: smoothed round
trip + 4 deviations, from packets sent once) is sent again (flag
RETRANSMIT), with the timeout doubled up to MAX_RTO_S; the switch adds
nothing twice and answers a retransmission to a finished slot with the
result. Results are accepted in any order, duplicates ignored.

ECN on aggregation (PANAMA): with ecn=True the worker's packets are ECT(0),
so congested queues mark them CE instead of dropping them; the switches OR
the marks of a sum's contributions into its result (flag CONGESTED). A
worker that gets a CONGESTED result halves its window of packets in flight
(at most once per window: marks on packets sent before the last halving are
not counted again) and grows it by one packet per window of unmarked
results, up to the window W. Fallback to
the parameter server: when the server asks for a block (FALLBACK request:
its slot was held by another use), when the switch's sum overflowed, or
when FALLBACK_AFTER sends of a packet brought no result (its slot may have
been released and taken since: shared pools), the worker sends the block
to the server (FALLBACK), which gathers it from every worker; the server's
result is int64 (WIDE), in packets of up to WIDE_PART_ELEMENTS (a block of
256 is two). The previous call's packets
are kept to answer a server asking for a block of a call this worker has
finished.
"""
from __future__ import annotations

import math
import select
import socket
import time
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from hostagent.aggregation.sockets import job_socket
from hostagent.start import add_start_arguments, start_time
from wire import aggregation_codec as ah

DEFAULT_WINDOW = 32
ECT0 = 0x02                   # IP TOS: ECN-capable transport (ECT(0)), with ecn=True
MIN_RTO_S = 0.05              # retransmission timeout: RFC 6298 from measured round trips, within these
MAX_RTO_S = 0.1
FALLBACK_AFTER = 5            # sends of a packet without a result before it goes to the parameter server
PACING_BURST = 4              # rate_pps: packets a paced worker may send at once after a pause


@dataclass
class WorkerStats:
    """Counters over the worker's life (elapsed_s: the last call)."""
    packets_sent: int = 0
    bytes_sent: int = 0            # UDP payload bytes
    results: int = 0
    bytes_received: int = 0
    retransmissions: int = 0
    duplicate_results: int = 0
    fallback_blocks: int = 0       # blocks whose result came from the parameter server
    overflow_blocks: int = 0
    server_requests: int = 0
    timeout_fallbacks: int = 0     # packets sent to the server after FALLBACK_AFTER sends without a result
    timeouts_deferred: int = 0     # timeouts that did not look like a loss (no later packet answered yet)
    malformed: int = 0             # datagrams that were not aggregation packets (ignored)
    congested_results: int = 0     # results flagged CONGESTED (ECN on aggregation)
    window_decreases: int = 0      # halvings of the window in flight that they caused
    min_window: float = 0.0        # the smallest window in flight reached
    send_errors: int = 0           # packets the kernel refused to send (treated as lost)
    calls: int = 0
    elements: int = 0
    elapsed_s: float = 0.0
    srtt_ms: float = 0.0           # smoothed round trip (send to result) at the end of the last call


def block_exponents(blocks: np.ndarray) -> np.ndarray:
    """e per block with max |x| < 2^e (frexp's exponent), clamped to the
    header's biased byte."""
    peak = np.max(np.abs(blocks), axis=1).astype(np.float64)
    _, e = np.frexp(peak)
    return np.clip(e, -127, 127).astype(np.int64)


def headroom_bits(n_workers: int) -> int:
    """B: quantised magnitudes stay below 2^B, so n of them sum within int32."""
    return 30 - math.ceil(math.log2(n_workers)) if n_workers > 1 else 30


def error_bound(n_workers: int, exponent: int) -> float:
    """Largest quantisation error of a result element of a block with
    agreed exponent E; the result's rounding to float32 (|sum| x 2^-24) comes on top."""
    return n_workers * 2.0 ** (exponent - headroom_bits(n_workers) - 1)


class AllReduceTimeout(TimeoutError):
    pass


@dataclass
class _Call:
    base: int                         # seq of packet 0
    total: int                        # packets
    lead: int                         # L: packet p carries block p - L
    n_blocks: int
    exponents: np.ndarray             # local e per block
    blocks: np.ndarray                # (n_blocks, block_elements): float64 or int64
    integer: bool
    payloads: list = field(default_factory=list)   # packet p's bytes once built (None before)
    results: list = field(default_factory=list)    # (sums int64, biased exponent) per packet
    fallback: set = field(default_factory=set)
    timed_out: set = field(default_factory=set)    # fallen back for want of a result: ask the switch too
    sent_index: dict = field(default_factory=dict)  # packet p -> the worker's count of new packets when sent
    wide_parts: dict = field(default_factory=dict)  # packet p -> (int64 sums so far, parts missing): a WIDE result


class AggregationWorker:
    """One worker of job `job`, in its host's namespace (a UDP socket on the
    job's port). n_workers: the job's worker count (sets the quantisation).
    block_elements: the job's (its topology section's), int32 elements a
    packet carries. rate_pps: new packets at most this many a second (a
    bucket of PACING_BURST packets; None: as fast as the window allows),
    as a paced NIC sends: the collectives' ranks pace it at their channels'
    top rate, so that the switch's all-reduce and the ring's compare at
    one rate."""

    def __init__(self, job: int, server_ip: str, n_workers: int, *, bind_ip: str = "0.0.0.0",
                 window: int = DEFAULT_WINDOW, min_rto_s: float = MIN_RTO_S, max_rto_s: float = MAX_RTO_S,
                 timeout_s: float = 300.0, seq_base: int = 0, ecn: bool = False,
                 block_elements: int = ah.DEFAULT_BLOCK_ELEMENTS, rate_pps: float | None = None):
        self.port = ah.job_port(job)
        self.block_elements = ah.check_block_elements(block_elements)
        if not 1 <= n_workers <= ah.MAX_WORKERS:
            raise ValueError(f"n_workers must be 1..{ah.MAX_WORKERS}, got {n_workers}")
        if not 1 <= window <= 0x7FFF:
            raise ValueError(f"window must be 1..32767 (slots of the job), got {window}")
        if rate_pps is not None and not 0 < rate_pps < math.inf:
            raise ValueError(f"rate_pps must be above 0, got {rate_pps}")
        self.gap_s = 1.0 / rate_pps if rate_pps else 0.0     # between new packets, paced
        self._next_send_at = 0.0
        self.job, self.server, self.n_workers, self.window = job, (server_ip, self.port), n_workers, window
        self.min_rto_s, self.max_rto_s, self.timeout_s = min_rto_s, max_rto_s, timeout_s
        self.srtt: Optional[float] = None
        self.rttvar = 0.0
        self.stats = WorkerStats()
        self._seq = seq_base & 0xFFFFFFFF
        self._previous: Optional[_Call] = None
        self.sock = job_socket(job, bind_ip)
        if ecn:
            self.sock.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, ECT0)
        self.cwnd = float(window)          # packets in flight: halved by CONGESTED results, +1 per window
        self._recovery_p = 0               # marks on packets sent before this one were answered already
        self._sent_count = 0               # new packets sent over the worker's life (their order)
        self.stats.min_window = self.cwnd

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> "AggregationWorker":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- the call -------------------------------------------------------------

    def allreduce(self, array: np.ndarray, *, integer: Optional[bool] = None) -> np.ndarray:
        """The element-wise sum of every worker's `array` (same shape on all).
        Float arrays come back float32 (within error_bound per block);
        integer arrays (int8..int32; integer=True) come back int64, exact."""
        array = np.asarray(array)
        if integer is None:
            integer = np.issubdtype(array.dtype, np.integer)
        flat = array.reshape(-1)
        if flat.size == 0:
            raise ValueError("allreduce of an empty array")
        if integer:
            if not np.issubdtype(flat.dtype, np.integer):
                raise ValueError(f"integer=True needs an integer array, got {flat.dtype}")
            if flat.size and (flat.min() < -2**31 or flat.max() >= 2**31):
                raise ValueError("integer elements must fit int32")
        elif not np.all(np.isfinite(flat)):
            raise ValueError("allreduce of an array with NaN or infinity")
        n_blocks = -(-flat.size // self.block_elements)
        blocks = np.zeros((n_blocks, self.block_elements), np.int64 if integer else np.float64)
        blocks.reshape(-1)[:flat.size] = flat
        lead = 0 if integer else min(self.window, n_blocks)
        exponents = np.zeros(n_blocks, np.int64) if integer else block_exponents(blocks)
        call = _Call(self._seq, n_blocks + lead, lead, n_blocks, exponents, blocks, integer)
        call.payloads = [None] * call.total
        call.results = [None] * call.total
        self._seq = (self._seq + call.total) & 0xFFFFFFFF
        start = time.monotonic()
        self._run(call)
        self.stats.elapsed_s = time.monotonic() - start
        self.stats.srtt_ms = (self.srtt or 0.0) * 1000
        self.stats.calls += 1
        self.stats.elements += flat.size
        out = self._assemble(call)[:flat.size]
        self._previous = call
        return out.reshape(array.shape)

    def _exponent(self, call: _Call, p: int) -> int:
        """Packet p's exponent field: block p's local exponent (biased)."""
        return int(call.exponents[p]) + ah.EXPONENT_BIAS if p < call.n_blocks else ah.EXPONENT_BIAS

    def _payload(self, call: _Call, p: int, flags: int) -> bytes:
        if call.payloads[p] is None:
            b = p - call.lead
            if b < 0:
                data = None
            elif call.integer:
                data = call.blocks[b]
            else:
                agreed = call.results[b][1] - ah.EXPONENT_BIAS
                scale = 2.0 ** (headroom_bits(self.n_workers) - agreed)
                data = np.rint(call.blocks[b] * scale)
            slot = (p % self.window) | (ah.SLOT_SET if (p // self.window) & 1 else 0)
            call.payloads[p] = ah.pack(0, self.job, call.base + p, data, count=self.block_elements, slot=slot,
                                       exponent=self._exponent(call, p))
        payload = call.payloads[p]
        return bytes([flags]) + payload[1:] if flags else payload

    def _send(self, payload: bytes) -> None:
        """Hand a packet to the kernel. One it refuses (a full buffer, or
        EPERM: the host's own packet filter dropped it) is a lost packet,
        which the retransmission timer covers."""
        try:
            self.sock.sendto(payload, self.server)
        except (BlockingIOError, PermissionError, ConnectionRefusedError):
            self.stats.send_errors += 1
        self.stats.packets_sent += 1
        self.stats.bytes_sent += len(payload)

    @property
    def rto_s(self) -> float:
        if self.srtt is None:
            return 2 * self.min_rto_s
        return min(self.max_rto_s, max(self.min_rto_s, self.srtt + 4 * self.rttvar))

    def _rtt_sample(self, rtt: float) -> None:
        if self.srtt is None:
            self.srtt, self.rttvar = rtt, rtt / 2
        else:
            self.rttvar = 0.75 * self.rttvar + 0.25 * abs(self.srtt - rtt)
            self.srtt = 0.875 * self.srtt + 0.125 * rtt

    def _run(self, call: _Call) -> None:
        W, L = self.window, call.lead
        next_p = 0
        done = 0
        # p -> [resend at, timeout, sends, first sent, last sent, timeout deferred]
        outstanding: dict[int, list] = {}
        give_up = time.monotonic() + self.timeout_s
        self._newest_answered = self._last_result_at = time.monotonic()
        while done < call.total:
            now = time.monotonic()
            # New packets, as the window and the exponents they need allow.
            while (next_p < call.total and (next_p < W or call.results[next_p - W] is not None)
                   and (next_p < L or L == 0 or call.results[next_p - L] is not None)
                   and len(outstanding) < self.cwnd and now >= self._next_send_at):
                if self.gap_s:      # paced: a packet a gap, up to PACING_BURST at once after a pause
                    self._next_send_at = max(self._next_send_at, now - PACING_BURST * self.gap_s) + self.gap_s
                flags = ah.FLAG_FALLBACK if next_p in call.fallback else 0
                self._send(self._payload(call, next_p, flags))
                call.sent_index[next_p] = self._sent_count
                self._sent_count += 1
                rto = self.rto_s
                outstanding[next_p] = [now + rto, rto, 1, now, now, False]
                next_p += 1
            # Retransmissions. A block waits for every worker, so a result can
            # be late because others are slow: a timeout is deferred once
            # (one more timeout) unless it looks like a loss, i.e. a packet
            # sent after this one has its result already, or no result came
            # for a whole timeout. After FALLBACK_AFTER sends, to the server
            # as well.
            for p, state in outstanding.items():
                at, rto, sends, _, last, deferred = state
                if at <= now:
                    if not deferred and self._newest_answered <= last and now - self._last_result_at < rto:
                        state[0], state[5] = now + rto, True      # once per send
                        self.stats.timeouts_deferred += 1
                        continue
                    if sends >= FALLBACK_AFTER and p not in call.fallback:
                        call.fallback.add(p)
                        call.timed_out.add(p)
                        self.stats.timeout_fallbacks += 1
                    if p not in call.fallback or p in call.timed_out:
                        # (a finished slot answers with its result; the server may never hear of it)
                        self._send(self._payload(call, p, ah.FLAG_RETRANSMIT))
                    if p in call.fallback:
                        self._send(self._payload(call, p, ah.FLAG_RETRANSMIT | ah.FLAG_FALLBACK))
                    self.stats.retransmissions += 1
                    rto = min(rto * 2, self.max_rto_s)
                    state[:3] = [now + rto, rto, sends + 1]
                    state[4], state[5] = now, False
            if now > give_up:
                missing = sorted(outstanding)[:5]
                raise AllReduceTimeout(
                    f"job {self.job}: no result for packets {missing} (seq {[call.base + p for p in missing]}) "
                    f"after {self.timeout_s:.0f} s; {done}/{call.total} done")
            wait = min((s[0] for s in outstanding.values()), default=now + 0.05) - now
            if next_p < call.total and self._next_send_at > now:     # the pacing, not the window, holds the next
                wait = min(wait, self._next_send_at - now)
            readable, _, _ = select.select([self.sock], [], [], max(0.0, min(wait, 0.05)))
            if readable:
                done += self._receive(call, outstanding)

    def _receive(self, call: _Call, outstanding: dict) -> int:
        """Handle every waiting datagram; returns packets newly completed."""
        completed = 0
        while True:
            try:
                data, addr = self.sock.recvfrom(4096)
            except BlockingIOError:
                return completed
            try:
                pkt = ah.unpack(data)
            except ah.MalformedPacket:
                self.stats.malformed += 1
                continue
            if pkt.job != self.job:
                self.stats.malformed += 1
                continue
            self.stats.bytes_received += len(data)
            p = (pkt.seq - call.base) & 0xFFFFFFFF
            if pkt.flags & ah.FLAG_SERVER and pkt.flags & ah.FLAG_FALLBACK and not pkt.flags & ah.FLAG_RESULT:
                self.stats.server_requests += 1
                self._answer_request(call, p, pkt.seq)
                continue
            if not pkt.flags & ah.FLAG_RESULT or p >= call.total:
                continue                      # not ours to use (an old call's result, ...)
            if call.results[p] is not None:
                self.stats.duplicate_results += 1
                continue
            if pkt.flags & ah.FLAG_OVERFLOW:
                # The switch's sum overflowed: the server sums this block.
                if p not in call.fallback:
                    call.fallback.add(p)
                    self.stats.overflow_blocks += 1
                    if p in outstanding:
                        self._send(self._payload(call, p, ah.FLAG_FALLBACK))
                continue
            if pkt.flags & ah.FLAG_WIDE:
                sums = self._wide_part(call, p, pkt)
                if sums is None:
                    continue                  # more parts to come
            elif pkt.elements.size != self.block_elements:
                self.stats.malformed += 1     # not this job's block size
                continue
            else:
                sums = pkt.elements.astype(np.int64)
            call.results[p] = (sums, pkt.exponent)
            self._congestion(call, p, bool(pkt.flags & ah.FLAG_CONGESTED))
            if pkt.flags & ah.FLAG_SERVER:
                self.stats.fallback_blocks += 1
            self.stats.results += 1
            state = outstanding.pop(p, None)
            now = time.monotonic()
            self._last_result_at = now
            if state is not None:
                self._newest_answered = max(self._newest_answered, state[4])
                if state[2] == 1:                             # Karn: only packets sent once
                    self._rtt_sample(now - state[3])
            completed += 1

    def _wide_part(self, call: _Call, p: int, pkt: ah.AggPacket) -> Optional[np.ndarray]:
        """One packet of the server's int64 result of packet p: the block's
        sums once every part is in, else None."""
        if pkt.offset + pkt.elements.size > self.block_elements:
            self.stats.malformed += 1
            return None
        sums, missing = call.wide_parts.setdefault(
            p, (np.zeros(self.block_elements, np.int64), set(ah.wide_parts(self.block_elements))))
        part = (pkt.offset, pkt.elements.size)
        if part not in missing:
            self.stats.duplicate_results += 1
            return None
        sums[pkt.offset:pkt.offset + pkt.elements.size] = pkt.elements
        missing.discard(part)
        if missing:
            return None
        del call.wide_parts[p]
        return sums

    def _congestion(self, call: _Call, p: int, marked: bool) -> None:
        """The window's reaction to one result: halve on a mark (once per
        window), else grow by 1/cwnd (one packet per window)."""
        if marked:
            self.stats.congested_results += 1
            sent_at = call.sent_index.get(p, 0)
            if sent_at >= self._recovery_p:
                self.cwnd = max(1.0, self.cwnd / 2)
                self._recovery_p = self._sent_count
                self.stats.window_decreases += 1
                self.stats.min_window = min(self.stats.min_window, self.cwnd)
        else:
            self.cwnd = min(float(self.window), self.cwnd + 1.0 / self.cwnd)

    def _answer_request(self, call: _Call, p: int, seq: int) -> None:
        """The server asks for packet `seq`: send it there if it was sent
        (this call's or the previous), and send it there from now on."""
        if p < call.total:
            call.fallback.add(p)
            if call.payloads[p] is not None:
                self._send(self._payload(call, p, ah.FLAG_FALLBACK))
            return
        prev = self._previous
        if prev is not None:
            q = (seq - prev.base) & 0xFFFFFFFF
            if q < prev.total and prev.payloads[q] is not None:
                self._send(self._payload(prev, q, ah.FLAG_FALLBACK))

    def _assemble(self, call: _Call) -> np.ndarray:
        sums = np.stack([call.results[p + call.lead][0] for p in range(call.n_blocks)])
        if call.integer:
            return sums.reshape(-1)
        agreed = np.array([call.results[b][1] - ah.EXPONENT_BIAS for b in range(call.n_blocks)], np.float64)
        scale = np.exp2(headroom_bits(self.n_workers) - agreed)
        return (sums / scale[:, None]).astype(np.float32).reshape(-1)


# -- checking a result, and the command line ------------------------------------

DTYPES = ("float32", "int32", "int32-large")


def seq_base_at(start_at: float) -> int:
    """A job's first sequence number from the start time its workers agreed
    on (milliseconds, mod 2^32): runs started apart use different numbers."""
    return int(start_at * 1000) & 0xFFFFFFFF


def worker_input(seed: int, rank: int, elements: int, dtype: str) -> np.ndarray:
    """The deterministic input of worker `rank` (every worker can make everyone's)."""
    rng = np.random.default_rng([seed, rank])
    if dtype == "float32":
        return rng.standard_normal(elements).astype(np.float32)
    if dtype == "int32":
        return rng.integers(-1000, 1001, elements, dtype=np.int64).astype(np.int32)
    if dtype == "int32-large":     # |x| near 2^30: sums of 3 or more overflow int32 (the server's path)
        return (rng.choice([-1, 1], elements) * rng.integers(2**30, 2**31 - 1, elements)).astype(np.int32)
    raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")


def check(result: np.ndarray, inputs: list[np.ndarray],
          block_elements: int = ah.DEFAULT_BLOCK_ELEMENTS) -> tuple[bool, float, float]:
    """(within bound, largest error, largest bound) of an all-reduce of
    `inputs` in blocks of `block_elements`: exact for integers; for floats,
    the quantisation bound of each block (its agreed exponent from every
    input) plus float32 rounding."""
    exact = np.sum(np.stack([x.astype(np.float64 if x.dtype.kind == "f" else np.int64) for x in inputs]), axis=0)
    if result.dtype.kind in "iu":
        err = np.abs(result.astype(np.int64) - exact)
        return bool(np.all(err == 0)), float(err.max(initial=0)), 0.0
    n = len(inputs)
    padded = -(-exact.size // block_elements) * block_elements

    def blocks(x):
        b = np.zeros(padded, np.float64)
        b[:x.size] = x
        return b.reshape(-1, block_elements)

    agreed = np.max(np.stack([block_exponents(blocks(x)) for x in inputs]), axis=0)
    bound = np.repeat([error_bound(n, int(e)) for e in agreed], block_elements)[:exact.size]
    bound = bound + np.abs(exact) * 2.0 ** -23
    err = np.abs(result.astype(np.float64) - exact)
    return bool(np.all(err <= bound)), float(err.max(initial=0)), float(bound.max(initial=0))


def main(argv: Optional[list[str]] = None) -> int:
    import argparse
    import json
    from dataclasses import asdict
    from pathlib import Path

    ap = argparse.ArgumentParser(prog="python -m hostagent.aggregation.allreduce",
                                 description="One worker of an in-network all-reduce (run one per worker host).")
    ap.add_argument("--job", type=int, required=True, help=f"job id 1..{ah.MAX_JOBS} (the topology's aggregation:)")
    ap.add_argument("--server", required=True, help="the job's parameter server address")
    ap.add_argument("--rank", type=int, required=True, help="this worker's position in the job's worker list")
    ap.add_argument("--workers", type=int, required=True, help="the job's number of workers")
    ap.add_argument("--bind", default="0.0.0.0")
    ap.add_argument("--elements", type=int, default=1 << 20)
    ap.add_argument("--dtype", choices=DTYPES, default="float32",
                    help="inputs: float32 normal, int32 in [-1000, 1000], or int32-large (sums overflow int32)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--window", type=int, default=DEFAULT_WINDOW)
    ap.add_argument("--block-elements", type=int, default=ah.DEFAULT_BLOCK_ELEMENTS,
                    help=f"int32 elements a packet carries: the job's block_elements "
                         f"({', '.join(map(str, ah.BLOCK_SIZES))}; default {ah.DEFAULT_BLOCK_ELEMENTS})")
    ap.add_argument("--timeout-s", type=float, default=300.0, help="give up (exit 1) after this long without finishing")
    add_start_arguments(ap)
    ap.add_argument("--seq-base", type=int, default=None,
                    help="the job's first sequence number, the same on every worker (default: the start time in ms)")
    ap.add_argument("--ecn", action="store_true",
                    help="send ECT(0) and halve the window on results flagged CONGESTED (ECN on aggregation)")
    ap.add_argument("--out", default=None, help="write PREFIX.json: timings, counters, check")
    args = ap.parse_args(argv)
    if not 0 <= args.rank < args.workers:
        ap.error(f"--rank must be 0..{args.workers - 1}, got {args.rank}")
    if args.elements < 1:
        ap.error("--elements must be at least 1")
    start_at = start_time(args)         # with --start-file: once every worker is ready (hostagent/start.py)
    seq_base = args.seq_base if args.seq_base is not None else seq_base_at(start_at)
    try:
        worker = AggregationWorker(args.job, args.server, args.workers, bind_ip=args.bind, window=args.window,
                                   timeout_s=args.timeout_s, seq_base=seq_base, ecn=args.ecn,
                                   block_elements=args.block_elements)
    except (ValueError, OSError) as exc:
        ap.error(str(exc))
    mine = worker_input(args.seed, args.rank, args.elements, args.dtype)
    everyone = [worker_input(args.seed, r, args.elements, args.dtype) for r in range(args.workers)]
    if start_at:
        time.sleep(max(0.0, start_at - time.time()))
    runs, ok = [], True
    for i in range(args.repeat):
        try:
            result = worker.allreduce(mine)
        except AllReduceTimeout as exc:
            print(f"worker {args.rank}: {exc}", flush=True)
            ok = False
            break
        good, err, bound = check(result, everyone, worker.block_elements)
        ok &= good
        s = worker.stats.elapsed_s
        runs.append({"elapsed_s": s, "elements_per_s": args.elements / s, "max_error": err, "bound": bound,
                     "within_bound": good})
        print(f"worker {args.rank} job {args.job}: all-reduce {i + 1}/{args.repeat} of {args.elements} "
              f"{args.dtype} in {s:.2f} s ({args.elements / s / 1e6:.3f} M elements/s), "
              f"{'exact' if good and err == 0 else 'within bound' if good else 'WRONG'} "
              f"(max error {err:.3g}, bound {bound:.3g})", flush=True)
    st = worker.stats
    print(f"worker {args.rank}: {st.packets_sent} packets sent ({st.retransmissions} again), {st.results} results "
          f"({st.fallback_blocks} from the server, {st.overflow_blocks} overflowed, "
          f"{st.duplicate_results} duplicates, {st.congested_results} congested: window halved "
          f"{st.window_decreases} times, down to {st.min_window:g})", flush=True)
    worker.close()
    if args.out:
        path = Path(args.out + ".json")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"job": args.job, "rank": args.rank, "workers": args.workers,
                                    "elements": args.elements, "dtype": args.dtype, "ok": ok, "runs": runs,
                                    "stats": asdict(st)}, indent=2) + "\n")
        print(f"worker {args.rank}: results in {path}", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
