"""Control-plane side of p4src/include/load_balancing.p4: the load-balancing
mode of each switch's ECMP groups.

In a topology file (validated with the rest of it, before anything starts):

    load_balancing:
      - {switch: all, mode: flowlet, flowlet_gap_us: 20000}
      - {switch: leaf1, mode: spray}
      - {switch: spine1, mode: adaptive, queue_stale_us: 2000}
      - {switch: leaf1, prefix: 10.0.3.0/24, mode: ecmp}

`switch` is a switch name or `all` (later items override earlier ones for
the switches they name). Modes: `ecmp` (the 5-tuple hash: no entry at all),
`flowlet` (flowlet_gap_us, default 20000), `spray`, `adaptive`
(queue_stale_us, default 20000: how long a port's recorded queue depth is
believed). The defaults suit BMv2 ports serving hundreds of packets/s; a
gap or staleness below the time between a port's packets turns both modes
into spraying. Every ECMP group of a switch gets its switch's mode, unless an
item with `prefix` gives the group that destination prefix routes to its
own (prefixes with the same next hops share a group, so they must agree).

controller.feature("load_balancing").set_mode(switch, mode[, prefix]) changes one at runtime.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, NoReturn, Optional

from control.forwarding import ECMP_SLOTS, LPM_TABLE, NEXT_HOP_TABLE, ecmp_seed, forwarding_state, slots_on_switch
from control.p4constants import constants
from control.feature import Fail, FeatureSpec, Pieces, section_items
from control.p4info import EntryError, P4Info
from control.sync import SwitchState
from control.topology import NextHop

SECTION = "load_balancing"
GROUP_TABLE = "lb_group"
CANDIDATE_TABLES = ("lb_candidate_a", "lb_candidate_b")
FLOWLETS_COUNTER = "flowlets_started"
MEMBER_COUNTER = "next_hop_packets"       # direct counter of next_hop: packets per (group, slot)
LB_GROUPS = constants()["LB_GROUPS"]
MODES = ("ecmp", "flowlet", "spray", "adaptive")
FIELDS = {"switch", "prefix", "mode", "flowlet_gap_us", "queue_stale_us"}
BENCH_NEXT_ID = 1                         # benchmarks/cases.py routes through ECMP group 1
BENCH_MODES = ("flowlet", "spray", "adaptive")


@dataclass(frozen=True)
class LbMode:
    # Defaults at this project's BMv2 time scale: links serve hundreds of
    # packets/s (a few ms between a port's packets), so a sub-millisecond gap
    # would start a flowlet at every packet and a sub-millisecond staleness
    # would forget every recorded queue: both would turn into spraying.
    mode: str = "ecmp"
    flowlet_gap_us: int = 20_000
    queue_stale_us: int = 20_000

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any], fail: Optional[Callable[[str, str], None]] = None) -> "LbMode":
        def bad(field: str, what: str) -> NoReturn:
            if fail:
                fail(field, what)
            raise ValueError(f"{field}: {what}")

        mode = raw.get("mode")
        if mode not in MODES:
            bad("mode", f"expected one of {', '.join(MODES)}, got {mode!r}")
        allowed = {"flowlet": {"flowlet_gap_us"}, "adaptive": {"queue_stale_us"}}.get(mode, set())
        for key in ("flowlet_gap_us", "queue_stale_us"):
            if key in raw and key not in allowed:
                bad(key, f"not a parameter of mode {mode}")
        kw = {}
        for key in allowed:
            if key in raw:
                v = raw[key]
                if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v < 2**31:
                    bad(key, f"expected microseconds, 1..{2**31 - 1}, got {v!r}")
                kw[key] = v
        return cls(mode, **kw)

    def action(self) -> Optional[tuple[str, dict]]:
        """lb_group's action for this mode (None: ECMP, no entry)."""
        if self.mode == "flowlet":
            return "flowlet", {"flowlet_gap_us": self.flowlet_gap_us}
        if self.mode == "spray":
            return "spray", {}
        if self.mode == "adaptive":
            return "adaptive", {"queue_stale_us": self.queue_stale_us}
        return None

    def __str__(self) -> str:
        if self.mode == "flowlet":
            return f"flowlet (gap {self.flowlet_gap_us} us)"
        if self.mode == "adaptive":
            return f"adaptive (queue believed {self.queue_stale_us} us)"
        return self.mode


@dataclass
class SwitchModes:
    """One switch's modes: its groups' default, and by destination prefix."""
    default: LbMode = field(default_factory=LbMode)
    prefixes: dict[str, LbMode] = field(default_factory=dict)


def _hop_set(route) -> frozenset:
    return frozenset((h.port, h.dst_mac) for h in route.next_hops)


def check_prefix(topo, switch: str, prefix: str, mode: LbMode, others: Mapping[str, LbMode]) -> Optional[str]:
    """What is wrong with giving `prefix`'s group on `switch` `mode` (None: nothing)."""
    routes = {r.prefix: r for r in topo.routes()[switch]}
    if prefix not in routes:
        return f"{switch} has no route {prefix} (its routes: {', '.join(sorted(routes)) or 'none'})"
    hops = _hop_set(routes[prefix])
    if len(hops) < 2:
        return f"{switch} routes {prefix} through one next hop: there is no group to balance"
    for other, other_mode in others.items():
        if other != prefix and other in routes and _hop_set(routes[other]) == hops and other_mode != mode:
            return f"{prefix} and {other} share an ECMP group on {switch}; a group has one mode"
    return None


def parse_section(raw: Any, topo, fail: Fail) -> dict[str, SwitchModes]:
    """Validate a topology's `load_balancing:` list -> {switch: its modes}."""
    modes: dict[str, SwitchModes] = {}
    for where, item, name in section_items(raw, SECTION, FIELDS, topo, fail, what="{switch, mode, ...}",
                                           allow_all=True):
        mode = LbMode.from_mapping(item, lambda field, what: fail(f"{where}.{field}", what))
        targets = list(topo.switches) if name == "all" else [name]
        if "prefix" in item:
            prefix = item["prefix"]
            for sw in targets:
                sm = modes.setdefault(sw, SwitchModes())
                problem = check_prefix(topo, sw, prefix, mode, sm.prefixes)
                if problem:
                    fail(f"{where}.prefix", problem)
                sm.prefixes[prefix] = mode
        else:
            for sw in targets:
                modes.setdefault(sw, SwitchModes()).default = mode
    return modes


def empty_state(p4info: P4Info) -> SwitchState:
    return SwitchState(managed_tables={p4info.table(t).preamble.id for t in (GROUP_TABLE, *CANDIDATE_TABLES)})


def lb_state(p4info: P4Info, groups: Mapping[int, list], mode: LbMode | Mapping[int, LbMode]) -> SwitchState:
    """Entries for ECMP groups {next_id: slot assignment (NextHop per slot)}
    in `mode` (one for all, or {next_id: mode})."""
    state = empty_state(p4info)
    for next_id, slots in sorted(groups.items()):
        group_mode = mode.get(next_id, LbMode()) if isinstance(mode, Mapping) else mode
        action = group_mode.action()
        if action is None:
            continue
        if not 0 <= next_id < LB_GROUPS:
            raise ValueError(f"ECMP group {next_id} outside the 0..{LB_GROUPS - 1} lb_group can hold (LB_GROUPS)")
        name, params = action
        state.table_entries.append(p4info.table_entry(GROUP_TABLE, {"meta.next_id": next_id},
                                                      action=name, params=params))
        if group_mode.mode == "adaptive":
            for slot, hop in enumerate(slots):
                for table, key, act in (("lb_candidate_a", "meta.lb.sample_a", "candidate_a"),
                                        ("lb_candidate_b", "meta.lb.sample_b", "candidate_b")):
                    state.table_entries.append(p4info.table_entry(
                        table, {"meta.next_id": next_id, key: slot}, action=act, params={"port": hop.port}))
    return state


def prefix_groups(p4info: P4Info, forwarding: SwitchState) -> dict[str, int]:
    """Destination prefix -> ECMP group id, from forwarding's LPM entries."""
    table = p4info.table(LPM_TABLE)
    set_next_id = p4info.action("set_next_id").preamble.id
    out = {}
    for e in forwarding.table_entries:
        if e.table_id == table.preamble.id and e.action.action.action_id == set_next_id:
            m = e.match[0].lpm
            addr = ".".join(str(b) for b in m.value.rjust(4, b"\0"))
            out[f"{addr}/{m.prefix_len}"] = int.from_bytes(e.action.action.params[0].value, "big")
    return out


def switch_state(p4info: P4Info, topo, switch: str, *, forwarding: Optional[SwitchState] = None) -> SwitchState:
    """The load-balancing entries the topology file gives `switch` (feature
    interface). Adaptive groups mirror the ports of their slots, and prefixes
    name groups, so this reads the groups from `forwarding` (what the
    controller is about to write; default: computed from the topology's routes)."""
    modes = topo.features.get(SECTION, {}).get(switch, SwitchModes())
    if modes.default.mode == "ecmp" and all(m.mode == "ecmp" for m in modes.prefixes.values()):
        return empty_state(p4info)
    if forwarding is None:
        forwarding = forwarding_state(p4info, topo.routes()[switch], seed=ecmp_seed(topo.switches[switch].device_id))
    groups = slots_on_switch(p4info, forwarding)
    by_group = {next_id: modes.default for next_id in groups}
    by_prefix = prefix_groups(p4info, forwarding)
    for prefix, mode in modes.prefixes.items():
        if prefix in by_prefix:
            by_group[by_prefix[prefix]] = mode
    return lb_state(p4info, groups, by_group)


def bench_state(p4info: P4Info, port: int) -> SwitchState:
    """The costliest mode for `make bench`: adaptive on the bench's group."""
    return bench_states(p4info, port)["adaptive"]


def bench_states(p4info: P4Info, port: int) -> dict[str, SwitchState]:
    """Each mode on the bench's ECMP group (every slot out of `port`)."""
    slots = [NextHop(port, "0a:00:00:00:02:01", "0a:00:02:00:00:01")] * ECMP_SLOTS
    return {m: lb_state(p4info, {BENCH_NEXT_ID: slots}, LbMode(m)) for m in BENCH_MODES}


def member_packets(conn, p4info: P4Info) -> dict[tuple[int, int], int]:
    """Packets per (group, egress port) from next_hop's direct counter."""
    table = p4info.table(NEXT_HOP_TABLE)
    out: dict[tuple[int, int], int] = {}
    for entry, packets in conn.direct_counters(table.preamble.id):
        fields = {f.id: f.name for f in table.match_fields}
        match = {fields[m.field_id]: int.from_bytes(m.exact.value, "big") for m in entry.match}
        port = next(int.from_bytes(p.value, "big") for p in entry.action.action.params
                    if p.param_id == _param_id(p4info, "port"))
        key = (match["meta.next_id"], port)
        out[key] = out.get(key, 0) + packets
    return out


def _param_id(p4info: P4Info, name: str) -> int:
    return next(p.id for p in p4info.action("route").params if p.name == name)


class LoadBalancingRuntime:
    """controller.feature("load_balancing"): modes changed at runtime."""

    def __init__(self, controller):
        self.ctl = controller

    def set_mode(self, switch: str, mode: LbMode, prefix: str | None = None):
        """The load-balancing mode of every ECMP group of `switch`, or (with
        `prefix`) of the group that prefix routes to."""
        topo = self.ctl.topo
        if switch not in topo.switches:
            raise EntryError(f"no switch {switch!r}")
        modes = topo.features.setdefault(SECTION, {}).setdefault(switch, SwitchModes())
        if prefix is None:
            modes.default = mode
            modes.prefixes.clear()
        else:
            problem = check_prefix(topo, switch, prefix, mode, modes.prefixes)
            if problem:
                raise EntryError(problem)
            modes.prefixes[prefix] = mode
        return self.ctl.program_switch(switch)


FEATURE = FeatureSpec(
    name="load_balancing", section=SECTION,
    summary="flowlets, per-packet spraying, queue-aware adaptive choice per ECMP group; PLB and reordering in the hosts",
    pieces=Pieces.of("load_balancing"),
    parse_section=parse_section, switch_state=switch_state, bench_states=bench_states,
    runtime=LoadBalancingRuntime)
