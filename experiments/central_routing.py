#!/usr/bin/env python3
"""Central routing against ECMP, in the model (no BMv2): the most loaded
link of an all-reduce among every host of a topology, when its flows go
where ECMP's hash sends them, where path-aware source ports send them, where
the central controller assigns them, and the lower bound no assignment of
one path per flow beats.

    fabric experiment central_routing [--topologies leaf-spine fat-tree-k4 ...]
                                      [--collectives ring halving_doubling] [--channels 1 2]
                                      [--model-mb 1000] [--out DIR] [--no-docs]

Per topology, collective (ring or halving-doubling all-reduce of --model-mb
among every host NIC in file order, control/path_assignment.py's traffic
matrices) and channels per peer pair (each carrying an equal share, one
UDP source port each):
- ecmp: the Communicator's default source ports
  (hostagent/collectives/communicator.py default_sport), each flow's path
  from the model of the switches' hash (hostagent/collectives/paths.py PathModel);
- path_aware: the ports paths.path_aware_sports chooses, a pair's channels
  on disjoint paths (per pair: it does not see the other pairs);
- greedy, central: the central controller's assignment
  (control/path_assignment.py), greedy only and with its local search;
- bound: the fractional optimum over the same shortest paths (a linear
  program), or the largest flow: no unsplittable assignment is below it;
- central_failed, bound_failed: the central assignment recomputed after the
  first switch-to-switch link the central assignment uses fails, and its bound.
Loads are bytes per link direction between switches (host links carry the
same whatever the routing). Writes central_routing.csv and
central_routing.png under --out (build/experiments/central_routing) and,
unless --no-docs, a copy to docs/results/ (the PNG in docs/results/img/).
"""
from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Sequence

from control.path_assignment import Flow, bound_of, halving_doubling_flows, link_loads, max_load, \
    ring_all_reduce_flows, route_flows
from control.topology import Failures, Topology
from experiments.common import experiment_parser, print_table, save_figure, write_csv
from features import load_topology
from hostagent.collectives.communicator import default_sport
from hostagent.collectives.paths import PathModel, path_aware_sports

REPO = Path(__file__).resolve().parent.parent
TOPOLOGIES = ("leaf-spine", "fat-tree-k4", "torus-4x4", "dragonfly-small")
COLLECTIVES = {"ring": ring_all_reduce_flows, "halving_doubling": halving_doubling_flows}
OUT = REPO / "build" / "experiments" / "central_routing"
DOCS = REPO / "docs" / "results"


def channel_flows(collective: str, addresses: Sequence[str], model_bytes: int, channels: int,
                  sport_of) -> list[Flow]:
    """The collective's flows, each pair's bytes split over `channels`
    flows, channel c's source port sport_of(rank, peer, c)."""
    rank = {a: i for i, a in enumerate(addresses)}
    pairs = COLLECTIVES[collective](addresses, model_bytes)
    out = []
    for f in pairs:
        r, p = rank[f.src], rank[f.dst]
        for c in range(channels):
            share = f.bytes // channels + (1 if c < f.bytes % channels else 0)
            out.append(Flow(f.src, f.dst, sport_of(r, p, c), share))
    return out


def model_max_load(topo: Topology, model: PathModel, flows: Sequence[Flow]) -> int:
    """The most loaded switch-to-switch link direction with each flow where the hash model sends it."""
    paths = []
    for f in flows:
        hops = model.path(f.src, f.dst, f.sport, f.dport, f.protocol).hops
        paths.append([(sw, port) for sw, port in hops if topo.switches[sw].ports[port].peer in topo.switches])
    return max_load(link_loads(paths, [f.bytes for f in flows]))


def case(topo: Topology, collective: str, channels: int, model_bytes: int) -> dict:
    addresses = [nic.ip for nic in topo.nics]
    model = PathModel(topo)
    t0 = time.monotonic()
    ecmp_flows = channel_flows(collective, addresses, model_bytes, channels, default_sport)
    aware = path_aware_sports(model, addresses, channels)
    aware_flows = channel_flows(collective, addresses, model_bytes, channels, aware)
    ecmp = model_max_load(topo, model, ecmp_flows)
    path_aware = model_max_load(topo, model, aware_flows)
    greedy = route_flows(topo, ecmp_flows, search=False).max_load
    t1 = time.monotonic()
    central = route_flows(topo, ecmp_flows)
    seconds = time.monotonic() - t1
    bound = bound_of(topo, ecmp_flows)
    used = sorted({frozenset((sw, topo.switches[sw].ports[port].peer)) for path in central.paths
                   for sw, port in path}, key=sorted)
    row = {"topology": topo.name, "collective": collective, "ranks": len(addresses), "channels": channels,
           "flows": len(ecmp_flows), "ecmp_MB": ecmp / 1e6, "path_aware_MB": path_aware / 1e6,
           "greedy_MB": greedy / 1e6, "central_MB": central.max_load / 1e6, "bound_MB": round(bound / 1e6, 3),
           "central_vs_bound": round(central.max_load / bound, 4) if bound else 1.0,
           "ecmp_vs_bound": round(ecmp / bound, 4) if bound else 1.0,
           "central_s": round(seconds, 3)}
    if used:
        failed = Failures(links=frozenset({used[0]}))
        after = route_flows(topo, ecmp_flows, failed)
        row.update(failed_link="-".join(sorted(used[0])), central_failed_MB=after.max_load / 1e6,
                   bound_failed_MB=round(bound_of(topo, ecmp_flows, failed) / 1e6, 3))
    row["model_s"] = round(time.monotonic() - t0, 2)
    return row


def plot(rows: list[dict], path: Path) -> Path:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    kinds = [("ecmp_MB", "ECMP (hash model)"), ("path_aware_MB", "path-aware ports"),
             ("central_MB", "central routing"), ("bound_MB", "lower bound")]
    labels = [f"{r['topology']}\n{r['collective'].replace('_', '-')}, {r['channels']} ch" for r in rows]
    fig, ax = plt.subplots(figsize=(max(6.0, 0.9 * len(rows) + 2), 4.2))
    width = 0.8 / len(kinds)
    for k, (key, label) in enumerate(kinds):
        ax.bar([i + (k - 1.5) * width for i in range(len(rows))],
               [r[key] / r["bound_MB"] if r["bound_MB"] else 1.0 for r in rows], width, label=label)
    ax.axhline(1.0, color="grey", lw=0.8, ls="--")
    ax.set_xticks(range(len(rows)))
    ax.set_xticklabels(labels, fontsize=7)
    ax.set_ylabel("max link load / lower bound")
    ax.set_title("All-reduce among every host: the most loaded link")
    ax.legend(fontsize=8)
    return save_figure(fig, path)


def main(argv: list[str] | None = None) -> int:
    ap = experiment_parser("central_routing", __doc__)
    ap.add_argument("--topologies", nargs="+", default=list(TOPOLOGIES), help="names in topologies/ or paths")
    ap.add_argument("--collectives", nargs="+", choices=sorted(COLLECTIVES), default=list(COLLECTIVES))
    ap.add_argument("--channels", nargs="+", type=int, default=[1, 2], help="flows per peer pair")
    ap.add_argument("--model-mb", type=int, default=1000, help="the all-reduced model, MB (default 1000)")
    ap.add_argument("--out", type=Path, default=OUT, help="results directory (default %(default)s)")
    ap.add_argument("--no-docs", action="store_true", help="no copy to docs/results")
    args = ap.parse_args(argv)
    if any(c < 1 for c in args.channels):
        ap.error("--channels: at least 1")
    if args.model_mb < 1:
        ap.error("--model-mb: at least 1")
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for name in args.topologies:
        topo = load_topology(name)
        for collective in args.collectives:
            for channels in args.channels:
                rows.append(case(topo, collective, channels, args.model_mb * 1_000_000))
    csv_path = write_csv(args.out / "central_routing.csv", rows, on_bmv2=False)
    png_path = plot(rows, args.out / "central_routing.png")
    print_table([{k: r.get(k, "") for k in ("topology", "collective", "channels", "flows", "ecmp_MB",
                                             "path_aware_MB", "greedy_MB", "central_MB", "bound_MB",
                                             "central_failed_MB", "bound_failed_MB")} for r in rows], width=12)
    print(f"\nwrote {csv_path}\nwrote {png_path}")
    if not args.no_docs:
        (DOCS / "img").mkdir(parents=True, exist_ok=True)
        print(f"copied to {shutil.copy(csv_path, DOCS / csv_path.name)}")
        print(f"copied to {shutil.copy(png_path, DOCS / 'img' / png_path.name)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
