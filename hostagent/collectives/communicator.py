"""A communicator: one rank of a group of hosts running collectives over the
RC transport (hostagent/rdma/endpoint.py), or UET's (mode "uet":
hostagent/rdma/uet_endpoint.py, which hands each connection's messages up
in the order they were posted), by the schedules of schedule.py.

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
busy elsewhere. The endpoint is used under one lock. Between frames the
thread sleeps until the endpoint's next timer (Endpoint.next_due: a paced
packet, a retransmission timeout, a delayed ACK, a pause's end); a post
wakes it (Link.wake).

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
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

import argparse

import numpy as np

from control.path_assignment import default_sport
from emulator.dilation import Dilation
from hostagent.aggregation.allreduce import AggregationWorker, AllReduceTimeout
from hostagent.collectives import schedule as sc
from hostagent.rdma.agent import RECEIVER_CC_PARAMS, cc_param_values, congestion_controls, uet_congestion_controls
from hostagent.rdma.endpoint import Connection, Endpoint, RawLink
from hostagent.rdma.transport import MODES, Message, TransportParams
from hostagent.rdma.uet import UetMessage, UetParams
from hostagent.rdma.uet_agent import UET
from hostagent.rdma.uet_endpoint import UetConnection, UetEndpoint

TRANSPORT_MODES = (*MODES, UET)

CHANNEL_QP_BASE = 0x100          # queue pair of channel c between two ranks: base + c
MAX_CHANNELS = 64
MAX_JOBS = 4
JOB_QPS = 0x40                   # queue pairs per job (its channels): job j uses CHANNEL_QP_BASE + JOB_QPS j ...
PIECE_HEADER = struct.Struct("<HHII")   # magic, call (mod 2^16), step, element offset in the receiver's buffer
PIECE_MAGIC = 0xC011
ABORT_MAGIC = 0xAB07             # a rank gave up: the header's other fields 0, then the reason (UTF-8)
ABORT_REASON_BYTES = 512
P2P_STEP = 0xFFFFFFFF            # the step field of a point-to-point piece (the call field: its number)
# The progress thread sleeps until the endpoint's next timer (a paced packet, a retransmission timeout, a
# delayed ACK), a frame, or a post wakes it; at most IDLE_WAIT_S, and PROGRESS_WAIT_S where a timer is due
# but its time is not exposed (UET's senders) or the link cannot be woken (the old fixed grain). At a fixed
# 0.5 ms grain, 16 idle ranks woke 32,000 times a second: 0.67 of this machine's two cores in a fat-tree-k4
# `fabric train` at 110 packets/s a connection, beside 0.91 for its 20 switches (2026-12-01).
PROGRESS_WAIT_S = 0.0005
IDLE_WAIT_S = 0.05
IN_NETWORK = "in-network"        # all-reduce summed by the switch (the aggregation feature)
ALL_REDUCE_ALGORITHMS = [*sc.algorithms_of(sc.ALL_REDUCE), IN_NETWORK]
IN_NETWORK_DTYPES = ("float32", "int32")
FIXED, LEAST_LOADED = "fixed", "least-loaded"
CHANNEL_CHOICES = (FIXED, LEAST_LOADED)      # how a transfer's pieces go on a peer's channels
LEAST_LOADED_WINDOW_PIECES = 4   # least-loaded: a connection takes a piece while it has fewer bytes than this
                                 # many pieces outstanding (more commits data to a channel before its ACKs
                                 # say how fast it goes; fewer caps a channel at this much per round trip)


def choose_channel(outstanding: Sequence[int | None]) -> int | None:
    """HPN's choice: the channel with the fewest bytes outstanding (the
    lowest-numbered of equals); None marks a failed connection, never
    chosen. None if every one failed."""
    best, best_load = None, 0
    for c, load in enumerate(outstanding):
        if load is not None and (best is None or load < best_load):
            best, best_load = c, load
    return best


def piece_cuts(count: int, per_piece: int) -> list[tuple[int, int]]:
    """(offset, elements) of least-loaded's pieces of a transfer of `count`
    elements: `per_piece` each, the last one shorter."""
    return [(off, min(per_piece, count - off)) for off in range(0, count, per_piece)]


def _behind(tag: tuple[int, int], call: int, step: int) -> bool:
    """Whether a piece of (call, step) comes before `tag` (call mod 2^16,
    step) in the order a rank sends: a collective's earlier call or step, or
    an earlier send (point-to-point pieces and collectives' are not
    ordered against each other by number)."""
    if (step == P2P_STEP) != (tag[1] == P2P_STEP):
        return False
    behind = (tag[0] - call) % 0x10000
    return 0 < behind < 0x8000 or (behind == 0 and step < tag[1])


def progress_wait(due: float | None, now: float, wakes: bool) -> float:
    """How long the progress thread sleeps (unless a frame comes) when the
    endpoint's next timer is at `due` (None: none) and it is `now`; `wakes`:
    whether a post can end the sleep (Link.wake)."""
    if not wakes:
        return PROGRESS_WAIT_S
    if due is None:
        return IDLE_WAIT_S
    return PROGRESS_WAIT_S if due <= now else min(due - now, IDLE_WAIT_S)


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


@dataclass
class _Want:
    """least-loaded: the pieces of one transfer (or receive) a rank waits
    for from `peer`: offset -> elements, still missing; those arrived."""
    peer: int
    pending: dict[int, int]
    got: list[tuple[int, bytes]] = field(default_factory=list)


class Communicator:
    def __init__(self, endpoint: Endpoint | UetEndpoint, addresses: Sequence[str], rank: int, channels: int = 1,
                 sport_of: Callable[[int, int, int], int] = default_sport, timeout_s: float = 60.0,
                 qp_base: int = CHANNEL_QP_BASE, aggregation: AggregationWorker | None = None,
                 channel_choice: str = FIXED):
        if len(set(addresses)) != len(addresses):
            raise ValueError(f"addresses must be distinct, got {list(addresses)}")
        if not 0 <= rank < len(addresses):
            raise ValueError(f"rank must be within 0..{len(addresses) - 1}, got {rank}")
        if addresses[rank] != endpoint.ip:
            raise ValueError(f"rank {rank}'s address is {addresses[rank]}, but the endpoint's is {endpoint.ip}")
        if not 1 <= channels <= MAX_CHANNELS:
            raise ValueError(f"channels must be within 1..{MAX_CHANNELS}, got {channels}")
        if channel_choice not in CHANNEL_CHOICES:
            raise ValueError(f"channel_choice must be one of {', '.join(CHANNEL_CHOICES)}, got {channel_choice!r}")
        if aggregation is not None and aggregation.n_workers != len(addresses):
            raise ValueError(f"the aggregation job has {aggregation.n_workers} workers, the communicator "
                             f"{len(addresses)} ranks: the ranks must be the job's workers")
        self.endpoint = endpoint
        self.aggregation = aggregation
        self.addresses = list(addresses)
        self.rank = rank
        self.size = len(addresses)
        self.channels = channels
        self.channel_choice = channel_choice
        # least-loaded: a piece's bytes on the wire (header and elements), one ACK's worth of packets
        self.piece_bytes = endpoint.params.ack_every * endpoint.params.mtu_bytes
        self.window_bytes = LEAST_LOADED_WINDOW_PIECES * self.piece_bytes
        self.channel_bytes = [0] * channels          # bytes posted on each channel (all peers), headers included
        self._queued: dict[int, deque[bytes]] = {}   # least-loaded: pieces to each peer not yet posted, in order
        self.timeout_s = timeout_s
        self.qp_base = qp_base
        self._rank_of = {ip: r for r, ip in enumerate(self.addresses)}
        self._out: dict[tuple[int, int], Connection | UetConnection] = {}
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
        self._link_wake = getattr(endpoint.link, "wake", None)     # (a link without it: the fixed grain)
        self._thread = threading.Thread(target=self._progress, name=f"collectives-rank{rank}", daemon=True)
        self._thread.start()

    def __enter__(self) -> "Communicator":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _progress(self) -> None:
        errors = 0
        wakes = self._link_wake is not None
        while not self._stop.is_set():
            with self._lock:
                got = self.endpoint.poll(wait=0)
                for m in got:
                    self._file(m.peer, m.qp, m.data)
                if self._queued:
                    self._pump()
                if got or len(self.endpoint.errors) > errors:      # (a failed connection wakes the waiters)
                    errors = len(self.endpoint.errors)
                    self._arrived.notify_all()
                due, now = self.endpoint.next_due(), self.endpoint.clock()
            if not got:
                self.endpoint.link.wait(progress_wait(due, now, wakes))

    def _wake(self) -> None:
        """Something was posted (or the thread should stop): the progress
        thread, asleep until its next timer, runs now."""
        if self._link_wake is not None:
            self._link_wake()

    def transport_stats(self) -> dict:
        """What the transport did for this rank: packets resent, timeouts,
        frames ignored by reason, PFC pauses of its class received and the
        seconds it was paused (the endpoint honouring them: docs/rdma.md)."""
        conns = self.endpoint.connections.values()
        agg = self.aggregation.stats if self.aggregation is not None else None
        channel_resent = [sum(self._out[(p, c)].requester.stats.retransmitted for p in range(self.size)
                              if p != self.rank) for c in range(self.channels)]
        pfc = self.endpoint.pause_stats()
        stats: dict = {"retransmitted": sum(c.requester.stats.retransmitted for c in conns)
                       + (agg.retransmissions if agg else 0),
                       "timeouts": sum(c.requester.stats.timeouts for c in conns),
                       "ignored": dict(self.endpoint.ignored),
                       "tclass": pfc.tclass, "pfc_frames": pfc.pfc_frames, "pauses_received": pfc.pauses,
                       "resumes_received": pfc.resumes, "paused_s": round(pfc.paused_s, 6),
                       "held_frames": pfc.held_frames, "pfc_malformed": pfc.malformed,
                       "channel_choice": self.channel_choice,
                       "channel_bytes": list(self.channel_bytes), "channel_retransmitted": channel_resent}
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
                if self.endpoint.idle and not self._queued:
                    break
            time.sleep(0.005)
        self._stop.set()
        self._wake()
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
        if self.channel_choice == LEAST_LOADED:
            self._enqueue(peer, [PIECE_HEADER.pack(PIECE_MAGIC, seq & 0xFFFF, P2P_STEP, off) + x[off:off + n].tobytes()
                                 for off, n in piece_cuts(len(x), self._per_piece(x.itemsize))], f"send {seq}")
            return
        now = time.monotonic()
        for c, off, count in self._pieces(sc.Transfer(self.rank, peer, 0, 0, len(x), False)):
            header = PIECE_HEADER.pack(PIECE_MAGIC, seq & 0xFFFF, P2P_STEP, off)
            with self._lock:
                self._post_on(peer, c, header + x[off:off + count].tobytes(), now, f"send {seq}")

    def recv(self, peer: int, count: int, dtype) -> np.ndarray:
        """The next array of `count` elements `peer` sent with send()."""
        self._check_peer(peer)
        out = np.empty(count, dtype=dtype)
        seq = self._p2p_received[peer]
        self._p2p_received[peer] += 1
        deadline = time.monotonic() + self.timeout_s
        if self.channel_choice == LEAST_LOADED:
            want = _Want(peer, dict(piece_cuts(count, self._per_piece(out.itemsize))))
            self._collect([want], 0, (seq & 0xFFFF, P2P_STEP), out.itemsize, deadline, f"receive step {seq}",
                          f"expected a send of {count} {out.dtype.name} (do the two ranks pair sends and receives?)",
                          f"receive {seq} from rank {peer}")
            for off, msg in want.got:
                piece = np.frombuffer(msg, dtype=out.dtype, offset=PIECE_HEADER.size)
                out[off:off + len(piece)] = piece
            return out
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

    def _per_piece(self, itemsize: int) -> int:
        """least-loaded: elements in a piece (a header and these fill piece_bytes)."""
        return max(1, (self.piece_bytes - PIECE_HEADER.size) // itemsize)

    def _step(self, sched: sc.Schedule, call: int, step_no: int, buf: np.ndarray) -> None:
        sends, recvs = sched.transfers_of(self.rank, step_no)
        now = time.monotonic()
        local = [(t, buf[t.src_start:t.src_start + t.count].copy()) for t in sends if t.dst == self.rank]
        if self.channel_choice == LEAST_LOADED:
            self._step_least_loaded(sched, call, step_no, buf, sends, recvs, local)
            return
        for t in sends:
            if t.dst == self.rank:
                continue
            for c, off, count in self._pieces(t):
                data = buf[t.src_start + off:t.src_start + off + count]
                header = PIECE_HEADER.pack(PIECE_MAGIC, call & 0xFFFF, step_no, t.dst_start + off)
                with self._lock:
                    self._post_on(t.dst, c, header + data.tobytes(), now,
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

    def _step_least_loaded(self, sched: sc.Schedule, call: int, step_no: int, buf: np.ndarray,
                           sends: list[sc.Transfer], recvs: list[sc.Transfer],
                           local: list[tuple[sc.Transfer, np.ndarray]]) -> None:
        """One step with least-loaded channels: every transfer's pieces queued
        for its peer (the progress thread posts them on the least-loaded
        connections), then each received transfer applied, in the schedule's
        order, once all of its pieces are in, whatever channels they came by."""
        what = f"{sched.collective} ({sched.algorithm}) step {step_no}"
        per = self._per_piece(buf.itemsize)
        for t in sends:
            if t.dst != self.rank:
                self._enqueue(t.dst, [PIECE_HEADER.pack(PIECE_MAGIC, call & 0xFFFF, step_no, t.dst_start + off)
                                      + buf[t.src_start + off:t.src_start + off + n].tobytes()
                                      for off, n in piece_cuts(t.count, per)], what)
        for t, data in local:
            self._apply(buf, t, 0, data)
        remote = [t for t in recvs if t.src != self.rank]
        wants = [_Want(t.src, {t.dst_start + off: n for off, n in piece_cuts(t.count, per)}) for t in remote]
        deadline = time.monotonic() + self.timeout_s
        for i, t in enumerate(remote):
            self._collect(wants, i, (call & 0xFFFF, step_no), buf.itemsize, deadline, what,
                          "(do all ranks run the same collectives with the same lengths, dtype and channel "
                          "choice?)", f"{sched.collective} call {call} step {step_no}")
            for off, msg in wants[i].got:
                self._apply(buf, t, off - t.dst_start, np.frombuffer(msg, dtype=buf.dtype, offset=PIECE_HEADER.size))

    def _enqueue(self, peer: int, pieces: list[bytes], what: str) -> None:
        """least-loaded: `pieces` for `peer`, after those queued before; the
        ones a connection has room for go at once. A failed connection to the
        peer fails this at once (as a post on it would)."""
        with self._lock:
            for c in range(self.channels):
                error = self._out[(peer, c)].requester.error
                if error is not None:
                    raise self._give_up(f"{what}: the connection with rank {peer} ({self.addresses[peer]}) "
                                        f"failed: {error}")
            if pieces:
                self._queued.setdefault(peer, deque()).extend(pieces)
                self._pump()
                self._wake()

    def _pump(self) -> None:
        """least-loaded: post queued pieces, each on its peer's connection
        with the fewest bytes outstanding, while that one has fewer than
        window_bytes outstanding. (Called with the lock held.)"""
        now = time.monotonic()
        for peer in list(self._queued):
            queue = self._queued[peer]
            conns = [self._out[(peer, c)] for c in range(self.channels)]
            while queue:
                loads = [None if conn.requester.error is not None else conn.outstanding_bytes for conn in conns]
                c = choose_channel(loads)
                load = None if c is None else loads[c]
                if c is None or load is None or load >= self.window_bytes:     # (a failed peer: the waiters name it)
                    break
                piece = queue.popleft()
                conns[c].post(piece, now)
                self.channel_bytes[c] += len(piece)
            if not queue:
                del self._queued[peer]

    def _collect(self, wants: list["_Want"], i: int, tag: tuple[int, int], itemsize: int, deadline: float,
                 what: str, hint: str, where: str) -> None:
        """least-loaded: wait until every piece of wants[i] has arrived, from
        any of its peer's channels; a piece of the same (call, step) `tag`
        for another of `wants` (the same peer, another transfer) is kept for
        it. A piece no want expects, one of an earlier call or step, or
        every channel from the peer offering only pieces of other calls or
        steps while some are missing (each channel delivers in order, and
        the peer queued all of this step's pieces before any later one), is
        a mismatch. `what` starts a timeout's or a failed connection's
        error, `where` and `hint` a mismatch's."""
        want = wants[i]
        with self._arrived:
            while want.pending:
                if self._take(want.peer, wants, tag, itemsize, hint, where):
                    continue
                self._check_connections(what)
                left = deadline - time.monotonic()
                if left <= 0 or not self._thread.is_alive():
                    raise self._give_up(f"{what}: nothing from rank {want.peer} ({self.addresses[want.peer]}) "
                                        f"on any of its {self.channels} channels within {self.timeout_s} s")
                self._arrived.wait(min(left, 0.05))

    def _take(self, peer: int, wants: list["_Want"], tag: tuple[int, int], itemsize: int, hint: str,
              where: str) -> bool:
        """Move the pieces of `tag` at the heads of `peer`'s inboxes to the
        wants expecting them; whether any moved. (With the lock held.)"""
        took, others = False, []
        for c in range(self.channels):
            box = self._inbox[(peer, c)]
            while box:
                magic, got_call, got_step, off = PIECE_HEADER.unpack_from(box[0])
                if (magic, got_call, got_step) != (PIECE_MAGIC, *tag):
                    other = (c, got_call, got_step, off, len(box[0]) - PIECE_HEADER.size)
                    if magic != PIECE_MAGIC or _behind(tag, got_call, got_step):     # never legitimately next
                        raise self._mismatch(peer, wants, hint, where, other, itemsize)
                    others.append(other)
                    break
                msg = box.popleft()
                took = True
                nbytes = len(msg) - PIECE_HEADER.size
                target = next((w for w in wants if w.peer == peer and nbytes % itemsize == 0
                               and w.pending.get(off) == nbytes // itemsize), None)
                if target is None:
                    raise self._mismatch(peer, wants, hint, where, (c, got_call, got_step, off, nbytes), itemsize)
                del target.pending[off]
                target.got.append((off, msg))
        if not took and len(others) == self.channels and any(w.pending for w in wants if w.peer == peer):
            raise self._mismatch(peer, wants, hint, where, others[0], itemsize)
        return took

    def _mismatch(self, peer: int, wants: list["_Want"], hint: str, where: str,
                  got: tuple[int, int, int, int, int], itemsize: int) -> CollectiveError:
        """The error for a piece from `peer` that no want expects: what came, what was expected."""
        c, got_call, got_step, off, nbytes = got
        missing = [(o, n) for w in wants if w.peer == peer for o, n in sorted(w.pending.items())]
        first = "expected nothing more"
        if missing:
            first = f"expected offset {missing[0][0]}, {missing[0][1] * itemsize} bytes" + (
                f" (or another of the {len(missing)} pieces missing)" if len(missing) > 1 else "")
        return self._give_up(f"{where}: rank {peer} channel {c} sent call {got_call} step {got_step} offset {off}, "
                             f"{nbytes} bytes; {first}; {hint}")

    @staticmethod
    def _apply(buf: np.ndarray, t: sc.Transfer, off: int, data: np.ndarray) -> None:
        dst = buf[t.dst_start + off:t.dst_start + off + len(data)]
        if t.reduce:
            dst += data
        else:
            dst[:] = data

    def _post_on(self, peer: int, channel: int, piece: bytes, now: float, what: str) -> None:
        """fixed: `piece` posted to `peer` on `channel`, counted. (With the lock held.)"""
        self.channel_bytes[channel] += len(piece)
        self._posted(self._out[(peer, channel)].post(piece, now), peer, what)
        self._wake()

    def _posted(self, msg: Message | UetMessage, peer: int, what: str) -> None:
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
        self._queued.clear()            # least-loaded: nothing more of this rank's pieces goes out
        if not self._abort_sent:
            self._abort_sent = True
            abort = PIECE_HEADER.pack(ABORT_MAGIC, 0, 0, 0) + f"rank {self.rank}: {reason}".encode()[
                :ABORT_REASON_BYTES]
            now = time.monotonic()
            for peer in range(self.size):
                if peer != self.rank:
                    self._out[(peer, 0)].post(abort, now)      # (on a failed connection: fails at once)
            self._wake()
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
                      aggregation: tuple[int, str, int, int] | None = None,
                      channel_choice: str = FIXED, tclass: int | None = None,
                      link_mbps: float = 100.0,
                      entropies_of: Callable[[str], Sequence[int]] | None = None,
                      dilation: float = 1.0, control_dscp: int | None = None,
                      cc_params: Mapping[str, float] | None = None) -> Communicator:
    """A communicator on the host's interface (raw socket), as the fabric's
    hosts use: `job`'s queue pairs only, so jobs share hosts. aggregation:
    (aggregation job, its parameter server's address, first sequence number,
    the same on every rank, the job's block_elements) for the in-network
    all-reduce. channel_choice: one of CHANNEL_CHOICES, the same on every
    rank; its worker sends at most channels x line_rate_pps packets a
    second. tclass: the lossless class `dscp` maps to, whose PFC pauses the
    rank's NIC honours (None: none), link_mbps the host link's rate (the
    pause quantum). mode "uet": UET's transport (lossy: no class; with cc
    "rccc" the rank grants its peers credit for its link at line_rate_pps;
    entropies_of(peer): the entropy values of the connections to it, the
    path model's: collectives/paths.py path_aware_entropies). dilation: the
    network runs this many times slower (emulator/dilation.py): the
    transport's and the congestion control's default time constants are
    multiplied by it, as the RDMA agent's --dilation does. control_dscp
    (UET only): the DSCP of its ACKs, NACKs and credits, UE's control
    class. cc_params: constants of the congestion control's Params taken
    as they are (already the dilated network's; the RDMA agent's
    --cc-param: a field of another congestion control, or values its
    Params refuse, are a ValueError naming it); DCQCN's cnp_interval_s
    also paces the rank's CNPs as a receiver."""
    if not 0 <= job < MAX_JOBS:
        raise ValueError(f"job must be within 0..{MAX_JOBS - 1}, got {job}")
    if channels > JOB_QPS:
        raise ValueError(f"channels must be at most {JOB_QPS} (a job's queue pairs), got {channels}")
    if mode not in TRANSPORT_MODES:
        raise ValueError(f"mode must be one of {', '.join(TRANSPORT_MODES)}, got {mode!r}")
    if mode == UET and tclass is not None:
        raise ValueError(f"UET is lossy (trimming, not PFC): no traffic class to honour, got tclass {tclass}")
    if mode != UET and control_dscp is not None:
        raise ValueError(f"control_dscp is UET's control class: mode {mode} sends its ACKs as its data")
    ccs = uet_congestion_controls() if mode == UET else congestion_controls()
    if cc not in ccs:
        raise ValueError(f"congestion control must be one of {', '.join(sorted(ccs))} with mode {mode}, got {cc!r}")
    make_cc = ccs[cc]
    slow = Dilation(dilation)           # (a factor below 1 is refused here, by name)
    given = cc_param_values(cc, cc_params or {}, "send", line_rate_pps, mtu, dilation)
    options = argparse.Namespace(line_rate_pps=line_rate_pps, mtu=mtu, dilation=dilation, cc_params=given)
    responder = {k: v for k, v in given.items() if k in RECEIVER_CC_PARAMS}
    qp_base = CHANNEL_QP_BASE + JOB_QPS * job
    accept = range(qp_base, qp_base + JOB_QPS)
    link = RawLink(iface)
    endpoint: Endpoint | UetEndpoint
    try:
        if mode == UET:
            endpoint = UetEndpoint(link, src_ip, src_mac, gw_mac, slow.params(UetParams, mtu_bytes=mtu), lambda: make_cc(options),
                                   dscp=dscp, accept_qps=accept, credit_pps=line_rate_pps if cc == "rccc" else None,
                                   entropies_of=entropies_of, control_dscp=control_dscp)
        else:
            endpoint = Endpoint(link, src_ip, src_mac, gw_mac,
                                slow.params(TransportParams, mode=mode, mtu_bytes=mtu, **responder),
                                lambda: make_cc(options), dscp=dscp, accept_qps=accept, tclass=tclass,
                                link_mbps=link_mbps)
    except ValueError:          # (a class or link rate it cannot honour)
        link.close()
        raise
    worker = None
    if aggregation is not None:
        agg_job, server_ip, seq_base, block_elements = aggregation
        # paced at the rank's channels' top rate together: what its ring connections to one peer may send
        worker = AggregationWorker(agg_job, server_ip, len(addresses), bind_ip=src_ip, timeout_s=timeout_s,
                                   seq_base=seq_base, block_elements=block_elements,
                                   rate_pps=channels * line_rate_pps)
    try:
        return Communicator(endpoint, list(addresses), rank, channels=channels, sport_of=sport_of,
                            timeout_s=timeout_s, qp_base=qp_base, aggregation=worker,
                            channel_choice=channel_choice)
    except ValueError:
        if worker is not None:
            worker.close()
        raise
