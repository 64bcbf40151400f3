#!/usr/bin/env python3
"""Training steps over the fabric: how long a data-parallel step takes, and
the all-reduce's bus bandwidth, for each load-balancing mode and all-reduce
algorithm (docs/collectives.md).

    fabric experiment collectives [--phases lb transport allreduce placement jobs failure torus least-loaded]
                                  [--modes ecmp path-aware flowlet spray adaptive]
                                  [--algorithms ring halving-doubling tree in-network]
                                  [--placements rail-aware host-major] [--protections none controller "data plane"]
                                  [--fail-after 2] [--steps 8] [--channels 2] [--out experiments/results/collectives]
                                  [--line-rate-pps PPS] [--link-rate file|nic] [--least-loaded-scale S]

Phase lb: topologies/leaf-spine.yaml on BMv2 without its INT section (two
leaves, two spines, 100 Mbit/s links: BMv2 queue rates of 8333 packets/s);
the four hosts h1-h4
are the ranks of one data-parallel job (hostagent/collectives/workload.py:
a 256 KB model in 4 buckets, 20 ms forward and 40 ms backward compute, the
gradients of each bucket all-reduced after its compute), each rank with
--channels connections to every peer (RC transport, go-back-N, DCQCN, each
connection at the phase's line rate: below; --link-rate nic puts every link
at the rate a rank's channels fill, so that the links are what the
channels share). Modes: ecmp (source ports spread by a fixed formula:
channels may share a spine), path-aware (source ports chosen from
the routes and the hash model so a pair's channels take both spines:
hostagent/collectives/paths.py), and the leaves' load-balancing modes
flowlet, spray and adaptive (features/load_balancing.py) with the ecmp
ports. Per case: step time (each step's slowest rank; median and max over
--steps), the all-reduces' bus bandwidth (median), retransmissions, and the
packets each spine carried (their share shows the balance). The fabric
has a fifth host, ps on leaf2: the parameter server of aggregation job 1,
whose workers are the four ranks, for the in-network all-reduce (summed at
leaf2; path-aware does not apply to it: one source port per worker).

Phase transport: the same, ring only, for ecmp, spray and adaptive (those of
--modes), each with go-back-n and selective-repeat retransmission.

Phase allreduce (when in-network wins): the same data-parallel steps, ECMP,
--channels per pair, by number of ranks and all-reduce algorithm: ring,
halving-doubling, and in-network summed at one switch (the parameter
server's) or over a tree of switches (trees: 1, the controller's root: a
spine or a core). On leaf-spine with four hosts a leaf (2, 4 and 8 ranks,
spread over both leaves; the server ps on leaf2) and on fat-tree-k4 (8
ranks, one per edge switch; the server h2). The jobs change at runtime
(set_jobs): one fabric per topology.

Phase jobs: the same fabric, job 0 (ring, path-aware) alone, then job 0
and job 1 (halving-doubling) on the same four hosts at once, each on its own
queue pairs (--job): each job's step time, bus bandwidth, retransmissions;
then both again with every switch port marking CE above ECN_K packets
(DCQCN, the transport's default, slows the senders down).

Phase failure: data-parallel steps (ring, ECMP ports) on a fresh leaf-spine
per protection; --fail-after seconds after the first step ended,
leaf1-spine1 black-holes both ways (the ports stay up). Protections: none,
controller (heartbeats; the controller reroutes), data plane (the leaves'
failover, 100 ms). Per case:
steps completed (a rank gives up after STALL_TIMEOUT_S without a peer), the
median step before, the step the failure hit, the median after.

Phase topologies: fat-tree-k4 (ranks h1, h5, h9, h13: one per pod, every
hop through the cores) and rail-optimized (g1.eth0, g2.eth1, g3.eth2,
g4.eth3: one NIC per rail, every hop through the spines), modes ecmp,
path-aware, flowlet and spray (set on every switch below the top tier) x
ring and halving-doubling: step time, bus bandwidth, retransmissions, and
the busiest top switch's share of the top tier's packets.

Phase placement: topologies/rail-optimized.yaml, one rank per GPU NIC (16),
a 64 KB model, ring all-reduce, one connection per pair; ranks ordered
rail by rail (rail-aware) or server by server (host-major,
hostagent/collectives/placement.py): step time and the packets through the
spines.

Phase torus: a ring all-reduce of 16 ranks (the placement phase's model,
rate and connections) on torus-4x4, its ranks along a ring of neighbours
(control/generators/collective_model.py: every ring hop one link) or in a
random order, against the same ring on fat-tree-k4 in host order and in
a random order: step time, bus bandwidth, and the switches a packet
crossed (one, plus the packets switches forwarded to switches over those
they received from hosts; frames the machine lost before a pipeline are
counted apart), next to the flow model's busiest link and hops for the same order.

Phase least-loaded (Alibaba HPN's channel choice): two ranks, h1 on leaf1
and h3 on leaf2, of leaf-spine with its spine links at LL_SPINE_MBPS
(BMv2 queues of 833 packets/s) and every port marking CE above ECN_K
packets; two channels a pair on the two spines (path-aware ports), each
at LL_LINE_RATE_PPS; data-parallel steps (a 256 KB model in one bucket:
32 pieces of 4 KB a ring step). Cases: no competing flow, then a fixed-
rate RoCEv2 flow of LL_COMPETING_PPS each way between h2 and h4 whose
source port hashes onto spine1 (hostagent.ecn.roce send); the spine
links', channels' and competing flow's rates all x --least-loaded-scale
(auto: the largest, in steps of 0.05 and at most 1, whose loaded case the
calibration's budget fits); each with
--channel-choice fixed and least-loaded. Per case: step and all-reduce
time, bus bandwidth, the share of the ranks' bytes on the channels
crossing spine1, retransmissions (and those of spine1's channels), and
the packets each spine carried.

Each phase's line rate (every phase but least-loaded; --line-rate-pps
sets it by hand) is sized to this machine before its cases start
(size_phase, docs/fidelity.md): the rate whose cost, fitted over earlier
runs of the phase's fabrics here (each case that ran whole records the
cores it kept busy), leaves the cores idle by the fidelity limit and its
margin; else the highest at which each fabric's ring (each rank to the
next, every channel, ACKs back) fits the calibration's budget; else the
phase's default (FALLBACK_LINE_RATE_PPS, FALLBACK_PLACEMENT_LINE_RATE_PPS),
said. Every case of a phase runs at one rate (its most demanding fabric's),
so that they compare. The budget's plan at that rate is printed, loudly
when over, and every row carries line_rate_pps and budget.

Every case but the failure phase's carries a fidelity verdict (frames lost
before a pipeline, threads waiting for a core; docs/fidelity.md), and the
run's last lines say which cases were not faithful.

CSV (and for lb, torus and least-loaded a PNG) under --out/<phase>; prints a table and where files went.
"""
from __future__ import annotations

import contextlib
import json
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Sequence

import yaml

REPO = Path(__file__).resolve().parent.parent

from emulator.bmv2 import DEFAULT_EXPERIMENT_LOG_LEVEL, LOG_LEVELS
from control.generators.collective_model import order as rank_order, ring_allreduce
from control.generators.common import Graph
from control.generators.flow_model import FlowModel
from emulator import run_costs
from emulator.build import compile_p4
from emulator.calibration import Flow, fitting_rate
from control.controller import FabricController
from control.topology import Topology
from emulator.network import Network
from emulator.fidelity import FidelityMonitor, Verdict, report
from experiments.common import (LINK_RATES, RANK_ACK_SHARE, StartGate, announce_budget, budget_scale,
                                calibration_or_why, case_fidelity, experiment_parser, fail_link, lost_before_pipeline,
                                machine_identity, nic_link_pps, print_table, rate_by_fit, record_run_cost, ring_pairs,
                                roce_agent, save_figure, set_link_rates, whole_rate, write_csv)
from features import topology_from_dict
from features.failover.heartbeat import running_heartbeats
from features.failover.rerouting import Rerouter
from features.ecn import EcnProfile
from features.aggregation import Job
from features.load_balancing import LbMode
from hostagent.aggregation.runs import start_server, stop_server
from hostagent.collectives import schedule as sc
from hostagent.collectives.communicator import ALL_REDUCE_ALGORITHMS, CHANNEL_CHOICES, IN_NETWORK
from hostagent.collectives.paths import PathModel
from hostagent.ecn.roce import flow_sport
from hostagent.collectives.placement import PLACEMENTS, Rank, ranks, ring_hops_across_rails
from hostagent.collectives.ranks import COLLECTIVE_PRELOAD, COLLECTIVE_PROGRAM, RankLauncher, RankProcess
from hostagent.rdma.transport import GO_BACK_N, MODES as TRANSPORTS
from hostagent.start import Process

PHASES = ("lb", "transport", "allreduce", "topologies", "jobs", "placement", "failure", "torus", "least-loaded")
MODES = ("ecmp", "path-aware", "flowlet", "spray", "adaptive")
RANKS = ("h1", "h2", "h3", "h4")
LAUNCHER = RankLauncher(COLLECTIVE_PROGRAM, COLLECTIVE_PRELOAD)     # the ranks: forks of one process (ranks.py)
ECN_K = 10                   # jobs phase with ECN: step marking above this many packets queued (of 64)
AGGREGATION_JOB = 1          # lb phase: the ranks as the switch's aggregation job, its server ps on leaf2
SPINES = ("spine1", "spine2")
LEAVES = ("leaf1", "leaf2")
FALLBACK_PLACEMENT_LINE_RATE_PPS = 400.0   # placement and torus, without a calibration: 16 ranks' connections
PLACEMENT_MODEL_BYTES = 64 * 1024
PLACEMENT_TIMEOUT_S = 180.0  # a rank's wait, generous: 16 ranks start on two cores (the stalls of over 60 s
                             # seen before 2026-11-26 were the endpoint's clock, docs/collectives.md)
FALLBACK_LINE_RATE_PPS = 1000.0    # each connection's top rate (1 KB payloads) without a calibration or earlier
                                   # runs (size_phase): what BMv2 forwarded for four ranks' channels on the 2-core VM
                                   # of 2026-11 without dropping (3000 lost hundreds of packets a step)
# Phase topologies: four ranks whose traffic all crosses the top tier, the modes and algorithms run there
TOPOLOGY_RANKS = {"fat-tree-k4": ("h1", "h5", "h9", "h13"),                  # one host per pod: through the cores
                  "rail-optimized": ("g1.eth0", "g2.eth1", "g3.eth2", "g4.eth3")}  # one NIC per rail: the spines
TOPOLOGY_MODES = ("ecmp", "path-aware", "flowlet", "spray")
TOPOLOGY_ALGORITHMS = (sc.RING, sc.HALVING_DOUBLING)
PROTECTIONS = ("none", "controller", "data plane")
# Phase torus: (topology, rank order) cases, 16 ranks each
TORUS_CASES = (("torus-4x4", "neighbours"), ("torus-4x4", "random"), ("fat-tree-k4", "host order"),
               ("fat-tree-k4", "random"))
HEARTBEAT_MS, FAILOVER_TIMEOUT_MS = 20, 100     # as experiments/failover_timeline.py
FAILED_LINK = ("leaf1", "spine1")
# Phase allreduce: ranks by count on each topology, the aggregation job's server, the cases
ALLREDUCE_RANKS: dict[str, dict[int, tuple[str, ...]]] = {"leaf-spine": {2: ("h1", "h5"), 4: ("h1", "h2", "h5", "h6"),
                                  8: ("h1", "h2", "h3", "h4", "h5", "h6", "h7", "h8")},
                   "fat-tree-k4": {8: ("h1", "h3", "h5", "h7", "h9", "h11", "h13", "h15")}}
ALLREDUCE_SERVER = {"leaf-spine": "ps", "fat-tree-k4": "h2"}
ALLREDUCE_CASES = ((sc.RING, 0), (sc.HALVING_DOUBLING, 0), (IN_NETWORK, 0), (IN_NETWORK, 1))   # (algorithm, trees)
ALLREDUCE_SLOTS = 64         # the job's slots on every aggregating switch (at least the worker's window)
# Phase least-loaded: two ranks across the spines, two channels on the two spines, a competing flow on spine1
LL_RANKS = ("h1", "h3")
LL_COMPETING = (("h2", "h4"), ("h4", "h2"))     # the competing flow, one each way, hashed onto LOADED_SPINE
LOADED_SPINE = "spine1"
# The phase's rates at scale 1 (--least-loaded-scale; auto: the largest the budget fits, in LL_SCALE_STEPs): what
# the scenario is made of is their ratios, kept at every scale
LL_SPINE_MBPS = 10.0         # leaf-spine links: BMv2 queues of 833 packets/s, so the links, not the CPU, are what
                             # the channels share (at 100 Mbit/s the CPU, shared by both paths, runs out first)
LL_LINE_RATE_PPS = 800.0     # each channel's top rate: just below a spine link's, the unloaded path loses nothing
LL_COMPETING_PPS = 500.0     # the competing flow's fixed rate: leaves spine1's links 333 packets/s
LL_SCALE_STEP = 0.05
LL_MODEL_BYTES = 256 * 1024
LL_BUCKETS = 1               # one bucket: a ring step moves 128 KB a direction, 32 least-loaded pieces
STALL_TIMEOUT_S = 20.0       # failure phase: a rank waiting this long for a peer gives up (the step stalled;
                             # shorter, a rank gave up on a peer still starting, with heartbeats running)


# -- each phase's connection rate, sized to this machine (docs/fidelity.md) ------------------------------------

@dataclass(frozen=True)
class PhaseFabric:
    """One fabric a phase runs its ranks on, as its cost is known by."""
    label: str                  # the topology as the phase has it ("leaf-spine + ps", "torus-4x4")
    topo: Topology
    ranks: tuple[str, ...]      # the largest job's hosts, in ring order
    channels: int

    @property
    def cost_key(self) -> str:
        """What its cases' costs are recorded under (emulator/run_costs.py)."""
        return f"collectives {self.label}, {len(self.ranks)} ranks, {self.channels} channels a pair"

    def flows(self, rate: float) -> list[Flow]:
        return [Flow(a, b, rate) for a, b in ring_pairs(self.ranks, self.channels)]


@dataclass(frozen=True)
class Sizing:
    """A phase's connection rate, how it was chosen, and what the budget
    says of it: what its rows carry."""
    line_rate_pps: float
    how: str
    budget: str                 # within, over xD, unknown: the calibration's plan at the rate, the worst fabric's
    record: bool = True         # its cases' costs are recorded, for the next run to size itself by

    def columns(self) -> dict:
        return {"line_rate_pps": self.line_rate_pps, "budget": self.budget}


def fabric_rate(f: PhaseFabric) -> tuple[float, str] | None:
    """What `f`'s connections may run at on this machine: from what earlier
    runs of it cost here (the rate leaving the cores idle by the fidelity
    limit and its margin), else the highest at which its ring (each rank to
    the next on every channel, ACKs back) fits the calibration's budget,
    the ranks priced as RDMA agents (their transport) and the switches as
    the pipeline with every feature off; None without either."""
    fitted = run_costs.fit(run_costs.observed(machine_identity(), f.cost_key))
    if fitted is not None:
        return rate_by_fit(fitted, machine_identity().cores)
    cal, _ = calibration_or_why()
    if cal is None:
        return None
    rate = whole_rate(fitting_rate(f.topo, ring_pairs(f.ranks, f.channels), cal, "fabric",
                                   ack_share=RANK_ACK_SHARE, agents="rdma"))
    return rate, (f"its ring's connections within half this machine's cores by the calibration of "
                  f"{cal.measured_at}; no earlier run of it here says what a whole run costs, so this run is one "
                  f"the next sizes itself by")


def size_phase(phase: str, fabrics: Sequence[PhaseFabric], given: float | None, fallback: float,
               record: bool = True) -> Sizing:
    """Each connection's top rate for a phase, said before its cases start:
    `given` (--line-rate-pps); else the lowest of its fabrics' rates
    (fabric_rate: every case of the phase runs at one rate, so that they
    compare); else `fallback`, said to be one. Then the budget's plan at
    that rate for each fabric, loudly where it is over."""
    if given:
        rate, how = given, "as given (--line-rate-pps)"
    else:
        known = {f.label: r for f in fabrics if (r := fabric_rate(f)) is not None}
        if not known:
            rate, how = fallback, f"{calibration_or_why()[1] or 'no calibration'}: the phase's default"
        else:
            label = min(known, key=lambda k: known[k][0])
            rate, how = known[label][0], f"{label}: {known[label][1]}"
    print(f"line rate ({phase}): {rate:g} packets/s a connection ({how})", flush=True)
    budgets = [announce_budget(f.topo, f.flows(rate), "fabric", RANK_ACK_SHARE, agents="rdma") for f in fabrics]
    return Sizing(rate, how, worst_budget(budgets), record)


def worst_budget(budgets: Sequence[str]) -> str:
    """The worst of announce_budget()'s texts: unknown, then the largest "over xD", then within."""
    if "unknown" in budgets or not budgets:
        return "unknown"
    over = [float(b.removeprefix("over x")) for b in budgets if b.startswith("over x")]
    return f"over x{max(over):.2f}" if over else "within"


def spine_packets(ctl: FabricController, switches=SPINES) -> dict[str, int]:
    """Packets each of `switches` received so far (all its ports)."""
    return {sw: sum(pkts for pkts, _ in ctl.counter(sw, "ingress_port_counter").values()) for sw in switches}


def topology_raw(name: str, without: tuple[str, ...] = ("int",)) -> dict:
    """topologies/<name>.yaml as a mapping, without the sections named (no
    INT: the switches' counters are the jobs' packets and their ACKs)."""
    raw = yaml.safe_load((REPO / "topologies" / f"{name}.yaml").read_text())
    for section in without:
        raw.pop(section, None)
    return raw


def written_topology(raw: dict, path: Path):
    """The topology `raw`, written to `path` (the ranks' path model reads it): (topology, path)."""
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return topology_from_dict(raw, str(path)), path


def launch(case: str, job: list[Rank], extra: list[str], args, out: Path, job_id: int = 0,
           gate: StartGate | None = None, costs: PhaseFabric | None = None) -> list[RankProcess]:
    """One process per rank of `job`, in its host's namespace, on its NIC,
    running data-parallel steps at the phase's line rate; the ranks start
    together once every one is ready (a StartGate: opened here, unless
    `gate` is given, which the caller opens with start() once every job
    sharing it is launched). `costs`: the fabric whose cost the case adds
    to, once it ran whole and was judged (collect())."""
    case_out = out / case
    case_out.mkdir(parents=True, exist_ok=True)
    if _judged:                      # the case's fidelity, judged by collect()
        _monitors[case] = case_fidelity(*_judged[-1])
        if costs is not None and args.sizing.record:
            _costs[case] = (costs.cost_key, args.sizing.line_rate_pps)
    extra = ["--line-rate-pps", f"{args.sizing.line_rate_pps:g}", *extra]
    own = gate is None
    gate = gate or StartGate(case_out)
    addresses = ",".join(r.ip for r in job)
    procs = []
    for rank, r in enumerate(job):     # rank 0 prints each step as it ends, in its log
        argv = ["step", "--workload", "data-parallel", "--steps", str(args.steps), "--rank", str(rank),
                "--addresses", addresses, "--iface", r.iface, "--src-ip", r.ip, "--src-mac", r.mac,
                "--gw-mac", r.gateway_mac, *gate.args(), "--job", str(job_id),
                "--out", str(case_out / f"rank{rank}"), *extra]
        procs.append(LAUNCHER.start(argv, r.host, case_out / f"rank{rank}.log", errors=case_out / f"rank{rank}.err"))
    if own:
        start(gate, procs, case)
    return procs


def start(gate: StartGate, procs: Sequence[Process], *cases: str) -> float:
    """Open `gate` once each of `procs` (the ranks of `cases`) is ready;
    each case's fidelity monitor counts from the start time, returned."""
    start_at = gate.open(procs)
    for case in cases:
        if case in _monitors:
            _monitors[case].traffic_starts(start_at)
    return start_at


def collect(case: str, procs: Sequence[Process], out: Path) -> dict:
    """Wait for a job's ranks: its step times (each step's slowest rank),
    bus bandwidths and retransmissions, and the case's fidelity verdict."""
    failed = []
    for rank, p in enumerate(procs):
        if p.wait(timeout=900) != 0:
            failed.append(f"rank {rank} (exit {p.returncode}): {rank_errors(out / case, rank)[-1500:]}")
    monitor = _monitors.pop(case, None)
    verdict = monitor.verdict() if monitor is not None else None
    cost = _costs.pop(case, None)
    if verdict is not None:
        _verdicts[case] = verdict
    if failed:
        raise RuntimeError(f"{case}: " + "\n".join(failed))
    if verdict is not None and cost is not None:     # what the whole case cost, for the next run to size by
        record_run_cost(machine_identity(), cost[0], cost[1], verdict.cpu)
    case_out = out / case
    n = len(procs)
    per_rank = [[float(line.split(",")[1]) for line in (case_out / f"rank{r}.csv").read_text().splitlines()[1:]]
                for r in range(n)]
    steps = [max(times) for times in zip(*per_rank)]
    busbw = [float(line.split(",")[7]) for r in range(n)
             for line in (case_out / f"rank{r}.collectives.csv").read_text().splitlines()[1:]]
    retransmitted = sum(json.loads((case_out / f"rank{r}.json").read_text())["retransmitted"] for r in range(n))
    return {"case": case, "ranks": n, "steps": len(steps),
            "step_ms_median": round(1000 * statistics.median(steps), 1), "step_ms_max": round(1000 * max(steps), 1),
            "busbw_MBps_median": round(statistics.median(busbw) / 1e6, 3) if busbw else 0.0,
            "retransmitted": retransmitted,
            **({"lost_before_pipeline": lost_before_pipeline(case, verdict), "fidelity": str(verdict)}
               if verdict is not None else {})}


def run_ranks(case: str, job: list[Rank], extra: list[str], ctl: FabricController, args, out: Path,
              costs: PhaseFabric | None = None) -> dict:
    """Data-parallel steps on `job`'s ranks; with the packets each spine carried."""
    before = spine_packets(ctl)
    procs = launch(case, job, extra, args, out, costs=costs)
    result = collect(case, procs, out)
    after = spine_packets(ctl)
    carried = {sw: after[sw] - before[sw] for sw in SPINES}
    total = sum(carried.values())
    return {**result, "spine1_share": round(carried["spine1"] / (total or 1), 3), "spine_packets": total}


def run_jobs_case(shared: bool, topo, args, out: Path, ctl: FabricController, ecn: bool = False) -> list[dict]:
    """Job 0 (ring) alone, or job 0 and job 1 (halving-doubling) on the
    same four hosts at once, each on its own queue pairs; with `ecn`, every
    switch port marks CE above ECN_K packets (DCQCN then slows the senders)."""
    ctl.feature("ecn").set_profiles({(sw.name, port, None): EcnProfile.step(ECN_K) if ecn else None
                                     for sw in topo.switches.values() for port in sw.ports})
    job = [Rank.of(topo.hosts[h].primary) for h in RANKS]
    extra = ["--channels", str(args.channels), "--paths", str(REPO / "topologies" / "leaf-spine.yaml")]
    sharing = ("shared" if shared else "alone") + ("-ecn" if ecn else "")
    (out / sharing).mkdir(parents=True, exist_ok=True)
    gate = StartGate(out / sharing)                 # the jobs start together
    marked_before = ce_marked(ctl)
    runs = [("job0", launch(f"{sharing}-job0", job, extra + ["--algorithm", sc.RING], args, out, 0, gate), sc.RING)]
    if shared:
        runs.append(("job1", launch(f"{sharing}-job1", job, extra + ["--algorithm", sc.HALVING_DOUBLING], args, out,
                                    1, gate), sc.HALVING_DOUBLING))
    start(gate, [p for _, procs, _ in runs for p in procs], *(f"{sharing}-{name}" for name, _, _ in runs))
    rows = []
    for name, procs, algorithm in runs:
        r = collect(f"{sharing}-{name}", procs, out)
        rows.append({"case": r.pop("case"), "sharing": "two jobs" if shared else "alone", "ecn": ecn, "job": name,
                     "algorithm": algorithm, **r})
    marked = ce_marked(ctl) - marked_before
    for row in rows:
        row["ce_marked_both_jobs"] = marked      # the switches' count: the jobs' packets together
    return rows


def ce_marked(ctl: FabricController) -> int:
    """Packets every switch marked CE so far (the ECN feature's counter)."""
    return sum(pkts for sw in ctl.topo.switches for pkts, _ in ctl.counter(sw, "ecn_marked_counter").values())


def run_case(mode: str, algorithm: str, topo, topo_file: Path, ctl: FabricController, args, out: Path,
             transport: str = GO_BACK_N, costs: PhaseFabric | None = None) -> dict:
    for leaf in LEAVES:
        ctl.feature("load_balancing").set_mode(leaf, LbMode("ecmp" if mode in ("ecmp", "path-aware") else mode))
    extra = ["--algorithm", algorithm, "--channels", str(args.channels), "--mode", transport]
    name = f"{mode}-{algorithm}" + ("" if transport == GO_BACK_N else f"-{transport}")
    if mode == "path-aware":
        extra += ["--paths", str(topo_file)]
    job = [Rank.of(topo.hosts[h].primary) for h in RANKS]
    if algorithm != IN_NETWORK:
        result = run_ranks(name, job, extra, ctl, args, out, costs)
    else:                   # the switch sums: the job's parameter server takes what it passes on
        result = with_parameter_server(topo, name, out, lambda options: run_ranks(name, job, extra + options, ctl,
                                                                                  args, out, costs))
    return {"case": result.pop("case"), "mode": mode, "algorithm": algorithm, "transport": transport,
            "channels": args.channels, **result}


def with_parameter_server(topo, case: str, out: Path, run: Callable[[list[str]], dict]) -> dict:
    """run(the ranks' options for aggregation job AGGREGATION_JOB) with the
    job's parameter server running beside it (it sums what the switch passes
    on): the result, with the blocks the server summed."""
    agg_job = topo.features["aggregation"].job(AGGREGATION_JOB)
    options = ["--aggregation-job", str(AGGREGATION_JOB), "--aggregation-server", topo.hosts[agg_job.server].ip,
               "--aggregation-block-elements", str(agg_job.block_elements)]
    (out / case).mkdir(parents=True, exist_ok=True)
    server = start_server(topo, AGGREGATION_JOB, out / case)
    try:
        result = run(options)
    finally:
        served = stop_server(server, out / case, AGGREGATION_JOB)
    return {**result, "server_blocks": served.get("blocks_completed", 0)}


def allreduce_topology(name: str, out: Path):
    """The allreduce phase's fabric, written to out/<name>.yaml: leaf-spine
    with four hosts a leaf and the server ps on leaf2, or fat-tree-k4; no
    INT; aggregation job AGGREGATION_JOB of the largest rank set (set_jobs
    changes it per case)."""
    raw = topology_raw(name, ("int", "aggregation"))
    if name == "leaf-spine":
        raw["description"] = "Two spines, two leaves, four hosts a leaf and a parameter server on leaf2."
        raw["hosts"] = [{"name": f"h{i}", "role": "worker"} for i in range(1, 9)] + [{"name": "ps", "role": "server"}]
        raw["links"] = ([[f"h{i}", "leaf1"] for i in range(1, 5)] + [[f"h{i}", "leaf2"] for i in range(5, 9)]
                        + [["ps", "leaf2"]] + [[leaf, spine] for leaf in LEAVES for spine in SPINES])
    largest = ALLREDUCE_RANKS[name][max(ALLREDUCE_RANKS[name])]
    raw["aggregation"] = {"jobs": [{"job": AGGREGATION_JOB, "workers": list(largest),
                                    "server": ALLREDUCE_SERVER[name], "slots": ALLREDUCE_SLOTS}]}
    return written_topology(raw, out / f"{name}.yaml")


def allreduce_label(algorithm: str, trees: int) -> str:
    return f"{IN_NETWORK} ({'tree' if trees else 'one switch'})" if algorithm == IN_NETWORK else algorithm


def allreduce_case(name: str, ranks: int, algorithm: str, trees: int) -> str:
    return f"{name}-n{ranks}-{algorithm}" + ("-tree" if trees else "")


def run_allreduce_case(name: str, ranks_: tuple[str, ...], algorithm: str, trees: int, topo,
                       ctl: FabricController, args, out: Path, costs: PhaseFabric | None = None) -> dict:
    """Data-parallel steps on `ranks_` with `algorithm`; in-network: the
    aggregation job of these ranks, summed at the server's switch (trees 0)
    or over one tree of switches."""
    job = [Rank.of(topo.hosts[h].primary) for h in ranks_]
    extra = ["--algorithm", algorithm, "--channels", str(args.channels)]
    label, case = allreduce_label(algorithm, trees), allreduce_case(name, len(job), algorithm, trees)

    def run(options: list[str]) -> dict:
        return collect(case, launch(case, job, extra + options, args, out, costs=costs), out)

    if algorithm != IN_NETWORK:
        result = {**run([]), "server_blocks": ""}
    else:
        ctl.feature("aggregation").set_jobs([Job(AGGREGATION_JOB, ranks_, ALLREDUCE_SERVER[name],
                                                 slots=ALLREDUCE_SLOTS, trees=trees)])
        result = with_parameter_server(topo, case, out, run)
    return {"case": result.pop("case"), "topology": name, "algorithm": label, **result}


def allreduce_table(results: list[dict]) -> list[dict]:
    """One row per (topology, ranks): each algorithm's median step (ms), and
    in-network's against the ring's."""
    rows: dict[tuple[str, int], dict] = {}
    for r in results:
        row = rows.setdefault((r["topology"], r["ranks"]), {"topology": r["topology"], "ranks": r["ranks"]})
        row[f"{r['algorithm']} step ms"] = r["step_ms_median"] if r["step_ms_median"] != "" else "failed"
    for row in rows.values():
        ring = row.get(f"{sc.RING} step ms")
        for trees in ("one switch", "tree"):
            ina = row.get(f"{IN_NETWORK} ({trees}) step ms")
            if ring and ina and "failed" not in (ring, ina):
                row[f"{IN_NETWORK} ({trees}) / ring"] = round(ina / ring, 2)
    return list(rows.values())


def _plot_allreduce(results: list[dict], out: Path) -> Path:
    import matplotlib.pyplot as plt
    groups = list(dict.fromkeys((r["topology"], r["ranks"]) for r in results))
    algorithms = list(dict.fromkeys(r["algorithm"] for r in results))
    fig, ax = plt.subplots(figsize=(10, 4))
    width = 0.8 / len(algorithms)
    for i, alg in enumerate(algorithms):
        by = {(r["topology"], r["ranks"]): r["step_ms_median"] or 0 for r in results if r["algorithm"] == alg}
        ax.bar([g + (i - (len(algorithms) - 1) / 2) * width for g in range(len(groups))],
               [by.get(g, 0) for g in groups], width, label=alg)
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels([f"{t}\n{n} ranks" for t, n in groups])
    ax.set_ylabel("data-parallel step (ms, median)")
    ax.set_title("All-reduce algorithms by number of ranks")
    ax.legend()
    return save_figure(fig, out / "allreduce.png")


def run_placement_case(placement: str, topo, ctl: FabricController, args, out: Path,
                       costs: PhaseFabric | None = None) -> dict:
    job = ranks(topo, placement=placement)
    extra = ["--algorithm", sc.RING, "--channels", "1", "--model-bytes", str(PLACEMENT_MODEL_BYTES),
             "--timeout-s", str(PLACEMENT_TIMEOUT_S)]
    result = run_ranks(placement, job, extra, ctl, args, out, costs)
    return {"case": result.pop("case"), "placement": placement, "ring_hops_across_rails": ring_hops_across_rails(job),
            **result}


def topology_graph(topo) -> Graph:
    """The flow model's view of a topology: its switches, hosts and links."""
    return Graph([(sw.name, sw.role) for sw in topo.switches.values()], list(topo.hosts),
                 [(nic.host, nic.switch) for nic in topo.nics]
                 + [(sw.name, p.peer) for sw in topo.switches.values() for p in sw.ports.values()
                    if p.peer in topo.switches and sw.name < p.peer])


def switch_crossings(ctl: FabricController, topo) -> tuple[int, int]:
    """(packets switches received from hosts, packets switches forwarded to
    other switches) so far. A packet from a host crosses one switch plus one
    a forward to a switch: counted where it was forwarded, a frame the next
    switch's input path lost on a loaded machine (the case's verdict names
    it) still crossed the links it was routed over."""
    from_hosts = to_switches = 0
    for sw in topo.switches.values():
        host_ports = {p.number for p in sw.ports.values() if p.peer in topo.hosts}
        switch_ports = {p.number for p in sw.ports.values() if p.peer in topo.switches}
        received = ctl.counter(sw.name, "ingress_port_counter")
        from_hosts += sum(pkts for port, (pkts, _) in received.items() if port in host_ports)
        sent = ctl.counter(sw.name, "egress_port_counter")
        to_switches += sum(pkts for port, (pkts, _) in sent.items() if port in switch_ports)
    return from_hosts, to_switches


def run_torus_case(name: str, how: str, topo, ctl: FabricController, args, out: Path,
                   costs: PhaseFabric | None = None) -> dict:
    """16 ranks in `how` order running data-parallel steps, ring all-reduce;
    the switches a packet crossed, and the flow model's view of the ring."""
    graph = topology_graph(topo)
    hosts = rank_order(graph, how, len(topo.hosts))
    model = ring_allreduce(FlowModel(graph), hosts)
    job = [Rank.of(topo.hosts[h].primary) for h in hosts]
    extra = ["--algorithm", sc.RING, "--channels", "1", "--model-bytes", str(PLACEMENT_MODEL_BYTES),
             "--timeout-s", str(PLACEMENT_TIMEOUT_S)]
    case = f"{name}-{how.replace(' ', '-')}"
    before = switch_crossings(ctl, topo)
    procs = launch(case, job, extra, args, out, costs=costs)
    result = collect(case, procs, out)
    after = switch_crossings(ctl, topo)
    from_hosts, to_switches = (a - b for a, b in zip(after, before))
    return {"case": result.pop("case"), "topology": name, "order": how, **result,
            "switches_per_packet": round(1 + to_switches / (from_hosts or 1), 2),
            "model_mean_links": round(model.mean_hops, 2), "model_max_link_load": round(model.max_link_load, 2),
            "ring": " ".join(hosts)}


def _plot_torus(results: list[dict], out: Path) -> Path:
    import matplotlib.pyplot as plt
    labels = [f"{r['topology']}\n{r['order']}" for r in results]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    ax1.bar(range(len(results)), [r["step_ms_median"] or 0 for r in results])
    ax1.set_title("data-parallel step, ring all-reduce (ms, median)")
    ax2.bar(range(len(results)), [r["switches_per_packet"] for r in results])
    ax2.set_title("switches a packet crossed (mean)")
    for ax in (ax1, ax2):
        ax.set_xticks(range(len(results)))
        ax.set_xticklabels(labels, fontsize=8)
    fig.suptitle("16 ranks: a ring laid on torus-4x4's neighbours against fat-tree-k4")
    return save_figure(fig, out / "torus.png")


def failure_topology(protection: str):
    """The leaf-spine without INT or aggregation; failover in the leaves for
    `data plane`."""
    raw = topology_raw("leaf-spine", ("int", "aggregation"))
    if protection == "data plane":
        raw["failover"] = {"heartbeat_ms": HEARTBEAT_MS, "timeout_ms": FAILOVER_TIMEOUT_MS}
    return topology_from_dict(raw, f"leaf-spine ({protection})")


def lb_fabric_cases(phase: str, cases: list[tuple[str, str, str]], args) -> tuple[Path, list[dict]]:
    """Cases (mode, algorithm, transport) on the lb phase's fabric, in
    --out/<phase>; the leaves back in ECMP after."""
    out = Path(args.out) / phase
    out.mkdir(parents=True, exist_ok=True)
    topo, topo_file = lb_topology(out)
    nic = args.link_rate == "nic"
    fab = PhaseFabric("leaf-spine + ps" + (", links at the NIC rate" if nic else ""), topo, RANKS, args.channels)
    args.sizing = size_phase(phase, [fab], args.line_rate_pps, FALLBACK_LINE_RATE_PPS)
    link_pps = nic_link_pps(args.channels, args.sizing.line_rate_pps) if nic else None
    if link_pps is not None:        # the fabric's links, not the hosts' pacing, are what the channels share
        topo, topo_file = lb_topology(out, link_pps)
        print(f"links: every link at {link_pps:g} packets/s (a rank's {args.channels} channels and their ACKs)",
              flush=True)
    results = []
    with fabric(topo, args) as ctl:
        try:
            for mode, algorithm, transport in cases:
                print(f"==> {phase} {mode} {algorithm} ({transport}): {args.steps} data-parallel steps on "
                      f"{', '.join(RANKS)}, {args.channels} channels per pair", flush=True)
                try:
                    row = run_case(mode, algorithm, topo, topo_file, ctl, args, out, transport, fab)
                except RuntimeError as exc:     # a rank gave up: the case is recorded as failed, the phase goes on
                    print(f"    failed: {str(exc).splitlines()[0][:300]}", flush=True)
                    row = {"case": f"{mode}-{algorithm}" + ("" if transport == GO_BACK_N else f"-{transport}"),
                           "mode": mode, "algorithm": algorithm, "transport": transport, "channels": args.channels,
                           "steps": 0, "step_ms_median": "", "step_ms_max": "", "busbw_MBps_median": "",
                           "retransmitted": "", "failed": str(exc).splitlines()[0][:300]}
                results.append({**row, **args.sizing.columns(), "link_pps": link_pps or ""})
        finally:
            for leaf in LEAVES:
                ctl.feature("load_balancing").set_mode(leaf, LbMode())
    return out, results


def run_topology_case(name: str, mode: str, algorithm: str, topo, topo_file: Path, ctl: FabricController, args,
                      out: Path, costs: PhaseFabric | None = None) -> dict:
    """TOPOLOGY_RANKS[name] running data-parallel steps under `mode` (set on
    every switch below the top tier); the packets the top tier carried, and
    the busiest top switch's share of them (1/n is an even spread)."""
    top = [sw.name for sw in topo.switches.values() if sw.role in ("core", "spine")]
    for sw in topo.switches.values():
        if sw.name not in top:
            ctl.feature("load_balancing").set_mode(sw.name, LbMode("ecmp" if mode in ("ecmp", "path-aware") else mode))
    extra = ["--algorithm", algorithm, "--channels", str(args.channels)]
    if mode == "path-aware":
        extra += ["--paths", str(topo_file)]
    job = [Rank.of(topo.hosts[h].nics[n] if n else topo.hosts[h].primary)
           for h, _, n in (r.partition(".") for r in TOPOLOGY_RANKS[name])]

    before = spine_packets(ctl, top)
    procs = launch(f"{name}-{mode}-{algorithm}", job, extra, args, out, costs=costs)
    result = collect(f"{name}-{mode}-{algorithm}", procs, out)
    after = spine_packets(ctl, top)
    per_switch = [after[sw] - before[sw] for sw in top]
    return {"case": result.pop("case"), "topology": name, "mode": mode, "algorithm": algorithm, **result,
            "top_tier_packets": sum(per_switch), "busiest_top_share": round(max(per_switch) / (sum(per_switch) or 1), 3),
            "top_switches": len(top)}


def topology_file(name: str, out: Path):
    """topologies/<name>.yaml without INT or aggregation, written to
    out/<name>.yaml (the path model reads it)."""
    return written_topology(topology_raw(name, ("int", "aggregation")), out / f"{name}.yaml")


def rank_errors(case_out: Path, rank: int) -> str:
    """What rank `rank` of a case wrote to its standard error."""
    path = case_out / f"rank{rank}.err"
    return path.read_text().strip() if path.exists() else ""


def wait_for_first_step(log: Path, procs: Sequence[Process], timeout_s: float = 120.0) -> float:
    """When rank 0 ended its first step (it prints each step)."""
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if any(line.startswith("step 0:") for line in log.read_text().splitlines()):
            return time.time()
        failed = [(rank, p.returncode) for rank, p in enumerate(procs) if p.poll() not in (None, 0)]
        if failed:
            raise RuntimeError(f"ranks {failed} (rank, exit code) failed before the first step ended "
                               f"(see {log.parent})")
        time.sleep(0.05)
    raise RuntimeError(f"no step ended within {timeout_s:g} s (see {log.parent})")


def run_failure_case(protection: str, args, out: Path) -> dict:
    """Data-parallel steps (ring, two channels, ECMP ports) on a fresh
    leaf-spine; --fail-after seconds after the first step ended,
    leaf1-spine1 black-holes both ways (the ports stay up). Protections:
    none (routes stay: what hashes onto the link is lost until the ranks
    give up), controller (heartbeats; the controller polls their registers
    every 200 ms and reroutes), data plane (the leaves move the dead
    member's slots after 100 ms without heartbeats; the controller reroutes
    as well)."""
    topo = failure_topology(protection)
    case = protection.replace(" ", "-")
    job = [Rank.of(topo.hosts[h].primary) for h in RANKS]
    extra = ["--algorithm", sc.RING, "--channels", str(args.channels), "--timeout-s", str(STALL_TIMEOUT_S)]
    protected = protection != "none"
    with fabric(topo, args, judge=False) as ctl, \
            (running_heartbeats(topo, HEARTBEAT_MS / 1000) if protected else contextlib.nullcontext()):
        lock, stop = threading.Lock(), threading.Event()
        rerouter = Rerouter(ctl, FAILOVER_TIMEOUT_MS, lock, on_change=lambda m: None) if protected else None
        thread = threading.Thread(target=rerouter.run, args=(stop,), daemon=True) if rerouter else None
        if thread:
            thread.start()
        undo = None
        try:
            procs = launch(case, job, extra, args, out)
            first = wait_for_first_step(out / case / "rank0.log", procs)
            time.sleep(max(0.0, first + args.fail_after - time.time()))
            failed_at = time.time()
            undo = fail_link(topo, *FAILED_LINK)
            errors = []
            for rank, p in enumerate(procs):
                if p.wait(timeout=900) != 0:
                    stderr = rank_errors(out / case, rank)
                    errors.append(f"rank {rank}: {stderr.splitlines()[-1] if stderr else p.returncode}")
            errors = errors[:1]             # the first rank that gave up says why; the others wait on it
        finally:
            if undo is not None:
                undo()
            stop.set()
            if thread:
                thread.join()
    rerouted = [t - failed_at for t, _what in (rerouter.changes if rerouter else []) if t >= failed_at]
    # rank 0's steps as it printed them, "step N: T ms (...), ended at WALL" (a rank that gave up wrote no CSV)
    printed = [line for line in (out / case / "rank0.log").read_text().splitlines() if line.startswith("step ")]
    steps = [float(line.split(": ")[1].split(" ms")[0]) for line in printed]
    ends = [float(line.rsplit(" ", 1)[1]) for line in printed]
    hit = next((i for i, end in enumerate(ends) if end >= failed_at), None)
    before = steps[:hit] if hit is not None else steps
    after = steps[hit + 1:] if hit is not None else []
    return {"case": case, "protection": protection, "steps": args.steps, "steps_completed": len(steps),
            "steps_before_failure": sum(1 for end in ends if end < failed_at),
            "stalled": "yes: " + "; ".join(errors) if errors else "no",
            "step_ms_before": round(statistics.median(before), 1) if before else "",
            "failure_step": hit if hit is not None else "",
            "failure_step_ms": round(steps[hit], 1) if hit is not None else "",
            "step_ms_after": round(statistics.median(after), 1) if after else "",
            "rerouted_ms": round(1000 * rerouted[0], 1) if rerouted else "",
            "retransmitted": sum(json.loads((out / case / f"rank{r}.json").read_text())["retransmitted"]
                                 for r in range(len(job)) if (out / case / f"rank{r}.json").exists())}


def leaf_spine_without_int():
    """No INT reports: the spines' counters are the jobs' packets (and their ACKs)."""
    return topology_from_dict(topology_raw("leaf-spine"), "leaf-spine without INT")


def lb_topology(out: Path, link_pps: float | None = None):
    """The lb phase's fabric, written to out/topology.yaml (the path model
    reads it): the leaf-spine without INT, and a fifth host ps on leaf2, the
    parameter server of aggregation job 1 made of the four ranks (their
    in-network all-reduce is summed at leaf2); every link at `link_pps`
    packets/s (None: the file's 100 Mbit/s)."""
    raw = topology_raw("leaf-spine")
    if link_pps is not None:
        set_link_rates(raw, link_pps)
    raw["hosts"].append({"name": "ps", "role": "server"})
    raw["links"].append(["ps", "leaf2"])
    raw["aggregation"] = {"jobs": [{"job": AGGREGATION_JOB, "workers": list(RANKS), "server": "ps", "slots": 32}]}
    return written_topology(raw, out / "topology.yaml")


# The network the innermost fabric() brought up, each launched case's fidelity monitor (launch() starts it,
# collect() judges it), and the verdicts so far (the run's last lines)
_judged: list[tuple[Network, FabricController]] = []
_monitors: dict[str, FidelityMonitor] = {}
_costs: dict[str, tuple[str, float]] = {}       # case -> (its fabric's cost key, its line rate)
_verdicts: dict[str, Verdict] = {}


@contextlib.contextmanager
def fabric(topo, args, judge: bool = True) -> Iterator[FabricController]:
    """The topology on BMv2, programmed, queue rates set; with `judge`, the
    cases launched on it get a fidelity verdict (not where a case fails a
    link on purpose while a rerouter shares the controller)."""
    with Network(topo, REPO / "build" / "experiments" / "collectives", log_level=args.log_level) as net, \
            FabricController(topo) as ctl:
        ctl.program()
        net.apply_queue_rates()
        if judge:
            _judged.append((net, ctl))
        try:
            yield ctl
        finally:
            if judge:
                _judged.pop()


def _plot(results: list[dict], out: Path) -> Path:
    import matplotlib.pyplot as plt
    algorithms = list(dict.fromkeys(r["algorithm"] for r in results))
    modes = list(dict.fromkeys(r["mode"] for r in results))
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    width = 0.8 / len(algorithms)
    for i, alg in enumerate(algorithms):
        rows = {r["mode"]: r for r in results if r["algorithm"] == alg}
        xs = [m + (i - (len(algorithms) - 1) / 2) * width for m in range(len(modes))]
        ax1.bar(xs, [rows[m]["step_ms_median"] or 0 if m in rows else 0 for m in modes], width, label=alg)
        ax2.bar(xs, [rows[m]["busbw_MBps_median"] or 0 if m in rows else 0 for m in modes], width, label=alg)
    for ax, title in ((ax1, "data-parallel step time (ms, median)"), (ax2, "all-reduce bus bandwidth (MB/s)")):
        ax.set_xticks(range(len(modes)))
        ax.set_xticklabels(modes)
        ax.set_title(title)
        ax.legend()
    return save_figure(fig, out / "step_time.png")


# -- phase least-loaded ----------------------------------------------------------

def least_loaded_topology(out: Path, scale: float = 1.0):
    """leaf-spine without INT or aggregation, its leaf-spine links at
    `scale` x LL_SPINE_MBPS, written to out/topology.yaml (the ranks' path
    model reads it)."""
    raw = topology_raw("leaf-spine", ("int", "aggregation"))
    mbps = round(LL_SPINE_MBPS * scale, 6)
    raw["description"] = f"leaf-spine, spine links at {mbps:g} Mbit/s"
    raw["links"] = [{"a": a, "b": b, "bandwidth_mbps": mbps} if {a, b} & set(SPINES) else [a, b]
                    for a, b in raw["links"]]
    return written_topology(raw, out / "topology.yaml")


def least_loaded_flows(scale: float) -> list[Flow]:
    """The phase's traffic at `scale`, loaded: each rank's two channels to
    the other at their top rate, and the competing flow each way."""
    channels = [Flow(a, b, LL_LINE_RATE_PPS * scale) for a, b in ring_pairs(LL_RANKS, 2)]
    return channels + [Flow(a, b, LL_COMPETING_PPS * scale) for a, b in LL_COMPETING]


def least_loaded_scale(given: float | None, out: Path) -> tuple[float, str]:
    """The share of the phase's rates (spine links, channels, the competing
    flow) this run takes, and how it was chosen (budget_scale: the largest,
    in LL_SCALE_STEPs, at which the loaded case fits the budget, every host
    priced as an RDMA agent, the switches as the pipeline with every
    feature off)."""
    return budget_scale(given, least_loaded_topology(out)[0], least_loaded_flows(1.0), "fabric", "rdma",
                        LL_SCALE_STEP, "--least-loaded-scale")


def spine_of(model: PathModel, src_ip: str, dst_ip: str, sport: int) -> str:
    """The spine a flow from `sport` crosses."""
    return next(sw for sw, _ in model.path(src_ip, dst_ip, sport).hops if sw in SPINES)


def channel_spines(model: PathModel, addresses: list[str], channels: int) -> list[list[str]]:
    """For each rank of a two-rank job, the spine each of its channels to
    the other rank crosses, with the path-aware ports `--paths` chooses."""
    return [[spine_of(model, addresses[r], addresses[1 - r], port)
             for port in model.choose_ports(addresses[r], addresses[1 - r], channels)] for r in range(2)]


def competing_qp(model: PathModel, src_ip: str, dst_ip: str, spine: str = LOADED_SPINE, first: int = 1) -> int:
    """The lowest queue pair (from `first`) whose RoCEv2 flow (source port
    hostagent.ecn.roce.flow_sport(qp)) hashes onto `spine`."""
    for qp in range(first, first + 512):
        if spine_of(model, src_ip, dst_ip, flow_sport(qp)) == spine:
            return qp
    raise ValueError(f"no queue pair among {first}..{first + 511} puts {src_ip} -> {dst_ip} on {spine}")


def loaded_share(channel_bytes: list[list[int]], spines: list[list[str]], spine: str = LOADED_SPINE) -> float:
    """The share of the ranks' bytes sent on channels crossing `spine`
    (channel_bytes and spines per rank, per channel)."""
    total = sum(sum(b) for b in channel_bytes)
    on = sum(b for rank_bytes, rank_spines in zip(channel_bytes, spines)
             for b, sw in zip(rank_bytes, rank_spines) if sw == spine)
    return round(on / total, 3) if total else 0.0


def run_least_loaded_case(load: bool, choice: str, topo, topo_file: Path, spines: list[list[str]],
                          ctl: FabricController, args, out: Path) -> dict:
    """Data-parallel steps of LL_RANKS with `choice`: step and all-reduce
    times, the share of bytes on spine1's channels, retransmissions, spine packets."""
    job = [Rank.of(topo.hosts[h].primary) for h in LL_RANKS]
    case = f"{'loaded' if load else 'unloaded'}-{choice}"
    extra = ["--algorithm", sc.RING, "--channels", "2", "--channel-choice", choice, "--paths", str(topo_file),
             "--model-bytes", str(LL_MODEL_BYTES),
             "--buckets", str(LL_BUCKETS)]
    before = spine_packets(ctl)
    result = collect(case, launch(case, job, extra, args, out), out)
    after = spine_packets(ctl)
    summaries = [json.loads((out / case / f"rank{r}.json").read_text()) for r in range(len(job))]
    allreduce_s = [float(line.split(",")[5]) for r in range(len(job))
                   for line in (out / case / f"rank{r}.collectives.csv").read_text().splitlines()[1:]]
    loaded_channels = [[c for c, sw in enumerate(rank_spines) if sw == LOADED_SPINE] for rank_spines in spines]
    competing = args.sizing.line_rate_pps * LL_COMPETING_PPS / LL_LINE_RATE_PPS
    return {"case": result.pop("case"), "competing_flow": f"{competing:g} pps each way on {LOADED_SPINE}"
            if load else "none", "channel_choice": choice, "steps": result["steps"],
            "step_ms_median": result["step_ms_median"], "step_ms_max": result["step_ms_max"],
            "allreduce_ms_median": round(1000 * statistics.median(allreduce_s), 1) if allreduce_s else "",
            "busbw_MBps_median": result["busbw_MBps_median"],
            "spine1_channel_share": loaded_share([s["channel_bytes"] for s in summaries], spines),
            **{f"spine1_channel_share_rank{r}": loaded_share([s["channel_bytes"]], [spines[r]])
               for r, s in enumerate(summaries)},
            "retransmitted": result["retransmitted"],
            "spine1_channel_retransmitted": sum(s["channel_retransmitted"][c] for s, cs in
                                                zip(summaries, loaded_channels) for c in cs),
            "spine1_packets": after["spine1"] - before["spine1"], "spine2_packets": after["spine2"] - before["spine2"],
            **{k: result[k] for k in ("lost_before_pipeline", "fidelity") if k in result}}


def least_loaded_phase(args) -> tuple[Path, list[dict]]:
    """Phase least-loaded (module docstring): fixed against least-loaded
    channels, without and with a competing flow on spine1."""
    out = Path(args.out) / "least-loaded"
    out.mkdir(parents=True, exist_ok=True)
    scale, how = least_loaded_scale(args.least_loaded_scale, out)
    topo, topo_file = least_loaded_topology(out, scale)
    print(f"least-loaded: rates x{scale:g} ({how}): spine links {LL_SPINE_MBPS * scale:g} Mbit/s, channels "
          f"{LL_LINE_RATE_PPS * scale:g} packets/s, the competing flow {LL_COMPETING_PPS * scale:g}", flush=True)
    args.sizing = Sizing(LL_LINE_RATE_PPS * scale, how, announce_budget(topo, least_loaded_flows(scale), "fabric",
                                                                         RANK_ACK_SHARE, agents="rdma"), record=False)
    model = PathModel(topo)
    spines = channel_spines(model, [topo.hosts[h].ip for h in LL_RANKS], 2)
    results = []
    with fabric(topo, args) as ctl:
        ctl.feature("ecn").set_profiles({(sw.name, port, None): EcnProfile.step(ECN_K)
                                         for sw in topo.switches.values() for port in sw.ports})
        for load in (False, True):
            competing = []
            try:
                if load:
                    for src, dst in LL_COMPETING:
                        qp = competing_qp(model, topo.hosts[src].ip, topo.hosts[dst].ip)
                        competing.append(roce_agent(topo.hosts[src], "send", start_at=time.time(), out_dir=out,
                                                    extra=["--dst-ip", topo.hosts[dst].ip, "--qp", str(qp),
                                                           "--duration", "600", "--fixed-rate", "--line-rate-pps",
                                                           f"{LL_COMPETING_PPS * scale:g}"]))
                    time.sleep(2.0)                     # its queue on spine1 builds first
                for choice in CHANNEL_CHOICES:
                    print(f"==> least-loaded: {args.steps} data-parallel steps (ring) on {', '.join(LL_RANKS)}, "
                          f"2 channels ({' and '.join(spines[0])} from {LL_RANKS[0]}), --channel-choice {choice}, "
                          f"{'a competing flow on ' + LOADED_SPINE if load else 'no competing flow'}", flush=True)
                    results.append({**run_least_loaded_case(load, choice, topo, topo_file, spines, ctl, args, out),
                                    "scale": scale, **args.sizing.columns()})
            finally:
                for proc in competing:
                    proc.terminate()
                    proc.wait(timeout=10)
    return out, results


def _plot_least_loaded(results: list[dict], out: Path) -> Path:
    import matplotlib.pyplot as plt
    labels = [f"{r['channel_choice']}\n{'competing flow' if r['competing_flow'] != 'none' else 'no competing flow'}"
              for r in results]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    xs = range(len(results))
    ax1.bar([x - 0.2 for x in xs], [r["step_ms_median"] for r in results], 0.4, label="step")
    ax1.bar([x + 0.2 for x in xs], [r["allreduce_ms_median"] or 0 for r in results], 0.4, label="all-reduce")
    ax1.set_title("median time (ms)")
    ax1.legend()
    ax2.bar(xs, [r["spine1_channel_share"] for r in results], color="C2")
    ax2.axhline(0.5, color="grey", linestyle=":")
    ax2.set_ylim(0, 1)
    ax2.set_title(f"share of bytes on the channels through {LOADED_SPINE}")
    for ax in (ax1, ax2):
        ax.set_xticks(list(xs))
        ax.set_xticklabels(labels, fontsize=8)
    fig.suptitle("Two ranks across the spines: fixed split against least-loaded channels")
    return save_figure(fig, out / "least_loaded.png")


def main(argv: list[str] | None = None) -> int:
    ap = experiment_parser("collectives", __doc__)
    ap.add_argument("--phases", nargs="*", default=list(PHASES), choices=PHASES)
    ap.add_argument("--modes", nargs="*", default=list(MODES), choices=MODES)
    ap.add_argument("--algorithms", nargs="*", default=ALL_REDUCE_ALGORITHMS, choices=ALL_REDUCE_ALGORITHMS)
    ap.add_argument("--topologies", nargs="*", default=list(TOPOLOGY_RANKS), choices=list(TOPOLOGY_RANKS),
                    help="topologies phase")
    ap.add_argument("--allreduce-topologies", nargs="*", default=list(ALLREDUCE_RANKS), choices=list(ALLREDUCE_RANKS),
                    help="allreduce phase")
    ap.add_argument("--allreduce-ranks", nargs="*", type=int, default=[2, 4, 8],
                    help="allreduce phase: rank counts (leaf-spine 2, 4, 8; fat-tree-k4 8)")
    ap.add_argument("--placements", nargs="*", default=list(PLACEMENTS), choices=PLACEMENTS)
    ap.add_argument("--torus-topologies", nargs="*", default=list(dict.fromkeys(n for n, _ in TORUS_CASES)),
                    choices=list(dict.fromkeys(n for n, _ in TORUS_CASES)), help="phase torus: the topologies run")
    ap.add_argument("--protections", nargs="*", default=list(PROTECTIONS), choices=PROTECTIONS,
                    help="failure phase")
    ap.add_argument("--fail-after", type=float, default=2.0,
                    help="failure phase: seconds after the first step ended")
    ap.add_argument("--steps", type=int, default=8, help="training steps per case")
    ap.add_argument("--channels", type=int, default=2, help="connections per peer pair")
    ap.add_argument("--link-rate", choices=LINK_RATES, default="file",
                    help="phases lb and transport: the file's links (100 Mbit/s: the hosts' line rate is what "
                         "bounds a step), or every link at the rate a rank's channels fill (nic: the links are what "
                         "the channels share, and where load balancing can matter)")
    ap.add_argument("--least-loaded-scale", type=float, default=None, metavar="S",
                    help="phase least-loaded: its spine links', channels' and competing flow's rates x S (default: "
                         "the largest the calibration's budget fits, in steps of 0.05, at most 1)")
    ap.add_argument("--line-rate-pps", type=float, default=None, metavar="PPS",
                    help="each connection's top rate in every phase but least-loaded (default: sized to this machine "
                         "per phase: what earlier runs of its fabrics cost here, else the calibration's budget)")
    ap.add_argument("--out", default=str(REPO / "experiments" / "results" / "collectives"),
                    help="results directory (default %(default)s)")
    ap.add_argument("--log-level", default=DEFAULT_EXPERIMENT_LOG_LEVEL, choices=LOG_LEVELS)
    args = ap.parse_args(argv)
    if args.steps < 1 or args.channels < 1:
        ap.error("--steps and --channels must be >= 1")
    for option in ("line_rate_pps", "least_loaded_scale"):
        if getattr(args, option) is not None and not 0 < getattr(args, option) < float("inf"):
            ap.error(f"--{option.replace('_', '-')} must be above 0, got {getattr(args, option):g}")
    compile_p4()
    written = []
    if "lb" in args.phases:
        out, results = lb_fabric_cases("lb", [(m, a, GO_BACK_N) for m in args.modes for a in args.algorithms
                                              # the switch's packets have one source port: nothing to choose
                                              if not (a == IN_NETWORK and m == "path-aware")], args)
        written += [write_csv(out / "summary.csv", results), _plot(results, out)]
        print_table(results)
    if "transport" in args.phases:
        out, results = lb_fabric_cases("transport", [(m, sc.RING, t) for m in args.modes
                                                     if m in ("ecmp", "spray", "adaptive") for t in TRANSPORTS], args)
        written.append(write_csv(out / "summary.csv", results))
        print_table(results)
    if "allreduce" in args.phases:
        out = Path(args.out) / "allreduce"
        out.mkdir(parents=True, exist_ok=True)
        results = []
        counts = {name: [n for n in ALLREDUCE_RANKS[name] if n in args.allreduce_ranks]
                  for name in args.allreduce_topologies}
        topos = {name: allreduce_topology(name, out)[0] for name in args.allreduce_topologies if counts[name]}
        fabs = {(name, n): PhaseFabric(f"{name} (allreduce)", topo, ALLREDUCE_RANKS[name][n], args.channels)
                for name, topo in topos.items() for n in counts[name]}
        args.sizing = size_phase("allreduce", list(fabs.values()), args.line_rate_pps, FALLBACK_LINE_RATE_PPS)
        for name, topo in topos.items():
            with fabric(topo, args) as ctl:
                for n in counts[name]:
                    ranks_ = ALLREDUCE_RANKS[name][n]
                    for algorithm, trees in ALLREDUCE_CASES:
                        if algorithm not in args.algorithms:
                            continue
                        print(f"==> allreduce {name}, {n} ranks, {algorithm}{' over a tree' if trees else ''}: "
                              f"{args.steps} data-parallel steps", flush=True)
                        try:
                            results.append({**run_allreduce_case(name, ranks_, algorithm, trees, topo, ctl, args,
                                                                 out, fabs[name, n]), **args.sizing.columns()})
                        except RuntimeError as exc:      # a rank gave up: the case is recorded as failed
                            print(f"    failed: {str(exc).splitlines()[0][:300]}", flush=True)
                            results.append({"case": allreduce_case(name, n, algorithm, trees),
                                            "topology": name, "algorithm": allreduce_label(algorithm, trees),
                                            "ranks": n, "steps": 0,
                                            "step_ms_median": "", "step_ms_max": "", "busbw_MBps_median": "",
                                            "retransmitted": "", "server_blocks": "",
                                            "failed": str(exc).splitlines()[0][:300]})
        table_rows = allreduce_table(results)
        written += [write_csv(out / "summary.csv", results), write_csv(out / "table.csv", table_rows),
                    _plot_allreduce(results, out)]
        print_table(table_rows)
    if "topologies" in args.phases:
        out = Path(args.out) / "topologies"
        out.mkdir(parents=True, exist_ok=True)
        results = []
        files = {name: topology_file(name, out) for name in args.topologies}
        fabs_by_name = {name: PhaseFabric(name, topo, TOPOLOGY_RANKS[name], args.channels)
                        for name, (topo, _) in files.items()}
        args.sizing = size_phase("topologies", list(fabs_by_name.values()), args.line_rate_pps,
                                 FALLBACK_LINE_RATE_PPS)
        for name, (topo, topo_file) in files.items():
            with fabric(topo, args) as ctl:
                for mode in (m for m in args.modes if m in TOPOLOGY_MODES):
                    for algorithm in (a for a in args.algorithms if a in TOPOLOGY_ALGORITHMS):
                        print(f"==> topologies {name} {mode} {algorithm}: {args.steps} data-parallel steps on "
                              f"{', '.join(TOPOLOGY_RANKS[name])}", flush=True)
                        results.append({**run_topology_case(name, mode, algorithm, topo, topo_file, ctl, args, out,
                                                            fabs_by_name[name]), **args.sizing.columns()})
        written.append(write_csv(out / "summary.csv", results))
        print_table(results)
    if "jobs" in args.phases:
        out = Path(args.out) / "jobs"
        out.mkdir(parents=True, exist_ok=True)
        topo = leaf_spine_without_int()
        # sized for both jobs at once (each a ring's connections, every channel); not recorded: a case is one job
        args.sizing = size_phase("jobs", [PhaseFabric("leaf-spine, two jobs", topo, RANKS, 2 * args.channels)],
                                 args.line_rate_pps, FALLBACK_LINE_RATE_PPS, record=False)
        results = []
        with fabric(topo, args) as ctl:
            for shared, ecn in ((False, False), (True, False), (True, True)):
                print(f"==> jobs: {'job 0 (ring) and job 1 (halving-doubling) at once' if shared else 'job 0 alone'}"
                      f" on {', '.join(RANKS)}, {args.steps} data-parallel steps, path-aware"
                      f"{f', ECN marking above {ECN_K} packets' if ecn else ''}", flush=True)
                results += [{**r, **args.sizing.columns()} for r in run_jobs_case(shared, topo, args, out, ctl, ecn)]
        written.append(write_csv(out / "summary.csv", results))
        print_table(results)
    if "placement" in args.phases:
        out = Path(args.out) / "placement"
        out.mkdir(parents=True, exist_ok=True)
        topo = topology_from_dict(topology_raw("rail-optimized", without=()),
                                  "rail-optimized")
        placed = {placement: ranks(topo, placement=placement) for placement in args.placements}
        fabs_by_placement = {placement: PhaseFabric(f"rail-optimized, {placement}", topo,
                                                    tuple(f"{r.host}.{r.nic}" for r in job), 1)
                             for placement, job in placed.items()}
        args.sizing = size_phase("placement", list(fabs_by_placement.values()), args.line_rate_pps,
                                 FALLBACK_PLACEMENT_LINE_RATE_PPS)
        results = []
        with fabric(topo, args) as ctl:
            for placement in args.placements:
                print(f"==> placement {placement}: {args.steps} data-parallel steps (ring) on every GPU NIC of "
                      f"rail-optimized, one rank each", flush=True)
                results.append({**run_placement_case(placement, topo, ctl, args, out,
                                                     fabs_by_placement[placement]), **args.sizing.columns()})
        written.append(write_csv(out / "summary.csv", results))
        print_table(results)
    if "torus" in args.phases:
        out = Path(args.out) / "torus"
        out.mkdir(parents=True, exist_ok=True)
        results = []
        torus_topos = {name: topology_from_dict(topology_raw(name, ("int", "aggregation", "nonminimal_routing")), name)
                       for name in args.torus_topologies}
        torus_fabs = {(name, how): PhaseFabric(f"{name}, ranks in {how}", topo,
                                               tuple(rank_order(topology_graph(topo), how, len(topo.hosts))), 1)
                      for name, topo in torus_topos.items() for n, how in TORUS_CASES if n == name}
        args.sizing = size_phase("torus", list(torus_fabs.values()), args.line_rate_pps,
                                 FALLBACK_PLACEMENT_LINE_RATE_PPS)
        for name, topo in torus_topos.items():
            with fabric(topo, args) as ctl:
                for how in (h for n, h in TORUS_CASES if n == name):
                    print(f"==> torus: {args.steps} data-parallel steps (ring) on the 16 hosts of {name}, "
                          f"ranks in {how}", flush=True)
                    results.append({**run_torus_case(name, how, topo, ctl, args, out, torus_fabs[name, how]),
                                    **args.sizing.columns()})
        written += [write_csv(out / "summary.csv", results), _plot_torus(results, out)]
        print_table([{k: v for k, v in r.items() if k != "ring"} for r in results])
    if "failure" in args.phases:
        out = Path(args.out) / "failure"
        out.mkdir(parents=True, exist_ok=True)
        results = []
        args.sizing = size_phase("failure", [PhaseFabric("leaf-spine", failure_topology("none"), RANKS, args.channels)],
                                 args.line_rate_pps, FALLBACK_LINE_RATE_PPS, record=False)
        for protection in args.protections:
            print(f"==> failure, {protection} protection: {args.steps} data-parallel steps (ring) on "
                  f"{', '.join(RANKS)}, {'-'.join(FAILED_LINK)} black-holed {args.fail_after:g} s after the first",
                  flush=True)
            results.append({**run_failure_case(protection, args, out), **args.sizing.columns()})
        written.append(write_csv(out / "summary.csv", results))
        print_table(results)
    if "least-loaded" in args.phases:
        out, results = least_loaded_phase(args)
        written += [write_csv(out / "summary.csv", results), _plot_least_loaded(results, out)]
        print_table(results)
    print("\n" + report(_verdicts, what="case"), flush=True)
    print(f"\nresults: {', '.join(map(str, written))}, and per case <phase>/<case>/ (each rank's CSV/JSON)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
