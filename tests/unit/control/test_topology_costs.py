"""Topology costs (control/generators/costs.py) against the closed forms of
the fat tree, the balanced Dragonfly and the Slim Fly, the torus shortcut
against the full count, and `fabric experiment topologies`' outputs."""
from __future__ import annotations

import csv
import itertools

import pytest

from control.generators.common import Graph
from control.generators.costs import Cost, at_equal_hosts, cost, hop_stats, instances, sweep
from control.generators.dragonfly import dragonfly_graph
from control.generators.fat_tree import fat_tree_graph
from control.generators.slim_fly import network_radix, slim_fly_graph
from control.generators.torus import torus_graph
from experiments import topologies


@pytest.mark.parametrize("k", [4, 8, 22])
def test_fat_tree_closed_forms(k):
    c = cost("fat tree", f"k={k}", fat_tree_graph(k))
    assert (c.hosts, c.switches, c.switch_links) == (k ** 3 // 4, 5 * k * k // 4, k ** 3 // 2)
    assert (c.ports_per_host, c.radix, c.diameter) == (5.0, k, 4)


@pytest.mark.parametrize("p", [1, 2, 3])
def test_balanced_dragonfly_closed_forms(p):
    a, h = 2 * p, p
    g = a * h + 1
    c = cost("dragonfly", "", dragonfly_graph(p, a, h))
    assert (c.hosts, c.switches) == (p * a * g, a * g)
    assert c.switch_links == g * a * (a - 1) // 2 + g * a * h // 2
    assert c.radix == p + (a - 1) + h and c.diameter == 3


@pytest.mark.parametrize("q", [3, 5, 7])
def test_slim_fly_closed_forms(q):
    graph = slim_fly_graph(q)
    c = cost("slim fly", "", graph)
    p = len(graph.hosts) // (2 * q * q)
    assert c.switches == 2 * q * q and c.switch_links == q * q * network_radix(q)
    assert c.radix == p + network_radix(q) and c.diameter == 2


@pytest.mark.parametrize("dims", [(3, 3), (4, 6), (5, 5), (3, 4, 5), (4, 4, 4)])
def test_a_torus_counted_from_one_router_matches_every_router(dims):
    graph = torus_graph(dims)
    assert hop_stats(graph, transitive=True) == pytest.approx(hop_stats(graph))
    assert hop_stats(graph)[0] == sum(n // 2 for n in dims)


def test_hops_of_a_small_graph_by_hand():
    # h1, h2 on s1; h3 on s3; s1 - s2 - s3: pairs (ordered, distinct) 6; hops 0,2,0,2,2,2 -> 8/6
    graph = Graph([("s1", "x"), ("s2", "x"), ("s3", "x")], ["h1", "h2", "h3"],
                  [("h1", "s1"), ("h2", "s1"), ("h3", "s3"), ("s1", "s2"), ("s2", "s3")])
    assert hop_stats(graph) == (2, pytest.approx(8 / 6))
    c = cost("line", "", graph)
    assert (c.switch_links, c.ports, c.radix) == (2, 7, 3)
    with pytest.raises(ValueError, match="not connected"):
        hop_stats(Graph(graph.switches, graph.hosts, graph.links[:-1]))


def test_at_equal_hosts_takes_each_familys_smallest_instance_that_is_big_enough():
    costs = sweep(600)
    picked = {c.family: c for c in at_equal_hosts(costs, 200)}
    assert picked["fat tree"].params == "k=10" and picked["slim fly"].hosts == 200
    for c in picked.values():
        assert c.hosts >= 200
        assert not any(o.family == c.family and 200 <= o.hosts < c.hosts for o in costs)
    assert all(isinstance(c, Cost) for c in costs)
    assert {f for f, _, _ in itertools.islice(instances(100), 100)} == {"fat tree", "dragonfly", "slim fly",
                                                                      "torus 2D", "torus 3D"}


def test_the_experiment_writes_its_tables_and_figures(tmp_path, capsys):
    assert topologies.main(["--phases", "costs", "throughput", "--max-hosts", "300", "--targets", "50", "250",
                            "--dragonfly-p", "1", "2", "--uniform-max-hosts", "60", "--out", str(tmp_path)]) == 0
    rows = list(csv.DictReader(open(tmp_path / "costs_at_equal_hosts.csv")))
    assert {r["target"] for r in rows} == {"50", "250"}
    assert (tmp_path / "costs.png").stat().st_size > 10_000
    assert (tmp_path / "throughput.png").stat().st_size > 10_000
    rows = list(csv.DictReader(open(tmp_path / "throughput.csv")))
    assert {(r["params"], r["pattern"], r["routing"]) for r in rows if r["family"] == "dragonfly"} == {
        (f"p={p} a={2 * p} h={p} g={2 * p * p + 1}", pattern, routing)
        for p in (1, 2) for pattern in ("uniform", "group shift") for routing in ("minimal", "valiant", "mix")}
    assert str(tmp_path / "costs.csv") in capsys.readouterr().out
    with pytest.raises(SystemExit):
        topologies.main(["--max-hosts", "300", "--targets", "500", "--out", str(tmp_path)])
