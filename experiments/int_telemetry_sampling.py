#!/usr/bin/env python3
"""Adaptive INT sampling on leaf-spine: how soon a congestion event and a
black hole show in the reports, and how many packets carry INT, with INT on
every packet, sampled 1 in N, and sampled with the adaptive loop.

    fabric experiment int_telemetry_sampling [--sample 16] [--out experiments/results/int_telemetry_sampling]

Brings up leaf-spine with a collector host h5 on leaf1 and h4's link cut to
4.8 Mbit/s (400 packets/s of BMv2 queue rate: INT in every packet, and the
collector's Python reporting each, fit this 2-core machine at that rate). h1
and h2 send to h4 at --background-rate each (fixed rate, no congestion
control) for the whole run; h3 adds --burst-rate in three bursts (at 2, 4.5
and 7 s, 1 s each), so the queue at leaf2 -> h4 passes the congestion
threshold (12 packets) three times; 1.5 s before the end (9.5 s) leaf1's
route to h4 is deleted (a black hole: h1's and h2's packets dropped at
leaf1, NO_ROUTE). Sinks report every INT packet (refresh 0), congestion
reports above 12 packets, drop reports of every drop.

Cases, the same traffic:
  every-packet  sample 1: INT in every packet (the reference)
  sampled       sample N (--sample): one packet in N per host port, counted
  adaptive      sample N, and telemetry/adaptive_sampling.py raising the
                flows crossing a queue of >= 12 packets (or with a drop
                report) to every packet, lowered 1 s after their last sign

Per case and event: the delay from the event to the first report that shows
it (a report from leaf2 of its h4 port's queue at >= 12 packets; a drop
report from leaf1), measured at the collector (arrival: what an operator's
tools see) and on leaf2's clock (when the switch saw it: the report's egress
timestamp mapped onto the collector's clock by the least-late report, so a
collector falling behind does not count). Per case: the share of the
packets h4 received that carried INT (the sink reports each one), overall
and during the bursts.
Each case has a fidelity verdict. Writes summary.csv, events.csv and
detection.png under --out and prints where.
"""
from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent

from p4.v1 import p4runtime_pb2

from control.controller import FabricController
from control.forwarding import LPM_TABLE
from control.switch import update
from emulator.bmv2 import DEFAULT_EXPERIMENT_LOG_LEVEL, LOG_LEVELS
from emulator.build import compile_p4
from emulator.network import Network, queue_rate_pps
from emulator.calibration import Flow
from experiments.common import StartGate, announce_budget, case_fidelity, experiment_parser, lost_before_pipeline, \
    print_fidelity, roce_agent, save_figure, write_csv
from features import topology_from_dict
from features.int_telemetry import FEATURE, SECTION
from telemetry.adaptive_sampling import AdaptiveSampling
from telemetry.collector import Collector
from control.p4constants import drop_reasons

CASES = ("every-packet", "sampled", "adaptive")
H4_MBPS = 4.8                   # h4's link: 400 packets/s
QUEUE_THRESHOLD = 12            # packets: congestion reports, and the adaptive loop's sign
QUIET_MS = 1000
BURSTS = ((2.0, 1.0), (4.5, 1.0), (7.0, 1.0))   # (start s, length s) of h3's bursts
HOLE_BEFORE_END = 1.5            # the black hole this long before the traffic ends
DURATION = 11.0


def black_hole_at(duration: float) -> float:
    return duration - HOLE_BEFORE_END


def bursts_within(duration: float) -> list[tuple[float, float]]:
    """The bursts that end (with the queue drained: 0.5 s) before the black hole."""
    return [(at, length) for at, length in BURSTS if at + length + 0.5 <= black_hole_at(duration)]
BACKGROUND, BURSTER, RECEIVER = ("h1", "h2"), "h3", "h4"
SINK_SWITCH, HOLE_SWITCH = "leaf2", "leaf1"
NO_ROUTE = drop_reasons()["NO_ROUTE"]


def topology(case: str, sample: int):
    raw = yaml.safe_load((REPO / "topologies" / "leaf-spine.yaml").read_text())
    raw["name"] = f"leaf-spine-int-sampling-{case}"
    raw["hosts"].append({"name": "h5", "role": "monitor"})
    raw["links"] = [{"a": "h4", "b": "leaf2", "bandwidth_mbps": H4_MBPS} if link == ["h4", "leaf2"] else link
                    for link in raw["links"]] + [["h5", "leaf1"]]
    raw[SECTION] = {"collector": "h5", "refresh_ms": 0, "queue_report_threshold": QUEUE_THRESHOLD,
                    "queue_report_interval_ms": 1, "drop_report_interval_ms": 1,
                    "watchlist": [{"protocol": "udp", "dst_ports": 4791,
                                   "instructions": ["node_id", "l1_ports", "hop_latency", "queue",
                                                    "ingress_ts", "egress_ts"],
                                   "sample": 1 if case == "every-packet" else sample}]}
    if case == "adaptive":
        raw[SECTION]["adaptive"] = {"queue": QUEUE_THRESHOLD, "drops": 1, "quiet_ms": QUIET_MS, "max_flows": 4}
    return topology_from_dict(raw, f"experiments/int_telemetry_sampling.py ({case})")


class Recorder:
    """Collector listener: (arrival, switch, kind, sink port queue, egress ts, flow) per report;
    `sink`: a sink's report of an INT packet it delivered (a flow or congestion report, not a
    transit hop's congestion report or a drop report)."""

    def __init__(self, topo):
        self.names = {sw.device_id: sw.name for sw in topo.switches.values()}
        self.h4_port = topo.hosts[RECEIVER].primary.switch_port
        self.rows: list[dict] = []

    def __call__(self, now: float, data: bytes, pkt) -> None:
        switch = self.names.get(pkt.node_id, "?")
        for r in pkt.reports:
            md = r.metadata
            row = {"t": now, "switch": switch, "kind": "drop" if r.d else "queue" if r.q else "flow",
                   "sink": bool(r.f and not r.d and not r.i),
                   "flow": r.inner.flow if r.inner is not None else "", "queue": None, "egress_ts": None,
                   "reason": md.drop_reason if md is not None and r.d else None}
            if not r.d and md is not None and md.egress_port == self.h4_port and switch == SINK_SWITCH:
                row["queue"], row["egress_ts"] = md.queue_occupancy, md.egress_ts
            self.rows.append(row)


def detection(rows: list[dict], events: list[tuple[str, float]], black_hole_at: float | None) -> list[dict]:
    """Per event, the first report that shows it, by arrival and on leaf2's clock (ms after the event)."""
    sink = [r for r in rows if r["egress_ts"] is not None]
    offset = min((r["t"] - r["egress_ts"] / 1e6 for r in sink), default=None)
    out = []
    for name, at in events:
        deep = [r for r in sink if r["t"] >= at and r["queue"] is not None and r["queue"] >= QUEUE_THRESHOLD]
        first = min(deep, key=lambda r: r["t"], default=None)
        seen = min((r["egress_ts"] / 1e6 + offset for r in deep if r["egress_ts"] / 1e6 + offset >= at - 0.05),
                   default=None) if offset is not None else None
        out.append({"event": name, "detect_ms": None if first is None else round((first["t"] - at) * 1000, 1),
                    "detect_switch_ms": None if seen is None else round(max(0.0, seen - at) * 1000, 1)})
    if black_hole_at is not None:
        drops = [r for r in rows if r["kind"] == "drop" and r["switch"] == HOLE_SWITCH and r["reason"] == NO_ROUTE
                 and r["t"] >= black_hole_at]
        first = min(drops, key=lambda r: r["t"], default=None)
        out.append({"event": "black hole", "detect_ms": None if first is None else
                    round((first["t"] - black_hole_at) * 1000, 1), "detect_switch_ms": None})
    return out


def black_hole(ctl, topo) -> float:
    """Delete HOLE_SWITCH's route to the receiver's subnet; the wall time it took effect."""
    prefix = topo.hosts[RECEIVER].primary.subnet
    route = next(r for r in ctl.routes[HOLE_SWITCH] if r.prefix == prefix)
    entry = ctl.p4info.table_entry(LPM_TABLE, {"hdr.ipv4.dst_addr": route.prefix}, action="set_next_id",
                                   params={"next_id": 1})
    identity = p4runtime_pb2.TableEntry(table_id=entry.table_id, match=entry.match)
    ctl.connections[HOLE_SWITCH].write([update(p4runtime_pb2.Update.DELETE, table_entry=identity)])
    return time.time()


def offered(topo, case: str, background_rate: float, burst_rate: float, sample: int) -> list[Flow]:
    """What a case asks of the machine at its peak, in a burst (the budget's
    flows): the background and the burst into h4, and the reports of what
    h4's port delivers, from leaf2 to the collector (counted as h4 -> h5:
    the same switches): every packet's, or one in `sample` (sampled; the
    adaptive case raises the congested flows to every packet)."""
    flows = [Flow(h, RECEIVER, background_rate) for h in BACKGROUND] + [Flow(BURSTER, RECEIVER, burst_rate)]
    sink_pps = queue_rate_pps(topo.access_link(topo.hosts[RECEIVER]).bandwidth_mbps)
    delivered = min(sum(f.pps for f in flows), sink_pps)
    return flows + [Flow(RECEIVER, "h5", delivered / (sample if case == "sampled" else 1))]


def run_case(case: str, args, out: Path) -> tuple[dict, list[dict]]:
    topo = topology(case, args.sample)
    case_dir = out / case
    case_dir.mkdir(parents=True, exist_ok=True)
    run = REPO / "build" / "experiments" / "int_telemetry_sampling" / case
    with Network(topo, run, log_level=args.log_level) as net, FabricController(topo) as ctl:
        ctl.program()
        net.apply_queue_rates()
        # INT on every packet: priced as the training composition, the calibrated one with INT in it (beside
        # lossless and failover)
        budget = announce_budget(topo, offered(topo, case, args.background_rate, args.burst_rate, args.sample),
                                 composition="training")
        recorder = Recorder(topo)
        collector = Collector(bind="0.0.0.0", netns="h5", metrics_port=None, out_dir=case_dir,
                              node_names=recorder.names, listeners=[recorder])
        loop = None
        if case == "adaptive":
            ints = ctl.feature(FEATURE.name)
            loop = AdaptiveSampling(topo, topo.features[SECTION].adaptive,
                                    lambda r: ints.set_raised(r.ports, r.flows), clock=time.time)
            collector.listeners.append(loop.observe)
        receiver = topo.hosts[RECEIVER]
        gate = StartGate(case_dir)
        duration = args.duration
        with collector:
            procs = [roce_agent(receiver, "receive", start_at=gate, out_dir=case_dir,
                                extra=["--duration", str(duration + 1.0)])]
            procs += [roce_agent(topo.hosts[h], "send", start_at=gate, out_dir=case_dir,
                                 extra=["--dst-ip", receiver.ip, "--qp", str(i), "--fixed-rate",
                                        "--line-rate-pps", str(args.background_rate), "--duration", str(duration)])
                      for i, h in enumerate(BACKGROUND, start=1)]
            bursts = bursts_within(duration)
            for i, (at, length) in enumerate(bursts):        # h3 twice, on the same start, --start-after apart
                procs.append(roce_agent(topo.hosts[BURSTER], "send", start_at=gate, out_dir=case_dir / f"burst{i}",
                                        extra=["--dst-ip", receiver.ip, "--qp", "3", "--fixed-rate",
                                               "--line-rate-pps", str(args.burst_rate), "--duration", str(length),
                                               "--start-after", str(at)]))
            fidelity = case_fidelity(net, ctl)
            start_at = gate.open(procs)
            burst_at = [start_at + at for at, _ in bursts]
            fidelity.traffic_starts(start_at)
            if loop is not None:
                loop.start()
            hole_at = None
            time.sleep(max(0.0, start_at + black_hole_at(duration) - time.time()))
            hole_at = black_hole(ctl, topo)
            for p in procs:
                p.wait(timeout=duration + 60)
            time.sleep(0.5)
            if loop is not None:
                loop.stop()
            late = [json.loads((case_dir / f"send-{h}.json").read_text())["send_late_s"] for h in BACKGROUND]
            verdict = fidelity.verdict(late)
            lost_before_pipeline(case, verdict)
            rows = list(recorder.rows)
        net.check_alive()
        if any(p.returncode for p in procs):
            raise RuntimeError(f"{case}: an agent failed (exit codes {[p.returncode for p in procs]})")

    received = json.loads((case_dir / f"receive-{RECEIVER}.json").read_text())
    delivered = sum(f["packets"] for f in received["flows"].values())
    int_packets = sum(1 for r in rows if r["sink"])         # refresh 0: a sink reports each INT packet
    in_bursts = [r for r in rows if r["sink"] and any(b <= r["t"] <= b + length
                                                      for b, (_, length) in zip(burst_at, bursts))]
    events = detection(rows, [(f"burst {i + 1}", at) for i, at in enumerate(burst_at)], hole_at)
    for e in events:
        e["case"] = case
    congestion = [e["detect_ms"] for e in events if e["event"].startswith("burst") and e["detect_ms"] is not None]
    result = {
        "case": case,
        "sample": 1 if case == "every-packet" else args.sample,
        "packets_delivered": delivered,
        "int_packets": int_packets,
        "int_share": round(int_packets / delivered, 3) if delivered else None,
        "int_packets_in_bursts": len(in_bursts),
        "congestion_detect_ms_mean": round(statistics.fmean(congestion), 1) if congestion else None,
        "black_hole_detect_ms": next((e["detect_ms"] for e in events if e["event"] == "black hole"), None),
        "raised_changes": len(loop.changes) if loop is not None else 0,
        "first_raise_ms": (round((loop.changes[0].time - burst_at[0]) * 1000, 1)
                           if loop is not None and loop.changes and burst_at else None),
        "loop_errors": loop.errors if loop is not None else 0,
        "fidelity": str(verdict),
        "budget": budget,
    }
    return result, events


def _plot(results: list[dict], events: list[dict], out: Path) -> Path:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.6))
    names = [r["case"] for r in results]
    kinds = sorted({e["event"] for e in events})
    width = 0.8 / max(1, len(kinds))
    for k, kind in enumerate(kinds):
        values = [next((e["detect_ms"] or 0 for e in events if e["case"] == c and e["event"] == kind), 0)
                  for c in names]
        axes[0].bar([i + k * width for i in range(len(names))], values, width, label=kind)
    axes[0].set_xticks([i + width * (len(kinds) - 1) / 2 for i in range(len(names))], names)
    axes[0].set_ylabel("first report after the event (ms)")
    top = max((e["detect_ms"] or 0 for e in events), default=1)
    axes[0].set_ylim(0, top * 1.3)
    axes[0].legend(fontsize=7, ncol=len(kinds), loc="upper left")
    axes[1].bar(names, [r["int_share"] or 0 for r in results], color="#37a")
    axes[1].set_ylabel("share of packets carrying INT")
    return save_figure(fig, out / "detection.png")


def main(argv: list[str] | None = None) -> int:
    ap = experiment_parser("int_telemetry_sampling", __doc__)
    ap.add_argument("--sample", type=int, default=16, help="the sparse rate: one packet in N (default 16)")
    ap.add_argument("--duration", type=float, default=DURATION,
                    help=f"seconds of traffic per case (default {DURATION:g}: three bursts, then the black "
                         f"{HOLE_BEFORE_END:g} s before the end; shorter runs keep the bursts that fit)")
    ap.add_argument("--background-rate", type=float, default=100.0, help="h1's and h2's packets/s (default 100)")
    ap.add_argument("--burst-rate", type=float, default=350.0, help="h3's packets/s in a burst (default 350)")
    ap.add_argument("--out", default=str(REPO / "experiments" / "results" / "int_telemetry_sampling"),
                    help="results directory (default %(default)s)")
    ap.add_argument("--log-level", default=DEFAULT_EXPERIMENT_LOG_LEVEL, choices=LOG_LEVELS,
                    help="BMv2 log level (default off)")
    ap.add_argument("--cases", nargs="*", default=list(CASES), choices=list(CASES))
    args = ap.parse_args(argv)
    if args.sample < 2:
        ap.error(f"--sample: expected 2 or more (1 is the every-packet case), got {args.sample}")
    if not bursts_within(args.duration):
        shortest = BURSTS[0][0] + BURSTS[0][1] + 0.5 + HOLE_BEFORE_END
        ap.error(f"--duration: at least {shortest:g} s (the first burst, then the black hole), got {args.duration:g}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    compile_p4()
    results, events = [], []
    for case in args.cases:
        print(f"==> {case}: {args.duration:g}s on leaf-spine, bursts into h4 at "
              f"{[b for b, _ in bursts_within(args.duration)]} s, black hole at {black_hole_at(args.duration):g} s",
              flush=True)
        result, case_events = run_case(case, args, out)
        results.append(result)
        events += case_events
    write_csv(out / "summary.csv", results)
    write_csv(out / "events.csv", events)
    png = _plot(results, events, out)
    cols = [c for c in results[0] if c != "fidelity"]
    print("\n" + "\n".join(f"{c:>26s}: " + "  ".join(f"{r[c]!s:>14s}" for r in results) for c in cols))
    print("\n" + "\n".join(f"{e['case']:>14s} {e['event']:>10s}: {e['detect_ms']} ms at the collector, "
                           f"{e['detect_switch_ms']} ms on the switch" for e in events))
    print(f"\nresults: {out}/summary.csv, {out}/events.csv, {png}")
    print_fidelity(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
