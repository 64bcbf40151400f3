"""Control-plane side of p4src/include/lossless.p4: traffic classes, PFC and
the PFC watchdog (docs/features/lossless.md).

In a topology file (validated with the rest of it, before anything starts):

    lossless:
      queues: 8                    # BMv2 priority queues per port; the top one holds paused packets
      classes:
        - {name: collective, class: 3, dscp: [26], pcp: [3], lossless: true}
        - {name: storage, class: 1, dscp: [10, 12], share: 0.4}
        - {name: bounced, class: 4, dscp: [34], lossless: true}
      pfc: {xoff: 24, xon: 12, headroom: 32, pause_quanta: 65535}
      watchdog: {detect_ms: 200, restore_ms: 400, action: drop}
      hold_rate_pps: 2000
      class_changes:               # Tagger: off the expected routes, another lossless class
        - {switch: leaf1, from: spine1, to: spine2, class: collective, becomes: bounced}   # a bounce

A class maps its DSCPs to priority queue `queue` (default: its class number;
higher is served first; DSCPs of no class go to queue 0, as do BMv2's
clones: PFC frames and telemetry reports). `pcp` lists 802.1Q priorities
whose tagged frames the class takes: the first switch gives such a frame
the class's first DSCP and ends the tag (the fabric is routed), so the class
travels on in the DSCP. A lossless class's PCP is its PFC priority, which
is its class number (a host pauses priority p for the frames it tags p). `share` caps the class's queue
at that fraction of the link's packet rate (BMv2 limits each queue on its
own: there is no port-wide shaper, so shares are caps, not weights).
Lossless classes get PFC on every port of every switch: xoff/xon/headroom
count packets one ingress port has in the switch in that class; pauses last
pause_quanta quanta of 512 bit times of the link they cross, refreshed at
half that while above XOFF. The watchdog (off when absent) acts on a
(port, class) paused with nothing sent for detect_ms. A class change moves
the packets of a lossless class that `switch` receives from neighbour
`from` and sends to neighbour `to` into the lossless class `becomes` (its
queue there, its DSCP downstream), so that lossless queues cannot wait on
each other in a cycle (docs/features/lossless.md, deadlock). `from: up,
to: up` names every neighbour in a higher tier, `from: global` every
neighbour switch in another group (a Dragonfly's global links), `to: any`
every neighbour, and `switch: all` every switch: `{switch: all, from: up,
to: up, ...}` is Tagger's rule for a Clos, a bounce (down, then up again)
moves a packet to the next class; `{switch: all, from: global, to: any,
...}`, one rule a class, moves a packet to the next class after each global
hop of a Dragonfly.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Mapping, Optional

from control.feature import CounterMetric, Fail, FeatureSpec, Pieces, QueuePlan, QueueSetting, check_mapping, one_mode, \
    section_items
from emulator.bmv2_thrift import Bmv2Thrift
from emulator.network import apply_queue_settings, queue_rate_pps
from control.p4constants import constants
from control.p4info import EntryError, P4Info
from control.sync import SwitchState
from features.ecn import QDEPTH_MAX
from wire.lossless import CLASSES, MAX_PAUSE_QUANTA, pause_us, quantum_us

from p4.v1 import p4runtime_pb2

SECTION = "lossless"
SWITCH_TABLE = "lossless_switch"   # keyless: its default action says whether the switch has classes
CLASS_TABLE = "traffic_class"
PORT_TABLE = "pfc_port"
SOURCE_TABLE = "pfc_source"
CHANGE_TABLE = "class_change"
THRESHOLDS_TABLE = "pfc_port_thresholds"   # an (ingress port, class) cell's own XOFF, XON, headroom
PCP_TABLE = "pcp_to_dscp"
STORM_ACTIONS = {"drop": constants()["PFC_STORM_DROP"], "forward": constants()["PFC_STORM_FORWARD"],
                 "alert": constants()["PFC_STORM_ALERT"]}
SESSION_BASE = constants()["PFC_SESSION_BASE"]
HOLD_QUEUE_DEPTH = 1024          # packets a port can hold while paused (all its lossless classes)
FIELDS = {"queues", "classes", "pfc", "watchdog", "hold_rate_pps", "class_changes", "pfc_ports"}
CHANGE_FIELDS = {"switch", "from", "to", "class", "becomes"}
UP = "up"                        # class_changes: any neighbour in a higher tier (control.topology.Topology.tiers)
GLOBAL = "global"                # class_changes `from`: any neighbour switch in another group (a Dragonfly's global link)
ANY = "any"                      # class_changes `to`: any neighbour
FROM_KEYWORDS, TO_KEYWORDS = (UP, GLOBAL), (UP, ANY)
CLASS_FIELDS = {"name", "class", "queue", "dscp", "pcp", "lossless", "share"}
PFC_FIELDS = {"xoff", "xon", "headroom", "pause_quanta"}
PORT_PFC_FIELDS = {"switch", "from", "class", "xoff", "xon", "headroom"}
WATCHDOG_FIELDS = {"detect_ms", "restore_ms", "action"}

# Registers and counters (p4src/include/lossless.p4), by (port, class) cell.
OCCUPANCY_REGISTER = "pfc_occupancy"
PEAK_REGISTER = "pfc_occupancy_peak"    # the most a cell held, a refused packet included (fabric tune)
PAUSED_REGISTER = "pfc_paused_us"
COUNTERS = ("class_packets", "pfc_pause_sent", "pfc_resume_sent", "pfc_frames_received", "pfc_held",
            "pfc_storms_detected", "pfc_storms_restored", "pfc_storm_dropped", "pfc_headroom_dropped")
HEADROOM_DROPPED = "pfc_headroom_dropped"     # by ingress cell: what arrived beyond XOFF + headroom, refused


def cell(port: int, tclass: int) -> int:
    """The (port, class) cell of the P4 registers and counters: port ++ class."""
    return port << 3 | tclass


@dataclass(frozen=True)
class TrafficClass:
    name: str
    tclass: int
    queue: int
    dscp: tuple[int, ...]
    lossless: bool = False
    share: Optional[float] = None
    pcp: tuple[int, ...] = ()

    @property
    def marking(self) -> int:
        """The DSCP a packet gets when a switch puts it in this class (a PCP, a class change)."""
        return self.dscp[0]


@dataclass(frozen=True)
class PfcThresholds:
    xoff: int = 24
    xon: int = 12
    headroom: int = 32
    pause_quanta: int = MAX_PAUSE_QUANTA


@dataclass(frozen=True)
class Watchdog:
    detect_ms: float = 200.0          # SONiC's defaults (docs/features/lossless.md: time scale)
    restore_ms: float = 400.0
    action: str = "drop"


@dataclass(frozen=True)
class ClassChange:
    """Packets of lossless class `tclass` that `switch` receives from its
    neighbour `src` and sends to its neighbour `dst` leave in class `becomes`."""
    switch: str
    src: str
    dst: str
    tclass: str
    becomes: str


@dataclass(frozen=True)
class PortThresholds:
    """The XOFF, XON and headroom of the packets of lossless class `tclass`
    that `switch` receives from its neighbour `src`, in place of the
    section's `pfc` (a port whose link is faster, slower or longer than the
    others: fabric tune derives them per port)."""
    switch: str
    src: str
    tclass: str
    xoff: int
    xon: int
    headroom: int


@dataclass(frozen=True)
class LosslessConfig:
    queues: int = 8
    classes: tuple[TrafficClass, ...] = ()
    pfc: PfcThresholds = field(default_factory=PfcThresholds)
    watchdog: Optional[Watchdog] = None
    hold_rate_pps: int = 2000
    class_changes: tuple[ClassChange, ...] = ()
    pfc_ports: tuple[PortThresholds, ...] = ()

    def by_name(self, name: str) -> TrafficClass:
        return next(c for c in self.classes if c.name == name)

    @property
    def hold_queue(self) -> int:
        return self.queues - 1

    @property
    def lossless(self) -> tuple[TrafficClass, ...]:
        return tuple(c for c in self.classes if c.lossless)


def _int(raw: Mapping, key: str, where: str, fail: Fail, lo: int, hi: int, default: int) -> int:
    v = raw.get(key, default)
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        fail(f"{where}.{key}", f"expected an integer within {lo}..{hi}, got {v!r}")
    return v


def _number(raw: Mapping, key: str, where: str, fail: Fail, default: float) -> float:
    v = raw.get(key, default)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
        fail(f"{where}.{key}", f"expected a number > 0, got {v!r}")
    return float(v)


def parse_config(raw: Any, fail: Fail) -> LosslessConfig:
    """Validate a `lossless:` section (without reference to a topology)."""
    check_mapping(raw, SECTION, FIELDS, fail,
                  what="{queues, classes, pfc, watchdog, hold_rate_pps, class_changes, pfc_ports}")
    queues = _int(raw, "queues", SECTION, fail, 2, 8, 8)
    if not isinstance(raw.get("classes"), list) or not raw["classes"]:
        fail(f"{SECTION}.classes", "expected a non-empty list of {name, class, dscp, ...}")
    classes: list[TrafficClass] = []
    names: set[str] = set()
    numbers: set[int] = set()
    dscps: dict[int, str] = {}
    pcps: dict[int, str] = {}
    for i, item in enumerate(raw["classes"]):
        where = f"{SECTION}.classes[{i}]"
        check_mapping(item, where, CLASS_FIELDS, fail, what="{name, class, dscp, pcp, queue, lossless, share}")
        name = item.get("name")
        if not isinstance(name, str) or not name:
            fail(f"{where}.name", f"expected a name, got {name!r}")
        if name in names:
            fail(f"{where}.name", f"class {name!r} named twice")
        names.add(name)
        tclass = _int(item, "class", where, fail, 0, CLASSES - 1, -1)
        if tclass in numbers:
            fail(f"{where}.class", f"class number {tclass} used twice")
        numbers.add(tclass)
        queue = _int(item, "queue", where, fail, 0, queues - 2, min(tclass, queues - 2))
        raw_dscp = item.get("dscp")
        if not isinstance(raw_dscp, list) or not raw_dscp:
            fail(f"{where}.dscp", f"expected a non-empty list of DSCP values 0..63, got {raw_dscp!r}")
        for d in raw_dscp:
            if isinstance(d, bool) or not isinstance(d, int) or not 0 <= d < 64:
                fail(f"{where}.dscp", f"expected DSCP values 0..63, got {d!r}")
            if d in dscps:
                fail(f"{where}.dscp", f"DSCP {d} is already class {dscps[d]!r}'s")
            dscps[d] = name
        lossless = item.get("lossless", False)
        if not isinstance(lossless, bool):
            fail(f"{where}.lossless", f"expected true or false, got {lossless!r}")
        share = item.get("share")
        if share is not None and (isinstance(share, bool) or not isinstance(share, (int, float))
                                  or not 0 < share <= 1):
            fail(f"{where}.share", f"expected a fraction of the link within (0, 1], got {share!r}")
        raw_pcp = item.get("pcp", [])
        if not isinstance(raw_pcp, list):
            fail(f"{where}.pcp", f"expected a list of 802.1Q priorities 0..7, got {raw_pcp!r}")
        for pcp in raw_pcp:
            if isinstance(pcp, bool) or not isinstance(pcp, int) or not 0 <= pcp < CLASSES:
                fail(f"{where}.pcp", f"expected 802.1Q priorities 0..7, got {pcp!r}")
            if pcp in pcps:
                fail(f"{where}.pcp", f"PCP {pcp} is already class {pcps[pcp]!r}'s")
            if lossless and pcp != tclass:
                fail(f"{where}.pcp", f"a lossless class's PCP is its PFC priority, its class number {tclass} "
                                     f"(a host pauses the priority it tags), got {pcp}")
            pcps[pcp] = name
        classes.append(TrafficClass(name, tclass, queue, tuple(raw_dscp), lossless,
                                    None if share is None else float(share), tuple(raw_pcp)))
    pfc_raw = raw.get("pfc", {})
    check_mapping(pfc_raw, f"{SECTION}.pfc", PFC_FIELDS, fail, what="{xoff, xon, headroom, pause_quanta}")
    d = PfcThresholds()
    xoff = _int(pfc_raw, "xoff", f"{SECTION}.pfc", fail, 1, QDEPTH_MAX, d.xoff)
    xon = _int(pfc_raw, "xon", f"{SECTION}.pfc", fail, 0, QDEPTH_MAX, d.xon)
    if xon >= xoff:
        fail(f"{SECTION}.pfc.xon", f"xon ({xon}) must be below xoff ({xoff})")
    pfc = PfcThresholds(xoff, xon, _int(pfc_raw, "headroom", f"{SECTION}.pfc", fail, 1, QDEPTH_MAX, d.headroom),
                        _int(pfc_raw, "pause_quanta", f"{SECTION}.pfc", fail, 1, MAX_PAUSE_QUANTA, d.pause_quanta))
    watchdog = None
    if raw.get("watchdog") is not None:
        wd_raw = raw["watchdog"]
        check_mapping(wd_raw, f"{SECTION}.watchdog", WATCHDOG_FIELDS, fail, what="{detect_ms, restore_ms, action}")
        w = Watchdog()
        detect = _number(wd_raw, "detect_ms", f"{SECTION}.watchdog", fail, w.detect_ms)
        restore = _number(wd_raw, "restore_ms", f"{SECTION}.watchdog", fail, 2 * detect)
        action = wd_raw.get("action", w.action)
        if action not in STORM_ACTIONS:
            fail(f"{SECTION}.watchdog.action", f"expected one of {', '.join(STORM_ACTIONS)}, got {action!r}")
        watchdog = Watchdog(detect, restore, action)
    hold_rate = _int(raw, "hold_rate_pps", SECTION, fail, 1, 1_000_000, LosslessConfig.hold_rate_pps)
    return LosslessConfig(queues, tuple(classes), pfc, watchdog, hold_rate)


PFC_PORTS = 1 << constants()["PFC_PORT_BITS"]    # the P4 program's (port, class) cells cover ports below


def parse_section(raw: Any, topo, fail: Fail) -> LosslessConfig:
    """Validate a `lossless:` section against the topology it configures."""
    config = parse_config(raw, fail)
    for sw in topo.switches.values():
        beyond = [p for p in sw.ports if p >= PFC_PORTS]
        if beyond:
            fail(SECTION, f"the switch keeps PFC state for ports 0..{PFC_PORTS - 1}; {sw.name} has port {beyond[0]}")
    if raw.get("pfc_ports") is not None:
        config = replace(config, pfc_ports=_port_thresholds(raw["pfc_ports"], topo, config, fail))
    if raw.get("class_changes") is None:
        return config
    lossless = {c.name for c in config.lossless}
    tiers = topo.tiers()
    changes: list[ClassChange] = []
    seen: set[tuple[str, str, str, str]] = set()
    for where, item, name in section_items(raw["class_changes"], f"{SECTION}.class_changes", CHANGE_FIELDS, topo,
                                           fail, what="{switch, from, to, class, becomes}", allow_all=True):
        for key in ("class", "becomes"):
            if item.get(key) not in lossless:
                fail(f"{where}.{key}", f"expected a lossless class ({', '.join(sorted(lossless)) or 'none'}), "
                                       f"got {item.get(key)!r}")
        if item["class"] == item["becomes"]:
            fail(f"{where}.becomes", f"the class it changes from ({item['class']!r}): a change needs another class")
        keywords = {"from": FROM_KEYWORDS, "to": TO_KEYWORDS}
        for key in ("from", "to"):
            if name == "all" and item.get(key) not in keywords[key]:
                fail(f"{where}.{key}", f"with switch: all, expected {' or '.join(map(repr, keywords[key]))}, "
                                       f"got {item.get(key)!r}")
        if item.get("from") == GLOBAL and any(sw.group is None for sw in topo.switches.values()):
            missing = next(s for s, sw in topo.switches.items() if sw.group is None)
            fail(f"{where}.from", f"{GLOBAL!r} needs a group on every switch; {missing} has none")
        for sw in (topo.switches if name == "all" else [name]):
            peers = {p.peer for p in topo.switches[sw].ports.values()}
            upper = sorted(p for p in peers if p in tiers and tiers[p] > tiers.get(sw, 0))
            other_groups = sorted(p for p in peers if p in topo.switches
                                  and topo.switches[p].group != topo.switches[sw].group)

            def ends(key: str) -> list[str]:
                if item.get(key) == UP:
                    return upper
                if key == "from" and item.get(key) == GLOBAL:
                    return other_groups
                if key == "to" and item.get(key) == ANY:
                    return sorted(peers)
                if item.get(key) not in peers:
                    fail(f"{where}.{key}", f"{sw} has no link to {item.get(key)!r} "
                                           f"(neighbours: {', '.join(sorted(peers))}, "
                                           f"or {' or '.join(map(repr, keywords[key]))})")
                return [item[key]]

            for src in ends("from"):
                for dst in ends("to"):
                    if src == dst:
                        continue
                    key4 = (sw, src, dst, item["class"])
                    if key4 in seen:
                        fail(where, f"{sw} already changes {item['class']!r} from {src} to {dst}")
                    seen.add(key4)
                    changes.append(ClassChange(sw, src, dst, item["class"], item["becomes"]))
    return replace(config, class_changes=tuple(changes))


def _port_thresholds(raw: Any, topo, config: LosslessConfig, fail: Fail) -> tuple[PortThresholds, ...]:
    """`pfc_ports`: per switch, ingress neighbour and lossless class (all of
    them without `class`), XOFF, XON and headroom of their own."""
    lossless = [c.name for c in config.lossless]
    out: list[PortThresholds] = []
    seen: set[tuple[str, str, str]] = set()
    for where, item, name in section_items(raw, f"{SECTION}.pfc_ports", PORT_PFC_FIELDS, topo, fail,
                                           what="{switch, from, class, xoff, xon, headroom}"):
        peers = sorted({p.peer for p in topo.switches[name].ports.values()})
        if item.get("from") not in peers:
            fail(f"{where}.from", f"{name} has no link from {item.get('from')!r} (neighbours: {', '.join(peers)})")
        if "class" in item and item["class"] not in lossless:
            fail(f"{where}.class", f"expected a lossless class ({', '.join(lossless) or 'none'}), got {item['class']!r}")
        for key in ("xoff", "xon", "headroom"):
            if key not in item:
                fail(f"{where}.{key}", "missing: a port's thresholds are given whole (xoff, xon, headroom)")
        xoff = _int(item, "xoff", where, fail, 1, QDEPTH_MAX, 0)
        xon = _int(item, "xon", where, fail, 0, QDEPTH_MAX, 0)
        if xon >= xoff:
            fail(f"{where}.xon", f"xon ({xon}) must be below xoff ({xoff})")
        headroom = _int(item, "headroom", where, fail, 1, QDEPTH_MAX, 0)
        for tclass in ([item["class"]] if "class" in item else lossless):
            if (name, item["from"], tclass) in seen:
                fail(where, f"{name} already has thresholds for class {tclass!r} from {item['from']}")
            seen.add((name, item["from"], tclass))
            out.append(PortThresholds(name, item["from"], tclass, xoff, xon, headroom))
    return tuple(out)


def port_thresholds(topo, switch: str, config: LosslessConfig) -> dict[tuple[int, int], PfcThresholds]:
    """`switch`'s cells with thresholds of their own: {(ingress port, class number): thresholds}."""
    ports = topo.switches[switch].ports.values()
    return {(p.number, config.by_name(t.tclass).tclass): replace(config.pfc, xoff=t.xoff, xon=t.xon,
                                                                  headroom=t.headroom)
            for t in config.pfc_ports if t.switch == switch for p in ports if p.peer == t.src}


def quantum_x1024_us(bandwidth_mbps: float) -> int:
    """A pause quantum of a link, in the unit pfc_port takes (us * 1024)."""
    return max(1, round(quantum_us(bandwidth_mbps) * 1024))


def lossless_state(p4info: P4Info, config: Optional[LosslessConfig], ports: Mapping[int, tuple[str, float]],
                   changes: Mapping[tuple[int, int, str], str] | None = None,
                   thresholds: Mapping[tuple[int, int], PfcThresholds] | None = None) -> SwitchState:
    """Entities for one switch: {port: (its MAC, its link's Mbit/s)}, its
    class changes {(in port, out port, class name): name of the class it
    becomes} and its cells' own thresholds {(in port, class number):
    thresholds} (port_thresholds). No config: every table empty."""
    state = SwitchState(managed_tables={p4info.table(t).preamble.id
                                        for t in (SWITCH_TABLE, CLASS_TABLE, PORT_TABLE, SOURCE_TABLE, CHANGE_TABLE,
                                                  PCP_TABLE, THRESHOLDS_TABLE)},
                        managed_clone_sessions={SESSION_BASE + p for p in ports})
    state.table_entries.append(p4info.default_entry(SWITCH_TABLE, "classify" if config else "NoAction"))
    if config is None:
        return state
    fastest = max((bw for _, bw in ports.values()), default=100.0)
    refresh_us = max(1, int(pause_us(config.pfc.pause_quanta, fastest) / 2))
    wd = config.watchdog
    for c in config.classes:
        for d in sorted(c.dscp):
            if c.lossless:
                action, params = "set_lossless_class", {
                    "tclass": c.tclass, "queue": c.queue, "hold_queue": config.hold_queue,
                    "xoff": config.pfc.xoff, "xon": config.pfc.xon, "headroom": config.pfc.headroom,
                    "pause_quanta": config.pfc.pause_quanta, "refresh_us": refresh_us,
                    "detect_us": int(wd.detect_ms * 1000) if wd else 0,
                    "restore_us": int(wd.restore_ms * 1000) if wd else 0,
                    "storm_action": STORM_ACTIONS[wd.action] if wd else 0}
            else:
                action, params = "set_class", {"tclass": c.tclass, "queue": c.queue}
            state.table_entries.append(p4info.table_entry(CLASS_TABLE, {"hdr.ipv4.dscp": d}, action=action,
                                                          params=params))
        for pcp in sorted(c.pcp):
            state.table_entries.append(p4info.table_entry(PCP_TABLE, {"hdr.vlan.pcp": pcp}, action="remark",
                                                          params={"dscp": c.marking}))
    if config.lossless:
        for port, (mac, bw) in sorted(ports.items()):
            state.table_entries.append(p4info.table_entry(PORT_TABLE, {"std_meta.ingress_port": port},
                                                          action="honour",
                                                          params={"quantum_x1024_us": quantum_x1024_us(bw)}))
            state.table_entries.append(p4info.table_entry(SOURCE_TABLE, {"std_meta.egress_port": port},
                                                          action="pfc_frame", params={"port_mac": mac}))
            state.clone_sessions.append(p4runtime_pb2.CloneSessionEntry(
                session_id=SESSION_BASE + port, replicas=[p4runtime_pb2.Replica(egress_port=port, instance=0)]))
    for (in_port, out_port, name), becomes in sorted((changes or {}).items()):
        new = config.by_name(becomes)
        state.table_entries.append(p4info.table_entry(
            CHANGE_TABLE, {"meta.tc.in_port": in_port, "std_meta.egress_spec": out_port,
                           "meta.tc.tclass": config.by_name(name).tclass},
            action="change_class", params={"out_class": new.tclass, "queue": new.queue, "dscp": new.marking}))
    for (in_port, tclass), t in sorted((thresholds or {}).items()):
        state.table_entries.append(p4info.table_entry(
            THRESHOLDS_TABLE, {"meta.tc.in_port": in_port, "meta.tc.tclass": tclass}, action="set_port_thresholds",
            params={"xoff": t.xoff, "xon": t.xon, "headroom": t.headroom}))
    return state


def _ports(topo, switch: str) -> dict[int, tuple[str, float]]:
    return {p.number: (p.mac, p.link.bandwidth_mbps) for p in topo.switches[switch].ports.values()}


def class_changes(topo, switch: str, config: LosslessConfig) -> dict[tuple[int, int, str], str]:
    """`switch`'s class changes by port: {(in port, out port, class): class it becomes}."""
    ports = topo.switches[switch].ports.values()
    return {(a.number, b.number, ch.tclass): ch.becomes
            for ch in config.class_changes if ch.switch == switch
            for a in ports if a.peer == ch.src for b in ports if b.peer == ch.dst}


def switch_state(p4info: P4Info, topo, switch: str, *, forwarding: "SwitchState | None" = None) -> SwitchState:
    config = topo.features.get(SECTION)
    return lossless_state(p4info, config, _ports(topo, switch), class_changes(topo, switch, config) if config else None,
                          port_thresholds(topo, switch, config) if config else None)


def lossless_queue_depth(config: LosslessConfig, ports: Iterable[int],
                         thresholds: Mapping[tuple[int, int], PfcThresholds] | None = None) -> int:
    """A lossless queue's depth on a switch with `ports`: what every ingress
    port may send it before its packets are refused, XOFF + headroom of
    each port (the most over its lossless classes, each cell's own
    `thresholds` or the section's), at least BMv2's default 64."""
    cells = thresholds or {}
    per_port = [max((cells.get((port, c.tclass), config.pfc) for c in config.lossless),
                    key=lambda t: t.xoff + t.headroom, default=config.pfc) for port in ports]
    return min(QDEPTH_MAX, max(64, sum(t.xoff + t.headroom for t in per_port)))


def queue_plan(config: Optional[LosslessConfig], ports: Mapping[int, tuple[str, float]],
               thresholds: Mapping[tuple[int, int], PfcThresholds] | None = None) -> QueuePlan:
    """The priority queues and per-queue settings a switch with `ports` (and
    its cells' own thresholds) needs (lossless_queue_depth)."""
    if config is None:
        return QueuePlan()
    settings: dict[tuple[int, int], QueueSetting] = {}
    lossless_depth = lossless_queue_depth(config, ports, thresholds)
    for port, (_, bw) in ports.items():
        link_pps = queue_rate_pps(bw)
        for c in config.classes:
            rate = max(1, int(link_pps * c.share)) if c.share else None
            depth = lossless_depth if c.lossless else None
            if rate is not None or depth is not None:
                settings[(port, c.queue)] = QueueSetting(rate, depth)
        if config.lossless:        # held packets leave at most at the link's rate
            settings[(port, config.hold_queue)] = QueueSetting(min(config.hold_rate_pps, link_pps), HOLD_QUEUE_DEPTH)
    return QueuePlan(config.queues, settings)


def queues(topo, switch: str) -> QueuePlan:
    config = topo.features.get(SECTION)
    return queue_plan(config, _ports(topo, switch), port_thresholds(topo, switch, config) if config else None)


BENCH_DSCP = 26


def bench_state(p4info: P4Info, port: int) -> SwitchState:
    """Every packet of the bench (DSCP 0, and BENCH_DSCP) in a lossless class
    with PFC on and the watchdog on: the buffer model, XOFF checks and the
    egress pause/hold/watchdog reads for every packet (the thresholds are
    never reached, so no frame is sent). Queue 0: the bench's switch has one."""
    config = LosslessConfig(classes=(TrafficClass("bench", 3, 0, (0, BENCH_DSCP), lossless=True),),
                            pfc=PfcThresholds(xoff=QDEPTH_MAX - 100, xon=10, headroom=100),
                            watchdog=Watchdog())
    return lossless_state(p4info, config, {port: ("0a:00:00:00:00:01", 100.0)})


def _cells(counter_cells) -> dict[str, float]:
    return {f"{i >> 3}/{i & 7}": float(packets) for i, (packets, _) in sorted(counter_cells.items()) if packets}


@dataclass(frozen=True)
class _PerCell:
    """A counter's packets by "port/class" (a module-level callable: features are pickled)."""
    counter: str

    def __call__(self, read) -> dict[str, float]:
        return _cells(read[self.counter])


def _paused_seconds(read) -> dict[str, float]:
    """pfc_paused_us by "port/class", in seconds."""
    return {k: v / 1e6 for k, v in _cells(read[PAUSED_REGISTER]).items()}


class LosslessRuntime:
    """controller.feature("lossless"): the section changed at runtime (classes,
    DSCP map, thresholds, watchdog, class changes), validated whole before
    anything is written; then the entries (P4Runtime) and the queues' rates
    and depths (Thrift). The queue count is fixed when the switches start."""

    def __init__(self, controller):
        self.ctl = controller

    def configure(self, raw: Any):
        """A new `lossless:` section (a mapping, as in a topology file)."""
        def fail(where: str, what: str):
            raise EntryError(f"{where}: {what}")
        return self.apply(parse_section(raw, self.ctl.topo, fail))

    def apply(self, config: LosslessConfig):
        """A new configuration, already validated (configure() validates a section)."""
        current = self.ctl.topo.features.get(SECTION)
        started = current.queues if current else 1
        if config.queues != started:
            raise EntryError(f"{SECTION}.queues: the switches started with {started} queues per port; "
                             f"restart them to change it (asked for {config.queues})")
        self.ctl.topo.features[SECTION] = config
        written = self.ctl.program_all()
        for sw in self.ctl.topo.switches.values():       # shares and queue depths follow the section
            with Bmv2Thrift(sw.thrift_port, sw.thrift_host, name=sw.name) as thrift:
                apply_queue_settings(self.ctl.topo, sw.name, thrift)
        return written

    def watchdog(self, watchdog: Optional[Watchdog]):
        """Switch the watchdog on (or change it), or off with None."""
        current = self.ctl.topo.features.get(SECTION)
        if current is None:
            raise EntryError(f"no {SECTION} section: no lossless class to watch")
        return self.apply(replace(current, watchdog=watchdog))


FEATURE = FeatureSpec(
    name="lossless", section=SECTION,
    summary="traffic classes (DSCP or PCP -> priority queue), PFC 802.1Qbb from a buffer model, pauses honoured, PFC watchdog",
    pieces=Pieces.of("lossless"),
    parse_section=parse_section, switch_state=switch_state, bench_states=one_mode(bench_state),
    bench_what="every packet in a lossless class: buffer model, pause and watchdog state read",
    runtime=LosslessRuntime, queues=queues,
    counters=(*(CounterMetric(f"fabric_{name}", f"{name}: packets by (port/class)", (name,), label="port_class",
                              values=_PerCell(name)) for name in COUNTERS),
              CounterMetric("fabric_pfc_paused_seconds", "pfc_paused_us: time the peer kept (port/class) paused, "
                            "counted as its next PFC frame arrives", (), label="port_class", values=_paused_seconds,
                            registers=(PAUSED_REGISTER,))))
