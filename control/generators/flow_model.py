"""Saturation throughput of a topology under a traffic pattern, for
minimal, Valiant and a mix of the two, in a flow-level model: what routing
can give at best before any packet runs.

Every host injects one unit (its link's capacity; every link carries one
unit each way) spread over its destinations by the pattern. A route splits
a flow evenly over every next hop that is one hop nearer, hop by hop, as
ECMP does. The load of the busiest directed switch-to-switch link, L, sets
the throughput: every host can inject min(1, 1/L) of its link's rate.

Routings:
- minimal: ECMP over the shortest paths;
- Valiant (Valiant and Brebner; on the Dragonfly as Kim et al. give it):
  each flow goes minimally to an intermediate chosen uniformly at random,
  then minimally to its destination. The intermediate is a group on a
  Dragonfly (entered at its routers nearest the source: the packet only
  has to reach the group), a router elsewhere;
- mix: a fraction of every flow by Valiant, the rest minimally, at the
  fraction (of 0, 0.05, ..., 1) with the least L: the best an adaptive
  choice between the two can do in this model, an upper bound for UGAL,
  whose decisions see only local queues.

Patterns: uniform (every host to every other, equally); group shift on a
Dragonfly (every host of group G to the hosts of group G+1: the adversarial
pattern of the paper, all of a group's traffic to one other group).
"""
from __future__ import annotations

import re
from collections import defaultdict, deque
from dataclasses import dataclass

from control.generators.common import Graph

MIX_STEPS = 20                     # the mix is searched at fractions 0, 1/20, ..., 1
Demand = dict[tuple[str, str], float]   # (source switch, destination switch) -> units


@dataclass(frozen=True)
class Throughput:
    routing: str
    max_link_load: float
    valiant_fraction: float        # of every flow (1 for Valiant, 0 for minimal)

    @property
    def accepted(self) -> float:
        """What each host can inject, as a fraction of its link's rate."""
        return min(1.0, 1.0 / self.max_link_load) if self.max_link_load > 0 else 1.0


class FlowModel:
    """A graph's switches, their links and hosts, with routes by ECMP."""

    def __init__(self, graph: Graph):
        self.switches = [s for s, _ in graph.switches]
        names = set(self.switches)
        self.adjacent: dict[str, list[str]] = defaultdict(list)
        self.host_switch: dict[str, str] = {}
        for a, b in graph.links:
            if a in names and b in names:
                self.adjacent[a].append(b)
                self.adjacent[b].append(a)
            elif b in names:
                self.host_switch[a] = b
            elif a in names:
                self.host_switch[b] = a
        self._dist: dict[str, dict[str, int]] = {}

    def distances(self, target: str) -> dict[str, int]:
        if target not in self._dist:
            dist = {target: 0}
            todo = deque([target])
            while todo:
                node = todo.popleft()
                for peer in self.adjacent[node]:
                    if peer not in dist:
                        dist[peer] = dist[node] + 1
                        todo.append(peer)
            self._dist[target] = dist
        return self._dist[target]

    def route(self, demand: Demand, loads: dict[tuple[str, str], float], scale: float = 1.0) -> None:
        """Add `demand` (times `scale`), routed by ECMP over shortest paths, to `loads`."""
        by_target: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        for (src, dst), units in demand.items():
            if src != dst and units:
                by_target[dst][src] += units * scale
        for target, sources in by_target.items():
            dist = self.distances(target)
            flow = defaultdict(float, sources)
            # farthest first: a node's flow is complete once every farther node has split its own
            order = sorted((n for n in dist if n != target), key=lambda n: -dist[n])
            for node in order:
                units = flow.get(node, 0.0)
                if not units:
                    continue
                nearer = [p for p in self.adjacent[node] if dist.get(p) == dist[node] - 1]
                share = units / len(nearer)
                for p in nearer:
                    loads[(node, p)] += share
                    flow[p] += share


def switch_demand(model: FlowModel, host_demand: dict[tuple[str, str], float]) -> Demand:
    out: Demand = defaultdict(float)
    for (a, b), units in host_demand.items():
        out[(model.host_switch[a], model.host_switch[b])] += units
    return out


def uniform(graph: Graph) -> dict[tuple[str, str], float]:
    """Every host sends one unit, spread equally over every other host."""
    n = len(graph.hosts)
    return {(a, b): 1.0 / (n - 1) for a in graph.hosts for b in graph.hosts if a != b}


DRAGONFLY_ROUTER = re.compile(r"^g(\d+)r(\d+)$")


def dragonfly_groups(graph: Graph) -> dict[str, int]:
    """Router -> its group (0-based), from the generator's names g<G>r<r>."""
    out = {}
    for name, _ in graph.switches:
        m = DRAGONFLY_ROUTER.match(name)
        if not m:
            raise ValueError(f"{name!r} is not a Dragonfly router name (g<G>r<r>)")
        out[name] = int(m.group(1)) - 1
    return out


def group_shift(graph: Graph) -> dict[tuple[str, str], float]:
    """Every host of group G sends one unit, spread over the hosts of group G+1."""
    group = dragonfly_groups(graph)
    model = FlowModel(graph)
    g = max(group.values()) + 1
    members: dict[int, list[str]] = defaultdict(list)
    for h in graph.hosts:
        members[group[model.host_switch[h]]].append(h)
    return {(a, b): 1.0 / len(members[(G + 1) % g])
            for G in range(g) for a in members[G] for b in members[(G + 1) % g]}


def _valiant_legs(model: FlowModel, demand: Demand, groups: dict[str, int] | None) -> tuple[Demand, Demand]:
    """Valiant's two legs summed over the intermediates, each taking
    1/(number of intermediates) of every flow: (to the intermediates, from them).
    A router intermediate splits each source's and each destination's total
    alone; a group is entered at its routers nearest the source, so there the
    second leg follows each flow."""
    first: Demand = defaultdict(float)
    second: Demand = defaultdict(float)
    if groups is None:
        out: dict[str, float] = defaultdict(float)
        into: dict[str, float] = defaultdict(float)
        for (src, dst), units in demand.items():
            out[src] += units
            into[dst] += units
        n = len(model.switches)
        for m in model.switches:
            for src, units in out.items():
                first[(src, m)] += units / n
            for dst, units in into.items():
                second[(m, dst)] += units / n
        return first, second
    by_group: dict[int, list[str]] = defaultdict(list)
    for switch, group in groups.items():
        by_group[group].append(switch)
    entries: dict[tuple[str, int], list[str]] = {}
    for src in {s for s, _ in demand}:
        for group, members in by_group.items():
            nearest = min(model.distances(m)[src] for m in members)
            entries[(src, group)] = [m for m in members if model.distances(m)[src] == nearest]
    for (src, dst), units in demand.items():
        for group in by_group:
            enter = entries[(src, group)]
            share = units / len(by_group) / len(enter)
            for m in enter:
                first[(src, m)] += share
                second[(m, dst)] += share
    return first, second


def throughput(graph: Graph, host_demand: dict[tuple[str, str], float], *, dragonfly: bool = False
               ) -> dict[str, Throughput]:
    """{"minimal", "valiant", "mix"}: each routing's busiest link load and accepted rate."""
    model = FlowModel(graph)
    demand = switch_demand(model, host_demand)
    minimal: dict[tuple[str, str], float] = defaultdict(float)
    model.route(demand, minimal)
    valiant: dict[tuple[str, str], float] = defaultdict(float)
    for leg in _valiant_legs(model, demand, dragonfly_groups(graph) if dragonfly else None):
        model.route(leg, valiant)
    links = set(minimal) | set(valiant)

    def peak(fraction: float) -> float:
        return max((1 - fraction) * minimal.get(l, 0.0) + fraction * valiant.get(l, 0.0) for l in links)

    best = min((peak(i / MIX_STEPS), i / MIX_STEPS) for i in range(MIX_STEPS + 1))
    return {"minimal": Throughput("minimal", peak(0.0), 0.0), "valiant": Throughput("valiant", peak(1.0), 1.0),
            "mix": Throughput("mix", best[0], best[1])}
