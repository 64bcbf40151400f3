"""The flow model of routing (control/generators/flow_model.py): ECMP splits
by hand, Valiant's legs, and the Dragonfly's shape from Kim et al.: minimal
collapses under the group shift, Valiant holds about half of minimal's
uniform throughput, the best mix is never below either."""
from __future__ import annotations

from collections import defaultdict

import pytest

from control.generators.common import Graph
from control.generators.dragonfly import dragonfly_graph
from control.generators.flow_model import FlowModel, dragonfly_groups, group_shift, throughput, uniform
from control.generators.torus import torus_graph

SQUARE = Graph([("s1", "x"), ("s2", "x"), ("s3", "x"), ("s4", "x")], ["h1", "h4"],
               [("h1", "s1"), ("h4", "s4"), ("s1", "s2"), ("s1", "s3"), ("s2", "s4"), ("s3", "s4")])


def test_ecmp_splits_a_flow_evenly_over_equal_next_hops():
    model = FlowModel(SQUARE)
    loads: dict = defaultdict(float)
    model.route({("s1", "s4"): 1.0}, loads)
    assert dict(loads) == {("s1", "s2"): 0.5, ("s1", "s3"): 0.5, ("s2", "s4"): 0.5, ("s3", "s4"): 0.5}
    t = throughput(SQUARE, uniform(SQUARE))
    assert t["minimal"].max_link_load == 0.5 and t["minimal"].accepted == 1.0


def test_valiant_through_every_router_by_hand():
    # s1 -> s4 (1 unit), a quarter through each router: to s2 0.25 on s1-s2; to s3 0.25 on s1-s3; to s4
    # 0.25 split over both; from s1 the same split; from s2 0.25 on s2-s4. So s1->s2 carries
    # 0.25 + 0.125 + 0.125 = 0.5, as s2->s4 does, and the way back the same.
    model = FlowModel(SQUARE)
    t = throughput(SQUARE, uniform(SQUARE))["valiant"]
    assert t.valiant_fraction == 1.0 and t.max_link_load == pytest.approx(0.5)
    assert model.distances("s4") == {"s4": 0, "s2": 1, "s3": 1, "s1": 2}


def test_group_shift_sends_every_host_one_unit_to_the_next_group():
    graph = dragonfly_graph(2, 4, 2)
    demand = group_shift(graph)
    groups = dragonfly_groups(graph)
    model = FlowModel(graph)
    sent: dict = defaultdict(float)
    for (a, b), units in demand.items():
        assert groups[model.host_switch[b]] == (groups[model.host_switch[a]] + 1) % 9
        sent[a] += units
    assert set(sent) == set(graph.hosts) and all(v == pytest.approx(1.0) for v in sent.values())
    with pytest.raises(ValueError, match="not a Dragonfly router name"):
        dragonfly_groups(torus_graph((3, 3)))


@pytest.mark.parametrize("p", [2, 3])
def test_the_dragonfly_papers_shape(p):
    graph = dragonfly_graph(p, 2 * p, p)
    shift = throughput(graph, group_shift(graph), dragonfly=True)
    even = throughput(graph, uniform(graph), dragonfly=True)
    assert shift["minimal"].accepted < 0.7 * shift["valiant"].accepted          # minimal collapses
    assert 0.4 < even["valiant"].accepted / even["minimal"].accepted < 0.6     # Valiant: about half
    for t in (shift, even):
        assert t["mix"].accepted >= max(t["minimal"].accepted, t["valiant"].accepted) - 1e-9
    assert even["mix"].valiant_fraction == 0.0 and shift["mix"].valiant_fraction > 0.0
