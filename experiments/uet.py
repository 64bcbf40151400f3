#!/usr/bin/env python3
"""RoCEv2 with PFC against Ultra Ethernet's transport, on the same fabric and
rates: what each answer to congestion and failure costs.

    fabric experiment uet [--phases incast failure] [--cases roce-pfc roce-lossy uet-nscc uet-rccc]
                          [--senders 8] [--runs 3] [--duration 8] [--out experiments/results/uet]

topologies/incast-leaf-spine.yaml on BMv2 (experiments/rdma.py's set-up:
host links 10 Mbit/s, 833 packets/s; the receiver r1's port on leaf3 the
bottleneck; a lossless class 3 with PFC; ECN marked at 10 packets on the
bottleneck for DCQCN and NSCC), plus packet trimming on that port's lossy
queue (headers in priority queue 5). The cases:

  roce-pfc    RoCEv2 RC, selective repeat (IRN), DCQCN, the lossless class
              (PFC; the senders honour pauses), one path per queue pair (ECMP)
  roce-lossy  the same without PFC or trimming: tail drop
  uet-nscc    UET's reliable unordered delivery, NSCC, lossy with trimming,
              every packet sprayed (16 entropy values a PDC, chosen with the
              fabric's hash model: as many on each path)
  uet-rccc    the same with RCCC: the receiver hands out its link as credit

Phase incast: N senders (h1-h8) post 64 KB messages back to back for
--duration seconds into r1. Recorded per run: message completion p50/p99,
goodput and the bottleneck's utilisation, Jain's fairness, timeouts and
retransmissions, the PFC pauses the senders received, the switch's trims,
the bottleneck queue p50/p99, and the run's fidelity.

Phase failure: four senders (h1, h2, h5, h6), and a third of the way in
leaf3's link to spine2 black-holes both ways (the ports stay up: nothing
reroutes). A RoCE queue pair hashed onto spine2 waits out its timeouts and
fails after its retry limit; a UET sender's packets sprayed onto spine2
are found lost and its entropies through spine2 rest. Recorded: messages
completed and failed, goodput after the failure, timeouts.

--runs rounds of every case; summary.csv has one row per run, spread.csv
each case's median and range; summary.png the medians with their ranges.
Prints the tables, every run's fidelity and where the files went.
"""
from __future__ import annotations

import statistics
import sys
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

from control.controller import FabricController
from emulator.bmv2 import DEFAULT_EXPERIMENT_LOG_LEVEL, LOG_LEVELS
from emulator.build import compile_p4
from emulator.dilation import Dilation
from emulator.network import BMV2_QUEUE_DEPTH, Network
from experiments.common import announce_budget, experiment_parser, fail_link, percentile, print_fidelity, \
    print_table, save_figure, write_csv
from emulator.calibration import CalibrationError
from experiments.rdma import (BOTTLENECK_SWITCH, LOSSLESS_CLASS, MESSAGE_BYTES, MTU, RECEIVER, Flow as RdmaFlow,
                              bottleneck_pps, budget_dilation, incast_flows, jain, judged, phase_demand, run_flows,
                              with_int_to_host)
from hostagent.collectives.paths import PathModel, path_aware_entropies
from features.trimming import SECTION as TRIMMING, TRIM_COUNTER, TrimProfile
from features.trimming import cell as trim_cell

TRIM_THRESHOLD = 16          # packets queued in the lossy queue before the bottleneck trims (BMv2 holds 64)
HEADER_QUEUE = 5             # the trimmed headers' priority queue: above the lossy 0, not class 3 nor the hold queue
ENTROPIES = 16
FAILURE_SENDERS = ("h1", "h2", "h5", "h6")
FAILED_LINK = (BOTTLENECK_SWITCH, "spine2")


@dataclass(frozen=True)
class Case:
    name: str
    mode: str                 # the agents' --mode
    cc: str
    pfc: bool                 # the lossless class, pauses honoured
    trimming: bool            # the bottleneck trims the lossy queue


CASES = {c.name: c for c in (Case("roce-pfc", "selective-repeat", "dcqcn", True, False),
                             Case("roce-lossy", "selective-repeat", "dcqcn", False, False),
                             Case("uet-nscc", "uet", "nscc", False, True),
                             Case("uet-rccc", "uet", "rccc", False, True))}


def topology(dilation: Dilation, trim_threshold: int = TRIM_THRESHOLD):
    """experiments/rdma.py's incast fabric (INT to the host, the lossless
    class), trimming configured on the bottleneck port (so leaf3 runs the
    header queue; the cases switch it on and off)."""
    topo = with_int_to_host(REPO / "topologies" / "incast-leaf-spine.yaml", dilation)
    port = topo.hosts[RECEIVER].switch_port
    topo.features[TRIMMING] = {(BOTTLENECK_SWITCH, port, 0): TrimProfile(trim_threshold, header_queue=HEADER_QUEUE)}
    return topo


def trims(ctl: FabricController, topo) -> int:
    cell = trim_cell(topo.hosts[RECEIVER].switch_port, 0)
    return ctl.counter(BOTTLENECK_SWITCH, TRIM_COUNTER, cell).get(cell, (0, 0))[0]


def run_case(case: Case, phase: str, run: int, flows: list[RdmaFlow], topo, net: Network, ctl: FabricController,
             args, out: Path, fail_at_s: float | None = None) -> dict:
    port = topo.hosts[RECEIVER].switch_port
    profile = replace(topo.features[TRIMMING][(BOTTLENECK_SWITCH, port, 0)], on=True)   # (an earlier case's "off")
    ctl.feature(TRIMMING).set_profile(BOTTLENECK_SWITCH, port, profile if case.trimming else None)
    capacity = bottleneck_pps(topo)
    if case.mode == "uet":            # each sender's entropies spread evenly over its paths, by the hash model
        model, r1 = PathModel(topo), topo.hosts[RECEIVER].primary.ip
        flows = [replace(f, extra=(*f.extra, "--entropy-ports", ",".join(
            map(str, path_aware_entropies(model, topo.hosts[f.host].primary.ip, ENTROPIES)(r1))))) for f in flows]
    receiver_extra = ("--credit-pps", str(capacity)) if case.cc == "rccc" else ()
    undo: list = []
    timer: list[threading.Timer] = []

    def schedule_failure(start_at: float) -> None:
        if fail_at_s is None:
            return
        t = threading.Timer(max(0.0, start_at + fail_at_s - time.time()),
                            lambda: undo.append(fail_link(topo, *FAILED_LINK)))
        timer.append(t)
        t.start()

    trims_before = trims(ctl, topo)
    try:
        r = run_flows(f"{phase}-{case.name}-{run}", case.cc, flows, case.pfc, topo, net, ctl, args, out, mode=case.mode,
                      receiver_extra=receiver_extra, at_start=schedule_failure,
                      senders_may_fail=fail_at_s is not None)
    finally:
        for t in timer:
            t.cancel()
        for u in undo:
            u()
    tx, samples = r.tx, r.samples
    fct = [t["completion_ms"] for t in tx if t["completion_ms"]]
    goodput = [t["messages_completed"] * MESSAGE_BYTES / args.duration for t in tx]
    steady = [q for t, q in samples if 0.2 * args.duration <= t <= args.duration]
    pauses = sum((t.get("pfc") or {}).get("pauses", [0] * 8)[LOSSLESS_CLASS] for t in tx)
    return {
        "phase": phase, "case": case.name, "run": run, "senders": len(flows),
        "messages": sum(t["messages_completed"] for t in tx),
        "messages_failed": sum(t["messages_failed"] for t in tx),
        "senders_failed": sum(t["error"] is not None for t in tx),
        "fct_p50_ms": round(statistics.median(f["p50"] for f in fct), 1) if fct else "",
        "fct_p99_ms": round(max(f["p99"] for f in fct), 1) if fct else "",
        "goodput_mbps": round(sum(goodput) * 8 / 1e6, 3),
        "utilisation": round(sum(goodput) / MTU / capacity, 3),
        "jain": jain(goodput),
        "timeouts": sum(t["timeouts"] for t in tx), "retransmitted": sum(t["retransmitted"] for t in tx),
        "pauses": pauses, "trims": trims(ctl, topo) - trims_before,
        "queue_p50": percentile(steady, 0.5), "queue_p99": percentile(steady, 0.99),
        "switch_drops": " ".join(f"{k}:{n}" for k, n in sorted(r.drops.items())),
        **judged(args, r.lost_before_pipeline, r.fidelity),
    }


def spread(rows: list[dict]) -> list[dict]:
    """Per phase and case: the runs, and the median [min, max] of what varies."""
    out = []
    keys = ("fct_p50_ms", "fct_p99_ms", "goodput_mbps", "timeouts", "pauses", "trims", "messages_failed")
    for phase, case in dict.fromkeys((r["phase"], r["case"]) for r in rows):
        mine = [r for r in rows if (r["phase"], r["case"]) == (phase, case)]
        row: dict = {"phase": phase, "case": case, "runs": len(mine),
                     "faithful": sum(r["fidelity"] == "ok" for r in mine)}
        for k in keys:
            vs = [float(r[k]) for r in mine if r[k] != ""]
            row[k] = (f"{statistics.median(vs):g} [{min(vs):g}, {max(vs):g}]" if vs else "")
        out.append(row)
    return out


def plot(rows: list[dict], out: Path) -> Path:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    phases = list(dict.fromkeys(r["phase"] for r in rows))
    fig, axes = plt.subplots(1, len(phases), figsize=(6 * len(phases), 4.2), squeeze=False)
    for ax, phase in zip(axes[0], phases):
        cases = list(dict.fromkeys(r["case"] for r in rows if r["phase"] == phase))
        metric = "fct_p99_ms" if phase == "incast" else "goodput_mbps"
        for i, case in enumerate(cases):
            vs = [float(r[metric]) for r in rows if (r["phase"], r["case"]) == (phase, case) and r[metric] != ""]
            if not vs:
                continue
            m = statistics.median(vs)
            ax.bar(i, m, color="tab:blue" if case.startswith("roce") else "tab:green")
            ax.errorbar(i, m, yerr=[[m - min(vs)], [max(vs) - m]], color="black", capsize=4)
        ax.set_xticks(range(len(cases)), cases)
        ax.set_ylabel("message completion p99 (ms)" if phase == "incast" else "goodput (Mbit/s)")
        mine = [r for r in rows if r["phase"] == phase]
        faithful = sum(r["fidelity"] == "ok" for r in mine)
        ax.set_title(f"{phase}: median of runs, bars the range\n{faithful} of {len(mine)} runs faithful"
                     + ("" if faithful == len(mine) else ": not a result about the network"))
    return save_figure(fig, out / "summary.png")


def main(argv: list[str] | None = None) -> int:
    ap = experiment_parser("uet", __doc__)
    ap.add_argument("--phases", nargs="*", default=["incast", "failure"], choices=["incast", "failure"])
    ap.add_argument("--cases", nargs="*", default=list(CASES), choices=list(CASES))
    ap.add_argument("--senders", type=int, default=8, choices=(4, 8), help="incast phase: senders into r1")
    ap.add_argument("--runs", type=int, default=3, help="rounds of every case")
    ap.add_argument("--duration", type=float, default=8.0, help="seconds of traffic per run")
    ap.add_argument("--trim-threshold", type=int, default=TRIM_THRESHOLD,
                    help="the bottleneck trims its lossy queue from this many packets (default %(default)s; "
                         "ECN marks from 10)")
    ap.add_argument("--out", default=str(REPO / "experiments" / "results" / "uet"),
                    help="results directory (default %(default)s)")
    ap.add_argument("--log-level", default=DEFAULT_EXPERIMENT_LOG_LEVEL, choices=LOG_LEVELS)
    ap.add_argument("--dilation", default="1", metavar="{auto,D}",
                    help="run the network D times slower (emulator/dilation.py): link and line rates divided by D, "
                         "the agents' time constants and --duration multiplied by it; auto: the D the budget asks "
                         "for --senders' incast at the bottleneck's rate (default 1: none)")
    args = ap.parse_args(argv)
    if args.runs < 1 or args.duration <= 0:
        ap.error(f"--runs must be >= 1 and --duration > 0, got {args.runs} and {args.duration}")
    if not 1 <= args.trim_threshold < BMV2_QUEUE_DEPTH:
        ap.error(f"--trim-threshold: expected 1..{BMV2_QUEUE_DEPTH - 1}, got {args.trim_threshold}")
    args.mode = "selective-repeat"
    try:
        args.dilation = (budget_dilation(topology(Dilation(1.0), args.trim_threshold), ["incast"], args.senders)
                         if args.dilation == "auto" else Dilation(float(args.dilation)))
    except (ValueError, CalibrationError) as exc:
        ap.error(f"--dilation: {exc}")
    if args.dilation.factor > 1:
        print(f"dilation {args.dilation}: rates / {args.dilation.factor:g}, time constants and --duration "
              f"x {args.dilation.factor:g}; times in the results are the dilated network's, goodputs its own",
              flush=True)
        args.duration *= args.dilation.factor
    topo = topology(args.dilation, args.trim_threshold)
    args.budget = announce_budget(topo, phase_demand(topo, ["incast"], args.senders), "training", ack_share=0.25,
                                  agents="rdma")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    compile_p4()
    rows: list[dict] = []
    with Network(topo, REPO / "build" / "experiments" / "uet", log_level=args.log_level) as net, \
            FabricController(topo) as ctl:
        ctl.program()
        net.apply_queue_rates()
        for run in range(1, args.runs + 1):
            for name in args.cases:
                case = CASES[name]
                if "incast" in args.phases:
                    print(f"==> incast {name} (run {run}/{args.runs}): {args.duration:g}s of {args.senders}:1 into "
                          f"{RECEIVER}", flush=True)
                    rows.append(run_case(case, "incast", run, incast_flows(args.senders, args.duration), topo, net,
                                         ctl, args, out / "incast"))
                if "failure" in args.phases:
                    fail_at = args.duration / 3
                    print(f"==> failure {name} (run {run}/{args.runs}): {len(FAILURE_SENDERS)} senders into "
                          f"{RECEIVER}, {'-'.join(FAILED_LINK)} black-holed at {fail_at:.1f}s", flush=True)
                    flows = [RdmaFlow(h, qp, 0.0, args.duration, ("--message-bytes", str(MESSAGE_BYTES)))
                             for qp, h in enumerate(FAILURE_SENDERS, 1)]
                    rows.append(run_case(case, "failure", run, flows, topo, net, ctl, args, out / "failure",
                                         fail_at_s=fail_at))
    written = [write_csv(out / "summary.csv", rows), write_csv(out / "spread.csv", spread(rows)), plot(rows, out)]
    print_table([{k: r[k] for k in ("phase", "case", "run", "messages", "messages_failed", "fct_p50_ms", "fct_p99_ms",
                                    "utilisation", "timeouts", "pauses", "trims")} for r in rows], width=14)
    print()
    print_table(spread(rows), width=22)
    print_fidelity(rows)
    print(f"\nresults: {', '.join(map(str, written))}, and per run <phase>/<phase>-<case>-<run>/ (the agents' JSON "
          f"and CSV, timeseries)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
