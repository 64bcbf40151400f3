"""INT probe path planning: a few source-routed probes that, together, cross
every directed switch-to-switch link of a topology (as in INT-path, INFOCOM'19).

A probe is injected by a host on an *edge switch* (a switch with hosts). It
carries one egress port per switch it will visit; each switch pops its port,
and the last switch hands the probe to one of its hosts, whose INT sink
reports every hop. A plan is a list of such paths; it is complete when every
directed link u->v between two switches is crossed by at least one probe.

Why an Euler circuit
    Take the directed graph G whose edges are the directed switch links. A
    set of walks covering every edge of G needs at least

        max(1, sum over vertices v of max(0, out(v) - in(v)))

    walks per weakly connected component that has an edge (each walk can
    absorb only one unit of surplus at its start). Every link of a fabric
    runs both ways, so out(v) = in(v) everywhere: G is balanced, the bound is
    1 per component, and one closed Euler circuit (Hierholzer) crosses every
    directed link exactly once. INT-path works on the undirected graph,
    where the bound is k trails for 2k odd-degree vertices; probing both
    directions makes that question disappear.

    The circuit starts at an edge switch (equivalently: is rotated there),
    so it begins and ends where a host can inject and receive a probe. Any
    Euler circuit would do without a hop limit; with one, it matters how
    long the circuit stays away from edge switches. Textbook Hierholzer on
    fat-tree-k4 runs 16 switches through aggregations and cores without
    meeting a host. So the circuit is built as in Hierholzer's proof, from
    closed trails spliced where they meet, with the trails chosen to head
    back to hosts: at each switch, a probe arriving from the neighbour
    farthest from any edge switch leaves towards the nearest one (fat-tree:
    edge -> agg -> core -> agg -> edge, the shortest possible excursion),
    and trails are spliced at edge switches first.

The hop limit
    A probe has room for at most `max_hops` switches (a switch counted once
    per visit), so it crosses at most max_hops - 1 links. Hence the second
    lower bound, per component: ceil(#directed links / (max_hops - 1)). The
    circuit is cut greedily into pieces that start and end at edge switches:
    each piece is the longest prefix of what is left that ends at an edge
    switch and has at most `max_hops` switches; the next piece starts at
    that boundary switch. No piece ending at an edge switch within the limit
    -> ValueError. For a given circuit, cutting at the farthest edge switch
    is optimal (any cut at a nearer one leaves a suffix that is no easier:
    the argument of the gas-station problem), so the greedy cut fails only
    if no cut of that circuit exists. When every switch has hosts it meets
    ceil(links / (max_hops - 1)) exactly; when no two host-less switches are
    adjacent (leaf-spine), every piece but the last crosses at least
    max_hops - 2 links. The trail choice is a heuristic: on an odd fabric
    the circuit may stay among host-less switches longer than a shortest
    path would, and a tight limit can fail here where the baseline below
    still succeeds (not on the shipped topologies: there it succeeds down
    to the smallest limit that any plan can meet).

The baseline (`dfs_probe_paths`) spends one probe per link not yet covered:
shortest way from an edge switch to u, the link u->v, shortest way from v
to an edge switch. It is what one does without planning, for contrast.

    fabric probe-plan [--max-hops N] [topology.yaml ...]

prints, per topology (default: every topologies/*.yaml), both plans' size,
total switch visits (INT hop records) and coverage.
"""
from __future__ import annotations

import argparse
import math
import sys
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Optional, Sequence

from control.topology import Topology, TopologyError, load

TOPOLOGIES = Path(__file__).resolve().parents[1] / "topologies"
DEFAULT_MAX_HOPS = 16

Link = tuple[str, str]


@dataclass(frozen=True)
class ProbePath:
    """One source-routed probe.

    `switches` is the walk (first and last are edge switches; a switch may
    appear several times). `ports[i]` is the egress port at `switches[i]`:
    towards `switches[i + 1]`, and for the last switch towards `end_host`.
    `start_host` (on the first switch) injects the probe; `end_host` (on the
    last switch) is its INT sink. Hosts are named as in the topology file
    (a multi-homed host's NIC is the one behind the port).
    """
    switches: tuple[str, ...]
    ports: tuple[int, ...]
    start_host: str
    end_host: str

    def links(self) -> set[Link]:
        """The directed switch links this probe crosses."""
        return set(zip(self.switches, self.switches[1:]))

    @property
    def hops(self) -> int:
        """Switch visits, i.e. INT hop records the sink receives."""
        return len(self.switches)


# -- the graph ---------------------------------------------------------------

def directed_links(topo: Topology) -> set[Link]:
    """Every directed switch-to-switch link u->v, both directions of each link.

    Parallel links between the same two switches count once per direction:
    a probe verifies that u reaches v, and takes the lowest-numbered port
    (see `ProbePath.ports`), so the other parallel ports are not probed.
    """
    return {(name, port.peer) for name in topo.switches for port in topo.switch_neighbours(name)}


def edge_switches(topo: Topology) -> list[str]:
    """Switches with at least one host, in file order."""
    return [name for name in topo.switches if _host_port(topo, name) is not None]


def odd_degree_switches(topo: Topology) -> list[str]:
    """Switches of odd degree in the undirected switch graph (parallel links
    counted once, as in `directed_links`): 2k of them need k trails in INT-path."""
    return [name for name in topo.switches if len(_neighbours(topo, name)) % 2]


def components(topo: Topology) -> list[list[str]]:
    """Weakly connected components of the switch graph, each in file order
    (one per plane on a multi-plane fabric; a lone switch is its own)."""
    seen: set[str] = set()
    result = []
    for start in topo.switches:
        if start in seen:
            continue
        reached = _bfs(topo, [start])[0]
        seen.update(reached)
        result.append([name for name in topo.switches if name in reached])
    return result


def lower_bound(topo: Topology, max_hops: int = DEFAULT_MAX_HOPS) -> int:
    """A lower bound on the number of probes of any plan: the sum, over the
    components with links, of the larger of the Euler bound (1: the graph is
    balanced) and ceil(directed links / (max_hops - 1))."""
    _check_max_hops(max_hops)
    links = directed_links(topo)
    if links and max_hops < 2:
        raise ValueError(f"{topo.name}: max_hops={max_hops}: a probe of one switch crosses no link")
    counts = [sum(1 for u, _ in links if u in comp) for comp in components(topo)]
    return sum(max(1, math.ceil(count / (max_hops - 1))) for count in counts if count)


# -- the plans ---------------------------------------------------------------

def plan_probe_paths(topo: Topology, max_hops: int = DEFAULT_MAX_HOPS) -> list[ProbePath]:
    """Probes covering every directed switch link: per component, an Euler
    circuit from an edge switch, cut greedily at edge switches into pieces
    of at most `max_hops` switches (see the module docstring).

    Raises ValueError if a component with links has no edge switch, or if
    some piece cannot reach an edge switch within `max_hops` switches.
    """
    _check_max_hops(max_hops)
    edges = set(edge_switches(topo))
    paths: list[ProbePath] = []
    for comp in _components_to_probe(topo, edges):
        circuit = _euler_circuit(topo, comp, edges)
        start = 0
        while start < len(circuit) - 1:
            last = min(start + max_hops - 1, len(circuit) - 1)
            end = next((j for j in range(last, start, -1) if circuit[j] in edges), None)
            if end is None:
                raise ValueError(
                    f"{topo.name}: max_hops={max_hops} is too small: from edge switch {circuit[start]!r}, the "
                    f"probe cannot reach an edge switch within {max_hops} switches "
                    f"(next switches: {' -> '.join(circuit[start:last + 1])})")
            paths.append(_probe(topo, circuit[start:end + 1]))
            start = end
    return paths


def dfs_probe_paths(topo: Topology, max_hops: int = DEFAULT_MAX_HOPS) -> list[ProbePath]:
    """The naive baseline (INT-path's DFS-style one), for contrast: for each directed link u->v no probe
    covers yet, one probe along the shortest way from an edge switch to u,
    then u->v, then the shortest way from v to an edge switch (BFS). Each
    probe is thus as short as a probe of u->v can be; if even that exceeds
    `max_hops` switches, ValueError. A probe marks every link it crosses.
    """
    _check_max_hops(max_hops)
    edges = set(edge_switches(topo))
    paths: list[ProbePath] = []
    covered: set[Link] = set()
    for comp in _components_to_probe(topo, edges):
        # The graph is symmetric: the way from an edge switch to u, reversed,
        # is the way from u to its nearest edge switch.
        towards_edge = _bfs(topo, [s for s in comp if s in edges])[1]
        for u in comp:
            for v in _neighbours(topo, u):
                if (u, v) in covered:
                    continue
                to_u = _follow(towards_edge, u)[::-1]
                walk = to_u + _follow(towards_edge, v)
                if len(walk) > max_hops:
                    raise ValueError(
                        f"{topo.name}: max_hops={max_hops} is too small: the shortest probe of link {u}->{v} "
                        f"between edge switches visits {len(walk)} switches ({' -> '.join(walk)})")
                probe = _probe(topo, walk)
                covered |= probe.links()
                paths.append(probe)
    return paths


def coverage(paths: Iterable[ProbePath], topo: Topology) -> float:
    """Fraction of the directed switch links the probes cross (1.0 if there are none)."""
    links = directed_links(topo)
    return 1.0 if not links else 1 - len(uncovered(paths, topo)) / len(links)


def uncovered(paths: Iterable[ProbePath], topo: Topology) -> set[Link]:
    """The directed switch links no probe crosses."""
    crossed: set[Link] = set()
    for path in paths:
        crossed |= path.links()
    return directed_links(topo) - crossed


# -- helpers -----------------------------------------------------------------

def _check_max_hops(max_hops: int) -> None:
    if isinstance(max_hops, bool) or not isinstance(max_hops, int) or max_hops < 1:
        raise ValueError(f"max_hops must be an integer >= 1 (switches per probe), got {max_hops!r}")


def _neighbours(topo: Topology, name: str) -> list[str]:
    """Distinct switch neighbours, in port order."""
    return list(dict.fromkeys(port.peer for port in topo.switch_neighbours(name)))


def _host_port(topo: Topology, name: str) -> Optional[int]:
    """The lowest-numbered port of switch `name` with a host behind it."""
    return min((n for n, p in topo.switches[name].ports.items() if p.peer in topo.hosts), default=None)


def _port_towards(topo: Topology, name: str, peer: str) -> int:
    """The lowest-numbered port of switch `name` whose peer is `peer`."""
    return min(n for n, p in topo.switches[name].ports.items() if p.peer == peer)


def _bfs(topo: Topology, sources: list[str]) -> tuple[dict[str, int], dict[str, Optional[str]]]:
    """Multi-source BFS over the switch graph: hop distance and the previous
    switch (None at a source) of every switch reached."""
    dist = {s: 0 for s in sources}
    parent: dict[str, Optional[str]] = {s: None for s in sources}
    queue = deque(sources)
    while queue:
        cur = queue.popleft()
        for nxt in _neighbours(topo, cur):
            if nxt not in dist:
                dist[nxt], parent[nxt] = dist[cur] + 1, cur
                queue.append(nxt)
    return dist, parent


def _follow(parent: dict[str, Optional[str]], name: str) -> list[str]:
    """`name`, its parent, ... up to a BFS source."""
    walk = [name]
    up = parent[name]
    while up is not None:
        walk.append(up)
        up = parent[up]
    return walk


def _components_to_probe(topo: Topology, edges: set[str]) -> list[list[str]]:
    """Components with links; ValueError if one has no edge switch."""
    result = []
    for comp in components(topo):
        if len(comp) == 1:
            continue  # a lone switch: no link to probe
        if not edges.intersection(comp):
            raise ValueError(f"{topo.name}: switches {comp} are linked but have no host: no probe can be "
                             "injected into or received from their links")
        result.append(comp)
    return result


def _euler_circuit(topo: Topology, comp: list[str], edges: set[str]) -> list[str]:
    """A closed walk from an edge switch crossing every directed link of the
    component exactly once, built as in Hierholzer's proof (see the module
    docstring): `after` pairs each link into a switch with a link out of it,
    which splits the links into closed trails; splicing two trails that both
    pass switch v swaps where they leave v. Edge switches are tried first:
    a swap there lengthens no stretch without hosts.
    """
    dist = _bfs(topo, [s for s in comp if s in edges])[0]
    after: dict[Link, Link] = {}  # directed link -> the link the circuit takes next
    for v in comp:
        near = sorted(_neighbours(topo, v), key=dist.__getitem__)  # stable: port order on ties
        for w_in, w_out in zip(reversed(near), near):
            after[(w_in, v)] = (v, w_out)
    trail: dict[Link, int] = {}  # the closed trail of each link
    root: list[int] = []         # union-find over trails: which trails are spliced together
    for first in after:
        if first in trail:
            continue
        link = first
        while link not in trail:
            trail[link] = len(root)
            link = after[link]
        root.append(len(root))

    def find(t: int) -> int:
        while root[t] != t:
            t = root[t]
        return t

    for v in sorted(comp, key=dist.__getitem__):
        anchor, *others = [(w, v) for w in _neighbours(topo, v)]
        for link in others:
            if find(trail[link]) != find(trail[anchor]):
                root[find(trail[link])] = find(trail[anchor])
                after[anchor], after[link] = after[link], after[anchor]
    start = next(s for s in comp if s in edges)
    first = link = (start, _neighbours(topo, start)[0])
    circuit = [start]
    for _ in after:
        circuit.append(link[1])
        link = after[link]
    assert link == first and circuit[-1] == start, "the trails were not all spliced into one circuit"
    return circuit


def _probe(topo: Topology, walk: list[str]) -> ProbePath:
    """The probe along `walk` (edge switch to edge switch), with its ports and hosts."""
    first_port, last_port = _host_port(topo, walk[0]), _host_port(topo, walk[-1])
    assert first_port is not None and last_port is not None, f"{walk} does not start and end at edge switches"
    ports = [_port_towards(topo, u, v) for u, v in zip(walk, walk[1:])] + [last_port]
    return ProbePath(tuple(walk), tuple(ports),
                     start_host=topo.switches[walk[0]].ports[first_port].peer,
                     end_host=topo.switches[walk[-1]].ports[last_port].peer)


# -- command line ------------------------------------------------------------

COLUMNS = ("topology", "switches", "links", "odd(2k)", "bound", "euler", "hops", "cover",
           "dfs", "hops", "cover")


def table_row(topo: Topology, max_hops: int) -> tuple:
    """One line of the table: the topology, both plans and the lower bound."""
    euler, dfs = plan_probe_paths(topo, max_hops), dfs_probe_paths(topo, max_hops)
    return (topo.name, len(topo.switches), len(directed_links(topo)), len(odd_degree_switches(topo)),
            lower_bound(topo, max_hops),
            len(euler), sum(p.hops for p in euler), f"{coverage(euler, topo):.0%}",
            len(dfs), sum(p.hops for p in dfs), f"{coverage(dfs, topo):.0%}")


def main(argv: Optional[list[str]] = None, features: Sequence = ()) -> int:
    """`fabric probe-plan`: the plans of topology files, their sections parsed by `features`."""
    ap = argparse.ArgumentParser(prog="fabric probe-plan", description=__doc__.split("\n\n")[0],
                                 epilog="Columns: links = directed switch links; odd(2k) = odd-degree switches "
                                        "of the undirected graph (INT-path needs k trails); bound = a lower bound "
                                        "on the probes of any plan; hops = switch visits over all probes.")
    ap.add_argument("--max-hops", type=int, default=DEFAULT_MAX_HOPS,
                    help="most switches a probe may visit (default: %(default)s)")
    ap.add_argument("topologies", nargs="*", type=Path, metavar="topology",
                    help="topology files (default: every topologies/*.yaml)")
    args = ap.parse_args(argv)
    files = args.topologies or sorted(TOPOLOGIES.glob("*.yaml"))
    rows, failed = [], False
    for path in files:
        try:
            rows.append(table_row(load(path, features), args.max_hops))
        except ValueError as exc:  # a TopologyError too, whose message names the file already
            where = "" if isinstance(exc, TopologyError) else f"{path}: "
            print(f"probe_planner: {where}{exc}", file=sys.stderr)
            failed = True
    lines = [COLUMNS] + [tuple(map(str, row)) for row in rows]
    widths = [max(len(line[i]) for line in lines) for i in range(len(COLUMNS))]
    print(f"max_hops = {args.max_hops}")
    for line in lines:
        print("  ".join(cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in enumerate(zip(line, widths))))
    return 1 if failed or any(row[7] != "100%" or row[10] != "100%" for row in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
