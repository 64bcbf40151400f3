#!/usr/bin/env python3
"""Incast 4:1 in a lossless class: lossy, with PFC, and with PFC + DCQCN.

    fabric experiment lossless [--duration 10] [--out experiments/results/lossless]

Brings topologies/incast.yaml up on BMv2 (4 senders, 1 receiver whose port
is served at 800 packets/s) with a `lossless:` section: DSCP 26 is class 3.
Four RoCEv2 senders (hostagent.ecn.roce) send class-3 packets at 500
packets/s each, 2.5x the bottleneck, starting together. Cases:

  lossy       class 3 is not lossless; senders ignore PFC: tail drops.
  pfc         class 3 is lossless (XOFF 24, XON 12, headroom 32); the
              switch pauses each sender's port, the senders honour pauses
              (a lossless NIC): no drops.
  pfc-dcqcn   the same, plus step ECN (K 10) at the bottleneck and DCQCN
              senders: they slow down, so fewer pauses are needed.

Recorded per case: packets sent/received, drops (PSN gaps at the receiver,
and the switch's lossless headroom drops), what the buffer model still
counts once the traffic has left (must be 0), pauses and resumes the switch
sent, pauses the senders received; throughput per flow over time. Writes CSV and PNG under --out and
prints a table and where the files went.
"""
from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

from core.bmv2 import DEFAULT_EXPERIMENT_LOG_LEVEL, LOG_LEVELS
from core.bmv2_thrift import Bmv2Thrift
from core.build import compile_p4
from core.controller import FabricController
from core.network import Network, queue_rate_pps
from core.p4constants import drop_reasons
from experiments.common import save_figure, write_csv
from features import load_topology
from features.ecn import EcnProfile
from features.lossless import OCCUPANCY_REGISTER, SECTION, LosslessConfig, PfcThresholds, TrafficClass, cell

TCLASS, DSCP = 3, 26
RECEIVER, SWITCH = "h5", "s1"


@dataclass(frozen=True)
class Case:
    name: str
    lossless: bool
    dcqcn: bool


CASES = [Case("lossy", False, False), Case("pfc", True, False), Case("pfc-dcqcn", True, True)]


def section(lossless: bool) -> LosslessConfig:
    return LosslessConfig(queues=8, classes=(TrafficClass("collective", TCLASS, TCLASS, (DSCP,), lossless),),
                          pfc=PfcThresholds(xoff=24, xon=12, headroom=32))


def run_case(case: Case, topo, net: Network, ctl: FabricController, args, out: Path) -> dict:
    receiver = topo.hosts[RECEIVER]
    senders = [h for h in topo.hosts.values() if h.role == "sender"]
    port = receiver.switch_port
    topo.features[SECTION] = section(case.lossless)
    ctl.program_all()
    ctl.feature("ecn").set_profile(SWITCH, port, EcnProfile.step(10) if case.dcqcn else EcnProfile.monitor())
    sender_ports = [h.switch_port for h in senders]

    def counters(name: str, ports) -> int:
        return sum(ctl.counter(SWITCH, name, cell(p, TCLASS)).get(cell(p, TCLASS), (0, 0))[0] for p in ports)

    before = {n: counters(n, sender_ports) for n in ("pfc_pause_sent", "pfc_resume_sent")}
    headroom = drop_reasons()["LOSSLESS_HEADROOM"]
    drops_before = ctl.counter(SWITCH, "drop_counter", headroom).get(headroom, (0, 0))[0]
    py = str(REPO / ".venv" / "bin" / "python") if (REPO / ".venv").exists() else sys.executable
    start_at = time.time() + 3.0
    case_dir = out / case.name
    case_dir.mkdir(parents=True, exist_ok=True)

    def agent(host, role: str, extra: list[str]) -> subprocess.Popen:
        cmd = ["ip", "netns", "exec", host.name, py, "-m", "hostagent.ecn.roce", role, "--iface", host.iface,
               "--src-ip", host.ip, "--src-mac", host.mac, "--gw-mac", host.gateway_mac,
               "--start-at", str(start_at), "--out", str(case_dir / f"{role}-{host.name}"), *extra]
        return subprocess.Popen(cmd, cwd=REPO)

    procs = [agent(receiver, "receive", ["--duration", str(args.duration + 1.0)])]
    for i, h in enumerate(senders, start=1):
        extra = ["--duration", str(args.duration), "--dst-ip", receiver.ip, "--qp", str(i),
                 "--line-rate-pps", str(args.sender_rate), "--dscp", str(DSCP)]
        extra += [] if case.dcqcn else ["--fixed-rate", "--not-ect"]
        if case.lossless:      # a lossless NIC: honours pauses of its class, timed on its link
            link = topo.switches[SWITCH].ports[h.switch_port].link
            extra += ["--tclass", str(TCLASS), "--link-mbps", str(link.bandwidth_mbps)]
        procs.append(agent(h, "send", extra))
    for p in procs:
        p.wait(timeout=args.duration + 30)
    net.check_alive()
    time.sleep(0.5)                                     # the last packets leave
    with Bmv2Thrift(topo.switches[SWITCH].thrift_port) as thrift:   # the buffer model back to empty
        occupancy_left = sum(thrift.register_read(OCCUPANCY_REGISTER, cell(p, TCLASS)) for p in sender_ports)
    if any(p.returncode for p in procs):
        raise RuntimeError(f"{case.name}: an agent failed (exit codes {[p.returncode for p in procs]})")
    rx = json.loads((case_dir / f"receive-{RECEIVER}.json").read_text())
    tx = {h.name: json.loads((case_dir / f"send-{h.name}.json").read_text()) for h in senders}
    flows = rx["flows"].values()
    received = sum(f["packets"] for f in flows)
    capacity = queue_rate_pps(topo.switches[SWITCH].ports[port].link.bandwidth_mbps)
    warm = args.duration * 0.2
    bins = _read_bins(case_dir / f"receive-{RECEIVER}.csv")
    steady = sum(n for (t, _f), n in bins.items() if warm <= t < args.duration)
    result = {
        "case": case.name,
        "sent": sum(t["sent"] for t in tx.values()),
        "received": received,
        "drops": sum(f["lost"] for f in flows),
        "headroom_drops": ctl.counter(SWITCH, "drop_counter", headroom).get(headroom, (0, 0))[0] - drops_before,
        "occupancy_left": occupancy_left,
        "pauses_sent": counters("pfc_pause_sent", sender_ports) - before["pfc_pause_sent"],
        "resumes_sent": counters("pfc_resume_sent", sender_ports) - before["pfc_resume_sent"],
        "pauses_received": sum(sum((t["pfc"] or {}).get("pauses", [0])) for t in tx.values()),
        "cnps_received": sum(t["cnps_received"] for t in tx.values()),
        "utilisation": round(steady / ((args.duration - warm) * capacity), 3),
    }
    _plot_case(case, result, bins, case_dir, capacity, rx["bin_s"])
    return result


def _read_bins(path: Path) -> dict:
    """(t, flow) -> packets received."""
    with open(path) as f:
        return {(float(r["t_s"]), r["flow"]): int(r["packets"]) for r in csv.DictReader(f)}


def _plot_case(case: Case, result: dict, bins, case_dir: Path, capacity: int, bin_s: float) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(9, 3.5))
    for flow in sorted({fl for _t, fl in bins}):
        pts = sorted((t, n / bin_s) for (t, fl), n in bins.items() if fl == flow)
        ax.plot([p[0] for p in pts], [p[1] for p in pts], lw=1, label=f"flow {flow}")
    ax.axhline(capacity / 4, color="grey", ls=":", lw=1, label="fair share")
    ax.set_xlabel("time (s)")
    ax.set_ylabel("throughput (pkts/s)")
    ax.legend(fontsize=7, ncol=5)
    ax.set_title(f"{case.name}: drops {result['drops']}, pauses sent {result['pauses_sent']}, "
                 f"utilisation {result['utilisation']:.0%}", fontsize=9)
    save_figure(fig, case_dir / "throughput.png")


def _plot_summary(results: list[dict], out: Path) -> Path:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 3, figsize=(11, 3.2))
    names = [r["case"] for r in results]
    for ax, key, label in zip(axes, ["drops", "pauses_sent", "utilisation"],
                              ["drops (packets)", "pauses sent by the switch", "utilisation"]):
        ax.bar(names, [r[key] for r in results], color=["#999", "#3a7", "#37a"][:len(names)])
        ax.set_title(label, fontsize=9)
    return save_figure(fig, out / "summary.png")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--duration", type=float, default=10.0, help="seconds of traffic per case")
    ap.add_argument("--sender-rate", type=float, default=500.0, help="sender line rate, pkts/s (4 senders)")
    ap.add_argument("--out", default=str(REPO / "experiments" / "results" / "lossless"))
    ap.add_argument("--log-level", default=DEFAULT_EXPERIMENT_LOG_LEVEL, choices=LOG_LEVELS)
    ap.add_argument("--cases", nargs="*", default=[c.name for c in CASES], choices=[c.name for c in CASES])
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    topo = load_topology(REPO / "topologies" / "incast.yaml")
    topo.features[SECTION] = section(True)          # the switches start with its queues
    compile_p4()
    results = []
    with Network(topo, REPO / "build" / "experiments" / "lossless", log_level=args.log_level) as net, \
            FabricController(topo) as ctl:
        ctl.program()
        net.apply_queue_rates()
        for case in (c for c in CASES if c.name in args.cases):
            print(f"==> {case.name}: {args.duration:g}s of 4:1 incast in class {TCLASS} "
                  f"({'lossless' if case.lossless else 'lossy'}{', DCQCN' if case.dcqcn else ''})", flush=True)
            results.append(run_case(case, topo, net, ctl, args, out))
    summary = write_csv(out / "summary.csv", results)
    png = _plot_summary(results, out)
    cols = list(results[0])
    print("\n" + " ".join(f"{c:>15s}" for c in cols))
    for r in results:
        print(" ".join(f"{r[c]!s:>15s}" for c in cols))
    print(f"\nresults: {summary}, {png}, and per case <case>/throughput.png + the agents' CSV/JSON")
    return 0


if __name__ == "__main__":
    sys.exit(main())
