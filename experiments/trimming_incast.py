#!/usr/bin/env python3
"""Incast N:1 into a bottleneck, with tail drop and with packet trimming:
what the receiver learns of the packets the queue could not take.

    fabric experiment trimming_incast [--duration 5] [--runs 1] [--threshold 16] [--out DIR]

Brings topologies/incast.yaml up on BMv2 (4 senders, 1 receiver whose port
is served at 800 packets/s) with trimming configured on the bottleneck
(s1 towards h5), so its switch runs the header queue; each case then sets
the port's trimming over P4Runtime (none: tail drop) and the senders send
at a fixed rate (hostagent.ecn.roce, no congestion control: the offered
load alone decides what the queue does), all starting at the same instant.

Recorded per case: packets sent, delivered whole, received as trimmed
headers, and lost without a trace (sent - delivered - trimmed: what a
sender learns only from a timeout); the switch's trims (trim_counter); the
one-way delay of delivered packets and of trimmed headers (p50, p99: how
soon the receiver knows); the bottleneck queue's depth (queue_depth.p4).
Writes summary.csv and summary.png under --out, prints the table, the
fidelity of every case, and where the files went.
"""
from __future__ import annotations

import json
import statistics
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

from experiments.common import StartGate, announce_budget, case_fidelity, experiment_parser, lost_before_pipeline, \
    print_fidelity, print_table, roce_agent, save_figure, wait_sampling_queue, write_csv

from control.controller import FabricController
from control.topology import TopologyError
from emulator.bmv2 import DEFAULT_EXPERIMENT_LOG_LEVEL, LOG_LEVELS
from emulator.build import compile_p4
from emulator.calibration import Flow
from emulator.network import BMV2_QUEUE_DEPTH, Network
from features import load_topology
from features.trimming import SECTION, TRIM_COUNTER, TrimProfile
from features.trimming import cell as trim_cell
from wire.trimming import TRIMMED_DSCP

BOTTLENECK, RECEIVER = "s1", "h5"


@dataclass(frozen=True)
class Case:
    name: str
    trimming: bool


CASES = [Case("tail-drop", False), Case("trimming", True)]


def run_case(case: Case, run: int, profile: TrimProfile, topo, net: Network, ctl: FabricController, args,
             out: Path) -> dict:
    port = topo.hosts[RECEIVER].switch_port
    receiver = topo.hosts[RECEIVER]
    senders = [h for h in topo.hosts.values() if h.role == "sender"]
    ctl.feature(SECTION).set_profile(BOTTLENECK, port, profile if case.trimming else None)
    cell = trim_cell(port, 0)
    trims_before = ctl.counter(BOTTLENECK, TRIM_COUNTER, cell).get(cell, (0, 0))[0]
    case_dir = out / f"{case.name}-{run}"
    case_dir.mkdir(parents=True, exist_ok=True)
    gate = StartGate(case_dir)          # the agents start together once every one is ready

    def agent(host, role: str, extra: list[str]) -> subprocess.Popen:
        return roce_agent(host, role, start_at=gate, out_dir=case_dir, extra=["--duration", str(args.duration),
                                                                              *extra])

    procs = [agent(receiver, "receive", ["--duration", str(args.duration + 1.0), "--trimmed-dscp",
                                         str(profile.dscp)])]
    for i, h in enumerate(senders, start=1):
        procs.append(agent(h, "send", ["--dst-ip", receiver.ip, "--qp", str(i), "--line-rate-pps",
                                       str(args.sender_rate), "--fixed-rate", "--not-ect"]))
    start_at = gate.open(procs)
    fidelity = case_fidelity(net, ctl)
    fidelity.traffic_starts(start_at)
    samples = wait_sampling_queue(topo.switches[BOTTLENECK].thrift_port, port, start_at, procs, args.duration + 30)
    net.check_alive()
    if any(p.returncode for p in procs):
        raise RuntimeError(f"{case.name}: an agent failed (exit codes {[p.returncode for p in procs]})")
    trims = ctl.counter(BOTTLENECK, TRIM_COUNTER, cell).get(cell, (0, 0))[0] - trims_before
    rx = json.loads((case_dir / f"receive-{RECEIVER}.json").read_text())
    tx = [json.loads((case_dir / f"send-{h.name}.json").read_text()) for h in senders]
    verdict = fidelity.verdict(t["send_late_s"] for t in tx)
    lost_before_pipeline(case.name, verdict)
    flows = list(rx["flows"].values())
    sent = sum(t["sent"] for t in tx)
    delivered = sum(f["packets"] for f in flows)
    headers = sum(f.get("trimmed", 0) for f in flows)
    steady = [q for t, q in samples if t >= args.duration * 0.2]
    return {
        "case": case.name, "run": run,
        "trimming": str(profile) if case.trimming else "off (tail drop)",
        "sent": sent, "delivered": delivered, "trimmed_headers": headers, "switch_trims": trims,
        "lost_silently": sent - delivered - headers,
        "lost_before_pipeline": sum(verdict.input_path.values()),     # of those, the emulator's own (fidelity)
        "data_delay_p50_ms": _pct(flows, "delay_ms", "p50"), "data_delay_p99_ms": _pct(flows, "delay_ms", "p99"),
        "header_delay_p50_ms": _pct(flows, "trim_delay_ms", "p50"),
        "header_delay_p99_ms": _pct(flows, "trim_delay_ms", "p99"),
        "queue_mean": round(statistics.fmean(steady), 1) if steady else 0.0,
        "queue_max": max(steady) if steady else 0,
        "fidelity": str(verdict),
    }


def _pct(flows: list[dict], key: str, which: str) -> float | str:
    """The median over flows of one delay percentile (ms), "" where no flow has any."""
    values = [f[key][which] for f in flows if f.get(key)]
    return round(statistics.median(values), 2) if values else ""


def plot(results: list[dict], out: Path) -> Path:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.4))
    names = [f"{r['case']} #{r['run']}" for r in results]
    bottom = [0] * len(results)
    for key, colour in (("delivered", "#3a7"), ("trimmed_headers", "#37a"), ("lost_silently", "#c44")):
        values = [r[key] for r in results]
        axes[0].bar(names, values, bottom=bottom, color=colour, label=key.replace("_", " "))
        bottom = [b + v for b, v in zip(bottom, values)]
    axes[0].set_title("packets sent, by what the receiver saw", fontsize=9)
    axes[0].legend(fontsize=7)
    for i, (key, title) in enumerate((("p50", "one-way delay p50 (ms)"), ("p99", "one-way delay p99 (ms)")), start=1):
        width = 0.4
        xs = range(len(results))
        axes[i].bar([x - width / 2 for x in xs], [r[f"data_delay_{key}_ms"] or 0 for r in results], width,
                    color="#3a7", label="delivered packets")
        axes[i].bar([x + width / 2 for x in xs], [r[f"header_delay_{key}_ms"] or 0 for r in results], width,
                    color="#37a", label="trimmed headers")
        axes[i].set_xticks(list(xs), names)
        axes[i].set_title(title, fontsize=9)
        axes[i].legend(fontsize=7)
    for ax in axes:
        ax.tick_params(axis="x", labelsize=7, rotation=15)
    return save_figure(fig, out / "summary.png")


def main(argv: list[str] | None = None) -> int:
    ap = experiment_parser("trimming_incast", __doc__)
    ap.add_argument("--duration", type=float, default=5.0, help="seconds of traffic per case")
    ap.add_argument("--runs", type=int, default=1, help="runs of each case, in rounds")
    ap.add_argument("--sender-rate", type=float, default=400.0,
                    help="each sender's fixed rate, pkts/s (4 senders into 800 pkts/s: 2x the bottleneck)")
    ap.add_argument("--threshold", type=int, default=16,
                    help=f"trim from this many packets queued (1..{BMV2_QUEUE_DEPTH - 1})")
    ap.add_argument("--out", default=str(REPO / "experiments" / "results" / "trimming_incast"),
                    help="results directory (default %(default)s)")
    ap.add_argument("--log-level", default=DEFAULT_EXPERIMENT_LOG_LEVEL, choices=LOG_LEVELS,
                    help="BMv2 log level (default off: logging slows BMv2 several times)")
    args = ap.parse_args(argv)
    if not 1 <= args.threshold < BMV2_QUEUE_DEPTH:
        ap.error(f"--threshold: expected 1..{BMV2_QUEUE_DEPTH - 1}, got {args.threshold}")
    profile = TrimProfile(args.threshold, dscp=TRIMMED_DSCP)
    try:
        topo = load_topology(REPO / "topologies" / "incast.yaml")
    except TopologyError as exc:
        ap.error(str(exc))
    # The bottleneck's entry is in the topology from the start: s1 then runs the
    # header queue (a switch's queue count is fixed when it starts); cases switch it.
    topo.features[SECTION] = {(BOTTLENECK, topo.hosts[RECEIVER].switch_port, 0): profile}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    compile_p4()
    results = []
    with Network(topo, REPO / "build" / "experiments" / "trimming_incast", log_level=args.log_level) as net, \
            FabricController(topo) as ctl:
        ctl.program()
        net.apply_queue_rates()
        senders = [h.name for h in topo.hosts.values() if h.role == "sender"]
        budget = announce_budget(topo, [Flow(h, RECEIVER, args.sender_rate) for h in senders])
        for run in range(1, args.runs + 1):
            for case in CASES:
                print(f"==> {case.name} (run {run}/{args.runs}): {args.duration:g}s of 4:1 incast at "
                      f"{args.sender_rate:g} pkts/s a sender", flush=True)
                results.append({**run_case(case, run, profile, topo, net, ctl, args, out), "budget": budget})
    write_csv(out / "summary.csv", results)
    png = plot(results, out)
    cols = ["case", "run", "sent", "delivered", "trimmed_headers", "switch_trims", "lost_silently",
            "data_delay_p50_ms", "header_delay_p50_ms", "queue_mean"]
    print_table([{c: r[c] for c in cols} for r in results], width=19)
    print_fidelity(results)
    print(f"\nresults: {out}/summary.csv, {png}, and per case <case>-<run>/ (the agents' JSON and CSV)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
