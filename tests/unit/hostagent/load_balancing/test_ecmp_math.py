"""ECMP collision math: exact values, a brute-force cross-check, and assignments."""
import itertools
from fractions import Fraction

import pytest

from hostagent.load_balancing.ecmp_math import (expected_paths_used, expected_used_share, load_stats, p_no_collision,
                                 paths_used_distribution)


@pytest.mark.parametrize("n,expected", [(1, 1), (2, 0.5), (3, Fraction(2, 9)), (4, 0.09375),
                                        (8, Fraction(40320, 16777216))])
def test_no_collision_n_flows_on_n_paths(n, expected):
    assert p_no_collision(n) == expected


def test_no_collision_general():
    assert p_no_collision(2, 4) == Fraction(3, 4)
    assert p_no_collision(3, 4) == Fraction(4 * 3 * 2, 64)
    assert p_no_collision(5, 4) == 0
    assert round(float(p_no_collision(8)), 4) == 0.0024


@pytest.mark.parametrize("n,share", [(1, 1), (2, 0.75), (3, Fraction(19, 27)), (4, 0.68359375)])
def test_expected_share_of_paths_used(n, share):
    assert expected_used_share(n) == share


def test_expected_paths_used_and_general_share():
    assert expected_paths_used(4) == Fraction(175, 64)
    assert expected_used_share(1, 4) == Fraction(1, 4)
    assert expected_used_share(8, 2) == 1 - Fraction(1, 256)


def brute(f, p):
    """Every one of the p^f assignments, equally likely."""
    return list(itertools.product(range(p), repeat=f))


@pytest.mark.parametrize("f,p", [(2, 2), (3, 3), (4, 4), (3, 5), (5, 3)])
def test_formulas_agree_with_enumeration(f, p):
    outcomes = brute(f, p)
    total = len(outcomes)
    assert p_no_collision(f, p) == Fraction(sum(len(set(o)) == f for o in outcomes), total)
    assert expected_paths_used(f, p) == Fraction(sum(len(set(o)) for o in outcomes), total)
    dist = paths_used_distribution(f, p)
    for k, prob in dist.items():
        assert prob == Fraction(sum(len(set(o)) == k for o in outcomes), total)
    assert sum(dist.values()) == 1


def test_paths_used_distribution_at_4():
    assert paths_used_distribution(4) == {1: Fraction(4, 256), 2: Fraction(84, 256), 3: Fraction(144, 256),
                                          4: Fraction(24, 256)}


def test_load_stats_of_a_collision():
    s = load_stats({"f1": "s1", "f2": "s1", "f3": "s2"}, paths=["s1", "s2", "s3", "s4"])
    assert (s.flows, s.paths, s.paths_used) == (3, 4, 2)
    assert s.loads == {"s1": 2, "s2": 1, "s3": 0, "s4": 0}
    assert s.max_load == 2 and s.mean_load == 0.75 and s.imbalance == 2 / 0.75
    assert s.collided_flows == 2 and s.used_share == 0.5


def test_load_stats_pairs_weights_and_default_paths():
    s = load_stats([(1, "a"), (2, "b"), (3, "b")], weights={1: 300.0, 2: 100.0, 3: 200.0})
    assert s.paths == 2 and s.loads == {"a": 300.0, "b": 300.0}
    assert s.max_load == 300.0 and s.mean_load == 300.0 and s.imbalance == 1.0
    perfect = load_stats({i: i for i in range(4)})
    assert perfect.collided_flows == 0 and perfect.max_load == 1 and perfect.paths_used == 4


@pytest.mark.parametrize("assignment,kwargs,message", [
    ({}, {}, "empty assignment"),
    ([("f", "a"), ("f", "b")], {}, "assigned twice"),
    ({"f": "x"}, {"paths": ["a", "b"]}, "not in the list of paths"),
    ({"f": "a"}, {"weights": {}}, "needs a weight"),
    ({"f": "a"}, {"weights": {"f": -1}}, "needs a weight"),
    (["fa"], {}, "expected \\(flow, path\\) pairs"),
])
def test_load_stats_rejects_bad_input(assignment, kwargs, message):
    with pytest.raises(ValueError, match=message):
        load_stats(assignment, **kwargs)


@pytest.mark.parametrize("args", [(0,), (2, 0), (1.5,), (True,)])
def test_counts_must_be_positive_integers(args):
    with pytest.raises(ValueError, match="must be an integer >= 1"):
        p_no_collision(*args)
