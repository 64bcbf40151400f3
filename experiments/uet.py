#!/usr/bin/env python3
"""RoCEv2 with PFC against Ultra Ethernet's transport, on the same fabric and
rates: what each answer to congestion and failure costs.

    fabric experiment uet [--phases incast failure allreduce] [--cases roce-pfc roce-lossy uet-nscc uet-rccc]
                          [--senders 8] [--runs 3] [--duration 8] [--dilation auto] [--out experiments/results/uet]

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

Phase allreduce: topologies/fat-tree-k4.yaml with the incast's rates (10
Mbit/s links, 833 packets/s), the same lossless class, ECN and trimming on
every switch port. Four ranks, one a pod (h1, h5, h9, h13: every ring hop
crosses the cores), run --ring-iterations (8) ring all-reduces of
RING_BYTES (hostagent.collectives sweep: each result checked exact) while
a long flow of the case's transport goes from h2 to h6, beside the ring's
first hop: on RoCE its queue pair is chosen so that ECMP hashes it onto
that hop's path (the collision spraying is meant to dissolve); on UET both
spray. Recorded: all-reduce time p50/p99, wrong results, the competing
flow's goodput, timeouts and retransmissions, pauses, trims.

--runs rounds of every case; summary.csv has one row per run, spread.csv
each case's median and range; summary.png the medians with their ranges.
Prints the tables, every run's fidelity and where the files went.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

import yaml

from control.controller import FabricController
from control.path_assignment import default_sport
from emulator.bmv2 import DEFAULT_EXPERIMENT_LOG_LEVEL, LOG_LEVELS
from emulator.build import compile_p4
from emulator.dilation import Dilation
from emulator.network import BMV2_QUEUE_DEPTH, Network
from experiments.common import StartGate, agent_python, announce_budget, case_fidelity, experiment_parser, \
    fail_link, lost_before_pipeline, percentile, print_fidelity, print_table, programmed_fabric, rdma_agent, \
    save_figure, stop_all, write_csv
from emulator.calibration import Flow as CalFlow
from emulator.network import queue_rate_pps
from emulator.calibration import CalibrationError, demand, plan, stored as stored_calibration
from experiments.rdma import (BOTTLENECK_SWITCH, DCQCN_K, LOSSLESS_CLASS, LOSSLESS_DSCP, LOSSLESS_HEADROOM,
                              LOSSLESS_HOLD_PPS, MARKED_CCS, MESSAGE_BYTES, MTU, RECEIVER, Flow as RdmaFlow,
                              bottleneck_pps, budget_dilation, incast_flows, jain, judged, phase_demand, run_flows,
                              switch_drops, with_int_to_host)
from features import topology_from_dict
from features.ecn import EcnProfile
from hostagent.collectives.paths import PathModel, path_aware_entropies
from hostagent.collectives.placement import Rank
from features.trimming import SECTION as TRIMMING, TRIM_COUNTER, TrimProfile
from features.trimming import cell as trim_cell

TRIM_THRESHOLD = 16          # packets queued in the lossy queue before the bottleneck trims (BMv2 holds 64)
HEADER_QUEUE = 5             # the trimmed headers' priority queue: above the lossy 0, not class 3 nor the hold queue
ENTROPIES = 16
# UE's control traffic class: UET's ACKs, NACKs and credits in a lossy class of their own, served above the
# data (queue 0) and never trimmed (a trimmed ACK says nothing: with trimming on every port of the fat tree,
# ACKs that shared a queue with data were cut, and RCCC's ranks gave up after their retry limit)
CONTROL_CLASS, CONTROL_DSCP = 4, 46
CONTROL = {"name": "uet-control", "class": CONTROL_CLASS, "dscp": [CONTROL_DSCP]}
UET_CONTROL = ("--control-dscp", str(CONTROL_DSCP))
FAILURE_SENDERS = ("h1", "h2", "h5", "h6")
FAILED_LINK = (BOTTLENECK_SWITCH, "spine2")
PHASES = ("incast", "failure", "allreduce")
# Phase allreduce: a ring of one rank a pod on fat-tree-k4, a competing flow beside its first hop
RING_TOPOLOGY = "fat-tree-k4"
RING_RANKS = ("h1", "h5", "h9", "h13")
COMPETING = ("h2", "h6")          # h1's edge switch to h5's: the ring's first hop's way
RING_LINK_MBPS = 10.0             # the incast's links: 833 packets/s, what BMv2 on two cores can be sized to
RING_BYTES = 64 * 1024            # each all-reduce: 64 KB of float32 (a rank sends 1.5x that on a ring of four)
RING_ITERATIONS = 8               # timed all-reduces a run (after one warm-up)
RING_TIMEOUT_S = 20.0             # a rank waiting longer for a peer gives up (network time: x the dilation)


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
    topo = with_int_to_host(REPO / "topologies" / "incast-leaf-spine.yaml", dilation, classes=(CONTROL,))
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
        flows = [replace(f, extra=(*f.extra, *UET_CONTROL, "--entropy-ports", ",".join(
            map(str, path_aware_entropies(model, topo.hosts[f.host].primary.ip, ENTROPIES)(r1))))) for f in flows]
    receiver_extra = ((*UET_CONTROL, *(("--credit-pps", str(capacity)) if case.cc == "rccc" else ()))
                      if case.mode == "uet" else ())
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


def ring_topology(dilation: Dilation, trim_threshold: int = TRIM_THRESHOLD):
    """fat-tree-k4 at the incast's link rate, with its lossless class (DSCP
    26 is class 3) and every switch port's lossy queue trimming from
    `trim_threshold` packets (the cases switch it on and off); the raw
    mapping too (the ranks' path model reads it from a file)."""
    raw = yaml.safe_load((REPO / "topologies" / f"{RING_TOPOLOGY}.yaml").read_text())
    raw = {k: raw[k] for k in ("name", "description", "defaults", "switches", "hosts", "links") if k in raw}
    raw["defaults"] = {**raw.get("defaults", {}), "link": {**raw.get("defaults", {}).get("link", {}),
                                                           "bandwidth_mbps": RING_LINK_MBPS}}
    raw["lossless"] = {"queues": 8, "classes": [{"name": "rdma", "class": LOSSLESS_CLASS, "dscp": [LOSSLESS_DSCP],
                                                 "lossless": True}, CONTROL],
                       "pfc": {"xoff": 24, "xon": 12, "headroom": LOSSLESS_HEADROOM},
                       "hold_rate_pps": LOSSLESS_HOLD_PPS}
    raw["trimming"] = [{"switch": "all", "port": "all", "queue": 0, "threshold": trim_threshold,
                        "header_queue": HEADER_QUEUE}]
    raw = dilation.topology(raw)
    return topology_from_dict(raw, f"{RING_TOPOLOGY}.yaml at {RING_LINK_MBPS:g} Mbit/s + a lossless class + trimming"
                              + (f", dilated {dilation}" if dilation.factor > 1 else "")), raw


def ring_demand(topo) -> list[CalFlow]:
    """What the budget counts: every ring hop and the competing flow at the (dilated) links' rate."""
    cap = queue_rate_pps(topo.access_link(topo.hosts[RING_RANKS[0]]).bandwidth_mbps)
    return ([CalFlow(a, b, cap) for a, b in zip(RING_RANKS, RING_RANKS[1:] + RING_RANKS[:1])]
            + [CalFlow(*COMPETING, cap)])


def colliding_qp(model: PathModel, topo) -> int:
    """The lowest queue pair whose RoCEv2 flow from COMPETING[0] to
    COMPETING[1] takes the ring's first hop's way (ECMP hashes it onto the
    same aggregation and core switches as rank 0's connection to rank 1)."""
    src, dst = (topo.hosts[h].ip for h in COMPETING)
    a, b = (topo.hosts[h].ip for h in RING_RANKS[:2])
    ring = [sw for sw, _ in model.path(a, b, default_sport(0, 1, 0)).hops[1:-1]]
    for qp in range(1, 1024):
        if [sw for sw, _ in model.path(src, dst, 0xC000 | qp).hops[1:-1]] == ring:
            return qp
    raise ValueError(f"no queue pair 1..1023 takes {COMPETING[0]} -> {COMPETING[1]} over {'-'.join(ring)}")


def ring_ideal_s(ranks: int, link_pps: float) -> float:
    """A ring all-reduce of RING_BYTES at the links' rate, latency left out:
    each rank sends 2(N-1)/N of the buffer, in MTU-sized packets."""
    return 2 * (ranks - 1) / ranks * RING_BYTES / MTU / link_pps


def set_ring_case(case: Case, topo, ctl: FabricController) -> None:
    """Trimming on every port's lossy queue for UET (off for RoCE); ECN
    marks for DCQCN and NSCC on the queue the case's data uses."""
    ctl.feature(TRIMMING).set_profiles({key: replace(profile, on=True) if case.trimming else None
                                        for key, profile in topo.features[TRIMMING].items()})
    marked = LOSSLESS_CLASS if case.pfc else 0
    ctl.feature("ecn").set_profiles({(sw.name, port, q): EcnProfile.step(DCQCN_K)
                                     if case.cc in MARKED_CCS and q == marked else None
                                     for sw in topo.switches.values() for port in sw.ports
                                     for q in (0, LOSSLESS_CLASS)})


def all_trims(ctl: FabricController, topo) -> int:
    """Packets every trimming cell of every switch trimmed so far (each switch's counter read once)."""
    cells: dict[str, set[int]] = {}
    for sw, port, queue in topo.features[TRIMMING]:
        cells.setdefault(sw, set()).add(trim_cell(port, queue))
    return sum(packets for sw, mine in cells.items() for packets, _ in ctl.counter_cells(sw, TRIM_COUNTER, mine).values())


def run_ring_case(case: Case, run: int, topo, topo_file: Path, net: Network, ctl: FabricController, args,
                  out: Path) -> dict:
    """--ring-iterations ring all-reduces on RING_RANKS beside the competing flow: one row."""
    set_ring_case(case, topo, ctl)
    name = f"allreduce-{case.name}-{run}"
    case_dir = out / name
    case_dir.mkdir(parents=True, exist_ok=True)
    d = args.dilation.factor
    link_mbps = topo.access_link(topo.hosts[RING_RANKS[0]]).bandwidth_mbps
    cap = queue_rate_pps(link_mbps)
    model = PathModel(topo)
    common = ["--mode", case.mode, "--mtu", str(MTU), "--dilation", f"{d:g}",
              *(UET_CONTROL if case.mode == "uet" else ())]          # every agent's, receivers' too
    transport = [*common, "--line-rate-pps", str(cap)]               # senders' and ranks'
    lossless = (["--dscp", str(LOSSLESS_DSCP), "--tclass", str(LOSSLESS_CLASS), "--link-mbps", str(link_mbps)]
                if case.pfc else [])
    gate = StartGate(case_dir)
    ranks = [Rank.of(topo.hosts[h].primary) for h in RING_RANKS]
    addresses = ",".join(r.ip for r in ranks)
    procs = []
    for i, r in enumerate(ranks):
        cmd = ["ip", "netns", "exec", r.host, agent_python(), "-m", "hostagent.collectives", "sweep",
               "--collective", "all-reduce", "--algorithm", "ring", "--min-bytes", str(RING_BYTES),
               "--max-bytes", str(RING_BYTES), "--iterations", str(args.ring_iterations), "--rank", str(i),
               "--addresses", addresses, "--iface", r.iface, "--src-ip", r.ip, "--src-mac", r.mac,
               "--gw-mac", r.gateway_mac, "--cc", case.cc, *transport, *lossless,
               "--timeout-s", f"{RING_TIMEOUT_S * d:g}", *gate.args(), "--out", str(case_dir / f"rank{i}"),
               *(["--paths", str(topo_file)] if case.mode == "uet" else [])]
        with open(case_dir / f"rank{i}.log", "w") as log:
            procs.append(subprocess.Popen(cmd, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
                                          stdout=log, stderr=subprocess.STDOUT))
    src, dst = (topo.hosts[h] for h in COMPETING)
    if case.mode == "uet":
        qp, steer = 1, ["--entropy-ports", ",".join(map(str, path_aware_entropies(model, src.ip, ENTROPIES)(dst.ip)))]
    else:
        qp, steer = colliding_qp(model, topo), []
    long_s = 600.0 * d                   # stopped once the ring is done
    receiver = rdma_agent(dst, "receive", start_at=gate, out_dir=case_dir, extra=[
        *common, "--duration", f"{long_s:g}", *(["--credit-pps", str(cap)] if case.cc == "rccc" else [])])
    sender = rdma_agent(src, "send", start_at=gate, out_dir=case_dir, stem="competing", extra=[
        *transport, "--dst-ip", dst.ip, "--qp", str(qp), "--cc", case.cc, "--duration", f"{long_s:g}",
        "--message-bytes", str(MESSAGE_BYTES), "--drain-s", "0", *lossless, *steer])
    trims_before, drops_before = all_trims(ctl, topo), switch_drops(ctl, topo)
    fidelity = case_fidelity(net, ctl)
    started = ended = time.time()
    try:
        started = gate.open([*procs, receiver, sender])
        fidelity.traffic_starts(started)
        for p in procs:
            p.wait(timeout=RING_TIMEOUT_S * d * (args.ring_iterations + 2) + 120)
    finally:
        ended = time.time()
        stop_all([*procs, sender, receiver])     # the competing flow's end; every agent's, on an error
    verdict = fidelity.verdict()
    net.check_alive()
    # exit 1 with a summary: a result was wrong (counted below); without one, the rank gave up
    failed = [f"rank {i} (exit {p.returncode}): {(case_dir / f'rank{i}.log').read_text().strip()[-600:]}"
              for i, p in enumerate(procs) if p.returncode and not (case_dir / f"rank{i}.json").exists()]
    if failed:
        raise RuntimeError(f"{name}: " + "\n".join(failed))
    summaries = [json.loads((case_dir / f"rank{i}.json").read_text()) for i in range(len(ranks))]
    times = [max(t) for t in zip(*[[float(line.split(",")[6]) for line in
                                    (case_dir / f"rank{i}.csv").read_text().splitlines()[1:]]
                                   for i in range(len(ranks))])]
    competing = json.loads((case_dir / "competing.json").read_text())
    drops = {k: n - drops_before.get(k, 0) for k, n in switch_drops(ctl, topo).items()}
    return {
        "phase": "allreduce", "case": case.name, "run": run, "senders": len(ranks) + 1,
        "allreduces": len(times), "wrong_results": sum(r["wrong_results"] for r in summaries),
        "allreduce_p50_ms": round(1000 * statistics.median(times), 1) if times else "",
        "allreduce_p99_ms": round(1000 * percentile(times, 0.99), 1) if times else "",
        # dimensionless, so runs at different dilations compare: the median against the links' time for
        # what a rank sends (2(N-1)/N of the buffer), and the competing flow's share of its link
        "allreduce_vs_ideal": round(statistics.median(times) / ring_ideal_s(len(ranks), cap), 2) if times else "",
        "competing_link_share": round(competing["messages_completed"] * MESSAGE_BYTES / MTU / cap
                                      / max(1e-9, ended - started), 3),
        "competing_goodput_mbps": round(competing["messages_completed"] * MESSAGE_BYTES * 8 / 1e6
                                        / max(1e-9, ended - started), 3),
        "timeouts": sum(r["timeouts"] for r in summaries) + competing["timeouts"],
        "retransmitted": sum(r["retransmitted"] for r in summaries) + competing["retransmitted"],
        "pauses": sum(r["pauses_received"] for r in summaries),
        "trims": all_trims(ctl, topo) - trims_before,
        "switch_drops": " ".join(f"{k}:{n}" for k, n in sorted(drops.items()) if n),
        **judged(args, lost_before_pipeline(name, verdict), str(verdict)),
    }


def judged_runs(rows: list[dict]) -> tuple[list[dict], str]:
    """The runs a case's figures come from: its faithful ones, or all of
    them (said so) when none was."""
    faithful = [r for r in rows if r["fidelity"] == "ok"]
    return (faithful, "faithful runs") if faithful else (rows, "all runs, none faithful")


def spread(rows: list[dict]) -> list[dict]:
    """Per phase and case: the runs, and the median [min, max] of what
    varies over its faithful runs (over all, said so, when none was)."""
    out = []
    keys = ("fct_p50_ms", "fct_p99_ms", "goodput_mbps", "allreduce_p50_ms", "allreduce_p99_ms",
            "allreduce_vs_ideal", "competing_goodput_mbps", "competing_link_share", "wrong_results", "timeouts",
            "pauses", "trims", "messages_failed")
    for phase, case in dict.fromkeys((r["phase"], r["case"]) for r in rows):
        mine = [r for r in rows if (r["phase"], r["case"]) == (phase, case)]
        judged, over = judged_runs(mine)
        row: dict = {"phase": phase, "case": case, "runs": len(mine),
                     "faithful": sum(r["fidelity"] == "ok" for r in mine), "over": over}
        for k in keys:
            if any(k in r for r in judged):
                vs = [float(r[k]) for r in judged if r.get(k, "") != ""]
                row[k] = (f"{statistics.median(vs):g} [{min(vs):g}, {max(vs):g}]" if vs else "")
        out.append(row)
    return out


PLOTTED = {"incast": ("fct_p99_ms", "message completion p99 (ms)"), "failure": ("goodput_mbps", "goodput (Mbit/s)"),
           "allreduce": ("allreduce_vs_ideal", "ring all-reduce p50 / the links' time")}


def plot(rows: list[dict], out: Path) -> Path:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    phases = list(dict.fromkeys(r["phase"] for r in rows))
    fig, axes = plt.subplots(1, len(phases), figsize=(6 * len(phases), 4.2), squeeze=False)
    for ax, phase in zip(axes[0], phases):
        cases = list(dict.fromkeys(r["case"] for r in rows if r["phase"] == phase))
        metric = PLOTTED[phase][0]
        labels = []
        for i, case in enumerate(cases):
            judged, over = judged_runs([r for r in rows if (r["phase"], r["case"]) == (phase, case)])
            labels.append(case if over == "faithful runs" else f"{case}\n(none faithful)")
            vs = [float(r[metric]) for r in judged if r[metric] != ""]
            if not vs:
                continue
            m = statistics.median(vs)
            ax.bar(i, m, color="tab:blue" if case.startswith("roce") else "tab:green",
                   hatch="" if over == "faithful runs" else "//")
            ax.errorbar(i, m, yerr=[[m - min(vs)], [max(vs) - m]], color="black", capsize=4)
        ax.set_xticks(range(len(cases)), labels)
        ax.set_ylabel(PLOTTED[phase][1])
        mine = [r for r in rows if r["phase"] == phase]
        faithful = sum(r["fidelity"] == "ok" for r in mine)
        ax.set_title(f"{phase}: median of the faithful runs, bars the range\n{faithful} of {len(mine)} runs faithful"
                     + ("" if faithful == len(mine) else
                        ": the others left out" if faithful else ": not a result about the network"))
    return save_figure(fig, out / "summary.png")


def auto_dilation(topo, flows: list[CalFlow], agents: str) -> Dilation:
    """The dilation the budget asks for `flows` on `topo` (the training
    composition: the lossless class is on; ACKed every 4th packet)."""
    cal = stored_calibration()
    if cal is None:
        raise CalibrationError("no calibration: run `fabric calibrate` first")
    return Dilation.rounded_up(plan(demand(topo, flows, ack_share=0.25), cal, "training", agents=agents).dilation)


def main(argv: list[str] | None = None) -> int:
    ap = experiment_parser("uet", __doc__)
    ap.add_argument("--phases", nargs="*", default=list(PHASES), choices=PHASES)
    ap.add_argument("--cases", nargs="*", default=list(CASES), choices=list(CASES))
    ap.add_argument("--senders", type=int, default=8, choices=(4, 8), help="incast phase: senders into r1")
    ap.add_argument("--runs", type=int, default=3, help="rounds of every case")
    ap.add_argument("--duration", type=float, default=8.0, help="seconds of traffic per run (incast and failure)")
    ap.add_argument("--ring-iterations", type=int, default=RING_ITERATIONS,
                    help="allreduce phase: timed all-reduces a run, after one warm-up (default %(default)s)")
    ap.add_argument("--trim-threshold", type=int, default=TRIM_THRESHOLD,
                    help="a trimming port trims its lossy queue from this many packets (default %(default)s; "
                         "ECN marks from 10)")
    ap.add_argument("--out", default=str(REPO / "experiments" / "results" / "uet"),
                    help="results directory (default %(default)s)")
    ap.add_argument("--log-level", default=DEFAULT_EXPERIMENT_LOG_LEVEL, choices=LOG_LEVELS)
    ap.add_argument("--dilation", default="1", metavar="{auto,D}",
                    help="run the network D times slower (emulator/dilation.py): link and line rates divided by D, "
                         "the agents' time constants and --duration multiplied by it; auto: the D the budget asks "
                         "for each fabric (incast-leaf-spine: --senders' incast; fat-tree-k4: the ring and its "
                         "competing flow) (default 1: none)")
    args = ap.parse_args(argv)
    if args.runs < 1 or args.duration <= 0 or args.ring_iterations < 1:
        ap.error(f"--runs and --ring-iterations must be >= 1 and --duration > 0, got {args.runs}, "
                 f"{args.ring_iterations} and {args.duration}")
    if not 1 <= args.trim_threshold < BMV2_QUEUE_DEPTH:
        ap.error(f"--trim-threshold: expected 1..{BMV2_QUEUE_DEPTH - 1}, got {args.trim_threshold}")
    if not args.phases or not args.cases:
        ap.error("--phases and --cases take at least one each")
    args.mode = "selective-repeat"
    # every case of a fabric runs at one dilation, sized for the costliest agents among them (UET's)
    agents = "uet" if any(CASES[c].mode == "uet" for c in args.cases) else "rdma"
    incast_phases = [ph for ph in args.phases if ph in ("incast", "failure")]
    dilations: dict[str, Dilation] = {}
    try:
        if incast_phases:
            dilations["incast-leaf-spine"] = (
                budget_dilation(topology(Dilation(1.0), args.trim_threshold), ["incast"], args.senders, agents)
                if args.dilation == "auto" else Dilation(float(args.dilation)))
        if "allreduce" in args.phases:
            undilated, _ = ring_topology(Dilation(1.0), args.trim_threshold)
            dilations[RING_TOPOLOGY] = (auto_dilation(undilated, ring_demand(undilated), agents)
                                        if args.dilation == "auto" else Dilation(float(args.dilation)))
    except (ValueError, CalibrationError) as exc:
        ap.error(f"--dilation: {exc}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    compile_p4()
    rows: list[dict] = []
    duration = args.duration
    if incast_phases:
        args.dilation = dilations["incast-leaf-spine"]
        announce_dilation(args.dilation, "incast-leaf-spine")
        args.duration = duration * args.dilation.factor
        topo = topology(args.dilation, args.trim_threshold)
        args.budget = announce_budget(topo, phase_demand(topo, ["incast"], args.senders), "training", ack_share=0.25,
                                      agents=agents)
        with programmed_fabric(topo, "uet", args.log_level) as (net, ctl):
            for run in range(1, args.runs + 1):
                for name in args.cases:
                    case = CASES[name]
                    if "incast" in args.phases:
                        print(f"==> incast {name} (run {run}/{args.runs}): {args.duration:g}s of {args.senders}:1 "
                              f"into {RECEIVER}", flush=True)
                        rows.append(run_case(case, "incast", run, incast_flows(args.senders, args.duration), topo,
                                             net, ctl, args, out / "incast"))
                        write_csv(out / "summary.csv", rows)      # as it goes: a later failure keeps these
                    if "failure" in args.phases:
                        fail_at = args.duration / 3
                        print(f"==> failure {name} (run {run}/{args.runs}): {len(FAILURE_SENDERS)} senders into "
                              f"{RECEIVER}, {'-'.join(FAILED_LINK)} black-holed at {fail_at:.1f}s", flush=True)
                        flows = [RdmaFlow(h, qp, 0.0, args.duration, ("--message-bytes", str(MESSAGE_BYTES)))
                                 for qp, h in enumerate(FAILURE_SENDERS, 1)]
                        rows.append(run_case(case, "failure", run, flows, topo, net, ctl, args, out / "failure",
                                             fail_at_s=fail_at))
                        write_csv(out / "summary.csv", rows)
    if "allreduce" in args.phases:
        args.dilation = dilations[RING_TOPOLOGY]
        announce_dilation(args.dilation, RING_TOPOLOGY)
        topo, raw = ring_topology(args.dilation, args.trim_threshold)
        (out / "allreduce").mkdir(parents=True, exist_ok=True)
        topo_file = out / "allreduce" / "topology.yaml"          # the UET ranks' path model reads it
        topo_file.write_text(yaml.safe_dump(raw, sort_keys=False))
        args.budget = announce_budget(topo, ring_demand(topo), "training", ack_share=0.25, agents=agents)
        with programmed_fabric(topo, "uet-allreduce", args.log_level) as (net, ctl):
            for run in range(1, args.runs + 1):
                for name in args.cases:
                    print(f"==> allreduce {name} (run {run}/{args.runs}): {args.ring_iterations} ring all-reduces of "
                          f"{RING_BYTES // 1024} KB on {', '.join(RING_RANKS)} beside {'->'.join(COMPETING)}",
                          flush=True)
                    rows.append(run_ring_case(CASES[name], run, topo, topo_file, net, ctl, args, out / "allreduce"))
                    write_csv(out / "summary.csv", rows)
    written = [write_csv(out / "summary.csv", rows), write_csv(out / "spread.csv", spread(rows)), plot(rows, out)]
    print_table([{k: r.get(k, "") for k in ("phase", "case", "run", "messages", "messages_failed", "fct_p99_ms",
                                            "allreduce_p50_ms", "allreduce_p99_ms", "timeouts", "pauses", "trims")}
                 for r in rows], width=14)
    for phase in dict.fromkeys(r["phase"] for r in rows):      # a table a phase: each its own columns
        print_table([r for r in spread(rows) if r["phase"] == phase], width=22)
    print_fidelity(rows)
    print(f"\nresults: {', '.join(map(str, written))}, and per run <phase>/<phase>-<case>-<run>/ (the agents' JSON "
          f"and CSV, timeseries)")
    return 0


def announce_dilation(dilation: Dilation, fabric: str) -> None:
    if dilation.factor > 1:
        print(f"{fabric}: dilation {dilation}: rates / {dilation.factor:g}, time constants and --duration "
              f"x {dilation.factor:g}; times in the results are the dilated network's, goodputs its own", flush=True)


if __name__ == "__main__":
    sys.exit(main())
