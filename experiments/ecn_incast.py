#!/usr/bin/env python3
"""Incast N:1 through a bottleneck, three ways: no ECN, step ECN + DCQCN,
WRED ECN + DCQCN.

    fabric experiment ecn_incast [--duration 10] [--out experiments/results/ecn_incast] [--overlay tuned.yaml]

Brings topologies/incast.yaml up on BMv2 (4 senders, 1 receiver; the
receiver's port is served at 800 packets/s), then for each case sets the
bottleneck port's ECN profile over P4Runtime and runs the host agents
(hostagent.ecn.roce) in the hosts' namespaces, all starting at the same instant.

Recorded per case:
  - per-flow throughput over time and PSN-gap losses (receiver agent),
  - CE fraction and CNPs sent (receiver) / received (senders), DCQCN rates,
  - bottleneck queue depth over time: the egress pipeline records each
    packet's enq_qdepth per queue, profile or not (queue_depth.p4); a thread
    reads it over Thrift every 5 ms (the depth the last departing packet saw on arrival, in packets),
  - marks counted by the switch (ecn_marked_counter, P4Runtime).
Writes CSV and PNG under --out, prints a summary table and where files went.
Fixed seeds: the agents' only randomness is the switch's WRED draws, and the
scenario itself (start times, rates) is deterministic.

--overlay FILE (`fabric tune --topology incast --ecn step|wred --out FILE`,
docs/tuning.md) loads incast.yaml with that file's sections: the step case
takes K, and the WRED case Kmin/Kmax/Pmax, from its profile of the
bottleneck port (s1 towards h5) where it has one of that mode, and the
DCQCN senders and receiver the `congestion_control:` section's `dcqcn`
constants (features/congestion_control.py; those per line rate where an
entry is at --sender-rate), as fabric train and the rdma experiment do.
--dcqcn NAME=VALUE sets one constant over both.
"""
from __future__ import annotations

import csv
import json
import statistics
import subprocess
import sys
from dataclasses import dataclass, replace
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from experiments.common import StartGate, announce_budget, case_fidelity, dcqcn_constants, experiment_parser, \
    lost_before_pipeline, print_fidelity, roce_agent, roce_dcqcn_args, save_figure, wait_sampling_queue, write_csv

from emulator.bmv2 import DEFAULT_EXPERIMENT_LOG_LEVEL, LOG_LEVELS
from emulator.build import compile_p4
from emulator.calibration import Flow
from control.controller import FabricController
from features.ecn import MARKED_COUNTER, EcnProfile
from emulator.network import Network, queue_rate_pps
from control.topology import TopologyError
from features import load_topology
from hostagent.rdma.agent import parse_cc_param


@dataclass(frozen=True)
class Case:
    name: str
    profile: EcnProfile | None   # None: no marking (the queue depth is recorded all the same)
    dcqcn: bool

    @property
    def marking(self) -> str:
        return "no marking" if self.profile is None else str(self.profile)


CASES = [
    Case("no-ecn", None, dcqcn=False),
    Case("step-ecn-dcqcn", EcnProfile.step(10), dcqcn=True),
    Case("wred-ecn-dcqcn", EcnProfile.wred(5, 30, 0.2), dcqcn=True),
]

BOTTLENECK, RECEIVER = "s1", "h5"


def tuned_cases(topo) -> list[Case]:
    """CASES, the step and WRED cases with the profile the topology's `ecn:`
    section (an overlay's) gives the bottleneck port in that mode, if any."""
    port = topo.hosts[RECEIVER].switch_port
    given = topo.features.get("ecn") or {}
    profile = given.get((BOTTLENECK, port, None)) or given.get((BOTTLENECK, port, 0))
    return [replace(c, profile=profile) if profile is not None and c.profile is not None
            and c.profile.mode == profile.mode else c for c in CASES]


def run_case(case: Case, topo, net: Network, ctl: FabricController, args, out: Path) -> dict:
    sw = topo.switches["s1"]
    receiver = topo.hosts["h5"]
    port = receiver.switch_port
    senders = [h for h in topo.hosts.values() if h.role == "sender"]
    ctl.feature("ecn").set_profile("s1", port, case.profile)
    marked_before = ctl.counter("s1", MARKED_COUNTER, port).get(port, (0, 0))[0]
    case_dir = out / case.name
    case_dir.mkdir(parents=True, exist_ok=True)
    gate = StartGate(case_dir)          # the agents start together once every one is ready

    def agent(host, role: str, extra: list[str]) -> subprocess.Popen:
        return roce_agent(host, role, start_at=gate, out_dir=case_dir,
                          extra=["--duration", str(args.duration), *extra])

    np_args, rp_args = roce_dcqcn_args(args.dcqcn_constants)
    procs = [agent(receiver, "receive", ["--duration", str(args.duration + 1.0), *np_args])]
    for i, h in enumerate(senders, start=1):
        extra = ["--dst-ip", receiver.ip, "--qp", str(i), "--line-rate-pps", str(args.sender_rate), *rp_args]
        extra += [] if case.dcqcn else ["--fixed-rate", "--not-ect"]
        procs.append(agent(h, "send", extra))
    start_at = gate.open(procs)
    fidelity = case_fidelity(net, ctl)
    fidelity.traffic_starts(start_at)
    samples = wait_sampling_queue(sw.thrift_port, port, start_at, procs, args.duration + 30)
    net.check_alive()
    if any(p.returncode for p in procs):
        raise RuntimeError(f"{case.name}: an agent failed (exit codes {[p.returncode for p in procs]})")
    marked = ctl.counter("s1", MARKED_COUNTER, port).get(port, (0, 0))[0] - marked_before

    rx = json.loads((case_dir / "receive-h5.json").read_text())
    tx = {h.name: json.loads((case_dir / f"send-{h.name}.json").read_text()) for h in senders}
    verdict = fidelity.verdict(t["send_late_s"] for t in tx.values())
    lost_before_pipeline(case.name, verdict)
    with open(case_dir / "queue.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["t_s", "qdepth_pkts"])
        w.writerows((round(t, 4), q) for t, q in samples)

    flows = rx["flows"].values()
    received = sum(f["packets"] for f in flows)
    warm = args.duration * 0.2  # steady state: after the first 20% (start-up at line rate)
    steady_q = [q for t, q in samples if warm <= t <= args.duration]
    bins, lost_bins = _read_bins(case_dir / "receive-h5.csv")
    steady_pkts = sum(n for (t, _flow), n in bins.items() if warm <= t < args.duration)
    capacity = queue_rate_pps(topo.switches["s1"].ports[port].link.bandwidth_mbps)
    result = {
        "case": case.name,
        "profile": case.marking,
        "sent": sum(t["sent"] for t in tx.values()),
        "received": received,
        "drops": sum(f["lost"] for f in flows),
        "drops_steady": sum(n for (t, _flow), n in lost_bins.items() if t >= warm),
        "ce_fraction": round(sum(f["ce"] for f in flows) / received, 4) if received else 0.0,
        "switch_marks": marked,
        "cnps_sent": sum(f["cnps_sent"] for f in flows),
        "cnps_received": sum(t["cnps_received"] for t in tx.values()),
        "utilisation": round(steady_pkts / ((args.duration - warm) * capacity), 3),
        "queue_mean": round(statistics.fmean(steady_q), 1) if steady_q else 0.0,
        "queue_p95": round(sorted(steady_q)[int(0.95 * (len(steady_q) - 1))], 1) if steady_q else 0.0,
        "queue_max": max(steady_q) if steady_q else 0,
        "ignored_by_agents": sum(sum(t["ignored"].values()) for t in tx.values()) + sum(rx["ignored"].values()),
        "fidelity": str(verdict),
    }
    _plot_case(case, result, samples, bins, tx, case_dir, capacity, rx["bin_s"])
    return result


def _read_bins(path: Path) -> tuple[dict, dict]:
    """(t, flow) -> packets received, and (t, flow) -> packets found lost."""
    received, lost = {}, {}
    with open(path) as f:
        for row in csv.DictReader(f):
            key = (float(row["t_s"]), row["flow"])
            received[key], lost[key] = int(row["packets"]), int(row["lost"])
    return received, lost


def _plot_case(case: Case, result: dict, samples, bins, tx, case_dir: Path, capacity: int, bin_s: float) -> None:
    fig, axes = plt.subplots(3, 1, figsize=(9, 9), sharex=True)
    flows = sorted({flow for _t, flow in bins})
    for flow in flows:
        pts = sorted((t, n / bin_s) for (t, fl), n in bins.items() if fl == flow)
        axes[0].plot([p[0] for p in pts], [p[1] for p in pts], label=f"flow {flow}", lw=1)
    axes[0].axhline(capacity / len(flows or [1]), color="grey", ls=":", lw=1, label="fair share")
    axes[0].set_ylabel("throughput (pkts/s)")
    axes[0].legend(fontsize=7, ncol=3)
    axes[1].plot([s[0] for s in samples], [s[1] for s in samples], lw=0.8)
    profile = case.profile
    if profile is not None and profile.mode == "step":
        axes[1].axhline(profile.k, color="red", ls="--", lw=1, label=f"K={profile.k}")
    elif profile is not None and profile.mode == "wred":
        axes[1].axhline(profile.kmin, color="orange", ls="--", lw=1, label=f"Kmin={profile.kmin}")
        axes[1].axhline(profile.kmax, color="red", ls="--", lw=1, label=f"Kmax={profile.kmax}")
    axes[1].set_ylabel("bottleneck queue (pkts)")
    if profile is not None:
        axes[1].legend(fontsize=7)
    for name in tx:
        rows = list(csv.DictReader(open(case_dir / f"send-{name}.csv")))
        axes[2].plot([float(r["t_s"]) for r in rows], [float(r["rate_pps"]) for r in rows], lw=1, label=name)
    axes[2].set_ylabel("sender rate Rc (pkts/s)")
    axes[2].set_xlabel("time (s)")
    axes[2].legend(fontsize=7, ncol=4)
    fig.suptitle(f"{case.name}: drops {result['drops']}, CE {result['ce_fraction']:.1%}, "
                 f"utilisation {result['utilisation']:.0%}, queue mean {result['queue_mean']}")
    save_figure(fig, case_dir / "timeseries.png")


def _plot_summary(results: list[dict], out: Path) -> Path:
    fig, axes = plt.subplots(1, 4, figsize=(13, 3.2))
    names = [r["case"] for r in results]
    for ax, key, label in zip(axes, ["drops", "queue_mean", "utilisation", "ce_fraction"],
                              ["drops (packets)", "mean queue (pkts)", "utilisation", "CE fraction"]):
        ax.bar(names, [r[key] for r in results], color=["#999", "#3a7", "#37a"])
        ax.set_title(label, fontsize=9)
        ax.tick_params(axis="x", labelsize=7, rotation=15)
    return save_figure(fig, out / "summary.png")


def main(argv: list[str] | None = None) -> int:
    ap = experiment_parser("ecn_incast", __doc__)
    ap.add_argument("--duration", type=float, default=10.0, help="seconds of traffic per case")
    ap.add_argument("--sender-rate", type=float, default=500.0, help="sender line rate, pkts/s (4 senders)")
    ap.add_argument("--dcqcn", action="append", default=[], metavar="NAME=VALUE", type=parse_cc_param,
                    help="set a DCQCN constant (hostagent.ecn.dcqcn.DcqcnParams' field), over the overlay's, e.g. "
                         "--dcqcn g=0.0625")
    ap.add_argument("--out", default=str(REPO / "experiments" / "results" / "ecn_incast"),
                    help="results directory (default %(default)s)")
    ap.add_argument("--log-level", default=DEFAULT_EXPERIMENT_LOG_LEVEL, choices=LOG_LEVELS,
                    help="BMv2 log level (default off: logging slows BMv2 several times)")
    ap.add_argument("--cases", nargs="*", default=[c.name for c in CASES], choices=[c.name for c in CASES])
    ap.add_argument("--overlay", action="append", default=[], metavar="FILE",
                    help="incast.yaml with these sections (`fabric tune --out`): the step and WRED cases take the "
                         "bottleneck's profile of their mode from them, DCQCN its congestion_control constants")
    args = ap.parse_args(argv)
    try:
        topo = load_topology(REPO / "topologies" / "incast.yaml", overlays=args.overlay)
    except TopologyError as exc:
        ap.error(str(exc))
    try:
        args.dcqcn_constants = dcqcn_constants(topo, args.sender_rate, args.dcqcn)
    except ValueError as exc:
        ap.error(str(exc))
    cases = tuned_cases(topo)
    for case, hand_set in zip(cases, CASES):
        if case.profile != hand_set.profile:
            print(f"{case.name}: {case.marking} from the overlay (hand-set: {hand_set.marking})", flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    compile_p4()
    results = []
    with Network(topo, REPO / "build" / "experiments" / "ecn_incast", log_level=args.log_level) as net, \
            FabricController(topo) as ctl:
        ctl.program()
        net.apply_queue_rates()
        senders = [h.name for h in topo.hosts.values() if h.role == "sender"]
        budget = announce_budget(topo, [Flow(h, "h5", args.sender_rate) for h in senders])
        for case in (c for c in cases if c.name in args.cases):
            print(f"==> {case.name}: {args.duration:g}s of 4:1 incast "
                  f"({case.marking}{', DCQCN' if case.dcqcn else ', fixed rate'})", flush=True)
            results.append({**run_case(case, topo, net, ctl, args, out), "budget": budget})
    write_csv(out / "summary.csv", results)
    summary_png = _plot_summary(results, out)
    cols = ["case", "sent", "received", "drops", "drops_steady", "ce_fraction", "cnps_sent", "utilisation",
            "queue_mean", "queue_p95", "queue_max"]
    print("\n" + " ".join(f"{c:>14s}" for c in cols))
    for r in results:
        print(" ".join(f"{r[c]!s:>14s}" for c in cols))
    print_fidelity(results)
    print(f"\nresults: {out}/summary.csv, {summary_png}, and per case <case>/timeseries.png + CSVs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
