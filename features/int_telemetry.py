"""Control-plane side of INT (p4src/include/int_telemetry_source.p4, int_telemetry_egress.p4):
which flows carry INT, what each hop adds, where reports go.

In a topology file (validated with the rest of it, before anything starts):

    int:
      collector: h5                  # the host (or host.nic) that receives reports
      collector_port: 32766          # its UDP port (default REPORT_UDP_PORT)
      mtu: 1500                      # IPv4 bytes a port sends; INT never grows a packet beyond it
      refresh_ms: 100                # sink: report an unchanged flow again after this (0: every packet)
      latency_bucket_us: 16          # latency changes within a bucket are "unchanged" (a power of two)
      queue_bucket: 4                # so are queue changes within a bucket (packets, a power of two)
      queue_report_threshold: 20     # congestion reports above this queue depth (packets; omit: none)
      queue_report_interval_ms: 1    # at most one congestion report per port per interval
      drop_report_interval_ms: 1     # drop reports, at most one per reason per interval (default 1; null: none)
      watchlist:
        - {src: 10.0.1.0/24, dst: 10.0.5.0/24, protocol: udp, dst_ports: 4791,
           instructions: [node_id, l1_ports, hop_latency, queue, tx_bytes, tx_time, link_rate],
           max_hops: 8, sample: 1}

A watchlist rule matches the packets entering the fabric from a host (every
host-facing port of every switch): src/dst prefixes (default any), protocol
udp, tcp or any (default: both), src_ports/dst_ports a port or [low, high]
(default any). `instructions` name INT v2.1 instruction bits (and this
project's domain-specific ones, docs/protocols/int_telemetry.md); HopML is computed from them
with the same layout code the collector decodes with. `sample: N` puts INT
into one packet in N, counted per watchlist entry (per rule and host port):
exactly one in any N. `to_host: true` makes the receiving host
the sink (HPCC: its receiver echoes the stack to the sender in ACKs): the
last switch pushes its own hop, neither reports nor strips, and the packet
reaches the host with UDP port INT_UDP_PORT (the original in the shim); it
needs one of the fabric's instructions (the flag is a fabric DS flag).
Earlier rules win. A `to_host` rule samples every packet (HPCC needs
every packet's hops).

Adaptive sampling (telemetry/adaptive_sampling.py, docs/features/int_telemetry.md):

    int:
      adaptive:
        queue: 20          # a report of a queue this deep (packets) makes its port hot
        ecn_marks: 1       # this many CE-marked reports of a flow make it hot
        drops: 1           # this many drop reports of a flow make it hot
        quiet_ms: 2000     # a flow or port raised goes back to its rule's rate this long after its last sign
        max_flows: 16      # flows raised at one host port before the port itself is raised

Rules with `sample: N > 1` are the sparse rate; the loop raises a flow
(an entry of its own ahead of the rules, at its first switch) or a host
port (its rules' N set to 1) to every packet, and lowers it after the quiet
period. `controller.feature("int_telemetry").set_raised(ports, flows)` is
what it calls; `raised` is what is raised now.

Every switch then counts its ports' transmitted bytes and pushes its hop
into INT packets; host-facing ports are sinks: they strip INT and send a
Telemetry Report v2.0, through clone session REPORT_SESSION, out of the port
that leads to the collector. A switch's node id is its device id.

Reports (docs/protocols/int_telemetry.md): the sink reports a flow when a hop's ports, latency
bucket or queue bucket changed, or when refresh_ms has passed; a hop whose
queue is above queue_report_threshold sends a congestion report (Q); a switch
that drops a packet sends a drop report (D) with the reason. Both are
rate-limited, and int_report_counter counts what was sent and held back.
"""
from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Mapping, Optional, Sequence

from p4.v1 import p4runtime_pb2

from wire import int_telemetry as ih
from control.feature import CounterMetric, Fail, FeatureSpec, Pieces
from control.p4constants import constants
from control.p4info import P4Info
from control.sync import SwitchState
from control.topology import switch_address

SECTION = "int"
WATCHLIST_TABLE = "int_watchlist"
SOURCE_PORT_TABLE = "int_source_port"      # a host port's rate, before any lookup
RAISED_FLOW_TABLE = "int_raised_flow"      # flows raised to every packet (adaptive sampling)
SOURCE_TABLES = (SOURCE_PORT_TABLE, RAISED_FLOW_TABLE, WATCHLIST_TABLE)   # where INT starts: what set_raised writes
PORT_TABLE = "int_port"
TX_BYTES_REGISTER = "int_tx_bytes"
SEQ_REGISTER = "report_seq_no"
REPORT_SESSION = constants()["REPORT_MIRROR_SESSION"]
INSTANCE_NORMAL = constants()["INSTANCE_NORMAL"]
INSTANCE_EGRESS_CLONE = constants()["INSTANCE_EGRESS_CLONE"]
DEFAULT_MTU = constants()["INT_DEFAULT_MTU"]
MAX_STACK_WORDS = constants()["INT_MAX_STACK_WORDS"]

# Instruction names -> (INT bitmap bit, DS bit of FABRIC_DS_ID)
INSTRUCTIONS: dict[str, tuple[int, int]] = {
    "node_id": (ih.INS_NODE_ID, 0),
    "l1_ports": (ih.INS_L1_PORTS, 0),
    "hop_latency": (ih.INS_HOP_LATENCY, 0),
    "queue": (ih.INS_QUEUE, 0),
    "ingress_ts": (ih.INS_INGRESS_TS, 0),
    "egress_ts": (ih.INS_EGRESS_TS, 0),
    "l2_ports": (ih.INS_L2_PORTS, 0),             # BMv2 has none: all-ones
    "tx_utilization": (ih.INS_TX_UTILIZATION, 0),  # BMv2 cannot measure it: all-ones
    "buffer": (ih.INS_BUFFER, 0),                 # all-ones
    "checksum_complement": (ih.INS_CHECKSUM_COMPLEMENT, 0),  # all-ones: switches recompute the L4 checksum
    "tx_bytes": (0, ih.DS_TX_BYTES),
    "tx_time": (0, ih.DS_TX_TIMESTAMP),
    "link_rate": (0, ih.DS_LINK_RATE),
}
DEFAULT_INSTRUCTIONS = ("node_id", "l1_ports", "hop_latency", "queue", "ingress_ts", "egress_ts")
PROTOCOLS = {"udp": 17, "tcp": 6}
SECTION_FIELDS = {"collector", "collector_port", "mtu", "watchlist", "refresh_ms", "latency_bucket_us",
                  "queue_bucket", "queue_report_threshold", "queue_report_interval_ms", "drop_report_interval_ms",
                  "adaptive"}
ADAPTIVE_FIELDS = {"queue", "ecn_marks", "drops", "quiet_ms", "max_flows"}
WATCHLIST_SIZE = constants()["INT_WATCHLIST_SIZE"]   # entries, and samplers (int_sample_count cells)
RAISED_FLOWS_SIZE = constants()["INT_RAISED_FLOWS"]
EVERY_PACKET_SAMPLER = 0                             # shared by the entries with N = 1: its count stays 0
DROP_REPORT_TABLE = "drop_report"
REPORT_COUNTER = "int_report_counter"
REPORT_KINDS = {name: constants()[f"REPORT_{name.upper()}"]
                for name in ("flow", "suppressed", "queue", "queue_limited", "drop", "yielded")}
DROP_LIMITED_COUNTER = "drop_reports_limited"   # per drop reason, in ingress
INSTANCE_INGRESS_CLONE = constants()["INSTANCE_INGRESS_CLONE"]
QDEPTH_MAX = (1 << 19) - 1
RULE_FIELDS = {"src", "dst", "protocol", "src_ports", "dst_ports", "instructions", "max_hops", "sample", "to_host"}
MAX_PRIORITY = 1 << 20


class IntConfigError(ValueError):
    pass


@dataclass(frozen=True)
class Instructions:
    """An INT instruction set: the INT-MD header's bitmap, DS ID and DS
    instruction, and the HopML they need."""
    bitmap: int
    ds_id: int
    ds_bits: int

    @classmethod
    def of(cls, names) -> "Instructions":
        if isinstance(names, str) or not hasattr(names, "__iter__"):
            raise IntConfigError(f"expected a list of instruction names, got {names!r}")
        bitmap = ds = 0
        for name in names:
            if name not in INSTRUCTIONS:
                raise IntConfigError(f"unknown instruction {name!r} (known: {', '.join(INSTRUCTIONS)})")
            bit, ds_bit = INSTRUCTIONS[name]
            bitmap |= bit
            ds |= ds_bit
        if not bitmap and not ds:
            raise IntConfigError("no instructions: a hop would add nothing")
        return cls(bitmap, ih.FABRIC_DS_ID if ds else 0, ds)

    @property
    def hop_ml(self) -> int:
        """Words per hop, from the layout the collector decodes with."""
        return ih.int_layout(self.bitmap, self.ds_id, self.ds_bits).length // 4


@dataclass(frozen=True)
class WatchRule:
    src: Optional[str] = None          # "a.b.c.d/len"
    dst: Optional[str] = None
    protocol: Optional[int] = None     # None: TCP and UDP
    src_ports: tuple[int, int] = (0, 0xFFFF)
    dst_ports: tuple[int, int] = (0, 0xFFFF)
    instructions: Instructions = field(default_factory=lambda: Instructions.of(DEFAULT_INSTRUCTIONS))
    max_hops: int = 8
    sample: int = 1                    # one packet in `sample`
    to_host: bool = False              # the receiving host is the sink (HPCC): INT is not stripped

    def __post_init__(self) -> None:
        hop_ml = self.instructions.hop_ml
        if hop_ml > ih.MAX_HOP_ML:
            raise IntConfigError(f"instructions need {hop_ml} words per hop, more than HopML's {ih.MAX_HOP_ML}")
        if not 1 <= self.max_hops <= 255:
            raise IntConfigError(f"max_hops must be within 1..255, got {self.max_hops!r}")
        if self.max_hops * hop_ml > MAX_STACK_WORDS:
            raise IntConfigError(f"max_hops {self.max_hops} x {hop_ml} words per hop exceeds the "
                                 f"{MAX_STACK_WORDS}-word stack a switch carries (INT_MAX_STACK_WORDS)")
        if not 1 <= self.sample <= 0xFFFFFFFF:
            raise IntConfigError(f"sample must be a positive packet count (one in N), got {self.sample!r}")
        if self.to_host and self.instructions.ds_id != ih.FABRIC_DS_ID:
            raise IntConfigError("to_host: the flag travels in the fabric domain's DS flags; add one of its "
                                 "instructions (tx_bytes, tx_time, link_rate)")
        if self.to_host and self.sample != 1:
            raise IntConfigError(f"sample: a to_host rule (HPCC) needs every packet's hops, so sample 1, "
                                 f"got {self.sample}")

    def matches(self, flow: "FlowKey") -> bool:
        """Whether this rule watches `flow` (at a port where it applies)."""
        return ((self.protocol is None and flow.protocol in PROTOCOLS.values() or self.protocol == flow.protocol)
                and (self.src is None or ipaddress.ip_address(flow.src) in ipaddress.ip_network(self.src))
                and (self.dst is None or ipaddress.ip_address(flow.dst) in ipaddress.ip_network(self.dst))
                and self.src_ports[0] <= flow.sport <= self.src_ports[1]
                and self.dst_ports[0] <= flow.dport <= self.dst_ports[1])


@dataclass(frozen=True, order=True)
class FlowKey:
    """A flow as the watchlist matches it where it enters the fabric (the
    original UDP port and DSCP: the collector's InnerPacket restores them)."""
    src: str
    dst: str
    protocol: int
    sport: int
    dport: int

    @classmethod
    def parse(cls, text: str) -> "FlowKey":
        """The collector's flow label: "10.0.1.1:49152>10.0.2.1:4791/udp"."""
        try:
            ends, _, proto = text.rpartition("/")
            a, _, b = ends.partition(">")
            src, _, sport = a.rpartition(":")
            dst, _, dport = b.rpartition(":")
            key = cls(str(ipaddress.IPv4Address(src)), str(ipaddress.IPv4Address(dst)), PROTOCOLS[proto],
                      int(sport), int(dport))
        except (KeyError, ValueError):
            raise IntConfigError(f"expected a flow like 10.0.1.1:49152>10.0.2.1:4791/udp, got {text!r}") from None
        if not (0 <= key.sport <= 0xFFFF and 0 <= key.dport <= 0xFFFF):
            raise IntConfigError(f"{text!r}: ports are 0..65535")
        return key

    def __str__(self) -> str:
        name = {v: k for k, v in PROTOCOLS.items()}[self.protocol]
        return f"{self.src}:{self.sport}>{self.dst}:{self.dport}/{name}"


@dataclass(frozen=True)
class AdaptiveSettings:
    """When telemetry/adaptive_sampling.py raises sampling to every packet, and lowers it."""
    queue: int = 20
    ecn_marks: int = 1
    drops: int = 1
    quiet_ms: float = 2000.0
    max_flows: int = 16

    def __post_init__(self) -> None:
        for name in ("queue", "ecn_marks", "drops", "max_flows"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise IntConfigError(f"{name}: expected a positive integer, got {v!r}")
        if isinstance(self.quiet_ms, bool) or not isinstance(self.quiet_ms, (int, float)) or self.quiet_ms <= 0:
            raise IntConfigError(f"quiet_ms: expected a positive number of milliseconds, got {self.quiet_ms!r}")


@dataclass(frozen=True)
class Raised:
    """What samples every packet now, beyond the rules' own rates: host
    ports (switch, port) whose rules' N is set to 1, and flows with an entry
    of their own at their first switch."""
    ports: frozenset[tuple[str, int]] = frozenset()
    flows: frozenset[FlowKey] = frozenset()

    def __bool__(self) -> bool:
        return bool(self.ports or self.flows)


@dataclass(frozen=True)
class ReportSettings:
    """When switches report (the runtime settings of int_telemetry_egress.p4)."""
    refresh_ms: float = 100.0              # 0: the sink reports every packet (no suppression)
    latency_bucket_us: int = 16            # powers of two: the data plane shifts
    queue_bucket: int = 4
    queue_report_threshold: Optional[int] = None   # packets; None: no congestion reports
    queue_report_interval_ms: float = 1.0
    drop_report_interval_ms: Optional[float] = 1.0  # None: no drop reports

    def __post_init__(self) -> None:
        for name in ("latency_bucket_us", "queue_bucket"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1 or v & (v - 1):
                raise IntConfigError(f"{name}: expected a power of two (1, 2, 4, ...), got {v!r}")
        for name in ("refresh_ms", "queue_report_interval_ms", "drop_report_interval_ms"):
            v = getattr(self, name)
            if v is None and name == "drop_report_interval_ms":
                continue
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v * 1000 < 2**32:
                raise IntConfigError(f"{name}: expected milliseconds within 0..{2**32 // 1000}, got {v!r}")
        t = self.queue_report_threshold
        if t is not None and (isinstance(t, bool) or not isinstance(t, int) or not 0 <= t <= QDEPTH_MAX):
            raise IntConfigError(f"queue_report_threshold: expected a queue depth in packets, "
                                 f"0..{QDEPTH_MAX}, got {t!r}")

    def port_params(self) -> dict:
        return {"queue_report_threshold": QDEPTH_MAX if self.queue_report_threshold is None
                else self.queue_report_threshold,
                "queue_report_interval_us": round(self.queue_report_interval_ms * 1000),
                "latency_bucket_shift": self.latency_bucket_us.bit_length() - 1,
                "queue_bucket_shift": self.queue_bucket.bit_length() - 1,
                "flow_refresh_us": round(self.refresh_ms * 1000)}


@dataclass(frozen=True)
class IntConfig:
    collector: str                     # host or host.nic
    collector_port: int = ih.REPORT_UDP_PORT
    mtu: int = DEFAULT_MTU
    watchlist: tuple[WatchRule, ...] = ()
    reports: ReportSettings = ReportSettings()
    adaptive: Optional[AdaptiveSettings] = None
    raised: Raised = Raised()


def _prefix(value, what: str) -> str:
    try:
        net = ipaddress.ip_network(str(value), strict=True)
    except ValueError as exc:
        raise IntConfigError(f"{what}: expected an IPv4 prefix like 10.0.1.0/24, got {value!r} ({exc})") from None
    if net.version != 4:
        raise IntConfigError(f"{what}: expected an IPv4 prefix, got {value!r}")
    return str(net)


def _ports(value, what: str) -> tuple[int, int]:
    if isinstance(value, bool):
        raise IntConfigError(f"{what}: expected a port or [low, high], got {value!r}")
    if isinstance(value, int):
        value = [value, value]
    if not (isinstance(value, list) and len(value) == 2 and all(isinstance(v, int) and not isinstance(v, bool)
                                                                 for v in value)):
        raise IntConfigError(f"{what}: expected a port or [low, high], got {value!r}")
    low, high = value
    if not 0 <= low <= high <= 0xFFFF:
        raise IntConfigError(f"{what}: expected 0 <= low <= high <= 65535, got {value!r}")
    return low, high


def parse_rule(raw: Mapping[str, Any]) -> WatchRule:
    """One watchlist rule from its mapping (IntConfigError names what is wrong)."""
    if not isinstance(raw, Mapping):
        raise IntConfigError(f"expected a mapping, got {raw!r}")
    unknown = sorted(set(map(str, raw)) - RULE_FIELDS)
    if unknown:
        raise IntConfigError(f"{unknown[0]}: unknown field (allowed: {', '.join(sorted(RULE_FIELDS))})")
    kw: dict[str, Any] = {}
    for key in ("src", "dst"):
        if raw.get(key) is not None:
            kw[key] = _prefix(raw[key], key)
    proto = raw.get("protocol", "any")
    if proto != "any":
        if proto not in PROTOCOLS:
            raise IntConfigError(f"protocol: expected udp, tcp or any, got {proto!r}")
        kw["protocol"] = PROTOCOLS[proto]
    for key in ("src_ports", "dst_ports"):
        if key in raw:
            kw[key] = _ports(raw[key], key)
    if "instructions" in raw:
        try:
            kw["instructions"] = Instructions.of(raw["instructions"])
        except IntConfigError as exc:
            raise IntConfigError(f"instructions: {exc}") from None
    for key in ("max_hops", "sample"):
        if key in raw:
            v = raw[key]
            if isinstance(v, bool) or not isinstance(v, int):
                raise IntConfigError(f"{key}: expected an integer, got {v!r}")
            kw[key] = v
    if "to_host" in raw:
        if not isinstance(raw["to_host"], bool):
            raise IntConfigError(f"to_host: expected true or false, got {raw['to_host']!r}")
        kw["to_host"] = raw["to_host"]
    return WatchRule(**kw)


def parse_section(raw: Any, topo, fail: Fail) -> IntConfig:
    """Validate a topology's `int:` section (feature interface)."""
    if not isinstance(raw, dict):
        fail("int", "expected a mapping with collector and watchlist")
    unknown = sorted(set(map(str, raw)) - SECTION_FIELDS)
    if unknown:
        fail(f"int.{unknown[0]}", f"unknown field (allowed: {', '.join(sorted(SECTION_FIELDS))})")
    if "collector" not in raw:
        fail("int.collector", "missing: the host (or host.nic) that receives telemetry reports")
    try:
        topo.nic(str(raw["collector"]))
    except KeyError as exc:
        fail("int.collector", f"{exc.args[0]} (hosts: {', '.join(topo.hosts)})")
    port = raw.get("collector_port", ih.REPORT_UDP_PORT)
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 0xFFFF:
        fail("int.collector_port", f"expected a UDP port 1..65535, got {port!r}")
    mtu = raw.get("mtu", DEFAULT_MTU)
    if isinstance(mtu, bool) or not isinstance(mtu, int) or not 68 <= mtu <= 0xFFFF:
        fail("int.mtu", f"expected an IPv4 MTU within 68..65535 bytes, got {mtu!r}")
    try:
        reports = ReportSettings(**{k: raw[k] for k in ReportSettings.__dataclass_fields__ if k in raw})
    except IntConfigError as exc:
        field_name, _, what = str(exc).partition(": ")
        fail(f"int.{field_name}", what)
    adaptive = None
    if raw.get("adaptive") is not None:
        section = raw["adaptive"]
        if not isinstance(section, dict):
            fail("int.adaptive", f"expected a mapping ({', '.join(sorted(ADAPTIVE_FIELDS))}), got {section!r}")
        unknown = sorted(set(map(str, section)) - ADAPTIVE_FIELDS)
        if unknown:
            fail(f"int.adaptive.{unknown[0]}", f"unknown field (allowed: {', '.join(sorted(ADAPTIVE_FIELDS))})")
        try:
            adaptive = AdaptiveSettings(**section)
        except IntConfigError as exc:
            field_name, _, what = str(exc).partition(": ")
            fail(f"int.adaptive.{field_name}", what)
    rules = raw.get("watchlist", [])
    if not isinstance(rules, list):
        fail("int.watchlist", "expected a list of rules")
    parsed = []
    for i, item in enumerate(rules):
        try:
            parsed.append(parse_rule(item))
        except IntConfigError as exc:
            field_name, sep, what = str(exc).partition(": ")
            if sep and field_name in RULE_FIELDS:
                fail(f"int.watchlist[{i}].{field_name}", what)
            fail(f"int.watchlist[{i}]", str(exc))
    if adaptive is not None and not any(r.sample > 1 for r in parsed):
        fail("int.adaptive", "no watchlist rule samples (sample: N > 1): there is nothing to raise")
    return IntConfig(str(raw["collector"]), port, mtu, tuple(parsed), reports, adaptive)


# -- entries ------------------------------------------------------------------

def report_source_ip(device_id: int) -> str:
    """Reports come from the switch's own address (control/topology.py: switch_address)."""
    return switch_address(device_id)


def _source_params(rule: WatchRule) -> dict[str, int]:
    """What INT's source writes into a packet of `rule` (int_source's and
    raised_flow_source's parameters, the sampling aside)."""
    ins = rule.instructions
    return {"max_hop_count": rule.max_hops, "hop_metadata_words": ins.hop_ml,
            "instruction_bitmap": ins.bitmap, "ds_id": ins.ds_id, "ds_instruction": ins.ds_bits,
            "ds_flags": ih.DS_FLAG_TO_HOST if rule.to_host else 0}


def watching_rule(rules: Iterable[WatchRule], flow: FlowKey) -> Optional[WatchRule]:
    """The rule that watches `flow` (the first that matches: earlier rules win), or None."""
    return next((r for r in rules if r.matches(flow)), None)


@dataclass(frozen=True)
class PortRate:
    """Where a host port samples: `port` (int_source_port: 1 in N of the
    packets entering, before any lookup; the cheapest place) and whether
    its watchlist entries then count with their own rules' N."""
    port: int
    entries_count: bool

    @classmethod
    def of(cls, rules: tuple[WatchRule, ...], raised: bool = False) -> "PortRate":
        """(A port's raised flows are looked up before it counts: they
        change nothing here.)"""
        samples = {r.sample for r in rules}
        if raised or not rules:
            return cls(1, False)                  # every packet of every rule
        if len(samples) > 1:
            return cls(1, True)                   # every packet looked up; each rule its own rate
        return cls(samples.pop(), False)          # one rate for the port's rules: counted at the port


def watchlist_entries(p4info: P4Info, rules: tuple[WatchRule, ...], ingress_ports: Optional[list[int]],
                      rates: Optional[Mapping[Optional[int], PortRate]] = None) -> list:
    """int_watchlist entries: every rule on every port packets enter from
    hosts (None: on any ingress port). An entry samples every packet
    (sampler 0, shared) unless its port's rate says its entries count
    (`rates`, default PortRate.of(rules)); each entry of a rule with
    sample N > 1 has a sampler of its own (1, 2, ... in entry order, used or
    not, so a change of rate keeps every other entry's count)."""
    entries = []
    sampler = EVERY_PACKET_SAMPLER
    port_keys = [None] if ingress_ports is None else ingress_ports
    default = PortRate.of(rules)
    for rank, rule in enumerate(rules):
        protocols = [rule.protocol] if rule.protocol is not None else [PROTOCOLS["udp"], PROTOCOLS["tcp"]]
        for port in port_keys:
            for proto in protocols:
                match: dict[str, Any] = {"hdr.int_shim.$valid$": 0, "hdr.ipv4.protocol": (proto, 0xFF)}
                if port is not None:
                    match["std_meta.ingress_port"] = (port, 0x1FF)
                for key, prefix in (("hdr.ipv4.src_addr", rule.src), ("hdr.ipv4.dst_addr", rule.dst)):
                    if prefix is not None:
                        net = ipaddress.ip_network(prefix)
                        match[key] = (str(net.network_address), int(net.netmask))
                for key, ports in (("meta.l4_src_port", rule.src_ports), ("meta.l4_dst_port", rule.dst_ports)):
                    if ports != (0, 0xFFFF):   # a full range is a wildcard: omitted
                        match[key] = ports
                own = EVERY_PACKET_SAMPLER
                if rule.sample > 1:
                    sampler += 1
                    own = sampler
                counts = (rates or {}).get(port, default).entries_count
                params = {**_source_params(rule), "sample_one_in": rule.sample if counts else 1, "sampler": own}
                entries.append(p4info.table_entry(WATCHLIST_TABLE, match, priority=MAX_PRIORITY - rank,
                                                  action="int_source", params=params))
    if len(entries) > WATCHLIST_SIZE or sampler >= WATCHLIST_SIZE:
        raise IntConfigError(f"the watchlist needs {len(entries)} entries and {sampler + 1} samplers on a switch, "
                             f"more than its {WATCHLIST_SIZE} (INT_WATCHLIST_SIZE): fewer rules or host ports")
    return entries


def source_port_entries(p4info: P4Info, ports: Optional[list[int]], rates: Mapping[Optional[int], PortRate],
                        raised_flow_ports: Iterable[Optional[int]] = (),
                        raised_ports: frozenset[int] = frozenset()) -> list:
    """int_source_port: each host port's rate (None: the table's default,
    every port: make bench), and whether it looks up raised flows first:
    sample_port (1 in N, counted down at the port), every_packet (a rate of
    1: nothing counted, a raised port's flows not looked up either, since
    every packet is taken) or sample_port_after_raised_flows (1 in N of the
    packets no raised flow has; N may be 1, its entries counting)."""
    flagged = set(raised_flow_ports)
    entries = []
    for port in [None] if ports is None else ports:
        rate = rates[port].port
        if (port in flagged or None in flagged) and port not in raised_ports:
            action, params = "sample_port_after_raised_flows", {"sample_one_in": rate}
        elif rate == 1:
            action, params = "every_packet", {}
        else:
            action, params = "sample_port", {"sample_one_in": rate}
        if port is None:
            entries.append(p4info.default_entry(SOURCE_PORT_TABLE, action, params))
        else:
            entries.append(p4info.table_entry(SOURCE_PORT_TABLE, {"std_meta.ingress_port": port},
                                              action=action, params=params))
    return entries


def raised_flow_entries(p4info: P4Info, rules: tuple[WatchRule, ...], flows: Iterable[FlowKey]) -> list:
    """int_raised_flow: every packet of each flow, with the instructions of
    the first rule that watches it (a flow no rule watches gets none)."""
    entries = []
    for flow in sorted(flows):
        rule = watching_rule(rules, flow)
        if rule is None:
            continue
        entries.append(p4info.table_entry(
            RAISED_FLOW_TABLE, {"hdr.ipv4.src_addr": flow.src, "hdr.ipv4.dst_addr": flow.dst,
                                "hdr.ipv4.protocol": flow.protocol, "meta.l4_src_port": flow.sport,
                                "meta.l4_dst_port": flow.dport},
            action="raised_flow_source", params=_source_params(rule)))
    if len(entries) > RAISED_FLOWS_SIZE:
        raise IntConfigError(f"{len(entries)} raised flows on a switch, more than int_raised_flow's "
                             f"{RAISED_FLOWS_SIZE} (INT_RAISED_FLOWS): lower adaptive.max_flows")
    return entries


def source_entries(p4info: P4Info, rules: tuple[WatchRule, ...], ports: Optional[list[int]],
                   raised_ports: frozenset[int] = frozenset(),
                   raised_flows: Sequence[tuple[FlowKey, Optional[int]]] = ()) -> list:
    """Where INT starts on a switch: the host ports' rates, the raised
    flows and the watchlist. `ports` face hosts (None: any port, make
    bench); `raised_flows` are (flow, the port it enters from)."""
    if not rules:
        return []
    flow_ports = {port for _, port in raised_flows}
    rates = {port: PortRate.of(rules, port in raised_ports) for port in ([None] if ports is None else ports)}
    return (source_port_entries(p4info, ports, rates, flow_ports, raised_ports)
            + raised_flow_entries(p4info, rules, [f for f, _ in raised_flows])
            + watchlist_entries(p4info, rules, ports, rates))


def port_entry(p4info: P4Info, port: int, node_id: int, sink: bool, mtu: int, rate_mbps: int,
               reports: ReportSettings = ReportSettings()):
    return p4info.table_entry(PORT_TABLE, {"std_meta.egress_port": port, "std_meta.instance_type": INSTANCE_NORMAL},
                              action="set_int_port",
                              params={"switch_id": node_id, "is_sink": int(sink), "port_mtu": mtu,
                                      "port_rate_mbps": rate_mbps, **reports.port_params()})


@dataclass(frozen=True)
class ReportPath:
    """Where a switch sends its reports: out of `port`, Ethernet to `dst_mac`."""
    port: int
    src_mac: str
    dst_mac: str
    src_ip: str
    collector_ip: str
    collector_port: int


def report_entries(p4info: P4Info, node_id: int, path: ReportPath, ports: list[int]) -> list:
    """int_port entries for report clones on every port: INT reports (E2E
    clones) and drop reports (ingress clones)."""
    params = {"src_mac": path.src_mac, "dst_mac": path.dst_mac, "src_addr": path.src_ip,
              "collector_addr": path.collector_ip, "collector_port": path.collector_port, "switch_id": node_id}
    return [p4info.table_entry(PORT_TABLE, {"std_meta.egress_port": port, "std_meta.instance_type": instance},
                               action=action, params=params)
            for port in ports for instance, action in ((INSTANCE_EGRESS_CLONE, "build_report"),
                                                       (INSTANCE_INGRESS_CLONE, "build_drop_report"))]


def drop_report_entry(p4info: P4Info, interval_ms: float):
    return p4info.default_entry(DROP_REPORT_TABLE, "report_drops", {"min_interval_us": round(interval_ms * 1000)})


def clone_session(port: int) -> p4runtime_pb2.CloneSessionEntry:
    return p4runtime_pb2.CloneSessionEntry(session_id=REPORT_SESSION,
                                           replicas=[p4runtime_pb2.Replica(egress_port=port, instance=0)])


def empty_state(p4info: P4Info) -> SwitchState:
    """INT off: no entries, drop_report and int_source_port back to NoAction."""
    return SwitchState(managed_tables={p4info.table(t).preamble.id
                                       for t in (SOURCE_PORT_TABLE, RAISED_FLOW_TABLE, WATCHLIST_TABLE,
                                                 PORT_TABLE, DROP_REPORT_TABLE)},
                       managed_clone_sessions={REPORT_SESSION},
                       table_entries=[p4info.default_entry(DROP_REPORT_TABLE, "NoAction"),
                                      p4info.default_entry(SOURCE_PORT_TABLE, "NoAction")])


def enabled_state(p4info: P4Info) -> SwitchState:
    """INT on, before any entry: int_source_port's default is transit_port
    (a port not facing a host)."""
    state = empty_state(p4info)
    state.table_entries = [p4info.default_entry(DROP_REPORT_TABLE, "NoAction"),
                           p4info.default_entry(SOURCE_PORT_TABLE, "transit_port")]
    return state


def int_state(p4info: P4Info, *, node_id: int, ports: Mapping[int, int], sink_ports: set[int],
              rules: tuple[WatchRule, ...], report: ReportPath, mtu: int = DEFAULT_MTU,
              reports: ReportSettings = ReportSettings(), raised_ports: frozenset[int] = frozenset(),
              raised_flows: Optional[list[tuple[FlowKey, int]]] = None) -> SwitchState:
    """One switch's INT entries. `ports`: port -> link rate (Mbit/s);
    `sink_ports` face hosts: INT enters there (watchlist) and leaves there (sink).
    `raised_ports` (of `sink_ports`) and `raised_flows` ((flow, the host port
    it enters from)) sample every packet (adaptive sampling)."""
    state = enabled_state(p4info)
    if reports.drop_report_interval_ms is not None:
        state.table_entries[0] = drop_report_entry(p4info, reports.drop_report_interval_ms)
    state.table_entries += source_entries(p4info, rules, sorted(sink_ports), raised_ports, raised_flows or [])
    for port, rate in sorted(ports.items()):
        state.table_entries.append(port_entry(p4info, port, node_id, port in sink_ports, mtu, rate, reports))
    state.table_entries += report_entries(p4info, node_id, report, sorted(ports))
    state.clone_sessions.append(clone_session(report.port))
    return state


def report_path(topo, switch: str, cfg: IntConfig) -> ReportPath:
    """The first next hop of `switch`'s route to the collector's NIC."""
    nic = topo.nic(cfg.collector)
    route = next((r for r in topo.routes()[switch] if r.prefix == nic.subnet), None)
    if route is None:
        raise IntConfigError(f"{switch} has no route to the collector {cfg.collector} ({nic.ip}): "
                             f"another plane? put a collector on every plane")
    hop = route.next_hops[0]
    return ReportPath(hop.port, hop.src_mac, hop.dst_mac, report_source_ip(topo.switches[switch].device_id),
                      nic.ip, cfg.collector_port)


def switch_state(p4info: P4Info, topo, switch: str, *, forwarding: Optional[SwitchState] = None) -> SwitchState:
    """The INT entries the topology file gives `switch` (feature interface)."""
    cfg: Optional[IntConfig] = topo.features.get(SECTION)
    if cfg is None:
        return empty_state(p4info)
    sw = topo.switches[switch]
    ports = {p.number: int(p.link.bandwidth_mbps) for p in sw.ports.values()}
    sinks = {p.number for p in sw.ports.values() if p.peer in topo.hosts}
    return int_state(p4info, node_id=sw.device_id, ports=ports, sink_ports=sinks, rules=cfg.watchlist,
                     report=report_path(topo, switch, cfg), mtu=cfg.mtu, reports=cfg.reports,
                     raised_ports=frozenset(p for s, p in cfg.raised.ports if s == switch),
                     raised_flows=[(f, nic.switch_port) for f, nic in flow_sources(topo, cfg.raised.flows).items()
                                   if nic.switch == switch])


def flow_sources(topo, flows) -> dict[FlowKey, Any]:
    """The NIC each flow enters the fabric from (its source address's);
    flows from an address no NIC has are left out."""
    by_ip = {nic.ip: nic for nic in topo.nics}
    return {f: by_ip[f.src] for f in sorted(flows) if f.src in by_ip}


BENCH_SAMPLE = 16                                                # the sparse rate of the sampled rows
BENCH_HOT_FLOW = FlowKey("10.0.1.1", "10.0.2.1", 17, 5000, 4791)  # one of benchmarks/cases.py frames()' 8 flows


def bench_state(p4info: P4Info, port: int, sample: int = 1, raised: tuple[FlowKey, ...] = ()) -> SwitchState:
    """INT at its most expensive for `make bench`: every UDP/TCP packet is
    watchlisted (this switch is source and transit: it pushes a hop with
    every supported instruction) and leaves through a transit port, so each
    sampled packet is inserted into, pushed onto and checksummed; one in
    `sample` is sampled, and every packet of the `raised` flows."""
    everything = Instructions.of(["node_id", "l1_ports", "hop_latency", "queue", "ingress_ts", "egress_ts",
                                  "tx_bytes", "tx_time", "link_rate"])
    rule = WatchRule(instructions=everything, max_hops=4, sample=sample)
    state = enabled_state(p4info)
    del state.table_entries[1]                        # int_source_port's default: source_entries sets it
    state.table_entries += source_entries(p4info, (rule,), None, raised_flows=[(f, None) for f in raised])
    state.table_entries.append(port_entry(p4info, port, 1, False, 9000, 1000))
    return state


def bench_states(p4info: P4Info, port: int) -> dict[str, SwitchState]:
    """Every packet (the row `fabric+int`); `sampled`: 1 in BENCH_SAMPLE;
    `adaptive`, the mixed workload of adaptive sampling: 1 in BENCH_SAMPLE,
    and one of the bench's 8 flows raised to every packet."""
    return {"": bench_state(p4info, port), "sampled": bench_state(p4info, port, BENCH_SAMPLE),
            "adaptive": bench_state(p4info, port, BENCH_SAMPLE, (BENCH_HOT_FLOW,))}


def report_counts(conn, p4info: P4Info) -> dict[str, int]:
    """Reports a switch sent and held back, by kind (int_report_counter, and
    drop_reports_limited summed over the drop reasons as drop_limited)."""
    cells = conn.counter(p4info.counter_entry(REPORT_COUNTER))
    counts = {name: cells.get(index, (0, 0))[0] for name, index in REPORT_KINDS.items()}
    limited = conn.counter(p4info.counter_entry(DROP_LIMITED_COUNTER))
    counts["drop_limited"] = sum(p for p, _ in limited.values())
    return counts


def _report_kinds(cells) -> dict[str, float]:
    """Reports sent or held back by kind, drop reports held back summed as drop_limited."""
    reports, limited = cells[REPORT_COUNTER], cells[DROP_LIMITED_COUNTER]
    values = {kind: float(reports.get(index, (0, 0))[0]) for kind, index in sorted(REPORT_KINDS.items(),
                                                                                    key=lambda kv: kv[1])}
    values["drop_limited"] = float(sum(p for p, _ in limited.values()))
    return values


class IntRuntime:
    """controller.feature("int_telemetry"): what samples every packet, changed at runtime."""

    def __init__(self, controller):
        self.ctl = controller

    @property
    def config(self) -> Optional[IntConfig]:
        return self.ctl.topo.features.get(SECTION)

    @property
    def raised(self) -> Raised:
        cfg = self.config
        return cfg.raised if cfg is not None else Raised()

    def set_raised(self, ports: Iterable[tuple[str, int]] = (), flows: Iterable[FlowKey] = ()) -> list[str]:
        """Sample every packet on these host ports and of these flows, and
        only these (others back to their rules' rates); rewrites the
        SOURCE_TABLES (and nothing else) of the switches whose entries change
        and returns their names. A port that is not a host port, or a flow
        from no NIC of the fabric, is an error and nothing changes."""
        cfg = self.config
        if cfg is None:
            raise IntConfigError("INT is off: the topology has no int section")
        topo = self.ctl.topo
        wanted = Raised(frozenset(ports), frozenset(flows))
        for switch, port in sorted(wanted.ports):
            sw = topo.switches.get(switch)
            if sw is None or port not in sw.ports or sw.ports[port].peer not in topo.hosts:
                raise IntConfigError(f"{switch} port {port}: not a port facing a host (where INT starts)")
        sources = flow_sources(topo, wanted.flows)
        for flow in sorted(wanted.flows - set(sources)):
            raise IntConfigError(f"flow {flow}: no NIC of the fabric has its source address")
        before = cfg.raised
        changed_ports = before.ports ^ wanted.ports
        changed_flows = before.flows ^ wanted.flows
        touched = {s for s, _ in changed_ports} | {nic.switch for nic in flow_sources(topo, changed_flows).values()}
        topo.features[SECTION] = replace(cfg, raised=wanted)
        done: list[str] = []
        try:
            for name in sorted(touched):
                self.ctl.program_tables(name, SOURCE_TABLES)
                done.append(name)
        except Exception:
            topo.features[SECTION] = cfg     # nothing half-applied: the switches done go back
            for name in done:
                self.ctl.program_tables(name, SOURCE_TABLES)
            raise
        return sorted(touched)


FEATURE = FeatureSpec(
    name="int_telemetry", section=SECTION,
    summary="INT v2.1 source/transit/sink with Telemetry Report v2.0 (flow, congestion, drop), probes over every link",
    pieces=Pieces.of("int_telemetry", p4=("int_telemetry_headers.p4", "int_telemetry_source.p4",
                                          "int_telemetry_egress.p4", "int_telemetry_drop_report.p4")),
    parse_section=parse_section, switch_state=switch_state, bench_states=bench_states,
    runtime=IntRuntime,
    counters=(CounterMetric("fabric_int_reports",
                            "Telemetry reports a switch sent or held back (int_report_counter), by kind",
                            (REPORT_COUNTER, DROP_LIMITED_COUNTER), label="kind", values=_report_kinds),))
