"""`fabric train`: PyTorch DDP across the fabric with the techniques composed,
a failure mid-run, and each technique priced by switching it off.

    fabric train [--topology fat-tree-k4] [--ranks 16] [--steps 40]
                 [--algorithm ring] [--traffic-class lossless] [--cc hpcc]
                 [--paths path-aware] [--channel-choice least-loaded] [--no-failover] [--fail spine1@step5]
                 [--overlay tuned.yaml] [--ablate] [--runs 5] [--out build/experiments/train]

One DDP process per rank, in the ranks' namespaces, trains an MLP on
scikit-learn's digits (hostagent/collectives/ddp.py); its gradients are
all-reduced through the fabric by the collective library over the RoCEv2
transport. The composition (docs/train.md):

| option | composed (default) | plain counterpart (`--ablate`) |
|---|---|---|
| `--algorithm` | ring | - (ring, halving-doubling, tree) |
| `--traffic-class` | lossless: DSCP 26 in class 3, PFC between switches and to the ranks' NICs | lossy |
| `--cc` | hpcc (INT to the receiving host, echoed in ACKs) | dcqcn (no INT) |
| `--paths` | path-aware source ports, 2 channels a peer pair | ecmp (1 channel) |
| `--spray` | off | - (spraying with selective repeat, when asked) |
| failover | on: heartbeats, slots moved in the data plane, the controller rerouting | off |
| `--transport` | rc: RoCEv2's reliable connection | uet: UET's unordered delivery, NSCC, lossy with trimming on every switch port, every packet sprayed (a row of its own, docs/rdma.md) |

A line per step (time, the global batch's loss against the single-process
reference's, packets resent, PFC pauses the switches sent and those the
ranks' NICs received and honoured, with the seconds they were paused,
drops), then a summary; the loss curve must equal the reference's (float32 rounding:
LOSS_TOLERANCE), or the run exits 1. `--fail TARGET@stepK` fails TARGET as
step K starts: a switch (`spine1`: its process killed), a link
(`leaf1-spine1`: every frame dropped both ways, the ports up) or a
black-holing switch (`blackhole:spine1`: alive, answering the controller,
forwarding nothing).
`--ablate` runs the composition, then each technique in turn switched off,
same seed and steps, and prints one table (CSV and PNG too). `--runs N`
runs them N times in rounds, and judges each technique on the faithful
runs: helps, hurts, or no significant difference, with a 95% bootstrap
interval (technique_verdicts; verdicts.csv).
`--overlay FILE` (repeatable; `fabric tune --out` writes one, docs/tuning.md)
tunes the composition: its sections replace those the composition has (the
`lossless:` section must keep the ranks' class, DSCP 26 in lossless class
3), and its `ecn:` section, which no technique decides, is added; a section
of a technique the composition (or an ablation case) has off is left off.
Its `congestion_control:` section (the constants `fabric tune` derives) is
given to every rank for the case's congestion control (the RDMA agent's
--cc-param; the run is undilated: values derived on a dilated fabric are
rescaled to it).
"""
from __future__ import annotations

import argparse
import contextlib
import functools
import json
import math
import os
import statistics
import subprocess
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Callable, Iterator, Mapping, Sequence

import yaml

from emulator.bmv2 import DEFAULT_EXPERIMENT_LOG_LEVEL, LOG_LEVELS
from emulator.bmv2_thrift import Bmv2Thrift
from emulator.build import compile_p4
from emulator.fidelity import CpuSummary
from emulator import run_costs
from emulator.calibration import Calibration, Flow, current, demand, fitting_rate, plan
from control.controller import FabricController
from emulator.impairments import blackhole
from emulator.network import Network, NetworkError
from control.p4info import EntryError
from control.p4constants import drop_reasons
from control.topology import Topology, TopologyError, apply_overlays, from_dict
from experiments.common import LINK_RATES, RANK_ACK_SHARE, REPO, agent_python, case_fidelity, cc_constants, cc_constants_line, \
    exit_on_sigterm, kill_switch, machine_identity, median_ratio_interval, percentile, ping_round_trips, \
    nic_link_pps, print_fidelity, print_table, rate_by_fit, record_run_cost, ring_pairs, roce_agent, sample_queue, \
    save_figure, set_link_rates, whole_rate, write_csv
from features import FEATURES, SECTIONS, load_topology, topology_from_dict
from features.congestion_control import SECTION as CONGESTION_CONTROL
from features.ecn import MARKED_COUNTER as ECN_MARKED_COUNTER, SECTION as ECN
from features.lossless import cell as lossless_cell
from features.tuning import derive
from hostagent.aggregation.runs import start_server, stop_server
from hostagent.collectives import schedule as sc
from hostagent.collectives.communicator import ALL_REDUCE_ALGORITHMS, CHANNEL_CHOICES, FIXED, IN_NETWORK, LEAST_LOADED, \
    default_sport
from hostagent.collectives.ranks import RANK_ENVIRONMENT, RankLauncher
from hostagent.rdma.agent import uet_congestion_controls
from hostagent.rdma.transport import SELECTIVE_REPEAT
from hostagent.start import Process
from control.switch import MONITOR_CREDENTIALS
from telemetry import metrics as m
from telemetry import prometheus_config
from telemetry.chrome_trace import FabricEvent, trace_events, write_heatmap, write_trace
from telemetry.prometheus import PrometheusClient, PrometheusError, PrometheusMissing, PrometheusProcess
from telemetry.switch_exporter import DEFAULT_P4INFO, Bmv2Reader, SwitchExporter

OUT = REPO / "build" / "experiments" / "train"
ALGORITHMS = ALL_REDUCE_ALGORITHMS
AGGREGATION_JOB, AGGREGATION_TREES, AGGREGATION_SLOTS = 1, 2, 32
PARAMETER_SERVER = "ps"        # in-network: the job's parameter server, a host added beside the ranks
TRAFFIC_CLASSES = ("lossless", "lossy")
TRANSPORTS = ("rc", "uet")     # RoCEv2's RC (hostagent/rdma/transport.py), or UET's (hostagent/rdma/uet.py)
UET_TRIM_THRESHOLD = 16        # --transport uet: every switch port trims its lossy queue above this (packets)
# --transport uet: UE's control class (ACKs, NACKs, credits: never trimmed, not behind the data), a lossy class
# above the data's queue 0 and below the trimmed headers' queue, as experiments/uet.py has them (docs/rdma.md)
UET_CONTROL_CLASS, UET_CONTROL_DSCP, UET_HEADER_QUEUE = 4, 46, 5
PATHS = ("path-aware", "central", "ecmp", "spray")
CHANNELS = 2                   # connections per peer pair with path-aware ports or central routing
LOSS_TOLERANCE = 1e-4          # |loss - reference| per step: float32 rounding of the gradients' sum order
HIDDEN = 64                    # the MLP's hidden units (ddp.py's model: 64 inputs, 10 classes)
PARAMETERS = 64 * HIDDEN + HIDDEN + HIDDEN * 10 + 10     # 4810: 19 KB of float32 gradient a step
MTU = 1024
RTT_PROBES, RTT_PROBE_INTERVAL_S = 10, 0.02     # the idle fabric's round trips, for the ideal step's latency

# Time constants scaled to BMv2 on two cores (docs/train.md's table).
LINE_RATE_PPS = {"leaf-spine": 1000.0, "fat-tree-k4": 400.0}   # each connection's top rate (1 KB packets)
DEFAULT_LINE_RATE_PPS = 400.0
# failover: (heartbeat period, a port silent this long is dead), ms. Heartbeats go on every link and on a
# path to every edge switch: on fat-tree-k4 at 50 ms they alone kept BMv2 at 1.8 cores of two, idle.
FAILOVER_MS = {"leaf-spine": (50, 500), "fat-tree-k4": (500, 2000)}
DEFAULT_FAILOVER_MS = (500, 2000)
RANK_NICE = 10                  # the ranks yield the CPU to the switches and heartbeats (their silicon and
                                # line cards in a real fabric): 16 ranks importing PyTorch on two cores
                                # otherwise delay heartbeats past the failover timeout
RANK_TIMEOUT_S = 60.0           # a rank silent this long is an error (a failure without failover)
ABORT_GRACE_S = 10.0            # after a rank failed, how long the others have to exit on its notice (they did
                                # at once where it arrived; one whose notice a lossy link lost waits RANK_TIMEOUT_S)
START_TIMEOUT_S = 240.0         # 16 ranks import torch on two cores
RANKS = RankLauncher()          # every case's ranks: forks of one process that imported PyTorch (ranks.py)
EXPORT_INTERVAL_S, SCRAPE = 1.0, "1s"    # the switch exporter's reads (2 s above 6 switches), Prometheus's scrapes
LARGE_EXPORT_INTERVAL_S = 2.0   # fat-tree-k4: reading 20 switches every 0.5 s kept this process at a whole core
SLOW_STEP = 2.0                 # a step this many times the median is explained from Prometheus
LOSSLESS_CLASS, LOSSLESS_DSCP = 3, 26
LOSSLESS_SECTION = {"queues": 8, "classes": [{"name": "collective", "class": LOSSLESS_CLASS,
                                              "dscp": [LOSSLESS_DSCP], "lossless": True}],
                    "pfc": {"xoff": 24, "xon": 12, "headroom": 64}, "hold_rate_pps": 500}
HPCC_INSTRUCTIONS = ["node_id", "l1_ports", "queue", "tx_bytes", "tx_time", "link_rate"]


@dataclass(frozen=True)
class Composition:
    """What the training job's traffic gets from the fabric."""
    algorithm: str = sc.RING
    traffic_class: str = "lossless"
    cc: str = "hpcc"
    paths: str = "path-aware"
    channel_choice: str = LEAST_LOADED
    failover: bool = True
    transport: str = "rc"

    @property
    def channels(self) -> int:
        return CHANNELS if self.paths in ("path-aware", "central") and self.algorithm != IN_NETWORK else 1

    @property
    def label(self) -> str:
        split = f" ({self.channels} channels, {self.channel_choice})" if self.channels > 1 else ""
        return (f"{'UET, ' if self.transport == 'uet' else ''}{self.algorithm}, {self.traffic_class}, {self.cc}, "
                f"{self.paths}{split}, failover {'on' if self.failover else 'off'}")


TECHNIQUES = ("traffic-class", "cc", "paths", "channel-choice", "failover", "algorithm", "transport")


def ablations(c: Composition, only: tuple[str, ...] = TECHNIQUES) -> list[tuple[str, Composition]]:
    """The cases of --ablate: the composition, then each technique of `only`
    it has on switched to its plain counterpart, one at a time."""
    unknown = sorted(set(only) - set(TECHNIQUES))
    if unknown:
        raise ValueError(f"--ablate {','.join(only)}: no technique {unknown[0]!r} (techniques: {', '.join(TECHNIQUES)})")
    plain = {"traffic-class": ("lossy class (no PFC)", c.traffic_class == "lossless", replace(c, traffic_class="lossy")),
             "cc": (f"dcqcn instead of {c.cc}", c.cc != "dcqcn", replace(c, cc="dcqcn")),
             "paths": (f"ecmp instead of {c.paths}", c.paths != "ecmp", replace(c, paths="ecmp")),
             "channel-choice": (f"fixed split instead of {c.channel_choice}",
                                c.channels > 1 and c.channel_choice != FIXED, replace(c, channel_choice=FIXED)),
             "failover": ("no failover", c.failover, replace(c, failover=False)),
             "algorithm": (f"ring instead of {c.algorithm}", c.algorithm != sc.RING, replace(c, algorithm=sc.RING)),
             # the other transport, with what it runs on: UET lossy with trimming and NSCC, RC lossless with HPCC
             "transport": (("UET (trimming, spraying, nscc) instead of RC" if c.transport == "rc" else
                            "RC (lossless, hpcc) instead of UET"), c.algorithm != IN_NETWORK,
                           replace(c, transport="uet", traffic_class="lossy", cc="nscc") if c.transport == "rc" else
                           replace(c, transport="rc", traffic_class="lossless", cc="hpcc"))}
    return [("composed", c)] + [(name, off) for t in TECHNIQUES if t in only
                                for name, on, off in [plain[t]] if on]


MIN_FAITHFUL_RUNS = 3           # a technique is judged on at least this many faithful runs of each case
CONFIDENCE = 0.95


def technique_verdicts(results: Sequence["RunResult"]) -> list[dict]:
    """For each ablation case against the composition: the median step of
    their faithful, complete runs (each run's median step), the change
    switching the technique off makes to it, with a 95% bootstrap interval,
    and the verdict: "helps by X% [lo, hi]" (off, the step is X% longer,
    the whole interval above 0), "hurts by X% [lo, hi]" (off, X% shorter),
    "no significant difference" (the interval spans 0), or "not judged"
    with fewer than MIN_FAITHFUL_RUNS faithful runs on either side; "helps:
    without it the job stopped" when at least MIN_FAITHFUL_RUNS faithful
    runs without it stopped before their last step (its failure not
    absorbed: a rank gave up) and every faithful run of the composition
    completed."""
    def judged(case: str) -> tuple[int, list[float], list[int]]:
        """(its runs; each faithful complete run's median step; the steps each faithful run that stopped did)."""
        runs = [r for r in results if r.case == case]
        good = [r for r in runs if r.fidelity == "ok"]
        complete = [statistics.median(x.ms for x in r.lines) for r in good if r.completed == r.steps and r.lines]
        return len(runs), complete, [r.completed for r in good if r.completed < r.steps]

    def queue_p99(case: str) -> float | str:
        """The median over its faithful complete runs of the incast's bottleneck queue p99 ("" without one)."""
        p99s = [percentile(r.queue, 0.99) for r in results
                if r.case == case and r.fidelity == "ok" and r.completed == r.steps and r.queue]
        return statistics.median(p99s) if p99s else ""

    base_runs, base, base_stopped = judged("composed")
    rows = []
    for case in dict.fromkeys(r.case for r in results if r.case != "composed"):
        runs, off, stopped = judged(case)
        row = {"technique off": case, "runs": runs, "faithful": len(off) + len(stopped),
               "composed_faithful": len(base), "stopped": len(stopped),
               "step_ms_median": round(statistics.median(off), 1) if off else "",
               "composed_step_ms_median": round(statistics.median(base), 1) if base else "",
               "change": "", "interval_low": "", "interval_high": "",
               "queue_p99_median": queue_p99(case), "composed_queue_p99_median": queue_p99("composed")}
        if len(stopped) >= MIN_FAITHFUL_RUNS and not off and len(base) >= MIN_FAITHFUL_RUNS and not base_stopped:
            row["verdict"] = (f"helps: without it the job stopped in {len(stopped)} of {len(stopped)} faithful runs "
                              f"(after step {min(stopped)}-{max(stopped)}); the composition completed "
                              f"{len(base)} of {len(base)}")
        elif min(len(off), len(base)) < MIN_FAITHFUL_RUNS:
            row["verdict"] = (f"not judged: {len(off)} of {runs} runs faithful and complete"
                              f"{f' ({len(stopped)} more stopped)' if stopped else ''}, the composition "
                              f"{len(base)} of {base_runs} (at least {MIN_FAITHFUL_RUNS} each)")
        else:
            ratio, lo, hi = median_ratio_interval(off, base, CONFIDENCE)
            change, lo, hi = ratio - 1, lo - 1, hi - 1
            row.update(change=round(change, 3), interval_low=round(lo, 3), interval_high=round(hi, 3))
            row["verdict"] = (f"helps by {change:.1%} [{lo:.1%}, {hi:.1%}]" if lo > 0 else
                              f"hurts by {-change:.1%} [{-hi:.1%}, {-lo:.1%}]" if hi < 0 else
                              f"no significant difference (off: {change:+.1%} [{lo:+.1%}, {hi:+.1%}])")
        rows.append(row)
    return rows


@dataclass(frozen=True)
class Failure:
    """`--fail`: what fails, as which step starts. A link fails as both its
    directions dropping every frame, its ports up: BMv2 cannot lose a port
    (a veth set down blocks the switch's one receive thread in libpcap:
    it forwards nothing on any port, even once the veth is up again)."""
    kind: str          # switch (killed) | blackhole (a switch alive that forwards nothing) | link
    target: str        # a switch, or "a-b"
    step: int          # 1-based, as the step lines count

    @classmethod
    def parse(cls, text: str, topo: Topology, steps: int) -> "Failure":
        what, sep, at = text.partition("@step")
        if not sep or not at.isdigit():
            raise ValueError(f"--fail {text!r}: expected TARGET@stepK (spine1@step5, leaf1-spine1@step5, "
                             f"blackhole:spine1@step5)")
        step = int(at)
        if not 2 <= step <= steps:
            raise ValueError(f"--fail {text!r}: the step must be within 2..{steps} (--steps {steps})")
        kind, _, target = what.rpartition(":")
        if kind not in ("", "blackhole"):
            raise ValueError(f"--fail {text!r}: the only kind is blackhole:, got {kind!r}")
        if target in topo.switches:
            return cls(kind or "switch", target, step)
        a, _, b = target.partition("-")
        if not kind and a in topo.switches and b in topo.switches and \
                any(p.peer == b for p in topo.switches[a].ports.values()):
            return cls("link", target, step)
        raise ValueError(f"--fail {text!r}: {target!r} is neither a switch of {topo.name} nor a link between "
                         f"two of its switches ({', '.join(sorted(topo.switches))})")

    def ifaces(self, topo: Topology) -> list[str]:
        """The interfaces whose frames are dropped: both ends of the link, or of every link of the switch."""
        if self.kind == "link":
            a, b = self.target.split("-")
            return [p.iface for x, y in ((a, b), (b, a)) for p in topo.switches[x].ports.values() if p.peer == y]
        sw = topo.switches[self.target]
        return [p.iface for p in sw.ports.values()] + \
            [q.iface for p in sw.ports.values() if p.peer in topo.switches
             for q in topo.switches[p.peer].ports.values() if q.peer == sw.name]

    def inject(self, net: Network, ctl: FabricController, lock: threading.Lock) -> None:
        """Fail it now, for the rest of the case (the network goes with the case)."""
        if self.kind == "switch":
            with lock:
                kill_switch(net, ctl, self.target)
            return
        for iface in self.ifaces(net.topo):
            blackhole(iface)

    @property
    def text(self) -> str:
        return {"switch": f"switch {self.target} killed", "link": f"link {self.target} cut",
                "blackhole": f"switch {self.target} black-holing"}[self.kind]


INCAST_FIRST_STEP = 2          # --incast starts as this step starts (step 1 has the ranks' set-up in it)
INCAST_HOST = "incast"         # --incast's senders: incast1, incast2, ... beside the first rank's switch
INCAST_QP = 100                # their queue pairs (incast1 sends on 101): none a rank uses


@dataclass(frozen=True)
class Incast:
    """`--incast N@PPS`: N hosts added beside the first rank's switch, each
    sending PPS packets a second, RoCEv2 at a fixed rate (no congestion
    control, not ECN-capable) in the ranks' traffic class (honouring its
    pauses when it is lossless), to the first rank on another switch: the
    ring's links into that rank carry it. From step INCAST_FIRST_STEP to the
    case's end."""
    senders: int
    pps: float

    @classmethod
    def parse(cls, text: str) -> "Incast":
        n, sep, pps = text.partition("@")
        try:
            incast = cls(int(n), float(pps)) if sep else None
        except ValueError:
            incast = None
        if incast is None or incast.senders < 1 or not incast.pps > 0:
            raise ValueError(f"--incast {text!r}: expected SENDERS@PPS, at least one sender at a positive rate "
                             f"(2@300: two senders of 300 packets/s each)")
        return incast

    @property
    def hosts(self) -> list[str]:
        return [f"{INCAST_HOST}{i}" for i in range(1, self.senders + 1)]

    def places(self, topo: Topology, ranks: Sequence[str]) -> tuple[str, str]:
        """(the switch its senders hang off: the first rank's; the rank it
        sends to: the first on another switch)."""
        first = topo.hosts[ranks[0]].switch
        target = next((r for r in ranks if topo.hosts[r].switch != first), None)
        if target is None:
            raise ValueError(f"--incast: every rank is on {first}: no rank on another switch to send to")
        return first, target

    @property
    def text(self) -> str:
        return f"{self.senders} x {self.pps:g} packets/s"

    def bottleneck(self, topo: Topology, ranks: Sequence[str], c: "Composition") -> tuple[str, int, int]:
        """The queue the incast congests: (switch, port, priority queue) of
        the target rank's link from its switch, in the ranks' class (the
        lossless class's queue, else queue 0, where a lossy class's and
        UET's data wait)."""
        target = topo.hosts[self.places(topo, ranks)[1]].primary
        return target.switch, target.switch_port, LOSSLESS_CLASS if c.traffic_class == "lossless" else 0


COMPOSED_SECTIONS = ("int", "aggregation", "load_balancing", "failover", "lossless", "nonminimal_routing", "trimming")
OVERLAY_ADDS = ("ecn", CONGESTION_CONTROL)   # sections an overlay may add: no technique of the composition decides them


def overlay_sections(raw: dict, overlays: Sequence[str | Path]) -> tuple[dict, dict[str, str], list[str]]:
    """The composed topology's mapping with `overlays` applied: their
    sections replace the composition's, add ECN, and leave a technique the
    composition has off, off. Returns (mapping, {section: overlay file},
    the sections left out)."""
    merged, sources = apply_overlays(raw, overlays, FEATURES, SECTIONS)
    left_out = []
    for section in list(sources):
        if section not in raw and section not in OVERLAY_ADDS:
            merged.pop(section, None)
            sources.pop(section)
            left_out.append(section)
    for section in raw:                        # a null in an overlay does not switch a technique off either
        if section not in merged:
            merged[section] = raw[section]
            left_out.append(section)
    return merged, sources, left_out


def composed_topology(name: str, c: Composition, ranks: list[str], overlays: Sequence[str | Path] = (),
                      link_pps: float | None = None, incast: Incast | None = None) -> tuple[Topology, dict]:
    """topologies/<name>.yaml with the sections the composition asks for (and
    no others: no aggregation, INT only for HPCC), tuned by `overlays`
    (overlay_sections), and the whole as a dict; with every link at
    `link_pps` packets/s (None: the file's bandwidths), and `incast`'s
    senders added. An overlay's lossless section must keep the ranks' class
    (ValueError otherwise)."""
    path = topology_path(name)
    raw = yaml.safe_load(path.read_text())
    if incast is not None:
        switch, _ = incast.places(load_topology(path), ranks)
        for host in incast.hosts:
            raw["hosts"].append({"name": host, "role": "sender"})
            raw["links"].append([host, switch])
    if link_pps is not None:
        set_link_rates(raw, link_pps)
    for section in (*COMPOSED_SECTIONS, "ecn"):
        raw.pop(section, None)
    if c.cc == "hpcc":
        # no drop reports: no collector listens on the ranks (their kernels would answer with ICMP)
        raw["int"] = {"collector": ranks[-1], "drop_report_interval_ms": None, "watchlist": [
            {"protocol": "udp", "dst_ports": 4791, "instructions": HPCC_INSTRUCTIONS, "max_hops": 5,
             "to_host": True}]}
    if c.traffic_class == "lossless":
        raw["lossless"] = LOSSLESS_SECTION
    if c.paths == "spray":
        raw["load_balancing"] = [{"switch": "all", "mode": "spray"}]
    if c.transport == "uet":          # a lossy fabric that trims rather than drops (docs/features/trimming.md)
        raw["trimming"] = [{"switch": "all", "port": "all", "threshold": UET_TRIM_THRESHOLD,
                            "header_queue": UET_HEADER_QUEUE}]
        raw["lossless"] = {"queues": 8, "classes": [{"name": "uet-control", "class": UET_CONTROL_CLASS,
                                                     "dscp": [UET_CONTROL_DSCP]}]}
    if c.failover:
        heartbeat_ms, timeout_ms = FAILOVER_MS.get(path.stem, DEFAULT_FAILOVER_MS)
        raw["failover"] = {"heartbeat_ms": heartbeat_ms, "timeout_ms": timeout_ms}
    if c.algorithm == IN_NETWORK:
        # the ranks sum over trees of switches; the parameter server (the fallback) on the last rank's switch
        last = next(link for link in raw["links"] if ranks[-1] in link[:2])
        raw["hosts"].append({"name": PARAMETER_SERVER, "role": "server"})
        raw["links"].append([PARAMETER_SERVER, last[1] if last[0] == ranks[-1] else last[0]])
        raw["aggregation"] = {"jobs": [{"job": AGGREGATION_JOB, "workers": list(ranks), "server": PARAMETER_SERVER,
                                        "slots": AGGREGATION_SLOTS, "trees": AGGREGATION_TREES}]}
    if c.cc == "dcqcn":
        # DCQCN cuts its rate on CNPs, which need marks: RED-style marking (DCQCN's own) on every switch
        # port, at the thresholds `fabric tune` derives for these links; an overlay's `ecn:` replaces them
        raw[ECN] = derive(topology_from_dict(raw, f"{path.stem} for training"), ecn_mode="wred").ecn
    if not overlays:
        return topology_from_dict(raw, f"{path.stem} for training ({c.label})"), raw
    raw, sources, _ = overlay_sections(raw, overlays)
    topo = from_dict(raw, f"{path.stem} for training ({c.label})", FEATURES, section_sources=sources,
                     overlays=tuple(map(str, overlays)), sections=SECTIONS)
    if "lossless" in sources:
        config = topo.features["lossless"]
        if not any(k.lossless and k.tclass == LOSSLESS_CLASS and LOSSLESS_DSCP in k.dscp for k in config.classes):
            raise ValueError(f"--overlay {sources['lossless']}: lossless: the ranks send DSCP {LOSSLESS_DSCP} in "
                             f"lossless class {LOSSLESS_CLASS}; this section has no such class")
    return topo, raw


@dataclass
class StepLine:
    """One step as the job saw it: every rank's record joined."""
    step: int
    ms: float                  # the slowest rank's end of this step minus its end of the previous one
    loss: float                # the global batch's mean loss (the ranks' means, averaged)
    reference_loss: float
    resent: int                # packets the ranks resent during the step
    pauses: int                # PFC pause frames the switches sent (read after the step: approximate)
    drops: int                 # packets the switches dropped, any reason (read after the step)
    allreduce_ms: float        # the slowest rank's all-reduce time inside the step
    compute_ms: float          # the median rank's forward + backward (without the all-reduce) + optimizer
    failure: str = ""
    pauses_received: int = 0   # PFC pauses of their class the ranks' NICs received during the step, all ranks
    ranks_paused_s: float = 0.0    # seconds the ranks' NICs were paused during the step, all ranks summed


def read_records(path: Path) -> list[dict]:
    """The whole lines of a rank's step file so far."""
    return StepFile(path).read()


class StepFile:
    """A rank's step file as it grows: each read() parses only the whole
    lines written since the last (16 ranks polled 20 times a second)."""

    def __init__(self, path: Path):
        self.path, self.offset = path, 0
        self.records: list[dict] = []

    def read(self) -> list[dict]:
        if self.path.exists():
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                chunk = f.read()
            whole = chunk[:chunk.rfind(b"\n") + 1]          # a line being written waits for its newline
            self.offset += len(whole)
            self.records += [json.loads(line) for line in whole.splitlines() if line.strip()]
        return self.records


def counter_by_index(ctl: FabricController, counter: str, lock: threading.Lock,
                     cells: Mapping[str, Sequence[int]] | None = None) -> Counter[int]:
    """A P4 counter's packets by index, summed over every switch that
    answers, read from all of them at once: every index, or those `cells`
    names for each switch (one request a switch either way)."""
    every = [ctl.p4info.counter_entry(counter)]
    wanted = {name: [ctl.p4info.counter_entry(counter, i) for i in indices]
              for name, indices in (cells or {}).items()}

    def read(named) -> dict[int, int]:
        name, conn = named
        entries = wanted.get(name, []) if cells is not None else every
        try:
            return {i: p for i, (p, _) in conn.counter(*entries).items()} if entries else {}
        except Exception:           # a switch that fails meanwhile does not answer
            return {}
    with lock:
        conns = list(ctl.connections.items())          # (a killed switch's connection is gone)
    total: Counter[int] = Counter()
    with ThreadPoolExecutor(max_workers=min(16, len(conns) or 1)) as pool:
        for got in pool.map(read, conns):
            total.update(got)
    return total


def counter_total(ctl: FabricController, counter: str, lock: threading.Lock,
                  cells: Mapping[str, Sequence[int]] | None = None) -> int:
    return sum(counter_by_index(ctl, counter, lock, cells).values())


def rank_args(rank: int, hosts: list, c: Composition, steps: int, line_rate_pps: float, topo: Topology,
              topo_file: Path, out: Path, cc_params: Mapping[str, float] | None = None) -> list[str]:
    """Rank `rank`'s arguments to hostagent.collectives.ddp (its host: hosts[rank].host)."""
    h = hosts[rank]
    cmd = ["--rank", str(rank), "--addresses", ",".join(x.ip for x in hosts), "--iface", h.iface,
           "--src-ip", h.ip, "--src-mac", h.mac, "--gw-mac", h.gateway_mac,
           "--algorithm", c.algorithm, "--cc", c.cc, "--line-rate-pps", str(line_rate_pps),
           "--steps", str(steps), "--hidden", str(HIDDEN), "--timeout-s", str(RANK_TIMEOUT_S),
           "--steps-out", str(out / f"rank{rank}.jsonl"), "--out", str(out / f"rank{rank}")]
    if c.algorithm == IN_NETWORK:
        server = topo.hosts[PARAMETER_SERVER].primary
        cmd += ["--aggregation-job", str(AGGREGATION_JOB), "--aggregation-server", server.ip]
    if c.transport == "uet":
        cmd += ["--control-dscp", str(UET_CONTROL_DSCP)]
    if c.traffic_class == "lossless":       # the rank's NIC honours the pauses of its class, as a RoCE NIC does
        cmd += ["--dscp", str(LOSSLESS_DSCP), "--tclass", str(LOSSLESS_CLASS),
                "--link-mbps", f"{topo.access_link(h).bandwidth_mbps:g}"]
    if c.channels > 1:
        cmd += ["--channels", str(c.channels), "--channel-choice", c.channel_choice]
    if c.paths == "path-aware":
        cmd += ["--paths", str(topo_file)]
    if c.transport == "uet":
        cmd += ["--mode", "uet"]
    elif c.paths == "spray":
        cmd += ["--mode", SELECTIVE_REPEAT]
    for name, value in (cc_params or {}).items():     # the overlay's congestion_control section (cc_constants)
        cmd += ["--cc-param", f"{name}={value!r}"]
    return cmd


class Reference:
    """The single-process run of the same seed and global batch, started at
    once and read when the first case needs it (it runs while the fabric
    comes up): each step's loss."""

    def __init__(self, steps: int, out: Path):
        self.path = out / "reference.jsonl"
        self.proc = subprocess.Popen([agent_python(), "-m", "hostagent.collectives.ddp", "--reference", "--steps",
                                      str(steps), "--hidden", str(HIDDEN), "--steps-out", str(self.path),
                                      "--out", str(out / "reference")], cwd=REPO, env=rank_env(),
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self._losses: list[float] | None = None

    @property
    def losses(self) -> list[float]:
        if self._losses is None:
            output, _ = self.proc.communicate(timeout=300)
            if self.proc.returncode != 0:
                raise RuntimeError(f"the single-process reference run failed ({self.proc.returncode}): {output[-2000:]}")
            self._losses = [r["loss"] for r in read_records(self.path)]
        return self._losses


def rank_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), **RANK_ENVIRONMENT}      # the reference: as the ranks run


@dataclass
class RunResult:
    case: str
    composition: Composition
    lines: list[StepLine]
    steps: int
    failure: Failure | None
    errors: list[str]
    ideal_ms: float
    records: list[list[dict]]           # per rank, per step
    drop_reasons: dict[str, int] = field(default_factory=dict)     # the switches' drops by reason, whole run
    explained: list[str] = field(default_factory=list)             # the slow steps, from Prometheus
    paused_s: float | None = None       # seconds the switches' ports were paused (Prometheus), all (port, class)
    fidelity: str = ""                  # the run's fidelity verdict, from the first step on (emulator/fidelity.py)
    cpu: str = ""                       # the machine's CPU over the steps: idle per core, each kind of process's cores
    run: int = 1                        # which of --runs
    latency_ms: float = 0.0             # the ideal step's latency term: its all-reduces' rounds on the idle fabric
    scenario: str = ""                  # links at the NIC rate, an incast (scenario_text)
    ecn_marks: int | None = None        # packets the switches marked CE, whole run (None: no switch marks)
    queue: list[int] = field(default_factory=list)  # --incast: its bottleneck queue's depths (packets), sampled
    #                                                 every 5 ms from the incast's start (sample_queue)

    @property
    def completed(self) -> int:
        return len(self.lines)

    @property
    def loss_error(self) -> float:
        return max((abs(x.loss - x.reference_loss) for x in self.lines), default=math.inf)

    def summary(self) -> dict:
        ms = sorted(x.ms for x in self.lines)
        row = {"case": self.case, "run": self.run, **{k: v for k, v in asdict(self.composition).items()},
               "scenario": self.scenario, "steps": self.steps, "completed": self.completed,
               "step_ms_p50": round(percentile(ms, 0.5), 1) if ms else "",
               "step_ms_p99": round(percentile(ms, 0.99), 1) if ms else "",
               "ideal_ms": round(self.ideal_ms, 1), "ideal_latency_ms": round(self.latency_ms, 1),
               "efficiency": round(self.ideal_ms / percentile(ms, 0.5), 3) if ms else "",
               "resent": sum(x.resent for x in self.lines), "pauses": sum(x.pauses for x in self.lines),
               "paused_s": "" if self.paused_s is None else round(self.paused_s, 3),
               "pauses_received": sum(x.pauses_received for x in self.lines),
               "ranks_paused_s": round(sum(x.ranks_paused_s for x in self.lines), 3),
               "drops": sum(x.drops for x in self.lines),
               "drop_reasons": " ".join(f"{k}:{v}" for k, v in self.drop_reasons.items()),
               "ecn_marks": "" if self.ecn_marks is None else self.ecn_marks,
               "queue_p50": percentile(self.queue, 0.5) if self.queue else "",
               "queue_p99": percentile(self.queue, 0.99) if self.queue else "",
               "max_loss_error": f"{self.loss_error:.2e}" if self.lines else "",
               "final_loss": round(self.lines[-1].loss, 6) if self.lines else "",
               "fidelity": self.fidelity, "cpu": self.cpu}
        if self.failure is not None:
            row.update(failure=f"{self.failure.text} at step {self.failure.step}",
                       **self.absorbed())
        row["errors"] = "; ".join(self.errors)
        return row

    def absorbed(self) -> dict:
        """The step that absorbed the failure (the slowest from the failed
        step on) and what it cost against the median step before."""
        assert self.failure is not None
        before = [x.ms for x in self.lines if x.step < self.failure.step - 1]
        after = [x for x in self.lines if x.step >= self.failure.step - 1]
        if not after or not before:
            return {"absorbed_by_step": "", "absorbed_cost_ms": ""}
        worst = max(after, key=lambda x: x.ms)
        return {"absorbed_by_step": worst.step + 1, "absorbed_cost_ms": round(worst.ms - statistics.median(before), 1),
                "step_ms_after_p50": round(statistics.median(x.ms for x in after if x is not worst), 1)
                if len(after) > 1 else ""}


def line_rate_for(topology: str, rank_names: list[str], c: Composition,
                  overlays: Sequence[str | Path] = (), scenario: str = "") -> tuple[float, str]:
    """Each connection's top rate, and how it was chosen: from what earlier
    runs of this composition cost this machine (emulator/run_costs.py), the
    rate whose fitted cost leaves the cores idle by the fidelity limit and
    its margin; without such runs, the highest at which the ring's
    connections (each rank to the next, on every channel; ACKs back) keep
    the run within this machine's budget by its current calibration and
    the training composition's cost per packet (emulator/calibration.py);
    without that either, the topology's LINE_RATE_PPS."""
    fitted = cost_fit(topology, rank_names, c, overlays, scenario)
    if fitted is not None:
        return rate_by_fit(fitted, machine_identity().cores)
    cal, why = machine_calibration()
    if cal is None:
        return LINE_RATE_PPS.get(Path(topology).stem, DEFAULT_LINE_RATE_PPS), f"{why}: the topology's default"
    topo = composed_topology(topology, c, rank_names, overlays)[0]
    ring = ring_pairs(rank_names, c.channels)
    rate = whole_rate(fitting_rate(topo, ring, cal, "training", ack_share=RANK_ACK_SHARE, agents=rank_agents(c)))
    return rate, (f"the ring's {len(ring)} connections within half this machine's cores, by its calibration of "
                  f"{cal.measured_at}; no earlier run of this composition here says what a whole run costs "
                  f"(the calibration under-counts it), so this run is one the next sizes itself by")


@functools.cache
def machine_calibration() -> tuple[Calibration | None, str]:
    """This machine's current calibration (and why none holds)."""
    return current(machine_identity())


def scenario_text(args) -> str:
    """What the run puts the fabric through besides the job (not the failure:
    it changes a run's cost little), as cost keys and summaries name it."""
    parts = (["links at the NIC rate"] if getattr(args, "link_rate", "file") == "nic" else []) + \
        ([f"incast {args.incast.text}"] if getattr(args, "incast", None) else [])
    return ", ".join(parts)


def cost_key(topology: str, ranks: int, c: Composition, overlays: Sequence[str | Path] = (),
             scenario: str = "") -> str:
    """What a run's cost is recorded under: the topology, the ranks, the
    composition, the overlays and the scenario (each changes what a run asks
    of the machine)."""
    over = "".join(f" + {Path(o).name}" for o in overlays)
    return f"fabric train {Path(topology).stem}{over}, {ranks} ranks: {c.label}{'; ' + scenario if scenario else ''}"


def cost_fit(topology: str, rank_names: Sequence[str], c: Composition, overlays: Sequence[str | Path] = (),
             scenario: str = "") -> run_costs.CostFit | None:
    return run_costs.fit(run_costs.observed(machine_identity(),
                                            cost_key(topology, len(rank_names), c, overlays, scenario)))


def record_cost(args, rank_names: Sequence[str], c: Composition, line_rate: float,
                cpu: CpuSummary | None) -> None:
    """What this run cost, for the next run of its composition to size itself by."""
    record_run_cost(machine_identity(), cost_key(args.topology, len(rank_names), c, args.overlay,
                                                 scenario_text(args)), line_rate, cpu)


def rank_agents(c: Composition) -> str:
    """The ranks' cost a packet in the budget (emulator/calibration.plan): the
    RC transport's (the collective library's ranks cost the same: 31,021
    packets a core all-reducing on a veth pair against the RDMA agents'
    31,333, 2026-12-01), or UET's; not the fast sender loop's."""
    return "uet" if c.transport == "uet" else "rdma"


def planned_cores(topo: Topology, rank_names: Sequence[str], c: Composition, line_rate_pps: float) -> str:
    """What the budget plans the switches and the ranks to take with the
    ring at `line_rate_pps` ("" without a current calibration)."""
    cal, _ = machine_calibration()
    if cal is None:
        return ""
    flows = [Flow(a, b, line_rate_pps) for a, b in ring_pairs(rank_names, c.channels)]
    p = plan(demand(topo, flows, RANK_ACK_SHARE), cal, "training", agents=rank_agents(c))
    return f"the budget planned {p.needed_cores:.2f} cores for the switches and the ranks at this rate"


def ideal_step_ms(c: Composition, ranks: int, compute_ms: float, line_rate_pps: float, latency_ms: float = 0.0,
                  buckets: int = 1) -> float:
    """An alpha-beta bound on the step: compute, plus each of the step's
    `buckets` all-reduces' latency (`latency_ms`: all_reduce_latency_ms),
    plus the all-reduce's bytes at the bottleneck's rate: the busiest rank's
    elements of the gradient (float32) over its channels to a peer, each at
    a connection's top rate (each connection runs at line_rate_pps x MTU).
    With one bucket the all-reduce starts when the backward pass ends, so
    the three terms add up."""
    if c.algorithm == IN_NETWORK:        # each rank sends its gradient once (int32); the switches send the sum
        sent = PARAMETERS
    else:
        sent = max(sc.schedule(sc.ALL_REDUCE, c.algorithm, ranks, PARAMETERS).elements_sent(r) for r in range(ranks))
    packets = math.ceil(4 * sent / MTU)
    return compute_ms + buckets * latency_ms + 1000 * packets / (line_rate_pps * c.channels)


def probed_pairs(c: Composition, ranks: int) -> list[tuple[int, int]]:
    """The rank pairs whose round trip the latency term needs: those the
    schedule sends between (in-network: the ring's neighbours, for the
    farthest rank from the aggregating switch)."""
    if c.algorithm == IN_NETWORK:
        return sorted({pair(r, (r + 1) % ranks) for r in range(ranks)})
    s = sc.schedule(sc.ALL_REDUCE, c.algorithm, ranks, PARAMETERS)
    return sorted({pair(t.src, t.dst) for step in s.steps for t in step if t.src != t.dst})


def pair(a: int, b: int) -> tuple[int, int]:
    """Two ranks as one unordered pair (a ping's round trip is both ways)."""
    return (a, b) if a <= b else (b, a)


def all_reduce_latency_ms(c: Composition, ranks: int, rtt_ms: dict[tuple[int, int], float]) -> float:
    """The latency of one all-reduce on the idle fabric (`rtt_ms`: the
    pairs' round trips): each round of the schedule ends when its slowest
    transfer has arrived, one way, half its pair's round trip (the next
    round needs the data, not its ACK); in-network, one round trip, the
    slowest pair's (up to the aggregating switch and the sum back). Pairs
    not probed count 0: a lower bound still."""
    if c.algorithm == IN_NETWORK:
        return max(rtt_ms.values(), default=0.0)
    s = sc.schedule(sc.ALL_REDUCE, c.algorithm, ranks, PARAMETERS)
    return sum(max((rtt_ms.get(pair(t.src, t.dst), 0.0) / 2 for t in step if t.src != t.dst), default=0.0)
               for step in s.steps)


def probe_round_trips(hosts: Sequence, pairs: Sequence[tuple[int, int]]) -> dict[tuple[int, int], float]:
    """The median round trip, in ms, of RTT_PROBES pings between each pair
    of ranks (all pairs at once, before the ranks start: the fabric idle).
    A pair no ping crossed is left out."""
    def probe(ranks: tuple[int, int]) -> list[float]:
        a, b = ranks
        return ping_round_trips(hosts[a].host, hosts[b].ip, RTT_PROBES, RTT_PROBE_INTERVAL_S)
    with ThreadPoolExecutor(max_workers=min(16, len(pairs) or 1)) as pool:
        rtts = dict(zip(pairs, pool.map(probe, pairs)))
    return {p: 1000 * statistics.median(v) for p, v in rtts.items() if v}


def previous_end_of(step: int, records: list[list[dict]]) -> float:
    """When the step could start: the slowest rank's end of the one before
    (the first step: the last rank's start)."""
    if step == 0:
        return max(r[0]["start"] for r in records)
    return max(r[step - 1]["end"] for r in records)


def join_step(step: int, records: list[list[dict]], reference: list[float], previous_end: float | None) -> StepLine:
    rows = [r[step] for r in records]
    end = max(r["end"] for r in rows)
    start = previous_end if previous_end is not None else max(r["start"] for r in rows)
    allreduce = [sum(b[1] - b[0] for b in r["buckets"]) for r in rows]
    compute = [r["forward_s"] + r["backward_s"] + r["optimizer_s"] - a for r, a in zip(rows, allreduce)]
    def during(key: str) -> float:
        """The ranks' count of `key` (so far, in each record) grown during the step, all ranks."""
        return sum(r[step].get(key, 0) - (r[step - 1].get(key, 0) if step else 0) for r in records)
    return StepLine(step=step, ms=1000 * (end - start), loss=statistics.fmean(r["loss"] for r in rows),
                    reference_loss=reference[step], resent=int(during("retransmitted")),
                    pauses=0, drops=0, allreduce_ms=1000 * max(allreduce), compute_ms=1000 * statistics.median(compute),
                    pauses_received=int(during("pauses_received")), ranks_paused_s=during("paused_s"))


class FabricCounters:
    """What the switches counted while the job ran: PFC pauses sent,
    packets dropped and (where the fabric marks) packets marked CE, as
    differences between readings."""

    def __init__(self, ctl: FabricController, lock: threading.Lock, pfc: bool):
        self.ctl, self.lock, self.pfc = ctl, lock, pfc
        # ECN marks: each switch's ports' cells, read at the start and the end (not every step)
        self.mark_cells = {sw.name: sorted(sw.ports) for sw in ctl.topo.switches.values()} \
            if ctl.topo.features.get(ECN) else None
        self.first_marks = self._marks()
        # Pauses: only each port's lossless classes' cells, not a switch's 512, read every step and decoded by
        # pure-Python protobuf (p4runtime-shell pins protobuf 3.20: no compiled module for this Python)
        config = ctl.topo.features.get("lossless") if pfc else None
        classes = sorted({k.tclass for k in config.classes if k.lossless}) if config is not None else []
        self.pause_cells = {sw.name: [lossless_cell(port, k) for port in sorted(sw.ports) for k in classes]
                            for sw in ctl.topo.switches.values()}
        self.first_drops = counter_by_index(ctl, "drop_counter", lock)
        self.pauses, self.drops = self._pauses(), sum(self.first_drops.values())

    def _pauses(self) -> int:
        return counter_total(self.ctl, "pfc_pause_sent", self.lock, self.pause_cells) if self.pfc else 0

    def since_last(self) -> tuple[int, int]:
        """(pauses, drops) since the last call."""
        pauses, drops = self._pauses(), counter_total(self.ctl, "drop_counter", self.lock)
        delta = (pauses - self.pauses, max(0, drops - self.drops))    # (a killed switch's counts are gone)
        self.pauses, self.drops = pauses, drops
        return delta

    def _marks(self) -> Counter[int]:
        if self.mark_cells is None:
            return Counter()
        return counter_by_index(self.ctl, ECN_MARKED_COUNTER, self.lock, self.mark_cells)

    def ecn_marks(self) -> int | None:
        """Packets the switches marked CE since the start (a killed switch's
        marks are gone with it); None: no switch marks (no `ecn:` section)."""
        if self.mark_cells is None:
            return None
        return max(0, sum(self._marks().values()) - sum(self.first_marks.values()))

    def drops_by_reason(self) -> dict[str, int]:
        """Drops since the start, by reason."""
        names = {v: k for k, v in drop_reasons().items()}
        grown = counter_by_index(self.ctl, "drop_counter", self.lock) - self.first_drops
        return {names.get(i, str(i)): n for i, n in sorted(grown.items())}


def follow_steps(procs: Sequence[Process], out: Path, steps: int, reference: list[float],
                 counters: FabricCounters, step_started: Callable[[int], None], say,
                 failure: Failure | None = None) -> tuple[list[StepLine], list[list[dict]], list[str]]:
    """Follow the ranks' step files until every rank has ended every step, a
    rank exits, or no step ends for RANK_TIMEOUT_S + 30 s; print each step's
    line as the last rank ends it. Returns the lines, the records, and why
    it stopped short (if it did)."""
    lines: list[StepLine] = []
    files = [StepFile(out / f"rank{r}.jsonl") for r in range(len(procs))]
    records: list[list[dict]] = [[] for _ in procs]
    deadline = time.monotonic() + START_TIMEOUT_S
    previous_end = None
    while len(lines) < steps:
        exited = [p.returncode for p in procs if p.poll() is not None]    # before reading: no line missed
        records = [f.read() for f in files]
        step_started(max(len(r) for r in records) + 1)
        while len(lines) < min(len(r) for r in records):
            x = join_step(len(lines), records, reference, previous_end)
            previous_end = max(r[x.step]["end"] for r in records)
            x.pauses, x.drops = counters.since_last()
            if failure is not None and x.step == failure.step - 1:
                x.failure = failure.text
            lines.append(x)
            say(step_text(x, steps))
            deadline = time.monotonic() + RANK_TIMEOUT_S + 30
        if any(code != 0 for code in exited) or (len(exited) == len(procs) and len(lines) < steps):
            # the others fail too, naming the rank that gave up (its abort notice); one that has not heard it
            # within ABORT_GRACE_S would only time out (RANK_TIMEOUT_S later) and is stopped by the caller
            grace_ends = time.monotonic() + ABORT_GRACE_S
            for p in procs:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    p.wait(timeout=max(0.0, grace_ends - time.monotonic()))
            waiting = [r for r, p in enumerate(procs) if p.poll() is None]
            if waiting:
                say(f"ranks {', '.join(map(str, waiting))} still running {ABORT_GRACE_S:g} s after a rank failed "
                    f"(its notice lost): stopped")
            return lines, records, []
        if time.monotonic() > deadline:
            return lines, records, [f"no step ended for {RANK_TIMEOUT_S + 30:.0f} s"]
        time.sleep(0.05)
    return lines, records, []


def step_text(x: StepLine, steps: int) -> str:
    mark = f"   <- {x.failure}" if x.failure else ""
    ok = "=" if abs(x.loss - x.reference_loss) <= LOSS_TOLERANCE else "!="
    return (f"step {x.step + 1:>3}/{steps}  {x.ms:8.1f} ms  loss {x.loss:.6f} {ok} reference {x.reference_loss:.6f}"
            f"  all-reduce {x.allreduce_ms:7.1f} ms  resent {x.resent:4d}  pauses {x.pauses:4d} sent"
            f" {x.pauses_received:4d} at ranks ({1000 * x.ranks_paused_s:6.1f} ms paused)  drops {x.drops:3d}{mark}")


@contextlib.contextmanager
def fabric(topo: Topology, run_dir: Path, log_level: str, say) -> Iterator[tuple[Network, FabricController,
                                                                                  threading.Lock]]:
    """The topology on BMv2, programmed, queue rates set, each feature's
    background work (failover: heartbeats, rerouting) running."""
    with Network(topo, run_dir, log_level=log_level) as net, FabricController(topo) as ctl:
        ctl.program()
        net.apply_queue_rates()
        lock = threading.Lock()
        with contextlib.ExitStack() as running:
            for feature in topo.known_features:
                for background in feature.background(topo, ctl, lock, say):
                    running.enter_context(background)
            yield net, ctl, lock


def run_case(case: str, c: Composition, args, reference: Reference, rank_names: list[str], failure: Failure | None,
             out: Path, say=print) -> RunResult:
    line_rate = args.line_rate_pps or LINE_RATE_PPS.get(Path(args.topology).stem, DEFAULT_LINE_RATE_PPS)
    link_pps = nic_link_pps(c.channels, line_rate) if getattr(args, "link_rate", "file") == "nic" else None
    incast: Incast | None = getattr(args, "incast", None)
    topo, raw = composed_topology(args.topology, c, rank_names, getattr(args, "overlay", []), link_pps, incast)
    out.mkdir(parents=True, exist_ok=True)
    topo_file = out / "topology.yaml"          # what the ranks' path model reads
    topo_file.write_text(yaml.safe_dump(raw, sort_keys=False))
    hosts = [topo.hosts[n].primary for n in rank_names]
    for stale in out.glob("rank*.jsonl"):
        stale.unlink()
    say(f"==> {case}: {len(hosts)} ranks on {topo.name}, {args.steps} steps ({c.label})")
    if link_pps is not None:
        say(f"links: every link at {link_pps:g} packets/s, a rank NIC's rate ({c.channels} channel"
            f"{'s' if c.channels > 1 else ''} x {line_rate:g} packets/s and their ACKs)")
    incast_procs: list[subprocess.Popen] = []
    cc_params, unmatched = cc_constants(topo, c.cc, line_rate, MTU)
    if cc_params or unmatched:
        say(cc_constants_line(c.cc, cc_params, unmatched))
    lines: list[StepLine] = []
    errors: list[str] = []
    injected = False
    paused_s: float | None = None
    dropped: dict[str, int] = {}
    marks: int | None = None
    records: list[list[dict]] = []
    events: list[FabricEvent] = []
    queue_samples: list[tuple[float, int]] = []      # the incast's bottleneck queue (Incast.bottleneck)
    sampling = threading.Event()                       # set: the sampler stops

    listeners: list[Callable[[str], None]] = []

    def said(text: str) -> None:          # a feature's news (failover: "[reroute] ...") is on the timeline too
        events.append(FabricEvent(time.time(), text.strip()))
        say(text)
        for listen in listeners:
            listen(text)
    explained: list[str] = []
    with fabric(topo, out / "run", args.log_level, said) as (net, ctl, lock), \
            parameter_server(topo, out, c.algorithm == IN_NETWORK), \
            central_routes(ctl, lock, c, [h.ip for h in hosts], said) as on_news, \
            contextlib.ExitStack() as monitor:
        listeners.append(on_news)
        pairs = probed_pairs(c, len(hosts))
        rtt_ms = probe_round_trips(hosts, pairs)
        if len(rtt_ms) < len(pairs):
            errors.append(f"no ping answered between {len(pairs) - len(rtt_ms)} of {len(pairs)} rank pairs on the "
                          f"idle fabric: the ideal step's latency leaves them out")
        latency_ms = all_reduce_latency_ms(c, len(hosts), rtt_ms)
        # sampled every 0.5 s: a case's steps may take 3 s in all, and only samples after the first step judge it
        fidelity = case_fidelity(net, ctl, lock=lock, period_s=0.5)
        procs = [RANKS.start(rank_args(r, hosts, c, args.steps, line_rate, topo, topo_file, out, cc_params),
                             hosts[r].host, out / f"rank{r}.log", RANK_NICE) for r in range(len(hosts))]
        fidelity.watch("ranks", [p.pid for p in procs])
        fidelity.watch("fabric train", [os.getpid()])         # this process: the controller, the step files
        try:
            # monitoring starts while the ranks import PyTorch; it stops (below) before the network does
            prom = monitor.enter_context(monitoring(topo, out / "monitor", args.monitor))
            counters = FabricCounters(ctl, lock, pfc=c.traffic_class == "lossless")

            def step_started(k: int) -> None:           # the failure and the incast, as step k starts
                nonlocal injected
                if incast is not None and not incast_procs and k >= INCAST_FIRST_STEP:
                    incast_procs.extend(start_incast(topo, c, incast, rank_names, out))
                    fidelity.watch("incast", [p.pid for p in incast_procs])
                    monitor.enter_context(sampled_queue(topo, incast.bottleneck(topo, rank_names, c), sampling,
                                                        queue_samples, say))
                    events.append(FabricEvent(time.time(), f"incast {incast.text} starts"))
                    say(f"!!! incast: {incast.text} from {', '.join(incast.hosts)} to "
                        f"{incast.places(topo, rank_names)[1]} as step {k} started")
                if failure is not None and not injected and k >= failure.step:
                    failure.inject(net, ctl, lock)
                    injected = True
                    events.append(FabricEvent(time.time(), failure.text))
                    say(f"!!! {failure.text} as step {failure.step} started")
            lines, records, stalled = follow_steps(procs, out, args.steps, reference.losses, counters, step_started,
                                                   say, failure)
            errors += stalled
            sampling.set()
            # the incast stops before the verdict: frames still arriving while it reads the switches' counters
            # look lost before their pipelines (FidelityMonitor._settled_input_path; 1-2 frames at leaf1, leaf2 or
            # spine2 in 3 of 5 DCQCN runs beside an incast that still ran, 2026-12-03)
            stop_processes(incast_procs)
            dropped, marks = counters.drops_by_reason(), counters.ecn_marks()
            if records and all(records):
                fidelity.traffic_starts(previous_end_of(0, records))
            judged = fidelity.verdict()
            if not stalled and len(lines) == args.steps:       # what a whole run cost, for the next to size by
                record_cost(args, rank_names, c, line_rate, judged.cpu)
            verdict, cpu = str(judged), "; ".join(filter(None, (str(judged.cpu or ""),
                                                                planned_cores(topo, rank_names, c, line_rate))))
            if prom is not None and lines:
                time.sleep(2 * export_interval(topo) + 1)         # the last readings scraped
                paused_s = paused_seconds(prom, previous_end_of(0, records), previous_end_of(len(lines), records))
                for x in slow_steps(lines):
                    start = previous_end_of(x.step, records)
                    explained.append(explain(prom, x, start, max(r[x.step]["end"] for r in records), events))
            for p in procs:             # the ranks write their summaries after the last step
                with contextlib.suppress(subprocess.TimeoutExpired):
                    p.wait(timeout=30)
        finally:
            stop_processes([*procs, *incast_procs])
        for r, p in enumerate(procs):
            if p.returncode not in (0, None) and not errors:
                tail = (out / f"rank{r}.log").read_text().strip().splitlines()
                errors.append(f"rank {r} exited {p.returncode}: {tail[-1] if tail else ''}")
    compute = statistics.median(x.compute_ms for x in lines) if lines else 0.0
    buckets = round(statistics.median(len(r["buckets"]) for rank in records for r in rank)) if records else 1
    if lines:
        write_timeline(out, records, [h.host for h in hosts], events, lines, f"{case}: {c.label}")
    return RunResult(case, c, lines, args.steps, failure, errors,
                     ideal_step_ms(c, len(hosts), compute, line_rate, latency_ms, buckets), records, dropped, explained,
                     paused_s, verdict, latency_ms=buckets * latency_ms, cpu=cpu, scenario=scenario_text(args),
                     ecn_marks=marks, queue=[depth for _, depth in queue_samples])


def stop_processes(procs: Sequence[Process], timeout_s: float = 10.0) -> None:
    """Terminate those of `procs` still running, and wait for them."""
    for p in procs:
        if p.poll() is None:
            p.terminate()
    for p in procs:
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.wait(timeout=timeout_s)


@contextlib.contextmanager
def sampled_queue(topo: Topology, queue: tuple[str, int, int], stop: threading.Event,
                  out: list[tuple[float, int]], say=print) -> Iterator[None]:
    """Sample `queue` (switch, port, priority queue) into `out` from now
    until `stop` is set, or the context ends (it sets `stop`): the depth the
    last packet to leave it met, every 5 ms (sample_queue), over BMv2 Thrift."""
    switch, port, priority = queue
    with Bmv2Thrift(topo.switches[switch].thrift_port) as thrift:
        def sample() -> None:
            try:
                sample_queue(thrift, port, stop, time.time(), out, priority)
            except Exception as exc:      # the switch killed by the case's failure: the samples so far stand
                say(f"queue {switch}:{port}/{priority}: sampling stopped ({type(exc).__name__}: {exc})")
        sampler = threading.Thread(target=sample, name=f"queue {switch}:{port}/{priority}", daemon=True)
        sampler.start()
        try:
            yield
        finally:
            stop.set()
            sampler.join()


def start_incast(topo: Topology, c: Composition, incast: Incast, rank_names: Sequence[str],
                 out: Path) -> list[subprocess.Popen]:
    """`incast`'s senders, started now, sending until terminated (the case's
    end: a sender killed so writes no summary; the switches' counters say
    what the incast did)."""
    target = topo.hosts[incast.places(topo, rank_names)[1]]
    procs = []
    for i, name in enumerate(incast.hosts, start=1):
        host = topo.hosts[name]
        extra = ["--duration", "86400", "--dst-ip", target.primary.ip, "--qp", str(INCAST_QP + i),
                 "--line-rate-pps", f"{incast.pps:g}", "--fixed-rate", "--not-ect"]
        if c.traffic_class == "lossless":         # the ranks' class, and a NIC that honours its pauses
            extra += ["--dscp", str(LOSSLESS_DSCP), "--tclass", str(LOSSLESS_CLASS),
                      "--link-mbps", f"{topo.access_link(host.primary).bandwidth_mbps:g}"]
        procs.append(roce_agent(host, "send", start_at=time.time(), out_dir=out, extra=extra))
    return procs


def export_interval(topo: Topology) -> float:
    return EXPORT_INTERVAL_S if len(topo.switches) <= 6 else LARGE_EXPORT_INTERVAL_S


@contextlib.contextmanager
def monitoring(topo: Topology, run_dir: Path, on: bool) -> Iterator[PrometheusProcess | None]:
    """The switch exporter and Prometheus (Debian's) on loopback, scraping
    every second, beside the network (docs/telemetry.md); None when off."""
    if not on:
        yield None
        return
    interval = export_interval(topo)
    exporter = SwitchExporter(topo, Bmv2Reader(DEFAULT_P4INFO, credentials=MONITOR_CREDENTIALS),
                              interval=interval).start(port=0)
    prom = None
    try:
        assert exporter.server is not None
        config = prometheus_config.write(run_dir / "prometheus.yml", {"switch-exporter": [exporter.server.target]},
                                         scrape_interval=SCRAPE)
        prom = PrometheusProcess(config, run_dir / "prometheus-data", log=run_dir / "prometheus.log").start()
        prom.wait_targets_up({"switch-exporter"}, timeout=60)
        yield prom
    finally:
        if prom is not None:
            prom.stop()
        exporter.stop()


def job_flows(c: Composition, addresses: list[str]) -> list[dict]:
    """The job's traffic matrix as central routing takes it: per ordered rank
    pair and channel, the flow (source port as the communicator picks it)
    and the bytes one all-reduce of the gradient sends on it."""
    sched = sc.schedule(sc.ALL_REDUCE, c.algorithm, len(addresses), PARAMETERS)
    pair_bytes: Counter[tuple[int, int]] = Counter()
    for step in sched.steps:
        for t in step:
            if t.src != t.dst:
                pair_bytes[(t.src, t.dst)] += 4 * t.count
    return [{"src": addresses[a], "dst": addresses[b], "sport": default_sport(a, b, ch),
             "bytes": max(1, n // c.channels)}
            for (a, b), n in sorted(pair_bytes.items()) for ch in range(c.channels)]


@contextlib.contextmanager
def central_routes(ctl: FabricController, lock: threading.Lock, c: Composition, addresses: list[str],
                   say) -> Iterator[Callable[[str], None]]:
    """Central routing: the job's flows pinned on the switches before it
    starts; yields what to call with the fabric's news, which recomputes the
    paths (in a thread of its own) when the controller has rerouted around
    a failure."""
    if c.paths != "central" or c.algorithm == IN_NETWORK:
        yield lambda news: None
        return
    cr = ctl.feature("central_routing")
    with lock:
        assignment = cr.route(job_flows(c, addresses))
    say(f"central routing: {len(assignment.flows)} flows pinned, the busiest link carries "
        f"{assignment.max_load} B a step")
    wake, stop = threading.Event(), threading.Event()

    def recompute() -> None:
        while not stop.is_set():
            if wake.wait(0.2):
                wake.clear()
                try:
                    with lock:
                        a = cr.recompute()
                    say(f"central routing: recomputed around what the controller avoids, the busiest link "
                        f"carries {a.max_load} B a step")
                except EntryError as e:         # some flow has no path left: ECMP (rerouted) carries them all
                    with lock:
                        cr.clear()
                    say(f"central routing: {e}; every flow left to ECMP")
    thread = threading.Thread(target=recompute, name="central-routing", daemon=True)
    thread.start()
    try:
        yield lambda news: wake.set() if news.lstrip().startswith("[reroute]") else None
    finally:
        stop.set()
        thread.join(timeout=5)


@contextlib.contextmanager
def parameter_server(topo: Topology, out: Path, on: bool) -> Iterator[None]:
    """In-network: the aggregation job's parameter server (what the switches
    do not sum, it does) while the job runs."""
    if not on:
        yield
        return
    proc = start_server(topo, AGGREGATION_JOB, out)
    try:
        yield
    finally:
        stop_server(proc, out, AGGREGATION_JOB)


# What Prometheus stores of the switch exporter's metrics (a counter's samples end in _total).
DROPS = m.FABRIC_DROPS.exposed()[0]
PAUSES_SENT = m.FEATURE_METRICS["fabric_pfc_pause_sent"].exposed()[0]
PAUSED_SECONDS = m.FEATURE_METRICS["fabric_pfc_paused_seconds"].exposed()[0]
QUEUE_DEPTH = m.FABRIC_QUEUE_DEPTH.exposed()[0]
SWITCH_UP = m.FABRIC_SWITCH_UP.exposed()[0]


def paused_seconds(prom: PrometheusClient, start: float, end: float) -> float | None:
    """Seconds of pause the switches' ports were held in over [start, end]
    (every port and class summed: the lossless feature's pfc_paused_us, as
    the exporter publishes it), from Prometheus; None if it cannot tell."""
    window = math.ceil(end - start) + 5
    try:
        got = prom.query(f"sum(increase({PAUSED_SECONDS}[{window}s]))", end + 4)
    except PrometheusError:
        return None
    return float(got[0]["value"][1]) if got else 0.0


def slow_steps(lines: list[StepLine]) -> list[StepLine]:
    """The (up to three) slowest steps over SLOW_STEP x the median, slowest first."""
    if len(lines) < 3:
        return []
    median = statistics.median(x.ms for x in lines)
    return sorted((x for x in lines if x.ms > SLOW_STEP * median), key=lambda x: -x.ms)[:3]


def explain(prom: PrometheusClient, x: StepLine, start: float, end: float, events: list[FabricEvent]) -> str:
    """What Prometheus recorded around a step [start, end] (padded by the
    exporter's and the scrapes' lag): drops by reason, pauses, the deepest
    queue, switches that stopped answering; and the fabric's events then."""
    window = math.ceil(end - start) + 5
    at = end + 4
    parts = []
    try:
        drops = prom.query(f"sum by (reason) (increase({DROPS}[{window}s])) > 0", at)
        parts.append("drops " + (", ".join(f"{r['metric'].get('reason')} {float(r['value'][1]):.0f}" for r in drops)
                                 or "none"))
        pauses = prom.query(f"sum(increase({PAUSES_SENT}[{window}s]))", at)
        if pauses:
            parts.append(f"PFC pauses {float(pauses[0]['value'][1]):.0f}")
        queue = prom.query(f"topk(1, max_over_time({QUEUE_DEPTH}[{window}s]) > 0)", at)
        if queue:
            m = queue[0]["metric"]
            parts.append(f"deepest queue {float(queue[0]['value'][1]):.0f} packets "
                         f"({m.get('switch')} port {m.get('port')} queue {m.get('queue')})")
        down = prom.query(f"min by (switch) (min_over_time({SWITCH_UP}[{window}s])) == 0", at)
        if down:
            parts.append("not answering: " + ", ".join(r["metric"]["switch"] for r in down))
    except PrometheusError as e:
        parts.append(f"Prometheus: {e}")
    news = [e.name for e in events if start - 1 <= e.at <= end + 1]
    return (f"slow step {x.step + 1} ({x.ms:.0f} ms): Prometheus over [{window} s to its end + 4 s]: "
            + "; ".join(parts) + ("; the fabric: " + " | ".join(news) if news else ""))


def write_timeline(out: Path, records: list[list[dict]], hosts: list[str], events: list[FabricEvent],
                   lines: list[StepLine], title: str) -> None:
    """out/trace.json (Chrome trace format: open in ui.perfetto.dev) and
    out/heatmap.png (per rank and step, the rank's step time)."""
    ends = [max(r[x.step]["end"] for r in records) for x in lines]
    counters = [{"at": at, "pauses": x.pauses, "pauses received by ranks": x.pauses_received, "drops": x.drops,
                 "resent": x.resent} for at, x in zip(ends, lines)]
    steps = len(lines)
    write_trace(out / "trace.json", trace_events([r[:steps] for r in records], hosts, events, counters))
    write_heatmap(out / "heatmap.png", [r[:steps] for r in records], hosts, title)


def topology_path(name: str) -> Path:
    return Path(name) if name.endswith(".yaml") else REPO / "topologies" / f"{name}.yaml"


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="fabric train", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--topology", "-t", default="fat-tree-k4", help="a topology in topologies/ or a YAML path "
                    "(default %(default)s; leaf-spine for a quick run)")
    ap.add_argument("--ranks", type=int, help="ranks, on the first hosts (default: every host)")
    ap.add_argument("--steps", type=int, default=40, help="global batches of 64 digits (default %(default)s)")
    ap.add_argument("--algorithm", choices=ALGORITHMS, default=sc.RING)
    ap.add_argument("--transport", choices=TRANSPORTS, default="rc",
                    help="rc: RoCEv2's reliable connection; uet: UET's unordered delivery over a lossy fabric that "
                         "trims (default %(default)s)")
    ap.add_argument("--traffic-class", choices=TRAFFIC_CLASSES, default=None,
                    help="default: lossless with rc, lossy with uet (UET has no PFC)")
    ap.add_argument("--cc", choices=sorted(uet_congestion_controls()), default=None,
                    help="default: hpcc with rc, nscc with uet (rccc: uet only)")
    ap.add_argument("--paths", choices=PATHS, default="path-aware")
    ap.add_argument("--channel-choice", choices=CHANNEL_CHOICES, default=LEAST_LOADED,
                    help=f"with {CHANNELS} channels (path-aware, central): each piece on the channel with the fewest "
                         "bytes outstanding, or a fixed even split (default %(default)s)")
    ap.add_argument("--no-failover", action="store_true", help="no heartbeats, no data-plane or controller failover")
    ap.add_argument("--fail", metavar="TARGET@stepK", help="as step K starts, kill a switch (spine1), cut a link "
                    "(leaf1-spine1) or make a switch black-hole (blackhole:spine1)")
    ap.add_argument("--overlay", action="append", default=[], metavar="FILE",
                    help="tune the composition with these sections (repeatable; `fabric tune --out` writes one): "
                         "they replace the composition's, add ECN, leave a technique it has off, off")
    ap.add_argument("--ablate", nargs="?", const=",".join(TECHNIQUES), metavar="TECHNIQUES",
                    help="the composition, then each technique off in turn (or those named, comma-separated: "
                         f"{', '.join(TECHNIQUES)})")
    ap.add_argument("--runs", type=int, default=1,
                    help="run every case this many times, in rounds (each round every case once, so a drift of the "
                         f"machine reaches all alike); with --ablate and at least {MIN_FAITHFUL_RUNS} faithful runs a "
                         "case, a verdict per technique with a 95%% bootstrap interval (default %(default)s)")
    ap.add_argument("--line-rate-pps", type=float, help="each connection's top rate (default: the one that "
                    "leaves the cores idle enough by what earlier runs of the composition cost here; without such "
                    "runs, the highest that keeps the ring within this machine's budget by its calibration; "
                    "without a calibration, per topology: docs/fidelity.md, docs/train.md)")
    ap.add_argument("--link-rate", choices=LINK_RATES, default="file",
                    help="file: every link at its bandwidth in the topology file; nic: every link at the rate a rank's "
                         "NIC fills (its channels at --line-rate-pps, and their ACKs), so that the fabric's links are "
                         "slowed as its NICs are and queues build where a real fabric's would (default %(default)s)")
    ap.add_argument("--incast", metavar="SENDERS@PPS",
                    help="SENDERS hosts added beside the first rank's switch send PPS packets/s each, at a fixed rate "
                         "in the ranks' class, to the first rank on another switch, from step 2 on (2@300)")
    ap.add_argument("--no-monitor", dest="monitor", action="store_false",
                    help="no switch exporter nor Prometheus (no slow step explained)")
    ap.add_argument("--out", type=Path, default=OUT, help="results directory (default %(default)s)")
    ap.add_argument("--log-level", choices=LOG_LEVELS, default=DEFAULT_EXPERIMENT_LOG_LEVEL)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    exit_on_sigterm()       # the run torn down as on Ctrl-C
    try:
        path = topology_path(args.topology)
        if not path.exists():
            raise ValueError(f"--topology {args.topology}: no such topology ({path})")
        hosts = yaml.safe_load(path.read_text())["hosts"]
        args.ranks = args.ranks or len(hosts)
        rank_names = [h["name"] for h in hosts][:args.ranks]
        if not 2 <= args.ranks <= len(hosts) or 64 % args.ranks:
            raise ValueError(f"--ranks {args.ranks}: must divide the global batch of 64, 2..{len(hosts)} "
                             f"(the topology's hosts)")
        if args.steps < 2:
            raise ValueError(f"--steps {args.steps}: at least 2")
        if args.runs < 1:
            raise ValueError(f"--runs {args.runs}: at least 1")
        args.incast = Incast.parse(args.incast) if args.incast else None
        uet = args.transport == "uet"
        args.traffic_class = args.traffic_class or ("lossy" if uet else "lossless")
        args.cc = args.cc or ("nscc" if uet else "hpcc")
        if uet and args.traffic_class == "lossless":
            raise ValueError("--transport uet runs lossy (trimming, no PFC): not with --traffic-class lossless")
        if not uet and args.cc == "rccc":
            raise ValueError("--cc rccc is UET's receiver credit: with --transport uet only")
        composition = Composition(args.algorithm, args.traffic_class, args.cc, args.paths, args.channel_choice,
                                  not args.no_failover, args.transport)
        cases = ablations(composition, tuple(t.strip() for t in args.ablate.split(","))) if args.ablate \
            else [("composed", composition)]
        # checked before anything starts (a case's sections add no switch nor link): every case's
        # topology with the overlays, then the failure
        for case, c in cases:
            composed_topology(args.topology, c, rank_names, args.overlay, incast=args.incast)
            if args.overlay:
                _, sources, left = overlay_sections(composed_topology(args.topology, c, rank_names)[1], args.overlay)
                print(f"{case}: from the overlays: {', '.join(sorted(sources)) or 'nothing'}"
                      f"{'; left as the composition has them: ' + ', '.join(left) if left else ''}", flush=True)
        failure = Failure.parse(args.fail, composed_topology(args.topology, composition, rank_names,
                                                             args.overlay)[0], args.steps) if args.fail else None
    except (ValueError, TopologyError) as e:
        print(f"fabric train: {e}")
        return 2
    if not args.line_rate_pps:
        args.line_rate_pps, how = line_rate_for(args.topology, rank_names, composition, args.overlay,
                                                scenario_text(args))
        print(f"line rate: {args.line_rate_pps:g} packets/s a connection ({how})", flush=True)
    try:                 # the overlay's congestion-control constants, as every case's ranks will take them
        for case, c in cases:
            cc_constants(composed_topology(args.topology, c, rank_names, args.overlay)[0], c.cc, args.line_rate_pps,
                         MTU)
    except ValueError as e:
        print(f"fabric train: {e}")
        return 2
    compile_p4()
    args.out.mkdir(parents=True, exist_ok=True)
    reference = Reference(args.steps, args.out)
    RANKS.warm()            # the ranks' fork server imports PyTorch while the reference runs and the fabric comes up
    results = []
    for run in range(1, args.runs + 1):
        for case, c in cases:
            out = args.out / case.replace(" ", "-")
            if args.runs > 1:
                print(f"\n==> run {run} of {args.runs}: {case}", flush=True)
                out = out / f"run-{run}"
            try:
                result = run_case(case, c, args, reference, rank_names, failure, out)
            except (NetworkError, PrometheusError, PrometheusMissing) as e:
                print(f"fabric train: {case}: {e}")
                return 2
            result.run = run
            results.append(result)
            print_summary(result)
    rows = [r.summary() for r in results]
    written = [write_csv(args.out / ("ablation.csv" if args.ablate else "summary.csv"), rows)]
    write_csv(args.out / "steps.csv", [{"case": r.case, "run": r.run, **asdict(x)} for r in results for x in r.lines])
    written.append(args.out / "steps.csv")
    if args.ablate:
        columns = ("case", *(("run",) if args.runs > 1 else ()), "completed", "step_ms_p50", "step_ms_p99",
                   "efficiency", "resent", "pauses", "paused_s")
        print_table([{**{k: row[k] for k in columns},
                      "nic_pauses": row["pauses_received"], "nic_paused_s": row["ranks_paused_s"],
                      "drops": row["drops"], "ecn_marks": row["ecn_marks"],
                      **({"queue_p99": row["queue_p99"]} if args.incast is not None else {})} for row in rows],
                    width=12)
        written.append(plot_ablation(rows, args.out / "ablation.png"))
        verdicts = technique_verdicts(results)
        written.append(write_csv(args.out / "verdicts.csv", verdicts))
        print(f"\neach technique switched off, against the composition (median step of the faithful runs; "
              f"{CONFIDENCE:.0%} bootstrap interval):")
        for v in verdicts:
            off, on = v["queue_p99_median"], v["composed_queue_p99_median"]
            queues = "" if "" in (off, on) else \
                f" (the incast's bottleneck queue p99, faithful runs' median: {off:g} packets off, {on:g} composed)"
            print(f"  {v['technique off']}: {v['verdict']}{queues}")
    (args.out / "summary.json").write_text(json.dumps(rows, indent=2))
    written.append(args.out / "summary.json")
    print(f"\nresults: {', '.join(map(str, written))}; per case <case>/: trace.json (the ranks' timeline, "
          f"Chrome trace format: open it in ui.perfetto.dev), heatmap.png, each rank's step lines and log")
    print_fidelity(rows)
    # in an ablation, a case that stopped with its technique off is a finding (its verdict says so); the
    # composition must complete, and every step's loss must be the reference's
    ok = all(r.loss_error <= LOSS_TOLERANCE and (r.completed == r.steps or (args.ablate and r.case != "composed"))
             for r in results)
    return 0 if ok else 1


def print_summary(r: RunResult) -> None:
    s = r.summary()
    print(f"\n{r.case}: {s['completed']}/{s['steps']} steps, step {s['step_ms_p50']} ms (p50) "
          f"{s['step_ms_p99']} ms (p99), ideal {s['ideal_ms']} ms ({s['ideal_latency_ms']} ms of it the idle fabric's "
          f"latency; efficiency {s['efficiency']}), "
          f"resent {s['resent']} packets, {s['pauses']} pauses sent ({s['paused_s'] or 0} s paused), "
          f"{s['pauses_received']} received by the ranks' NICs ({s['ranks_paused_s']} s paused, ranks summed), "
          f"drops {s['drops']}" + ("" if r.ecn_marks is None else f", {r.ecn_marks} packets marked CE")
          + ("" if not r.queue else f"; the incast's bottleneck queue p50/p99 {s['queue_p50']:g}/{s['queue_p99']:g} "
             f"packets ({len(r.queue)} samples)"))
    print(f"  fidelity: {s['fidelity']}")
    if r.cpu:
        print(f"  cpu over the steps: {r.cpu}")
    if r.failure is not None and r.completed < r.steps:
        print(f"  failure: {s['failure']}: not absorbed: the job stopped after step {r.completed}")
    elif r.failure is not None:
        print(f"  failure: {s['failure']}: absorbed by step {s['absorbed_by_step'] or '-'}"
              f", which cost {s['absorbed_cost_ms']} ms more than the median step before")
    if r.lines:
        verdict = "equals" if r.loss_error <= LOSS_TOLERANCE else "DIFFERS FROM"
        print(f"  loss curve {verdict} the single-process reference (largest difference {r.loss_error:.2e}, "
              f"tolerance {LOSS_TOLERANCE:g})")
    for line in r.explained:
        print(f"  {line}")
    for e in r.errors:
        print(f"  error: {e}")


def plot_ablation(rows: list[dict], path: Path) -> Path:
    """Each case's p50 and p99 step: with several runs, the median over
    them, with bars from the least to the most."""
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(9, 4))
    names = list(dict.fromkeys(r["case"] for r in rows))
    xs = range(len(names))
    for offset, key in ((-0.2, "step_ms_p50"), (0.2, "step_ms_p99")):
        runs = [[r[key] or 0 for r in rows if r["case"] == name] for name in names]
        mid = [statistics.median(v) for v in runs]
        ax.bar([x + offset for x in xs], mid, 0.4, label=key.removeprefix("step_ms_"),
               yerr=[[m - min(v) for m, v in zip(mid, runs)], [max(v) - m for m, v in zip(mid, runs)]]
               if any(len(v) > 1 for v in runs) else None, capsize=3)
    ax.set_xticks(list(xs))
    ax.set_xticklabels(names, rotation=20, ha="right")
    ax.set_ylabel("step time (ms)")
    ax.legend()
    runs_n = max(r["run"] for r in rows)
    ax.set_title("fabric train --ablate: each technique switched off in turn"
                 + (f" ({runs_n} runs: median, least to most)" if runs_n > 1 else ""))
    return save_figure(fig, path)
