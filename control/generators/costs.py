"""What a topology costs and how far its hosts are apart, from the
generators' graphs: the comparisons of the Dragonfly and Slim Fly papers
(switches, links and ports per host at equal host count) against a fat tree.

    cost(family, params, graph) -> Cost
    sweep(max_hosts)            every family's instances up to max_hosts hosts
    at_equal_hosts(costs, N)    each family's smallest instance with >= N hosts

Families and their instances: the k-ary fat tree (k even), the balanced
Dragonfly (a = 2p, h = p, g = a*h + 1: the largest, one global link between
every two groups), the Slim Fly on the MMS graph of an odd prime q with the
paper's p = ceil(k'/2) hosts a router, and 2D and 3D tori with one host a
router (TPU-style: the host is the chip), at about every doubling of size. Counted: hosts; switches;
switch-to-switch links; ports in use (every link end on a switch, host
ports included); the radix (the most ports a switch uses); and the hops
between hosts (links between switches on a shortest path between the
switches the two hosts hang off; 0 under one switch): the diameter and the
mean over every ordered pair of distinct hosts.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Iterable, Iterator

import numpy as np
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import shortest_path

from control.generators.common import Graph
from control.generators.dragonfly import dragonfly_graph
from control.generators.fat_tree import fat_tree_graph
from control.generators.slim_fly import is_prime, slim_fly_graph
from control.generators.torus import torus_graph

FAMILIES = ("fat tree", "dragonfly", "slim fly", "torus 2D", "torus 3D")
# Tori: a side at about every doubling of the hosts (sizes between add rows, not information).
TORUS_2D_SIDES = (3, 4, 6, 8, 11, 16, 23, 32, 45, 64, 91, 104)
TORUS_3D_SIDES = (3, 4, 5, 6, 8, 10, 13, 16, 20, 22)
SOURCES_PER_CHUNK = 256          # shortest-path rows computed at once (memory: chunk x switches floats)


@dataclass(frozen=True)
class Cost:
    family: str
    params: str
    hosts: int
    switches: int
    switch_links: int
    ports: int
    radix: int
    diameter: int
    mean_hops: float

    @property
    def switches_per_host(self) -> float:
        return self.switches / self.hosts

    @property
    def links_per_host(self) -> float:
        return self.switch_links / self.hosts

    @property
    def ports_per_host(self) -> float:
        return self.ports / self.hosts

    def row(self) -> dict:
        return {"family": self.family, "params": self.params, "hosts": self.hosts, "switches": self.switches,
                "switch_links": self.switch_links, "ports": self.ports, "radix": self.radix,
                "switches_per_host": round(self.switches_per_host, 4),
                "links_per_host": round(self.links_per_host, 4), "ports_per_host": round(self.ports_per_host, 4),
                "diameter": self.diameter, "mean_hops": round(self.mean_hops, 4)}


def hop_stats(graph: Graph, transitive: bool = False) -> tuple[int, float]:
    """(diameter, mean) of the switch hops between distinct hosts.
    transitive: every switch sees the same distances to the others, with
    the same hosts on each (a torus): one source gives the exact answer."""
    index = {name: i for i, (name, _) in enumerate(graph.switches)}
    hosts_on = np.zeros(len(index))
    for a, b in graph.links:
        if a in index and b not in index:
            hosts_on[index[a]] += 1
        elif b in index and a not in index:
            hosts_on[index[b]] += 1
    pairs = [(index[a], index[b]) for a, b in graph.switch_links()]
    rows = [i for i, _ in pairs] + [j for _, j in pairs]
    cols = [j for _, j in pairs] + [i for i, _ in pairs]
    adjacency = csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(len(index), len(index)))
    sources = np.flatnonzero(hosts_on)
    if transitive:
        dist = shortest_path(adjacency, method="D", unweighted=True, indices=sources[:1])[0, sources]
        if np.isinf(dist).any():
            raise ValueError("the graph is not connected: some hosts cannot reach each other")
        per = hosts_on[sources[0]]
        n = len(graph.hosts)
        return int(dist.max()), float(per * (dist * hosts_on[sources]).sum() * len(sources)) / (n * (n - 1))
    diameter, total = 0.0, 0.0
    for start in range(0, len(sources), SOURCES_PER_CHUNK):
        chunk = sources[start:start + SOURCES_PER_CHUNK]
        dist = shortest_path(adjacency, method="D", unweighted=True, indices=chunk)
        reached = dist[:, sources]
        if np.isinf(reached).any():
            raise ValueError("the graph is not connected: some hosts cannot reach each other")
        diameter = max(diameter, float(reached.max()))
        total += float((hosts_on[chunk][:, None] * reached * hosts_on[sources][None, :]).sum())
    n = len(graph.hosts)
    return int(diameter), total / (n * (n - 1))


def cost(family: str, params: str, graph: Graph) -> Cost:
    """A torus is vertex-transitive: its hops are counted from one router."""
    ports = graph.ports_by_switch()
    diameter, mean = hop_stats(graph, transitive=family.startswith("torus"))
    return Cost(family, params, len(graph.hosts), len(graph.switches), len(graph.switch_links()),
                sum(ports.values()), max(ports.values()), diameter, mean)


def instances(max_hosts: int) -> Iterator[tuple[str, str, Graph]]:
    """(family, parameters, graph) of every family's instances with at most max_hosts hosts."""
    for k in itertools.count(4, 2):
        if k ** 3 // 4 > max_hosts:
            break
        yield "fat tree", f"k={k}", fat_tree_graph(k)
    for p in itertools.count(1):
        a, h = 2 * p, p
        if p * a * (a * h + 1) > max_hosts:
            break
        yield "dragonfly", f"p={p} a={a} h={h} g={a * h + 1}", dragonfly_graph(p, a, h)
    for q in itertools.count(3, 2):
        if not is_prime(q):
            continue
        graph = slim_fly_graph(q)
        if len(graph.hosts) > max_hosts:
            break
        yield "slim fly", f"q={q} p={len(graph.hosts) // (2 * q * q)}", graph
    for n in TORUS_2D_SIDES:
        if n ** 2 <= max_hosts:
            yield "torus 2D", f"{n}x{n}", torus_graph((n, n))
    for n in TORUS_3D_SIDES:
        if n ** 3 <= max_hosts:
            yield "torus 3D", f"{n}x{n}x{n}", torus_graph((n, n, n))


def sweep(max_hosts: int, families: Iterable[str] = FAMILIES) -> list[Cost]:
    wanted = set(families)
    return [cost(f, params, g) for f, params, g in instances(max_hosts) if f in wanted]


def at_equal_hosts(costs: list[Cost], target: int) -> list[Cost]:
    """Each family's smallest instance with at least `target` hosts (families with none are left out)."""
    out = []
    for family in FAMILIES:
        fits = [c for c in costs if c.family == family and c.hosts >= target]
        if fits:
            out.append(min(fits, key=lambda c: c.hosts))
    return out
