"""Receiver-side reorder buffer for RoCEv2 flows, keyed by flow and BTH PSN.

Why. Load balancing finer than a flow (per-packet spraying, flowlets, a PLB
repath) sends one flow's packets over paths whose queues differ, so they
arrive out of order. The receiver holds what arrives early, delivers in PSN
order, and must not wait forever for a packet that was dropped. This module
is that logic, as pure code with the time passed in (like dcqcn.py), so the
tests are exact and the packet loop in roce.py stays thin. It also measures
the reordering: how far ahead packets arrived, how long they were held, how
full the buffer got.

PSNs are 24 bits and wrap at 2^24. Internally every PSN is unwrapped to an
unbounded sequence number `seq` relative to the next expected one, E, by
serial-number arithmetic: the 2^23 PSNs after E are ahead, the 2^23 before it
behind (`psn_diff`). Per flow, for a packet with sequence number s:

  s == E      delivered now, then every held packet that follows contiguously.
  E < s       held (if E + max_ahead < s: dropped, `out_of_window`). Its
              reorder depth is s - E, how far ahead of the next expected PSN it
              arrived (0 for a packet in order).
  s < E       dropped: `late` if s had been declared lost (it was only delayed,
              longer than the timeout: a spurious loss), else `duplicates`
              (already delivered, or too old to tell). A copy of a held packet
              is also a duplicate.
  gap timeout No packet is held longer than `gap_timeout_s`. When the oldest
              held packet has waited that long, every PSN still missing below
              it is declared lost, and it and what follows contiguously are
              delivered (`timeout_releases`, `released_by_timeout`). Equivalently:
              a missing PSN is declared lost `gap_timeout_s` after the first
              packet beyond it arrived. Timeouts due at a call's `now` are
              resolved before that call's packet is taken in.
  capacity    At most `capacity` packets are held per flow. One more forces the
              release of the first hole: the PSNs missing before the lowest held
              packet are declared lost and the run from it is delivered
              (`overflow_releases`, `released_by_overflow`). capacity 0 = no
              buffering: any gap is declared lost at once.

Metrics (ReorderBuffer.summary()): depth histogram, mean and max; RFC 4737
"reordered" packets (arrived with a PSN below the highest already seen);
occupancy max and time-weighted mean (from the flow's first packet to its
latest arrival, delivery or loss, so idle time after a transfer ended does
not dilute it); added delay per delivered packet (time held: mean, max, mean over held
packets); packets released by timeout / overflow; PSNs declared lost, by
cause; duplicates, late, out of window.

The clock: `now` (seconds, any origin) must not go backwards; an earlier value
is taken as the latest one seen.

Defaults, at this project's scale: a congested BMv2 port here serves ~800
packets/s with a 64-packet queue, so two paths' queueing delays differ by up to
~80 ms. gap_timeout_s = 0.1 s stays above that (a packet merely queued on the
slower path is not declared lost) and bounds the delay a real loss adds.
capacity 1024 packets covers 0.1 s at up to ~10k packets/s, beyond what the
switch forwards (~4.4k packets/s, README `make bench`).
"""
from __future__ import annotations

import argparse
import bisect
import heapq
import math
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any, Dict, Hashable, Iterator, List, Optional

PSN_BITS = 24
PSN_MOD = 1 << PSN_BITS
PSN_HALF = 1 << (PSN_BITS - 1)


def psn_diff(a: int, b: int) -> int:
    """a - b in 24-bit serial-number arithmetic: within [-2^23, 2^23)."""
    return (a - b + PSN_HALF) % PSN_MOD - PSN_HALF


def _check_psn(psn: int) -> None:
    if not isinstance(psn, int) or isinstance(psn, bool) or not 0 <= psn < PSN_MOD:
        raise ValueError(f"PSN must be an integer within 0..{PSN_MOD - 1}, got {psn!r}")


@dataclass(frozen=True)
class ReorderParams:
    gap_timeout_s: float = 0.1      # a missing PSN is declared lost this long after a later one arrived
    capacity: int = 1024            # packets held per flow
    max_ahead: int = 1 << 20        # a PSN further ahead of the next expected one is dropped (garbage)
    lost_memory: int = 4096         # ranges of lost PSNs remembered, to tell late from duplicate

    def __post_init__(self):
        problems = []
        if not (isinstance(self.gap_timeout_s, (int, float)) and self.gap_timeout_s > 0):
            problems.append(f"gap_timeout_s must be > 0 (math.inf: never), got {self.gap_timeout_s!r}")
        if not (isinstance(self.capacity, int) and self.capacity >= 0):
            problems.append(f"capacity must be an integer >= 0, got {self.capacity!r}")
        if not (isinstance(self.max_ahead, int) and 1 <= self.max_ahead < PSN_HALF):
            problems.append(f"max_ahead must be an integer within 1..{PSN_HALF - 1}, got {self.max_ahead!r}")
        if not (isinstance(self.lost_memory, int) and self.lost_memory >= 0):
            problems.append(f"lost_memory must be an integer >= 0, got {self.lost_memory!r}")
        if problems:
            raise ValueError("invalid reorder parameters: " + "; ".join(problems))


@dataclass(frozen=True)
class Delivery:
    """One packet handed to the application, in order."""
    psn: int
    seq: int                 # unwrapped sequence number (PSN + k 2^24)
    arrived_s: float
    delivered_s: float
    item: Any = None         # whatever the caller pushed with the packet

    @property
    def delay_s(self) -> float:
        return self.delivered_s - self.arrived_s


@dataclass
class Released:
    """What one call released: packets delivered in order, PSNs declared lost."""
    delivered: List[Delivery] = field(default_factory=list)
    lost: int = 0

    def __bool__(self) -> bool:
        return bool(self.delivered) or self.lost > 0


@dataclass
class ReorderStats:
    received: int = 0              # packets pushed
    in_order: int = 0              # delivered on arrival (depth 0)
    held: int = 0                  # taken in out of order (depth > 0)
    delivered: int = 0
    duplicates: int = 0
    late: int = 0                  # arrived after their PSN was declared lost
    out_of_window: int = 0
    lost: int = 0                  # PSNs declared lost, all causes
    lost_by_timeout: int = 0
    lost_by_overflow: int = 0
    lost_at_flush: int = 0
    timeout_releases: int = 0
    released_by_timeout: int = 0
    overflow_releases: int = 0
    released_by_overflow: int = 0
    released_at_flush: int = 0
    reordered: int = 0             # RFC 4737: PSN below the highest seen before it
    depth: Counter = field(default_factory=Counter)
    occupancy_max: int = 0
    occupancy_area: float = 0.0    # integral of occupancy over time (packet-seconds)
    first_s: Optional[float] = None
    last_s: Optional[float] = None       # the latest call
    last_event_s: Optional[float] = None  # the latest arrival, delivery or loss
    delay_sum_s: float = 0.0
    delay_max_s: float = 0.0
    last_delivery_s: Optional[float] = None


_LOST_BY_CAUSE = {"timeout": "lost_by_timeout", "overflow": "lost_by_overflow", "flush": "lost_at_flush"}


class ReorderBuffer:
    """The reorder buffer of one flow (see the module docstring for the rules).

    start_psn: the PSN the flow starts at (RoCE RC: agreed at connection set-up;
    our sender starts at 0). None: the first packet's PSN, whatever it is.
    """

    def __init__(self, params: ReorderParams = ReorderParams(), start_psn: Optional[int] = 0):
        if start_psn is not None:
            _check_psn(start_psn)
        self.params = params
        self.stats = ReorderStats()
        self._expected: Optional[int] = start_psn       # E, unwrapped
        self._highest: Optional[int] = None             # highest seq taken in
        self._held: Dict[int, tuple] = {}               # seq -> (arrived_s, item)
        self._heap: List[int] = []                      # held seqs; its minimum is the next to go
        self._fifo: deque = deque()                     # (arrived_s, seq) in arrival order
        self._lost_starts: List[int] = []               # declared-lost ranges [start, end), sorted
        self._lost_ends: List[int] = []

    # ---- queries -------------------------------------------------------------

    @property
    def occupancy(self) -> int:
        return len(self._held)

    @property
    def next_psn(self) -> Optional[int]:
        """The PSN expected next (None before the first packet when start_psn is None)."""
        return None if self._expected is None else self._expected % PSN_MOD

    @property
    def delivered_through(self) -> Optional[int]:
        """Unwrapped sequence number below which everything is delivered or declared lost."""
        return None if self._expected is None else self._expected - 1

    @property
    def next_deadline(self) -> Optional[float]:
        """When the oldest held packet times out (None: nothing held)."""
        self._trim_fifo()
        return self._fifo[0][0] + self.params.gap_timeout_s if self._fifo else None

    @property
    def occupancy_mean(self) -> float:
        """Time-weighted mean occupancy, from the first packet to the latest event (or
        to the latest call while packets are held): idle time after the flow ended
        does not dilute it."""
        st = self.stats
        if st.first_s is None:
            return 0.0
        end = st.last_s if self._held else st.last_event_s
        span = (end if end is not None else st.first_s) - st.first_s
        return st.occupancy_area / span if span > 0 else 0.0

    @property
    def holes(self) -> int:
        """PSNs missing now between the next expected one and the highest held one."""
        if not self._held:
            return 0
        # something is held, so a packet arrived: both are set
        assert self._highest is not None and self._expected is not None
        return self._highest + 1 - self._expected - len(self._held)

    @property
    def missing(self) -> int:
        """PSNs never received, up to the highest seen: declared lost, less the late
        arrivals among them, plus the holes still open."""
        return self.stats.lost - self.stats.late + self.holes

    # ---- events --------------------------------------------------------------

    def push(self, psn: int, now: float, item: Any = None) -> Released:
        """A packet with `psn` arrived at `now`: returns what this released."""
        _check_psn(psn)
        now = self._tick(now)
        out = Released()
        self._expire(now, out)
        st = self.stats
        st.received += 1
        st.last_event_s = now
        if self._expected is None:
            self._expected = psn
        seq = self._expected + psn_diff(psn, self._expected % PSN_MOD)
        ahead = seq - self._expected
        if ahead < 0:
            if self._forget_lost(seq):
                st.late += 1
            else:
                st.duplicates += 1
            return out
        if ahead > self.params.max_ahead:
            st.out_of_window += 1
            return out
        if seq in self._held:
            st.duplicates += 1
            return out
        st.depth[ahead] += 1
        if self._highest is not None and seq < self._highest:
            st.reordered += 1
        if self._highest is None or seq > self._highest:
            self._highest = seq
        if ahead == 0:
            st.in_order += 1
            self._deliver(seq, now, item, now, out)
            self._drain(now, out)
            return out
        st.held += 1
        self._held[seq] = (now, item)
        heapq.heappush(self._heap, seq)
        self._fifo.append((now, seq))
        while len(self._held) > self.params.capacity:
            st.overflow_releases += 1
            st.released_by_overflow += self._release_through(self._heap[0], now, out, "overflow")
        st.occupancy_max = max(st.occupancy_max, len(self._held))
        return out

    def advance(self, now: float) -> Released:
        """Let time pass to `now`: releases what timed out."""
        now = self._tick(now)
        out = Released()
        self._expire(now, out)
        if out:
            self.stats.last_event_s = now
        return out

    def flush(self, now: float) -> Released:
        """End of the stream: declare every open hole lost and deliver everything held."""
        now = self._tick(now)
        out = Released()
        if self._held:
            self.stats.released_at_flush += self._release_through(max(self._held), now, out, "flush")
            self.stats.last_event_s = now
        return out

    def summary(self) -> dict:
        """The metrics, JSON-ready."""
        st = self.stats
        accepted = sum(st.depth.values())
        return {
            "received": st.received, "delivered": st.delivered, "in_order": st.in_order, "held": st.held,
            "duplicates": st.duplicates, "late": st.late, "out_of_window": st.out_of_window,
            "losses_declared": st.lost, "lost_by_timeout": st.lost_by_timeout,
            "lost_by_overflow": st.lost_by_overflow, "lost_at_flush": st.lost_at_flush,
            "missing": self.missing,
            "timeout_releases": st.timeout_releases, "released_by_timeout": st.released_by_timeout,
            "overflow_releases": st.overflow_releases, "released_by_overflow": st.released_by_overflow,
            "released_at_flush": st.released_at_flush,
            "reordered": st.reordered,
            "depth_hist": {str(d): n for d, n in sorted(st.depth.items())},
            "depth_max": max(st.depth) if st.depth else 0,
            "depth_mean": sum(d * n for d, n in st.depth.items()) / accepted if accepted else 0.0,
            "occupancy_max": st.occupancy_max, "occupancy_mean": self.occupancy_mean,
            "occupancy_now": self.occupancy, "holes_now": self.holes,
            "delay_mean_s": st.delay_sum_s / st.delivered if st.delivered else 0.0,
            "delay_mean_held_s": st.delay_sum_s / (st.delivered - st.in_order) if st.delivered > st.in_order else 0.0,
            "delay_max_s": st.delay_max_s,
            "next_psn": self.next_psn, "delivered_through": self.delivered_through,
            "last_delivery_s": st.last_delivery_s,
        }

    # ---- internals -----------------------------------------------------------

    def _tick(self, now: float) -> float:
        """Account occupancy up to `now` (never backwards); returns the effective now."""
        st = self.stats
        if st.last_s is None:
            st.first_s = st.last_s = now
            return now
        if now > st.last_s:
            st.occupancy_area += len(self._held) * (now - st.last_s)
            st.last_s = now
        return st.last_s

    def _trim_fifo(self) -> None:
        while self._fifo and self._fifo[0][1] not in self._held:
            self._fifo.popleft()

    def _expire(self, now: float, out: Released) -> None:
        timeout = self.params.gap_timeout_s
        if math.isinf(timeout):
            return
        while True:
            self._trim_fifo()
            if not self._fifo or self._fifo[0][0] + timeout > now:
                return
            self.stats.timeout_releases += 1
            self.stats.released_by_timeout += self._release_through(self._fifo[0][1], now, out, "timeout")

    def _release_through(self, target: int, now: float, out: Released, cause: str) -> int:
        """Deliver everything held up to `target` (a held seq), declaring the holes
        before it lost, then what follows contiguously. Returns packets delivered."""
        before = len(out.delivered)
        assert self._expected is not None  # `target` is held, so a packet arrived
        while self._expected <= target:
            nxt = self._heap[0]
            if nxt > self._expected:
                self._declare_lost(self._expected, nxt, cause, out)
                self._expected = nxt
            arrived, item = self._pop_head()
            self._deliver(nxt, arrived, item, now, out)
        self._drain(now, out)
        return len(out.delivered) - before

    def _drain(self, now: float, out: Released) -> None:
        while self._heap and self._heap[0] == self._expected:
            arrived, item = self._pop_head()
            self._deliver(self._expected, arrived, item, now, out)

    def _pop_head(self) -> tuple:
        return self._held.pop(heapq.heappop(self._heap))

    def _deliver(self, seq: int, arrived: float, item: Any, now: float, out: Released) -> None:
        st = self.stats
        delay = now - arrived
        st.delivered += 1
        st.delay_sum_s += delay
        st.delay_max_s = max(st.delay_max_s, delay)
        st.last_delivery_s = now
        self._expected = seq + 1
        out.delivered.append(Delivery(seq % PSN_MOD, seq, arrived, now, item))

    def _declare_lost(self, start: int, end: int, cause: str, out: Released) -> None:
        n = end - start
        st = self.stats
        st.lost += n
        counter = _LOST_BY_CAUSE[cause]
        setattr(st, counter, getattr(st, counter) + n)
        out.lost += n
        if self.params.lost_memory == 0:
            return
        if self._lost_ends and self._lost_ends[-1] == start:
            self._lost_ends[-1] = end
        else:
            self._lost_starts.append(start)
            self._lost_ends.append(end)
        excess = len(self._lost_starts) - self.params.lost_memory
        if excess > 0:
            del self._lost_starts[:excess], self._lost_ends[:excess]

    def _forget_lost(self, seq: int) -> bool:
        """True if `seq` had been declared lost (and forget it: a second copy is a duplicate)."""
        i = bisect.bisect_right(self._lost_starts, seq) - 1
        if i < 0 or seq >= self._lost_ends[i]:
            return False
        start, end = self._lost_starts[i], self._lost_ends[i]
        pieces = [(a, b) for a, b in ((start, seq), (seq + 1, end)) if a < b]
        self._lost_starts[i:i + 1] = [a for a, _ in pieces]
        self._lost_ends[i:i + 1] = [b for _, b in pieces]
        return True


class ReorderBank:
    """One ReorderBuffer per flow (any hashable key), created at its first packet."""

    def __init__(self, params: ReorderParams = ReorderParams(), start_psn: Optional[int] = 0):
        if start_psn is not None:
            _check_psn(start_psn)
        self.params = params
        self.start_psn = start_psn
        self._flows: Dict[Hashable, ReorderBuffer] = {}

    def __getitem__(self, flow: Hashable) -> ReorderBuffer:
        return self._flows[flow]

    def __contains__(self, flow: Hashable) -> bool:
        return flow in self._flows

    def __iter__(self) -> Iterator[Hashable]:
        return iter(self._flows)

    def __len__(self) -> int:
        return len(self._flows)

    def push(self, flow: Hashable, psn: int, now: float, item: Any = None) -> Released:
        buf = self._flows.get(flow)
        if buf is None:
            buf = self._flows[flow] = ReorderBuffer(self.params, self.start_psn)
        return buf.push(psn, now, item)

    def advance(self, now: float) -> Dict[Hashable, Released]:
        """Time passes for every flow; returns the flows that released something."""
        out = {}
        for flow, buf in self._flows.items():
            rel = buf.advance(now)
            if rel:
                out[flow] = rel
        return out

    def flush(self, now: float) -> Dict[Hashable, Released]:
        out = {}
        for flow, buf in self._flows.items():
            rel = buf.flush(now)
            if rel:
                out[flow] = rel
        return out

    def summary(self) -> Dict[str, dict]:
        return {str(flow): buf.summary() for flow, buf in self._flows.items()}


def add_reorder_arguments(parser: argparse.ArgumentParser, always_on: bool = False) -> None:
    """The receiver's reorder-buffer flags (shared by hostagent.ecn.roce and hostagent.traffic)."""
    d = ReorderParams()
    g = parser.add_argument_group("reorder buffer (hostagent/load_balancing/reorder.py)")
    if not always_on:
        g.add_argument("--reorder", action="store_true",
                       help="deliver each flow in PSN order through a reorder buffer; report reordering")
    g.add_argument("--reorder-timeout", type=float, default=d.gap_timeout_s,
                   help=f"seconds before a missing PSN is declared lost (default {d.gap_timeout_s})")
    g.add_argument("--reorder-capacity", type=int, default=d.capacity,
                   help=f"packets held per flow; beyond, the first hole is given up (default {d.capacity})")
