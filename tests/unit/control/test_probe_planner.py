"""INT probe path planning (control/probe_planner.py): the Euler plan and
the shortest-path baseline cross every directed switch link, with probes a
switch can actually forward (real port numbers, edge switch to edge switch,
within the hop limit), and the Euler plan is never the bigger one."""
import random
from pathlib import Path

import pytest

from control.topology import Topology

from features import FEATURES, load_topology, topology_from_dict
from control.probe_planner import (ProbePath, coverage, dfs_probe_paths, directed_links, lower_bound, main,
                                     plan_probe_paths, uncovered)

TOPOLOGIES = Path(__file__).resolve().parents[3] / "topologies"
SHIPPED = sorted(TOPOLOGIES.glob("*.yaml"))
PLANNERS = [pytest.param(plan_probe_paths, id="euler"), pytest.param(dfs_probe_paths, id="dfs")]


@pytest.fixture(params=SHIPPED, ids=[p.stem for p in SHIPPED])
def topo(request) -> Topology:
    return load_topology(request.param)


def edge_switches(topo: Topology) -> set[str]:
    return {name for name, sw in topo.switches.items() if any(p.peer in topo.hosts for p in sw.ports.values())}


def first_host(topo: Topology, switch: str) -> str:
    ports = topo.switches[switch].ports
    return ports[min(n for n, p in ports.items() if p.peer in topo.hosts)].peer


def assert_forwardable(topo: Topology, path: ProbePath, max_hops: int) -> None:
    """The probe is one a host can inject and the switches can forward, port by port."""
    edges = edge_switches(topo)
    assert path.switches[0] in edges and path.switches[-1] in edges, path
    assert 2 <= len(path.switches) <= max_hops, path
    assert len(path.ports) == len(path.switches), path
    for here, there, port in zip(path.switches, path.switches[1:], path.ports):
        assert port in topo.switches[here].ports, f"{here} has no port {port}: {path}"
        assert topo.switches[here].ports[port].peer == there, f"{here} port {port} does not lead to {there}: {path}"
    assert topo.switches[path.switches[-1]].ports[path.ports[-1]].peer == path.end_host, path
    assert path.end_host in topo.hosts and path.start_host == first_host(topo, path.switches[0]), path


def build(switches, hosts, links, name="hand") -> Topology:
    return topology_from_dict({"name": name, "switches": switches, "hosts": hosts, "links": links})


# -- every shipped topology --------------------------------------------------

def test_euler_plan_covers_every_directed_link(topo):
    paths = plan_probe_paths(topo)
    assert uncovered(paths, topo) == set()
    assert coverage(paths, topo) == 1.0


@pytest.mark.parametrize("planner", PLANNERS)
def test_probes_are_forwardable(topo, planner):
    paths = planner(topo, max_hops=16)
    assert coverage(paths, topo) == 1.0
    for path in paths:
        assert_forwardable(topo, path, 16)


def test_euler_plan_is_never_bigger_than_the_baseline(topo):
    euler, dfs = plan_probe_paths(topo), dfs_probe_paths(topo)
    assert lower_bound(topo) <= len(euler) <= len(dfs)
    assert sum(len(p.switches) for p in euler) <= sum(len(p.switches) for p in dfs)


def test_one_probe_per_component_when_the_limit_allows_the_whole_circuit(topo):
    links = directed_links(topo)
    # Files are validated connected (per plane on a multi-plane fabric).
    components_with_links = (len(topo.planes) or 1) if links else 0
    paths = plan_probe_paths(topo, max_hops=len(links) + 1)
    assert len(paths) == components_with_links
    assert sum(len(p.switches) for p in paths) == len(links) + components_with_links  # each link exactly once


# -- hop limits --------------------------------------------------------------

@pytest.mark.parametrize("name,max_hops,expected", [
    pytest.param("leaf-spine", 3, 4, id="leaf-spine-3"),      # leaf-spine-leaf: 2 links per probe, 8 links
    pytest.param("leaf-spine", 4, 4, id="leaf-spine-4"),      # a 4th switch would be a spine
    pytest.param("leaf-spine", 5, 2, id="leaf-spine-5"),
    pytest.param("dual-plane", 3, 8, id="dual-plane-3"),
    pytest.param("rail-optimized", 3, 8, id="rail-optimized-3"),
    pytest.param("dumbbell", 2, 2, id="dumbbell-2"),
    pytest.param("fat-tree-k4", 5, 16, id="fat-tree-k4-5"),   # edge-agg-core-agg-edge, the shortest core probe
])
def test_small_hop_limits_still_cover_everything(name, max_hops, expected):
    topo = load_topology(TOPOLOGIES / f"{name}.yaml")
    paths = plan_probe_paths(topo, max_hops)
    assert coverage(paths, topo) == 1.0
    for path in paths:
        assert_forwardable(topo, path, max_hops)
    assert len(paths) == expected
    assert lower_bound(topo, max_hops) <= len(paths) <= len(dfs_probe_paths(topo, max_hops))


@pytest.mark.parametrize("planner", PLANNERS)
@pytest.mark.parametrize("name,max_hops", [
    pytest.param("leaf-spine", 1, id="leaf-spine-1"),
    pytest.param("leaf-spine", 2, id="leaf-spine-2"),        # leaf to spine, and no host on the spine
    pytest.param("fat-tree-k4", 4, id="fat-tree-k4-4"),      # a core link needs 5 switches
])
def test_too_small_a_limit_is_an_error(planner, name, max_hops):
    topo = load_topology(TOPOLOGIES / f"{name}.yaml")
    with pytest.raises(ValueError, match=rf"^{name}: max_hops={max_hops} is too small"):
        planner(topo, max_hops)


@pytest.mark.parametrize("max_hops", [0, -3, 2.5, True], ids=["zero", "negative", "float", "bool"])
def test_max_hops_must_be_a_positive_integer(max_hops):
    with pytest.raises(ValueError, match="max_hops must be an integer >= 1"):
        plan_probe_paths(load_topology(TOPOLOGIES / "leaf-spine.yaml"), max_hops)


# -- hand-built fabrics --------------------------------------------------------

def line() -> Topology:
    """s1 - s2 - s3, hosts on the two ends only."""
    return build(["s1", "s2", "s3"], ["h1", "h3"], [["h1", "s1"], ["s1", "s2"], ["s2", "s3"], ["h3", "s3"]])


def test_line_is_one_circuit_through_the_middle_and_back():
    topo = line()
    assert directed_links(topo) == {("s1", "s2"), ("s2", "s1"), ("s2", "s3"), ("s3", "s2")}
    # Ports: s1: 1 = h1, 2 = s2; s2: 1 = s1, 2 = s3; s3: 1 = s2, 2 = h3.
    assert plan_probe_paths(topo) == [ProbePath(("s1", "s2", "s3", "s2", "s1"), (2, 2, 1, 1, 1), "h1", "h1")]
    assert plan_probe_paths(topo, max_hops=3) == [ProbePath(("s1", "s2", "s3"), (2, 2, 2), "h1", "h3"),
                                                  ProbePath(("s3", "s2", "s1"), (1, 1, 1), "h3", "h1")]
    # The baseline: s1->s2 (and back), then s2->s3 from s1, then s3->s2 back to s1.
    assert [p.switches for p in dfs_probe_paths(topo)] == [
        ("s1", "s2", "s1"), ("s1", "s2", "s3"), ("s3", "s2", "s1")]
    with pytest.raises(ValueError, match=r"hand: max_hops=2 is too small: from edge switch 's1'"):
        plan_probe_paths(topo, max_hops=2)


@pytest.mark.parametrize("max_hops,expected", [
    pytest.param(m, n, id=f"max_hops={m}") for m, n in [(16, 1), (9, 1), (8, 2), (5, 2), (4, 3), (3, 4), (2, 8)]])
def test_ring_with_hosts_everywhere_meets_the_hop_bound(max_hops, expected):
    """Every switch an edge switch: ceil(8 links / (max_hops - 1)) probes, no more."""
    names = ["s1", "s2", "s3", "s4"]
    links = [[f"h{i}", f"s{i}"] for i in range(1, 5)] + [[a, b] for a, b in zip(names, names[1:] + names[:1])]
    topo = build(names, ["h1", "h2", "h3", "h4"], links)
    paths = plan_probe_paths(topo, max_hops)
    assert len(paths) == expected == lower_bound(topo, max_hops)
    assert coverage(paths, topo) == 1.0
    for path in paths:
        assert_forwardable(topo, path, max_hops)


def test_parallel_links_count_once_per_direction():
    topo = build(["s1", "s2"], ["h1"], [["h1", "s1"], ["s1", "s2"], ["s1", "s2"]])
    assert directed_links(topo) == {("s1", "s2"), ("s2", "s1")}
    # s1: 1 = h1, 2 and 3 = s2; s2: 1 and 2 = s1. The lowest port is taken.
    assert plan_probe_paths(topo) == [ProbePath(("s1", "s2", "s1"), (2, 1, 1), "h1", "h1")]
    assert plan_probe_paths(topo)[0].links() == {("s1", "s2"), ("s2", "s1")}


def planes(b_switches, b_links) -> Topology:
    """Plane a: h1 - s1 - s2; plane b: the given switches and links, no host."""
    return topology_from_dict({"name": "planes", "hosts": ["h1"],
                      "switches": [{"name": "s1", "plane": "a"}, {"name": "s2", "plane": "a"}]
                      + [{"name": name, "plane": "b"} for name in b_switches],
                      "links": [["h1", "s1"], ["s1", "s2"]] + b_links})


def test_a_component_without_links_or_hosts_is_ignored():
    topo = planes(["s3"], [])  # plane b: a lone switch
    assert [p.switches for p in plan_probe_paths(topo)] == [("s1", "s2", "s1")]
    assert coverage(dfs_probe_paths(topo), topo) == 1.0


@pytest.mark.parametrize("planner", PLANNERS)
def test_a_component_with_links_but_no_host_is_an_error(planner):
    topo = planes(["s3", "s4"], [["s3", "s4"]])
    with pytest.raises(ValueError, match=r"planes: switches \['s3', 's4'\] are linked but have no host"):
        planner(topo)


@pytest.mark.parametrize("seed", range(20), ids=lambda seed: f"seed={seed}")
def test_random_fabrics(seed):
    """Random connected fabrics, hosts on some switches: one circuit with room
    for it; with a tight limit, full coverage or a clear error."""
    rng = random.Random(seed)
    names = [f"s{i}" for i in range(rng.randint(2, 9))]
    pairs = [[names[i], rng.choice(names[:i])] for i in range(1, len(names))]  # a spanning tree
    pairs += [[a, b] for a in names for b in names if a < b and rng.random() < 0.3]  # parallel links too
    edges = rng.sample(names, rng.randint(1, len(names)))
    hosts = [f"h{i}" for i in range(len(edges))]
    topo = build(names, hosts, [[h, edge] for h, edge in zip(hosts, edges)] + pairs)
    links = directed_links(topo)
    (circuit,) = plan_probe_paths(topo, max_hops=len(links) + 1)
    assert circuit.links() == links and len(circuit.switches) == len(links) + 1
    try:
        paths = plan_probe_paths(topo, max_hops=6)
    except ValueError as exc:
        assert str(exc).startswith("hand: max_hops=6 is too small")
    else:
        assert coverage(paths, topo) == 1.0
        for path in paths:
            assert_forwardable(topo, path, 6)
        assert lower_bound(topo, 6) <= len(paths)


def test_coverage_and_uncovered_of_a_partial_plan():
    topo = line()
    partial = [ProbePath(("s1", "s2", "s3"), (2, 2, 2), "h1", "h3")]
    assert uncovered(partial, topo) == {("s2", "s1"), ("s3", "s2")}
    assert coverage(partial, topo) == 0.5
    assert coverage([], topo) == 0.0


# -- command line --------------------------------------------------------------

def test_main_prints_a_row_per_topology(capsys):
    assert main(["--max-hops", "3", str(TOPOLOGIES / "leaf-spine.yaml"), str(TOPOLOGIES / "star.yaml")], FEATURES) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "max_hops = 3"
    assert out[1].split() == ["topology", "switches", "links", "odd(2k)", "bound", "euler", "hops", "cover",
                              "dfs", "hops", "cover"]
    assert out[2].split() == ["leaf-spine", "4", "8", "0", "4", "4", "12", "100%", "6", "18", "100%"]
    assert out[3].split()[0] == "star"


def test_main_fails_on_a_limit_too_small(capsys):
    assert main(["--max-hops", "4", str(TOPOLOGIES / "fat-tree-k4.yaml")], FEATURES) == 1
    assert "fat-tree-k4: max_hops=4 is too small" in capsys.readouterr().err
