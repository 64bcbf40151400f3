"""What whole runs of one composition cost this machine, learnt from the runs.

The calibration (calibration.py) prices a packet as one switch or one pair
of agents handles it alone. A whole run costs more: its switches and ranks
wake for every few packets, poll every connection, read counters and send
heartbeats. `fabric train` on leaf-spine (4 ranks, the training composition,
fast BMv2, 2026-12-01) was planned at 0.46 cores for its switches and ranks
at 180 packets/s a connection and measured 1.1-1.3; the budget's own rate
(400) left the cores 10-13% idle, where a faithful run needs 30%.

So every run that the fidelity monitor sampled records what it cost: its
rate and the cores the machine was busy over its traffic (all of them:
switches, agents, the kernel's veths, the controller). The cost of a
composition is then fitted over its runs as busy = c * rate^alpha: concave,
as measured (one run each, same session: 90, 180, 360 and 400 packets/s left
0.96, 1.35 (three runs), 1.76 and 1.78 cores busy; a log-log fit gives
alpha 0.45), because at higher rates BMv2's and the agents' threads handle
more packets a wakeup and the machine nears saturation. With runs at one
rate only, alpha is that DEFAULT_ALPHA.

The rate a new run gets is the one whose fitted cost leaves the cores
idle by the fidelity limit (30%) plus IDLE_MARGIN: the spread of the idle
share between runs of one case at one rate is that wide (leaf-spine, the
same day: 28%, 31%, 38% and 38% at 180 packets/s; 38% and 29% at 150,
the second sized by a margin of 8 points).

Stored beside the calibration, one file a BMv2 build
(build/calibration/<version>-<hash>.runs.json), under the same identity
(CPU, cores, BMv2 build, pipeline); runs older than calibration.MAX_AGE, or
measured on another identity, are not used; each composition keeps its last
MAX_RUNS.
"""
from __future__ import annotations

import datetime as dt
import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

from emulator.calibration import MAX_AGE, Identity, calibration_file
from emulator.fidelity import Limits

DEFAULT_ALPHA = 0.45        # busy ~ rate^alpha: the fit over 90-400 packets/s (module docstring)
ALPHA_RANGE = (0.3, 1.0)    # a fit outside it is clamped: a few noisy runs at close rates say little of the shape
IDLE_MARGIN = 0.12          # above Limits.idle_min: the idle share's spread between runs of one case at one rate
MIN_RATE_RATIO = 1.2        # runs at rates closer than this count as one rate for the fit
MAX_EXTRAPOLATION = 1.5     # a fit's rate is at most this times the highest rate it was fitted over: from one
                            # faithful run of a collectives phase at 100 packets/s (alpha assumed) it gave 320,
                            # and 11 of 19 cases were violated
MAX_RUNS = 60               # runs kept a composition, the latest: a collectives phase records a run a case (19 in lb),
                            # so that its fit still sees the rates of the runs before


class RunCostError(RuntimeError):
    pass


@dataclass(frozen=True)
class RunCost:
    """What one run cost: its rate (the experiment's unit: for `fabric train`
    the packets/s of a connection) and the machine's busy cores over its traffic."""
    rate: float
    busy_cores: float
    measured_at: str            # ISO 8601, UTC


@dataclass(frozen=True)
class CostFit:
    """busy_cores = coefficient * rate ** alpha, over `runs` runs."""
    coefficient: float
    alpha: float
    runs: int
    rates: int                  # distinct rates among them (MIN_RATE_RATIO apart)
    highest_rate: float = math.inf     # the highest rate among them

    def busy(self, rate: float) -> float:
        return self.coefficient * rate ** self.alpha

    def rate_for(self, busy_cores: float) -> float:
        """The rate the fit says keeps `busy_cores` busy, at most
        MAX_EXTRAPOLATION x the highest rate measured: above that the shape
        is a guess."""
        return min((busy_cores / self.coefficient) ** (1 / self.alpha), MAX_EXTRAPOLATION * self.highest_rate)

    def __str__(self) -> str:
        shape = (f"alpha fitted over {self.rates} rates" if self.rates > 1
                 else f"alpha {DEFAULT_ALPHA} assumed: one rate measured")
        return (f"busy cores = {self.coefficient:.3g} x rate^{self.alpha:.2f} over {self.runs} "
                f"run{'s' if self.runs != 1 else ''} ({shape}; rates up to {self.highest_rate:g}, a rate at most "
                f"x{MAX_EXTRAPOLATION:g} that)")


def now_iso() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def costs_file(identity: Identity) -> Path:
    """Beside the BMv2 build's calibration."""
    path = calibration_file(identity)
    return path.with_name(path.stem + ".runs.json")


def _load(path: Path) -> dict:
    try:
        raw = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except ValueError as exc:
        raise RunCostError(f"{path}: not JSON ({exc}); delete it to start afresh") from None
    if not isinstance(raw, dict) or not isinstance(raw.get("compositions", {}), dict):
        raise RunCostError(f"{path}: not a run-cost file (no 'compositions' object); delete it to start afresh")
    return raw


def _parse(path: Path, key: str, entries) -> list[RunCost]:
    try:
        costs = [RunCost(float(e["rate"]), float(e["busy_cores"]), str(e["measured_at"])) for e in entries]
        for c in costs:
            dt.datetime.fromisoformat(c.measured_at)
    except (KeyError, TypeError, ValueError) as exc:
        raise RunCostError(f"{path}: composition {key!r}: malformed run ({exc!r}); delete it to start afresh") \
            from None
    return costs


def record(identity: Identity, key: str, cost: RunCost, path: Path | None = None) -> Path:
    """Add one run of composition `key` (a run measured on another identity
    replaces the file: it no longer holds)."""
    if not (cost.rate > 0 and 0 < cost.busy_cores):
        raise RunCostError(f"composition {key!r}: a run at {cost.rate} with {cost.busy_cores} cores busy "
                           f"says nothing of its cost")
    path = path or costs_file(identity)
    raw = _load(path)
    if raw.get("identity") != asdict(identity):
        raw = {"identity": asdict(identity), "compositions": {}}
    runs = _parse(path, key, raw["compositions"].get(key, [])) + [cost]
    raw["compositions"][key] = [asdict(c) for c in runs[-MAX_RUNS:]]
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(raw, indent=2))
    tmp.replace(path)
    return path


def observed(identity: Identity, key: str, path: Path | None = None,
             now: dt.datetime | None = None) -> list[RunCost]:
    """The current runs of composition `key`: measured on `identity`, within MAX_AGE."""
    path = path or costs_file(identity)
    raw = _load(path)
    if raw.get("identity") != asdict(identity):
        return []
    now = now or dt.datetime.now(dt.timezone.utc)
    return [c for c in _parse(path, key, raw["compositions"].get(key, []))
            if now - dt.datetime.fromisoformat(c.measured_at) <= MAX_AGE]


def distinct_rates(rates: Sequence[float]) -> int:
    n, last = 0, 0.0
    for r in sorted(rates):
        if not n or r >= last * MIN_RATE_RATIO:
            n, last = n + 1, r
    return n


def fit(costs: Sequence[RunCost]) -> CostFit | None:
    """busy = c * rate^alpha through the runs (least squares on the logs;
    alpha DEFAULT_ALPHA when they are at one rate), None without runs."""
    if not costs:
        return None
    xs = [math.log(c.rate) for c in costs]
    ys = [math.log(c.busy_cores) for c in costs]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    rates = distinct_rates([c.rate for c in costs])
    alpha = DEFAULT_ALPHA
    if rates > 1:
        slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
        alpha = min(max(slope, ALPHA_RANGE[0]), ALPHA_RANGE[1])
    return CostFit(math.exp(my - alpha * mx), alpha, len(costs), rates, max(c.rate for c in costs))


def target_busy_cores(cores: int, limits: Limits = Limits()) -> float:
    """The busy cores a run may take and stay faithful with the margin."""
    return cores * (1 - limits.idle_min - IDLE_MARGIN)
