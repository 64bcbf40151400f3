#!/usr/bin/env python3
"""Load balancing beyond ECMP (issue 8's headline): elephants between racks
or pods over ECMP, ECMP with PLB repathing, flowlets, per-packet spraying and
adaptive (queue-aware) choice, on leaf-spine and on a k=4 fat tree.

    fabric experiment load_balancing [--seeds 20] [--duration 2] [--plb-duration 3.5]
        [--topologies leaf-spine fat-tree-k4] [--modes ecmp ecmp+plb flowlet spray adaptive]
        [--flows N ...] [--no-asymmetric] [--no-fct] [--out experiments/results/load_balancing]

The fabric. The topology file is loaded and changed in code: INT is taken
out (leaf-spine ships with it), the links that carry traffic between racks
or pods get --uplink-mbps (default 4.8 Mbit/s: a BMv2 queue rate of 400
packets/s, emulator.network.queue_rate_pps; queues hold 64 packets, BMv2's
default), hosts keep 100 Mbit/s (8333 packets/s). On leaf-spine every
leaf-spine link is slow: the two paths between the leaves are leaf1 ->
spine1 and leaf1 -> spine2. On fat-tree-k4 the aggregation-core links are
slow and edge-aggregation links stay fast, so the bottleneck is exactly the
four core paths between pod 1 and pod 2 (a11 -> c1, a11 -> c2, a12 -> c3,
a12 -> c4); the edge's choice of aggregation switch and the aggregation's
choice of core together decide which of them a packet takes. Every
switch-to-switch port marks ECN at queue depth >= --ecn-k (10), step
profile: in the main phase nothing reacts to it but PLB, whose only
congestion signal is CNPs.

Traffic. N flows from one rack/pod to the other (leaf-spine: h1, h2 -> h3,
h4; fat-tree: h1..h4 in pod 1 -> h5..h8 in pod 2; flow j from sender j mod S
to receiver (j + j div S) mod S), N = number of paths and twice that by
default. Senders are fixed-rate (hostagent.traffic, --fixed-rate, RoCEv2
packets with 1000 bytes of payload, ECT(0)), each at --load (0.95) x
bisection / N: together the flows offer 95% of what the paths carry (one flow
per path: 380 packets/s, what one path can just carry), so when the load is
spread evenly nothing is lost, and goodput is a clean measure of balance:
what a path cannot carry is tail-dropped at its uplink queue.

Seeds. A seed picks the flows' queue pairs, and with them their UDP source
ports (0xC000 | qp, wire.roce) and so their ECMP hash: flow j of seed
s uses QP 1000 (j + 1) + s, the same in every mode (paired comparison). One
network per topology stays up; for each (case, N, mode) the switches are
reprogrammed at runtime (controller.feature("load_balancing").set_mode on every
switch) and every sender runs one `traffic transfer` chain through all seeds
(--count seeds: transfer i is seed first+i, a fresh QP, PSNs from 0,
--gap-s apart), so a seed costs its duration and little else. A transfer is
--duration seconds' worth of packets (ecmp+plb: --plb-duration, since PLB
needs ~1 s of persistent congestion before it moves a flow). One `traffic
receive` per receiving host (reorder buffer on, --reorder-timeout 0.2 s:
above the 160 ms a full 64-packet queue at 400 packets/s adds) sees them
all.

Mode parameters, at this fabric's time scale (features/load_balancing.py's
defaults): flowlet gap 20 ms (a gap below these flows' packet spacing,
2.6-5.3 ms, would start a flowlet at every packet and flowlet mode would be
spraying; at 20 ms a flowlet ends only where the sender paused, which a
paced sender does now and then, ~1-2 times a second here:
`flowlets_per_flow_s`); adaptive believes a recorded queue depth for 20 ms
(below the 2.5 ms between packets on a port every depth would be stale,
read as 0, and adaptive would be spraying too).

Measurement window of a seed: from the latest start of its N transfers
(senders' wall clock) plus --warmup (0.5 s: an overloaded queue fills in
0.2-0.4 s), to the earliest end of any of them (its packets at its rate, and
no later than its last packet's arrival), minus 0.1 s. Within it exactly
that seed's flows send (each sender runs its transfers one after the
other). In the window:
  goodput         packets the receivers got (from their 50 ms bins) per
                  second, over the bisection capacity, the sum of the uplinks'
                  queue rates (leaf-spine 2 x 400, fat-tree 4 x 400
                  packets/s; asymmetric 400 + 200). `offered` is what the
                  senders put into the paths (the counters below).
  load            packets each uplink port sent (egress_port_counter: after
                  its queue, the carried load), as a share of the port's
                  rate; max/mean over the paths (1 = even; under asymmetry
                  this is utilisation, so 1 is still the ideal).
  offered load    packets the deciding switch routed to each uplink (next_hop's
                  direct counters, features.load_balancing.member_packets:
                  before the queue), max/mean likewise. A path is used when
                  it was offered >= 10% of one flow's packets.
  reordering      from the receivers' JSON (hostagent.load_balancing.reorder), the seed's
                  flows, whole transfers: reordered share (RFC 4737: arrived
                  after a higher PSN, late ones included), depth p99/max (how
                  far ahead of the next expected PSN a packet arrived: holes
                  left by losses count too), buffer occupancy, packets
                  released by timeout, late packets (arrived after their PSN
                  was given up), missing PSNs.
  downstream loss carried - goodput: nothing after the uplinks is a
                  bottleneck, so a seed losing more than 3% of the bisection
                  there had a BMv2 switch or a receiver starved of CPU (a
                  2-core machine running 20 switches); the summary counts
                  such seeds (starved_seeds) and the run ends with a warning
                  naming them.
Counters are sampled every 0.1 s from a thread (P4Runtime) and interpolated
to the window's ends.

Asymmetric case (leaf-spine): leaf1's port to spine2 served at half rate
(Thrift set_queue_rate), every mode, --asym-flows flows (default: paths);
the offered load is --load of the reduced bisection (570 packets/s).

FCT phase (per topology and mode, symmetric): paths senders each run
--fct-transfers transfers of --fct-packets packets one after the other, with
DCQCN (not fixed rate; line rate = one uplink's rate, so a transfer alone on
a path takes packets / 400 s), `traffic receive --packets` and the `traffic
fct` join (hostagent.traffic.flow_completion_times, fct_summary): mean, p99,
how many completed (nothing is retransmitted: a transfer whose last packet is
lost never completes).

Models (hostagent.load_balancing.ecmp_math; exact enumeration here): the share of paths
ECMP is expected to use (1 - (1 - 1/p)^N: 68% at 4 flows on 4 paths) and
ECMP's expected goodput when every path carries at most its rate.
Expectations this tests (report what is measured): ECMP near the collision
bound, flowlet/spray/adaptive >= 90% goodput and max/mean <= 1.1, spray
needing the reorder buffer, adaptive best under asymmetry.

Every chain (a case's seeds, back to back) gets one fidelity verdict (frames
lost before a pipeline, threads waiting for a core; docs/fidelity.md) in
each of its rows; the run's last lines say which chains were not faithful.

Outputs under --out: runs.csv (one row per seed run), summary.csv (per
topology, case, N, mode), fct.csv, goodput.png, load.png, asymmetric.png,
reorder.png, fct.png, and every chain's agent files and sampled counters
under raw/. Progress: one line per seed run.
"""
from __future__ import annotations

import csv
import itertools
import json
import math
import random
import re
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from experiments.common import announce_budget, case_fidelity, experiment_parser, lost_before_pipeline, \
    print_fidelity, save_figure, write_csv

from emulator.bmv2 import DEFAULT_EXPERIMENT_LOG_LEVEL, LOG_LEVELS
from emulator.bmv2_thrift import Bmv2Thrift
from emulator.build import compile_p4
from emulator.calibration import Flow as Offered
from control.controller import FabricController
from features.load_balancing import FLOWLETS_COUNTER, LbMode, member_packets
from emulator.network import Network, queue_rate_pps
from features import topology_from_dict
from hostagent.load_balancing.ecmp_math import expected_used_share
from hostagent.traffic import fct_summary, flow_completion_times, percentile

MODES = ("ecmp", "ecmp+plb", "flowlet", "spray", "adaptive")
PORT_COUNTER = "egress_port_counter"
SAMPLE_S = 0.1
STOP_EARLY = 10              # packets: see run_chain
TAIL_S = 0.1                 # a window ends this long before the first sender stops
USED_SHARE_OF_FLOW = 0.1     # a path is used when offered >= this share of one flow's packets
STARVED_LOSS = 0.03          # a seed run lost more than this share of the bisection after the uplinks
PY = str(REPO / ".venv" / "bin" / "python") if (REPO / ".venv").exists() else sys.executable


@dataclass(frozen=True)
class Fabric:
    """How one topology is turned into the experiment's fabric."""
    name: str
    senders: tuple
    receivers: tuple
    uplinks: tuple           # (switch, neighbour): the bottleneck ports, one per path
    slow: tuple              # roles of the two ends of links that get --uplink-mbps
    asym: tuple = ()         # (switch, neighbour) served at half rate in the asymmetric case

    @property
    def paths(self) -> int:
        return len(self.uplinks)


FABRICS = {
    "leaf-spine": Fabric("leaf-spine", ("h1", "h2"), ("h3", "h4"),
                         (("leaf1", "spine1"), ("leaf1", "spine2")), slow=("leaf", "spine"),
                         asym=("leaf1", "spine2")),
    "fat-tree-k4": Fabric("fat-tree-k4", ("h1", "h2", "h3", "h4"), ("h5", "h6", "h7", "h8"),
                          (("a11", "c1"), ("a11", "c2"), ("a12", "c3"), ("a12", "c4")),
                          slow=("aggregation", "core")),
}


@dataclass
class Uplink:
    switch: str
    peer: str
    port: int
    pps: int

    @property
    def label(self) -> str:
        return f"{self.switch}->{self.peer}"


@dataclass
class Flow:
    index: int
    sender: str
    receiver: str


@dataclass
class Case:
    name: str                 # symmetric | asymmetric
    flows: int
    mode: str
    duration: float           # seconds of packets per transfer (one seed)
    rate: float               # packets/s per flow
    bisection: float          # packets/s over the paths
    capacities: list = field(default_factory=list)   # per path, packets/s


# ---- the fabric ------------------------------------------------------------------

def build_topology(fabric: Fabric, args):
    raw = yaml.safe_load((REPO / "topologies" / f"{fabric.name}.yaml").read_text())
    raw["name"] = f"{fabric.name}-lb"
    raw.pop("int", None)
    raw.pop("load_balancing", None)
    roles = {s["name"]: s.get("role") for s in raw["switches"]}
    links = []
    for link in raw["links"]:
        a, b = (link if isinstance(link, list) else (link["a"], link["b"]))
        if a in roles and b in roles and {roles[a], roles[b]} == set(fabric.slow):
            links.append({"a": a, "b": b, "bandwidth_mbps": args.uplink_mbps})
        else:
            links.append(link)
    raw["links"] = links
    switch_links = [(a, b) for link in links
                    for a, b in [link if isinstance(link, list) else (link["a"], link["b"])]
                    if a in roles and b in roles]
    raw["ecn"] = [{"switch": x, "towards": y, "mode": "step", "k": args.ecn_k}
                  for a, b in switch_links for x, y in ((a, b), (b, a))]
    return topology_from_dict(raw, f"experiments/load_balancing.py ({fabric.name})")


def uplinks_of(topo, fabric: Fabric) -> list[Uplink]:
    out = []
    for sw, peer in fabric.uplinks:
        port = next(p for p in topo.switches[sw].ports.values() if p.peer == peer)
        out.append(Uplink(sw, peer, port.number, queue_rate_pps(port.link.bandwidth_mbps)))
    return out


def flows_of(fabric: Fabric, n: int) -> list[Flow]:
    s, r = fabric.senders, fabric.receivers
    return [Flow(j, s[j % len(s)], r[(j + j // len(s)) % len(r)]) for j in range(n)]


def offered(fabric: Fabric, n: int, rate: float) -> list[Offered]:
    """What `n` flows at `rate` packets/s each ask of the machine (the budget's flows)."""
    return [Offered(f.sender, f.receiver, rate) for f in flows_of(fabric, n)]


def flowlets(ctl: FabricController, uplinks: list[Uplink]) -> int:
    """Flowlets started so far at the switches that choose among the uplinks."""
    return sum(n for sw in dict.fromkeys(u.switch for u in uplinks)
               for n, _ in ctl.counter(sw, FLOWLETS_COUNTER).values())


def set_mode(ctl: FabricController, mode: str, args) -> None:
    lb = {"ecmp": LbMode("ecmp"), "ecmp+plb": LbMode("ecmp"), "spray": LbMode("spray"),
          "flowlet": LbMode("flowlet", flowlet_gap_us=args.flowlet_gap_us),
          "adaptive": LbMode("adaptive", queue_stale_us=args.queue_stale_us)}[mode]
    for sw in ctl.topo.switches:
        ctl.feature("load_balancing").set_mode(sw, lb)


# ---- counters ---------------------------------------------------------------------

class Sampler(threading.Thread):
    """Cumulative carried (egress port counter) and offered (next_hop direct
    counters) packets per uplink, every SAMPLE_S, with wall-clock times."""

    def __init__(self, ctl: FabricController, uplinks: list[Uplink]):
        super().__init__(daemon=True)
        self.ctl, self.uplinks = ctl, uplinks
        self.samples: list[tuple[float, list, list]] = []
        self.stop = threading.Event()
        self.error: Exception | None = None

    def read(self) -> tuple[float, list, list]:
        t0 = time.time()
        carried = [self.ctl.counter(u.switch, PORT_COUNTER, u.port).get(u.port, (0, 0))[0] for u in self.uplinks]
        offered_by_switch = {}
        for sw in dict.fromkeys(u.switch for u in self.uplinks):
            per: defaultdict[int, int] = defaultdict(int)   # egress port -> packets
            for (_group, port), n in member_packets(self.ctl.connections[sw], self.ctl.p4info).items():
                per[port] += n
            offered_by_switch[sw] = per
        offered = [offered_by_switch[u.switch][u.port] for u in self.uplinks]
        return (t0 + time.time()) / 2, carried, offered

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                self.samples.append(self.read())
                self.stop.wait(SAMPLE_S)
        except Exception as exc:  # reported by the caller
            self.error = exc


def interpolate(samples: list, t: float, which: int) -> list[float]:
    """Cumulative counts (which: 1 carried, 2 offered) at wall time t."""
    if t <= samples[0][0]:
        return list(samples[0][which])
    for (ta, *a), (tb, *b) in zip(samples, samples[1:]):
        if ta <= t <= tb:
            w = (t - ta) / (tb - ta) if tb > ta else 0.0
            return [x + w * (y - x) for x, y in zip(a[which - 1], b[which - 1])]
    return list(samples[-1][which])


# ---- agents -----------------------------------------------------------------------

def host_args(topo, name: str) -> list[str]:
    nic = topo.hosts[name].primary
    return ["--iface", nic.iface, "--src-ip", nic.ip, "--src-mac", nic.mac, "--gw-mac", nic.gateway_mac]


def agent(topo, host: str, argv: list[str], log: Path) -> subprocess.Popen:
    cmd = ["ip", "netns", "exec", host, PY, "-m", "hostagent.traffic", argv[0], *host_args(topo, host), *argv[1:]]
    with open(log, "w") as fh:
        return subprocess.Popen(cmd, cwd=REPO, stdout=fh, stderr=subprocess.STDOUT)


def agent_host(p: subprocess.Popen) -> str:
    """The host an agent() runs in (its command is `ip netns exec HOST ...`)."""
    cmd = p.args
    assert isinstance(cmd, list)  # agent() passes its command as a list
    return cmd[3]


def stop_agents(procs: list) -> None:
    """Kill the agents of ours still running (`ip netns exec` execs the agent: the pid is the agent's)."""
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()


def read_bins(path: Path) -> dict:
    """flow -> {bin index: packets} from a receiver's time series."""
    out: dict = defaultdict(dict)
    with open(path) as fh:
        for row in csv.DictReader(fh):
            out[row["flow"]][round(float(row["t_s"]) / BIN_S)] = int(row["packets"])
    return out


BIN_S = 0.05


class Progress:
    def __init__(self, total: int):
        self.total, self.done, self.t0 = total, 0, time.time()

    def tick(self, what: str) -> None:
        self.done += 1
        el = time.time() - self.t0
        print(f"[run {self.done}/{self.total}, {el:5.0f} s] {what}", flush=True)


# ---- one chain: every seed of one (case, N, mode) -----------------------------------

def run_chain(topo, fabric: Fabric, uplinks: list[Uplink], case: Case, ctl, net, args, raw_dir: Path,
              progress: Progress) -> list[dict]:
    flows = flows_of(fabric, case.flows)
    seeds = list(range(args.first_seed, args.first_seed + args.seeds))
    packets = max(1, round(case.rate * case.duration))
    tag = f"{fabric.name}-{case.name}-n{case.flows}-{case.mode}"
    d = raw_dir / tag
    d.mkdir(parents=True, exist_ok=True)
    set_mode(ctl, case.mode, args)
    flowlets_before = flowlets(ctl, uplinks)
    chain_s = len(seeds) * (case.duration + args.gap_s)
    receivers = sorted({f.receiver for f in flows})
    start_at = time.time() + 0.5 + 0.25 * (len(flows) + len(receivers))
    procs = []
    # A receiver stops once every flow it expects is "complete" (hostagent.traffic receive --packets
    # --flows). A transfer whose last packet was tail-dropped never completes, so the threshold is
    # STOP_EARLY packets short of the transfer: passing it needs only one later packet to arrive
    # (the hole before it times out). The last seed loses at most those packets' tail (<= 60 ms),
    # and no receiver idles to its --duration, the fallback.
    for r in receivers:
        expect = len(seeds) * sum(1 for f in flows if f.receiver == r)
        procs.append(agent(topo, r, ["receive", "--duration", f"{chain_s * 1.03 + 2:.1f}", "--start-at",
                                     f"{start_at - 0.5:.3f}", "--packets", str(max(1, packets - STOP_EARLY)),
                                     "--flows", str(expect),
                                     "--bin-s", str(BIN_S), "--reorder-timeout", str(args.reorder_timeout),
                                     "--progress-s", "0", "--out", str(d / f"rx-{r}")], d / f"rx-{r}.log"))
    senders = []
    for f in flows:
        dst = topo.hosts[f.receiver].primary.ip
        extra = ["--plb"] if case.mode == "ecmp+plb" else []
        senders.append(agent(topo, f.sender, [
            "transfer", "--dst-ip", dst, "--qp", str(1000 * (f.index + 1) + seeds[0]), "--packets", str(packets),
            "--count", str(len(seeds)), "--gap-s", str(args.gap_s), "--timeout", f"{case.duration * 3:.1f}",
            "--fixed-rate", "--line-rate-pps", f"{case.rate:.2f}", "--start-at", f"{start_at:.3f}",
            "--progress-s", "0", "--out", str(d / f"tx-f{f.index}"), *extra], d / f"tx-f{f.index}.log"))
    sampler = Sampler(ctl, uplinks)
    done_re = re.compile(r"^transfer (\d+)/\d+ .*: (sent|timed out)", re.M)
    reported = 0
    label = f"{fabric.name} {case.name} N={case.flows} {case.mode}"
    deadline = start_at + chain_s * 1.5 + 30
    fidelity = case_fidelity(net, ctl)      # one verdict for the chain: its seeds run back to back
    fidelity.traffic_starts(start_at)
    try:
        time.sleep(max(0.0, start_at - 0.3 - time.time()))
        sampler.start()
        while any(p.poll() is None for p in senders):
            if time.time() > deadline:
                raise RuntimeError(f"{label}: senders still running after {deadline - start_at:.0f} s")
            time.sleep(0.25)
            n = len(done_re.findall((d / "tx-f0.log").read_text(errors="replace")))
            while reported < n:
                reported += 1
                progress.tick(f"{label}: seed {seeds[reported - 1]} ({reported}/{len(seeds)})")
        for p in procs:
            try:
                p.wait(timeout=max(1.0, start_at + chain_s * 1.03 + 5 - time.time()))
            except subprocess.TimeoutExpired:
                pass   # killed below; its files are missing and the chain fails
    finally:
        stop_agents(procs + senders)
        sampler.stop.set()
        if sampler.is_alive():
            sampler.join()
    net.check_alive()
    verdict = fidelity.verdict()
    lost_before_pipeline(label, verdict)
    flowlet_rate = (flowlets(ctl, uplinks) - flowlets_before) / (len(flows) * len(seeds) * case.duration)
    while reported < len(seeds):
        reported += 1
        progress.tick(f"{label}: seed {seeds[reported - 1]} ({reported}/{len(seeds)})")
    failed = [agent_host(p) for p in procs + senders if p.returncode]
    if failed:
        raise RuntimeError(f"{label}: agents on {failed} failed; see {d}/*.log")
    if sampler.error is not None:
        raise RuntimeError(f"{label}: reading counters failed: {sampler.error}")
    with open(d / "counters.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["t_wall"] + [f"carried {u.label}" for u in uplinks] + [f"offered {u.label}" for u in uplinks])
        w.writerows([round(t, 4), *c, *o] for t, c, o in sampler.samples)
    rows = analyse_chain(fabric, uplinks, case, flows, seeds, packets, d, sampler.samples, args)
    for row in rows:
        row["flowlets_per_flow_s"] = round(flowlet_rate, 1) if case.mode == "flowlet" else None
        row["fidelity"] = str(verdict)
    return rows


def analyse_chain(fabric, uplinks, case: Case, flows, seeds, packets, d: Path, samples, args) -> list[dict]:
    tx = {f.index: json.loads((d / f"tx-f{f.index}.json").read_text())["transfers"] for f in flows}
    rx = {r: json.loads((d / f"rx-{r}.json").read_text()) for r in {f.receiver for f in flows}}
    bins = {r: read_bins(d / f"rx-{r}.csv") for r in rx}
    ip = {f.index: tx[f.index][0]["src"] for f in flows}
    rows = []
    for i, seed in enumerate(seeds):
        keys = {f.index: f"{ip[f.index]}/{1000 * (f.index + 1) + seed}" for f in flows}
        starts = [tx[f.index][i]["t0_wall"] for f in flows]
        ends = [tx[f.index][i]["t0_wall"] + packets / case.rate for f in flows]   # every sender still sending
        for f in flows:
            per = bins[f.receiver].get(keys[f.index], {})
            t0 = rx[f.receiver]["t0_wall"]
            if per:     # and its packets still arriving
                ends.append(t0 + (max(per) + 1) * BIN_S)
        start, end = max(starts) + args.warmup, min(ends) - TAIL_S
        row = {"topology": fabric.name, "case": case.name, "flows": case.flows, "paths": fabric.paths,
               "mode": case.mode, "seed": seed, "rate_pps": round(case.rate, 1),
               "bisection_pps": round(case.bisection, 1), "window_s": round(end - start, 3)}
        if end - start < 0.5:
            row["note"] = "window under 0.5 s"
        got = 0.0
        for f in flows:
            per = bins[f.receiver].get(keys[f.index], {})
            t0 = rx[f.receiver]["t0_wall"]
            k0, k1 = math.ceil((start - t0) / BIN_S), math.floor((end - t0) / BIN_S)   # whole bins in [start, end)
            if k1 > k0:
                got += sum(per.get(k, 0) for k in range(k0, k1)) / ((k1 - k0) * BIN_S)
        span = max(end - start, 1e-9)
        carried = [(b - a) / span for a, b in zip(interpolate(samples, start, 1), interpolate(samples, end, 1))]
        offered = [(b - a) / span for a, b in zip(interpolate(samples, start, 2), interpolate(samples, end, 2))]
        util_c = [c / cap for c, cap in zip(carried, case.capacities)]       # per path, share of its capacity
        util_o = [o / cap for o, cap in zip(offered, case.capacities)]
        mean_c, mean_o = statistics.fmean(util_c), statistics.fmean(util_o)
        row.update(
            goodput=round(got / case.bisection, 4),
            offered=round(sum(offered) / case.bisection, 4),
            carried=round(sum(carried) / case.bisection, 4),
            load_max_mean=round(max(util_c) / mean_c, 3) if mean_c else None,
            offered_max_mean=round(max(util_o) / mean_o, 3) if mean_o else None,
            paths_used=sum(1 for o in offered if o >= USED_SHARE_OF_FLOW * case.rate),
            path_loads=" ".join(f"{c:.0f}" for c in carried),
            path_offered=" ".join(f"{o:.0f}" for o in offered))
        row["paths_used_share"] = round(row["paths_used"] / fabric.paths, 3)
        # Nothing after the uplinks is a bottleneck: what they carried, the receivers should get.
        # More lost on the way means a BMv2 switch or a receiver was starved of CPU.
        row["downstream_loss"] = round(row["carried"] - row["goodput"], 4)
        row.update(reorder_stats([rx[f.receiver]["flows"].get(keys[f.index]) for f in flows]))
        plb = [t["plb"] for f in flows for t in [tx[f.index][i]] if t.get("plb")]
        row["repaths"] = sum(len(p["repaths"]) for p in plb) if plb else None
        row["sent"] = sum(tx[f.index][i]["sent"] for f in flows)
        row["packets_per_flow"] = packets
        rows.append(row)
    return rows


def reorder_stats(flows: list) -> dict:
    """Receiver reorder-buffer figures of one seed's flows (None: never seen)."""
    seen = [f for f in flows if f]
    hist: Counter = Counter()
    for f in seen:
        hist.update({int(k): v for k, v in f["reorder"]["depth_hist"].items()})
    received = sum(f["packets"] for f in seen)
    r = [f["reorder"] for f in seen]
    ordered = sorted(hist.elements()) if sum(hist.values()) < 200_000 else None
    return {
        "received": received,
        "missing": sum(x["missing"] for x in r),
        # RFC 4737: arrived after a higher PSN. hostagent.load_balancing.reorder counts a packet that came after its
        # PSN was given up (late) apart from `reordered`; both arrived out of order, so both count here.
        "reordered_share": round(sum(x["reordered"] + x["late"] for x in r) / received, 4) if received else None,
        "held_share": round(sum(x["held"] for x in r) / received, 4) if received else None,
        "depth_p50": percentile(ordered, 50) if ordered else 0,
        "depth_p99": percentile(ordered, 99) if ordered else 0,
        "depth_max": max(hist) if hist else 0,
        "occupancy_max": max((x["occupancy_max"] for x in r), default=0),
        "occupancy_mean": round(statistics.fmean(x["occupancy_mean"] for x in r), 2) if r else 0,
        "delay_max_ms": round(1000 * max((x["delay_max_s"] for x in r), default=0), 1),
        "released_by_timeout": sum(x["released_by_timeout"] for x in r),
        "late": sum(x["late"] for x in r),
    }


# ---- FCT phase ------------------------------------------------------------------------

def run_fct(topo, fabric: Fabric, uplinks: list[Uplink], mode: str, ctl, net, args, raw_dir: Path) -> dict:
    flows = flows_of(fabric, fabric.paths)
    d = raw_dir / f"{fabric.name}-fct-{mode}"
    d.mkdir(parents=True, exist_ok=True)
    set_mode(ctl, mode, args)
    line = min(u.pps for u in uplinks)
    count, packets = args.fct_transfers, args.fct_packets
    bound = count * (4 * packets / line + args.gap_s) + 3
    receivers = sorted({f.receiver for f in flows})
    start_at = time.time() + 1.0 + 0.25 * (len(flows) + len(receivers))
    procs = []
    for r in receivers:
        expect = count * sum(1 for f in flows if f.receiver == r)
        procs.append(agent(topo, r, ["receive", "--duration", f"{bound:.1f}", "--start-at", f"{start_at - 0.5:.3f}",
                                     "--packets", str(packets), "--flows", str(expect),
                                     "--reorder-timeout", str(args.reorder_timeout), "--progress-s", "0",
                                     "--out", str(d / f"rx-{r}")], d / f"rx-{r}.log"))
    for f in flows:
        extra = ["--plb"] if mode == "ecmp+plb" else []
        procs.append(agent(topo, f.sender, [
            "transfer", "--dst-ip", topo.hosts[f.receiver].primary.ip, "--qp", str(12000 + 100 * f.index),
            "--packets", str(packets), "--count", str(count), "--gap-s", str(args.gap_s),
            "--timeout", f"{4 * packets / line:.1f}", "--line-rate-pps", str(line), "--start-at", f"{start_at:.3f}",
            "--progress-s", "0", "--out", str(d / f"tx-f{f.index}"), *extra], d / f"tx-f{f.index}.log"))
    try:
        for p in procs:
            p.wait(timeout=max(1.0, start_at + bound + 10 - time.time()))
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"FCT {fabric.name} {mode}: agents still running after {bound + 10:.0f} s") from None
    finally:
        stop_agents(procs)
    net.check_alive()
    failed = [agent_host(p) for p in procs if p.returncode]
    if failed:
        raise RuntimeError(f"FCT {fabric.name} {mode}: agents on {failed} failed; see {d}/*.log")
    rows = []
    for r in receivers:
        receiver = json.loads((d / f"rx-{r}.json").read_text())
        senders = [json.loads((d / f"tx-f{f.index}.json").read_text()) for f in flows if f.receiver == r]
        rows += flow_completion_times(receiver, senders)
    s = fct_summary(rows)
    write_csv(d / "fct.csv", rows)
    return {"topology": fabric.name, "mode": mode, "flows": len(flows), "packets": packets,
            "transfers": s["transfers"], "complete": s["complete"],
            "fct_mean_s": round(s["fct_mean_s"], 3) if s["complete"] else None,
            "fct_p50_s": round(s["fct_p50_s"], 3) if s["complete"] else None,
            "fct_p99_s": round(s["fct_p99_s"], 3) if s["complete"] else None,
            "fct_max_s": round(s["fct_max_s"], 3) if s["complete"] else None,
            "ideal_s": round(packets / line, 3),
            "lost": sum(r["lost"] or 0 for r in rows), "reordered": sum(r["reordered"] or 0 for r in rows)}


# ---- models and aggregation -------------------------------------------------------------

def ecmp_model(flows: int, capacities: list[float], rate: float) -> float:
    """Expected goodput share of the capacity when each flow (at `rate`) picks
    a path uniformly at random and a path carries at most its capacity."""
    p = len(capacities)
    total = 0.0
    for assignment in itertools.product(range(p), repeat=flows):
        k = Counter(assignment)
        total += sum(min(k[i] * rate, c) for i, c in enumerate(capacities))
    return total / p ** flows / sum(capacities)


def summarise(rows: list[dict]) -> list[dict]:
    groups: dict = defaultdict(list)
    for r in rows:
        groups[(r["topology"], r["case"], r["flows"], r["mode"])].append(r)
    out = []
    for (topo, case, flows, mode), rs in groups.items():
        def col(k):
            return [r[k] for r in rs if r.get(k) is not None]

        def mean(k, nd=3):
            v = col(k)
            return round(statistics.fmean(v), nd) if v else None
        g = col("goodput")
        first = rs[0]
        caps = [float(x) for x in first["capacities"].split()]
        out.append({
            "topology": topo, "case": case, "flows": flows, "paths": first["paths"], "mode": mode, "seeds": len(rs),
            "goodput_mean": round(statistics.fmean(g), 3), "goodput_min": round(min(g), 3),
            "goodput_max": round(max(g), 3), "goodput_sd": round(statistics.pstdev(g), 3),
            "offered": mean("offered"), "delivered_of_offered": round(sum(g) / sum(col("offered")), 3),
            "load_max_mean": mean("load_max_mean"), "load_max_mean_worst": max(col("load_max_mean"), default=None),
            "offered_max_mean": mean("offered_max_mean"),
            "paths_used_share": mean("paths_used_share"),
            "ecmp_model_paths_used": round(float(expected_used_share(flows, first["paths"])), 3),
            "ecmp_model_goodput": round(ecmp_model(flows, caps, first["rate_pps"]), 3),
            "reordered_share": mean("reordered_share", 4), "held_share": mean("held_share", 4),
            "depth_p99": mean("depth_p99", 1), "depth_max": max(col("depth_max"), default=None),
            "occupancy_mean": mean("occupancy_mean", 2), "occupancy_max": max(col("occupancy_max"), default=None),
            "released_by_timeout": mean("released_by_timeout", 1), "late": mean("late", 1),
            "missing": mean("missing", 1), "repaths": mean("repaths", 2),
            "flowlets_per_flow_s": mean("flowlets_per_flow_s", 1),
            "window_s": mean("window_s", 2),
            "starved_seeds": sum(1 for r in rs if r["downstream_loss"] > STARVED_LOSS),
            "fidelity": first.get("fidelity", ""),
        })
    return out


# ---- plots -------------------------------------------------------------------------------

def _strip(ax, rows, modes, key, lines=(), title=""):
    """One column of points per mode (one per seed, jittered), its mean as a bar."""
    rng = random.Random(1)
    for i, m in enumerate(modes):
        v = [r[key] for r in rows if r["mode"] == m and r.get(key) is not None]
        if not v:
            continue
        ax.scatter([i + rng.uniform(-0.15, 0.15) for _ in v], v, s=10, alpha=0.6, color=f"C{MODES.index(m)}")
        ax.hlines(statistics.fmean(v), i - 0.3, i + 0.3, color="k", lw=2)
    for (y, label), ls in zip(lines, (":", "--")):
        ax.axhline(y, color="grey", ls=ls, lw=1, label=label)
    if lines:
        ax.legend(fontsize=7, loc="lower right")
    ax.set_xticks(range(len(modes)))
    ax.set_xticklabels(modes, fontsize=7, rotation=15)
    ax.set_title(title, fontsize=9)


def plot_grid(rows, summary, modes, panels_of, path: Path, case="symmetric") -> Path:
    """Rows of panels: for each (key, ylabel, lines(summary row)) in panels_of, one panel per
    (topology, N) of `case`."""
    panels = sorted({(r["topology"], r["flows"]) for r in rows if r["case"] == case},
                    key=lambda x: (list(FABRICS).index(x[0]) if x[0] in FABRICS else 9, x[1]))
    fig, axes = plt.subplots(len(panels_of), max(1, len(panels)), squeeze=False,
                             figsize=(3.6 * max(1, len(panels)), 3.3 * len(panels_of)))
    for row_axes, (key, ylabel, lines) in zip(axes, panels_of):
        for ax, (topo, n) in zip(row_axes, panels):
            rs = [r for r in rows if r["case"] == case and r["topology"] == topo and r["flows"] == n]
            s = next(x for x in summary if x["topology"] == topo and x["flows"] == n and x["case"] == case)
            _strip(ax, rs, [m for m in modes if any(r["mode"] == m for r in rs)], key, lines(s),
                   f"{topo} ({case}), {n} flows / {rs[0]['paths']} paths")
            ax.set_ylabel(ylabel, fontsize=8)
    return save_figure(fig, path)


def plot_reorder(summary, modes, path: Path) -> Path:
    rows = [s for s in summary if s["case"] == "symmetric"]
    labels = [f"{s['topology'].split('-')[0]} N={s['flows']}\n{s['mode']}" for s in rows]
    fig, axes = plt.subplots(1, 3, figsize=(15, 3.6))
    for ax, key, title in zip(axes, ["reordered_share", "occupancy_mean", "released_by_timeout"],
                              ["reordered share (RFC 4737)", "reorder buffer occupancy, mean (pkts)",
                               "packets released by timeout per seed"]):
        ax.bar(range(len(rows)), [s[key] or 0 for s in rows], color=[f"C{modes.index(s['mode'])}" for s in rows])
        ax.set_xticks(range(len(rows)))
        ax.set_xticklabels(labels, fontsize=5, rotation=90)
        ax.set_title(title, fontsize=9)
    return save_figure(fig, path)


def plot_fct(fct_rows, modes, path: Path) -> Path:
    topos = list(dict.fromkeys(r["topology"] for r in fct_rows))
    fig, axes = plt.subplots(1, len(topos), figsize=(5 * len(topos), 3.4), squeeze=False)
    for ax, t in zip(axes[0], topos):
        rs = [r for r in fct_rows if r["topology"] == t]
        x = range(len(rs))
        ax.bar([i - 0.2 for i in x], [r["fct_mean_s"] or 0 for r in rs], 0.4, label="mean")
        ax.bar([i + 0.2 for i in x], [r["fct_p99_s"] or 0 for r in rs], 0.4, label="p99")
        ax.axhline(rs[0]["ideal_s"], color="grey", ls=":", label="alone on a path")
        ax.set_xticks(list(x))
        ax.set_xticklabels([f"{r['mode']}\n{r['complete']}/{r['transfers']}" for r in rs], fontsize=7)
        ax.set_ylabel("completion time (s)")
        ax.set_title(f"{t}: {rs[0]['flows']} concurrent transfer chains, {rs[0]['packets']} pkts", fontsize=9)
        ax.legend(fontsize=7)
    return save_figure(fig, path)


# ---- main ----------------------------------------------------------------------------------

def main(argv=None) -> int:
    ap = experiment_parser("load_balancing", __doc__)
    ap.add_argument("--topologies", nargs="+", default=list(FABRICS), choices=list(FABRICS))
    ap.add_argument("--modes", nargs="+", default=list(MODES), choices=list(MODES))
    ap.add_argument("--flows", nargs="+", type=int, help="flow counts (default: paths and 2 x paths)")
    ap.add_argument("--seeds", type=int, default=20, help="seeds (flow source ports) per (topology, N, mode)")
    ap.add_argument("--first-seed", type=int, default=0)
    ap.add_argument("--duration", type=float, default=2.0, help="seconds of traffic per seed run")
    ap.add_argument("--plb-duration", type=float, default=3.5, help="seconds per seed run for ecmp+plb")
    ap.add_argument("--warmup", type=float, default=0.5, help="seconds skipped at the start of each seed run")
    ap.add_argument("--gap-s", type=float, default=0.05, help="pause between a sender's transfers")
    ap.add_argument("--load", type=float, default=0.95, help="offered load, share of the bisection capacity")
    ap.add_argument("--uplink-mbps", type=float, default=4.8, help="bandwidth of the links between racks/pods")
    ap.add_argument("--ecn-k", type=int, default=10, help="step ECN threshold on switch-to-switch ports")
    ap.add_argument("--flowlet-gap-us", type=int, default=20000, help="flowlet mode's gap (us)")
    ap.add_argument("--queue-stale-us", type=int, default=20000, help="adaptive mode: queue depth believed for")
    ap.add_argument("--reorder-timeout", type=float, default=0.2, help="receivers' reorder-buffer gap timeout (s)")
    ap.add_argument("--no-asymmetric", dest="asymmetric", action="store_false",
                    help="skip the asymmetric case (leaf-spine, one spine link at half rate)")
    ap.add_argument("--asym-flows", type=int, default=None, help="flows in the asymmetric case (default: paths)")
    ap.add_argument("--no-fct", dest="fct", action="store_false", help="skip the FCT phase")
    ap.add_argument("--fct-transfers", type=int, default=4, help="FCT phase: transfers per sender")
    ap.add_argument("--fct-packets", type=int, default=300, help="FCT phase: packets per transfer")
    ap.add_argument("--out", default=str(REPO / "experiments" / "results" / "load_balancing"),
                    help="results directory (default %(default)s)")
    ap.add_argument("--log-level", default=DEFAULT_EXPERIMENT_LOG_LEVEL, choices=LOG_LEVELS,
                    help="BMv2 log level (default off: logging slows BMv2 several times)")
    args = ap.parse_args(argv)
    if args.seeds < 1 or args.seeds > 999 or args.first_seed < 0 or args.first_seed + args.seeds > 999:
        ap.error("seeds must lie within 0..998 (QP 1000 (j + 1) + seed)")
    if not 0 < args.load <= 1.5:
        ap.error("--load must be within (0, 1.5]")
    out = Path(args.out)
    (out / "raw").mkdir(parents=True, exist_ok=True)
    compile_p4()
    t_start = time.time()

    plan = []   # (fabric, case name, flows, mode)
    for name in args.topologies:
        fab = FABRICS[name]
        for n in (args.flows or [fab.paths, 2 * fab.paths]):
            plan += [(fab, "symmetric", n, m) for m in args.modes]
        if args.asymmetric and fab.asym:
            plan += [(fab, "asymmetric", args.asym_flows or fab.paths, m) for m in args.modes]
    progress = Progress(len(plan) * args.seeds)
    print(f"{len(plan)} (topology, case, N, mode) chains x {args.seeds} seeds = {progress.total} runs; "
          f"{args.duration:g} s per seed ({args.plb_duration:g} s with PLB)"
          + ("; then an FCT phase per topology and mode" if args.fct else ""), flush=True)
    rows, fct_rows = [], []
    for name in args.topologies:
        fab = FABRICS[name]
        topo = build_topology(fab, args)
        run_dir = REPO / "build" / "experiments" / "load_balancing" / name
        print(f"==> {name}: starting {len(topo.switches)} switches", flush=True)
        with Network(topo, run_dir, log_level=args.log_level) as net, FabricController(topo) as ctl:
            ctl.program()
            net.apply_queue_rates()
            uplinks = uplinks_of(topo, fab)
            print(f"    uplinks (the paths): {', '.join(f'{u.label} port {u.port} {u.pps} pps' for u in uplinks)}",
                  flush=True)
            # the most flows of any case: they offer the same load (args.load x the paths), over more hosts
            most = max(n for f, _c, n, _m in plan if f is fab)
            budget = announce_budget(topo, offered(fab, most, args.load * sum(u.pps for u in uplinks) / most))
            for case_name in ("symmetric", "asymmetric"):
                items = [p for p in plan if p[0] is fab and p[1] == case_name]
                if not items:
                    continue
                caps = [u.pps for u in uplinks]
                slow = None
                if case_name == "asymmetric":
                    slow = next(u for u in uplinks if (u.switch, u.peer) == fab.asym)
                    caps = [u.pps // 2 if u is slow else u.pps for u in uplinks]
                    with Bmv2Thrift(topo.switches[slow.switch].thrift_port) as th:
                        th.set_queue_rate(slow.port, slow.pps // 2)
                    print(f"    asymmetric: {slow.label} served at {slow.pps // 2} packets/s", flush=True)
                try:
                    for _fab, _c, n, mode in items:
                        dur = args.plb_duration if mode == "ecmp+plb" else args.duration
                        rate = args.load * sum(caps) / n
                        case = Case(case_name, n, mode, dur, rate, float(sum(caps)), caps)
                        new = run_chain(topo, fab, uplinks, case, ctl, net, args, out / "raw", progress)
                        for r in new:
                            r["capacities"] = " ".join(str(c) for c in caps)
                            r["budget"] = budget
                        rows += new
                        g = [r["goodput"] for r in new]
                        print(f"    {name} {case_name} N={n} {mode}: goodput mean {statistics.fmean(g):.3f} "
                              f"min {min(g):.3f}, max/mean load "
                              f"{statistics.fmean(r['load_max_mean'] for r in new):.2f}", flush=True)
                        write_csv(out / "runs.csv", rows)
                finally:
                    if slow is not None:
                        with Bmv2Thrift(topo.switches[slow.switch].thrift_port) as th:
                            th.set_queue_rate(slow.port, slow.pps)
            if args.fct:
                for mode in args.modes:
                    r = run_fct(topo, fab, uplinks, mode, ctl, net, args, out / "raw")
                    fct_rows.append(r)
                    print(f"    FCT {name} {mode}: {r['complete']}/{r['transfers']} complete, mean "
                          f"{r['fct_mean_s']} s, p99 {r['fct_p99_s']} s (alone on a path: {r['ideal_s']} s)",
                          flush=True)

    summary = summarise(rows)
    write_csv(out / "runs.csv", rows)
    write_csv(out / "summary.csv", summary)
    if fct_rows:
        write_csv(out / "fct.csv", fct_rows)
    modes = list(args.modes)
    goodput = ("goodput", "goodput / bisection capacity",
               lambda s: [(s["ecmp_model_goodput"], "ECMP model"), (s["offered"], "offered")])
    load = ("load_max_mean", "max / mean uplink load", lambda s: [(1.1, "1.1")])
    pngs = [plot_grid(rows, summary, modes, [goodput], out / "goodput.png"),
            plot_grid(rows, summary, modes, [load], out / "load.png")]
    if any(r["case"] == "asymmetric" for r in rows):
        pngs.append(plot_grid(rows, summary, modes, [goodput, load], out / "asymmetric.png", case="asymmetric"))
    pngs.append(plot_reorder(summary, modes, out / "reorder.png"))
    if fct_rows:
        pngs.append(plot_fct(fct_rows, modes, out / "fct.png"))

    cols = [("topology", 11), ("case", 10), ("flows", 2), ("mode", 8), ("offered", 7), ("goodput_mean", 7),
            ("goodput_min", 7), ("ecmp_model_goodput", 7), ("load_max_mean", 8), ("offered_max_mean", 8),
            ("paths_used_share", 6), ("ecmp_model_paths_used", 6), ("reordered_share", 6), ("depth_p99", 6),
            ("occupancy_mean", 6), ("occupancy_max", 6), ("released_by_timeout", 7), ("late", 6), ("repaths", 6), ("starved_seeds", 3)]
    heads = ["topology", "case", "N", "mode", "offered", "goodput", "min", "ECMPmdl", "max/mean", "offr m/m",
             "paths", "ECMPp", "reord", "dp99", "occ", "occmax", "rel t/o", "late", "repath", "stv"]
    print("\n" + " ".join(f"{h:>{w}s}" for h, (_k, w) in zip(heads, cols)))
    for s in summary:
        print(" ".join(f"{'-' if s[k] is None else s[k]!s:>{w}s}" for k, w in cols))
    print("(offered, goodput, min, ECMPmdl: shares of the bisection capacity, mean over seeds, the worst seed, "
          "the ECMP model; max/mean: uplink utilisation, carried, and offered; paths: share used, ECMPp: the "
          "ECMP model's; reord: reordered share; dp99: reorder depth p99; occ, occmax: reorder buffer "
          "occupancy, mean and max, packets; rel t/o, late: packets released by timeout and arriving late, per "
          "seed; repath: PLB repaths per seed; stv: seeds starved of CPU, see below)")
    if fct_rows:
        print("\nFCT (DCQCN senders, paths concurrent transfer chains):")
        print(f"{'topology':>11s} {'mode':>8s} {'complete':>9s} {'mean s':>7s} {'p99 s':>7s} {'alone s':>7s}")
        for r in fct_rows:
            print(f"{r['topology']:>11s} {r['mode']:>8s} {r['complete']:>4d}/{r['transfers']:<4d} "
                  f"{r['fct_mean_s']!s:>7s} {r['fct_p99_s']!s:>7s} {r['ideal_s']!s:>7s}")
    starved = [r for r in rows if r["downstream_loss"] > STARVED_LOSS]
    if starved:
        print(f"\nwarning: {len(starved)} seed runs lost more than {STARVED_LOSS:.0%} of the bisection after the "
              "uplinks, where nothing is a bottleneck: BMv2 or a receiver was starved of CPU (another load on "
              "the machine?), so they measure the machine, not the balancing (runs.csv downstream_loss):")
        for key, group in itertools.groupby(starved, lambda r: (r["topology"], r["case"], r["flows"], r["mode"])):
            print(f"  {key[0]} {key[1]} N={key[2]} {key[3]}: seeds {', '.join(str(r['seed']) for r in group)}")
    print_fidelity([{"case": f"{s['topology']} {s['case']} N={s['flows']} {s['mode']}", "fidelity": s["fidelity"]}
                    for s in summary])
    print(f"\ntook {time.time() - t_start:.0f} s")
    print(f"results: {out}/summary.csv, {out}/runs.csv, " + (f"{out}/fct.csv, " if fct_rows else "")
          + ", ".join(str(p) for p in pngs) + f", agents' files under {out}/raw/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
