"""Control-plane side of p4src/include/nonminimal_routing.p4: Valiant and
UGAL-L routing on low-diameter topologies (Dragonfly, Slim Fly, torus).

In a topology file (validated with the rest of it, before anything starts):

    nonminimal_routing:
      mode: ugal               # valiant | ugal | dimension_order | minimal (the section's absence: minimal)
      intermediate: group      # group (a Dragonfly's: every switch has `group:`) | switch
      threshold: 0             # UGAL: packets the non-minimal product must beat the minimal one by
      stale_us: 2000           # UGAL: a port's recorded queue older than this counts as empty

dimension_order (a torus, its switches named x<i>y<j>[z<k>] as the torus
generator names them) routes x first: the source router tags every packet
for the switch in the destination's x and its own y (and z), and the tag's
shortest paths move in x only; from there minimal routing moves in y only
(on a 3D torus, in y and z).

The intermediates are numbered 0..n-1 (groups in ascending order, or
switches in file order). Per switch the controller writes:
- `nonminimal_routing`: the mode; `valiant_transit`: the switch's seed (its
  ECMP seed), for the slot of a tagged packet from another switch;
- `valiant_source`: (host port, destination) for every destination outside
  the switch's own intermediate: draw an intermediate (and with UGAL, the
  minimal path's hop count and the threshold);
- `valiant_route`: (intermediate, slot) -> the next hop toward it, every
  shortest path to its nearest switch spread over 16 slots; its own
  intermediate's slots remove the tag;
- `valiant_candidate` (UGAL): (intermediate, slot) -> that next hop's port
  and the non-minimal path's hops: the hops to the intermediate plus the
  topology's diameter (the most its second leg can take).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from control.feature import CounterMetric, Fail, FeatureSpec, Pieces, check_mapping
from control.forwarding import ECMP_SLOTS, assign_slots, ecmp_seed
from control.generators.torus import ROUTER_NAME as TORUS_SWITCH
from control.p4constants import constants
from control.p4info import EntryError, P4Info
from control.sync import SwitchState
from control.topology import Topology

SECTION = "nonminimal_routing"
MODES = ("minimal", "valiant", "ugal", "dimension_order")
INTERMEDIATES = ("group", "switch")
FIELDS = {"mode", "intermediate", "threshold", "stale_us"}
GATE_TABLE = "nonminimal_routing"
TRANSIT_TABLE = "valiant_transit"
SOURCE_TABLE = "valiant_source"
ROUTE_TABLE = "valiant_route"
CANDIDATE_TABLE = "valiant_candidate"
TABLES = (GATE_TABLE, TRANSIT_TABLE, SOURCE_TABLE, ROUTE_TABLE, CANDIDATE_TABLE)
COUNTER = "nonminimal_packets"
COUNTS = {what: constants()[f"NONMINIMAL_{key}"]     # defines.p4: the counter's cells
          for what, key in (("pushed", "PUSHED"), ("minimal", "MINIMAL"), ("reached", "REACHED"))}
DEFAULT_STALE_US = 2000
MAX_TARGETS = 1 << 16


@dataclass(frozen=True)
class NonminimalRouting:
    mode: str = "minimal"
    intermediate: str = "switch"
    threshold: int = 0
    stale_us: int = DEFAULT_STALE_US


def _groups(topo: Topology) -> Optional[dict[str, int]]:
    """Every switch's group, or None when some switch has none."""
    groups = {name: sw.group for name, sw in topo.switches.items()}
    if any(g is None for g in groups.values()):
        return None
    return groups  # type: ignore[return-value]


def parse_section(raw: Any, topo: Topology, fail: Fail) -> NonminimalRouting:
    """Validate a topology's `nonminimal_routing:` mapping."""
    check_mapping(raw, SECTION, FIELDS, fail, what="{mode, intermediate, threshold, stale_us}")
    mode = raw.get("mode", "minimal")
    if mode not in MODES:
        fail(f"{SECTION}.mode", f"expected one of {', '.join(MODES)}, got {mode!r}")
    groups = _groups(topo)
    intermediate = raw.get("intermediate", "group" if groups else "switch")
    if intermediate not in INTERMEDIATES:
        fail(f"{SECTION}.intermediate", f"expected group or switch, got {intermediate!r}")
    if mode == "dimension_order":
        if "intermediate" in raw and intermediate != "switch":
            fail(f"{SECTION}.intermediate", "dimension_order goes through switches (intermediate: switch)")
        intermediate = "switch"
        odd = next((n for n in topo.switches if not TORUS_SWITCH.match(n)), None)
        if odd is not None:
            fail(f"{SECTION}.mode", f"dimension_order needs a torus' switch names x<i>y<j>[z<k>]; {odd} is not one")
    if intermediate == "group" and groups is None:
        missing = next(n for n, sw in topo.switches.items() if sw.group is None)
        fail(f"{SECTION}.intermediate", f"group needs a group on every switch; {missing} has none")
    for field, default, low in (("threshold", 0, 0), ("stale_us", DEFAULT_STALE_US, 1)):
        v = raw.get(field, default)
        if isinstance(v, bool) or not isinstance(v, int) or not low <= v < 1 << 32:
            fail(f"{SECTION}.{field}", f"expected an integer {low}..{(1 << 32) - 1}, got {v!r}")
    if mode != "ugal":
        extra = sorted({"threshold", "stale_us"} & set(raw))
        if extra:
            fail(f"{SECTION}.{extra[0]}", f"a parameter of mode ugal, not of {mode}")
    return NonminimalRouting(mode, intermediate, raw.get("threshold", 0), raw.get("stale_us", DEFAULT_STALE_US))


def intermediates(topo: Topology, config: NonminimalRouting) -> list[frozenset[str]]:
    """The intermediates in target order: each the set of switches that count as reaching it."""
    if config.intermediate == "group":
        groups = _groups(topo) or {}
        return [frozenset(s for s, g in groups.items() if g == group) for group in sorted(set(groups.values()))]
    return [frozenset({name}) for name in topo.switches]


def routing_state(p4info: P4Info, topo: Topology, switch: str, config: NonminimalRouting) -> SwitchState:
    """The entries of `switch` for `config` (none in mode minimal)."""
    state = SwitchState(managed_tables={p4info.table(t).preamble.id for t in TABLES})
    if config.mode == "minimal":
        state.table_entries.append(p4info.default_entry(GATE_TABLE, "NoAction"))
        state.table_entries.append(p4info.default_entry(TRANSIT_TABLE, "NoAction"))
        return state
    sw = topo.switches[switch]
    targets = intermediates(topo, config)
    if len(targets) > MAX_TARGETS:
        raise EntryError(f"{len(targets)} intermediates; the tag numbers at most {MAX_TARGETS}")
    mine = next(i for i, members in enumerate(targets) if switch in members)
    hops = topo.hops_between_switches()
    diameter = max(d for row in hops.values() for d in row.values())
    seed = ecmp_seed(sw.device_id)
    gate = "ugal_on" if config.mode == "ugal" else "valiant_on"       # dimension_order: a given target
    state.table_entries.append(p4info.default_entry(GATE_TABLE, gate))
    state.table_entries.append(p4info.default_entry(TRANSIT_TABLE, "transit", {"seed": seed}))
    for t, members in enumerate(targets):
        if t == mine:
            for slot in range(ECMP_SLOTS):
                state.table_entries.append(p4info.table_entry(
                    ROUTE_TABLE, {"hdr.valiant.target": t, "meta.ecmp_slot": slot}, action="at_intermediate"))
            continue
        dist = topo.hops_from(members)
        for slot, hop in enumerate(assign_slots(topo.next_hops_nearer(switch, dist))):
            state.table_entries.append(p4info.table_entry(
                ROUTE_TABLE, {"hdr.valiant.target": t, "meta.ecmp_slot": slot}, action="to_intermediate",
                params={"port": hop.port, "src_mac": hop.src_mac, "dst_mac": hop.dst_mac}))
            if config.mode == "ugal":
                state.table_entries.append(p4info.table_entry(
                    CANDIDATE_TABLE, {"meta.nonmin.target": t, "meta.ecmp_slot": slot}, action="candidate",
                    params={"port": hop.port, "hops": dist[switch] + diameter}))
    host_ports = sorted(p.number for p in sw.ports.values() if p.peer in topo.hosts)
    for nic in topo.nics:
        if nic.switch in targets[mine] or nic.switch not in hops[switch]:
            continue
        if config.mode == "dimension_order":
            corner = _corner(switch, nic.switch)
            if corner in (switch, nic.switch):
                continue                # one dimension to correct: the minimal route is dimension-ordered
            action, params = "via", {"target": next(i for i, m in enumerate(targets) if corner in m), "seed": seed}
        elif config.mode == "ugal":
            action, params = "ugal", {"targets": len(targets), "min_hops": hops[switch][nic.switch],
                                      "threshold": config.threshold, "stale_us": config.stale_us, "seed": seed}
        else:
            action, params = "valiant", {"targets": len(targets), "seed": seed}
        for port in host_ports:
            state.table_entries.append(p4info.table_entry(
                SOURCE_TABLE, {"std_meta.ingress_port": port, "hdr.ipv4.dst_addr": nic.subnet},
                action=action, params=params))
    return state


def _corner(switch: str, destination: str) -> str:
    """The torus switch with `destination`'s x and `switch`'s other coordinates."""
    here, there = TORUS_SWITCH.match(switch), TORUS_SWITCH.match(destination)
    assert here is not None and there is not None       # parse_section checked every name
    return f"x{there.group(1)}y{here.group(2)}" + (f"z{here.group(3)}" if here.group(3) else "")


def switch_state(p4info: P4Info, topo: Topology, switch: str, *,
                 forwarding: Optional[SwitchState] = None) -> SwitchState:
    """The entries the topology file's section gives `switch` (feature interface)."""
    return routing_state(p4info, topo, switch, topo.features.get(SECTION) or NonminimalRouting())


def bench_states(p4info: P4Info, port: int) -> dict[str, SwitchState]:
    """Each mode for all traffic leaving `port`: from any of ports 0-7, every
    packet to any destination draws intermediate 0 of one, which is out of
    `port` (Valiant: every packet tagged and routed by the tag; UGAL: every
    packet compared, and with empty queues kept minimal); and "transit":
    Valiant on, the packets untagged and not from a host (what a switch on
    the way pays for minimally routed traffic)."""
    out = {}
    for mode in ("valiant", "ugal"):
        state = SwitchState(managed_tables={p4info.table(t).preamble.id for t in TABLES})
        state.table_entries.append(p4info.default_entry(GATE_TABLE, f"{mode}_on"))
        state.table_entries.append(p4info.default_entry(TRANSIT_TABLE, "transit", {"seed": 0x5A5B}))
        params = {"targets": 1, "seed": 0x5A5B} if mode == "valiant" else {
            "targets": 1, "min_hops": 2, "threshold": 0, "stale_us": DEFAULT_STALE_US, "seed": 0x5A5B}
        for ingress in range(8):
            if ingress != port:
                state.table_entries.append(p4info.table_entry(
                    SOURCE_TABLE, {"std_meta.ingress_port": ingress, "hdr.ipv4.dst_addr": "0.0.0.0/0"},
                    action=mode, params=params))
        for slot in range(ECMP_SLOTS):
            state.table_entries.append(p4info.table_entry(
                ROUTE_TABLE, {"hdr.valiant.target": 0, "meta.ecmp_slot": slot}, action="to_intermediate",
                params={"port": port, "src_mac": "0a:00:00:00:02:01", "dst_mac": "0a:00:02:00:00:01"}))
            if mode == "ugal":
                state.table_entries.append(p4info.table_entry(
                    CANDIDATE_TABLE, {"meta.nonmin.target": 0, "meta.ecmp_slot": slot}, action="candidate",
                    params={"port": port, "hops": 4}))
        out[mode] = state
    transit = SwitchState(managed_tables={p4info.table(t).preamble.id for t in TABLES})
    transit.table_entries += [p4info.default_entry(GATE_TABLE, "valiant_on"),
                              p4info.default_entry(TRANSIT_TABLE, "transit", {"seed": 0x5A5B})]
    out["transit"] = transit        # on, but no packet here is at its source or tagged: a switch on the way
    return out


class NonminimalRoutingRuntime:
    """controller.feature("nonminimal_routing"): the routing changed at runtime."""

    def __init__(self, controller):
        self.ctl = controller

    @property
    def config(self) -> NonminimalRouting:
        return self.ctl.topo.features.get(SECTION) or NonminimalRouting()

    def configure(self, section: dict) -> dict:
        """Validate a whole new section (as in a topology file) and reprogram
        every switch; a bad section changes nothing."""
        def fail(field: str, what: str):
            raise EntryError(f"{field}: {what}")
        config = parse_section(section, self.ctl.topo, fail)
        return self.apply(config)

    def set_mode(self, mode: str) -> dict:
        """Switch between minimal, valiant, ugal and dimension_order, keeping
        the intermediates (between valiant and ugal) and UGAL's parameters."""
        config = self.config
        section: dict = {"mode": mode}
        if mode in ("valiant", "ugal") and config.mode in ("valiant", "ugal"):
            section["intermediate"] = config.intermediate
        if mode == "ugal":
            section.update(threshold=config.threshold, stale_us=config.stale_us)
        return self.configure(section)

    def apply(self, config: NonminimalRouting) -> dict:
        self.ctl.topo.features[SECTION] = config
        return {name: self.ctl.program_switch(name) for name in self.ctl.topo.switches}

    def packets(self) -> dict[str, dict[str, int]]:
        """Per switch: tags pushed, packets UGAL kept minimal, tags removed."""
        out = {}
        for name, conn in self.ctl.connections.items():
            out[name] = {what: int(n) for what, n in _counts({COUNTER: conn.counter(
                self.ctl.p4info.counter_entry(COUNTER))}).items()}
        return out


def _counts(cells) -> dict[str, float]:
    """nonminimal_packets' cells by what they count."""
    return {what: float(cells[COUNTER].get(i, (0, 0))[0]) for what, i in COUNTS.items()}


FEATURE = FeatureSpec(
    name="nonminimal_routing", section=SECTION,
    summary="Valiant and UGAL-L routing through an intermediate group or switch (Dragonfly, Slim Fly, torus); "
            "dimension-order routing on a torus",
    pieces=Pieces.of("nonminimal_routing", host=False),
    parse_section=parse_section, switch_state=switch_state, bench_states=bench_states,
    bench_what="every packet from ports 0-7 through intermediate 0, out of the bench port",
    runtime=NonminimalRoutingRuntime,
    counters=(CounterMetric("fabric_nonminimal_packets",
                            "nonminimal_packets: Valiant tags pushed, packets UGAL kept minimal, tags removed",
                            (COUNTER,), label="what", values=_counts),))
