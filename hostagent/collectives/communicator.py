"""A communicator: one rank of a group of hosts running collectives over the
RC transport (hostagent/rdma/endpoint.py), by the schedules of schedule.py.

Each ordered pair of ranks is joined by `channels` connections (queue pairs
CHANNEL_QP_BASE + c, each from its own UDP source port, as NCCL opens
several channels per peer); a transfer of a schedule is cut into `channels`
nearly equal pieces, piece c on channel c. A piece is one message: a
12-byte header (magic, call, step, element offset) and the elements in the
collective's dtype (little-endian, numpy's native order here). Connections
deliver in order, so a rank knows which piece comes next from each peer and
channel; a piece of a later step waits in its inbox until the rank gets
there. Pieces are applied in the schedule's order, so a float result is the
same bytes as schedule.run_in_memory's, on every rank.

The transport makes progress in a thread of its own (as NCCL's proxy
thread does): between collectives, while the application computes or waits
in something else (DDP's own process group), the rank still acknowledges
its peers' pieces and resends its own, so no peer waits on a rank that is
busy elsewhere. The endpoint is used under one lock.

A rank that does not answer is an error naming it: a connection to or from
it failed (its retry count exceeded, as soon as the transport gives up, or
the two ranks run different retransmission modes or congestion controls),
or, failing that, nothing came from it within `timeout_s`. A rank that
gives up tells every other rank at once (an abort message on channel 0, as
NCCL's abort reaches the whole communicator): a rank waiting on the dead
one, which has no connection of its own that could fail (in a ring, the
dead rank's successor), fails as soon as the abort arrives, naming the rank
that gave up and why, not after its own `timeout_s`.

In-network all-reduce (algorithm IN_NETWORK): the communicator hands the
array to the aggregation feature's worker (hostagent/aggregation/allreduce.py,
docs/protocols/aggregation.md): the switch of the job's parameter server sums
the ranks' packets and multicasts the sum back. The ranks must be exactly
the workers of that aggregation job. Float arrays travel quantised to int32
(within the worker's error bound: exact for values on a coarse enough grid,
such as the sweep's small integers); int32 arrays exactly.
"""
from __future__ import annotations

import struct
import threading
import time
from collections import defaultdict, deque
from dataclasses import dataclass
from typing import Callable, Sequence

import argparse

import numpy as np

from hostagent.aggregation.allreduce import AggregationWorker, AllReduceTimeout
from wire import aggregation as ah
from hostagent.collectives import schedule as sc
from hostagent.rdma.agent import congestion_controls
from hostagent.rdma.endpoint import Connection, Endpoint, RawLink
from hostagent.rdma.transport import MODES, Message, TransportParams

CHANNEL_QP_BASE = 0x100          # queue pair of channel c between two ranks: base + c
MAX_CHANNELS = 64
MAX_JOBS = 4
JOB_QPS = 0x40                   # queue pairs per job (its channels): job j uses CHANNEL_QP_BASE + JOB_QPS j ...
PIECE_HEADER = struct.Struct("<HHII")   # magic, call (mod 2^16), step, element offset in the receiver's buffer
PIECE_MAGIC = 0xC011
ABORT_MAGIC = 0xAB07             # a rank gave up: the header's other fields 0, then the reason (UTF-8)
ABORT_REASON_BYTES = 512
P2P_STEP = 0xFFFFFFFF            # the step field of a point-to-point piece (the call field: its number)
SPORT_BASE = 0xC000              # RoCEv2 source ports: 0xC000-0xFFFF
PROGRESS_WAIT_S = 0.0005         # the progress thread's longest wait for a frame (the pacing's grain)
IN_NETWORK = "in-network"        # all-reduce summed by the switch (the aggregation feature)
ALL_REDUCE_ALGORITHMS = [*sc.algorithms_of(sc.ALL_REDUCE), IN_NETWORK]
IN_NETWORK_DTYPES = ("float32", "int32")


def default_sport(rank: int, peer: int, channel: int) -> int:
    """A source port per (rank, peer, channel), spread over RoCEv2's range;
    a path-aware caller gives its own."""
    return SPORT_BASE + (rank * 131 + peer * 31 + channel * 7919) % 0x4000


class CollectiveError(RuntimeError):
    pass


@dataclass(frozen=True)
class CallRecord:
    """One collective as this rank saw it: from its start to its last piece."""
    call: int
    collective: str
    algorithm: str
    ranks: int
    elements: int
    dtype: str
    itemsize: int
    seconds: float

    @property
    def bandwidths(self) -> tuple[float, float]:
        """(algorithm bandwidth, bus bandwidth) in bytes/s, as nccl-tests."""
        return sc.bandwidths(self.collective, self.ranks, self.elements, self.itemsize, self.seconds)


class Communicator:
    def __init__(self, endpoint: Endpoint, addresses: Sequence[str], rank: int, channels: int = 1,
                 sport_of: Callable[[int, int, int], int] = default_sport, timeout_s: float = 60.0,
                 qp_base: int = CHANNEL_QP_BASE, aggregation: AggregationWorker | None = None):
        if len(set(addresses)) != len(addresses):
            raise ValueError(f"addresses must be distinct, got {list(addresses)}")
        if not 0 <= rank < len(addresses):
            raise ValueError(f"rank must be within 0..{len(addresses) - 1}, got {rank}")
        if addresses[rank] != endpoint.ip:
            raise ValueError(f"rank {rank}'s address is {addresses[rank]}, but the endpoint's is {endpoint.ip}")
        if not 1 <= channels <= MAX_CHANNELS:
            raise ValueError(f"channels must be within 1..{MAX_CHANNELS}, got {channels}")
        if aggregation is not None and aggregation.n_workers != len(addresses):
            raise ValueError(f"the aggregation job has {aggregation.n_workers} workers, the communicator "
                             f"{len(addresses)} ranks: the ranks must be the job's workers")
        self.endpoint = endpoint
        self.aggregation = aggregation
        self.addresses = list(addresses)
        self.rank = rank
        self.size = len(addresses)
        self.channels = channels
        self.timeout_s = timeout_s
        self.qp_base = qp_base
        self._rank_of = {ip: r for r, ip in enumerate(self.addresses)}
        self._out: dict[tuple[int, int], Connection] = {}
        for peer in range(self.size):
            if peer != rank:
                for c in range(channels):
                    self._out[(peer, c)] = endpoint.connect(addresses[peer], qp_base + c, sport_of(rank, peer, c))
        self._inbox: defaultdict[tuple[int, int], deque[bytes]] = defaultdict(deque)
        self.calls = 0
        self.records: list[CallRecord] = []
        self._p2p_sent: defaultdict[int, int] = defaultdict(int)
        self._p2p_received: defaultdict[int, int] = defaultdict(int)
        self._gave_up: dict[int, str] = {}         # rank -> the reason it sent in its abort
        self._abort_sent = False
        self._lock = threading.Lock()
        self._arrived = threading.Condition(self._lock)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._progress, name=f"collectives-rank{rank}", daemon=True)
        self._thread.start()

    def __enter__(self) -> "Communicator":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _progress(self) -> None:
        errors = 0
        while not self._stop.is_set():
            with self._lock:
                got = self.endpoint.poll(wait=0)
                for m in got:
                    self._file(m.peer, m.qp, m.data)
                if got or len(self.endpoint.errors) > errors:      # (a failed connection wakes the waiters)
                    errors = len(self.endpoint.errors)
                    self._arrived.notify_all()
            if not got:
                self.endpoint.link.wait(PROGRESS_WAIT_S)

    def transport_stats(self) -> dict:
        """What the transport did for this rank: packets resent, timeouts,
        frames ignored by reason."""
        conns = self.endpoint.connections.values()
        agg = self.aggregation.stats if self.aggregation is not None else None
        stats: dict = {"retransmitted": sum(c.requester.stats.retransmitted for c in conns)
                       + (agg.retransmissions if agg else 0),
                       "timeouts": sum(c.requester.stats.timeouts for c in conns),
                       "ignored": dict(self.endpoint.ignored)}
        if agg is not None:        # the in-network all-reduces' packets
            stats["in_network"] = {"packets_sent": agg.packets_sent, "retransmissions": agg.retransmissions,
                                   "fallback_blocks": agg.fallback_blocks, "overflow_blocks": agg.overflow_blocks}
        return stats

    # -- the collectives ----------------------------------------------------------

    def all_reduce(self, x: np.ndarray, algorithm: str = sc.RING, **options) -> np.ndarray:
        return self.run(sc.ALL_REDUCE, algorithm, x, **options)

    def reduce_scatter(self, x: np.ndarray, algorithm: str = sc.RING) -> np.ndarray:
        return self.run(sc.REDUCE_SCATTER, algorithm, x)

    def all_gather(self, x: np.ndarray, algorithm: str = sc.RING) -> np.ndarray:
        return self.run(sc.ALL_GATHER, algorithm, x)

    def broadcast(self, x: np.ndarray, root: int = 0) -> np.ndarray:
        return self.run(sc.BROADCAST, sc.TREE, x, root=root)

    def all_to_all(self, x: np.ndarray) -> np.ndarray:
        return self.run(sc.ALL_TO_ALL, sc.PAIRWISE, x)

    def run(self, collective: str, algorithm: str, x: np.ndarray, **options) -> np.ndarray:
        """This rank's part of one collective; every rank calls it with the
        same collective, algorithm, length and dtype."""
        x = np.ascontiguousarray(x)
        if x.ndim != 1:
            raise ValueError(f"{collective}: a one-dimensional array is expected, got shape {x.shape}")
        if algorithm == IN_NETWORK:
            return self._in_network(collective, x)
        sched = sc.schedule(collective, algorithm, self.size, len(x), **options)
        call = self.calls
        self.calls += 1
        size, _, _ = sc.buffer_layout(collective, self.size, len(x))
        buf = np.zeros(size, dtype=x.dtype)
        buf[sc.input_slice(collective, self.size, len(x), self.rank)] = x
        start = time.monotonic()
        for step_no in range(len(sched.steps)):
            self._step(sched, call, step_no, buf)
        self.records.append(CallRecord(call, collective, algorithm, self.size, len(x), x.dtype.name, x.dtype.itemsize,
                                       time.monotonic() - start))
        return buf[sc.output_slice(collective, self.size, len(x), self.rank)].copy()

    def _in_network(self, collective: str, x: np.ndarray) -> np.ndarray:
        if collective != sc.ALL_REDUCE:
            raise ValueError(f"{IN_NETWORK} is an all-reduce algorithm, not one of {collective}")
        if self.aggregation is None:
            raise ValueError(f"{IN_NETWORK} all-reduce needs the switch's aggregation job: open the communicator "
                             f"with aggregation= (the command line: --aggregation-job and --aggregation-server)")
        if x.dtype.name not in IN_NETWORK_DTYPES:
            raise ValueError(f"{IN_NETWORK} all-reduce carries {' or '.join(IN_NETWORK_DTYPES)}, got {x.dtype.name}")
        call = self.calls
        self.calls += 1
        start = time.monotonic()
        try:
            summed = self.aggregation.allreduce(x)
        except AllReduceTimeout as e:
            with self._lock:
                raise self._give_up(f"{sc.ALL_REDUCE} ({IN_NETWORK}) call {call}: {e}") from e
        self.records.append(CallRecord(call, collective, IN_NETWORK, self.size, len(x), x.dtype.name,
                                       x.dtype.itemsize, time.monotonic() - start))
        return summed.astype(x.dtype)      # int32: the worker sums in int64; wrap as numpy's int32 sum does

    def close(self, timeout_s: float = 10.0) -> None:
        """Keep the transport going until the peers acknowledged everything
        sent (the last pieces may still need a retransmission), then stop
        the progress thread."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self._lock:
                if self.endpoint.idle:
                    break
            time.sleep(0.005)
        self._stop.set()
        self._thread.join()
        if self.aggregation is not None:
            self.aggregation.close()

    # -- point to point (pipeline parallelism) -----------------------------------

    def send(self, x: np.ndarray, peer: int) -> None:
        """Post `x` to `peer` (returns at once; the transport delivers it in
        the background). The peer calls recv with the same length and dtype;
        between two ranks, sends and receives pair up in the order issued."""
        x = np.ascontiguousarray(x)
        self._check_peer(peer)
        seq = self._p2p_sent[peer]
        self._p2p_sent[peer] += 1
        now = time.monotonic()
        for c, off, count in self._pieces(sc.Transfer(self.rank, peer, 0, 0, len(x), False)):
            header = PIECE_HEADER.pack(PIECE_MAGIC, seq & 0xFFFF, P2P_STEP, off)
            with self._lock:
                self._posted(self._out[(peer, c)].post(header + x[off:off + count].tobytes(), now), peer,
                             f"send {seq}")

    def recv(self, peer: int, count: int, dtype) -> np.ndarray:
        """The next array of `count` elements `peer` sent with send()."""
        self._check_peer(peer)
        out = np.empty(count, dtype=dtype)
        seq = self._p2p_received[peer]
        self._p2p_received[peer] += 1
        deadline = time.monotonic() + self.timeout_s
        t = sc.Transfer(peer, self.rank, 0, 0, count, False)
        for c, off, n in self._pieces(t):
            msg = self._next_piece(peer, c, deadline, "receive", seq)
            got = PIECE_HEADER.unpack_from(msg)
            if got != (PIECE_MAGIC, seq & 0xFFFF, P2P_STEP, off) or len(msg) != PIECE_HEADER.size + n * out.itemsize:
                with self._lock:
                    raise self._give_up(f"receive {seq} from rank {peer}: got call {got[1]} step {got[2]} "
                                        f"offset {got[3]}, {len(msg) - PIECE_HEADER.size} bytes; expected a send "
                                        f"of {count} {out.dtype.name} (do the two ranks pair sends and receives?)")
            out[off:off + n] = np.frombuffer(msg, dtype=out.dtype, offset=PIECE_HEADER.size)
        return out

    def _check_peer(self, peer: int) -> None:
        if not 0 <= peer < self.size or peer == self.rank:
            raise ValueError(f"peer must be another rank (0..{self.size - 1}, not {self.rank}), got {peer}")

    # -- one step -----------------------------------------------------------------

    def _pieces(self, t: sc.Transfer) -> list[tuple[int, int, int]]:
        """(channel, offset within the transfer, count) of a transfer's pieces."""
        cut = sc.bounds(t.count, self.channels)
        return [(c, cut[c], cut[c + 1] - cut[c]) for c in range(self.channels) if cut[c + 1] > cut[c]]

    def _step(self, sched: sc.Schedule, call: int, step_no: int, buf: np.ndarray) -> None:
        sends, recvs = sched.transfers_of(self.rank, step_no)
        now = time.monotonic()
        local = [(t, buf[t.src_start:t.src_start + t.count].copy()) for t in sends if t.dst == self.rank]
        for t in sends:
            if t.dst == self.rank:
                continue
            for c, off, count in self._pieces(t):
                data = buf[t.src_start + off:t.src_start + off + count]
                header = PIECE_HEADER.pack(PIECE_MAGIC, call & 0xFFFF, step_no, t.dst_start + off)
                with self._lock:
                    self._posted(self._out[(t.dst, c)].post(header + data.tobytes(), now), t.dst,
                                 f"{sched.collective} ({sched.algorithm}) step {step_no}")
        for t, data in local:
            self._apply(buf, t, 0, data)
        deadline = time.monotonic() + self.timeout_s
        for t in recvs:
            if t.src == self.rank:
                continue
            for c, off, count in self._pieces(t):
                msg = self._next_piece(t.src, c, deadline, f"{sched.collective} ({sched.algorithm})", step_no)
                magic, got_call, got_step, got_offset = PIECE_HEADER.unpack_from(msg)
                if (magic, got_call, got_step, got_offset) != (PIECE_MAGIC, call & 0xFFFF, step_no,
                                                                t.dst_start + off) \
                        or len(msg) != PIECE_HEADER.size + count * buf.itemsize:
                    with self._lock:
                        raise self._give_up(
                            f"{sched.collective} call {call} step {step_no}: rank {t.src} channel {c} sent call "
                            f"{got_call} step {got_step} offset {got_offset}, {len(msg) - PIECE_HEADER.size} "
                            f"bytes; expected offset {t.dst_start + off}, {count * buf.itemsize} bytes (do all "
                            f"ranks run the same collectives with the same lengths and dtype?)")
                self._apply(buf, t, off, np.frombuffer(msg, dtype=buf.dtype, offset=PIECE_HEADER.size))

    @staticmethod
    def _apply(buf: np.ndarray, t: sc.Transfer, off: int, data: np.ndarray) -> None:
        dst = buf[t.dst_start + off:t.dst_start + off + len(data)]
        if t.reduce:
            dst += data
        else:
            dst[:] = data

    def _posted(self, msg: Message, peer: int, what: str) -> None:
        """A piece posted to `peer`: on a failed connection it failed at once.
        (Called with the lock held.)"""
        if msg.error is not None:
            raise self._give_up(f"{what}: the connection with rank {peer} ({self.addresses[peer]}) failed: "
                                f"{msg.error}")

    def _check_connections(self, what: str) -> None:
        """A connection to or from one of the ranks failed, or a rank gave
        up: the collective cannot complete. (Called with the lock held.)"""
        for e in self.endpoint.errors:
            peer = self._rank_of.get(e.peer)
            if peer is not None:
                raise self._give_up(f"{what}: the connection with rank {peer} ({e.peer}) failed: {e}")
        for peer, reason in self._gave_up.items():
            raise CollectiveError(f"{what}: rank {peer} ({self.addresses[peer]}) gave up: {reason}")

    def _give_up(self, reason: str) -> CollectiveError:
        """The error to raise for `reason`, once every other rank has been
        sent an abort naming it, so none of them waits out its timeout on
        this rank. (With the lock held; the progress thread sends the
        aborts, close() lets them out.)"""
        if not self._abort_sent:
            self._abort_sent = True
            abort = PIECE_HEADER.pack(ABORT_MAGIC, 0, 0, 0) + f"rank {self.rank}: {reason}".encode()[
                :ABORT_REASON_BYTES]
            now = time.monotonic()
            for peer in range(self.size):
                if peer != self.rank:
                    self._out[(peer, 0)].post(abort, now)      # (on a failed connection: fails at once)
        return CollectiveError(reason)

    def _next_piece(self, peer: int, channel: int, deadline: float, what: str, step_no: int) -> bytes:
        box = self._inbox[(peer, channel)]
        with self._arrived:
            while not box:
                self._check_connections(f"{what} step {step_no}")
                left = deadline - time.monotonic()
                if left <= 0 or not self._thread.is_alive():
                    raise self._give_up(f"{what} step {step_no}: nothing from "
                                        f"rank {peer} ({self.addresses[peer]}) channel {channel} within "
                                        f"{self.timeout_s} s")
                self._arrived.wait(min(left, 0.05))
            return box.popleft()

    def _file(self, peer_ip: str, qp: int, data: bytes) -> None:
        peer = self._rank_of.get(peer_ip)
        channel = qp - self.qp_base
        if peer is None or not 0 <= channel < self.channels:
            self.endpoint.ignored["a message from outside the communicator"] += 1
            return
        if len(data) >= PIECE_HEADER.size and PIECE_HEADER.unpack_from(data)[0] == ABORT_MAGIC:
            self._gave_up.setdefault(peer, data[PIECE_HEADER.size:].decode(errors="replace"))
            return
        self._inbox[(peer, channel)].append(data)


def nccl_tests_table(records: Sequence[CallRecord]) -> str:
    """nccl-tests' columns for a size sweep: size, count, type, time, algbw, busbw."""
    lines = [f"{'size (B)':>12} {'count':>10} {'type':>6} {'time (us)':>12} {'algbw (GB/s)':>13} "
             f"{'busbw (GB/s)':>13}"]
    for r in records:
        algbw, busbw = r.bandwidths
        lines.append(f"{sc.size_bytes(r.collective, r.ranks, r.elements, r.itemsize):>12} {r.elements:>10} "
                     f"{r.dtype:>6} {1e6 * r.seconds:>12.1f} "
                     f"{algbw / 1e9:>13.6f} {busbw / 1e9:>13.6f}")
    return "\n".join(lines)


def open_communicator(rank: int, addresses: Sequence[str], iface: str, src_ip: str, src_mac: str, gw_mac: str,
                      cc: str = "dcqcn", mode: str = MODES[0], line_rate_pps: float = 1000.0, mtu: int = 1024,
                      channels: int = 1, timeout_s: float = 60.0, dscp: int = 0, job: int = 0,
                      sport_of: Callable[[int, int, int], int] = default_sport,
                      aggregation: tuple[int, str, int, int] | None = None) -> Communicator:
    """A communicator on the host's interface (raw socket), as the fabric's
    hosts use: `job`'s queue pairs only, so jobs share hosts. aggregation:
    (aggregation job, its parameter server's address, first sequence number,
    the same on every rank, the job's block_elements) for the in-network
    all-reduce."""
    if not 0 <= job < MAX_JOBS:
        raise ValueError(f"job must be within 0..{MAX_JOBS - 1}, got {job}")
    if channels > JOB_QPS:
        raise ValueError(f"channels must be at most {JOB_QPS} (a job's queue pairs), got {channels}")
    params = TransportParams(mode=mode, mtu_bytes=mtu)
    make_cc = congestion_controls()[cc]
    options = argparse.Namespace(line_rate_pps=line_rate_pps, mtu=mtu)
    qp_base = CHANNEL_QP_BASE + JOB_QPS * job
    endpoint = Endpoint(RawLink(iface), src_ip, src_mac, gw_mac, params, lambda: make_cc(options), dscp=dscp,
                        accept_qps=range(qp_base, qp_base + JOB_QPS))
    worker = None
    if aggregation is not None:
        agg_job, server_ip, seq_base, block_elements = aggregation
        worker = AggregationWorker(agg_job, server_ip, len(addresses), bind_ip=src_ip, timeout_s=timeout_s,
                                   seq_base=seq_base, block_elements=block_elements)
    try:
        return Communicator(endpoint, list(addresses), rank, channels=channels, sport_of=sport_of,
                            timeout_s=timeout_s, qp_base=qp_base, aggregation=worker)
    except ValueError:
        if worker is not None:
            worker.close()
        raise
