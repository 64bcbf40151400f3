"""Collective algorithms as schedules: who sends which part of its buffer to
whom, step by step. A schedule is pure data, the same for every executor:
`run_in_memory` (below) moves numpy slices between ranks in one process, and
the communicator moves them over the transport's reliable connections.

Every rank has one working buffer of the collective's element type (its
layout per collective is in `buffer_layout`). A step is a set of transfers;
each copies a range of the sender's buffer as it was when the step began
into a range of the receiver's buffer, or adds it there (`reduce`). Within a
step a rank's ranges written and read never overlap, so a rank may send all
of its step's transfers before applying what it receives.

Algorithms (n ranks, any n >= 1; L elements):
  all-reduce      ring             reduce-scatter then all-gather around the ring, 2(n-1) steps
                  halving-doubling Rabenseifner: recursive halving (reduce-scatter), then doubling
                                   (all-gather); with n not a power of two the first 2r ranks
                                   (r = n - 2^floor(log2 n)) pair up before and after
                  tree             NCCL's double binary tree: two trees in which a rank that is a
                                   leaf of one is inside the other, each reducing and broadcasting
                                   half of the data, pipelined in chunks
  reduce-scatter  ring             rank r ends with the sum of block r
  all-gather      ring             rank r's block reaches everyone
  broadcast       tree             binomial tree from the root
  all-to-all      pairwise         step s: rank r sends block (r+s) to rank r+s

Ranges are cut with `bounds(L, k)`: part i is [i*L//k, (i+1)*L//k), so any
L and n work (a part may be empty; an empty transfer is left out).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

ALL_REDUCE, REDUCE_SCATTER, ALL_GATHER, BROADCAST, ALL_TO_ALL = (
    "all-reduce", "reduce-scatter", "all-gather", "broadcast", "all-to-all")
COLLECTIVES = (ALL_REDUCE, REDUCE_SCATTER, ALL_GATHER, BROADCAST, ALL_TO_ALL)
RING, HALVING_DOUBLING, TREE, PAIRWISE = "ring", "halving-doubling", "tree", "pairwise"


@dataclass(frozen=True)
class Transfer:
    """Elements [src_start, src_start + count) of rank src's buffer to
    [dst_start, dst_start + count) of rank dst's: copied, or added (reduce)."""
    src: int
    dst: int
    src_start: int
    dst_start: int
    count: int
    reduce: bool


@dataclass(frozen=True)
class Schedule:
    collective: str
    algorithm: str
    ranks: int
    elements: int          # per rank's input: all-reduce/broadcast L; reduce-scatter/all-to-all n*m; all-gather m
    steps: tuple[tuple[Transfer, ...], ...]

    def transfers_of(self, rank: int, step: int) -> tuple[list[Transfer], list[Transfer]]:
        """(what rank sends, what it receives) in a step."""
        ts = self.steps[step]
        return [t for t in ts if t.src == rank], [t for t in ts if t.dst == rank]

    def elements_sent(self, rank: int) -> int:
        return sum(t.count for step in self.steps for t in step if t.src == rank and t.dst != rank)


def bounds(length: int, parts: int) -> list[int]:
    """Boundaries of `parts` nearly equal parts of `length` elements."""
    return [i * length // parts for i in range(parts + 1)]


def buffer_layout(collective: str, ranks: int, elements: int) -> tuple[int, slice, slice]:
    """(buffer length, where the input goes, where the output is) for one
    rank's working buffer; `elements` as in Schedule.elements."""
    n = ranks
    if collective in (ALL_REDUCE, BROADCAST):
        return elements, slice(0, elements), slice(0, elements)
    if collective == REDUCE_SCATTER:
        _check_blocks(collective, elements, n)
        return elements, slice(0, elements), slice(0, elements)   # the output is block r: see output_of
    if collective == ALL_GATHER:
        return n * elements, slice(0, elements), slice(0, n * elements)   # input moved to block r: see input_of
    if collective == ALL_TO_ALL:
        _check_blocks(collective, elements, n)
        return 2 * elements, slice(0, elements), slice(elements, 2 * elements)
    raise ValueError(f"unknown collective {collective!r}: expected one of {', '.join(COLLECTIVES)}")


def _check_blocks(collective: str, elements: int, ranks: int) -> None:
    if elements % ranks:
        raise ValueError(f"{collective}: the input ({elements} elements) must be a multiple of the ranks ({ranks})")


def input_slice(collective: str, ranks: int, elements: int, rank: int) -> slice:
    if collective == ALL_GATHER:
        return slice(rank * elements, (rank + 1) * elements)
    return buffer_layout(collective, ranks, elements)[1]


def output_slice(collective: str, ranks: int, elements: int, rank: int) -> slice:
    if collective == REDUCE_SCATTER:
        m = elements // ranks
        return slice(rank * m, (rank + 1) * m)
    return buffer_layout(collective, ranks, elements)[2]


# -- all-reduce -------------------------------------------------------------

def ring_reduce_scatter_steps(n: int, cut: list[int], last_holds: Callable[[int], int]) -> list[list[Transfer]]:
    """n - 1 ring steps after which rank r holds the full sum of part
    last_holds(r); cut: the n parts' boundaries."""
    steps = []
    for s in range(n - 1):
        step = []
        for r in range(n):
            # r passes on at step s what it reduced at step s - 1: the part that ends
            # complete s + 1 ranks further on, i.e. at rank r - 1 - s + n
            part = last_holds((r - 1 - s) % n)
            nxt = (r + 1) % n
            step.append(Transfer(r, nxt, cut[part], cut[part], cut[part + 1] - cut[part], True))
        steps.append(step)
    return steps


def ring_all_gather_steps(n: int, cut: list[int], holds: Callable[[int], int]) -> list[list[Transfer]]:
    """n - 1 ring steps spreading part holds(r), complete at rank r, to all."""
    steps = []
    for s in range(n - 1):
        step = []
        for r in range(n):
            part = holds((r - s) % n)     # what r received at step s - 1
            step.append(Transfer(r, (r + 1) % n, cut[part], cut[part], cut[part + 1] - cut[part], False))
        steps.append(step)
    return steps


def ring_all_reduce(n: int, length: int) -> list[list[Transfer]]:
    cut = bounds(length, n)
    return (ring_reduce_scatter_steps(n, cut, lambda r: (r + 1) % n)
            + ring_all_gather_steps(n, cut, lambda r: (r + 1) % n))


def halving_doubling_all_reduce(n: int, length: int) -> list[list[Transfer]]:
    p = 1 << (n.bit_length() - 1)          # the largest power of two <= n
    extra = n - p
    steps: list[list[Transfer]] = []
    # Fold: among ranks 0..2*extra-1 the even one gives its vector to the odd one and sits out.
    if extra:
        steps.append([Transfer(2 * i, 2 * i + 1, 0, 0, length, True) for i in range(extra)])
    members = [2 * i + 1 for i in range(extra)] + list(range(2 * extra, n))   # participant i -> rank
    ranges = {i: (0, length) for i in range(p)}
    exchanges = []                          # per halving step: each participant's (kept, given) range
    d = p // 2
    while d >= 1:
        step = []
        record = {}
        for i in range(p):
            lo, hi = ranges[i]
            mid = (lo + hi) // 2
            keep, give = ((lo, mid), (mid, hi)) if i & d == 0 else ((mid, hi), (lo, mid))
            partner = i ^ d
            if give[1] > give[0]:
                step.append(Transfer(members[i], members[partner], give[0], give[0], give[1] - give[0], True))
            record[i] = (keep, give)
        for i in range(p):
            ranges[i] = record[i][0]
        exchanges.append((d, record))
        steps.append(step)
        d //= 2
    # Doubling: undo the halving steps in reverse, copying the finished range to the partner.
    for d, record in reversed(exchanges):
        step = []
        for i in range(p):
            keep, _ = record[i]
            if keep[1] > keep[0]:
                step.append(Transfer(members[i], members[i ^ d], keep[0], keep[0], keep[1] - keep[0], False))
        steps.append(step)
    if extra:
        steps.append([Transfer(2 * i + 1, 2 * i, 0, 0, length, False) for i in range(extra)])
    return [s for s in steps if s]


def binary_tree(n: int) -> tuple[int, dict[int, int], dict[int, list[int]]]:
    """An in-order binary tree over ranks 0..n-1 (NCCL's btree shape): rank r
    sits at position r + 1; a position with lowest set bit b has children
    p - b/2 and p + b/2 (the right one, or a lower descendant, when p + b/2
    is beyond n); odd positions (half the ranks) are leaves.
    Returns (root, parent of each non-root, children of each rank)."""
    children: dict[int, list[int]] = {r: [] for r in range(n)}
    parent: dict[int, int] = {}
    root_pos = 1 << (n.bit_length() - 1)

    def build(pos: int) -> None:
        b = pos & -pos
        half = b // 2
        if half == 0:
            return
        left = pos - half
        children[pos - 1].append(left - 1)
        parent[left - 1] = pos - 1
        build(left)
        right = pos + half
        while half and right > n:           # beyond the ranks: the nearest descendant inside
            half //= 2
            right = pos + half
        if half and right != pos:
            children[pos - 1].append(right - 1)
            parent[right - 1] = pos - 1
            build(right)

    build(root_pos)
    return root_pos - 1, parent, children


def double_binary_trees(n: int) -> list[tuple[int, dict[int, int], dict[int, list[int]]]]:
    """Two trees over the same ranks: the second relabels the first (mirror
    r -> n-1-r for even n, shift r -> r+1 for odd n, as NCCL does) so that a
    rank that is a leaf in one is, mostly, inside the other."""
    root, parent, children = binary_tree(n)
    relabel = (lambda r: n - 1 - r) if n % 2 == 0 else (lambda r: (r + 1) % n)
    tree2 = (relabel(root), {relabel(c): relabel(p) for c, p in parent.items()},
             {relabel(r): [relabel(c) for c in cs] for r, cs in children.items()})
    return [(root, parent, children), tree2]


def _heights(root: int, children: dict[int, list[int]]) -> dict[int, int]:
    h: dict[int, int] = {}

    def walk(r: int) -> int:
        h[r] = 1 + max((walk(c) for c in children[r]), default=-1)
        return h[r]
    walk(root)
    return h


def _depths(root: int, children: dict[int, list[int]]) -> dict[int, int]:
    d = {root: 0}
    todo = [root]
    while todo:
        r = todo.pop()
        for c in children[r]:
            d[c] = d[r] + 1
            todo.append(c)
    return d


def tree_all_reduce(n: int, length: int, chunks: int = 4) -> list[list[Transfer]]:
    """Double binary tree: tree k reduces half k of the data to its root and
    broadcasts it back, in `chunks` pipelined chunks. A node of height h
    sends chunk c up at step h + c (its children sent theirs by step
    h - 1 + c); the root's chunk c is complete after step H - 1 + c and a
    node at depth d passes it down at step H + c + d."""
    if n == 1:
        return []
    halves = bounds(length, 2)
    timeline: dict[int, list[Transfer]] = {}
    for k, (root, parent, children) in enumerate(double_binary_trees(n)):
        lo, hi = halves[k], halves[k + 1]
        cut = [lo + x for x in bounds(hi - lo, chunks)]
        height, depth = _heights(root, children), _depths(root, children)
        top = height[root]
        for c in range(chunks):
            count = cut[c + 1] - cut[c]
            if count == 0:
                continue
            for r in range(n):
                if r != root:
                    timeline.setdefault(height[r] + c, []).append(
                        Transfer(r, parent[r], cut[c], cut[c], count, True))
                for child in children[r]:
                    timeline.setdefault(top + c + depth[r], []).append(
                        Transfer(r, child, cut[c], cut[c], count, False))
    return [timeline[s] for s in sorted(timeline)]


# -- the other collectives ----------------------------------------------------

def ring_reduce_scatter(n: int, length: int) -> list[list[Transfer]]:
    return ring_reduce_scatter_steps(n, bounds(length, n), lambda r: r)


def ring_all_gather(n: int, block: int) -> list[list[Transfer]]:
    return ring_all_gather_steps(n, [i * block for i in range(n + 1)], lambda r: r)


def binomial_broadcast(n: int, length: int, root: int = 0) -> list[list[Transfer]]:
    """Step k: every rank that has the data (relative rank v < 2^k) sends it
    to relative rank v + 2^k."""
    steps = []
    k = 1
    while k < n:
        steps.append([Transfer((root + v) % n, (root + v + k) % n, 0, 0, length, False)
                      for v in range(k) if v + k < n])
        k *= 2
    return [s for s in steps if length]


def pairwise_all_to_all(n: int, length: int) -> list[list[Transfer]]:
    """Input blocks [0, length) (block j for rank j), output blocks
    [length, 2*length) (block i from rank i). Step 0 copies a rank's own
    block; step s (1..n-1): rank r sends block r+s to rank r+s."""
    m = length // n
    steps = [[Transfer(r, r, r * m, length + r * m, m, False) for r in range(n)]]
    for s in range(1, n):
        steps.append([Transfer(r, (r + s) % n, ((r + s) % n) * m, length + r * m, m, False) for r in range(n)])
    return steps if m else []


ALGORITHMS: dict[tuple[str, str], Callable[..., list[list[Transfer]]]] = {
    (ALL_REDUCE, RING): ring_all_reduce,
    (ALL_REDUCE, HALVING_DOUBLING): halving_doubling_all_reduce,
    (ALL_REDUCE, TREE): tree_all_reduce,
    (REDUCE_SCATTER, RING): ring_reduce_scatter,
    (ALL_GATHER, RING): ring_all_gather,
    (BROADCAST, TREE): binomial_broadcast,
    (ALL_TO_ALL, PAIRWISE): pairwise_all_to_all,
}


def algorithms_of(collective: str) -> list[str]:
    return [a for c, a in ALGORITHMS if c == collective]


def schedule(collective: str, algorithm: str, ranks: int, elements: int, **options) -> Schedule:
    """The schedule of a collective over `ranks` ranks, each with `elements`
    input elements (see Schedule.elements); options: tree chunks, broadcast
    root."""
    if ranks < 1:
        raise ValueError(f"ranks must be >= 1, got {ranks}")
    if elements < 0:
        raise ValueError(f"elements must be >= 0, got {elements}")
    if (collective, algorithm) not in ALGORITHMS:
        if collective not in COLLECTIVES:
            raise ValueError(f"unknown collective {collective!r}: expected one of {', '.join(COLLECTIVES)}")
        raise ValueError(f"{collective}: unknown algorithm {algorithm!r}: expected one of "
                         f"{', '.join(algorithms_of(collective))}")
    buffer_layout(collective, ranks, elements)          # checks block multiples
    if collective == BROADCAST and not 0 <= options.get("root", 0) < ranks:
        raise ValueError(f"broadcast root must be a rank (0..{ranks - 1}), got {options['root']}")
    steps = ALGORITHMS[(collective, algorithm)](ranks, elements, **options) if ranks > 1 else []
    if collective == ALL_TO_ALL and ranks == 1:
        steps = pairwise_all_to_all(1, elements)
    return Schedule(collective, algorithm, ranks, elements,
                    tuple(tuple(t for t in step if t.count) for step in steps if any(t.count for t in step)))


# -- bandwidth as nccl-tests reports it ---------------------------------------

def bus_factor(collective: str, ranks: int) -> float:
    """nccl-tests' busBw / algBw: the fraction of the data each rank's link
    must carry, whatever the algorithm: 2(n-1)/n for all-reduce, (n-1)/n
    for reduce-scatter, all-gather and all-to-all, 1 for broadcast."""
    n = ranks
    if collective == ALL_REDUCE:
        return 2 * (n - 1) / n
    if collective in (REDUCE_SCATTER, ALL_GATHER, ALL_TO_ALL):
        return (n - 1) / n
    if collective == BROADCAST:
        return 1.0
    raise ValueError(f"unknown collective {collective!r}")


def size_bytes(collective: str, ranks: int, elements: int, itemsize: int) -> int:
    """The size nccl-tests names in its table: the largest of a rank's send
    and receive buffers (all-gather: the gathered output; reduce-scatter:
    the input)."""
    return (ranks * elements if collective == ALL_GATHER else elements) * itemsize


def bandwidths(collective: str, ranks: int, elements: int, itemsize: int, seconds: float) -> tuple[float, float]:
    """(algorithm bandwidth, bus bandwidth) in bytes/s."""
    algbw = size_bytes(collective, ranks, elements, itemsize) / seconds
    return algbw, algbw * bus_factor(collective, ranks)


def reference_result(collective: str, inputs: Sequence[np.ndarray], rank: int, root: int = 0) -> np.ndarray:
    """What `rank` must end with, computed by numpy from every rank's input."""
    n = len(inputs)
    if collective == ALL_REDUCE:
        return np.sum(inputs, axis=0, dtype=inputs[0].dtype)
    if collective == REDUCE_SCATTER:
        return np.split(np.sum(inputs, axis=0, dtype=inputs[0].dtype), n)[rank]
    if collective == ALL_GATHER:
        return np.concatenate(inputs)
    if collective == BROADCAST:
        return inputs[root]
    if collective == ALL_TO_ALL:
        return np.concatenate([np.split(x, n)[rank] for x in inputs])
    raise ValueError(f"unknown collective {collective!r}")


# -- executing a schedule in one process --------------------------------------

def run_in_memory(sched: Schedule, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Execute a schedule over per-rank numpy arrays in one process (the
    reference executor the transport's is tested against); returns each
    rank's output."""
    n = sched.ranks
    if len(inputs) != n:
        raise ValueError(f"{sched.collective}: {len(inputs)} inputs for {n} ranks")
    size, _, _ = buffer_layout(sched.collective, n, sched.elements)
    dtype = np.result_type(*inputs) if inputs else np.float32
    buffers = []
    for r, x in enumerate(inputs):
        x = np.asarray(x)
        if x.shape != (sched.elements,):
            raise ValueError(f"rank {r}: input of shape {x.shape}, expected ({sched.elements},)")
        b = np.zeros(size, dtype=dtype)
        b[input_slice(sched.collective, n, sched.elements, r)] = x
        buffers.append(b)
    for step in sched.steps:
        sent = [buffers[t.src][t.src_start:t.src_start + t.count].copy() for t in step]
        for t, data in zip(step, sent):
            dst = buffers[t.dst][t.dst_start:t.dst_start + t.count]
            if t.reduce:
                dst += data
            else:
                dst[:] = data
    return [buffers[r][output_slice(sched.collective, n, sched.elements, r)].copy() for r in range(n)]
