"""How long a collective takes on a topology, in the flow model of
control/generators/flow_model.py: what the topology and its routing cost a
collective, before any packet runs.

A collective is a sequence of rounds; in each round every rank sends the
same number of bytes. A round's traffic, every rank injecting one unit (its
link's capacity), routed by ECMP over shortest paths, loads the busiest
directed switch-to-switch link with L units; the round then takes max(1, L)
times what it takes at a host link's rate (a host's own link carries one
unit each way). Summed over the rounds, in units of S / (a host link's
rate), S the bytes each rank holds:

- ring all-reduce (reduce-scatter, then all-gather: 2(n - 1) rounds, each
  rank sending S/n to the next): 2(n - 1)/n x max(1, L);
- halving-doubling (Rabenseifner's all-reduce: recursive halving
  reduce-scatter, then recursive doubling all-gather; in round k each rank
  exchanges S/2^(k+1) with rank i XOR 2^k): 2 x sum over k of
  S/2^(k+1) x max(1, L_k), for n a power of two;
- all-to-all (S/n from every rank to every other, at once): (n - 1)/n x
  max(1, L).

The ideal is each with L <= 1, what a non-blocking network gives. Where the
ranks sit matters: rank i is the i-th host of an order (`order`), the
topology's own host order, a seeded random one, or on a torus a ring of
neighbours (`torus_neighbour_order`). Left out: latency (a round's and a
hop's: the ring's 2(n - 1) rounds pay most), compute, rounds overlapping.
"""
from __future__ import annotations

import math
import random
from collections import defaultdict
from dataclasses import dataclass
from typing import Sequence

from control.generators.common import Graph
from control.generators.dragonfly import dragonfly_graph
from control.generators.fat_tree import fat_tree_graph
from control.generators.flow_model import FlowModel, switch_demand
from control.generators.slim_fly import is_prime, slim_fly_graph
from control.generators.torus import router_point, torus_graph

COLLECTIVES = ("ring", "halving-doubling", "all-to-all")
ORDERS = ("host order", "neighbours", "random")
RANDOM_SEED = 1


@dataclass(frozen=True)
class CollectiveTime:
    collective: str
    time: float                    # S / a host link's rate
    ideal: float                   # the same on a non-blocking network
    max_link_load: float           # the busiest link's load, the worst round's
    mean_hops: float               # switch-to-switch links a byte crosses, the mean over the collective's bytes

    @property
    def slowdown(self) -> float:
        return self.time / self.ideal


def round_cost(model: FlowModel, pairs: Sequence[tuple[str, str]], units: float = 1.0) -> tuple[float, float]:
    """(busiest switch-to-switch link's load, mean switch-to-switch hops)
    when each (source host, destination host) pair carries `units`,
    routed by ECMP over shortest paths."""
    loads: dict[tuple[str, str], float] = defaultdict(float)
    model.route(switch_demand(model, {pair: units for pair in pairs}), loads)
    hops = [model.distances(model.host_switch[b])[model.host_switch[a]] for a, b in pairs]
    return max(loads.values(), default=0.0), sum(hops) / len(hops)


def ring_allreduce(model: FlowModel, ranks: Sequence[str]) -> CollectiveTime:
    n = len(ranks)
    load, hops = round_cost(model, [(ranks[i], ranks[(i + 1) % n]) for i in range(n)])
    ideal = 2 * (n - 1) / n
    return CollectiveTime("ring", ideal * max(1.0, load), ideal, load, hops)


def halving_doubling(model: FlowModel, ranks: Sequence[str]) -> CollectiveTime:
    n = len(ranks)
    if n < 2 or n & (n - 1):
        raise ValueError(f"halving-doubling needs a power of two ranks, got {n}")
    time = ideal = worst = byte_hops = 0.0
    for k in range(int(math.log2(n))):
        load, hops = round_cost(model, [(ranks[i], ranks[i ^ (1 << k)]) for i in range(n)])
        share = 1.0 / (1 << (k + 1))
        time += 2 * share * max(1.0, load)          # its reduce-scatter round and its all-gather round
        ideal += 2 * share
        byte_hops += 2 * share * hops
        worst = max(worst, load)
    return CollectiveTime("halving-doubling", time, ideal, worst, byte_hops / ideal)


def all_to_all(model: FlowModel, ranks: Sequence[str]) -> CollectiveTime:
    n = len(ranks)
    load, hops = round_cost(model, [(a, b) for a in ranks for b in ranks if a != b], 1.0 / (n - 1))
    ideal = (n - 1) / n
    return CollectiveTime("all-to-all", ideal * max(1.0, load), ideal, load, hops)


def torus_neighbour_order(graph: Graph) -> list[str]:
    """A torus' hosts (one a router) along a snake through its routers:
    the last coordinate runs up and down, each turn one step in the one
    before. Consecutive hosts are neighbours; the last and the first are
    too when the first dimension is even (a ring of neighbours), two hops
    apart otherwise."""
    coords: dict[tuple[int, ...], str] = {}
    for name, _ in graph.switches:
        point = router_point(name)
        if point is None:
            raise ValueError(f"{name!r} is not a torus router name (x<i>y<j>[z<k>])")
        coords[point] = name
    host_of: dict[str, str] = {}
    for a, b in graph.links:
        if a in graph.hosts:
            if b in host_of:
                raise ValueError(f"{b} has more than one host: the neighbour order needs one a router")
            host_of[b] = a
    dims = [max(c[i] for c in coords) + 1 for i in range(len(next(iter(coords))))]

    def snake(d: Sequence[int]) -> list[tuple[int, ...]]:
        if not d:
            return [()]
        rest = snake(d[1:])
        return [(i,) + r for i in range(d[0]) for r in (rest[::-1] if i % 2 else rest)]

    return [host_of[coords[c]] for c in snake(dims)]


def order(graph: Graph, how: str, n: int) -> list[str]:
    """n ranks' hosts: the first n of the graph's host order, of the
    neighbour order (a torus), or the first n in host order shuffled."""
    if how == "host order":
        hosts = list(graph.hosts)
    elif how == "neighbours":
        hosts = torus_neighbour_order(graph)
    elif how == "random":
        hosts = list(graph.hosts[:n])
        random.Random(RANDOM_SEED).shuffle(hosts)
    else:
        raise ValueError(f"order: expected one of {', '.join(ORDERS)}, got {how!r}")
    if len(hosts) < n:
        raise ValueError(f"{n} ranks, {len(hosts)} hosts")
    return hosts[:n]


def collective_times(graph: Graph, ranks: Sequence[str], collectives: Sequence[str] = COLLECTIVES
                     ) -> list[CollectiveTime]:
    model = FlowModel(graph)
    run = {"ring": ring_allreduce, "halving-doubling": halving_doubling, "all-to-all": all_to_all}
    return [run[c](model, ranks) for c in collectives]


def torus_dims(n: int, d: int) -> tuple[int, ...]:
    """A d-dimensional torus of n routers (n a power of two), sides powers
    of two as equal as they go, each at least 4."""
    bits = n.bit_length() - 1
    if n != 1 << bits or bits < 2 * d:
        raise ValueError(f"a {d}D torus of {n} routers: needs a power of two of at least {4 ** d}")
    return tuple(1 << (bits // d + (1 if i >= d - bits % d else 0)) for i in range(d))


def equal_rank_instances(n: int) -> list[tuple[str, str, Graph]]:
    """(family, parameters, graph) for n ranks: each family's smallest
    instance with at least n hosts (the fat tree's even k, the balanced
    Dragonfly's p, the Slim Fly's prime q with the paper's p), and the 2D
    and 3D tori of exactly n routers, one host each, when n allows."""
    k = 4
    while k ** 3 // 4 < n:
        k += 2
    out = [("fat tree", f"k={k}", fat_tree_graph(k))]
    p = 1
    while p * 2 * p * (2 * p * p + 1) < n:
        p += 1
    out.append(("dragonfly", f"p={p} a={2 * p} h={p} g={2 * p * p + 1}", dragonfly_graph(p, 2 * p, p)))
    q = 3
    while True:
        if is_prime(q):
            graph = slim_fly_graph(q)
            if len(graph.hosts) >= n:
                break
        q += 2
    out.append(("slim fly", f"q={q} p={len(graph.hosts) // (2 * q * q)}", graph))
    for d in (2, 3):
        try:
            dims = torus_dims(n, d)
        except ValueError:
            continue
        out.append((f"torus {d}D", "x".join(map(str, dims)), torus_graph(dims)))
    return out
