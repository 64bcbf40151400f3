"""Control-plane side of p4src/include/trimming.p4: packet trimming per egress
port and queue (Ultra Ethernet 1.0's network layer). docs/features/trimming.md.

In a topology file (validated with the rest of it, before anything starts):

    trimming:
      - {switch: leaf1, towards: h1, threshold: 8, header_queue: 1, dscp: 5, bytes: 64}
      - {switch: leaf1, port: 3, threshold: 16}
      - {switch: spine1, port: all, queue: 0, threshold: 12}
      - {switch: all, towards: h4, threshold: 16}

A packet bound for (port, queue) while that queue holds `threshold` packets
or more leaves as its first `bytes` bytes, marked `dscp`, in priority queue
`header_queue` (strict priority, above `queue`; never trimmed). `queue` is
0 (the only queue without traffic classes) unless given. Defaults:
header_queue 1 (2 queues a port); dscp 5; bytes 64 (Ethernet, IPv4, UDP,
RoCEv2's BTH and 10 bytes more). With a `lossless:` section the header
queue must be named, and neither it nor the trimmed queue may be a
lossless class's queue or the hold queue, nor the header queue any class's:
a lossless class is never trimmed, and the header queue is trimming's alone.

The threshold must stay below the queue's depth in BMv2 (64 packets): then
the traffic manager never drops a packet the switch counted, and the count
it trims by stays exact (trimming.p4).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Mapping

from control.feature import CounterMetric, Fail, FeatureSpec, Pieces, QueuePlan, QueueSetting, priority_queues, \
    section_items
from control.p4info import EntryError, P4Info
from control.sync import SwitchState
from emulator.network import BMV2_QUEUE_DEPTH, QUEUE_RATE_PACKET_BYTES, queue_rate_pps
from emulator.queue_depth import QUEUES
from wire.int_telemetry import INT_DSCP
from wire.trimming import MIN_TRIM_BYTES, TRIM_BYTES, TRIMMED_DSCP

SECTION = "trimming"
TABLE = "trim_queue"
TRIM_COUNTER = "trim_counter"
HEADER_QUEUE = 1
MAX_TRIM_BYTES = 9216             # a jumbo frame: more is not a header
PORT_BITS = 9                     # a cell is priority ++ port (trimming.p4)
FIELDS = {"switch", "port", "towards", "queue", "threshold", "header_queue", "dscp", "bytes"}


@dataclass(frozen=True)
class TrimProfile:
    """One (port, queue)'s trimming: from `threshold` packets queued, a packet
    leaves as its first `bytes` bytes, marked `dscp`, in `header_queue`."""
    threshold: int
    header_queue: int = HEADER_QUEUE
    dscp: int = TRIMMED_DSCP
    bytes: int = TRIM_BYTES
    on: bool = True           # False: switched off at runtime; its header queue stays (a switch's count is fixed)

    def params(self, port: int, queue: int) -> dict[str, int]:
        """trim_above's parameters for (port, queue): `cell` indexes its counts as trimming.p4 does."""
        return {"threshold": self.threshold, "header_queue": self.header_queue, "trimmed_dscp": self.dscp,
                "trim_bytes": self.bytes, "cell": cell(port, queue)}

    def __str__(self) -> str:
        return f"trim from {self.threshold} queued to {self.bytes} B, DSCP {self.dscp}, queue {self.header_queue}"


ProfileKey = tuple[str, int, int]      # (switch, port, queue)


def cell(port: int, queue: int) -> int:
    """The (port, queue)'s index in trimming.p4's registers and counter: queue ++ port."""
    return queue << PORT_BITS | port


def _integer(item: Mapping, key: str, where: str, fail: Fail, lo: int, hi: int, default: int | None,
             what: str) -> int:
    if key not in item and default is not None:
        return default
    v = item.get(key)
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        fail(f"{where}.{key}", f"expected {what}, {lo}..{hi}, got {v!r}")
    return v


def parse_section(raw: Any, topo, fail: Fail) -> dict[ProfileKey, TrimProfile]:
    """Validate a topology's `trimming:` list -> {(switch, port, queue): profile}.
    Parsed after `lossless:` (features.FEATURES' order), whose queues it keeps clear of."""
    classes = topo.features.get("lossless")
    taken: dict[str, dict[int, str]] = {"queue": {}, "header_queue": {}}     # queue -> whose, by field
    class_dscps: dict[int, str] = {}
    if classes is not None:
        hold = {classes.hold_queue: "the lossless hold queue"}
        taken["queue"] = {c.queue: f"lossless class {c.name}'s queue (never trimmed)"
                          for c in classes.lossless} | hold
        taken["header_queue"] = {c.queue: f"class {c.name}'s queue (the header queue is trimming's alone)"
                                 for c in classes.classes} | hold
        class_dscps = {d: c.name for c in classes.classes for d in c.dscp}
    profiles: dict[ProfileKey, TrimProfile] = {}
    for where, item, name in section_items(raw, SECTION, FIELDS, topo, fail, allow_all=True,
                                           what="{switch, port|towards, queue, threshold, header_queue, dscp, bytes}"):
        if ("port" in item) == ("towards" in item):
            fail(where, "give exactly one of port (a number or 'all') and towards (a neighbour's name)")
        queue = _integer(item, "queue", where, fail, 0, QUEUES - 2, 0, "a priority queue below the header queue")
        if classes is not None and "header_queue" not in item:
            fail(where, "with a lossless: section, name the header_queue (one no traffic class uses)")
        header_queue = _integer(item, "header_queue", where, fail, queue + 1, QUEUES - 1, HEADER_QUEUE,
                                f"a priority queue above the trimmed queue ({queue})")
        for key, q in (("queue", queue), ("header_queue", header_queue)):
            if q in taken[key]:
                fail(f"{where}.{key}", f"queue {q} is {taken[key][q]}")
        if classes is not None and header_queue >= classes.queues:
            fail(f"{where}.header_queue", f"the switches run {classes.queues} queues a port (lossless.queues)")
        dscp = _integer(item, "dscp", where, fail, 0, 63, TRIMMED_DSCP, "a DSCP")
        if dscp == INT_DSCP:
            fail(f"{where}.dscp", f"DSCP {INT_DSCP} announces INT over TCP: a trimmed packet needs its own")
        if dscp in class_dscps:
            fail(f"{where}.dscp", f"DSCP {dscp} is traffic class {class_dscps[dscp]}'s: a trimmed packet needs its own")
        profile = TrimProfile(
            threshold=_integer(item, "threshold", where, fail, 1, BMV2_QUEUE_DEPTH - 1, None,
                               f"packets queued, below the queue's depth in BMv2 ({BMV2_QUEUE_DEPTH})"),
            header_queue=header_queue, dscp=dscp,
            bytes=_integer(item, "bytes", where, fail, MIN_TRIM_BYTES, MAX_TRIM_BYTES, TRIM_BYTES,
                           "bytes kept (Ethernet, IPv4 and UDP headers at least)"))
        matched = 0
        for sw in (topo.switches if name == "all" else [name]):
            ports = _ports(topo, sw, item, where, fail)
            matched += len(ports)
            for port in ports:
                if (sw, port, queue) in profiles:
                    fail(where, f"{sw} port {port} queue {queue} already has a trimming entry")
                profiles[(sw, port, queue)] = profile
        if not matched:
            fail(f"{where}.towards", f"no switch has a link to {item['towards']!r}")
    return profiles


def _ports(topo, switch: str, item: Mapping, where: str, fail: Fail) -> list[int]:
    sw = topo.switches[switch]
    if "towards" in item:
        ports = [p.number for p in sw.ports.values() if p.peer == item["towards"]]
        if not ports and item.get("switch") != "all":
            fail(f"{where}.towards", f"{switch} has no link to {item['towards']!r}")
        return ports
    if item["port"] == "all":
        return sorted(sw.ports)
    if item["port"] not in sw.ports:
        fail(f"{where}.port", f"{switch} has no port {item['port']!r} (ports: {sorted(sw.ports)})")
    return [item["port"]]


def trimming_state(p4info: P4Info, profiles: Mapping[tuple[int, int], TrimProfile]) -> SwitchState:
    """Entities for one switch: {(egress port, queue): profile}. Others are never trimmed."""
    state = SwitchState(managed_tables={p4info.table(TABLE).preamble.id})
    for (port, queue), profile in sorted(profiles.items()):
        if not profile.on:
            continue
        state.table_entries.append(p4info.table_entry(TABLE, {"std_meta.egress_spec": port, "std_meta.priority": queue},
                                                      action="trim_above", params=profile.params(port, queue)))
    return state


def _mine(topo, switch: str) -> dict[tuple[int, int], TrimProfile]:
    return {(port, q): p for (sw, port, q), p in topo.features.get(SECTION, {}).items() if sw == switch}


def switch_state(p4info: P4Info, topo, switch: str, *, forwarding: "SwitchState | None" = None) -> SwitchState:
    """The trimming entries the topology file gives `switch` (feature interface)."""
    return trimming_state(p4info, _mine(topo, switch))


def header_rate_pps(bandwidth_mbps: float, trim_bytes: int) -> int:
    """The header queue's service rate: a header's own serialization time on
    the link (BMv2 rates queues in packets/s, a link's rate assumes
    QUEUE_RATE_PACKET_BYTES-byte packets)."""
    return max(1, queue_rate_pps(bandwidth_mbps) * QUEUE_RATE_PACKET_BYTES // trim_bytes)


def queues(topo, switch: str) -> QueuePlan:
    """Queues 0..the highest header queue on every port; each header queue
    served at its headers' byte rate."""
    mine = _mine(topo, switch)
    if not mine:
        return QueuePlan()
    ports = topo.switches[switch].ports
    settings = {(port, p.header_queue): QueueSetting(rate_pps=header_rate_pps(ports[port].link.bandwidth_mbps,
                                                                               p.bytes))
                for (port, _), p in mine.items()}
    return QueuePlan(count=max(p.header_queue for p in mine.values()) + 1, settings=settings)


def bench_states(p4info: P4Info, port: int) -> dict[str, SwitchState]:
    """`make bench`'s worst cases on a switch with one queue a port (the header
    queue is then queue 0): "count", every packet counted in and out of its
    queue (never trimmed); "trim", every packet longer than 64 bytes trimmed."""
    return {"count": trimming_state(p4info, {(port, 0): TrimProfile(BMV2_QUEUE_DEPTH - 1, header_queue=0)}),
            "trim": trimming_state(p4info, {(port, 0): TrimProfile(0, header_queue=0)})}


class TrimmingRuntime:
    """controller.feature("trimming"): a (port, queue)'s trimming changed at runtime."""

    def __init__(self, controller):
        self.ctl = controller

    def set_profile(self, switch: str, port: int, profile: "TrimProfile | None", *, queue: int = 0):
        """Change (or switch off, with None) the trimming of one egress port's
        queue. The header queue must be one the switch runs: their count is
        fixed when it starts (a profile switched off keeps its queue counted)."""
        return self.set_profiles({(switch, port, queue): profile})[switch]

    def set_profiles(self, changes: Mapping[tuple[str, int, int], "TrimProfile | None"]) -> dict:
        """set_profile for each (switch, port, queue) -> profile of `changes`,
        every one checked before any is applied, each switch programmed once
        (a switch's sync reads and compares its whole state). The switches'
        sync reports."""
        topo = self.ctl.topo
        for (switch, port, queue), profile in changes.items():
            if switch not in topo.switches:
                raise EntryError(f"no switch {switch!r}")
            if port not in topo.switches[switch].ports:
                raise EntryError(f"{switch} has no port {port}")
            running = priority_queues(topo, switch)
            if profile is not None and not queue < profile.header_queue < running:
                raise EntryError(f"{switch} runs queues 0..{running - 1}: the header queue ({profile.header_queue}) "
                                 f"must be one of them, above the trimmed queue ({queue})")
        profiles = topo.features.setdefault(SECTION, {})
        for key, profile in changes.items():
            if profile is not None:
                profiles[key] = profile
            elif key in profiles:                       # off, its header queue still counted (queues())
                profiles[key] = replace(profiles[key], on=False)
        return {switch: self.ctl.program_switch(switch) for switch in dict.fromkeys(sw for sw, _, _ in changes)}


def _cells(sw) -> list[int]:
    """trim_counter's cells of a switch's ports: each of their queues."""
    return [cell(port, queue) for port in sw.ports for queue in range(QUEUES)]


def _per_cell(read) -> dict[str, float]:
    """trim_counter's packets by "port/queue"."""
    mask = (1 << PORT_BITS) - 1
    return {f"{i & mask}/{i >> PORT_BITS}": float(packets)
            for i, (packets, _) in sorted(read[TRIM_COUNTER].items()) if packets}


FEATURE = FeatureSpec(
    name="trimming", section=SECTION,
    summary="packet trimming (Ultra Ethernet): a packet bound for a full queue leaves as its headers, in a header queue",
    pieces=Pieces.of("trimming", host=False, experiments=("trimming_incast",)),
    parse_section=parse_section, switch_state=switch_state, bench_states=bench_states, queues=queues,
    runtime=TrimmingRuntime,
    bench_what="trimming on for all traffic: every packet counted (count) or trimmed (trim)",
    counters=(CounterMetric("fabric_trimmed", "trim_counter: packets trimmed, by the (port/queue) they would have "
                            "joined", (TRIM_COUNTER,), label="port_queue", values=_per_cell, cells=_cells),))
