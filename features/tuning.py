"""Lossless and congestion parameters derived from a topology: what `fabric
tune` prints and writes as an overlay (docs/tuning.md, every formula with
its source).

From the links' rates and cable delays, the packet size the emulator counts
in, the classes of the `lossless:` section, the `ecn:` section (or a mode
asked for) and a round-trip time (an input; by default the topology's
longest host-to-host path: its cable delays both ways plus a BMv2 switch
traversal per switch each way), per port and class where it applies:

  lossless   headroom, XON, XOFF (packets of one ingress port in a class, as
             p4src/include/lossless.p4's buffer model counts them), the
             watchdog's detection and restoration times;
  ecn        step K (DCTCP's rule) and WRED Kmin/Kmax/Pmax (DCQCN's
             thresholds as multiples of its BDP), marking from the port's
             fan-in at the lowest, per egress port and queue;
  dcqcn, hpcc, timely, swift, nscc, rccc
             the congestion controls' link-dependent constants, each saying
             what carries it: the overlay's `congestion_control:` section
             (features/congestion_control.py), which `fabric train` and the
             rdma experiment give the RDMA agents (--cc-param), and for
             DCQCN the RoCEv2 agent's flags too.

Every value is a `Derived`: the value, its formula as text, its inputs with
units, the ports or hosts it applies to and its source, so `fabric tune`
prints "name = value  (formula; inputs)". The time constants are scaled as
the project scales them: link rates are the emulated Mbit/s (1000 times
below hardware and more), which BMv2 serves as packets/s
(emulator/network.py queue_rate_pps), pause quanta are 512 bit times of the
emulated link, and what BMv2 itself takes (a switch traversal) is real
time, measured, not scaled.
"""
from __future__ import annotations

import copy
import math
from collections import deque
from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Mapping, Optional

from control.topology import Topology
from emulator.network import QUEUE_RATE_PACKET_BYTES, queue_rate_pps
from features.congestion_control import AT_LINE_RATE, FIELDS as CC_FIELDS, LINE_RATE, SECTION as CONGESTION_CONTROL
from features.ecn import EcnProfile
from features.lossless import SECTION as LOSSLESS, LosslessConfig, PfcThresholds, TrafficClass, \
    lossless_queue_depth
from wire.lossless import pause_us

ECN = "ecn"
PACKET_BYTES = QUEUE_RATE_PACKET_BYTES   # what a threshold's packet is: the queue rates assume MTU-sized packets
# One BMv2 switch traversal, real time (not scaled): an unloaded RTT of 3.2-4.0 ms, 3.6 at the median,
# across three switches of incast-leaf-spine with no cable delay (docs/rdma.md, waiting agents) is six
# traversals, the agents' own time folded in: 0.6 ms each.
HOP_S = 0.0006
BMV2_QUEUE_DEPTH = 64           # packets: a BMv2 queue without a depth setting (FIELD-NOTES, behavioral-model)
HYSTERESIS = 2                  # packets between XON and XOFF: HPCC's ns-3 resume_offset, 3 KB = 2 x 1500 B
SONIC_DETECT_MS = 200.0         # SONiC's PFC watchdog default detection (sonic-utilities pfcwd/main.py)
STORM_MARGIN = 2.0              # a storm: paused twice as long as the longest healthy pause
DCTCP_K_DIVISOR = 7             # DCTCP: K > C x RTT / 7
# DCQCN (Zhu et al., SIGCOMM 2015), at 40 Gbit/s: RED-like marking and the reaction point's constants.
DCQCN_RATE_BPS = 40e9
DCQCN_KMIN_BYTES = 5_000
DCQCN_KMAX_BYTES = 200_000
DCQCN_PMAX = 0.01
DCQCN_N_S = 50e-6               # CNP interval
DCQCN_T_S = 55e-6               # rate-increase timer T and alpha timer K
DCQCN_B_BYTES = 10_000_000      # rate-increase byte counter
DCQCN_R_AI_BPS = 40e6           # additive increase
# DCQCN takes its CNP interval N to be at least the feedback delay: an RTT plus a marked packet's wait
# behind a queue at Kmax (200 KB at 40 Gbit/s: 40 us). Its constants therefore fit an RTT of N - 40 us.
DCQCN_RTT_S = DCQCN_N_S - DCQCN_KMAX_BYTES * 8 / DCQCN_RATE_BPS
HPCC_ETA = 0.95                 # HPCC (Li et al., SIGCOMM 2019): target utilisation
HPCC_MAX_STAGE = 5              # additive steps before a multiplicative one
# NSCC (UET): the target queueing delay as a share of the network's base RTT where packets are trimmed, as
# UET runs here (fabric train --transport uet, fabric experiment uet); the whole RTT without trimming.
NSCC_TARGET_SHARE_TRIMMING = 0.75

SOURCES = {
    "cisco-pfc": "Cisco, Priority Flow Control: Build Reliable Layer 2 Infrastructure (white paper c11-542809): "
                 "headroom = MTU at the receiver + 2 x cable + the sender's response + MTU at the sender",
    "hpcc-ns3": "HPCC's ns-3 (alibaba-edu/High-Precision-Congestion-Control): switch-mmu.cc resume_offset 3 KB, "
                "third.cc headroom from rate x delay and T = the longest base RTT (GLOBAL_T)",
    "dcqcn": "Zhu et al., Congestion Control for Large-Scale RDMA Deployments (DCQCN), SIGCOMM 2015: "
             "Kmin 5 KB, Kmax 200 KB, Pmax 1%, N 50 us, K = T 55 us, B 10 MB, R_AI 40 Mbit/s at 40 Gbit/s; "
             "ECN must act before PFC",
    "dctcp": "Alizadeh et al., Data Center TCP (DCTCP), SIGCOMM 2010: K > C x RTT / 7",
    "hpcc": "Li et al., HPCC: High Precision Congestion Control, SIGCOMM 2019: eta 0.95, maxStage 5, "
            "W_init = line rate x T, W_AI = W_init (1 - eta) / N",
    "timely": "Mittal et al., TIMELY, SIGCOMM 2015 (T_low, T_high); hostagent/rdma/cc/timely.py's rule for BMv2",
    "swift": "Kumar et al., Swift, SIGCOMM 2020 (target = base + hops x per-hop); hostagent/rdma/cc/swift.py",
    "nscc": "Ultra Ethernet 1.0's NSCC as the UEC's htsim model sets it (spcl/HTSIM htsim/sim/uec.cpp "
            "initNsccParams): target_Qdelay = 0.75 x the network's RTT with trimming (the RTT without), window "
            "at most 1.5 x BDP, BDP = line rate x base RTT",
    "rccc": "Ultra Ethernet 1.0's RCCC (Hoefler et al., arXiv 2508.08906; the UEC's htsim model, initRccc): "
            "a sender's base RTT and BDP = line rate x base RTT, its credit before the receiver grants any",
    "sonic-pfcwd": "SONiC's PFC watchdog (sonic-utilities pfcwd/main.py: detection 200 ms, restoration 200 ms, "
                   "polled every 200 ms); restoration at least 2 x detection is this project's default "
                   "(features/lossless.py)",
    "802.1qbb": "IEEE 802.1Qbb: a pause lasts its quanta of 512 bit times of the link",
    "project": "this project's measurement or rule (docs/tuning.md)",
}

# What carries each congestion-control constant (docs/tuning.md, docs/rdma.md, docs/features/ecn.md).
RECEIVER_FIELDS = ("cnp_interval_s",)    # DCQCN's notification point is the receiver: its CNP interval N


def carried(cc: str, field: str, line_rate_pps: Optional[float] = None) -> str:
    """Where a congestion control's constant is carried: the overlay's
    congestion_control section (per line rate where it depends on it),
    which fabric train and the rdma experiment give every RDMA agent of
    `cc` as --cc-param (the receiver too, for DCQCN's CNP interval)."""
    at = f".{AT_LINE_RATE}[{LINE_RATE} {fmt(line_rate_pps)}]" if line_rate_pps is not None else ""
    roles = "send and receive" if field in RECEIVER_FIELDS else "send"
    return (f"overlay: {CONGESTION_CONTROL}.{cc}{at}.{field} (fabric train, fabric experiment rdma --overlay: "
            f"python -m hostagent.rdma {roles} --cc-param {field}=VALUE)")


def dcqcn_carried(field: str, line_rate_pps: Optional[float] = None) -> str:
    """Where a DCQCN parameter can be set: the overlay's section (the RDMA
    agents' --cc-param; the ECN and lossless experiments give it to the
    RoCEv2 agent's flags, the receiver's for the CNP interval) and
    ecn_incast's --dcqcn."""
    agent = "receive --cnp-interval-s" if field == "cnp_interval_s" else f"send --{field.replace('_', '-')}"
    return (f"{carried('dcqcn', field, line_rate_pps)}; fabric experiment ecn_incast|lossless --overlay (python -m "
            f"hostagent.ecn.roce {agent}), or ecn_incast --dcqcn {field}=VALUE")


def fmt(value: float) -> str:
    """A number as the output shows it: integers whole, from 100 up to a
    tenth, others to 4 significant digits."""
    if float(value).is_integer() and abs(value) < 1e15:
        return str(int(value))
    if abs(value) >= 100:
        return f"{value:.1f}".rstrip("0").rstrip(".")
    return f"{value:.4g}"


def ceil(x: float) -> int:
    """math.ceil, forgiving floating-point dust (2.0000000000000004 is 2)."""
    return math.ceil(x - 1e-9)


@dataclass(frozen=True)
class Input:
    name: str
    value: float
    unit: str = ""

    def __str__(self) -> str:
        return f"{self.name} = {fmt(self.value)}{' ' + self.unit if self.unit else ''}"


@dataclass(frozen=True)
class Derived:
    """One derived value: `name` = `value` `unit`, by `formula` from `inputs`,
    for `where` (ports, classes or hosts; empty: the whole fabric), from
    `source` (a key of SOURCES), carried by `carried_by`."""
    name: str
    value: float
    unit: str
    formula: str
    inputs: tuple[Input, ...] = ()
    where: str = ""
    source: str = ""
    carried_by: str = ""

    def line(self) -> str:
        where = f"[{self.where}]" if self.where else ""
        inputs = "; " + ", ".join(map(str, self.inputs)) if self.inputs else ""
        unit = f" {self.unit}" if self.unit else ""
        return f"{self.name}{where} = {fmt(self.value)}{unit}  ({self.formula}{inputs})"


# -- the formulas ------------------------------------------------------------------------------------------

def pfc_headroom_bytes(rate_bps: float, delay_s: float, mtu_bytes: float, response_s: float) -> float:
    """What still arrives after the receiver decides to pause (Cisco's PFC
    white paper, IEEE 802.1Qbb): the cable's round trip at line rate, a
    maximum frame the pause waits behind at the receiver, one the sender is
    already sending when the pause arrives, and what it sends during its
    response time."""
    return 2 * delay_s * rate_bps / 8 + 2 * mtu_bytes + response_s * rate_bps / 8


def headroom_packets(rate_pps: float, delay_s: float, hop_s: float) -> float:
    """pfc_headroom_bytes in packets at the emulated rate: a maximum frame is
    one packet, and the response is two BMv2 traversals (the pausing switch
    from XOFF to the frame on the wire, the upstream from the frame to its
    egress holding the class)."""
    return pfc_headroom_bytes(rate_pps * PACKET_BYTES * 8, delay_s, PACKET_BYTES, 2 * hop_s) / PACKET_BYTES


def xon_packets(rate_pps: float, delay_s: float, hop_s: float) -> int:
    """Enough left in the cell when it resumes to keep its egress busy until
    the upstream's packets arrive again: the resume's trip up and the
    packets' down (2 d) and both ends' response (2 t_hop), at the rate the
    cell is refilled; and one more, since the P4 resumes below XON (with
    XON - 1 packets left: at XON 1 the cell is empty when the resume goes
    up, and its egress idles for the whole round trip)."""
    return ceil(rate_pps * (2 * delay_s + 2 * hop_s)) + 1


def xoff_packets(xon: int, marking_start: Optional[int]) -> int:
    """XON plus the hysteresis (HPCC's ns-3 resumes 3 KB, two packets, below
    its pause threshold), and above where ECN starts marking, so ECN acts
    before PFC (DCQCN): in the worst case one ingress port fills the marked
    queue alone."""
    return max(xon + HYSTERESIS, (marking_start + 1) if marking_start is not None else 0)


def dctcp_k(rate_pps: float, rtt_s: float) -> int:
    """DCTCP's marking threshold for full throughput: K > C x RTT / 7 (packets); at least 1."""
    return max(1, ceil(rate_pps * rtt_s / DCTCP_K_DIVISOR))


def fan_in(topo: Topology, switch: str) -> int:
    """The ports that can feed one egress port of `switch`: its others. One
    packet from each, arriving together, queues fan-in - 1 deep at that port
    with no overload at all, so marking must start at the fan-in or above:
    below it, ECN marks coincidence, not congestion, and DCQCN cuts for it
    (leaf-spine, K 1 on a leaf's host port: two DCQCN senders used the link
    0.37 in one CI run; DCTCP's own deployments set K far above C x RTT / 7
    for bursts: 20 packets at 1 Gbit/s, 65 at 10, Linux's dctcp.txt)."""
    return max(1, len(topo.switches[switch].ports) - 1)


def dcqcn_threshold(reference_bytes: float, rate_pps: float, rtt_s: float) -> float:
    """A DCQCN threshold in packets at this port: the paper's (at 40 Gbit/s,
    for an RTT of DCQCN_RTT_S) as a multiple of the paper's BDP, times the
    port's BDP (rate x RTT)."""
    return reference_bytes / (DCQCN_RATE_BPS / 8 * DCQCN_RTT_S) * rate_pps * rtt_s


def dcqcn_time_scale(rtt_s: float) -> float:
    """How many times slower the emulated feedback loop is than the one
    DCQCN's constants were set for: RTT / (N - Kmax / C)."""
    return rtt_s / DCQCN_RTT_S


def hpcc_w_ai(w_init: float, flows: int, eta: float = HPCC_ETA) -> float:
    """HPCC's additive step: W_AI = W_init (1 - eta) / N."""
    return w_init * (1 - eta) / flows


def healthy_pause_s(xoff: int, headroom: int, xon: int, rate_pps: float, hops: int, hop_s: float,
                    delay_s: float) -> float:
    """The longest a healthy fabric keeps a class paused: each paused switch
    drains its cell from XOFF + headroom to below XON at the slowest rate,
    then the resume takes both ends' response and the cable both ways; a
    chain of paused switches (congestion spreading) waits for each in turn."""
    return hops * ((xoff + headroom - xon + 1) / rate_pps + 2 * hop_s + 2 * delay_s)


# -- the topology, as the formulas need it ----------------------------------------------------------------

def port_list(ports: Iterable[tuple[str, int]]) -> str:
    """"leaf1:1-4 spine1:1,2": ports by switch, three or more consecutive ones as a range."""
    by: dict[str, list[int]] = {}
    for sw, p in ports:
        by.setdefault(sw, []).append(p)
    parts = []
    for sw, numbers in by.items():
        runs: list[list[int]] = []
        for n in sorted(set(numbers)):
            if runs and n == runs[-1][-1] + 1:
                runs[-1].append(n)
            else:
                runs.append([n])
        text = [f"{r[0]}-{r[-1]}" if len(r) > 2 else ",".join(map(str, r)) for r in runs]
        parts.append(f"{sw}:{','.join(text)}")
    return " ".join(parts)


@dataclass(frozen=True)
class Paths:
    """The unloaded round trips between hosts: RTT = 2 (cable delays on the
    path) + 2 (switches on it) t_hop, over the longest-delay shortest path
    (routing takes shortest paths by hops)."""
    rtt_max_s: float
    rtt_min_s: float
    switches_max: int             # switches on the longest path (by hops)
    delay_max_s: float            # the cable delays one way on the path of rtt_max
    pair: tuple[str, str] = ("", "")   # the hosts at its ends

    @classmethod
    def of(cls, topo: Topology, hop_s: float) -> "Paths":
        delays: dict[str, dict[str, tuple[int, float]]] = {}   # switch -> switch -> (hops, max one-way delay)
        for src in topo.switches:
            dist = {src: (0, 0.0)}
            order = deque([src])
            while order:
                cur = order.popleft()
                hops, delay = dist[cur]
                for port in topo.switch_neighbours(cur):
                    nxt = (hops + 1, delay + port.link.delay_ms / 1000)
                    if port.peer not in dist:
                        dist[port.peer] = nxt
                        order.append(port.peer)
                    elif dist[port.peer][0] == hops + 1 and nxt[1] > dist[port.peer][1]:
                        dist[port.peer] = nxt
            delays[src] = dist
        best: Optional[tuple[float, int, float, tuple[str, str]]] = None
        least: Optional[float] = None
        for a in topo.nics:
            for b in topo.nics:
                if a.host == b.host or b.switch not in delays[a.switch]:
                    continue
                hops, d = delays[a.switch][b.switch]
                one_way = topo.access_link(a).delay_ms / 1000 + d + topo.access_link(b).delay_ms / 1000
                rtt = 2 * one_way + 2 * (hops + 1) * hop_s
                if best is None or rtt > best[0]:
                    best = (rtt, hops + 1, one_way, (a.host, b.host))
                least = rtt if least is None else min(least, rtt)
        if best is None or least is None:          # one host: a round trip through its switch
            return cls(2 * hop_s, 2 * hop_s, 1, 0.0)
        return cls(best[0], least, best[1], best[2], best[3])


# -- the derivation ---------------------------------------------------------------------------------------

@dataclass
class Tuning:
    """Everything `fabric tune` derives for one topology, by section."""
    topology: str
    source: str
    rtt_s: float
    hop_s: float
    paths: Paths
    sections: dict[str, list[Derived]] = field(default_factory=dict)
    notes: dict[str, list[str]] = field(default_factory=dict)
    pfc: Optional[dict[str, int]] = None             # the lossless section's pfc values (the max over cells)
    watchdog: Optional[dict[str, float]] = None      # its watchdog, when the topology has one
    hold_rate_pps: Optional[int] = None              # its hold loop's rate
    pfc_ports: list[dict[str, Any]] = field(default_factory=list)   # cells whose values are not the section's
    ecn: list[dict[str, Any]] = field(default_factory=list)   # the ecn section's items, when one is written
    switch_ports: dict[str, list[int]] = field(default_factory=dict)   # each switch's port numbers, in file order
    # the congestion controls' constants the overlay carries: cc -> field -> value, and per NIC line rate
    cc: dict[str, dict[str, float]] = field(default_factory=dict)
    cc_at_line_rate: dict[str, dict[float, dict[str, float]]] = field(default_factory=dict)
    dilation: float = 1.0       # the fabric's (emulator/dilation.py): the network-time constants used are D x longer

    def add(self, section: str, d: Derived) -> Derived:
        self.sections.setdefault(section, []).append(d)
        return d

    def carry(self, cc: str, d: Derived, line_rate_pps: Optional[float] = None) -> Derived:
        """`d` (named "<cc>.<field>", a field of the congestion control's
        Params) added to `cc`'s section and to what the overlay carries."""
        self.add(cc, d)
        name = d.name.split(".", 1)[1]
        if name not in CC_FIELDS[cc]:
            raise ValueError(f"{d.name}: not a field the {CONGESTION_CONTROL} section carries")
        value = int(d.value) if CC_FIELDS[cc][name] is int else float(d.value)
        if line_rate_pps is None:
            self.cc.setdefault(cc, {})[name] = value
        else:
            self.cc_at_line_rate.setdefault(cc, {}).setdefault(line_rate_pps, {})[name] = value
        return d

    def note(self, section: str, text: str) -> None:
        self.notes.setdefault(section, []).append(text)


def _class_rate(link_pps: int, tclass: TrafficClass, peer_is_switch: bool) -> float:
    """What arrives of a class on a port, packets/s: the link's rate, or the
    upstream switch's cap on the class's queue (its `share`)."""
    return link_pps * tclass.share if (tclass.share and peer_is_switch) else float(link_pps)


def derive(topo: Topology, *, rtt_s: Optional[float] = None, hop_s: float = HOP_S, flows: Optional[int] = None,
           ecn_mode: Optional[str] = None, rtt_source: str = "given (--rtt-us)", dilation: float = 1.0) -> Tuning:
    """Derive every parameter of `topo` (a loaded topology). `rtt_s`: the
    round trip to use (measured); None: the topology's longest unloaded
    host-to-host RTT. `flows`: HPCC's expected flows (default: every other
    host into one). `ecn_mode` ("step" or "wred"): without an `ecn:`
    section, write profiles of this mode on every switch port. `dilation`:
    the fabric's, when `topo` is a dilated fabric (its links' rates and the
    measured round trip are already that fabric's; the constants taken from
    the field, SONiC's 200 ms detection, are made D times longer)."""
    if ecn_mode not in (None, "step", "wred"):
        raise ValueError(f"ecn_mode must be step or wred, got {ecn_mode!r}")
    if rtt_s is not None and not rtt_s > 0:
        raise ValueError(f"the round trip must be > 0, got {rtt_s!r} s")
    if not hop_s >= 0:
        raise ValueError(f"a switch traversal must be >= 0 s, got {hop_s!r}")
    if flows is not None and flows < 1:
        raise ValueError(f"the expected flows must be >= 1, got {flows!r}")
    paths = Paths.of(topo, hop_s)
    if not (dilation >= 1.0):
        raise ValueError(f"a dilation is a number >= 1 (1: none), got {dilation!r}")
    t = Tuning(topo.name, topo.source, rtt_s if rtt_s is not None else paths.rtt_max_s, hop_s, paths,
               switch_ports={name: sorted(sw.ports) for name, sw in topo.switches.items()}, dilation=dilation)
    if rtt_s is not None:
        t.add("rtt", Derived("rtt", rtt_s * 1000, "ms", rtt_source, source="project",
                             inputs=(Input("unloaded, the topology's longest", paths.rtt_max_s * 1000, "ms"),)))
    else:
        t.add("rtt", Derived("rtt", paths.rtt_max_s * 1000, "ms",
                             "max over host pairs of 2 (cable delays one way) + 2 (switches on the path) t_hop",
                             (Input("switches on that path", paths.switches_max),
                              Input("cable delays one way", paths.delay_max_s * 1000, "ms"),
                              Input("t_hop", hop_s * 1000, "ms"),
                              Input("shortest host pair's", paths.rtt_min_s * 1000, "ms")), source="project"))
    config: Optional[LosslessConfig] = topo.features.get(LOSSLESS)
    # ECN is planned first (XOFF sits above where marking starts) and capped last (by the queues' depth,
    # which the lossless thresholds set).
    plan = _ecn_plan(t, topo, config, ecn_mode)
    depth: dict[str, int] = {}
    if not (config and config.lossless):
        t.note(LOSSLESS, "no lossless class in this topology (no `lossless:` section, or none of its classes is "
                         "lossless): no headroom, XON, XOFF or watchdog derived")
    else:
        depth = _pfc(t, topo, config, plan.starts)
    _ecn(t, plan, depth)
    _congestion_controls(t, topo, flows)
    return t


def _pfc(t: Tuning, topo: Topology, config: LosslessConfig, marking_start: dict[str, int]) -> dict[str, int]:
    """The lossless section's headroom, XON and XOFF per (ingress port,
    class), the section's values, and the watchdog; returns each switch's
    lossless queue depth (features/lossless.py queue_plan)."""
    groups: dict[tuple[str, float, float, Optional[int]], list[tuple[str, int]]] = {}
    for sw in topo.switches.values():
        for p in sw.ports.values():
            for c in config.lossless:
                rate = _class_rate(queue_rate_pps(p.link.bandwidth_mbps), c, p.peer in topo.switches)
                groups.setdefault((c.name, rate, p.link.delay_ms / 1000, marking_start.get(sw.name)),
                                  []).append((sw.name, p.number))
    headroom = xon = xoff = 0
    rates = []
    cells: list[tuple[str, list[tuple[str, int]], int, int, int]] = []     # (class, ports, xoff, xon, headroom)
    for (name, rate, delay, start), ports in groups.items():
        where = f"{port_list(ports)} class {name}"
        rates.append(rate)
        inputs = (Input("d", delay * 1000, "ms"), Input("r", rate, "packets/s"), Input("t_hop", t.hop_s * 1000, "ms"))
        h = ceil(headroom_packets(rate, delay, t.hop_s))
        t.add(LOSSLESS, Derived("lossless.pfc.headroom", h, "packets", "ceil(2 d r + 2 + 2 t_hop r): the cable both "
                                "ways, a frame at each end, both ends' response", inputs, where, "cisco-pfc"))
        x = xon_packets(rate, delay, t.hop_s)
        t.add(LOSSLESS, Derived("lossless.pfc.xon", x, "packets", "ceil(r (2 d + 2 t_hop)) + 1: what drains before "
                                "the upstream's packets arrive again, and the one left below XON", inputs, where, "project"))
        off = xoff_packets(x, start)
        t.add(LOSSLESS, Derived("lossless.pfc.xoff", off, "packets",
                                "max(xon + 2, ECN's marking start + 1): hysteresis, and ECN before PFC",
                                (Input("xon", x, "packets"), Input("hysteresis", HYSTERESIS, "packets"),
                                 *((Input("marking starts at", start, "packets"),) if start is not None else ())),
                                where, "hpcc-ns3"))
        headroom, xon, xoff = max(headroom, h), max(xon, x), max(xoff, off)
        cells.append((name, ports, off, x, h))
    for key, value in (("headroom", headroom), ("xon", xon), ("xoff", xoff)):
        t.add(LOSSLESS, Derived(f"lossless.pfc.{key}", value, "packets",
                                "max over ports and classes: every cell's that has no values of its own",
                                where="section", source="project", carried_by=f"overlay: lossless.pfc.{key}"))
    t.pfc = {"xoff": xoff, "xon": xon, "headroom": headroom, "pause_quanta": config.pfc.pause_quanta}
    # The cells whose values are not the section's get their own (lossless.pfc_ports: pfc_port_thresholds)
    own = [(name, ports, off, x, h) for name, ports, off, x, h in cells if (off, x, h) != (xoff, xon, headroom)]
    t.pfc_ports = [{"switch": sw, "from": topo.switches[sw].ports[port].peer, "class": name,
                    "xoff": off, "xon": x, "headroom": h}
                   for name, ports, off, x, h in own for sw, port in ports]
    if own:
        t.note(LOSSLESS, f"{len(t.pfc_ports)} (port, class) cells have values of their own "
                         f"(carried by the overlay's lossless.pfc_ports): "
                         + "; ".join(f"{port_list(ports)} class {name}: xoff {off}, xon {x}, headroom {h}"
                                     for name, ports, off, x, h in own))
    fastest = max(rates)
    t.hold_rate_pps = ceil(fastest)
    t.add(LOSSLESS, Derived("lossless.hold_rate_pps", t.hold_rate_pps, "packets/s",
                            "the fastest lossless port's rate: a class held during a pause leaves at its link's "
                            "rate once resumed, not at the hold loop's (each port's hold queue runs at "
                            "min(hold_rate_pps, its link))",
                            (Input("r_max", fastest, "packets/s"), Input("the section's", config.hold_rate_pps,
                                                                         "packets/s")),
                            where="section", source="project", carried_by="overlay: lossless.hold_rate_pps"))
    section = replace(config, pfc=replace(config.pfc, xoff=xoff, xon=xon, headroom=headroom))
    by_cell: dict[str, dict[tuple[int, int], PfcThresholds]] = {}      # switch -> (port, class) -> its values
    for name, ports, off, x, h in cells:
        for switch, port in ports:
            by_cell.setdefault(switch, {})[(port, config.by_name(name).tclass)] = PfcThresholds(off, x, h)
    depth = {name: lossless_queue_depth(section, s.ports, by_cell.get(name)) for name, s in topo.switches.items()}
    t.note(LOSSLESS, "the lossless queues' depth follows (features/lossless.py queue_plan: the sum over ports of "
                     f"xoff + headroom, at least 64): {', '.join(sorted({fmt(v) for v in depth.values()}, key=int))} "
                     "packets")
    # The watchdog: detection beyond the longest healthy pause; restoration beyond a storming peer's pause.
    slowest = min(rates)
    pause_ms = max(pause_us(config.pfc.pause_quanta, link.bandwidth_mbps) for link in topo.links) / 1000
    longest_link = max(link.delay_ms for link in topo.links) / 1000
    healthy = healthy_pause_s(xoff, headroom, xon, slowest, t.paths.switches_max, t.hop_s, longest_link)
    sonic_ms = SONIC_DETECT_MS * t.dilation
    detect = max(sonic_ms, STORM_MARGIN * healthy * 1000)
    restore = max(2 * detect, pause_ms)
    wd = config.watchdog
    carried_wd = "overlay: lossless.watchdog.{}" if wd else \
        "the topology's watchdog is off: the overlay leaves it off (lossless.watchdog switches it on)"
    t.add("watchdog", Derived("lossless.watchdog.detect_ms", detect, "ms",
                              "max(200 ms x D, 2 x hops x ((xoff + headroom - xon + 1) / r_min + 2 t_hop + 2 d)): "
                              "SONiC's default (at the fabric's dilation D), or twice the longest healthy pause",
                              (Input("SONiC's default x D", sonic_ms, "ms"), Input("hops", t.paths.switches_max), Input("xoff", xoff), Input("headroom", headroom),
                               Input("xon", xon), Input("r_min", slowest, "packets/s"),
                               Input("t_hop", t.hop_s * 1000, "ms"), Input("d (longest link)", longest_link * 1000,
                                                                           "ms"),
                               Input("healthy pause", healthy * 1000, "ms")),
                              source="sonic-pfcwd", carried_by=carried_wd.format("detect_ms")))
    t.add("watchdog", Derived("lossless.watchdog.restore_ms", restore, "ms",
                              "max(2 detect_ms, pause_quanta x 512 bit times of the slowest link): the section's "
                              "default 2x, and no restoring between a storming peer's pauses",
                              (Input("detect_ms", detect, "ms"), Input("pause_quanta", config.pfc.pause_quanta),
                               Input("longest pause", pause_ms, "ms")),
                              source="sonic-pfcwd", carried_by=carried_wd.format("restore_ms")))
    if wd:
        t.watchdog = {"detect_ms": _number(detect), "restore_ms": _number(restore)}
    else:
        t.note("watchdog", "the topology's lossless section has no watchdog: derived, not written")
    return depth


def _number(value: float) -> float | int:
    """A value for a YAML file: whole numbers as integers, others to the microsecond's precision."""
    return int(value) if float(value).is_integer() else round(value, 3)


def _queue_of(config: Optional[LosslessConfig], queue: Optional[int]) -> Optional[TrafficClass]:
    if config is None or queue is None:
        return None
    return next((c for c in config.classes if c.queue == queue), None)


@dataclass(frozen=True)
class _EcnGroup:
    """Egress ports (and a queue) whose profile has the same inputs."""
    queue: Optional[int]
    mode: str                 # "step", "wred", or "" (derived, not written)
    rate: float               # the queue's service rate, packets/s
    lossless: bool            # a lossless class's queue (its depth follows the thresholds)
    tclass: Optional[str]
    ports: tuple[tuple[str, int], ...]


@dataclass(frozen=True)
class _EcnPlan:
    groups: tuple[_EcnGroup, ...]
    write: bool
    starts: dict[str, int]    # switch -> the highest depth where its marking starts (uncapped)
    fan_in: dict[str, int]    # switch -> its ports' fan-in: where marking starts at the lowest


def _ecn_plan(t: Tuning, topo: Topology, config: Optional[LosslessConfig], mode: Optional[str]) -> _EcnPlan:
    """Which egress ports (and queues) get a profile: the `ecn:` section's,
    in its modes; without one, every switch port (each lossless class's
    queue, if there are any), in `mode`, written only if a mode is given."""
    given: dict[tuple[str, int, Optional[int]], EcnProfile] = topo.features.get(ECN) or {}
    if given:
        keys = {k: p.mode for k, p in given.items()}
        write = True
    else:
        queues: list[Optional[int]] = [None]
        if config and config.lossless:
            queues = [*sorted({c.queue for c in config.lossless})]
        keys = {(sw, p, q): mode or "" for sw, s in topo.switches.items() for p in s.ports for q in queues}
        write = mode is not None
        t.note(ECN, "no `ecn:` section in this topology: " + (
            f"{mode} profiles derived for every switch port and written (--ecn {mode})" if write else
            "thresholds derived for every switch port, not written (--ecn step|wred writes them)"))
    by: dict[tuple[Optional[int], str, float, bool, Optional[str]], list[tuple[str, int]]] = {}
    for (sw, port, queue), kind in keys.items():
        pps = queue_rate_pps(topo.switches[sw].ports[port].link.bandwidth_mbps)
        tclass = _queue_of(config, queue)
        rate = pps * tclass.share if tclass and tclass.share else float(pps)
        by.setdefault((queue, kind, rate, bool(tclass and tclass.lossless), tclass.name if tclass else None),
                      []).append((sw, port))
    groups = tuple(_EcnGroup(q, kind, rate, lossless, name, tuple(ports))
                   for (q, kind, rate, lossless, name), ports in by.items())
    fans = {sw: fan_in(topo, sw) for sw in topo.switches}
    starts: dict[str, int] = {}
    if write:
        for g in groups:
            first = dctcp_k(g.rate, t.rtt_s) if g.mode == "step" else \
                max(1, ceil(dcqcn_threshold(DCQCN_KMIN_BYTES, g.rate, t.rtt_s)))
            for sw, _ in g.ports:
                starts[sw] = max(starts.get(sw, 0), first, fans[sw])
    return _EcnPlan(groups, write, starts, fans)


def _ecn(t: Tuning, plan: _EcnPlan, lossless_depth: Mapping[str, int]) -> None:
    """The profiles, each capped below its queue's depth: a lossless class's
    queue is as deep as its switch's thresholds make it; others hold BMv2's 64."""
    items: list[dict[str, Any]] = []
    rtt = t.rtt_s
    for g in sorted(plan.groups, key=lambda g: g.ports[0]):
        bdp = g.rate * rtt
        k_raw = dctcp_k(g.rate, rtt)
        kmin_scaled = max(1, ceil(dcqcn_threshold(DCQCN_KMIN_BYTES, g.rate, rtt)))
        kmax_raw = max(2, ceil(dcqcn_threshold(DCQCN_KMAX_BYTES, g.rate, rtt)))
        start = min(k_raw, kmin_scaled)
        for (depth, fans), ports in _by_depth_and_fan_in(g, lossless_depth, plan.fan_in, start).items():
            where = port_list(ports) + (f" queue {g.queue} (class {g.tclass})" if g.queue is not None else "")
            base = (Input("r", g.rate, "packets/s"), Input("RTT", rtt * 1000, "ms"),
                    Input("BDP = r RTT", bdp, "packets"))
            capped = f"; capped below the queue's depth ({depth})"
            k_floor = fans > k_raw                  # the fan-in, not the BDP, says where marking starts
            kmin_floor = fans > kmin_scaled
            fan = (Input("fan-in", fans, "ports"),)
            k_uncapped = max(k_raw, fans)
            k = min(k_uncapped, depth - 1)
            kmax = min(kmax_raw, depth - 1)
            kmin_raw = max(kmin_scaled, fans)
            kmin = min(kmin_raw, kmax - 1)
            k_formula = ("the port's fan-in, above ceil(BDP / 7) = " + str(k_raw) +
                         ": packets from each other port arriving together queue fan-in - 1 deep, no overload"
                         if k_floor else "max(1, ceil(BDP / 7))")
            kmin_formula = ("the port's fan-in, above the scaled Kmin " + str(kmin_scaled) +
                            " (0.1 BDP): packets from each other port arriving together queue fan-in - 1 deep"
                            if kmin_floor else "max(1, ceil(Kmin_ref / (C_ref RTT_ref) x BDP)), 0.1 BDP")
            written = plan.write and g.mode != ""
            if g.mode in ("step", ""):
                t.add(ECN, Derived("ecn.k", k, "packets", k_formula + (capped if k < k_uncapped else ""),
                                   base + (fan if k_floor else ()), where, "dctcp",
                                   "overlay: ecn[].k (mode step)" if written else ""))
            if g.mode in ("wred", ""):
                ref = (Input("C_ref", DCQCN_RATE_BPS / 1e9, "Gbit/s"), Input("RTT_ref", DCQCN_RTT_S * 1e6, "us"))
                t.add(ECN, Derived("ecn.kmin", kmin, "packets",
                                   kmin_formula + (f"; capped below Kmax ({kmax})" if kmin < kmin_raw else ""),
                                   (*base, Input("Kmin_ref", DCQCN_KMIN_BYTES / 1000, "KB"), *ref,
                                    *(fan if kmin_floor else ())), where, "dcqcn",
                                   "overlay: ecn[].kmin (mode wred)" if written else ""))
                t.add(ECN, Derived("ecn.kmax", kmax, "packets",
                                   "ceil(Kmax_ref / (C_ref RTT_ref) x BDP), 4 BDP" + (capped if kmax < kmax_raw else ""),
                                   (*base, Input("Kmax_ref", DCQCN_KMAX_BYTES / 1000, "KB"), *ref), where, "dcqcn",
                                   "overlay: ecn[].kmax (mode wred)" if written else ""))
                t.add(ECN, Derived("ecn.pmax", DCQCN_PMAX, "", "Pmax_ref: a probability, not scaled", (), where,
                                   "dcqcn", "overlay: ecn[].pmax (mode wred)" if written else ""))
            if not written:
                continue
            profile: dict[str, Any] = {"mode": "step", "k": k} if g.mode == "step" else \
                {"mode": "wred", "kmin": kmin, "kmax": kmax, "pmax": DCQCN_PMAX}
            for sw, port in ports:
                items.append({"switch": sw, "port": port, **({"queue": g.queue} if g.queue is not None else {}),
                              **profile})
    if plan.write:
        t.ecn = _compact(items, t)


def _by_depth_and_fan_in(g: _EcnGroup, lossless_depth: Mapping[str, int], fans: Mapping[str, int],
              start: int) -> dict[tuple[int, int], list[tuple[str, int]]]:
    """The group's ports by their queue's depth and their fan-in where it
    binds (above `start`, where the BDP starts marking; 0 where it does not)."""
    out: dict[tuple[int, int], list[tuple[str, int]]] = {}
    for sw, port in g.ports:
        depth = lossless_depth.get(sw, BMV2_QUEUE_DEPTH) if g.lossless else BMV2_QUEUE_DEPTH
        out.setdefault((depth, fans[sw] if fans[sw] > start else 0), []).append((sw, port))
    return out


def _compact(items: list[dict[str, Any]], t: Tuning) -> list[dict[str, Any]]:
    """ECN items, a switch's ports merged into `port: all` where every port
    of it has the same profile for a queue."""
    ports_of = t.switch_ports
    out: list[dict[str, Any]] = []
    by: dict[tuple, list[dict[str, Any]]] = {}
    for item in items:
        rest = tuple(sorted((k, v) for k, v in item.items() if k not in ("switch", "port")))
        by.setdefault((item["switch"], rest), []).append(item)
    for sw in ports_of:
        for (s, rest), group in by.items():
            if s != sw:
                continue
            if sorted(i["port"] for i in group) == ports_of[sw]:
                out.append({"switch": sw, "port": "all", **dict(rest)})
            else:
                out += sorted(group, key=lambda i: i["port"])
    return [_ordered(i) for i in out]


def _ordered(item: dict[str, Any]) -> dict[str, Any]:
    order = ("switch", "port", "queue", "mode", "k", "kmin", "kmax", "pmax")
    return {k: item[k] for k in order if k in item}


def _congestion_controls(t: Tuning, topo: Topology, flows: Optional[int]) -> None:
    rtt = t.rtt_s
    line = sorted({queue_rate_pps(topo.access_link(n).bandwidth_mbps) for n in topo.nics}) or [
        queue_rate_pps(min(link.bandwidth_mbps for link in topo.links))]
    slowest = min(queue_rate_pps(link.bandwidth_mbps) for link in topo.links)
    rtt_in = Input("RTT", rtt * 1000, "ms")
    # DCQCN: every time constant x s, rates and bytes at the NIC's line rate.
    s = dcqcn_time_scale(rtt)
    t.add("dcqcn", Derived("dcqcn.time_scale", s, "", "RTT / RTT_ref, RTT_ref = N - Kmax / C = 10 us",
                           (rtt_in, Input("N", DCQCN_N_S * 1e6, "us"), Input("Kmax", DCQCN_KMAX_BYTES / 1000, "KB"),
                            Input("C", DCQCN_RATE_BPS / 1e9, "Gbit/s")), source="dcqcn"))
    for name, ref, unit_ref in (("cnp_interval_s", DCQCN_N_S, "N"), ("alpha_timer_s", DCQCN_T_S, "K"),
                                ("rate_timer_s", DCQCN_T_S, "T")):
        t.carry("dcqcn", Derived(f"dcqcn.{name}", ref * s, "s", f"{unit_ref}_ref x s",
                                 (Input(f"{unit_ref}_ref", ref * 1e6, "us"), Input("s", s)), source="dcqcn",
                                 carried_by=dcqcn_carried(name)))
    for pps in line:
        where = f"NIC line rate {pps} packets/s"
        c_bps = pps * PACKET_BYTES * 8
        t.carry("dcqcn", Derived("dcqcn.byte_counter_bytes", round(DCQCN_B_BYTES * c_bps / DCQCN_RATE_BPS * s),
                                 "bytes", "B_ref x (C / C_ref) x s: as many bytes per timer period as the paper's",
                                 (Input("B_ref", DCQCN_B_BYTES / 1e6, "MB"), Input("C", c_bps / 1e6, "Mbit/s"),
                                  Input("s", s)), where, "dcqcn",
                                 dcqcn_carried("byte_counter_bytes", pps)), line_rate_pps=pps)
        t.carry("dcqcn", Derived("dcqcn.r_ai_pps", DCQCN_R_AI_BPS / DCQCN_RATE_BPS * pps, "packets/s",
                                 "R_AI_ref / C_ref x line rate: the same share of the line per step",
                                 (Input("R_AI_ref", DCQCN_R_AI_BPS / 1e6, "Mbit/s"),
                                  Input("line rate", pps, "packets/s")), where, "dcqcn",
                                 dcqcn_carried("r_ai_pps", pps)), line_rate_pps=pps)
    # HPCC
    n = flows if flows is not None else max(1, len(topo.hosts) - 1)
    t.carry("hpcc", Derived("hpcc.base_rtt_s", rtt, "s", "T = the longest base RTT (HPCC's ns-3 GLOBAL_T)",
                            (rtt_in,), source="hpcc-ns3", carried_by=carried("hpcc", "base_rtt_s")))
    t.carry("hpcc", Derived("hpcc.eta", HPCC_ETA, "", "the paper's target utilisation", source="hpcc",
                            carried_by=carried("hpcc", "eta")))
    t.carry("hpcc", Derived("hpcc.max_stage", HPCC_MAX_STAGE, "", "the paper's", source="hpcc",
                            carried_by=carried("hpcc", "max_stage")))
    t.carry("hpcc", Derived("hpcc.expected_flows", n, "", "N = hosts - 1 (every other host into one)"
                            if flows is None else "given (--flows)", (Input("hosts", len(topo.hosts)),),
                            source="hpcc", carried_by=carried("hpcc", "expected_flows")))
    for pps in line:
        where = f"NIC line rate {pps} packets/s"
        w_init = pps * rtt
        t.add("hpcc", Derived("hpcc.w_init", w_init, "packets", "line rate x T (one BDP)",
                              (Input("line rate", pps, "packets/s"), rtt_in), where, "hpcc",
                              "follows from the agent's line_rate_pps (--line-rate-pps) and base_rtt_s: "
                              "not in the overlay"))
        t.add("hpcc", Derived("hpcc.w_ai", hpcc_w_ai(w_init, n), "packets", "W_init (1 - eta) / N",
                              (Input("W_init", w_init, "packets"), Input("eta", HPCC_ETA), Input("N", n)), where,
                              "hpcc", "follows from W_init, eta and expected_flows: not in the overlay"))
    # TIMELY
    slow_in = Input("r_min", slowest, "packets/s")
    t.carry("timely", Derived("timely.min_rtt_s", rtt, "s", "the unloaded RTT (the gradient's scale)", (rtt_in,),
                              source="timely", carried_by=carried("timely", "min_rtt_s")))
    t.carry("timely", Derived("timely.t_low_s", rtt + 1 / slowest, "s",
                              "RTT + 1 / r_min: just above the unloaded RTT, one packet queued at the slowest link",
                              (rtt_in, slow_in), source="timely", carried_by=carried("timely", "t_low_s")))
    t.carry("timely", Derived("timely.t_high_s", rtt + BMV2_QUEUE_DEPTH / 2 / slowest, "s",
                              "RTT + (depth / 2) / r_min: the unloaded RTT and half a full bottleneck queue",
                              (rtt_in, slow_in, Input("depth", BMV2_QUEUE_DEPTH, "packets")), source="timely",
                              carried_by=carried("timely", "t_high_s")))
    # Swift
    hops = t.paths.switches_max
    per_hop = 2 * t.hop_s + 2 * _longest_switch_link_delay(topo)
    base = max(1 / slowest, rtt - hops * per_hop + 1 / slowest)
    t.carry("swift", Derived("swift.hops", hops, "", "switches on the longest host path (the agent reads no TTL)",
                             source="swift", carried_by=carried("swift", "hops")))
    t.carry("swift", Derived("swift.per_hop_s", per_hop, "s",
                             "2 t_hop + 2 d_link: what one more switch adds to an unloaded RTT",
                             (Input("t_hop", t.hop_s * 1000, "ms"),
                              Input("d_link", _longest_switch_link_delay(topo) * 1000, "ms")),
                             source="swift", carried_by=carried("swift", "per_hop_s")))
    t.carry("swift", Derived("swift.base_target_s", base, "s",
                             "RTT - hops x per_hop + 1 / r_min: the target is the RTT plus one packet at the slowest "
                             "link", (rtt_in, Input("hops", hops), Input("per_hop", per_hop * 1000, "ms"), slow_in),
                             source="swift", carried_by=carried("swift", "base_target_s")))
    # NSCC and RCCC (UET's): the base RTT is the delay's zero and sizes the BDP the windows and credit follow
    for cc, role in (("nscc", "queueing delay = RTT - it; the window's BDP"), ("rccc", "the initial credit's BDP")):
        t.carry(cc, Derived(f"{cc}.base_rtt_s", rtt, "s", f"the unloaded RTT ({role})", (rtt_in,),
                            source=cc, carried_by=carried(cc, "base_rtt_s")))
    target = max(NSCC_TARGET_SHARE_TRIMMING * rtt, 1 / slowest)
    t.carry("nscc", Derived("nscc.target_qdelay_s", target, "s",
                            "max(0.75 x RTT, 1 / r_min): the UEC model's target with trimming, at least one packet "
                            "at the slowest link", (rtt_in, slow_in), source="nscc",
                            carried_by=carried("nscc", "target_qdelay_s")))
    for pps in line:
        where = f"NIC line rate {pps} packets/s"
        bdp = pps * rtt
        t.add("nscc", Derived("nscc.max_cwnd", 1.5 * bdp, "packets", "1.5 x BDP, BDP = line rate x RTT",
                              (Input("line rate", pps, "packets/s"), rtt_in), where, "nscc",
                              "follows from the agent's line_rate_pps (--line-rate-pps) and base_rtt_s: "
                              "not in the overlay"))
        t.add("rccc", Derived("rccc.initial_credit_packets", bdp, "packets", "BDP = line rate x RTT",
                              (Input("line rate", pps, "packets/s"), rtt_in), where, "rccc",
                              "follows from the agent's line_rate_pps (--line-rate-pps) and base_rtt_s: "
                              "not in the overlay"))


def _longest_switch_link_delay(topo: Topology) -> float:
    return max((link.delay_ms / 1000 for link in topo.links if link.a in topo.switches and link.b in topo.switches),
               default=0.0)


# -- the overlay ------------------------------------------------------------------------------------------

def overlay(t: Tuning, raw: Mapping[str, Any], dilation: float = 1.0) -> dict[str, Any]:
    """The sections a topology file has, with the derived values: its
    `lossless:` section (from `raw`, the topology's own mapping) with `pfc`
    (and `watchdog`, when it has one) derived, the `ecn:` items, and the
    congestion controls' constants (congestion_control_section). Empty when
    nothing is written. `dilation`: the dilation of the fabric `t` was
    derived on (its values are that fabric's)."""
    out: dict[str, Any] = {}
    if t.pfc is not None and raw.get(LOSSLESS) is not None:
        section = copy.deepcopy(dict(raw[LOSSLESS]))
        section["pfc"] = dict(t.pfc)
        section.pop("pfc_ports", None)
        if t.pfc_ports:
            section["pfc_ports"] = [dict(p) for p in t.pfc_ports]
        if t.hold_rate_pps is not None:
            section["hold_rate_pps"] = t.hold_rate_pps
        if t.watchdog is not None:
            section["watchdog"] = {**(section.get("watchdog") or {}), **t.watchdog}
        out[LOSSLESS] = section
    if t.ecn:
        out[ECN] = t.ecn
    if t.cc:
        out[CONGESTION_CONTROL] = congestion_control_section(t, dilation)
    return out


def congestion_control_section(t: Tuning, dilation: float = 1.0) -> dict[str, Any]:
    """The `congestion_control:` section (features/congestion_control.py):
    the dilation the values are in, then per congestion control the fields
    derived, those per NIC line rate as `at_line_rate` entries keyed by
    their line_rate_pps."""
    section: dict[str, Any] = {"dilation": int(dilation) if float(dilation).is_integer() else dilation}
    for cc, values in t.cc.items():
        section[cc] = {k: _written(v) for k, v in values.items()}
        at = t.cc_at_line_rate.get(cc)
        if at:
            section[cc][AT_LINE_RATE] = [{LINE_RATE: rate, **{k: _written(v) for k, v in fields.items()}}
                                         for rate, fields in sorted(at.items())]
    return section


def _written(value: float) -> float:
    """A constant as the overlay holds it: an integer whole, a float to 6
    significant digits (0.018, not 0.018000000000000002)."""
    return value if isinstance(value, int) else float(f"{value:.6g}")


def report(t: Tuning) -> list[str]:
    """`fabric tune`'s lines: assumptions, then every derived value by section."""
    lines = [f"fabric tune: {t.source} ({t.topology})",
             f"assumed: a packet is {PACKET_BYTES} B (emulator/network.py: the queue rates assume MTU-sized packets; "
             f"the topology has no MTU field); the buffer model and BMv2's queues count packets",
             f"assumed: a BMv2 switch traversal takes t_hop = {fmt(t.hop_s * 1000)} ms, real time "
             f"(docs/rdma.md's unloaded 3.6 ms over six traversals; --hop-us); rates are the links' emulated ones"]
    titles = {"rtt": "round trip", LOSSLESS: "lossless (PFC; packets of one ingress port in a class)",
              "watchdog": "PFC watchdog", ECN: "ECN (packets in the egress queue)",
              "dcqcn": "DCQCN", "hpcc": "HPCC", "timely": "TIMELY", "swift": "Swift", "nscc": "NSCC (UET)",
              "rccc": "RCCC (UET)"}
    for key, title in titles.items():
        if key not in t.sections and key not in t.notes:
            continue
        lines += ["", f"{title}:"]
        lines += [f"  note: {n}" for n in t.notes.get(key, [])]
        for d in t.sections.get(key, []):
            lines.append("  " + d.line() + (f" [{d.source}]" if d.source else ""))
            if d.carried_by:
                lines.append(f"      carried by: {d.carried_by}")
    return lines
