"""ECMP collision math for the load-balancing experiment: what random hashing
of a few elephant flows onto equal paths is expected to do, and what a
measured assignment did. Pure functions; probabilities are exact Fractions.

With f flows hashed independently and uniformly onto p paths (ECMP with a
good hash and distinct 5-tuples):

  P(no two flows share a path) = p! / ((p - f)! p^f)      (f <= p; else 0)
                               = n! / n^n                  for f = p = n
                               (1/2 at n = 2, 3/32 = 0.09375 at 4, ~0.0024 at 8)
  expected share of paths used = 1 - (1 - 1/p)^f
                               (3/4 at n = 2, 175/256 = 0.68359375 at 4, -> 1 - 1/e)
  P(exactly k paths used)      = C(p, k) k! S(f, k) / p^f  (S: Stirling numbers of
                               the second kind: ways to split f flows into k groups)

load_stats() reads an actual assignment, flow -> path (as measured from switch
counters or the hash), and gives paths used, per-path load, max and mean load.
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from math import comb, factorial
from typing import Dict, Hashable, Iterable, Mapping, Optional, Tuple, Union


def _counts(flows: int, paths: Optional[int]) -> Tuple[int, int]:
    paths = flows if paths is None else paths
    for name, v in (("flows", flows), ("paths", paths)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
    return flows, paths


def p_no_collision(flows: int, paths: Optional[int] = None) -> Fraction:
    """Probability that no two of `flows` flows hash onto the same of `paths`
    equal paths (paths defaults to flows: n!/n^n)."""
    f, p = _counts(flows, paths)
    if f > p:
        return Fraction(0)
    return Fraction(factorial(p) // factorial(p - f), p ** f)


def expected_used_share(flows: int, paths: Optional[int] = None) -> Fraction:
    """Expected fraction of the paths that carry at least one flow: 1 - (1 - 1/p)^f."""
    f, p = _counts(flows, paths)
    return 1 - (1 - Fraction(1, p)) ** f


def expected_paths_used(flows: int, paths: Optional[int] = None) -> Fraction:
    """Expected number of paths that carry at least one flow: p (1 - (1 - 1/p)^f)."""
    f, p = _counts(flows, paths)
    return p * expected_used_share(f, p)


def _stirling2(n: int, k: int) -> int:
    """Stirling number of the second kind S(n, k), by the recurrence."""
    row = [1] + [0] * k                      # S(0, j)
    for i in range(1, n + 1):
        new = [0] * (k + 1)
        for j in range(1, min(i, k) + 1):
            new[j] = j * row[j] + row[j - 1]
        row = new
    return row[k]


def paths_used_distribution(flows: int, paths: Optional[int] = None) -> Dict[int, Fraction]:
    """P(exactly k paths carry traffic), for k = 1 .. min(flows, paths)."""
    f, p = _counts(flows, paths)
    total = p ** f
    return {k: Fraction(comb(p, k) * factorial(k) * _stirling2(f, k), total) for k in range(1, min(f, p) + 1)}


@dataclass(frozen=True)
class PathLoad:
    flows: int
    paths: int                       # paths considered (given, or those used)
    paths_used: int
    loads: Dict[Hashable, float]     # path -> load (flows, or the sum of their weights)
    max_load: float
    mean_load: float                 # total load / paths
    imbalance: float                 # max_load / mean_load (1 = perfectly even)
    collided_flows: int              # flows sharing their path with another flow

    @property
    def used_share(self) -> float:
        return self.paths_used / self.paths


Assignment = Union[Mapping[Hashable, Hashable], Iterable[Tuple[Hashable, Hashable]]]


def load_stats(assignment: Assignment, paths: Optional[Iterable[Hashable]] = None,
               weights: Optional[Mapping[Hashable, float]] = None) -> PathLoad:
    """Per-path load of an assignment flow -> path (a mapping or (flow, path) pairs).

    paths: every path that could be used (unused ones count with load 0 in the
    mean); default: only the paths in the assignment. weights: flow -> load
    (e.g. its rate); default 1 per flow. A flow listed twice, a path outside
    `paths`, a missing or negative weight, or an empty assignment is an error.
    """
    pairs = list(assignment.items() if isinstance(assignment, Mapping) else assignment)
    if not pairs:
        raise ValueError("empty assignment: no flows")
    seen: Dict[Hashable, Hashable] = {}
    for item in pairs:
        if not (isinstance(item, tuple) and len(item) == 2):
            raise ValueError(f"expected (flow, path) pairs, got {item!r}")
        flow, path = item
        if flow in seen:
            raise ValueError(f"flow {flow!r} is assigned twice ({seen[flow]!r} and {path!r})")
        seen[flow] = path
    all_paths = list(dict.fromkeys(paths)) if paths is not None else list(dict.fromkeys(seen.values()))
    unknown = sorted({repr(p) for p in seen.values()} - {repr(p) for p in all_paths})
    if unknown:
        raise ValueError(f"paths not in the list of paths: {', '.join(unknown)}")
    loads: Dict[Hashable, float] = {p: 0 for p in all_paths}
    members: Dict[Hashable, int] = {p: 0 for p in all_paths}
    for flow, path in seen.items():
        w = 1 if weights is None else weights.get(flow)
        if w is None or w < 0:
            raise ValueError(f"flow {flow!r} needs a weight >= 0, got {w!r}")
        loads[path] += w
        members[path] += 1
    total = sum(loads.values())
    mean = total / len(all_paths)
    peak = max(loads.values())
    return PathLoad(flows=len(seen), paths=len(all_paths), paths_used=sum(1 for n in members.values() if n),
                    loads=loads, max_load=peak, mean_load=mean, imbalance=peak / mean if mean else 0.0,
                    collided_flows=sum(n for n in members.values() if n > 1))
