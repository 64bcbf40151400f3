"""The topologies beyond Clos (control/generators/dragonfly.py, slim_fly.py,
torus.py): the properties their papers give them, checked on the generated
graphs; bad parameters refused naming the parameter; the shipped instances
load, and every switch has a shortest-path route to every host."""
from __future__ import annotations

import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path

import pytest
import yaml

from control.generators.common import GeneratorError
from control.generators.dragonfly import dragonfly, global_links
from control.generators.slim_fly import generator_sets, primitive_element, slim_fly
from control.generators.torus import torus
from features import load_topology, topology_from_dict

REPO = Path(__file__).resolve().parents[3]
SHIPPED = ("dragonfly-small", "dragonfly", "slimfly-q3", "slimfly-q5", "torus-3x3", "torus-4x4")


def graph(text: str):
    """(topology, router adjacency, hosts per router) of a generated file."""
    topo = topology_from_dict(yaml.safe_load(text), "<generated>")
    adj: dict[str, list[str]] = defaultdict(list)
    hosts: Counter = Counter()
    for link in topo.links:
        if link.a in topo.switches and link.b in topo.switches:
            adj[link.a].append(link.b)
            adj[link.b].append(link.a)
        else:
            hosts[link.b if link.a in topo.hosts else link.a] += 1
    return topo, adj, hosts


def hops(adj, src: str) -> dict[str, int]:
    seen, frontier = {src: 0}, [src]
    while frontier:
        nxt = []
        for u in frontier:
            for v in adj[u]:
                if v not in seen:
                    seen[v] = seen[u] + 1
                    nxt.append(v)
        frontier = nxt
    return seen


def diameter(adj) -> int:
    return max(max(hops(adj, r).values()) for r in adj)


@pytest.mark.parametrize("p,a,h,g", [(1, 2, 1, 3), (2, 4, 2, 9), (2, 4, 2, 5), (1, 4, 2, 3), (1, 6, 3, 19)])
def test_dragonfly_groups_local_and_global_links(p, a, h, g):
    topo, adj, hosts = graph(dragonfly(p, a, h, g))
    assert len(topo.switches) == a * g and set(hosts.values()) == {p}
    group = {r: r.split("r")[0] for r in topo.switches}
    for r, peers in adj.items():
        local = [x for x in peers if group[x] == group[r]]
        remote = [x for x in peers if group[x] != group[r]]
        assert sorted(local) == sorted(x for x in topo.switches if group[x] == group[r] and x != r), r
        assert len(remote) == h, r
    between = Counter(frozenset((group[u], group[v])) for u in adj for v in adj[u] if group[u] != group[v])
    # every pair of groups: a*h / (g - 1) global links (each counted from both ends above)
    assert set(between.values()) == {2 * a * h // (g - 1)} and len(between) == g * (g - 1) // 2
    assert diameter(adj) <= 3, "minimal routing: local, global, local"
    assert len(global_links(a, h, g)) == g * a * h // 2


def test_dragonfly_consecutive_arrangement_as_stated():
    """Router r (from 0) of group G reaches groups G + r*h + 1 .. G + r*h + h (mod g)."""
    a, h, g = 4, 2, 9
    for (G, r), (T, s) in global_links(a, h, g):
        assert (T - G) % g in range(r * h + 1, r * h + h + 1)
        assert (G - T) % g in range(s * h + 1, s * h + h + 1)


@pytest.mark.parametrize("q", [3, 5, 7, 11])
def test_slim_fly_is_the_mms_graph_degree_and_diameter_two(q):
    topo, adj, hosts = graph(slim_fly(q, p=1))
    delta = 1 if q % 4 == 1 else -1
    assert len(topo.switches) == 2 * q * q
    assert {len(peers) for peers in adj.values()} == {(3 * q - delta) // 2}
    assert all(len(set(peers)) == len(peers) for peers in adj.values()), "no parallel links"
    assert diameter(adj) == 2


def test_slim_fly_generator_sets_are_the_papers():
    # Besta and Hoefler's example, q = 5 (xi = 2): X = {1, 4}, X' = {2, 3}
    assert primitive_element(5) == 2 and generator_sets(5) == ({1, 4}, {2, 3})
    for q in (3, 5, 7, 11, 13):
        x, xp = generator_sets(q)
        assert x == {(-v) % q for v in x} and xp == {(-v) % q for v in xp}, "symmetric: undirected links"
        assert len(x) == len(xp) == (q - (1 if q % 4 == 1 else -1)) // 2


def test_slim_fly_hosts_default_to_half_the_router_radix():
    _, adj, hosts = graph(slim_fly(3))
    assert set(hosts.values()) == {3}                   # k' = 5, ceil(5 / 2)


@pytest.mark.parametrize("dims", [(3, 3), (4, 4), (3, 4), (3, 3, 3), (4, 3, 5)])
def test_torus_neighbours_wrap_around(dims):
    topo, adj, hosts = graph(torus(dims, p=2))
    n = 1
    for d in dims:
        n *= d
    assert len(topo.switches) == n and set(hosts.values()) == {2}
    assert {len(peers) for peers in adj.values()} == {2 * len(dims)}
    assert diameter(adj) == sum(d // 2 for d in dims)
    corner, far = "x1y1" + ("z1" if len(dims) == 3 else ""), f"x{dims[0]}y1" + ("z1" if len(dims) == 3 else "")
    assert far in adj[corner], "the wrap-around link"


@pytest.mark.parametrize("build,param", [
    (lambda: dragonfly(p=0), "--p"), (lambda: dragonfly(2, 4, 2, g=10), "--g"), (lambda: dragonfly(2, 4, 2, g=4), "--g"),
    (lambda: dragonfly(p=4, a=8, h=4), "--p"), (lambda: slim_fly(9), "--q"), (lambda: slim_fly(2), "--q"),
    (lambda: slim_fly(7), "--p"), (lambda: torus((2, 5)), "--dims"), (lambda: torus((3,)), "--dims"),
    (lambda: torus((3, 3), p=0), "--p"), (lambda: torus((16, 16)), "--p"),
])
def test_bad_parameters_are_named(build, param):
    with pytest.raises(GeneratorError) as exc:
        build()
    assert str(exc.value).startswith(f"{param}: "), exc.value


def test_the_command_writes_a_file_and_names_a_bad_parameter(tmp_path):
    out = tmp_path / "df.yaml"
    run = subprocess.run([sys.executable, "-m", "fabric.cli", "topology", "dragonfly", "--p", "1", "-o", str(out)],
                         cwd=REPO, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert len(load_topology(out).switches) == 2 * 3
    bad = subprocess.run([sys.executable, "-m", "fabric.cli", "topology", "slimfly", "--q", "4"],
                         cwd=REPO, capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "error: --q: must be an odd prime" in bad.stderr, bad.stderr


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_instances_route_every_switch_to_every_host(name):
    topo = load_topology(name)
    for sw, routes in topo.routes().items():
        assert {r.host for r in routes} == set(topo.hosts), sw
        assert all(r.next_hops for r in routes), sw
