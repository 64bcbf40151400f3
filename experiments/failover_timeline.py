#!/usr/bin/env python3
"""Failure timeline: what a link failure and a switch failure cost a steady
flow mix under each kind of protection, on leaf-spine and dual-plane.

    fabric experiment failover_timeline [ARGS="--after 3 --rate 100"]

Traffic: every host sends to every host behind the other leaf (of the first
plane), 8 UDP flows per pair (ECMP spreads them over the spines), --rate
packets/s per pair, acknowledged by the receivers every 10 ms
(hostagent/failover/plane_failover.py). At t0 one of:

  link       the first leaf's link to the first spine (of plane a)
             black-holes both ways (a qdisc that drops everything: the ports
             stay up, the failure a port-state watch cannot see);
  switch     the first spine's process (of plane a) is killed.

Protections (each on a fresh network):

  controller   no failover in the data plane; the controller reads the
               heartbeat registers every 200 ms and reroutes (Rerouter)
               -- the issue's "no protection" baseline;
  data plane   heartbeats every 20 ms, 100 ms timeout: the leaves move the
               dead member's slots to their backups (failover.p4); the
               controller reroutes as well, as `make run` does;
  host         dual-plane only, no protection in the switches: a flow
               whose acks stop for 100 ms moves to the peer's address on
               the other plane.

Per run: packets sent and lost after t0; the outage: the send time of the
last packet lost before the first 200 ms without loss (the few stray
losses of steady state, counted before t0 as lost_before_t0, are not the
failure's); the controller's reroute time; the flows that moved plane;
what the switches dropped, by reason; the run's fidelity verdict (a switch
the run kills is left out of it; docs/fidelity.md). Each failure is
repeated --repeats times; the table gives the median and the largest
outage.
Writes runs.csv, timeline.csv (per 20 ms of send time: packets sent, lost,
and the delivered share) and
timeline.png under --out (default experiments/results/failover_timeline/).
"""
from __future__ import annotations

import contextlib
import json
import select
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from statistics import median

REPO = Path(__file__).resolve().parent.parent

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import yaml

from features.failover import diagnose
from emulator.bmv2 import DEFAULT_EXPERIMENT_LOG_LEVEL, LOG_LEVELS
from emulator.build import compile_p4
from emulator.dilation import Dilation, DilationError
from control.controller import FabricController
from emulator.network import Network
from features.failover.rerouting import Rerouter
from features import topology_from_dict
from experiments.common import case_fidelity, experiment_parser, fail_link, kill_switch, lost_before_pipeline, \
    print_fidelity
from experiments.common import save_figure, write_csv
from features.failover.heartbeat import running_heartbeats

HEARTBEAT_MS, TIMEOUT_MS, ACK_MS = 20, 100, 10
POLL_MS = 200          # the controller's reading of the heartbeat registers (Rerouter)
DEFAULT_DILATION = 4.0     # every case of a run faithful on a 2-core machine (docs/features/failover.md)
PROTECTIONS = {"leaf-spine": ("controller", "data plane"), "dual-plane": ("controller", "data plane", "host")}
FAILURES = ("link", "switch")
BIN_S = 0.02
QUIET_S = 0.2          # twice the failover timeout: an outage is continuous loss


def fabric(name: str, protection: str, dilation: Dilation = Dilation()):
    """The topology with no other feature, plus failover for `data plane`;
    its links and the failover's timers dilated."""
    raw = yaml.safe_load((REPO / "topologies" / f"{name}.yaml").read_text())
    for section in ("int", "aggregation", "ecn", "load_balancing", "failover", "monitoring"):
        raw.pop(section, None)
    if protection == "data plane":
        raw["failover"] = {"heartbeat_ms": HEARTBEAT_MS, "timeout_ms": TIMEOUT_MS}
    return topology_from_dict(dilation.topology(raw), f"{name} ({protection})"
                              + (f", dilated {dilation}" if dilation.factor > 1 else ""))


def targets(topo) -> tuple[str, str]:
    """(leaf, spine) of the first plane: the first leaf and spine by name."""
    plane = topo.planes[0] if topo.planes else None
    on = [s for s in sorted(topo.switches.values(), key=lambda s: s.name) if s.plane == plane]
    return (next(s.name for s in on if s.role == "leaf"), next(s.name for s in on if s.role == "spine"))


def pairs(topo) -> dict[str, dict[str, list[str]]]:
    """sender -> {peer: the peer's address per plane} for hosts behind different leaves."""
    first = {h.name: h.primary.switch for h in topo.hosts.values()}
    return {a: {b: [n.ip for n in sorted(topo.hosts[b].nics.values(), key=lambda n: n.index)]
                for b in topo.hosts if first[b] != first[a]}
            for a in topo.hosts}


def drops_by_reason(before, after) -> str:
    """Packets the switches dropped between two counter snapshots, by reason
    (switches that did not answer both times are left out)."""
    total: Counter[str] = Counter()                  # reason -> packets
    for s, now in after.drops.items():
        if now is not None and before.drops.get(s) is not None:
            total.update({r: n - before.drops[s].get(r, 0) for r, n in now.items() if n > before.drops[s].get(r, 0)})
    return "; ".join(f"{r} {n}" for r, n in sorted(total.items())) or "none"


def outage_s(lost_after: list[float], quiet_s: float = QUIET_S) -> float:
    """When the outage a failure caused ended: the send time of the last lost
    packet before the first loss-free stretch of quiet_s (a stray loss
    later, like the ones before t0, is not the failure's)."""
    last = 0.0
    for t in sorted(lost_after):
        if t - last >= quiet_s:
            break
        last = t
    return last


def one_run(name: str, topo, net, ctl, protection: str, failure: str, args, rerouter: Rerouter | None,
            lock: threading.Lock) -> tuple[dict, list]:
    leaf, spine = targets(topo)
    index = {h: i for i, h in enumerate(sorted(topo.hosts))}
    work = args.run_dir / f"{name}-{protection}-{failure}".replace(" ", "_")
    work.mkdir(parents=True, exist_ok=True)
    counters_before = diagnose.snapshot(ctl)
    fidelity = case_fidelity(net, ctl, lock=lock)
    d = args.dilation.factor                 # wall time = d x the network's time
    duration = (args.before + args.after + 0.3) * d
    agents = [Agent(h, ["receive", "--duration", str(duration + 2.0), "--ack-ms", str(ACK_MS * d)], work / f"rx-{h}")
              for h in topo.hosts]
    for a in agents:
        a.wait_ready()                       # before any sender starts: nothing is sent to a closed port
    agents += [Agent(h, ["send", "--host", h, "--sender-id", str(index[h]), "--rate", str(args.rate / d),
                         "--timeout-ms", str(TIMEOUT_MS * d), "--duration", str(duration)]
                     + [f"--peer={p}={','.join(a)}" for p, a in sorted(peers.items())]
                     + ([] if protection == "host" else ["--no-failover"]), work / f"tx-{h}")
               for h, peers in pairs(topo).items() if peers]
    undo = None
    try:
        for a in agents:
            a.wait_ready()
        fidelity.traffic_starts()
        time.sleep(args.before * d)
        changes_before = len(rerouter.changes) if rerouter else 0
        t0, t0_wall = time.monotonic(), time.time()
        undo = {"link": lambda: fail_link(topo, leaf, spine),
                "switch": lambda: kill_switch(net, ctl, spine, lock)}[failure]()
        results = {(a.host, a.role): a.result() for a in agents}
    finally:
        for a in agents:
            a.stop()
    counters_after = diagnose.snapshot(ctl)
    verdict = fidelity.verdict()
    received = [r for (_, role), res in results.items() if role == "receive" for r in res["received"]]
    senders = {h: res for (h, role), res in results.items() if role == "send"}
    got = {(s, f, q) for (_, s, f, q, _) in received}
    # from here on every time is the network's: the wall clock's over the dilation
    sent = [((t - t0) / d, index[h], f, q) for h, res in senders.items() for (t, _, f, q, _) in res["sent"]]
    lost = [t for t, s, f, q in sent if (s, f, q) not in got and t < args.after - 0.2]   # the tail is in flight
    lost_before = [t for t in lost if t < 0]
    lost_after = [t for t in lost if t >= 0]
    rerouted = None
    if rerouter and len(rerouter.changes) > changes_before:
        rerouted = (rerouter.changes[changes_before][0] - t0_wall) / d
    row = {"topology": name, "protection": protection, "failure": failure,
           "target": spine if failure == "switch" else f"{leaf}-{spine}",
           "sent_after_t0": sum(1 for t, *_ in sent if t >= 0), "lost": len(lost_after),
           "lost_before_t0": len(lost_before),
           "outage_ms": round(1000 * outage_s(lost_after), 1),
           "rerouted_ms": round(1000 * rerouted, 1) if rerouted is not None else "",
           "flows_moved": sum(len({m[0] for m in res["moves"] if m[1] >= t0}) for res in senders.values()),
           "moves_before_t0": sum(1 for res in senders.values() for m in res["moves"] if m[1] < t0),
           "flows": sum(res["flows"] for res in senders.values()),
           "last_second_lost": sum(1 for t in lost_after if t >= args.after - 1.2),
           "switch_drops": drops_by_reason(counters_before, counters_after),
           "lost_before_pipeline": lost_before_pipeline(f"{name} {protection} {failure}", verdict),
           "fidelity": str(verdict), "dilation": str(args.dilation),
           "cpu_wait": f"{verdict.cpu.wait_share:.0%}" if verdict.cpu and verdict.cpu.wait_share is not None else ""}
    sent_in = Counter(int((t + args.before) // BIN_S) for t, *_ in sent)
    lost_in = Counter(int((t + args.before) // BIN_S) for t in lost)
    bins = int((args.before + args.after - 0.2) / BIN_S)
    timeline = [{"topology": name, "protection": protection, "failure": failure,
                 "t_ms": round(1000 * (-args.before + i * BIN_S), 1), "sent": sent_in.get(i, 0),
                 "lost": lost_in.get(i, 0),
                 "delivered_pct": round(100 * (1 - lost_in.get(i, 0) / sent_in[i]), 1) if sent_in.get(i) else ""}
                for i in range(bins)]
    if undo is not None:
        undo()
    return row, timeline


class Agent:
    """One host's sender or receiver (hostagent.failover.plane_failover) as a process
    of its own in the host's namespace: in this process, a pause of the
    interpreter (a counter snapshot, a reroute) delayed acks by 100 ms and
    moved healthy flows."""

    def __init__(self, host: str, args: list[str], prefix: Path):
        self.host, self.role, self.out = host, args[0], prefix.with_suffix(".json")
        self.ready = False
        self.log = open(prefix.with_suffix(".log"), "w")
        self.proc = subprocess.Popen(["ip", "netns", "exec", host, sys.executable, "-m", "hostagent.failover.plane_failover",
                                      *args, "--out", str(self.out)], cwd=REPO, stdout=subprocess.PIPE,
                                     stderr=self.log, text=True)
        assert self.proc.stdout is not None  # stdout=PIPE
        self.stdout = self.proc.stdout       # "ready" once the sockets are open

    def wait_ready(self, timeout_s: float = 20.0) -> None:
        if self.ready:
            return
        ready, _, _ = select.select([self.stdout], [], [], timeout_s)
        if not ready or self.stdout.readline().strip() != "ready":
            raise RuntimeError(f"{self.role} on {self.host} did not start: see {self.log.name}")
        self.ready = True

    def result(self, timeout_s: float = 60.0) -> dict:
        if self.proc.wait(timeout_s) != 0:
            raise RuntimeError(f"{self.role} on {self.host} failed (exit {self.proc.returncode}): see {self.log.name}")
        return json.loads(self.out.read_text())

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.stdout.close()
        self.log.close()


def wait_for_routes_back(ctl, rerouter: Rerouter | None, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while rerouter and ctl.failed and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(0.5)


def main(argv=None) -> int:
    ap = experiment_parser("failover_timeline", __doc__)
    ap.add_argument("--topologies", nargs="+", default=list(PROTECTIONS), choices=list(PROTECTIONS))
    ap.add_argument("--protections", nargs="+", default=None,
                    choices=sorted({p for ps in PROTECTIONS.values() for p in ps}),
                    help="only these (default: every one the topology has)")
    ap.add_argument("--failures", nargs="+", default=list(FAILURES), choices=FAILURES)
    ap.add_argument("--rate", type=float, default=100.0, help="packets/s per host pair (BMv2 and Python share 2 cores here)")
    ap.add_argument("--before", type=float, default=1.0, help="seconds of steady traffic before t0")
    ap.add_argument("--after", type=float, default=3.0, help="seconds observed after t0")
    ap.add_argument("--repeats", type=int, default=3, help="runs of each failure")
    ap.add_argument("--out", default=str(REPO / "experiments" / "results" / "failover_timeline"),
                    help="results directory (default %(default)s)")
    ap.add_argument("--dilation", type=float, default=DEFAULT_DILATION, metavar="D",
                    help="run the network D times slower (emulator/dilation.py): link rates and --rate divided by D, "
                         "heartbeats, timeouts, acks and the controller's polling D times longer, the run D times "
                         "longer; times are reported in the network's time (default %(default)g, what kept every "
                         "case faithful on a 2-core machine; 1: as the topology says)")
    ap.add_argument("--log-level", default=DEFAULT_EXPERIMENT_LOG_LEVEL, choices=LOG_LEVELS)
    args = ap.parse_args(argv)
    if args.rate <= 0 or args.before < 0.5 or args.after < 1.5 or args.repeats < 1:
        ap.error("--rate must be positive, --before at least 0.5 s, --after at least 1.5 s, --repeats at least 1")
    try:
        args.dilation = Dilation(args.dilation)
    except DilationError as exc:
        ap.error(f"--dilation: {exc}")
    if args.dilation.factor > 1:
        print(f"dilation: {args.dilation}: the network runs {args.dilation.factor:g} times slower; "
              f"every time below is the network's", flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    args.run_dir = REPO / "build" / "experiments" / "failover_timeline" / "agents"
    compile_p4()
    rows, timeline = [], []
    plan = [(t, p) for t in args.topologies for p in PROTECTIONS[t]
            if args.protections is None or p in args.protections]
    for n, (name, protection) in enumerate(plan, 1):
        topo = fabric(name, protection, args.dilation)
        print(f"[{n}/{len(plan)}] {name}, {protection} protection", flush=True)
        with Network(topo, REPO / "build" / "experiments" / "failover_timeline", log_level=args.log_level) as net, \
                FabricController(topo) as ctl:
            ctl.program()
            protected = protection in ("controller", "data plane")
            d = args.dilation.factor
            with running_heartbeats(topo, HEARTBEAT_MS * d / 1000) if protected else contextlib.nullcontext():
                lock = threading.Lock()
                rerouter = Rerouter(ctl, TIMEOUT_MS * d, lock, on_change=lambda m: None) if protected else None
                stop = threading.Event()
                thread = threading.Thread(target=rerouter.run, args=(stop, POLL_MS * d / 1000), daemon=True) \
                    if rerouter else None
                if thread:
                    thread.start()
                time.sleep(0.5)
                try:
                    for failure in args.failures:
                        for repeat in range(1, args.repeats + 1):
                            row, tl = one_run(name, topo, net, ctl, protection, failure, args, rerouter, lock)
                            row = {"repeat": repeat, **row}
                            rows.append(row)
                            if repeat == 1:
                                timeline += tl
                            print(f"    {failure:6s} {row['target']:15s} #{repeat} lost {row['lost']:4d} of "
                                  f"{row['sent_after_t0']}, outage {row['outage_ms']:6.1f} ms"
                                  + (f", rerouted at {row['rerouted_ms']} ms" if row["rerouted_ms"] != "" else "")
                                  + (f", {row['flows_moved']}/{row['flows']} flows moved plane"
                                     if protection == "host" else ""), flush=True)
                            wait_for_routes_back(ctl, rerouter)
                finally:
                    stop.set()
                    if thread:
                        thread.join()
    write_csv(out / "runs.csv", rows)
    write_csv(out / "timeline.csv", timeline)
    png = plot(timeline, args, out / "timeline.png")
    print("\n" + table(rows))
    print_fidelity([{"case": f"{r['topology']} {r['protection']} {r['failure']} #{r['repeat']}",
                     "fidelity": r["fidelity"]} for r in rows])
    print(f"results: {out / 'runs.csv'}, {out / 'timeline.csv'}, {png}")
    return 0


def table(rows: list[dict]) -> str:
    """Per (topology, protection, failure): median and largest outage and loss."""
    lines = ["| topology | protection | failure | outage ms, median (max) | packets lost, median (max) "
             "| controller rerouted at, median ms |", "|---|---|---|---:|---:|---:|"]
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["topology"], r["protection"], r["failure"]), []).append(r)
    for (topology, protection, failure), rs in groups.items():
        outage = [r["outage_ms"] for r in rs]
        lost = [r["lost"] for r in rs]
        rerouted = [r["rerouted_ms"] for r in rs if r["rerouted_ms"] != ""]
        lines.append(f"| {topology} | {protection} | {failure} | {median(outage):.0f} ({max(outage):.0f}) | "
                     f"{median(lost):.0f} ({max(lost)}) | {f'{median(rerouted):.0f}' if rerouted else '-'} |")
    return "\n".join(lines)


def plot(timeline: list[dict], args, path: Path) -> Path:
    topologies = list(dict.fromkeys(r["topology"] for r in timeline))
    failures = list(dict.fromkeys(r["failure"] for r in timeline))
    fig, axes = plt.subplots(len(failures), len(topologies), figsize=(4.6 * len(topologies), 3.2 * len(failures)),
                             squeeze=False, sharey=True)
    for i, failure in enumerate(failures):
        for j, topology in enumerate(topologies):
            ax = axes[i][j]
            for protection in dict.fromkeys(r["protection"] for r in timeline if r["topology"] == topology):
                pts = [r for r in timeline if (r["topology"], r["failure"], r["protection"]) ==
                       (topology, failure, protection)]
                pts = [r for r in pts if r["delivered_pct"] != ""]
                ax.plot([r["t_ms"] for r in pts], [r["delivered_pct"] for r in pts], label=protection, lw=1.2,
                        drawstyle="steps-post")
            ax.axvline(0, color="k", lw=0.8, ls=":")
            ax.set_xlim(-200, 1000 * min(args.after - 0.2, 1.2))
            ax.set_title(f"{topology}: {failure} failed at t=0", fontsize=10)
            ax.set_xlabel("ms from the failure")
            if j == 0:
                ax.set_ylabel(f"delivered (% of sent, by send time, {int(BIN_S * 1000)} ms bins)", fontsize=8)
            ax.legend(fontsize=8, loc="lower right")
    return save_figure(fig, path)


if __name__ == "__main__":
    sys.exit(main())
