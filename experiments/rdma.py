#!/usr/bin/env python3
"""The RDMA transport on BMv2: its congestion controls under incast (DCQCN,
TIMELY, Swift, HPCC), and its two retransmission modes under random loss.

    fabric experiment rdma [--phases incast loss spray] [--ccs dcqcn timely swift hpcc] [--senders 4 8]
                           [--losses 0 0.1 1 2 5] [--duration 10] [--mode go-back-n]
                           [--out experiments/results/rdma]

Phase incast:

topologies/incast-leaf-spine.yaml on BMv2: senders on leaf1 and leaf2
(h1, h2, h5, h6 for 4:1; h1-h8 for 8:1), the receiver r1 on leaf3, whose
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

Phase loss: one queue pair h1 -> r1 (DCQCN with nothing marked: the NIC's
833 packets/s), leaf3 dropping a share of what it sends to r1 at random
(core.impairments: netem, or an nftables rule), go-back-N against
selective repeat (IRN): goodput, retransmissions, timeouts per loss rate.

Phase spray: the same queue pair, leaf1 spraying it packet by packet over
both spines, spine2's port to leaf3 slowed to SLOW_PATH_PPS so the two
paths' delays differ (reordering, no loss): go-back-N (every packet out of
order is a NAK and a resend of all after it), go-back-N with the
receiver's reorder buffer (hostagent/load_balancing/reorder.py) in front of
the transport, and selective repeat.

CSV and PNG under --out (incast in --out/incast, loss in --out/loss, spray
in --out/spray);
prints a table per phase and where files went.
"""
from __future__ import annotations

import argparse
import csv
import json
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

from core.bmv2 import DEFAULT_EXPERIMENT_LOG_LEVEL, LOG_LEVELS
from core.bmv2_thrift import Bmv2Thrift
from core.build import compile_p4
from core.controller import FabricController
from core.impairments import drop_fraction
from core.network import Network, queue_rate_pps
from experiments.common import print_table, rdma_agent, sample_queue, save_figure, write_csv
from features import load_topology, topology_from_dict
from features.ecn import QDEPTH_REGISTER, EcnProfile
from features.load_balancing import LbMode
from hostagent.rdma.agent import congestion_controls
from hostagent.rdma.transport import MODES

RECEIVER, BOTTLENECK_SWITCH = "r1", "leaf3"
SENDERS = {4: ("h1", "h2", "h5", "h6"), 8: ("h1", "h2", "h3", "h4", "h5", "h6", "h7", "h8")}
MESSAGE_BYTES = 65536
MTU = 1024
HPCC_INSTRUCTIONS = ["node_id", "l1_ports", "queue", "tx_bytes", "tx_time", "link_rate"]
DCQCN_K = 10                 # leaf3 marks CE at this queue depth (packets) for DCQCN


LOSSLESS_CLASS, LOSSLESS_DSCP = 3, 26


def with_int_to_host(topo_path: Path):
    """The topology with an `int:` section (RoCEv2, UDP 4791, gets INT with
    HPCC's instructions, delivered to the receiving host) and a `lossless:`
    section (DSCP 26 is class 3, lossless: the fabric cases with PFC mark
    their packets so; the others send DSCP 0, no class)."""
    import yaml
    raw = yaml.safe_load(topo_path.read_text())
    raw["int"] = {"collector": RECEIVER, "watchlist": [
        {"protocol": "udp", "dst_ports": 4791, "instructions": HPCC_INSTRUCTIONS, "max_hops": 4, "to_host": True}]}
    raw["lossless"] = {"queues": 8, "classes": [{"name": "rdma", "class": LOSSLESS_CLASS, "dscp": [LOSSLESS_DSCP],
                                                 "lossless": True}]}
    return topology_from_dict(raw, f"{topo_path.name} + INT to the host + a lossless class")



def percentile(values: list, p: float) -> float:
    if not values:
        return 0.0
    v = sorted(values)
    return float(v[min(len(v) - 1, int(p * len(v)))])


def jain(xs: list[float]) -> float:
    return round(sum(xs) ** 2 / (len(xs) * sum(x * x for x in xs)), 3) if xs and any(xs) else 0.0


def run_case(cc: str, n: int, pfc: bool, topo, net: Network, ctl: FabricController, args, out: Path) -> dict:
    name = f"{cc}-{n}{'-pfc' if pfc else ''}"
    receiver = topo.hosts[RECEIVER]
    port = receiver.switch_port
    senders = [topo.hosts[h] for h in SENDERS[n]]
    queue = LOSSLESS_CLASS if pfc else 0
    for q in (0, LOSSLESS_CLASS):
        ctl.feature("ecn").set_profile(BOTTLENECK_SWITCH, port, None, queue=q)
    ctl.feature("ecn").set_profile(BOTTLENECK_SWITCH, port, EcnProfile.step(DCQCN_K) if cc == "dcqcn"
                                   else EcnProfile.monitor(), queue=queue)
    case_dir = out / name
    case_dir.mkdir(parents=True, exist_ok=True)
    start_at = time.time() + 3.0
    common = ["--mode", args.mode, "--mtu", str(MTU)]
    procs = [rdma_agent(receiver, "receive", start_at=start_at, out_dir=case_dir,
                        extra=[*common, "--duration", str(args.duration + 3.0)])]
    capacity = queue_rate_pps(topo.switches[BOTTLENECK_SWITCH].ports[port].link.bandwidth_mbps)
    for qp, h in enumerate(senders, start=1):
        procs.append(rdma_agent(h, "send", start_at=start_at, out_dir=case_dir, extra=[
            *common, "--dst-ip", receiver.ip, "--qp", str(qp), "--cc", cc, "--duration", str(args.duration),
            "--message-bytes", str(MESSAGE_BYTES), "--line-rate-pps", str(capacity),
            *(["--dscp", str(LOSSLESS_DSCP), "--tclass", str(LOSSLESS_CLASS), "--link-mbps",
               str(topo.switches[h.switch].ports[h.switch_port].link.bandwidth_mbps)] if pfc else [])]))
    samples: list = []
    stop = threading.Event()
    sw = topo.switches[BOTTLENECK_SWITCH]
    with Bmv2Thrift(sw.thrift_port) as thrift:
        thrift.register_write(QDEPTH_REGISTER, port, 0)
        time.sleep(max(0.0, start_at - time.time()))
        sampler = threading.Thread(target=sample_queue, args=(thrift, port, stop, start_at, samples))
        sampler.start()
        for p in procs[1:]:
            p.wait(timeout=args.duration + 60)
        stop.set()
        sampler.join()
        procs[0].terminate()
        procs[0].wait(timeout=15)
    net.check_alive()
    if any(p.returncode for p in procs[1:]):
        raise RuntimeError(f"{name}: a sender failed (exit codes {[p.returncode for p in procs[1:]]})")
    tx = [json.loads((case_dir / f"send-{h.name}.json").read_text()) for h in senders]
    rx = json.loads((case_dir / f"receive-{RECEIVER}.json").read_text())
    with open(case_dir / "queue.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["t_s", "qdepth_pkts"])
        w.writerows((round(t, 4), q) for t, q in samples)
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
        "sent": sum(t["sent"] for t in tx),
    }
    _plot_case(result, samples, tx, senders, case_dir)
    return result


def _plot_case(result: dict, samples, tx, senders, case_dir: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(2, 1, figsize=(9, 5.5), sharex=True)
    for h in senders:
        rows = list(csv.DictReader(open(case_dir / f"send-{h.name}.csv")))
        axes[0].plot([float(r["t"]) for r in rows], [float(r["rate_pps"]) for r in rows], lw=0.8, label=h.name)
    axes[0].set_ylabel("sending rate (pkts/s)")
    axes[0].legend(fontsize=7, ncol=4)
    axes[1].plot([t for t, _ in samples], [q for _, q in samples], lw=0.7, color="black")
    axes[1].set_ylabel("bottleneck queue (pkts)")
    axes[1].set_xlabel("time (s)")
    axes[0].set_title(f"{result['case']}: utilisation {result['utilisation']:.0%}, Jain {result['jain']}, "
                      f"queue p50/p99 {result['queue_p50']:g}/{result['queue_p99']:g}", fontsize=9)
    save_figure(fig, case_dir / "timeseries.png")


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
    ctl.feature("ecn").set_profile(BOTTLENECK_SWITCH, receiver.switch_port, EcnProfile.monitor())
    capacity = queue_rate_pps(port.link.bandwidth_mbps)
    case_dir = out / name
    case_dir.mkdir(parents=True, exist_ok=True)
    undo = drop_fraction(port.iface, loss_pct / 100) if loss_pct else (lambda: None)
    try:
        start_at = time.time() + 3.0
        common = ["--mode", mode, "--mtu", str(MTU)]
        rx = rdma_agent(receiver, "receive", start_at=start_at, out_dir=case_dir,
                        extra=[*common, "--duration", str(args.duration + 3.0)])
        tx = rdma_agent(sender, "send", start_at=start_at, out_dir=case_dir, extra=[
            *common, "--dst-ip", receiver.ip, "--qp", "1", "--cc", "dcqcn", "--duration", str(args.duration),
            "--message-bytes", str(MESSAGE_BYTES), "--line-rate-pps", str(capacity)])
        tx.wait(timeout=args.duration + 60)
        rx.terminate()
        rx.wait(timeout=15)
    finally:
        undo()
    net.check_alive()
    if tx.returncode:
        raise RuntimeError(f"{name}: the sender failed (exit code {tx.returncode})")
    sent = json.loads((case_dir / f"send-{sender.name}.json").read_text())
    return {"case": name, "mode": mode, "loss_pct": loss_pct, "messages": sent["messages_completed"],
            "goodput_mbps": round(sent["messages_completed"] * MESSAGE_BYTES * 8 / args.duration / 1e6, 3),
            "sent": sent["sent"], "retransmitted": sent["retransmitted"], "timeouts": sent["timeouts"],
            "naks": sent["naks"], "fct_p50_ms": (sent["completion_ms"] or {}).get("p50", "")}


SLOW_PATH_PPS = 500
SPRAY_CASES = (("go-back-n", False), ("go-back-n", True), ("selective-repeat", False))


def run_spray_case(mode: str, reorder: bool, topo, net: Network, ctl: FabricController, args, out: Path) -> dict:
    name = f"{mode}{'-reorder' if reorder else ''}"
    receiver, sender = topo.hosts[RECEIVER], topo.hosts["h1"]
    ctl.feature("ecn").set_profile(BOTTLENECK_SWITCH, receiver.switch_port, EcnProfile.monitor())
    capacity = queue_rate_pps(topo.switches[BOTTLENECK_SWITCH].ports[receiver.switch_port].link.bandwidth_mbps)
    case_dir = out / name
    case_dir.mkdir(parents=True, exist_ok=True)
    start_at = time.time() + 3.0
    common = ["--mode", mode, "--mtu", str(MTU)]
    rx = rdma_agent(receiver, "receive", start_at=start_at, out_dir=case_dir,
                    extra=[*common, "--duration", str(args.duration + 3.0), *(["--reorder"] if reorder else [])])
    tx = rdma_agent(sender, "send", start_at=start_at, out_dir=case_dir, extra=[
        *common, "--dst-ip", receiver.ip, "--qp", "1", "--cc", "dcqcn", "--duration", str(args.duration),
        "--message-bytes", str(MESSAGE_BYTES), "--line-rate-pps", str(capacity)])
    tx.wait(timeout=args.duration + 60)
    rx.terminate()
    rx.wait(timeout=15)
    net.check_alive()
    if tx.returncode:
        raise RuntimeError(f"{name}: the sender failed (exit code {tx.returncode})")
    sent = json.loads((case_dir / f"send-{sender.name}.json").read_text())
    got = json.loads((case_dir / f"receive-{RECEIVER}.json").read_text())
    flow = next(iter(got["flows"].values()))
    rob: dict = next(iter((got["reorder"] or {}).values()), {})
    return {"case": name, "mode": mode, "reorder_buffer": reorder, "messages": sent["messages_completed"],
            "goodput_mbps": round(sent["messages_completed"] * MESSAGE_BYTES * 8 / args.duration / 1e6, 3),
            "sent": sent["sent"], "retransmitted": sent["retransmitted"], "naks": sent["naks"],
            "timeouts": sent["timeouts"], "out_of_order_at_transport": flow["out_of_order"],
            "held_by_reorder_buffer": rob.get("held", "")}


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


PHASES = ("incast", "loss", "spray")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--phases", nargs="*", default=list(PHASES), choices=PHASES)
    ap.add_argument("--ccs", nargs="*", default=sorted(congestion_controls()), choices=sorted(congestion_controls()))
    ap.add_argument("--senders", nargs="*", type=int, default=[4, 8], choices=sorted(SENDERS))
    ap.add_argument("--losses", nargs="*", type=float, default=[0, 0.1, 1, 2, 5], help="loss phase: percent")
    ap.add_argument("--duration", type=float, default=10.0, help="seconds of traffic per case")
    ap.add_argument("--mode", choices=MODES, default=MODES[0], help="incast phase: retransmission mode")
    ap.add_argument("--fabrics", nargs="*", default=["lossy", "pfc"], choices=["lossy", "pfc"],
                    help="incast phase: a lossy class, and/or a lossless one (PFC; senders honour pauses)")
    ap.add_argument("--out", default=str(REPO / "experiments" / "results" / "rdma"))
    ap.add_argument("--log-level", default=DEFAULT_EXPERIMENT_LOG_LEVEL, choices=LOG_LEVELS)
    args = ap.parse_args(argv)
    args.fabrics = [f == "pfc" for f in args.fabrics]
    out = Path(args.out)
    topo = with_int_to_host(REPO / "topologies" / "incast-leaf-spine.yaml")
    compile_p4()
    written = []
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
        if "spray" in args.phases:
            spray_out = out / "spray"
            spray_out.mkdir(parents=True, exist_ok=True)
            spine2 = topo.switches["spine2"]
            (slow_port,) = [p.number for p in spine2.ports.values() if p.peer == BOTTLENECK_SWITCH]
            ctl.feature("load_balancing").set_mode("leaf1", LbMode("spray"))
            with Bmv2Thrift(spine2.thrift_port) as thrift:
                thrift.set_queue_rate(slow_port, SLOW_PATH_PPS)
            results = []
            try:
                for mode, reorder in SPRAY_CASES:
                    print(f"==> {mode}{' + reorder buffer' if reorder else ''}: {args.duration:g}s h1 -> {RECEIVER} "
                          f"sprayed over both spines (spine2 -> leaf3 at {SLOW_PATH_PPS} packets/s)", flush=True)
                    results.append(run_spray_case(mode, reorder, topo, net, ctl, args, spray_out))
            finally:
                ctl.feature("load_balancing").set_mode("leaf1", LbMode())
                net.apply_queue_rates()
            written.append(write_csv(spray_out / "summary.csv", results))
            print_table(results)
    print(f"\nresults: {', '.join(map(str, written))}, and per case <case>/ (timeseries.png, the agents' CSV/JSON)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
