#!/usr/bin/env python3
"""The RDMA transport on BMv2: its congestion controls under incast (DCQCN,
TIMELY, Swift, HPCC), and its two retransmission modes under random loss.

    fabric experiment rdma [--phases incast mix converge loss spray] [--ccs dcqcn timely swift hpcc]
                           [--senders 4 8 16] [--fabrics lossy pfc] [--losses 0 0.01 0.1 1 2 5] [--duration 10]
                           [--mode go-back-n] [--out experiments/results/rdma] [--overlay tuned.yaml]

Phase incast:

topologies/incast-leaf-spine.yaml on BMv2: senders on leaf1 and leaf2
(h1, h2, h5, h6 for 4:1; h1-h8 for 8:1; two queue pairs on each of h1-h8
for 16:1), the receiver r1 on leaf3, whose
10 Mbit/s port (833 packets/s) is the bottleneck. Every sender runs the RC
transport (hostagent.rdma) with one queue pair, posting 64 KB messages
back to back for --duration seconds at a NIC rate of 833 packets/s; the
receiver acknowledges. INT reaches the receiver (a watchlist rule with
to_host), so HPCC's ACKs carry every hop's tx bytes, time and queue, and
for every algorithm the receiver records the queue each packet met at
leaf3; leaf3 also marks ECN at 10 packets for DCQCN (a step profile; the
others see a monitor profile, which only records the depth), and the
experiment reads the depth BMv2 recorded over Thrift every 5 ms.

Recorded per case: goodput per sender (messages completed), bottleneck
utilisation (delivered payload against the port's packet rate), Jain's
fairness over the senders, message completion time p50/p99, queue at the
bottleneck p50/p99 (from the switch and from INT), retransmissions and
timeouts.

Phase mix: two long flows (h1, h5: 64 KB messages back to back) and four
queue pairs of short messages (h2, h6: 4 packets; h3, h7: 16 packets)
arriving as Poisson processes, 20% of the bottleneck together. Recorded:
each short message's completion-time slowdown (its completion time over
the ideal: a one-packet message's on the idle fabric, measured first, plus
its other packets at the bottleneck's rate),
p50/p99 overall and per size; the long flows' Jain fairness; utilisation;
queue p50/p99.

Phase converge: four flows (h1, h5, h2, h6) join one every --duration/3
seconds and leave in reverse order. Per join and leave: the time until
every active flow's rate (new packets over RATE_WINDOW_S) is within
FLOW_TOLERANCE of their mean and their sum within TOTAL_TOLERANCE of where
it settles, and stays so until the next event (a settling time; events.csv;
per algorithm, summary.csv).

Mix and converge run on each fabric of --fabrics, as incast does.

Phase loss: one queue pair h1 -> r1 (DCQCN with nothing marked: the NIC's
833 packets/s), leaf3 dropping a share of what it sends to r1 at random
(emulator.impairments: netem, or an nftables rule), go-back-N against
selective repeat (IRN): goodput, retransmissions, timeouts per loss rate.

Phase spray: the same queue pair, leaf1 spraying it packet by packet over
both spines, spine2's port to leaf3 slowed to SLOW_PATH_PPS so the two
paths' delays differ (reordering, no loss): go-back-N (every packet out of
order is a NAK and a resend of all after it), go-back-N with the
receiver's reorder buffer (hostagent/load_balancing/reorder.py) in front of
the transport, and selective repeat.

--overlay FILE (repeatable; `fabric tune --topology incast-leaf-spine
--out FILE` writes one, docs/tuning.md): its `congestion_control:`
section's constants go to every agent of the congestion control they are
for (--cc-param: the senders' at their line rate, the receiver's CNP
interval for DCQCN), rescaled to the run's --dilation; its other sections
are the experiment's own (int, lossless) or set per case (ECN), and are
left out, said so.

CSV and PNG under --out/<phase>;
prints a table per phase and where files went.
"""
from __future__ import annotations

import bisect
import csv
import json
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional, Sequence

REPO = Path(__file__).resolve().parent.parent

from emulator.bmv2 import DEFAULT_EXPERIMENT_LOG_LEVEL, LOG_LEVELS
from emulator.bmv2_thrift import Bmv2Thrift
from emulator.build import compile_p4
from emulator.calibration import CalibrationError, Flow as CalFlow, demand, plan, stored as stored_calibration
from emulator.dilation import Dilation
from emulator.fidelity import Spacing, departure_spacing, departures_from_us
from control.controller import FabricController
from emulator.impairments import drop_fraction
from emulator.network import Network, queue_rate_pps
from control.p4constants import drop_reasons
from experiments.common import StartGate, announce_budget, case_fidelity, cc_constants, cc_constants_line, \
    experiment_parser, lost_before_pipeline, percentile, print_fidelity, print_table, rdma_agent, sample_queue, \
    save_figure, socket_drops, write_csv
from control.topology import TopologyError, apply_overlays, from_dict
from features import FEATURES, SECTIONS
from features.congestion_control import SECTION as CONGESTION_CONTROL
from features.ecn import EcnProfile
from features.load_balancing import LbMode
from hostagent.rdma.agent import RECEIVER_CC_PARAMS, congestion_controls
from hostagent.rdma.transport import MODES

RECEIVER, BOTTLENECK_SWITCH = "r1", "leaf3"
SENDER_HOSTS = ("h1", "h5", "h2", "h6", "h3", "h7", "h4", "h8")     # leaf1 and leaf2 alternately
SENDERS = {4: ("h1", "h2", "h5", "h6"), 8: ("h1", "h2", "h3", "h4", "h5", "h6", "h7", "h8")}
INCAST_SIZES = (4, 8, 16)    # 16: two queue pairs on each of the 8 sender hosts
MESSAGE_BYTES = 65536
MTU = 1024
HPCC_INSTRUCTIONS = ["node_id", "l1_ports", "queue", "tx_bytes", "tx_time", "link_rate"]
DCQCN_K = 10                 # leaf3 marks CE at this queue depth (packets) for DCQCN
CCS = ("dcqcn", "hpcc", "swift", "timely")     # the algorithms compared by default
MARKED_CCS = ("dcqcn", "nscc")        # the congestion controls ECN marks are for (step profile at DCQCN_K)


LOSSLESS_CLASS, LOSSLESS_DSCP = 3, 26
# The lossless experiment's settings for five switches on two cores (docs/features/lossless.md): a
# paused class held at 500 packets/s a port, not the default 2000 (every held packet goes round again,
# and the rounds compete with arrivals for BMv2's CPU), and a headroom of 64 packets for pauses the
# switches and agents act on late. With the defaults (2000, 32) DCQCN and TIMELY at 4:1 lost 86-445
# packets a case to the headroom and stalled on go-back-N timeouts.
LOSSLESS_HEADROOM, LOSSLESS_HOLD_PPS = 64, 500


def with_int_to_host(topo_path: Path, dilation: Dilation = Dilation(), classes: tuple[dict, ...] = (),
                     overlays: Sequence[str | Path] = ()):
    """The topology with an `int:` section (RoCEv2, UDP 4791, gets INT with
    HPCC's instructions, delivered to the receiving host) and a `lossless:`
    section (DSCP 26 is class 3, lossless: the fabric cases with PFC mark
    their packets so; the others send DSCP 0, no class); its links and hold
    rate slowed by `dilation`; `classes`: more traffic classes (the
    section's entries); `overlays`' congestion_control section, if any
    (rescaled to `dilation`; their other sections left out: overlay_left_out)."""
    import yaml
    raw = yaml.safe_load(topo_path.read_text())
    sources: dict[str, str] = {}
    if overlays:
        merged, given = apply_overlays(raw, overlays, FEATURES, SECTIONS)
        if CONGESTION_CONTROL in given:
            raw[CONGESTION_CONTROL] = merged[CONGESTION_CONTROL]
            sources[CONGESTION_CONTROL] = given[CONGESTION_CONTROL]
    # no drop reports: no collector listens on the receiver, whose kernel would answer each with an ICMP
    # port unreachable to the reporting switch's address, which the fabric does not route (NO_ROUTE drops)
    raw["int"] = {"collector": RECEIVER, "drop_report_interval_ms": None, "watchlist": [
        {"protocol": "udp", "dst_ports": 4791, "instructions": HPCC_INSTRUCTIONS, "max_hops": 4, "to_host": True}]}
    raw["lossless"] = {"queues": 8, "classes": [{"name": "rdma", "class": LOSSLESS_CLASS, "dscp": [LOSSLESS_DSCP],
                                                 "lossless": True}, *classes],
                       "pfc": {"xoff": 24, "xon": 12, "headroom": LOSSLESS_HEADROOM},
                       "hold_rate_pps": LOSSLESS_HOLD_PPS}
    return from_dict(dilation.topology(raw), f"{topo_path.name} + INT to the host + a lossless class"
                     + (f", dilated {dilation}" if dilation.factor > 1 else ""), FEATURES, section_sources=sources,
                     overlays=tuple(map(str, overlays)), sections=SECTIONS)


def overlay_left_out(overlays: Sequence[str | Path]) -> list[str]:
    """The overlays' sections this experiment does not take (all but congestion_control)."""
    _, given = apply_overlays({}, overlays, FEATURES, SECTIONS)
    return sorted(s for s in given if s != CONGESTION_CONTROL)


def cc_arguments(topo, cc: str, role: str, line_rate_pps: float, dilation: Dilation) -> list[str]:
    """--cc-param for an agent of `cc` in `role` from the topology's
    congestion_control section (an overlay's, at the run's dilation): a
    sender's fields at its line rate, the receiver's its part
    (RECEIVER_CC_PARAMS); none without the section."""
    section = topo.features.get(CONGESTION_CONTROL)
    if section is None:
        return []
    values = section.params(cc, line_rate_pps, dilation.factor)
    if role == "receive":
        values = {k: v for k, v in values.items() if k in RECEIVER_CC_PARAMS}
    return [arg for k, v in values.items() for arg in ("--cc-param", f"{k}={v!r}")]


def check_cc_constants(topo, ccs: Sequence[str], line_rate_pps: float, dilation: Dilation) -> list[str]:
    """The congestion_control section's constants for each of `ccs`,
    checked as their agents will take them (ValueError naming the field);
    a line per congestion control saying what it is given."""
    if topo.features.get(CONGESTION_CONTROL) is None:
        return []
    return [cc_constants_line(cc, *cc_constants(topo, cc, line_rate_pps, MTU, dilation.factor)) for cc in ccs]



def budget_dilation(topo, phases, senders: int, agents: str = "rdma") -> Dilation:
    """The dilation the budget asks for (emulator/calibration.py) for the
    most demanding of `phases` (phase_demand), ACKed every 4th packet: what
    the switches forward (the training composition: INT and the lossless
    class are on) and what the `agents` cost (the RC agents; "uet": the UET
    mode's)."""
    cal = stored_calibration()
    if cal is None:
        raise CalibrationError("no calibration: run `fabric calibrate` first")
    return Dilation.rounded_up(plan(demand(topo, phase_demand(topo, phases, senders), ack_share=0.25), cal, "training",
                                    agents=agents).dilation)


def phase_demand(topo, phases, senders: int) -> list[CalFlow]:
    """The flows of the most demanding of `phases` (the most packets
    through switches) as the budget counts them: a long flow at the
    bottleneck's rate (the NICs' line rate), the mix's short messages at
    their share of it. A run of the loss phase alone asks for one flow's
    cost, not the largest incast's."""
    cap = bottleneck_pps(topo)
    one_flow = [CalFlow("h1", RECEIVER, cap)]
    flows = {"incast": [CalFlow(f.host, RECEIVER, cap) for f in incast_flows(senders, 1.0)],
             "mix": [CalFlow(h, RECEIVER, cap) for h in MIX_LONG]
             + [CalFlow(h, RECEIVER, MIX_SHORT_LOAD * cap / len(MIX_SHORT)) for h, _size in MIX_SHORT],
             "converge": [CalFlow(h, RECEIVER, cap) for h in CONVERGE_HOSTS],
             "loss": one_flow, "spray": one_flow}
    return max((flows[p] for p in phases), key=lambda f: demand(topo, f, ack_share=0.25).traversals_pps)


def agent_options(args, mode: str) -> list[str]:
    """What every agent of a case is given: the retransmission mode, the MTU, the dilation."""
    return ["--mode", mode, "--mtu", str(MTU), "--dilation", f"{args.dilation.factor:g}"]


def judged(args, lost: str, fidelity: str) -> dict:
    """A row's last columns: what the machine lost, the case's verdict, the run's dilation and budget."""
    return {"lost_before_pipeline": lost, "fidelity": fidelity, "dilation": str(args.dilation), "budget": args.budget}


def jain(xs: list[float]) -> float:
    return round(sum(xs) ** 2 / (len(xs) * sum(x * x for x in xs)), 3) if xs and any(xs) else 0.0


@dataclass(frozen=True)
class Flow:
    """One queue pair into the receiver: its host, number, when it starts and
    for how long it posts (seconds from the case's start), and the sender's
    extra options (message size, Poisson arrivals); after posting, `drain_s`
    to complete what is in flight."""
    host: str
    qp: int
    start_s: float = 0.0
    duration_s: float = 0.0
    extra: tuple[str, ...] = ()
    drain_s: float = 1.0

    @property
    def stem(self) -> str:
        return f"send-{self.host}-qp{self.qp}"


@dataclass
class CaseRun:
    dir: Path
    flows: list[Flow]
    tx: list[dict]               # each flow's sender summary
    rx: dict                     # the receiver's
    samples: list                # (s since the start, bottleneck queue depth)
    drops: dict = field(default_factory=dict)     # the switches' pipeline drops in the case, by reason
    lost_before_pipeline: str = ""                # frames BMv2 lost before its pipeline ("leaf3:25 ..."; common.py)
    fidelity: str = ""                            # the case's fidelity verdict (emulator/fidelity.py)


def run_flows(name: str, cc: str, flows: list[Flow], pfc: bool, topo, net: Network, ctl: FabricController, args,
              out: Path, mode: Optional[str] = None, receiver_extra: tuple[str, ...] = (),
              sender_extra: tuple[str, ...] = (), at_start: Optional[Callable[[float], None]] = None,
              senders_may_fail: bool = False) -> CaseRun:
    """Every flow's sender and the receiver on their hosts, `cc` on each, in
    the lossless class when `pfc`; the bottleneck queue sampled throughout.
    `mode`: the transport (default args.mode; "uet": UET's, experiments/uet.py);
    `at_start(t)`: called with the wall-clock start once every agent is
    ready (to schedule a fault); `senders_may_fail`: a sender's error is a
    result (in its summary), not the case's failure."""
    receiver = topo.hosts[RECEIVER]
    port = receiver.switch_port
    queue = LOSSLESS_CLASS if pfc else 0
    ctl.feature("ecn").set_profiles({(BOTTLENECK_SWITCH, port, q): EcnProfile.step(DCQCN_K)
                                     if cc in MARKED_CCS and q == queue else None for q in (0, LOSSLESS_CLASS)})
    case_dir = out / name
    case_dir.mkdir(parents=True, exist_ok=True)
    gate = StartGate(case_dir)       # every agent ready before any sends (agents/start.py)
    end_s = max(f.start_s + f.duration_s + f.drain_s * args.dilation.factor for f in flows)
    common = agent_options(args, mode or args.mode)
    capacity = queue_rate_pps(topo.switches[BOTTLENECK_SWITCH].ports[port].link.bandwidth_mbps)
    receiver_cc = [] if (mode or args.mode) == "uet" else cc_arguments(topo, cc, "receive", capacity, args.dilation)
    procs = [rdma_agent(receiver, "receive", start_at=gate, out_dir=case_dir,
                        extra=[*common, "--duration", str(end_s + 3.0), *receiver_cc, *receiver_extra])]
    for f in flows:
        h = topo.hosts[f.host]
        procs.append(rdma_agent(h, "send", start_at=gate, out_dir=case_dir, stem=f.stem, extra=[
            *common, "--start-after", str(f.start_s), "--dst-ip", receiver.ip, "--qp", str(f.qp), "--cc", cc,
            *cc_arguments(topo, cc, "send", capacity, args.dilation),
            "--duration", str(f.duration_s),
            "--drain-s", str(f.drain_s * args.dilation.factor), "--line-rate-pps", str(capacity),
            *(["--dscp", str(LOSSLESS_DSCP), "--tclass", str(LOSSLESS_CLASS), "--link-mbps",
               str(topo.access_link(h).bandwidth_mbps)] if pfc else []), *sender_extra, *f.extra]))
    samples: list = []
    stop = threading.Event()
    sw = topo.switches[BOTTLENECK_SWITCH]
    drops_before = switch_drops(ctl, topo)
    fidelity = case_fidelity(net, ctl)
    with Bmv2Thrift(sw.thrift_port) as thrift:
        start_at = gate.open(procs)
        fidelity.traffic_starts(start_at)
        if at_start is not None:
            at_start(start_at)
        time.sleep(max(0.0, start_at - time.time()))
        sampler = threading.Thread(target=sample_queue, args=(thrift, port, stop, start_at, samples, queue))
        sampler.start()
        for p in procs[1:]:
            p.wait(timeout=end_s + 60)
        stop.set()
        sampler.join()
        procs[0].terminate()
        procs[0].wait(timeout=15)
    net.check_alive()
    if any(p.returncode for p in procs[1:]) and not senders_may_fail:
        raise RuntimeError(f"{name}: a sender failed (exit codes {[p.returncode for p in procs[1:]]})")
    with open(case_dir / "queue.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["t_s", "qdepth_pkts"])
        w.writerows((round(t, 4), q) for t, q in samples)
    drops = {k: n - drops_before.get(k, 0) for k, n in switch_drops(ctl, topo).items()}
    tx = [json.loads((case_dir / f"{f.stem}.json").read_text()) for f in flows]
    rx = json.loads((case_dir / f"receive-{RECEIVER}.json").read_text())
    verdict = fidelity.verdict((t["started_late_s"] for t in tx), departures=last_hop_spacing(rx, capacity, port),
                               socket_drops=socket_drops([(RECEIVER, rx), *((f.host, t) for f, t in zip(flows, tx))]))
    input_lost = lost_before_pipeline(name, verdict)
    late = {f.stem: t["started_late_s"] for f, t in zip(flows, tx) if t["started_late_s"] > 0.05}
    if late:
        raise RuntimeError(f"{name}: senders started late (s): {late}; the machine is too busy for this case")
    return CaseRun(case_dir, flows, tx, rx, samples,
                   {k: n for k, n in drops.items() if n}, input_lost, str(verdict))


def last_hop_spacing(rx: dict, capacity_pps: float, port: int) -> list[Spacing]:
    """The bottleneck queue's departures, where INT reached the receiver (the
    RoCE watchlist's to_host rule, whatever the congestion control: every data
    packet carries the last switch's tx time and the depth it met), judged
    against the queue's rate (emulator/fidelity.py departure_spacing)."""
    records = rx.get("int_last_hop_departures") or []
    if not records:
        return []
    return [departure_spacing(departures_from_us(records), capacity_pps, f"{BOTTLENECK_SWITCH}:{port}")]


def switch_drops(ctl: FabricController, topo) -> dict[str, int]:
    """Packets the switches' pipelines dropped, by reason, summed over the
    switches (queue tail drops are BMv2's own: not counted here)."""
    names = {v: k for k, v in drop_reasons().items()}
    total: dict[str, int] = {}
    for sw in topo.switches:
        for index, (packets, _) in ctl.counter(sw, "drop_counter").items():
            total[names.get(index, str(index))] = total.get(names.get(index, str(index)), 0) + packets
    return total


def incast_flows(n: int, duration: float) -> list[Flow]:
    """n queue pairs of back-to-back 64 KB messages: one per sender host, or
    n / hosts each when there are more queue pairs than hosts."""
    per_host = -(-n // len(SENDER_HOSTS))
    hosts = SENDERS.get(n) or tuple(h for h in SENDER_HOSTS for _ in range(per_host))[:n]
    return [Flow(h, qp, 0.0, duration, ("--message-bytes", str(MESSAGE_BYTES))) for qp, h in enumerate(hosts, 1)]


def bottleneck_pps(topo) -> float:
    return queue_rate_pps(topo.switches[BOTTLENECK_SWITCH].ports[topo.hosts[RECEIVER].switch_port].link.bandwidth_mbps)


def run_case(cc: str, n: int, pfc: bool, topo, net: Network, ctl: FabricController, args, out: Path) -> dict:
    name = f"{cc}-{n}{'-pfc' if pfc else ''}"
    run = run_flows(name, cc, incast_flows(n, args.duration), pfc, topo, net, ctl, args, out)
    tx, rx, samples = run.tx, run.rx, run.samples
    capacity = bottleneck_pps(topo)
    warm = 0.2 * args.duration
    steady_q = [q for t, q in samples if warm <= t <= args.duration]
    goodput = [t["messages_completed"] * MESSAGE_BYTES / args.duration for t in tx]
    packets_per_s = sum(goodput) / MTU
    int_q = rx.get("int_last_hop_queue_packets") or {}
    fct = [t["completion_ms"] for t in tx if t["completion_ms"]]
    result = {
        "case": name, "cc": cc, "senders": n, "pfc": pfc, "mode": args.mode,
        "messages": sum(t["messages_completed"] for t in tx),
        "goodput_mbps": round(sum(goodput) * 8 / 1e6, 3),
        "utilisation": round(packets_per_s / capacity, 3),
        "jain": jain(goodput),
        "fct_p50_ms": round(percentile([f["p50"] for f in fct], 0.5), 1),
        "fct_p99_ms": round(max((f["p99"] for f in fct), default=0.0), 1),
        "queue_p50": percentile(steady_q, 0.5), "queue_p99": percentile(steady_q, 0.99),
        "int_queue_p50": int_q.get("p50", ""), "int_queue_p99": int_q.get("p99", ""),
        "retransmitted": sum(t["retransmitted"] for t in tx), "timeouts": sum(t["timeouts"] for t in tx),
        "naks": sum(t["naks"] for t in tx),
        "sent": sum(t["sent"] for t in tx),
        "received": sum(f["received"] for f in rx["flows"].values()),
        "switch_drops": " ".join(f"{k}:{n}" for k, n in sorted(run.drops.items())),
        **judged(args, run.lost_before_pipeline, run.fidelity),
    }
    _plot_case(result, run)
    return result


def _plot_case(result: dict, run: CaseRun) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(2, 1, figsize=(9, 5.5), sharex=True)
    for f in run.flows:
        rows = list(csv.DictReader(open(run.dir / f"{f.stem}.csv")))
        axes[0].plot([f.start_s + float(r["t"]) for r in rows], [float(r["rate_pps"]) for r in rows], lw=0.8,
                     label=f"{f.host}/{f.qp}")
    axes[0].set_ylabel("sending rate (pkts/s)")
    axes[0].legend(fontsize=7, ncol=4)
    axes[1].plot([t for t, _ in run.samples], [q for _, q in run.samples], lw=0.7, color="black")
    axes[1].set_ylabel("bottleneck queue (pkts)")
    axes[1].set_xlabel("time (s)")
    axes[0].set_title(f"{result['case']}: utilisation {result['utilisation']:.0%}, Jain {result['jain']}, "
                      f"queue p50/p99 {result['queue_p50']:g}/{result['queue_p99']:g}", fontsize=9)
    save_figure(fig, run.dir / "timeseries.png")


def _plot_summary(results: list[dict], out: Path) -> Path:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    keys = [("utilisation", "utilisation"), ("queue_p99", "queue p99 (pkts)"), ("fct_p99_ms", "message p99 (ms)"),
            ("jain", "Jain fairness")]
    fig, axes = plt.subplots(1, len(keys), figsize=(13, 3.5))
    for ax, (key, label) in zip(axes, keys):
        ax.bar([r["case"] for r in results], [float(r[key] or 0) for r in results])
        ax.set_title(label, fontsize=9)
        ax.tick_params(axis="x", labelrotation=60, labelsize=7)
    return save_figure(fig, out / "summary.png")


def run_loss_case(mode: str, loss_pct: float, topo, net: Network, ctl: FabricController, args, out: Path) -> dict:
    name = f"{mode}-{loss_pct:g}pct"
    receiver, sender = topo.hosts[RECEIVER], topo.hosts["h1"]
    port = topo.switches[BOTTLENECK_SWITCH].ports[receiver.switch_port]
    ctl.feature("ecn").set_profile(BOTTLENECK_SWITCH, receiver.switch_port, None)
    capacity = queue_rate_pps(port.link.bandwidth_mbps)
    case_dir = out / name
    case_dir.mkdir(parents=True, exist_ok=True)
    undo = drop_fraction(port.iface, loss_pct / 100) if loss_pct else (lambda: None)
    try:
        gate = StartGate(case_dir)
        common = agent_options(args, mode)
        rx = rdma_agent(receiver, "receive", start_at=gate, out_dir=case_dir,
                        extra=[*common, "--duration", str(args.duration + 3.0),
                               *cc_arguments(topo, "dcqcn", "receive", capacity, args.dilation)])
        tx = rdma_agent(sender, "send", start_at=gate, out_dir=case_dir, extra=[
            *common, "--dst-ip", receiver.ip, "--qp", "1", "--cc", "dcqcn", "--duration", str(args.duration),
            "--message-bytes", str(MESSAGE_BYTES), "--line-rate-pps", str(capacity),
            *cc_arguments(topo, "dcqcn", "send", capacity, args.dilation)])
        fidelity = case_fidelity(net, ctl)
        fidelity.traffic_starts(gate.open([rx, tx]))
        tx.wait(timeout=args.duration + 60)
        rx.terminate()
        rx.wait(timeout=15)
    finally:
        undo()
    net.check_alive()
    if tx.returncode:
        raise RuntimeError(f"{name}: the sender failed (exit code {tx.returncode})")
    sent = json.loads((case_dir / f"send-{sender.name}.json").read_text())
    got = json.loads((case_dir / f"receive-{RECEIVER}.json").read_text())
    verdict = fidelity.verdict([sent["started_late_s"]], socket_drops=socket_drops([(sender.name, sent),
                                                                                     (RECEIVER, got)]))
    return {"case": name, "mode": mode, "loss_pct": loss_pct, "messages": sent["messages_completed"],
            "goodput_mbps": round(sent["messages_completed"] * MESSAGE_BYTES * 8 / args.duration / 1e6, 3),
            "sent": sent["sent"], "retransmitted": sent["retransmitted"], "timeouts": sent["timeouts"],
            "naks": sent["naks"], "fct_p50_ms": (sent["completion_ms"] or {}).get("p50", ""),
            **judged(args, lost_before_pipeline(name, verdict), str(verdict))}


SLOW_PATH_PPS = 500
SPRAY_CASES = (("go-back-n", False), ("go-back-n", True), ("selective-repeat", False))


def run_spray_case(mode: str, reorder: bool, topo, net: Network, ctl: FabricController, args, out: Path) -> dict:
    name = f"{mode}{'-reorder' if reorder else ''}"
    receiver, sender = topo.hosts[RECEIVER], topo.hosts["h1"]
    ctl.feature("ecn").set_profile(BOTTLENECK_SWITCH, receiver.switch_port, None)
    capacity = queue_rate_pps(topo.switches[BOTTLENECK_SWITCH].ports[receiver.switch_port].link.bandwidth_mbps)
    case_dir = out / name
    case_dir.mkdir(parents=True, exist_ok=True)
    gate = StartGate(case_dir)
    common = agent_options(args, mode)
    rx = rdma_agent(receiver, "receive", start_at=gate, out_dir=case_dir,
                    extra=[*common, "--duration", str(args.duration + 3.0), *(["--reorder"] if reorder else []),
                           *cc_arguments(topo, "dcqcn", "receive", capacity, args.dilation)])
    tx = rdma_agent(sender, "send", start_at=gate, out_dir=case_dir, extra=[
        *common, "--dst-ip", receiver.ip, "--qp", "1", "--cc", "dcqcn", "--duration", str(args.duration),
        "--message-bytes", str(MESSAGE_BYTES), "--line-rate-pps", str(capacity),
        *cc_arguments(topo, "dcqcn", "send", capacity, args.dilation)])
    fidelity = case_fidelity(net, ctl)
    fidelity.traffic_starts(gate.open([rx, tx]))
    tx.wait(timeout=args.duration + 60)
    rx.terminate()
    rx.wait(timeout=15)
    net.check_alive()
    if tx.returncode:
        raise RuntimeError(f"{name}: the sender failed (exit code {tx.returncode})")
    sent = json.loads((case_dir / f"send-{sender.name}.json").read_text())
    got = json.loads((case_dir / f"receive-{RECEIVER}.json").read_text())
    verdict = fidelity.verdict([sent["started_late_s"]], socket_drops=socket_drops([(sender.name, sent),
                                                                                     (RECEIVER, got)]))
    flow = next(iter(got["flows"].values()))
    rob: dict = next(iter((got["reorder"] or {}).values()), {})
    return {"case": name, "mode": mode, "reorder_buffer": reorder, "messages": sent["messages_completed"],
            "goodput_mbps": round(sent["messages_completed"] * MESSAGE_BYTES * 8 / args.duration / 1e6, 3),
            "sent": sent["sent"], "retransmitted": sent["retransmitted"], "naks": sent["naks"],
            "timeouts": sent["timeouts"], "out_of_order_at_transport": flow["out_of_order"],
            "held_by_reorder_buffer": rob.get("held", ""),
            # gaps the reorder buffer gave up on (its gap timeout), and packets that came after it had
            "reorder_declared_lost": rob.get("losses_declared", ""), "reorder_late": rob.get("late", ""),
            **judged(args, lost_before_pipeline(name, verdict), str(verdict))}


MIX_LONG = ("h1", "h5")
MIX_SHORT = (("h2", 4096), ("h6", 4096), ("h3", 16384), ("h7", 16384))     # (host, message bytes)
MIX_SHORT_LOAD = 0.2         # the short messages' share of the bottleneck, all together
MIX_DRAIN_S = 3.0


def mix_flows(capacity_pps: float, duration: float) -> list[Flow]:
    """Two long flows (64 KB messages back to back) and four queue pairs of
    short messages (4 and 16 packets) arriving as Poisson processes, 20% of
    the bottleneck together."""
    flows = [Flow(h, qp, 0.0, duration, ("--message-bytes", str(MESSAGE_BYTES))) for qp, h in enumerate(MIX_LONG, 1)]
    per_host_pps = MIX_SHORT_LOAD * capacity_pps / len(MIX_SHORT)
    for qp, (h, size) in enumerate(MIX_SHORT, len(flows) + 1):
        flows.append(Flow(h, qp, 0.0, duration, ("--message-bytes", str(size), "--poisson-per-s",
                                                 f"{per_host_pps / -(-size // MTU):.3f}", "--seed", str(qp)),
                          drain_s=MIX_DRAIN_S))
    return flows


def message_times(path: Path) -> list[tuple[int, float, Optional[float]]]:
    """(bytes, posted, completed or None) of each message a sender posted."""
    return [(int(r["bytes"]), float(r["posted_s"]), float(r["completed_s"]) if r["completed_s"] else None)
            for r in csv.DictReader(open(path))]


def slowdowns(messages, capacity_pps: float, one_packet_s: float) -> list[float]:
    """Completion time over the ideal one: a one-packet message's on the
    idle fabric, plus the message's other packets at the bottleneck's rate."""
    return [(done - posted) / (one_packet_s + (-(-size // MTU) - 1) / capacity_pps)
            for size, posted, done in messages if done is not None]


PROBE_MESSAGES_PER_S, PROBE_S = 20.0, 3.0


def idle_completion_s(topo, net: Network, ctl: FabricController, args, out: Path) -> float:
    """The median completion time of one-packet messages from h1 on the idle
    fabric (Poisson, PROBE_MESSAGES_PER_S for PROBE_S): the ideal the
    slowdowns divide by, the same for every algorithm."""
    probe = Flow("h1", 1, 0.0, PROBE_S, ("--message-bytes", str(MTU), "--poisson-per-s", str(PROBE_MESSAGES_PER_S)))
    run = run_flows("idle-probe", "dcqcn", [probe], False, topo, net, ctl, args, out)
    times = [done - posted for _, posted, done in message_times(run.dir / f"{probe.stem}.messages.csv")
             if done is not None]
    if len(times) < 10:
        raise RuntimeError(f"idle probe: {len(times)} one-packet messages completed, too few to measure")
    return percentile(times, 0.5)


def run_mix_case(cc: str, pfc: bool, one_packet_s: float, topo, net: Network, ctl: FabricController, args,
                 out: Path) -> dict:
    name = f"{cc}{'-pfc' if pfc else ''}"
    capacity = bottleneck_pps(topo)
    run = run_flows(name, cc, mix_flows(capacity, args.duration), pfc, topo, net, ctl, args, out)
    long_tx = run.tx[:len(MIX_LONG)]
    short = {f.stem: message_times(run.dir / f"{f.stem}.messages.csv") for f in run.flows[len(MIX_LONG):]}
    by_size: dict[int, list[float]] = {}
    for f in run.flows[len(MIX_LONG):]:
        size = int(f.extra[1])
        by_size.setdefault(size, []).extend(slowdowns(short[f.stem], capacity, one_packet_s))
    every = [x for xs in by_size.values() for x in xs]
    posted = sum(len(m) for m in short.values())
    long_goodput = [t["messages_completed"] * MESSAGE_BYTES / args.duration for t in long_tx]
    short_bytes = sum(size for m in short.values() for size, _, done in m if done is not None)
    steady_q = [q for t, q in run.samples if 0.2 * args.duration <= t <= args.duration]
    int_q = run.rx.get("int_last_hop_queue_packets") or {}
    result = {
        "case": name, "cc": cc, "pfc": pfc, "mode": args.mode,
        "utilisation": round((sum(long_goodput) * args.duration + short_bytes) / MTU / args.duration / capacity, 3),
        "long_jain": jain(long_goodput), "long_goodput_mbps": round(sum(long_goodput) * 8 / 1e6, 3),
        "short_messages": posted, "short_completed": len(every), "idle_one_packet_ms": round(1000 * one_packet_s, 2),
        "slowdown_p50": round(percentile(every, 0.5), 2), "slowdown_p99": round(percentile(every, 0.99), 2),
        **{f"slowdown_{size // MTU}pkt_p50": round(percentile(xs, 0.5), 2) for size, xs in sorted(by_size.items())},
        **{f"slowdown_{size // MTU}pkt_p99": round(percentile(xs, 0.99), 2) for size, xs in sorted(by_size.items())},
        "queue_p50": percentile(steady_q, 0.5), "queue_p99": percentile(steady_q, 0.99),
        "int_queue_p50": int_q.get("p50", ""), "int_queue_p99": int_q.get("p99", ""),
        "retransmitted": sum(t["retransmitted"] for t in run.tx), "timeouts": sum(t["timeouts"] for t in run.tx),
        "naks": sum(t["naks"] for t in run.tx),
        "switch_drops": " ".join(f"{k}:{n}" for k, n in sorted(run.drops.items())),
        **judged(args, run.lost_before_pipeline, run.fidelity),
    }
    with open(run.dir / "slowdowns.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["message_bytes", "slowdown"])
        w.writerows((size, round(x, 3)) for size, xs in sorted(by_size.items()) for x in xs)
    _plot_case({**result, "jain": result["long_jain"]}, run)
    return result


def _plot_slowdowns(results: list[dict], out: Path) -> Path:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for r in results:
        xs = sorted(float(row["slowdown"]) for row in csv.DictReader(open(out / r["case"] / "slowdowns.csv")))
        ax.plot(xs, [(i + 1) / len(xs) for i in range(len(xs))], label=r["case"])
    ax.set_xscale("log")
    ax.set_xlabel("short-message completion time / ideal")
    ax.set_ylabel("CDF")
    ax.legend(fontsize=8)
    return save_figure(fig, out / "slowdown_cdf.png")


CONVERGE_HOSTS = ("h1", "h5", "h2", "h6")
RATE_WINDOW_S = 0.5          # a flow's rate: new packets sent over this window
MIN_HELD_S = 0.5             # converged: the condition holds from then to the next event, at least this long
FLOW_TOLERANCE = 0.2         # every flow within this share of the active flows' mean rate
TOTAL_TOLERANCE = 0.1        # and their sum within this share of where it settles in the interval


def converge_flows(step_s: float) -> list[Flow]:
    """Flows join one every `step_s` and leave in reverse order: 1, 2, 3, 4,
    3, 2, 1 flows, each level held `step_s`."""
    n = len(CONVERGE_HOSTS)
    return [Flow(h, qp, i * step_s, (2 * n - 1 - 2 * i) * step_s, ("--message-bytes", str(MESSAGE_BYTES)))
            for i, (qp, h) in enumerate(enumerate(CONVERGE_HOSTS, 1))]


def flow_rates(run: CaseRun, grid: list[float]) -> dict[str, list[Optional[float]]]:
    """Each flow's rate of new packets (sent less resent) over the
    RATE_WINDOW_S before each grid time; None where it was not sending
    through the whole window."""
    rates = {}
    for f in run.flows:
        rows = [(f.start_s + float(r["t"]), int(r["sent"]) - int(r["retransmitted"]))
                for r in csv.DictReader(open(run.dir / f"{f.stem}.csv"))]
        times = [t for t, _ in rows]

        def sent_by(t: float) -> int:
            i = bisect.bisect_right(times, t) - 1
            return rows[i][1] if i >= 0 else 0
        rates[f.stem] = [(sent_by(g) - sent_by(g - RATE_WINDOW_S)) / RATE_WINDOW_S
                         if f.start_s + RATE_WINDOW_S <= g <= f.start_s + f.duration_s else None for g in grid]
    return rates


def convergence(run: CaseRun, capacity_pps: float) -> list[dict]:
    """For each join and leave, the settling time: how long until the active
    flows' rates are within FLOW_TOLERANCE of their mean and their sum within
    TOTAL_TOLERANCE of its median over the interval's second half, and stay
    so until the next event (at least MIN_HELD_S); None: they never settle."""
    starts = sorted(f.start_s for f in run.flows)
    ends = sorted(f.start_s + f.duration_s for f in run.flows)
    events = [(t, "join") for t in starts[1:]] + [(t, "leave") for t in ends[:-1]]
    boundaries = sorted({*starts, *ends})
    grid = [round(i * 0.05, 3) for i in range(int(boundaries[-1] / 0.05) + 1)]
    rates = flow_rates(run, grid)
    rows = []
    for e, kind in events:
        nxt = min(b for b in boundaries if b > e)
        idx = [i for i, g in enumerate(grid) if e + RATE_WINDOW_S <= g < nxt]
        active = [k for k in rates if all(rates[k][i] is not None for i in idx)]
        total = [sum(rates[k][i] or 0.0 for k in active) for i in idx]
        settled = sorted(total[len(total) // 2:])[len(total[len(total) // 2:]) // 2] if total else 0.0

        def ok(i: int, j: int) -> bool:
            mean = total[j] / len(active)
            return (abs(total[j] - settled) <= TOTAL_TOLERANCE * settled and
                    all(abs((rates[k][i] or 0.0) - mean) <= FLOW_TOLERANCE * mean for k in active))
        good = [ok(i, j) for j, i in enumerate(idx)]
        stays = next((j for j in range(len(good)) if all(good[j:])), None)      # from there to the next event
        at = grid[idx[stays]] if stays is not None and grid[idx[-1]] - grid[idx[stays]] >= MIN_HELD_S else None
        half = idx[len(idx) // 2:]
        rows.append({"event_s": round(e, 2), "event": kind, "flows": len(active),
                     "converged_after_s": "" if at is None else round(at - e, 2),
                     "utilisation": round(settled / capacity_pps, 3),
                     "jain": jain([sum(rates[k][i] or 0.0 for i in half) for k in active])})
    return rows


def run_converge_case(cc: str, pfc: bool, topo, net: Network, ctl: FabricController, args,
                      out: Path) -> tuple[dict, list[dict]]:
    name = f"{cc}{'-pfc' if pfc else ''}"
    capacity = bottleneck_pps(topo)
    step = args.duration / 3
    run = run_flows(name, cc, converge_flows(step), pfc, topo, net, ctl, args, out)
    events = [{"case": name, "cc": cc, "pfc": pfc, **e} for e in convergence(run, capacity)]
    times = [e["converged_after_s"] for e in events if e["converged_after_s"] != ""]
    result = {"case": name, "cc": cc, "pfc": pfc, "step_s": round(step, 2), "events": len(events),
              "converged": len(times), "converged_after_p50_s": round(percentile(times, 0.5), 2) if times else "",
              "converged_after_max_s": max(times) if times else "",
              "join_after_s": " ".join(str(e["converged_after_s"] or "-") for e in events if e["event"] == "join"),
              "leave_after_s": " ".join(str(e["converged_after_s"] or "-") for e in events if e["event"] == "leave"),
              "retransmitted": sum(t["retransmitted"] for t in run.tx),
              "timeouts": sum(t["timeouts"] for t in run.tx), "naks": sum(t["naks"] for t in run.tx),
              "switch_drops": " ".join(f"{k}:{n}" for k, n in sorted(run.drops.items())),
              **judged(args, run.lost_before_pipeline, run.fidelity)}
    _plot_converge(result, run, events)
    return result, events


def _plot_converge(result: dict, run: CaseRun, events: list[dict]) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    end = max(f.start_s + f.duration_s for f in run.flows)
    grid = [round(i * 0.05, 3) for i in range(int(end / 0.05) + 1)]
    fig, ax = plt.subplots(figsize=(9, 3.8))
    for f, (stem, rs) in zip(run.flows, flow_rates(run, grid).items()):
        ax.plot(grid, [float("nan") if r is None else r for r in rs], lw=0.9, label=f"{f.host}/{f.qp}")
    for e in events:
        ax.axvline(e["event_s"], color="grey", lw=0.5, ls=":")
        if e["converged_after_s"] != "":
            ax.axvline(e["event_s"] + e["converged_after_s"], color="green", lw=0.6, ls="--")
    ax.set_xlabel("time (s)")
    ax.set_ylabel(f"new packets/s ({RATE_WINDOW_S:g} s window)")
    ax.set_title(f"{result['case']}: flows join and leave every {result['step_s']:g} s; converged after "
                 f"joins {result['join_after_s']} s, leaves {result['leave_after_s']} s (green)", fontsize=9)
    ax.legend(fontsize=7, ncol=4)
    save_figure(fig, run.dir / "rates.png")


def _plot_loss(results: list[dict], out: Path) -> Path:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.5))
    for mode in MODES:
        rows = [r for r in results if r["mode"] == mode]
        axes[0].plot([r["loss_pct"] for r in rows], [r["goodput_mbps"] for r in rows], marker="o", label=mode)
        axes[1].plot([r["loss_pct"] for r in rows], [r["retransmitted"] for r in rows], marker="o", label=mode)
    axes[0].set_ylabel("goodput (Mbit/s)")
    axes[1].set_ylabel("packets retransmitted")
    for ax in axes:
        ax.set_xlabel("random loss at the last hop (%)")
        ax.legend(fontsize=8)
    return save_figure(fig, out / "goodput_vs_loss.png")


PHASE_TEXT = {"mix": "{d:g}s of 2 long flows and Poisson short messages (4 and 16 packets, 20% of the link)",
              "converge": "4 flows joining and leaving one every {s:.2g}s"}
PHASES = ("incast", "mix", "converge", "loss", "spray")


def main(argv: list[str] | None = None) -> int:
    ap = experiment_parser("rdma", __doc__)
    ap.add_argument("--phases", nargs="*", default=list(PHASES), choices=PHASES)
    ap.add_argument("--ccs", nargs="*", default=list(CCS), choices=sorted(congestion_controls()),
                    help="congestion controls (default %(default)s; NSCC runs on RC too: --ccs nscc)")
    ap.add_argument("--senders", nargs="*", type=int, default=list(INCAST_SIZES), choices=INCAST_SIZES,
                    help="incast phase: queue pairs into the receiver")
    ap.add_argument("--losses", nargs="*", type=float, default=[0, 0.01, 0.1, 1, 2, 5], help="loss phase: percent")
    ap.add_argument("--duration", type=float, default=10.0, help="seconds of traffic per case")
    ap.add_argument("--mode", choices=MODES, default=MODES[0], help="incast phase: retransmission mode")
    ap.add_argument("--fabrics", nargs="*", default=["lossy", "pfc"], choices=["lossy", "pfc"],
                    help="incast phase: a lossy class, and/or a lossless one (PFC; senders honour pauses)")
    ap.add_argument("--out", default=str(REPO / "experiments" / "results" / "rdma"),
                    help="results directory (default %(default)s)")
    ap.add_argument("--log-level", default=DEFAULT_EXPERIMENT_LOG_LEVEL, choices=LOG_LEVELS)
    ap.add_argument("--overlay", action="append", default=[], metavar="FILE",
                    help="its congestion_control section (fabric tune --out) for every agent of the congestion "
                         "control it names (repeatable; its other sections are left out)")
    ap.add_argument("--dilation", default="1", metavar="{auto,D}",
                    help="run the network D times slower (emulator/dilation.py): link and line rates divided by "
                         "D, the agents' time constants and --duration multiplied by it; auto: the D the budget "
                         "asks for the most demanding of --phases (the largest incast of --senders, the mix's or the "
                         "converge phase's flows, or the loss and spray phases' one flow) at the bottleneck's rate "
                         "(default 1: none)")
    args = ap.parse_args(argv)
    args.fabrics = [f == "pfc" for f in args.fabrics]
    out = Path(args.out)
    topo_file = REPO / "topologies" / "incast-leaf-spine.yaml"
    try:
        with_int_to_host(topo_file, overlays=args.overlay)      # a bad overlay is named before anything starts
        left_out = overlay_left_out(args.overlay) if args.overlay else []
    except TopologyError as exc:
        ap.error(f"--overlay: {exc}")
    try:
        args.dilation = budget_dilation(with_int_to_host(topo_file), args.phases, max(args.senders)) \
            if args.dilation == "auto" \
            else Dilation(float(args.dilation))
    except (ValueError, CalibrationError) as exc:
        ap.error(f"--dilation: {exc}")
    if args.dilation.factor > 1:
        print(f"dilation {args.dilation}: rates / {args.dilation.factor:g}, time constants x {args.dilation.factor:g}; "
              f"{args.duration:g} s of the network's time is {args.duration * args.dilation.factor:g} s here; times "
              f"in the results are the dilated network's (x{args.dilation.factor:g}), goodputs its own "
              f"(/{args.dilation.factor:g})", flush=True)
        args.duration *= args.dilation.factor
    topo = with_int_to_host(topo_file, args.dilation, overlays=args.overlay)
    if left_out:
        print(f"from the overlays: {CONGESTION_CONTROL} only; left out: {', '.join(left_out)} (the experiment's own "
              f"or set per case)", flush=True)
    try:
        ccs = sorted({*args.ccs, *(["dcqcn"] if {"mix", "loss", "spray"} & set(args.phases) else [])})
        for line in check_cc_constants(topo, ccs, bottleneck_pps(topo), args.dilation):
            print(line, flush=True)
    except ValueError as exc:
        ap.error(f"--overlay: {exc}")
    args.budget = announce_budget(topo, phase_demand(topo, args.phases, max(args.senders)), "training", ack_share=0.25,
                                  agents="rdma")
    compile_p4()
    written = []
    judged: list[dict] = []                     # rows with a fidelity verdict
    with Network(topo, REPO / "build" / "experiments" / "rdma", log_level=args.log_level) as net, \
            FabricController(topo) as ctl:
        ctl.program()
        net.apply_queue_rates()
        if "incast" in args.phases:
            incast_out = out / "incast"
            incast_out.mkdir(parents=True, exist_ok=True)
            results = []
            for pfc in args.fabrics:
                for n in args.senders:
                    for cc in args.ccs:
                        print(f"==> {cc}-{n}: {args.duration:g}s of {n}:1 incast into {RECEIVER}, {args.mode}, "
                              f"{'lossless class (PFC)' if pfc else 'lossy'}", flush=True)
                        results.append(run_case(cc, n, pfc, topo, net, ctl, args, incast_out))
            written += [write_csv(incast_out / "summary.csv", results), _plot_summary(results, incast_out)]
            print_table(results)
            judged += results
        def cases(phase: str):
            """(fabric, cc) of a phase, announced; its output directory."""
            phase_out = out / phase
            phase_out.mkdir(parents=True, exist_ok=True)
            for pfc in args.fabrics:
                for cc in args.ccs:
                    print(f"==> {phase} {cc}: {PHASE_TEXT[phase].format(d=args.duration, s=args.duration / 3)}, "
                          f"{'lossless class (PFC)' if pfc else 'lossy'}", flush=True)
                    yield pfc, cc, phase_out
        if "mix" in args.phases:
            print(f"==> mix: one-packet messages on the idle fabric for {PROBE_S:g}s (the slowdowns' ideal)",
                  flush=True)
            one_packet_s = idle_completion_s(topo, net, ctl, args, out / "mix")
            results = [run_mix_case(cc, pfc, one_packet_s, topo, net, ctl, args, phase_out)
                       for pfc, cc, phase_out in cases("mix")]
            written += [write_csv(out / "mix" / "summary.csv", results), _plot_slowdowns(results, out / "mix")]
            print_table(results)
            judged += results
        if "converge" in args.phases:
            results, events = [], []
            for pfc, cc, phase_out in cases("converge"):
                result, case_events = run_converge_case(cc, pfc, topo, net, ctl, args, phase_out)
                results.append(result)
                events += case_events
            written += [write_csv(out / "converge" / "summary.csv", results),
                        write_csv(out / "converge" / "events.csv", events)]
            print_table(results)
            judged += results
        if "loss" in args.phases:
            loss_out = out / "loss"
            loss_out.mkdir(parents=True, exist_ok=True)
            results = []
            for mode in MODES:
                for loss in args.losses:
                    print(f"==> {mode}: {args.duration:g}s h1 -> {RECEIVER}, {loss:g}% lost at the last hop",
                          flush=True)
                    results.append(run_loss_case(mode, loss, topo, net, ctl, args, loss_out))
            written += [write_csv(loss_out / "summary.csv", results), _plot_loss(results, loss_out)]
            print_table(results)
            judged += results
        if "spray" in args.phases:
            spray_out = out / "spray"
            spray_out.mkdir(parents=True, exist_ok=True)
            spine2 = topo.switches["spine2"]
            (slow_port,) = [p.number for p in spine2.ports.values() if p.peer == BOTTLENECK_SWITCH]
            slow_path_pps = args.dilation.value("slow_path_pps", SLOW_PATH_PPS)
            ctl.feature("load_balancing").set_mode("leaf1", LbMode("spray"))
            with Bmv2Thrift(spine2.thrift_port) as thrift:
                thrift.set_queue_rate(slow_port, slow_path_pps)
            results = []
            try:
                for mode, reorder in SPRAY_CASES:
                    print(f"==> {mode}{' + reorder buffer' if reorder else ''}: {args.duration:g}s h1 -> {RECEIVER} "
                          f"sprayed over both spines (spine2 -> leaf3 at {slow_path_pps:g} packets/s)", flush=True)
                    results.append(run_spray_case(mode, reorder, topo, net, ctl, args, spray_out))
            finally:
                ctl.feature("load_balancing").set_mode("leaf1", LbMode())
                net.apply_queue_rates()
            written.append(write_csv(spray_out / "summary.csv", results))
            print_table(results)
            judged += results
    print_fidelity(judged)
    print(f"\nresults: {', '.join(map(str, written))}, and per case <case>/ (timeseries.png, the agents' CSV/JSON)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
