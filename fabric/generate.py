"""`fabric generate`: every file the project generates and commits, written
again from its generator (`--check`: write nothing, exit 1 naming the stale
ones; tests/unit/fabric/test_generate.py runs that).

    p4src/include/aggregation_lanes.p4     features/aggregation_lanes.py (the unrolled element lanes)
    topologies/fat-tree-k4.yaml, rail-optimized.yaml, dual-plane.yaml,
    dragonfly*.yaml, slimfly-*.yaml, torus-*.yaml
                                           control/generators/
    telemetry/grafana/dashboards/*.json    telemetry/dashboards.py
    telemetry/alerts.yml                   telemetry/alerts.py (the Prometheus alerting rules)
"""
from __future__ import annotations

import argparse
import functools
from pathlib import Path
from typing import Callable, Optional

from control.generators.dragonfly import dragonfly
from control.generators.dual_plane import dual_plane
from control.generators.fat_tree import fat_tree
from control.generators.rail_optimized import rail_optimized
from control.generators.slim_fly import slim_fly
from control.generators.torus import torus
from features import aggregation_lanes
from telemetry import alerts, dashboards

REPO = Path(__file__).resolve().parent.parent
TOPOLOGIES = REPO / "topologies"


def outputs() -> dict[Path, Callable[[], str]]:
    """Each generated file -> the function that renders it."""
    def lanes() -> str:
        return aggregation_lanes.render(aggregation_lanes.lanes())

    out: dict[Path, Callable[[], str]] = {
        aggregation_lanes.OUTPUT: lanes,
        TOPOLOGIES / "fat-tree-k4.yaml": lambda: fat_tree(4),
        TOPOLOGIES / "rail-optimized.yaml": rail_optimized,
        TOPOLOGIES / "dual-plane.yaml": dual_plane,
        # beyond Clos: a small and a mid-size instance of each (topologies/README.md)
        TOPOLOGIES / "dragonfly-small.yaml": lambda: dragonfly(p=1, a=2, h=1, name="dragonfly-small"),
        TOPOLOGIES / "dragonfly.yaml": lambda: dragonfly(p=2, a=4, h=2),
        TOPOLOGIES / "slimfly-q3.yaml": lambda: slim_fly(3),
        TOPOLOGIES / "slimfly-q5.yaml": lambda: slim_fly(5, p=1),
        TOPOLOGIES / "torus-3x3.yaml": lambda: torus((3, 3)),
        TOPOLOGIES / "torus-4x4.yaml": lambda: torus((4, 4)),
    }
    for d in dashboards.dashboards():
        out[dashboards.OUT_DIR / f"{d.uid}.json"] = functools.partial(dashboards.render, d)
    out[alerts.OUTPUT] = alerts.render
    return out


def stale() -> list[Path]:
    return [path for path, render in outputs().items() if not path.exists() or path.read_text() != render()]


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="fabric generate", description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 if a generated file is stale")
    args = ap.parse_args(argv)
    if args.check:
        old = stale()
        for path in old:
            print(f"stale: {path.relative_to(REPO)} (run `fabric generate` or `make generate`)")
        return 1 if old else 0
    for path, render in outputs().items():
        text = render()
        changed = not path.exists() or path.read_text() != text
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        print(f"{'wrote' if changed else 'same '} {path.relative_to(REPO)}")
    return 0
