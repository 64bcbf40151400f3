"""Paths for predictable traffic: give every flow of a traffic matrix one of
its shortest paths so that the most loaded link carries as few bytes as it
can (unsplittable min-max routing), a lower bound to measure the result
against, and the traffic matrices of ring and halving-doubling all-reduce.

Topology math with no feature in it: the central_routing feature
(features/central_routing.py) installs what `route_flows` computes, and the
experiment (experiments/central_routing.py) compares it with ECMP.

The problem: flows f with bytes w_f, each with candidate paths (every
shortest path between its first and last switch in the graph that survives
the failed links and switches); choose one path per flow minimising
max over link directions l of sum(w_f : f's path uses l). It is NP-hard in
general (bin packing is the case of parallel two-hop paths), so:

1. Greedy, largest flow first (ties: the flow given first): each flow takes
   the path that leaves the smallest maximum load, then the smallest
   maximum on its own links, then the smallest sum of loads on its links,
   then the first in candidate order (deterministic).
2. Local search on (maximum load, links at the maximum, sum of squared
   loads), compared lexicographically: move one flow to another of its
   paths, or swap the paths of two flows (one of them on a link at the
   maximum), whenever that makes the objective strictly smaller, until no
   move does. The maximum never rises; the other two terms let it leave
   plateaus where several links share the maximum.

`brute_force_optimum` enumerates every assignment (small cases, for the
tests); `lower_bound` is the fractional optimum (flows split over their
candidate paths, a linear program solved by scipy's HiGHS) or the largest
single flow, whichever is larger: no unsplittable assignment does better.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Callable, Hashable, Iterable, Optional, Sequence

from control.topology import Failures, Nic, Topology
from wire.roce import ROCEV2_UDP_PORT

IP_PROTO_UDP = 17
IP_PROTO_TCP = 6
MAX_PATHS = 256                 # candidate shortest paths per flow (first in port order beyond that)
MAX_SEARCH_ROUNDS = 10_000      # local-search improvements (each strictly lowers the objective)
SPORT_BASE = 0xC000             # RoCEv2 source ports 0xC000-0xFFFF

Hop = tuple[str, int]           # (switch, egress port): one direction of one switch-to-switch link
Path = tuple[Hop, ...]          # the hops of a flow's path; () when both ends share a switch


@dataclass(frozen=True)
class Flow:
    """One flow of a traffic matrix: source and destination NIC addresses,
    its UDP (or TCP) ports and the bytes it carries."""
    src: str
    dst: str
    sport: int
    bytes: int
    dport: int = ROCEV2_UDP_PORT
    protocol: int = IP_PROTO_UDP

    @property
    def key(self) -> tuple[str, str, int, int]:
        """What the switches match it on (central_routing.p4): src, dst, protocol, source port."""
        return self.src, self.dst, self.protocol, self.sport

    def __str__(self) -> str:
        return f"{self.src}:{self.sport} -> {self.dst}:{self.dport} ({self.bytes} B)"


@dataclass(frozen=True)
class Assignment:
    """A path per flow (in the flows' order) and the loads it gives."""
    flows: tuple[Flow, ...]
    paths: tuple[Path, ...]
    switches: tuple[tuple[str, ...], ...]     # each path's switches, first to last

    def loads(self) -> dict[Hop, int]:
        return link_loads(self.paths, [f.bytes for f in self.flows])

    @property
    def max_load(self) -> int:
        return max_load(self.loads())


# -- the optimisation, on any candidate paths (sequences of hashable links) ----

def link_loads(paths: Iterable[Sequence[Hashable]], weights: Sequence[int]) -> dict:
    """Bytes per link (direction) when flow i, of weights[i] bytes, takes paths[i]."""
    loads: dict = {}
    for path, w in zip(paths, weights):
        for link in path:
            loads[link] = loads.get(link, 0) + w
    return loads


def max_load(loads: dict) -> int:
    return max(loads.values(), default=0)


def _objective(loads: dict) -> tuple[int, int, int]:
    top = max(loads.values(), default=0)
    return top, sum(1 for v in loads.values() if v == top), sum(v * v for v in loads.values())


def _check(candidates: Sequence[Sequence[Sequence[Hashable]]], weights: Sequence[int]) -> None:
    if len(candidates) != len(weights):
        raise ValueError(f"{len(candidates)} flows' candidates but {len(weights)} weights")
    for i, (paths, w) in enumerate(zip(candidates, weights)):
        if not paths:
            raise ValueError(f"flow {i} has no candidate path")
        if isinstance(w, bool) or not isinstance(w, int) or w < 0:
            raise ValueError(f"flow {i}: bytes must be an integer >= 0, got {w!r}")


def greedy(candidates: Sequence[Sequence[Sequence[Hashable]]], weights: Sequence[int]) -> list[int]:
    """Step 1: largest flow first onto the path leaving the smallest maximum load."""
    _check(candidates, weights)
    loads: dict = {}
    top = 0
    choice = [0] * len(weights)
    for i in sorted(range(len(weights)), key=lambda i: (-weights[i], i)):
        w = weights[i]

        def cost(j: int) -> tuple[int, int, int, int]:
            after = [loads.get(link, 0) + w for link in candidates[i][j]]
            own = max(after, default=0)
            return max(top, own), own, sum(after), j
        best = min(range(len(candidates[i])), key=cost)
        choice[i] = best
        for link in candidates[i][best]:
            loads[link] = loads.get(link, 0) + w
            top = max(top, loads[link])
    return choice


def _move(loads: dict, path: Sequence[Hashable], w: int) -> None:
    for link in path:
        loads[link] = loads.get(link, 0) + w


def local_search(candidates: Sequence[Sequence[Sequence[Hashable]]], weights: Sequence[int],
                 choice: Sequence[int]) -> list[int]:
    """Step 2: single moves, then pairwise swaps, while the objective falls."""
    _check(candidates, weights)
    choice = list(choice)
    loads = link_loads((candidates[i][c] for i, c in enumerate(choice)), weights)
    best = _objective(loads)
    movable = [i for i in sorted(range(len(weights)), key=lambda i: (-weights[i], i))
               if len(candidates[i]) > 1 and weights[i] > 0]

    def trial(changes: list[tuple[int, int]]) -> bool:
        """Apply (flow, new path) changes; keep them if the objective fell."""
        nonlocal best
        old = [(i, choice[i]) for i, _ in changes]
        for i, j in changes:
            _move(loads, candidates[i][choice[i]], -weights[i])
            _move(loads, candidates[i][j], weights[i])
            choice[i] = j
        now = _objective(loads)
        if now < best:
            best = now
            return True
        for i, j in reversed(old):
            _move(loads, candidates[i][choice[i]], -weights[i])
            _move(loads, candidates[i][j], weights[i])
            choice[i] = j
        return False

    for _ in range(MAX_SEARCH_ROUNDS):
        if any(trial([(i, j)]) for i in movable for j in range(len(candidates[i])) if j != choice[i]):
            continue
        top = best[0]
        hot = {link for link, v in loads.items() if v == top}
        improved = False
        for a in movable:
            if not hot.intersection(candidates[a][choice[a]]):
                continue
            for b in movable:
                if b == a:
                    continue
                for ja in range(len(candidates[a])):
                    if ja == choice[a]:
                        continue
                    for jb in range(len(candidates[b])):
                        if jb != choice[b] and trial([(a, ja), (b, jb)]):
                            improved = True
                            break
                    if improved:
                        break
                if improved:
                    break
            if improved:
                break
        if not improved:
            break
    return choice


def assign(candidates: Sequence[Sequence[Sequence[Hashable]]], weights: Sequence[int],
           search: bool = True) -> list[int]:
    """The index of the chosen candidate path of each flow: greedy, then local search."""
    choice = greedy(candidates, weights)
    return local_search(candidates, weights, choice) if search else choice


def brute_force_optimum(candidates: Sequence[Sequence[Sequence[Hashable]]], weights: Sequence[int],
                        limit: int = 1_000_000) -> tuple[int, list[int]]:
    """The smallest maximum load of any assignment, and one that reaches it
    (every combination tried: small cases only, at most `limit`)."""
    _check(candidates, weights)
    combos = 1
    for paths in candidates:
        combos *= len(paths)
    if combos > limit:
        raise ValueError(f"{combos} assignments to enumerate, more than {limit}")
    best: Optional[tuple[int, list[int]]] = None
    for choice in itertools.product(*(range(len(p)) for p in candidates)):
        m = max_load(link_loads((candidates[i][c] for i, c in enumerate(choice)), weights))
        if best is None or m < best[0]:
            best = (m, list(choice))
    assert best is not None
    return best


def lower_bound(candidates: Sequence[Sequence[Sequence[Hashable]]], weights: Sequence[int]) -> float:
    """No assignment of one path per flow has a maximum load below this: the
    fractional optimum (each flow split over its candidates as a linear
    program: min t, sum_p x_fp = 1, per link sum w_f x_fp <= t), or the
    largest flow that crosses a link, whichever is larger."""
    _check(candidates, weights)
    import numpy as np                                  # third-party, only for the bound
    from scipy.optimize import linprog
    flows = [i for i, paths in enumerate(candidates) if len(paths[0]) > 0 and weights[i] > 0]
    if not flows:
        return 0.0
    largest = max(weights[i] for i in flows)
    scale = float(largest)
    columns = [(i, j) for i in flows for j in range(len(candidates[i]))]
    links = sorted({link for i, j in columns for link in candidates[i][j]}, key=repr)
    row = {link: k for k, link in enumerate(links)}
    n = len(columns) + 1                                  # x_fp, then t
    a_ub = np.zeros((len(links), n))
    for c, (i, j) in enumerate(columns):
        for link in candidates[i][j]:
            a_ub[row[link], c] += weights[i] / scale
    a_ub[:, -1] = -1.0
    a_eq = np.zeros((len(flows), n))
    at = {i: k for k, i in enumerate(flows)}
    for c, (i, _) in enumerate(columns):
        a_eq[at[i], c] = 1.0
    cost = np.zeros(n)
    cost[-1] = 1.0
    result = linprog(cost, A_ub=a_ub, b_ub=np.zeros(len(links)), A_eq=a_eq, b_eq=np.ones(len(flows)),
                     bounds=[(0, None)] * n, method="highs")
    if not result.success:
        raise RuntimeError(f"the lower bound's linear program failed: {result.message}")
    return max(float(result.fun) * scale, float(largest))


# -- on a topology -------------------------------------------------------------

def nic_by_address(topo: Topology, address: str) -> Nic:
    for nic in topo.nics:
        if nic.ip == address:
            return nic
    raise ValueError(f"no host NIC has address {address} in {topo.name}")


def shortest_paths(topo: Topology, first: str, last: str, failed: Optional[Failures] = None,
                   limit: int = MAX_PATHS) -> list[Path]:
    """Every shortest path from switch `first` to switch `last` in the graph
    that survives `failed` (the first `limit` in port order): [] when none."""
    failed = failed or Failures()
    if first in failed.switches or last in failed.switches:
        return []
    if first == last:
        return [()]
    dist = topo.hops_from([last], failed)
    if first not in dist:
        return []
    out: list[Path] = []

    def walk(switch: str, hops: list[Hop]) -> None:
        if len(out) >= limit:
            return
        if switch == last:
            out.append(tuple(hops))
            return
        for port in sorted(topo.switch_neighbours(switch, failed), key=lambda p: p.number):
            if dist.get(port.peer) == dist[switch] - 1:
                hops.append((switch, port.number))
                walk(port.peer, hops)
                hops.pop()
    walk(first, [])
    return out


def switches_of(topo: Topology, first: str, path: Path) -> tuple[str, ...]:
    """The switches a path crosses, first to last."""
    out = [first]
    for switch, port in path:
        out.append(topo.switches[switch].ports[port].peer)
    return tuple(out)


def flow_candidates(topo: Topology, flows: Sequence[Flow], failed: Optional[Failures] = None
                    ) -> list[list[Path]]:
    """Each flow's candidate paths; a ValueError names a flow with none."""
    out = []
    for i, flow in enumerate(flows):
        src, dst = nic_by_address(topo, flow.src), nic_by_address(topo, flow.dst)
        paths = shortest_paths(topo, src.switch, dst.switch, failed)
        if not paths:
            why = f" around {failed}" if failed else ""
            raise ValueError(f"flow {i} ({flow}): no path from {src.switch} to {dst.switch}{why}")
        out.append(paths)
    return out


def route_flows(topo: Topology, flows: Sequence[Flow], failed: Optional[Failures] = None,
                search: bool = True) -> Assignment:
    """A path per flow minimising the most loaded link (greedy + local search)."""
    candidates = flow_candidates(topo, flows, failed)
    choice = assign(candidates, [f.bytes for f in flows], search)
    paths = tuple(candidates[i][c] for i, c in enumerate(choice))
    firsts = [nic_by_address(topo, f.src).switch for f in flows]
    return Assignment(tuple(flows), paths, tuple(switches_of(topo, s, p) for s, p in zip(firsts, paths)))


def bound_of(topo: Topology, flows: Sequence[Flow], failed: Optional[Failures] = None) -> float:
    """lower_bound() of `flows` on `topo` (around `failed`)."""
    return lower_bound(flow_candidates(topo, flows, failed), [f.bytes for f in flows])


# -- traffic matrices of collectives --------------------------------------------

SportOf = Callable[[int, int], int]


def default_sport(rank: int, peer: int, channel: int = 0) -> int:
    """The RoCEv2 source port of a rank's channel to a peer, spread over
    RoCEv2's range: the collective library's default (its Communicator
    takes it from here), so the flows central routing pins are the ones the
    ranks send; a path-aware caller gives its own."""
    return SPORT_BASE + (rank * 131 + peer * 31 + channel * 7919) % 0x4000


def _check_ranks(addresses: Sequence[str], model_bytes: int) -> None:
    if len(addresses) < 2:
        raise ValueError(f"a collective needs at least 2 ranks, got {len(addresses)}")
    if len(set(addresses)) != len(addresses):
        raise ValueError("every rank needs its own address")
    if isinstance(model_bytes, bool) or not isinstance(model_bytes, int) or model_bytes < 1:
        raise ValueError(f"model bytes must be an integer >= 1, got {model_bytes!r}")


def ring_all_reduce_flows(addresses: Sequence[str], model_bytes: int,
                          sport_of: SportOf = default_sport) -> list[Flow]:
    """Ring all-reduce of `model_bytes` among ranks in this order: rank i
    sends rank i+1 (mod n) 2(n-1)/n of the model (reduce-scatter, then all-gather)."""
    _check_ranks(addresses, model_bytes)
    n = len(addresses)
    each = round(2 * (n - 1) * model_bytes / n)
    return [Flow(addresses[r], addresses[(r + 1) % n], sport_of(r, (r + 1) % n), each) for r in range(n)]


def halving_doubling_flows(addresses: Sequence[str], model_bytes: int,
                           sport_of: SportOf = default_sport) -> list[Flow]:
    """Halving-doubling all-reduce (hostagent/collectives/schedule.py's
    order), summed over its steps: with p the largest power of two <= n, the
    first 2(n-p) ranks fold pairwise (the even one sends the odd one the model
    and gets the result back); participant i and i XOR d exchange d/p of the
    model in the halving step of distance d and again in the doubling step."""
    _check_ranks(addresses, model_bytes)
    n = len(addresses)
    p = 1 << (n.bit_length() - 1)
    extra = n - p
    members = [2 * i + 1 for i in range(extra)] + list(range(2 * extra, n))
    sent: dict[tuple[int, int], int] = {}
    for i in range(extra):
        sent[(2 * i, 2 * i + 1)] = model_bytes
        sent[(2 * i + 1, 2 * i)] = model_bytes
    d = p // 2
    while d >= 1:
        for i in range(p):
            a, b = members[i], members[i ^ d]
            sent[(a, b)] = sent.get((a, b), 0) + round(2 * model_bytes * d / p)
        d //= 2
    return [Flow(addresses[a], addresses[b], sport_of(a, b), w) for (a, b), w in sorted(sent.items())]
