#!/usr/bin/env python3
"""A Dragonfly under minimal, Valiant and UGAL-L routing, live on BMv2:
accepted throughput and latency against offered load, for uniform traffic
and the adversarial group shift.

    fabric experiment nonminimal_routing [--loads 0.25 0.5 0.75 1.0] [--patterns uniform shift]
                                         [--routings minimal valiant ugal] [--duration 5] [--out DIR]

The topology is the Dragonfly p=1, a=3, h=1, g=4 (12 routers, 12 hosts,
control/generators/dragonfly.py, built on the fly): the smallest balanced-
enough one where the flow model (control/generators/flow_model.py) predicts
the paper's shape, minimal 0.38 against Valiant 0.56 under the group shift,
and 1.0 against 0.63 under uniform traffic. Its links run at --link-pps
(BMv2's queue rate: the 12 switches and 24 agents share the machine's
cores). Every host sends --sports flows per destination (one sender, one
queue pair, the UDP source port varied: hostagent.ecn.roce send --sports),
at a fixed rate, offered load x the link rate, spread over its destinations:
- uniform: every other host;
- shift: the hosts of the next group (group G to G+1), Kim et al.'s adversarial pattern.
The routing is switched at runtime between cases
(controller.feature("nonminimal_routing")), the network kept up.

Per case: accepted throughput (packets the receivers counted in the steady
window, after --warm-s, per host per link packet time), one-way delay
(median and worst of the flows' p50 and p99), packets sent non-minimally
(tags pushed at the sources, less those removed at once: the source's own
group drawn), and the case's fidelity verdict (frames lost before a
pipeline, threads waiting for a core, senders late; docs/fidelity.md).
Writes summary.csv, throughput.png and each case's agent files under
--out; prints a table, and last which cases were not faithful.
"""
from __future__ import annotations

import csv
import json
import statistics
import sys
from pathlib import Path

import yaml

from emulator.bmv2 import DEFAULT_EXPERIMENT_LOG_LEVEL, LOG_LEVELS
from emulator.build import compile_p4
from control.controller import FabricController
from control.generators.dragonfly import dragonfly, dragonfly_graph
from control.generators.flow_model import group_shift, throughput, uniform
from emulator.network import Network
from control.topology import Topology
from emulator.calibration import Flow
from experiments.common import StartGate, announce_budget, case_fidelity, experiment_parser, lost_before_pipeline, \
    print_fidelity, print_table, roce_agent, save_figure, write_csv
from features import topology_from_dict
from features.nonminimal_routing import SECTION

REPO = Path(__file__).resolve().parent.parent
P, A, H = 1, 3, 1                        # the Dragonfly: hosts a router, routers a group, global links a router
PATTERNS = ("uniform", "shift")
ROUTINGS = ("minimal", "valiant", "ugal")
LOADS = (0.25, 0.5, 0.75, 1.0)
LINK_PPS = 60                            # every link's rate (BMv2's queue rate), packets/s
SPORTS = 8                               # flows per (sender, destination)
STALE_US = 200_000                       # UGAL: a recorded depth is believed ~12 packet times at LINK_PPS
DRAIN_S = 2.0                            # receivers listen this much longer than senders send


def build_topology(link_pps: int) -> Topology:
    """The Dragonfly, every link at `link_pps` (BMv2's queue rate), the section in mode minimal."""
    data = yaml.safe_load(dragonfly(P, A, H, name=f"dragonfly-p{P}a{A}h{H}"))
    data["defaults"]["link"]["bandwidth_mbps"] = link_pps * 8 * 1500 / 1e6
    data[SECTION] = {"mode": "minimal"}
    return topology_from_dict(data, f"<dragonfly p={P} a={A} h={H}>")


def destinations(topo: Topology, pattern: str) -> dict[str, list[str]]:
    """Each host's destinations under `pattern`, in the order it sends to
    them: rotated by the host's place, so that at any moment the senders
    address different hosts (all starting with the same one would make a
    rotating incast)."""
    hosts = list(topo.hosts)
    group = {h: topo.switches[topo.hosts[h].primary.switch].group or 0 for h in hosts}
    groups = sorted(set(group.values()))
    out = {}
    for i, h in enumerate(hosts):
        if pattern == "uniform":
            out[h] = hosts[i + 1:] + hosts[:i]
        else:
            after = groups[(groups.index(group[h]) + 1) % len(groups)]
            targets = [d for d in hosts if group[d] == after]
            rank = [d for d in hosts if group[d] == group[h]].index(h)
            out[h] = targets[rank:] + targets[:rank]
    return out


def offered(topo: Topology, pattern: str, load: float, link_pps: float) -> list[Flow]:
    """What a case asks of the machine (the budget's flows): every host at
    `load` x the link rate, spread evenly over its destinations. Counted
    over minimal paths: Valiant's and UGAL's detours cost more."""
    return [Flow(h, d, load * link_pps / len(dsts)) for h, dsts in destinations(topo, pattern).items() for d in dsts]


def section(routing: str) -> dict:
    return {"mode": routing, **({"stale_us": STALE_US} if routing == "ugal" else {})}


def _steady_packets(csv_path: Path, warm_s: float, until_s: float) -> int:
    with open(csv_path) as f:
        return sum(int(r["packets"]) for r in csv.DictReader(f) if warm_s <= float(r["t_s"]) < until_s)


def run_case(topo: Topology, net: Network, ctl: FabricController, pattern: str, routing: str, load: float, args,
             out: Path) -> dict:
    handle = ctl.feature("nonminimal_routing")
    handle.configure(section(routing))
    before = handle.packets()
    case_dir = out / pattern / routing / f"load-{load:g}"
    case_dir.mkdir(parents=True, exist_ok=True)
    dsts = destinations(topo, pattern)
    rate = load * args.link_pps
    gate = StartGate(case_dir)
    procs = [roce_agent(h, "receive", start_at=gate, out_dir=case_dir, extra=["--duration", str(args.duration + DRAIN_S)])
             for h in topo.hosts.values()]
    for i, h in enumerate(topo.hosts.values(), start=1):
        procs.append(roce_agent(h, "send", start_at=gate, out_dir=case_dir, extra=[
            "--dst-ip", *(topo.hosts[d].ip for d in dsts[h.name]), "--qp", str(i), "--sports", str(args.sports),
            "--fixed-rate", "--not-ect", "--line-rate-pps", f"{rate:g}", "--duration", str(args.duration)]))
    fidelity = case_fidelity(net, ctl)
    fidelity.traffic_starts(gate.open(procs))
    for p in procs:
        p.wait(timeout=args.duration + DRAIN_S + 60)
    if any(p.returncode for p in procs):
        raise RuntimeError(f"{pattern}/{routing}/{load:g}: an agent failed (exit codes {[p.returncode for p in procs]})")
    after = handle.packets()
    tx = [json.loads((case_dir / f"send-{h}.json").read_text()) for h in topo.hosts]
    verdict = fidelity.verdict(t["send_late_s"] for t in tx)
    rx = [json.loads((case_dir / f"receive-{h}.json").read_text()) for h in topo.hosts]
    steady = sum(_steady_packets(case_dir / f"receive-{h}.csv", args.warm_s, args.duration) for h in topo.hosts)
    p50s = [f["delay_ms"]["p50"] for r in rx for f in r["flows"].values() if f.get("delay_ms")]
    p99s = [f["delay_ms"]["p99"] for r in rx for f in r["flows"].values() if f.get("delay_ms")]
    sent = sum(t["sent"] for t in tx)
    received = sum(f["packets"] for r in rx for f in r["flows"].values())
    delta = {w: sum(after[s][w] - before[s][w] for s in after) for w in ("pushed", "minimal", "reached")}
    return {
        "pattern": pattern, "routing": routing, "offered": load,
        "accepted": round(steady / ((args.duration - args.warm_s) * len(topo.hosts) * args.link_pps), 3),
        "sent": sent, "received": received, "lost": sent - received,
        "delay_p50_ms": round(statistics.median(p50s), 1) if p50s else None,
        "delay_p99_ms": round(max(p99s), 1) if p99s else None,
        "tags_pushed": delta["pushed"], "ugal_minimal": delta["minimal"],
        "ignored": sum(sum(t["ignored"].values()) for t in tx) + sum(sum(r["ignored"].values()) for r in rx),
        "lost_before_pipeline": lost_before_pipeline(f"{pattern}/{routing}/{load:g}", verdict),
        "fidelity": str(verdict),
    }


def model_rows() -> list[dict]:
    """The flow model's saturation throughput of the same Dragonfly (what to expect)."""
    graph = dragonfly_graph(P, A, H)
    rows = []
    for pattern, demand in (("uniform", uniform(graph)), ("shift", group_shift(graph))):
        for routing, t in throughput(graph, demand, dragonfly=True).items():
            rows.append({"pattern": pattern, "routing": routing, "accepted": round(t.accepted, 3)})
    return rows


def plot(rows: list[dict], model: list[dict], patterns, out: Path) -> Path:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(2, len(patterns), figsize=(5.5 * len(patterns), 7), squeeze=False)
    colors = {"minimal": "tab:red", "valiant": "tab:blue", "ugal": "tab:green"}
    for col, pattern in enumerate(patterns):
        top, bottom = axes[0][col], axes[1][col]
        for routing in ROUTINGS:
            pts = sorted((r["offered"], r["accepted"], r["delay_p50_ms"]) for r in rows
                         if r["pattern"] == pattern and r["routing"] == routing)
            if not pts:
                continue
            top.plot([p[0] for p in pts], [p[1] for p in pts], "o-", color=colors[routing], label=routing)
            bottom.plot([p[0] for p in pts], [p[2] for p in pts], "o-", color=colors[routing], label=routing)
            m = next((r["accepted"] for r in model if r["pattern"] == pattern
                      and r["routing"] == ("mix" if routing == "ugal" else routing)), None)
            if m is not None and routing != "ugal":
                top.axhline(m, color=colors[routing], ls=":", lw=1)
        top.plot([0, 1], [0, 1], color="0.7", lw=0.8)
        top.set(title=f"{pattern}: accepted vs offered (dotted: flow model)", xlabel="offered load (of a link)",
                ylabel="accepted (of a link, per host)", xlim=(0, 1.05), ylim=(0, 1.05))
        bottom.set(title=f"{pattern}: one-way delay, median of flows' p50", xlabel="offered load (of a link)",
                   ylabel="ms")
        top.legend()
        bottom.legend()
    return save_figure(fig, out / "throughput.png")


def main(argv: list[str] | None = None) -> int:
    ap = experiment_parser("nonminimal_routing", __doc__)
    ap.add_argument("--patterns", nargs="+", choices=PATTERNS, default=list(PATTERNS))
    ap.add_argument("--routings", nargs="+", choices=ROUTINGS, default=list(ROUTINGS))
    ap.add_argument("--loads", nargs="+", type=float, default=list(LOADS), help="offered loads, fractions of a link")
    ap.add_argument("--duration", type=float, default=5.0, help="seconds of traffic per case")
    ap.add_argument("--warm-s", type=float, default=1.5, help="the steady window starts here")
    ap.add_argument("--link-pps", type=int, default=LINK_PPS, help="every link's rate, packets/s")
    ap.add_argument("--sports", type=int, default=SPORTS, help="flows (UDP source ports) per sender and destination")
    ap.add_argument("--out", type=Path, default=REPO / "experiments" / "results" / "nonminimal_routing",
                    help="results directory (default %(default)s)")
    ap.add_argument("--log-level", default=DEFAULT_EXPERIMENT_LOG_LEVEL, choices=LOG_LEVELS,
                    help="BMv2 log level (default off: logging slows BMv2 several times)")
    args = ap.parse_args(argv)
    for load in args.loads:
        if not 0 < load <= 1:
            ap.error(f"--loads: {load} is not within (0, 1]")
    if not 0 <= args.warm_s < args.duration:
        ap.error("--warm-s must be within [0, --duration)")
    args.out.mkdir(parents=True, exist_ok=True)
    topo = build_topology(args.link_pps)
    compile_p4()
    rows: list[dict] = []
    cases = [(p, r, l) for p in args.patterns for r in args.routings for l in args.loads]
    with Network(topo, REPO / "build" / "experiments" / "nonminimal_routing", log_level=args.log_level) as net, \
            FabricController(topo) as ctl:
        ctl.program()
        net.apply_queue_rates()
        for i, (pattern, routing, load) in enumerate(cases, start=1):
            print(f"==> [{i}/{len(cases)}] {pattern}, {routing}, offered {load:g} of {args.link_pps} packets/s",
                  flush=True)
            budget = announce_budget(topo, offered(topo, pattern, load, args.link_pps))
            row = {**run_case(topo, net, ctl, pattern, routing, load, args, args.out), "budget": budget}
            net.check_alive()
            print(f"    accepted {row['accepted']}, delay p50 {row['delay_p50_ms']} ms, "
                  f"tags pushed {row['tags_pushed']}", flush=True)
            rows.append(row)
    model = model_rows()
    summary = write_csv(args.out / "summary.csv", rows)
    model_csv = write_csv(args.out / "model.csv", model)
    png = plot(rows, model, args.patterns, args.out)
    print()
    print_table([{k: v for k, v in r.items() if k != "fidelity"} for r in rows])
    print_fidelity([{"case": f"{r['pattern']}/{r['routing']}/{r['offered']:g}", "fidelity": r["fidelity"]}
                    for r in rows])
    print(f"\nresults: {summary}, {model_csv}, {png}, and each case's agent files under {args.out}/<pattern>/<routing>/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
