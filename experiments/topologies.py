#!/usr/bin/env python3
"""Topologies beyond Clos against a fat tree: what each costs per host,
how far apart its hosts are, and what routing can carry on them.

    fabric experiment topologies [--phases costs throughput collectives] [--max-hosts 11000]
                                 [--targets 200 1000 3000 9000] [--dragonfly-p 1 2 3 4]
                                 [--uniform-max-hosts 600] [--ranks 128 1024] [--out DIR]

Phase costs: the comparison of the Dragonfly (Kim et al., ISCA 2008) and Slim Fly
(Besta and Hoefler, SC 2014) papers, counted on the generators' own graphs
(control/generators/costs.py: fat tree, balanced Dragonfly, Slim Fly on the
MMS graph, 2D and 3D tori): switches, switch-to-switch links and switch
ports per host, the radix each needs, and the switch hops between hosts
(diameter and mean). Every instance up to --max-hosts hosts is counted;
then, for each target, each family's smallest instance with at least that
many hosts. Writes DIR/costs.csv (every instance),
DIR/costs_at_equal_hosts.csv and DIR/costs.png (ports, switches and mean
hops per host against hosts).

Phase throughput: the saturation throughput of minimal routing (the
fabric's: ECMP over every shortest path), Valiant and the best mix of the
two (control/generators/flow_model.py), as the fraction of its link's rate
every host can inject: the balanced Dragonfly (p = 1..4) under uniform
traffic and the adversarial group shift, and every other family's
instances of at most 600 hosts under uniform traffic. Writes
DIR/throughput.csv and DIR/throughput.png.

Phase collectives: how long one collective takes on each topology at equal
rank count (control/generators/collective_model.py): a ring all-reduce,
halving-doubling and an all-to-all, each round's traffic routed minimally
(ECMP) in the flow model, the time against what a non-blocking network
gives, for --ranks ranks (powers of two) on each family's smallest instance
with that many hosts (tori of exactly that many routers). Ranks in the
topology's host order and in a random order; on the tori also along a ring
of neighbours. Writes DIR/collectives.csv and DIR/collectives.png.

No network runs in any phase: these are properties of the graphs and of
the routings. (The ring on a torus against a fat tree live on BMv2: phase
torus of `fabric experiment collectives`.)
"""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from control.generators.collective_model import COLLECTIVES, collective_times, equal_rank_instances, order  # noqa: E402
from control.generators.costs import FAMILIES, Cost, at_equal_hosts, instances, cost  # noqa: E402
from control.generators.dragonfly import dragonfly_graph  # noqa: E402
from control.generators.flow_model import group_shift, throughput, uniform  # noqa: E402
from experiments.common import experiment_parser, print_table, save_figure, write_csv  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
PHASES = ("costs", "throughput", "collectives")
DRAGONFLY_P = (1, 2, 3, 4)          # throughput: balanced Dragonflies of 6 .. 1056 hosts
UNIFORM_MAX_HOSTS = 600             # throughput: other families' instances under uniform traffic, up to this size
DEFAULT_TARGETS = (200, 1000, 3000, 9000)   # every family has an instance at each, up to 11000 hosts
DEFAULT_RANKS = (128, 1024)         # collectives: ranks (powers of two; 3D tori from 64)


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
    fig.suptitle("Cost per host and distance, fat tree against topologies beyond Clos (control/generators/costs.py)")
    fig.tight_layout()
    return save_figure(fig, path)


def costs_phase(args) -> list[Path]:
    plan = list(instances(args.max_hosts))
    costs = []
    for i, (family, params, graph) in enumerate(plan, 1):
        print(f"[costs {i}/{len(plan)}] {family} {params}: {len(graph.hosts)} hosts", flush=True)
        costs.append(cost(family, params, graph))
    equal = [dict(target=t, **c.row()) for t in args.targets for c in at_equal_hosts(costs, t)]
    print_table([{k: r[k] for k in ("target", "family", "params", "hosts", "switches", "switch_links",
                                    "ports_per_host", "radix", "diameter", "mean_hops")} for r in equal])
    return [write_csv(args.out / "costs.csv", [c.row() for c in costs], on_bmv2=False),
            write_csv(args.out / "costs_at_equal_hosts.csv", equal, on_bmv2=False),
            plot(costs, args.out / "costs.png")]


def throughput_phase(args) -> list[Path]:
    cases = [("dragonfly", f"p={p} a={2 * p} h={p} g={2 * p * p + 1}", dragonfly_graph(p, 2 * p, p), pattern)
             for p in args.dragonfly_p for pattern in ("uniform", "group shift")]
    cases += [(family, params, graph, "uniform") for family, params, graph in instances(args.uniform_max_hosts)
              if family != "dragonfly"]
    rows = []
    for i, (family, params, graph, pattern) in enumerate(cases, 1):
        print(f"[throughput {i}/{len(cases)}] {family} {params}, {pattern}", flush=True)
        demand = uniform(graph) if pattern == "uniform" else group_shift(graph)
        for r in throughput(graph, demand, dragonfly=family == "dragonfly").values():
            rows.append({"family": family, "params": params, "hosts": len(graph.hosts), "pattern": pattern,
                         "routing": r.routing, "max_link_load": round(r.max_link_load, 4),
                         "accepted": round(r.accepted, 4), "valiant_fraction": r.valiant_fraction})
    print_table([r for r in rows if r["family"] == "dragonfly"], width=12)
    return [write_csv(args.out / "throughput.csv", rows, on_bmv2=False), plot_throughput(rows, args.out / "throughput.png")]


def plot_throughput(rows: list[dict], path: Path) -> Path:
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5), sharey=True)
    dragonfly = [r for r in rows if r["family"] == "dragonfly"]
    for ax, pattern in zip(axes[:2], ("uniform", "group shift")):
        for routing in ("minimal", "valiant", "mix"):
            mine = [r for r in dragonfly if r["pattern"] == pattern and r["routing"] == routing]
            ax.plot([r["hosts"] for r in mine], [r["accepted"] for r in mine], marker="o", label=routing)
        ax.set_xscale("log")
        ax.set_title(f"Dragonfly, {pattern}")
        ax.set_xlabel("hosts")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("accepted throughput (fraction of a host link)")
    axes[0].legend()
    others = [r for r in rows if r["family"] != "dragonfly"]
    for family in dict.fromkeys(r["family"] for r in others):
        for routing, style in (("minimal", "-"), ("valiant", ":")):
            mine = [r for r in others if r["family"] == family and r["routing"] == routing]
            axes[2].plot([r["hosts"] for r in mine], [r["accepted"] for r in mine], style, marker="o", ms=3,
                         label=f"{family}, {routing}")
    axes[2].set_xscale("log")
    axes[2].set_title("uniform traffic, the other families")
    axes[2].set_xlabel("hosts")
    axes[2].grid(alpha=0.3)
    axes[2].legend(fontsize=7)
    fig.suptitle("Saturation throughput in a flow model: minimal (ECMP over shortest paths), Valiant, the best mix "
                 "(control/generators/flow_model.py)")
    return save_figure(fig, path)


def collectives_phase(args) -> list[Path]:
    cases = [(n, family, params, graph, how) for n in args.ranks for family, params, graph in equal_rank_instances(n)
             for how in (("host order", "neighbours", "random") if family.startswith("torus")
                         else ("host order", "random"))]
    rows = []
    for i, (n, family, params, graph, how) in enumerate(cases, 1):
        print(f"[collectives {i}/{len(cases)}] {n} ranks on {family} {params}, {how}", flush=True)
        for t in collective_times(graph, order(graph, how, n)):
            rows.append({"ranks": n, "family": family, "params": params, "hosts": len(graph.hosts), "order": how,
                         "collective": t.collective, "time": round(t.time, 4), "ideal": round(t.ideal, 4),
                         "slowdown": round(t.slowdown, 3), "max_link_load": round(t.max_link_load, 3),
                         "mean_hops": round(t.mean_hops, 3)})
    print_table([{k: r[k] for k in ("ranks", "family", "params", "order", "collective", "slowdown", "mean_hops")}
                 for r in rows], width=12)
    return [write_csv(args.out / "collectives.csv", rows, on_bmv2=False), plot_collectives(rows, args.out / "collectives.png")]


def plot_collectives(rows: list[dict], path: Path) -> Path:
    sizes = list(dict.fromkeys(r["ranks"] for r in rows))
    fig, axes = plt.subplots(len(sizes), 1, figsize=(14, 4.5 * len(sizes)), squeeze=False)
    width = 0.8 / len(COLLECTIVES)
    for ax, n in zip(axes[:, 0], sizes):
        mine = [r for r in rows if r["ranks"] == n]
        groups = list(dict.fromkeys((r["family"], r["params"], r["order"]) for r in mine))
        for j, collective in enumerate(COLLECTIVES):
            by = {(r["family"], r["params"], r["order"]): r["slowdown"] for r in mine if r["collective"] == collective}
            ax.bar([g + (j - (len(COLLECTIVES) - 1) / 2) * width for g in range(len(groups))],
                   [by.get(g, 0) for g in groups], width, label=collective)
        ax.set_xticks(range(len(groups)))
        ax.set_xticklabels([f"{f}\n{p}\n{o}" for f, p, o in groups], fontsize=7)
        ax.axhline(1.0, color="grey", lw=0.8)
        ax.set_ylabel("time / non-blocking")
        ax.set_title(f"{n} ranks")
        ax.grid(axis="y", alpha=0.3)
    axes[0, 0].legend()
    fig.suptitle("A collective's time against a non-blocking network's, minimal routing in the flow model "
                 "(control/generators/collective_model.py)")
    return save_figure(fig, path)


def main(argv: list[str] | None = None) -> int:
    ap = experiment_parser("topologies", __doc__)
    ap.add_argument("--phases", nargs="+", choices=PHASES, default=list(PHASES), help="what to run (default: all)")
    ap.add_argument("--max-hosts", type=int, default=11000, help="costs: count instances up to this many hosts "
                    "(default: %(default)s)")
    ap.add_argument("--targets", type=int, nargs="+", default=list(DEFAULT_TARGETS),
                    help="costs: host counts to compare at (default: %(default)s)")
    ap.add_argument("--dragonfly-p", type=int, nargs="+", default=list(DRAGONFLY_P),
                    help="throughput: the balanced Dragonflies' p (default: %(default)s)")
    ap.add_argument("--uniform-max-hosts", type=int, default=UNIFORM_MAX_HOSTS,
                    help="throughput: the other families' instances up to this size (default: %(default)s)")
    ap.add_argument("--ranks", type=int, nargs="+", default=list(DEFAULT_RANKS),
                    help="collectives: ranks, each a power of two of at least 16 (default: %(default)s)")
    ap.add_argument("--out", type=Path, default=REPO / "experiments" / "results" / "topologies",
                    help="results directory (default %(default)s)")
    args = ap.parse_args(argv)
    if any(p < 1 for p in args.dragonfly_p):
        ap.error(f"--dragonfly-p must be at least 1, got {args.dragonfly_p}")
    if args.max_hosts < 16:
        ap.error(f"--max-hosts must be at least 16 (the smallest fat tree), got {args.max_hosts}")
    too_big = [t for t in args.targets if t > args.max_hosts or t < 1]
    if too_big:
        ap.error(f"--targets must be in 1..--max-hosts ({args.max_hosts}), got {too_big}")
    odd = [n for n in args.ranks if n < 16 or n & (n - 1)]
    if odd:
        ap.error(f"--ranks must be powers of two of at least 16 (halving-doubling pairs ranks), got {odd}")
    args.out.mkdir(parents=True, exist_ok=True)
    outputs: list[Path] = []
    if "costs" in args.phases:
        outputs += costs_phase(args)
    if "throughput" in args.phases:
        outputs += throughput_phase(args)
    if "collectives" in args.phases:
        outputs += collectives_phase(args)
    print("outputs: " + ", ".join(str(p) for p in outputs))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
