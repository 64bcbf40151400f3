"""Every collective schedule, executed in memory, gives numpy's answer for
any rank count (non-powers of two included) and any length (shorter than
the ranks included); the schedules keep the invariants executors rely on."""
from __future__ import annotations

import math

import numpy as np
import pytest

from hostagent.collectives import schedule as sc

RANKS = [1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 16]


def inputs(n: int, elements: int, seed: int, dtype=np.int64) -> list[np.ndarray]:
    rng = np.random.default_rng([seed, n, elements])
    return [rng.integers(-1000, 1000, elements).astype(dtype) for _ in range(n)]


def expected(collective: str, xs: list[np.ndarray], root: int = 0) -> list[np.ndarray]:
    return [sc.reference_result(collective, xs, r, root) for r in range(len(xs))]


CASES = sorted(sc.ALGORITHMS)


@pytest.mark.parametrize("collective,algorithm", CASES)
@pytest.mark.parametrize("n", RANKS)
def test_result_equals_numpy(collective, algorithm, n):
    lengths = [0, 1, n - 1, n, 3 * n + 1, 1000] if collective not in (sc.REDUCE_SCATTER, sc.ALL_TO_ALL) \
        else [0, n, 3 * n, 250 * n]
    for elements in lengths:
        xs = inputs(n, elements, seed=1)
        out = sc.run_in_memory(sc.schedule(collective, algorithm, n, elements), xs)
        for r, (got, want) in enumerate(zip(out, expected(collective, xs))):
            assert np.array_equal(got, want), (collective, algorithm, n, elements, r)


@pytest.mark.parametrize("n", RANKS)
@pytest.mark.parametrize("root", [0, 1, 5])
def test_broadcast_from_any_root(n, root):
    if root >= n:
        return
    xs = inputs(n, 77, seed=2)
    out = sc.run_in_memory(sc.schedule(sc.BROADCAST, sc.TREE, n, 77, root=root), xs)
    assert all(np.array_equal(o, xs[root]) for o in out)


@pytest.mark.parametrize("algorithm", sc.algorithms_of(sc.ALL_REDUCE))
@pytest.mark.parametrize("n", [3, 5, 8])
def test_float_all_reduce_is_the_same_bytes_on_every_rank(algorithm, n):
    """Each part is summed at one rank, in one order, then copied: every
    rank ends with identical floats (what data-parallel training needs)."""
    rng = np.random.default_rng(3)
    xs = [rng.standard_normal(999).astype(np.float32) for _ in range(n)]
    out = sc.run_in_memory(sc.schedule(sc.ALL_REDUCE, algorithm, n, 999), xs)
    assert all(o.tobytes() == out[0].tobytes() for o in out)
    assert np.allclose(out[0], np.sum(xs, axis=0), atol=1e-4)


@pytest.mark.parametrize("collective,algorithm", CASES)
@pytest.mark.parametrize("n", [2, 3, 6, 8])
def test_no_rank_reads_what_it_writes_in_one_step(collective, algorithm, n):
    """A rank may send all of a step's transfers before applying what it
    receives: its ranges read and written within a step are disjoint
    (ranges written by several reductions of one step may coincide)."""
    elements = 24 * n
    for step in sc.schedule(collective, algorithm, n, elements).steps:
        for r in range(n):
            reads = [(t.src_start, t.src_start + t.count) for t in step if t.src == r and t.dst != r]
            writes = [(t.dst_start, t.dst_start + t.count) for t in step if t.dst == r and t.src != r]
            for a in reads:
                for b in writes:
                    assert a[1] <= b[0] or b[1] <= a[0], (collective, algorithm, n, r, a, b)


@pytest.mark.parametrize("n", RANKS[1:])
def test_step_counts_and_traffic(n):
    L = 1200 * n
    ring = sc.schedule(sc.ALL_REDUCE, sc.RING, n, L)
    assert len(ring.steps) == 2 * (n - 1)
    assert all(ring.elements_sent(r) == 2 * (n - 1) * L // n for r in range(n))   # the bus factor's data
    hd = sc.schedule(sc.ALL_REDUCE, sc.HALVING_DOUBLING, n, L)
    p = 1 << (n.bit_length() - 1)
    assert len(hd.steps) == 2 * int(math.log2(p)) + (2 if n > p else 0)
    tree = sc.schedule(sc.ALL_REDUCE, sc.TREE, n, L, chunks=4)
    assert max(tree.elements_sent(r) for r in range(n)) <= 2 * L        # up and down, half per tree


@pytest.mark.parametrize("n", range(2, 33))
def test_double_binary_trees(n):
    trees = sc.double_binary_trees(n)
    for root, parent, children in trees:
        assert set(parent) == set(range(n)) - {root}                     # spans every rank
        assert all(len(c) <= 2 for c in children.values())
        assert all(parent[c] == r for r, cs in children.items() for c in cs)
        depth = max(len(_path(parent, r)) for r in range(n))
        assert depth <= math.ceil(math.log2(n + 1)) + 1
    leaves = [{r for r in range(n) if not t[2][r]} for t in trees]
    if n % 2 == 0:                   # mirrored: a leaf of one tree is inside the other
        assert not leaves[0] & leaves[1]
    assert len(leaves[0] & leaves[1]) <= 1


def _path(parent: dict[int, int], r: int) -> list[int]:
    out = [r]
    while out[-1] in parent:
        out.append(parent[out[-1]])
        assert len(out) <= len(parent) + 1, "cycle"
    return out


def test_bus_factors_are_nccl_tests():
    assert sc.bus_factor(sc.ALL_REDUCE, 8) == pytest.approx(1.75)
    assert sc.bus_factor(sc.ALL_GATHER, 8) == pytest.approx(0.875)
    assert sc.bus_factor(sc.REDUCE_SCATTER, 4) == pytest.approx(0.75)
    assert sc.bus_factor(sc.ALL_TO_ALL, 2) == pytest.approx(0.5)
    assert sc.bus_factor(sc.BROADCAST, 8) == 1.0
    algbw, busbw = sc.bandwidths(sc.ALL_GATHER, 4, 1000, 4, 0.5)
    assert algbw == 4 * 1000 * 4 / 0.5 and busbw == algbw * 0.75


def test_bad_requests_name_what_is_wrong():
    with pytest.raises(ValueError, match="unknown collective 'allreduce'"):
        sc.schedule("allreduce", sc.RING, 4, 10)
    with pytest.raises(ValueError, match="unknown algorithm 'rings'.*ring, halving-doubling, tree"):
        sc.schedule(sc.ALL_REDUCE, "rings", 4, 10)
    with pytest.raises(ValueError, match="multiple of the ranks"):
        sc.schedule(sc.REDUCE_SCATTER, sc.RING, 4, 10)
    with pytest.raises(ValueError, match="ranks must be >= 1"):
        sc.schedule(sc.ALL_REDUCE, sc.RING, 0, 10)
    with pytest.raises(ValueError, match="root must be a rank"):
        sc.schedule(sc.BROADCAST, sc.TREE, 4, 10, root=4)
    with pytest.raises(ValueError, match=r"rank 1: input of shape \(9,\)"):
        sc.run_in_memory(sc.schedule(sc.ALL_REDUCE, sc.RING, 2, 10), [np.zeros(10), np.zeros(9)])
