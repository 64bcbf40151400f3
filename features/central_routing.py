"""Control-plane side of p4src/include/central_routing.p4: a central
controller that routes a training job's predictable traffic ahead of time.

It takes the job's traffic matrix (flows and their bytes), gives every flow
one of its shortest paths so that the most loaded link direction carries as
few bytes as it can (control/path_assignment.py: greedy largest-first, then
local search), and installs each path on the switches along it, ahead of
ECMP. After a link or switch failure, `recompute` assigns again in the
graph that survives and reinstalls.

In a topology file (validated with the rest of it, before anything starts):

    central_routing:
      flows:                        # the traffic matrix; absent or []: nothing pinned, the feature off
        - {src: h1, dst: h3, sport: 49152, bytes: 150000000}
        - {src: 10.0.3.1, dst: h1, sport: 49153, bytes: 150000000, protocol: udp, dport: 4791}
      failed_links: [[leaf1, spine1]]   # paths avoid these switch-to-switch links
      failed_switches: []               # and these switches (e.g. [spine2])

A flow's `src` and `dst` are a host (one NIC), `host.nic`, or a NIC's
address; `sport` its UDP (or TCP) source port, `bytes` what it carries
(an integer >= 1); `protocol` udp (default) or tcp; `dport` (default 4791,
RoCEv2) is not matched on (INT rewrites it after a watched flow's first
switch) and only tells models of ECMP's hash which port the flow uses. Two
flows may not share (src, dst, protocol, sport): the switches match on it.

Per switch the controller writes `central_routing` (keyless: central_on
where the switch has a flow's entry, else NoAction) and `central_route`:
(src, dst, protocol, sport) -> pinned(port, src_mac, dst_mac) for every
flow whose path leaves the switch toward another switch (the last switch
routes to the host as always). The entry acts where the switch routes the
flow's destination through an ECMP group; elsewhere there is one next hop,
which a shortest path takes anyway.

    cr = controller.feature("central_routing")
    cr.route(flows)                   # compute, install on every switch; -> Assignment (max_load)
    cr.recompute(failed_links=[("leaf1", "spine1")])   # again, around what failed
    cr.clear()                        # no flow pinned, the gate off
"""
from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, NoReturn, Optional, Sequence

from control.feature import Fail, FeatureSpec, Pieces, check_mapping
from control.p4info import EntryError, P4Info
from control.path_assignment import IP_PROTO_TCP, IP_PROTO_UDP, Assignment, Flow, route_flows
from control.sync import SwitchState
from control.topology import Failures, NextHop, Nic, Topology
from wire.roce import ROCEV2_UDP_PORT

SECTION = "central_routing"
FIELDS = {"flows", "failed_links", "failed_switches"}
FLOW_FIELDS = {"src", "dst", "sport", "bytes", "protocol", "dport"}
PROTOCOLS = {"udp": IP_PROTO_UDP, "tcp": IP_PROTO_TCP}
GATE_TABLE = "central_routing"
ROUTE_TABLE = "central_route"
TABLES = (GATE_TABLE, ROUTE_TABLE)
BENCH_SRC, BENCH_DST, BENCH_SPORTS = "10.0.1.1", "10.0.2.1", range(5000, 5008)   # benchmarks/cases.py frames()


@dataclass(frozen=True)
class CentralRouting:
    """The parsed section: the flows, what to avoid, and the assignment."""
    flows: tuple[Flow, ...] = ()
    failed: Failures = field(default_factory=Failures)
    assignment: Optional[Assignment] = None

    @property
    def max_load(self) -> int:
        return self.assignment.max_load if self.assignment else 0


def _address(raw: Any, topo: Topology, where: str, fail: Fail) -> Nic:
    """A NIC by host name, host.nic or address."""
    if not isinstance(raw, str) or not raw:
        fail(where, f"expected a host, host.nic or a NIC's address, got {raw!r}")
    try:
        ipaddress.IPv4Address(raw)
    except ValueError:
        try:
            return topo.nic(raw)
        except KeyError as e:
            fail(where, str(e.args[0]))
    nic = next((n for n in topo.nics if n.ip == raw), None)
    if nic is None:
        fail(where, f"no host NIC has address {raw}")
    return nic


def _int(raw: Mapping, key: str, where: str, low: int, high: int, fail: Fail, default: Optional[int] = None) -> int:
    v = raw.get(key, default)
    if isinstance(v, bool) or not isinstance(v, int) or not low <= v <= high:
        fail(f"{where}.{key}", f"expected an integer {low}..{high}, got {v!r}")
    return v


def parse_flow(raw: Any, topo: Topology, where: str, fail: Fail) -> Flow:
    """One flow of the section (or of route()): a mapping, or a Flow whose addresses are checked."""
    if isinstance(raw, Flow):
        raw = {"src": raw.src, "dst": raw.dst, "sport": raw.sport, "bytes": raw.bytes, "dport": raw.dport,
               "protocol": next((k for k, v in PROTOCOLS.items() if v == raw.protocol), raw.protocol)}
    check_mapping(raw, where, FLOW_FIELDS, fail, what="{src, dst, sport, bytes[, protocol, dport]}")
    for key in ("src", "dst", "sport", "bytes"):
        if key not in raw:
            fail(f"{where}.{key}", "missing")
    src = _address(raw["src"], topo, f"{where}.src", fail)
    dst = _address(raw["dst"], topo, f"{where}.dst", fail)
    if src.host == dst.host:
        fail(f"{where}.dst", f"{dst.label} is on the source's host")
    sport = _int(raw, "sport", where, 0, 0xFFFF, fail)
    size = _int(raw, "bytes", where, 1, (1 << 63) - 1, fail)
    dport = _int(raw, "dport", where, 0, 0xFFFF, fail, ROCEV2_UDP_PORT)
    protocol = raw.get("protocol", "udp")
    if protocol not in PROTOCOLS:
        fail(f"{where}.protocol", f"expected udp or tcp, got {protocol!r}")
    return Flow(src.ip, dst.ip, sport, size, dport, PROTOCOLS[protocol])


def parse_failures(raw: Mapping, topo: Topology, fail: Fail) -> Failures:
    links = raw.get("failed_links", [])
    if not isinstance(links, (list, tuple)):
        fail(f"{SECTION}.failed_links", f"expected a list of [switch, switch] pairs, got {links!r}")
    pairs = set()
    for i, link in enumerate(links):
        where = f"{SECTION}.failed_links[{i}]"
        if not isinstance(link, (list, tuple)) or len(link) != 2:
            fail(where, f"expected a pair [switch, switch], got {link!r}")
        a, b = link
        for end in (a, b):
            if end not in topo.switches:
                fail(where, f"unknown switch {end!r}")
        if not any(p.peer == b for p in topo.switches[a].ports.values()):
            fail(where, f"no link between {a} and {b}")
        pairs.add(frozenset((a, b)))
    switches = raw.get("failed_switches", [])
    if not isinstance(switches, (list, tuple)):
        fail(f"{SECTION}.failed_switches", f"expected a list of switches, got {switches!r}")
    for i, s in enumerate(switches):
        if not isinstance(s, str) or s not in topo.switches:
            fail(f"{SECTION}.failed_switches[{i}]", f"unknown switch {s!r}")
    return Failures(frozenset(pairs), frozenset(switches))


def parse_section(raw: Any, topo: Topology, fail: Fail) -> CentralRouting:
    """Validate a topology's `central_routing:` mapping and assign the paths
    (a flow no path reaches fails naming it)."""
    if raw is None:
        raw = {}
    check_mapping(raw, SECTION, FIELDS, fail, what="{flows, failed_links, failed_switches}")
    flows_raw = raw.get("flows", [])
    if flows_raw is None:
        flows_raw = []
    if not isinstance(flows_raw, (list, tuple)):
        fail(f"{SECTION}.flows", f"expected a list of flows, got {flows_raw!r}")
    flows: list[Flow] = []
    seen: dict[tuple, int] = {}
    for i, item in enumerate(flows_raw):
        where = f"{SECTION}.flows[{i}]"
        flow = parse_flow(item, topo, where, fail)
        if flow.key in seen:
            fail(where, f"the same (src, dst, protocol, sport) as flows[{seen[flow.key]}]: the switches match on it")
        seen[flow.key] = i
        flows.append(flow)
    failed = parse_failures(raw, topo, fail)
    if not flows:
        return CentralRouting((), failed, None)
    try:
        assignment = route_flows(topo, flows, failed)
    except ValueError as e:
        text = str(e)                   # "flow <i> (<flow>): why", from route_flows
        if text.startswith("flow "):
            _, index, rest = text.split(" ", 2)
            fail(f"{SECTION}.flows[{index}]", rest)
        fail(f"{SECTION}.flows", text)
    return CentralRouting(tuple(flows), failed, assignment)


def _hops(topo: Topology, switch: str, config: CentralRouting) -> list[tuple[Flow, int]]:
    """(flow, egress port) of every flow whose path leaves `switch` toward another switch."""
    if config.assignment is None:
        return []
    return [(flow, port) for flow, path in zip(config.assignment.flows, config.assignment.paths)
            for sw, port in path if sw == switch]


def empty_state(p4info: P4Info) -> SwitchState:
    """No entry, both tables managed (reconciliation removes what is there)."""
    return SwitchState(managed_tables={p4info.table(t).preamble.id for t in TABLES})


def gate_entry(p4info: P4Info, on: bool):
    """The keyless gate: central_on (look flows up) or NoAction (off)."""
    return p4info.default_entry(GATE_TABLE, "central_on" if on else "NoAction")


def flow_entry(p4info: P4Info, flow: Flow, hop: NextHop):
    """central_route: `flow` leaves by `hop` (its port and MACs)."""
    return p4info.table_entry(ROUTE_TABLE, {
        "hdr.ipv4.src_addr": flow.src, "hdr.ipv4.dst_addr": flow.dst,
        "hdr.ipv4.protocol": flow.protocol, "meta.l4_src_port": flow.sport},
        action="pinned", params={"port": hop.port, "src_mac": hop.src_mac, "dst_mac": hop.dst_mac})


def routing_state(p4info: P4Info, topo: Topology, switch: str, config: CentralRouting) -> SwitchState:
    """The entries of `switch` for `config`: the gate, and its flows' next hops."""
    state = empty_state(p4info)
    hops = _hops(topo, switch, config) if switch not in config.failed.switches else []
    state.table_entries.append(gate_entry(p4info, bool(hops)))
    sw = topo.switches[switch]
    for flow, port in hops:
        p = sw.ports[port]
        assert p.peer_port is not None
        state.table_entries.append(flow_entry(p4info, flow, NextHop(
            port, p.mac, topo.switches[p.peer].ports[p.peer_port].mac, p.peer)))
    return state


def switch_state(p4info: P4Info, topo: Topology, switch: str, *,
                 forwarding: Optional[SwitchState] = None) -> SwitchState:
    """The entries the topology file's section gives `switch` (feature interface)."""
    return routing_state(p4info, topo, switch, topo.features.get(SECTION) or CentralRouting())


def bench_states(p4info: P4Info, port: int) -> dict[str, SwitchState]:
    """"pinned": every flow the bench sends (benchmarks/cases.py frames():
    10.0.1.1 -> 10.0.2.1, UDP source ports 5000-5007) has an entry, out of
    `port`; "miss": the gate on and 8 entries, none of them the bench's
    flows (what a flow without an assigned path pays while the feature is on)."""
    out = {}
    hop = NextHop(port, "0a:00:00:00:02:01", "0a:00:02:00:00:03")
    for mode, sports in (("pinned", BENCH_SPORTS), ("miss", range(6000, 6008))):
        state = empty_state(p4info)
        state.table_entries.append(gate_entry(p4info, True))
        state.table_entries += [flow_entry(p4info, Flow(BENCH_SRC, BENCH_DST, sport, 1), hop) for sport in sports]
        out[mode] = state
    return out


class CentralRoutingRuntime:
    """controller.feature("central_routing"): paths assigned, recomputed, cleared at runtime."""

    def __init__(self, controller):
        self.ctl = controller

    @property
    def config(self) -> CentralRouting:
        return self.ctl.topo.features.get(SECTION) or CentralRouting()

    @property
    def assignment(self) -> Optional[Assignment]:
        return self.config.assignment

    def configure(self, section: Mapping) -> CentralRouting:
        """Validate a whole section (as in a topology file), assign, and
        reprogram every switch; a bad section changes nothing."""
        def fail(where: str, what: str) -> NoReturn:
            raise EntryError(f"{where}: {what}")
        config = parse_section(dict(section), self.ctl.topo, fail)
        self.ctl.topo.features[SECTION] = config
        for name in self.ctl.topo.switches:
            if name not in config.failed.switches:
                self.ctl.program_switch(name)
        return config

    def _section(self, flows: Iterable[Any], failed: Failures) -> dict:
        return {"flows": list(flows), "failed_links": [sorted(link) for link in sorted(failed.links, key=sorted)],
                "failed_switches": sorted(failed.switches)}

    def route(self, flows: Sequence[Any]) -> Assignment:
        """Assign paths to `flows` (Flow objects or the section's mappings),
        keeping the failures recompute() was given, and install them on every
        switch (entries of flows no longer given are removed). Calling it
        again with the same flows writes nothing."""
        config = self.configure(self._section(flows, self.config.failed))
        assert config.assignment is not None or not flows
        return config.assignment or Assignment((), (), ())

    def recompute(self, failed_links: Optional[Iterable[Sequence[str]]] = None,
                  failed_switches: Optional[Iterable[str]] = None) -> Assignment:
        """Assign the same flows again around failed links and switches
        (None: the controller's own failures, from its reroute(); [] in both:
        none) and reinstall; a failed switch is not written to."""
        own: Failures = getattr(self.ctl, "failed", None) or Failures()
        section = self._section(self.config.flows, own)
        if failed_links is not None:
            section["failed_links"] = [list(link) for link in failed_links]
        if failed_switches is not None:
            section["failed_switches"] = list(failed_switches)
        config = self.configure(section)
        return config.assignment or Assignment((), (), ())

    def clear(self) -> dict:
        """No flow pinned: every entry removed, the gate off."""
        self.configure({})
        return {"flows": 0}

    def summary(self) -> str:
        """The flows, their paths and the most loaded link."""
        a = self.assignment
        if a is None:
            return "central routing: no flows"
        lines = [f"{flow}: {' -> '.join(sw)}" for flow, sw in zip(a.flows, a.switches)]
        return "\n".join([*lines, f"max link load: {a.max_load} B"])

    def packets(self) -> dict[str, int]:
        """Per switch: packets its central_route entries pinned."""
        table = self.ctl.p4info.table(ROUTE_TABLE).preamble.id
        return {name: sum(n for _, n in conn.direct_counters(table)) for name, conn in self.ctl.connections.items()}


FEATURE = FeatureSpec(
    name="central_routing", section=SECTION,
    summary="a central controller assigns a training job's flows the shortest paths that minimise the most "
            "loaded link, installed ahead of ECMP; recomputed after failures",
    pieces=Pieces.of("central_routing", host=False),
    parse_section=parse_section, switch_state=switch_state, bench_states=bench_states,
    runtime=CentralRoutingRuntime)
