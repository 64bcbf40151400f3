#!/usr/bin/env python3
"""INT on leaf-spine under incast: what the telemetry shows, what it costs,
and what report suppression saves and loses.

    fabric experiment int_telemetry [--duration 8] [--out experiments/results/int_telemetry]

Brings up leaf-spine (topologies/leaf-spine.yaml) with a monitoring host h5
on leaf1 running the collector, h4's link cut to 9.6 Mbit/s (800 packets/s
of BMv2 queue rate; x --scale, as the senders' rate), step ECN (K=10) on leaf2's port to h4, and INT on every
RoCE packet (UDP 4791: node id, ports, hop latency, queue, timestamps).
h1 and h2 (leaf1, through a spine) and h3 (leaf2) send to h4 with DCQCN, so
the queue at leaf2 -> h4 (the INT sink's port) rises and falls.

--scale S (default: sized to this machine) runs h4's link and the senders
at S times their rates: the largest, in steps of 0.05 and at most 1, at
which the every-packet case (the senders, and a report per packet the
sink's port delivers) fits the calibration's budget, both cases at that
scale; 1 without a calibration, said. The queue's thresholds (ECN K,
the congestion reports') and buckets stay in packets; the 4.1 ms latency
bucket stays, so a queue of one depth is a longer latency at a lower scale.

Two cases, the same traffic:
  every-packet   the sink reports every packet (refresh 0: no suppression)
  suppressed     the sink reports a flow when a hop's ports, latency bucket
                 (4.1 ms) or queue bucket (8 packets) changed, or every 100 ms
Both send congestion reports (queue >= 12 packets, at most one per port per
ms) and drop reports.

Recorded per case: every report the collector receives (time, kind, bytes,
per-hop queue and latency), the switches' report counters (sent and held
back), the sink port's queue depth sampled over Thrift every 5 ms (the
pipeline records each packet's enq_qdepth per queue: queue_depth.p4), and the
probe plan's coverage of every directed switch link, proven from the reports
of one round of probes. "What suppression loses": the queue the reports
show, held until the next report, against the Thrift samples (mean and p95
absolute error, packets), each report placed at the time the switch saw
the queue (its egress timestamp), not when it reached the collector; how
much later than the least late report they arrived is the report delay.
Every case has a fidelity verdict; the every-packet case's includes the
departure-spacing invariant on the sink's port, from its reports' egress
timestamps (docs/fidelity.md), and its departures_off_grid column.
Writes CSV and PNG under --out and prints where.
"""
from __future__ import annotations

import csv
import json
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from emulator.calibration import Flow
from experiments.common import StartGate, announce_budget, budget_scale, case_fidelity, experiment_parser, \
    lost_before_pipeline, print_fidelity, sample_queue, save_figure, write_csv

from emulator.bmv2 import DEFAULT_EXPERIMENT_LOG_LEVEL, LOG_LEVELS
from emulator.bmv2_thrift import Bmv2Thrift
from emulator.build import compile_p4
from control.controller import FabricController
from features.int_telemetry import REPORT_COUNTER, REPORT_KINDS
from emulator.fidelity import departure_spacing
from emulator.network import Network, queue_rate_pps
from features import topology_from_dict
from hostagent.int_telemetry.probes import planned_probes, report_links, send_probes
from telemetry.collector import Collector
from control.probe_planner import directed_links

CASES = {
    "every-packet": {"refresh_ms": 0},
    "suppressed": {"refresh_ms": 100, "latency_bucket_us": 4096, "queue_bucket": 8},
}
COMMON = {"queue_report_threshold": 12, "queue_report_interval_ms": 1, "drop_report_interval_ms": 1}
SENDERS = ("h1", "h2", "h3")
RECEIVER = "h4"
RECEIVER_LINK_MBPS = 9.6       # h4's link at scale 1: BMv2 queues of 800 packets/s, below the 3 senders' 1500
SINK_SWITCH = "leaf2"


def topology(case: str, scale: float = 1.0):
    """The case's leaf-spine, h4's link at `scale` x RECEIVER_LINK_MBPS."""
    raw = yaml.safe_load((REPO / "topologies" / "leaf-spine.yaml").read_text())
    raw["name"] = f"leaf-spine-int-{case}"
    raw["hosts"].append({"name": "h5", "role": "monitor"})
    mbps = round(RECEIVER_LINK_MBPS * scale, 6)
    raw["links"] = [{"a": "h4", "b": "leaf2", "bandwidth_mbps": mbps} if link == ["h4", "leaf2"] else link
                    for link in raw["links"]] + [["h5", "leaf1"]]
    raw["ecn"] = [{"switch": SINK_SWITCH, "towards": RECEIVER, "mode": "step", "k": 10}]
    raw["int"] = {"collector": "h5", **COMMON, **CASES[case],
                  "watchlist": [{"protocol": "udp", "dst_ports": 4791,
                                 "instructions": ["node_id", "l1_ports", "hop_latency", "queue",
                                                  "ingress_ts", "egress_ts"]}]}
    return topology_from_dict(raw, f"experiments/int_telemetry.py ({case})")


class Recorder:
    """Collector listener: one row per individual report."""

    def __init__(self, topo, t0: float):
        self.topo, self.t0 = topo, t0
        self.names = {sw.device_id: sw.name for sw in topo.switches.values()}
        self.rows: list[dict] = []
        self.datagrams: list[tuple[float, int]] = []
        self.links: set = set()

    def __call__(self, now: float, data: bytes, pkt) -> None:
        t = now - self.t0
        self.datagrams.append((t, len(data)))
        self.links |= report_links(pkt, self.topo)
        for r in pkt.reports:
            kind = "drop" if r.d else "queue" if r.q else "flow"
            hops = []
            if r.inner is not None and r.inner.int_stack is not None:
                hops = [(self.names.get(h.node_id, "?"), h.queue_occupancy, h.hop_latency)
                        for h in reversed(r.inner.int_stack.hops)]
            md = r.metadata
            if md is not None and kind != "drop":
                hops.append((self.names.get(pkt.node_id, "?"), md.queue_occupancy, md.hop_latency))
            self.rows.append({"t_s": round(t, 4), "switch": self.names.get(pkt.node_id, "?"), "kind": kind,
                              "bytes": len(data), "flow": r.inner.flow if r.inner is not None else "",
                              "hops": ";".join(f"{n}:{q}:{lat}" for n, q, lat in hops),
                              "sink_queue": hops[-1][1] if hops and kind != "drop" and not r.i else "",
                              "sink_egress_us": md.egress_ts if md is not None and kind != "drop" else ""})



def on_switch_clock(rows: list[dict]) -> tuple[list[tuple[float, int]], float | None, float | None]:
    """The sink's reports as (time the switch saw the queue, queue), sorted,
    and how much later than the least late one they reached the collector
    (ms, p50 and p95). A report carries its egress timestamp (BMv2's clock,
    microseconds from the switch's start); the least (arrival - timestamp)
    over the run maps that clock onto the collector's. Arrival times alone
    would measure the collector's backlog: reporting every packet, it fell
    ~0.4 s behind on this 2-core machine."""
    stamped = [(float(r["t_s"]), int(r["sink_egress_us"]) / 1e6, int(r["sink_queue"])) for r in rows
               if r["kind"] != "drop" and r["switch"] == SINK_SWITCH and r["sink_queue"] != ""
               and r["sink_egress_us"] != ""]
    if not stamped:
        return [], None, None
    offset = min(arrived - ts for arrived, ts, _ in stamped)
    delays = sorted((arrived - ts - offset) * 1000 for arrived, ts, _ in stamped)
    return (sorted((ts + offset, q) for _, ts, q in stamped), round(statistics.median(delays), 1),
            round(delays[int(0.95 * (len(delays) - 1))], 1))


def sink_departures(rows: list[dict]) -> list[tuple[float, int]]:
    """(egress timestamp in seconds, enqueue depth) of each packet the sink's
    flow and congestion reports describe, once each (a packet may have
    both): the departures from its port's queue on the switch's own clock
    (emulator/fidelity.py departure_spacing)."""
    return sorted({(int(r["sink_egress_us"]) / 1e6, int(r["sink_queue"])) for r in rows
                   if r["kind"] != "drop" and r["switch"] == SINK_SWITCH and r["sink_queue"] != ""
                   and r["sink_egress_us"] != ""})


def held_error(reports: list[tuple[float, int]], samples: list[tuple[float, int]], start: float, end: float):
    """The reported queue held until the next report, against each Thrift sample."""
    errors, i, current = [], 0, None
    for t, q in samples:
        while i < len(reports) and reports[i][0] <= t:
            current = reports[i][1]
            i += 1
        if current is not None and start <= t <= end:
            errors.append(abs(current - q))
    if not errors:
        return None, None
    errors.sort()
    return round(statistics.fmean(errors), 2), errors[int(0.95 * (len(errors) - 1))]


def offered(topo, case: str, sender_rate: float) -> list[Flow]:
    """What a case asks of the machine (the budget's flows): the senders at
    their line rate into h4, and in the every-packet case a report per
    packet the sink's port delivers, from leaf2 to the collector (counted
    as h4 -> h5: the same switches)."""
    flows = [Flow(h, RECEIVER, sender_rate) for h in SENDERS]
    if case == "every-packet":
        flows.append(Flow(RECEIVER, "h5", queue_rate_pps(topo.access_link(topo.hosts[RECEIVER]).bandwidth_mbps)))
    return flows


def run_case(case: str, args, out: Path) -> dict:
    topo = topology(case, args.scale)
    case_dir = out / case
    case_dir.mkdir(parents=True, exist_ok=True)
    py = str(REPO / ".venv" / "bin" / "python") if (REPO / ".venv").exists() else sys.executable
    run = REPO / "build" / "experiments" / "int_telemetry" / case
    with Network(topo, run, log_level=args.log_level) as net, FabricController(topo) as ctl:
        ctl.program()
        net.apply_queue_rates()
        # INT on every packet: priced as the training composition, the calibrated one with INT in it (beside
        # lossless and failover)
        budget = announce_budget(topo, offered(topo, case, args.sender_rate * args.scale), composition="training")
        gate = StartGate(case_dir)          # the agents start together once every one is ready
        recorder = Recorder(topo, time.time())      # t0: the traffic's start, once the gate opens
        collector = Collector(bind="0.0.0.0", netns="h5", metrics_port=None, out_dir=case_dir,
                              node_names=recorder.names, listeners=[recorder])
        receiver = topo.hosts[RECEIVER].primary
        sink_port = receiver.switch_port

        def agent(host, role: str, extra: list[str]) -> subprocess.Popen:
            nic = topo.hosts[host].primary
            cmd = ["ip", "netns", "exec", host, py, "-m", "hostagent.ecn.roce", role, "--iface", nic.iface,
                   "--src-ip", nic.ip, "--src-mac", nic.mac, "--gw-mac", nic.gateway_mac,
                   "--duration", str(args.duration), *gate.args(),
                   "--out", str(case_dir / f"{role}-{host}")]
            return subprocess.Popen(cmd + extra, cwd=REPO, stdout=subprocess.DEVNULL)

        samples: list = []
        stop = threading.Event()
        fidelity = case_fidelity(net, ctl)
        with collector, Bmv2Thrift(topo.switches[SINK_SWITCH].thrift_port) as thrift:
            procs = [agent(RECEIVER, "receive", ["--duration", str(args.duration + 1.0)])]
            procs += [agent(h, "send", ["--dst-ip", receiver.ip, "--qp", str(i),
                                        "--line-rate-pps", f"{args.sender_rate * args.scale:g}"])
                      for i, h in enumerate(SENDERS, start=1)]
            start_at = recorder.t0 = gate.open(procs)
            fidelity.traffic_starts(start_at)
            time.sleep(max(0.0, start_at - time.time()))
            sampler = threading.Thread(target=sample_queue, args=(thrift, sink_port, stop, start_at, samples))
            sampler.start()
            for p in procs:
                p.wait(timeout=args.duration + 30)
            stop.set()
            sampler.join()
            time.sleep(0.5)
            late = [json.loads((case_dir / f"send-{h}.json").read_text())["send_late_s"] for h in SENDERS]
            traffic_rows = list(recorder.rows)
            traffic_datagrams = list(recorder.datagrams)
            spacing = []
            if CASES[case]["refresh_ms"] == 0:      # every packet through the sink's port reported: its departures
                rate = queue_rate_pps(topo.switches[SINK_SWITCH].ports[sink_port].link.bandwidth_mbps)
                spacing = [departure_spacing(sink_departures(traffic_rows), rate, f"{SINK_SWITCH}:{sink_port}")]
            verdict = fidelity.verdict(late, spacing)
            lost_before_pipeline(case, verdict)
            recorder.links = set()
            probes = planned_probes(topo)
            send_probes(probes)
            want = directed_links(topo)
            deadline = time.time() + 5
            while not want <= recorder.links and time.time() < deadline:
                time.sleep(0.1)
            covered = len(want & recorder.links) / len(want)
        net.check_alive()
        if any(p.returncode for p in procs):
            raise RuntimeError(f"{case}: an agent failed (exit codes {[p.returncode for p in procs]})")
        counts = {kind: 0 for kind in REPORT_KINDS}
        for name in topo.switches:
            cells = ctl.counter(name, REPORT_COUNTER)
            for kind, index in REPORT_KINDS.items():
                counts[kind] += cells.get(index, (0, 0))[0]

    write_csv(case_dir / "int_reports.csv", traffic_rows)
    with open(case_dir / "queue.csv", "w", newline="") as f:
        qw = csv.writer(f)
        qw.writerow(["t_s", "qdepth_pkts"])
        qw.writerows((round(t, 4), q) for t, q in samples)
    in_window = [(t, n) for t, n in traffic_datagrams if 0 <= t <= args.duration]
    sink_reports, delay_p50, delay_p95 = on_switch_clock(traffic_rows)
    mae, p95 = held_error(sink_reports, samples, 0.5, args.duration)
    result = {
        "case": case,
        "reports": len(in_window),
        "reports_per_s": round(len(in_window) / args.duration, 1),
        "report_kbytes_per_s": round(sum(n for _, n in in_window) / args.duration / 1000, 1),
        "flow_reports": sum(1 for r in traffic_rows if r["kind"] == "flow"),
        "queue_reports": sum(1 for r in traffic_rows if r["kind"] == "queue"),
        "drop_reports": sum(1 for r in traffic_rows if r["kind"] == "drop"),
        "suppressed_at_sinks": counts["suppressed"],
        "queue_reports_held_back": counts["queue_limited"],
        "queue_error_mean_pkts": mae,
        "queue_error_p95_pkts": p95,
        "report_delay_ms_p50": delay_p50,
        "report_delay_ms_p95": delay_p95,
        "probe_paths": len(probes),
        "probe_link_coverage": round(covered, 3),
        "departures_off_grid": (f"{spacing[0].off}/{spacing[0].backlogged}" if spacing else ""),
        "fidelity": str(verdict),
        "scale": args.scale,
        "budget": budget,
    }
    _plot_case(case, result, sink_reports, samples, traffic_rows, case_dir)
    return result


def _plot_case(case: str, result: dict, sink_reports, samples, rows, case_dir: Path) -> None:
    fig, axes = plt.subplots(2, 1, figsize=(9, 6.5), sharex=True)
    axes[0].plot([t for t, _ in samples], [q for _, q in samples], lw=0.8, color="grey",
                 label="Thrift: queue_depth register (every 5 ms)")
    axes[0].step([t for t, _ in sink_reports], [q for _, q in sink_reports], where="post", lw=0.9,
                 color="tab:blue", label="INT: sink leaf2 -> h4 queue, held between reports")
    axes[0].plot([t for t, _ in sink_reports], [q for _, q in sink_reports], ".", ms=2, color="tab:blue")
    axes[0].set_ylabel("queue (packets)")
    axes[0].legend(fontsize=7)
    by_hop: dict[str, list] = {}
    for r in rows:
        if r["kind"] == "drop" or not r["hops"]:
            continue
        for i, hop in enumerate(r["hops"].split(";")):
            name, _q, lat = hop.split(":")
            if lat not in ("None", ""):
                by_hop.setdefault(f"hop {i + 1} ({name})", []).append((r["t_s"], int(lat)))
    for label, pts in sorted(by_hop.items()):
        axes[1].plot([t for t, _ in pts], [v / 1000 for _, v in pts], ".", ms=2, label=label)
    axes[1].set_ylabel("hop latency (ms)")
    axes[1].set_xlabel("time (s)")
    axes[1].legend(fontsize=7, ncol=3, markerscale=4)
    fig.suptitle(f"{case}: {result['reports_per_s']} reports/s, {result['report_kbytes_per_s']} kB/s; "
                 f"queue error mean {result['queue_error_mean_pkts']} pkts")
    save_figure(fig, case_dir / "timeseries.png")


def _plot_summary(results: list[dict], out: Path) -> Path:
    fig, axes = plt.subplots(1, 3, figsize=(11, 3.2))
    names = [r["case"] for r in results]
    for ax, key, label in zip(axes, ["reports_per_s", "report_kbytes_per_s", "queue_error_mean_pkts"],
                              ["reports per second", "report kB per second", "queue error (mean, pkts)"]):
        ax.bar(names, [r[key] or 0 for r in results], color=["#37a", "#3a7"])
        ax.set_title(label, fontsize=9)
    return save_figure(fig, out / "summary.png")


def main(argv: list[str] | None = None) -> int:
    ap = experiment_parser("int_telemetry", __doc__)
    ap.add_argument("--duration", type=float, default=8.0, help="seconds of traffic per case")
    ap.add_argument("--sender-rate", type=float, default=500.0, help="sender line rate, pkts/s (3 senders)")
    ap.add_argument("--out", default=str(REPO / "experiments" / "results" / "int_telemetry"),
                    help="results directory (default %(default)s)")
    ap.add_argument("--log-level", default=DEFAULT_EXPERIMENT_LOG_LEVEL, choices=LOG_LEVELS,
                    help="BMv2 log level (default off)")
    ap.add_argument("--cases", nargs="*", default=list(CASES), choices=list(CASES))
    ap.add_argument("--scale", type=float, default=None, metavar="S",
                    help="h4's link and the senders' rate x S (default: the largest the calibration's budget fits "
                         "for the every-packet case, in steps of 0.05, at most 1)")
    args = ap.parse_args(argv)
    if args.scale is not None and not 0 < args.scale < float("inf"):
        ap.error(f"--scale must be above 0, got {args.scale:g}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    compile_p4()
    # both cases at one scale, the heavier's (every packet reported), so that they compare
    args.scale, how = budget_scale(args.scale, topology("every-packet"),
                                   offered(topology("every-packet"), "every-packet", args.sender_rate), "training")
    print(f"scale: x{args.scale:g} ({how}): h4's link {RECEIVER_LINK_MBPS * args.scale:g} Mbit/s, senders "
          f"{args.sender_rate * args.scale:g} packets/s", flush=True)
    results = []
    for case in args.cases:
        print(f"==> {case}: {args.duration:g}s of 3:1 incast on leaf-spine, INT on RoCE ({CASES[case]})", flush=True)
        results.append(run_case(case, args, out))
    write_csv(out / "summary.csv", results)
    summary_png = _plot_summary(results, out)
    cols = [c for c in results[0] if c != "fidelity"]
    print("\n" + "\n".join(f"{c:>26s}: " + "  ".join(f"{r[c]!s:>14s}" for r in results) for c in cols))
    print(f"\nresults: {out}/summary.csv, {summary_png}, and per case <case>/timeseries.png, "
          f"int_reports.csv, queue.csv, reports.csv")
    print_fidelity(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
