#!/usr/bin/env python3
"""Topologies beyond Clos against a fat tree: what each costs per host,
and how far apart its hosts are, at equal host count.

    fabric experiment topologies [--max-hosts 11000] [--targets 200 1000 3000 9000] [--out DIR]

The comparison of the Dragonfly (Kim et al., ISCA 2008) and Slim Fly
(Besta and Hoefler, SC 2014) papers, counted on the generators' own graphs
(core/generators/costs.py: fat tree, balanced Dragonfly, Slim Fly on the
MMS graph, 2D and 3D tori): switches, switch-to-switch links and switch
ports per host, the radix each needs, and the switch hops between hosts
(diameter and mean). Every instance up to --max-hosts hosts is counted;
then, for each target, each family's smallest instance with at least that
many hosts. No network runs: these are properties of the graphs.

Writes DIR/costs.csv (every instance), DIR/costs_at_equal_hosts.csv and
DIR/costs.png (ports, switches and mean hops per host against hosts).
"""
from __future__ import annotations

import argparse
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from core.generators.costs import FAMILIES, Cost, at_equal_hosts, instances, cost  # noqa: E402
from experiments.common import print_table, save_figure, write_csv  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
DEFAULT_TARGETS = (200, 1000, 3000, 9000)   # every family has an instance at each, up to 11000 hosts


def plot(costs: list[Cost], path: Path) -> Path:
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5))
    panels = (("ports_per_host", "switch ports per host"), ("switches_per_host", "switches per host"),
              ("mean_hops", "mean switch hops between hosts"))
    for ax, (field, label) in zip(axes, panels):
        for family in FAMILIES:
            mine = sorted((c for c in costs if c.family == family), key=lambda c: c.hosts)
            if mine:
                ax.plot([c.hosts for c in mine], [c.row()[field] for c in mine], marker="o", ms=3, label=family)
        ax.set_xscale("log")
        ax.set_xlabel("hosts")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    axes[2].set_yscale("log")
    axes[0].legend()
    fig.suptitle("Cost per host and distance, fat tree against topologies beyond Clos (core/generators/costs.py)")
    fig.tight_layout()
    return save_figure(fig, path)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="fabric experiment topologies", description=__doc__.split("\n\n")[0])
    ap.add_argument("--max-hosts", type=int, default=11000, help="count instances up to this many hosts "
                    "(default: %(default)s)")
    ap.add_argument("--targets", type=int, nargs="+", default=list(DEFAULT_TARGETS),
                    help="host counts to compare at (default: %(default)s)")
    ap.add_argument("--out", type=Path, default=REPO / "experiments" / "results" / "topologies")
    args = ap.parse_args(argv)
    if args.max_hosts < 16:
        ap.error(f"--max-hosts must be at least 16 (the smallest fat tree), got {args.max_hosts}")
    too_big = [t for t in args.targets if t > args.max_hosts or t < 1]
    if too_big:
        ap.error(f"--targets must be in 1..--max-hosts ({args.max_hosts}), got {too_big}")
    args.out.mkdir(parents=True, exist_ok=True)
    plan = list(instances(args.max_hosts))
    costs = []
    for i, (family, params, graph) in enumerate(plan, 1):
        print(f"[{i}/{len(plan)}] {family} {params}: {len(graph.hosts)} hosts", flush=True)
        costs.append(cost(family, params, graph))
    equal = [dict(target=t, **c.row()) for t in args.targets for c in at_equal_hosts(costs, t)]
    print_table([{k: r[k] for k in ("target", "family", "params", "hosts", "switches", "switch_links",
                                    "ports_per_host", "radix", "diameter", "mean_hops")} for r in equal])
    outputs = [write_csv(args.out / "costs.csv", [c.row() for c in costs]),
               write_csv(args.out / "costs_at_equal_hosts.csv", equal),
               plot(costs, args.out / "costs.png")]
    print("outputs: " + ", ".join(str(p) for p in outputs))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
