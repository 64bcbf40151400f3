"""A collective's time on a topology in the flow model
(control/generators/collective_model.py): rounds and link loads by hand on two
switches, the torus' ring of neighbours, a fat tree that blocks nothing, and
the instances compared at equal rank count."""
from __future__ import annotations

import pytest

from control.generators.collective_model import (all_to_all, collective_times, equal_rank_instances, halving_doubling,
                                              order, ring_allreduce, torus_dims, torus_neighbour_order)
from control.generators.common import Graph
from control.generators.fat_tree import fat_tree_graph
from control.generators.flow_model import FlowModel
from control.generators.torus import torus_graph

# Two switches, one link between them, two hosts on each.
PAIR = Graph([("s1", "leaf"), ("s2", "leaf")], ["h1", "h2", "h3", "h4"],
             [("h1", "s1"), ("h2", "s1"), ("h3", "s2"), ("h4", "s2"), ("s1", "s2")])


def test_ring_by_hand():
    """In host order one ring hop crosses each way (load 1): the ideal
    2(n-1)/n = 1.5. Alternating the switches, every hop crosses, two each
    way on the one link: twice as long."""
    model = FlowModel(PAIR)
    local = ring_allreduce(model, ["h1", "h2", "h3", "h4"])
    assert (local.time, local.ideal, local.max_link_load, local.mean_hops) == (1.5, 1.5, 1.0, 0.5)
    crossing = ring_allreduce(model, ["h1", "h3", "h2", "h4"])
    assert (crossing.time, crossing.max_link_load, crossing.mean_hops) == (3.0, 2.0, 1.0)
    assert crossing.slowdown == 2.0


def test_halving_doubling_and_all_to_all_by_hand():
    """Halving-doubling in host order: round 0 (S/2 each way) stays under a
    switch, round 1 (S/4) puts both hosts of a switch on the link: 2 x (1/2 +
    1/4 x 2) = 2 against 1.5. All-to-all: each host sends 1/3 to each other,
    2 x 2/3 = 4/3 on the link each way: 3/4 x 4/3 = 1."""
    model = FlowModel(PAIR)
    hd = halving_doubling(model, ["h1", "h2", "h3", "h4"])
    assert (hd.time, hd.ideal, hd.max_link_load) == (2.0, 1.5, 2.0)
    assert hd.mean_hops == pytest.approx((0.5 * 0 + 0.25 * 1) / 0.75), "bytes by round: S/2 local, S/4 across"
    a2a = all_to_all(model, ["h1", "h2", "h3", "h4"])
    assert (a2a.ideal, a2a.max_link_load) == (0.75, pytest.approx(4 / 3))
    assert a2a.time == pytest.approx(1.0)
    with pytest.raises(ValueError, match="power of two"):
        halving_doubling(model, ["h1", "h2", "h3"])


@pytest.mark.parametrize("dims", [(4, 4), (4, 3), (6, 5), (4, 4, 4), (4, 3, 5)])
def test_the_neighbour_order_is_a_ring_of_neighbours(dims):
    """Every host once, consecutive ones on neighbouring routers; the last
    and the first too when the first dimension is even (a ring laid on the
    torus: every ring hop one link, load 1), two hops apart otherwise."""
    graph = torus_graph(dims)
    ranks = torus_neighbour_order(graph)
    assert sorted(ranks) == sorted(graph.hosts)
    model = FlowModel(graph)
    switch = model.host_switch
    for a, b in zip(ranks, ranks[1:]):
        assert model.distances(switch[b])[switch[a]] == 1, (a, b)
    closing = model.distances(switch[ranks[0]])[switch[ranks[-1]]]
    assert closing == (1 if dims[0] % 2 == 0 else 2)
    if dims[0] % 2 == 0:
        ring = ring_allreduce(model, ranks)
        assert (ring.slowdown, ring.max_link_load, ring.mean_hops) == (1.0, 1.0, 1.0)


def test_a_fat_tree_blocks_no_collective_and_a_torus_pays_for_placement_and_all_to_all():
    """A fat tree (k=4, 16 ranks) is non-blocking: each collective at its
    ideal in any order. The 8x16 torus: the ring of neighbours at its ideal,
    the same ring in a random order slower, all-to-all limited by the
    bisection in any order."""
    fat = fat_tree_graph(4)
    for how in ("host order", "random"):
        assert all(t.slowdown == pytest.approx(1.0) for t in collective_times(fat, order(fat, how, 16))), how
    torus = torus_graph((8, 16))
    mapped = {t.collective: t for t in collective_times(torus, order(torus, "neighbours", 128))}
    shuffled = {t.collective: t for t in collective_times(torus, order(torus, "random", 128))}
    assert mapped["ring"].slowdown == 1.0 and shuffled["ring"].slowdown > 2.0
    assert shuffled["ring"].mean_hops > 2 * mapped["ring"].mean_hops
    assert mapped["all-to-all"].slowdown > 1.5
    assert mapped["all-to-all"].max_link_load == pytest.approx(shuffled["all-to-all"].max_link_load), \
        "all-to-all is the same traffic in any order"


def test_instances_at_equal_rank_count():
    assert torus_dims(128, 2) == (8, 16) and torus_dims(128, 3) == (4, 4, 8) and torus_dims(1024, 3) == (8, 8, 16)
    with pytest.raises(ValueError):
        torus_dims(32, 3)                   # 2x4x4: a side below 4
    found = {family: (params, len(graph.hosts)) for family, params, graph in equal_rank_instances(64)}
    assert found == {"fat tree": ("k=8", 128), "dragonfly": ("p=2 a=4 h=2 g=9", 72),
                     "slim fly": ("q=5 p=4", 200), "torus 2D": ("8x8", 64), "torus 3D": ("4x4x4", 64)}
    assert "torus 3D" not in {f for f, _, _ in equal_rank_instances(16)}
    with pytest.raises(ValueError, match="order"):
        order(fat_tree_graph(4), "sideways", 16)
