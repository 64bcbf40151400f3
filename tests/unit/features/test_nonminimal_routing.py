"""The non-minimal routing control-plane module (features/nonminimal_routing.py):
the section's validation naming the field, the intermediates, and the
entries each switch gets on the shipped Dragonfly, Slim Fly and torus: every
intermediate reachable from every switch by next hops that each come one hop
nearer, its own intermediate's tag removed, a source entry for every host
port and remote destination."""
from collections import defaultdict

import pytest
import yaml

from control.feature import REPO
from control.forwarding import ECMP_SLOTS, ecmp_seed
from control.p4info import EntryError
from control.topology import TopologyError
from features import nonminimal_routing as nm
from features import topology_from_dict
from tests.unit.features import switch_state
from tests.unit.features.switch_state import entries


def shipped(name: str, section=None):
    return switch_state.shipped(name, nm.SECTION, section)


def gate(p4info, state) -> str:
    return switch_state.default_action(p4info, state, nm.GATE_TABLE)


@pytest.mark.parametrize("section, field, what", [
    ({"mode": "adaptive"}, "mode", "expected one of minimal, valiant, ugal"),
    ({"mode": "valiant", "intermediate": "router"}, "intermediate", "expected group or switch"),
    ({"mode": "ugal", "threshold": -1}, "threshold", "expected an integer 0.."),
    ({"mode": "ugal", "stale_us": 0}, "stale_us", "expected an integer 1.."),
    ({"mode": "valiant", "threshold": 2}, "threshold", "a parameter of mode ugal, not of valiant"),
    ({"mode": "valiant", "hops": 2}, "hops", "unknown field"),
])
def test_bad_sections_are_named(section, field, what):
    with pytest.raises(TopologyError, match=rf"nonminimal_routing\.{field}: {what}"):
        shipped("dragonfly-small", section)


def test_groups_need_a_group_on_every_switch():
    with pytest.raises(TopologyError, match="group needs a group on every switch; x1y1 has none"):
        shipped("torus-3x3", {"mode": "valiant", "intermediate": "group"})


def test_a_switch_group_must_be_a_positive_integer():
    data = yaml.safe_load((REPO / "topologies" / "dragonfly-small.yaml").read_text())
    data["switches"][0]["group"] = 0
    with pytest.raises(TopologyError, match=r"switches\[0\]\.group: expected a group number"):
        topology_from_dict(data, "t.yaml")


def test_intermediates_default_to_groups_where_every_switch_has_one():
    assert shipped("dragonfly-small", {"mode": "valiant"}).features[nm.SECTION].intermediate == "group"
    assert shipped("torus-3x3", {"mode": "valiant"}).features[nm.SECTION].intermediate == "switch"
    topo = shipped("dragonfly-small", {"mode": "valiant"})
    assert nm.intermediates(topo, topo.features[nm.SECTION]) == [
        frozenset({"g1r1", "g1r2"}), frozenset({"g2r1", "g2r2"}), frozenset({"g3r1", "g3r2"})]


def test_the_shipped_dragonflies_route_by_ugal():
    for name in ("dragonfly-small", "dragonfly"):
        assert shipped(name).features[nm.SECTION] == nm.NonminimalRouting("ugal", "group")


def test_minimal_writes_no_entry_and_gates_the_feature_off(p4info):
    topo = shipped("dragonfly-small", {"mode": "minimal"})
    state = nm.switch_state(p4info, topo, "g1r1")
    assert gate(p4info, state) == "NoAction"
    assert all(not entries(p4info, state, t) for t in (nm.SOURCE_TABLE, nm.ROUTE_TABLE, nm.CANDIDATE_TABLE))
    assert {p4info.table(t).preamble.id for t in nm.TABLES} <= state.managed_tables


@pytest.mark.parametrize("name, mode", [("dragonfly-small", "valiant"), ("dragonfly", "ugal"),
                                        ("slimfly-q3", "ugal"), ("torus-4x4", "valiant")])
def test_every_switch_routes_every_intermediate_one_hop_nearer(p4info, name, mode):
    topo = shipped(name, {"mode": mode})
    config = topo.features[nm.SECTION]
    targets = nm.intermediates(topo, config)
    hops = topo.hops_between_switches()
    diameter = max(d for row in hops.values() for d in row.values())
    for switch, sw in topo.switches.items():
        state = nm.switch_state(p4info, topo, switch)
        assert gate(p4info, state) == f"{mode}_on"
        mine = next(t for t, members in enumerate(targets) if switch in members)
        routes = defaultdict(dict)
        for match, action, params in entries(p4info, state, nm.ROUTE_TABLE):
            routes[match["hdr.valiant.target"]][match["meta.ecmp_slot"]] = (action, params)
        assert sorted(routes) == list(range(len(targets)))
        for t, slots in routes.items():
            assert sorted(slots) == list(range(ECMP_SLOTS))
            if t == mine:
                assert {a for a, _ in slots.values()} == {"at_intermediate"}
                continue
            near = min(hops[switch][m] for m in targets[t])
            for action, params in slots.values():
                peer = sw.ports[params["port"]].peer
                assert action == "to_intermediate"
                assert min(hops[peer][m] for m in targets[t]) == near - 1, (switch, t, peer)
        candidates = entries(p4info, state, nm.CANDIDATE_TABLE)
        if mode == "ugal":
            assert len(candidates) == (len(targets) - 1) * ECMP_SLOTS
            for match, _, params in candidates:
                action, route = routes[match["meta.nonmin.target"]][match["meta.ecmp_slot"]]
                near = min(hops[switch][m] for m in targets[match["meta.nonmin.target"]])
                assert params == {"port": route["port"], "hops": near + diameter}
        else:
            assert candidates == []
        host_ports = {p.number for p in sw.ports.values() if p.peer in topo.hosts}
        remote = [nic for nic in topo.nics if nic.switch not in targets[mine]]
        sources = entries(p4info, state, nm.SOURCE_TABLE)
        assert len(sources) == len(host_ports) * len(remote)
        for match, action, params in sources:
            assert match["std_meta.ingress_port"] in host_ports and action == mode
            assert params["targets"] == len(targets)


def test_ugal_carries_the_minimal_hops_and_the_sections_parameters(p4info):
    topo = shipped("dragonfly-small", {"mode": "ugal", "threshold": 3, "stale_us": 5000})
    hops = topo.hops_between_switches()
    by_subnet = {nic.subnet: nic.switch for nic in topo.nics}
    for match, _, params in entries(p4info, nm.switch_state(p4info, topo, "g1r1"), nm.SOURCE_TABLE):
        value, plen = match["hdr.ipv4.dst_addr"]
        subnet = f"{value >> 24}.{value >> 16 & 255}.{value >> 8 & 255}.{value & 255}/{plen}"
        assert params == {"targets": 3, "min_hops": hops["g1r1"][by_subnet[subnet]], "threshold": 3,
                          "stale_us": 5000, "seed": ecmp_seed(topo.switches["g1r1"].device_id)}


def test_bench_states_turn_each_mode_on(p4info):
    states = nm.bench_states(p4info, 2)
    assert set(states) == {"valiant", "ugal", "transit"}
    assert gate(p4info, states.pop("transit")) == "valiant_on"
    for mode, state in states.items():
        assert gate(p4info, state) == f"{mode}_on"
        assert {m["meta.ecmp_slot"] for m, a, p in entries(p4info, state, nm.ROUTE_TABLE)
                if a == "to_intermediate" and p["port"] == 2} == set(range(ECMP_SLOTS))


class FakeController:
    def __init__(self, topo):
        self.topo, self.programmed = topo, []

    def program_switch(self, name):
        self.programmed.append(name)
        return name


def test_runtime_changes_validate_first_and_reprogram_every_switch():
    topo = shipped("dragonfly-small", {"mode": "valiant"})
    handle = nm.NonminimalRoutingRuntime(FakeController(topo))
    with pytest.raises(EntryError, match="threshold: a parameter of mode ugal"):
        handle.configure({"mode": "minimal", "threshold": 1})
    assert topo.features[nm.SECTION].mode == "valiant"
    assert handle.ctl.programmed == []
    handle.set_mode("ugal")
    assert topo.features[nm.SECTION] == nm.NonminimalRouting("ugal", "group")
    assert sorted(handle.ctl.programmed) == sorted(topo.switches)
    with pytest.raises(EntryError, match="mode: expected one of"):
        handle.set_mode("adaptive")


def test_dimension_order_needs_a_torus_and_its_switches():
    with pytest.raises(TopologyError, match="dimension_order needs a torus' switch names"):
        shipped("dragonfly-small", {"mode": "dimension_order"})
    with pytest.raises(TopologyError, match="dimension_order goes through switches"):
        shipped("torus-3x3", {"mode": "dimension_order", "intermediate": "group"})


@pytest.mark.parametrize("name", ["torus-3x3", "torus-4x4"])
def test_dimension_order_moves_in_x_then_in_y(p4info, name):
    """Every packet between every two hosts, followed through the entries:
    from its source router the tag's next hops change x only, until the
    switch in the destination's x; from there the minimal routes change y only."""
    topo = shipped(name, {"mode": "dimension_order"})
    targets = nm.intermediates(topo, topo.features[nm.SECTION])
    states = {s: nm.switch_state(p4info, topo, s) for s in topo.switches}
    coords = {s: (int(nm.TORUS_SWITCH.match(s).group(1)), int(nm.TORUS_SWITCH.match(s).group(2)))
              for s in topo.switches}
    route_ports = {s: {(m["hdr.valiant.target"], m["meta.ecmp_slot"]): (a, p.get("port"))
                       for m, a, p in entries(p4info, states[s], nm.ROUTE_TABLE)} for s in topo.switches}
    minimal = {s: {r.prefix: r.next_hops for r in routes} for s, routes in topo.routes().items()}
    for src in topo.switches:
        sources = {}
        for m, action, params in entries(p4info, states[src], nm.SOURCE_TABLE):
            assert action == "via"
            value, plen = m["hdr.ipv4.dst_addr"]
            sources[f"{value >> 24}.{value >> 16 & 255}.{value >> 8 & 255}.{value & 255}/{plen}"] = params["target"]
        for nic in topo.nics:
            dst = nic.switch
            if dst == src:
                continue
            corner = next(iter(targets[sources[nic.subnet]])) if nic.subnet in sources else src
            if nic.subnet in sources:
                assert coords[corner] == (coords[dst][0], coords[src][1])
                frontier = {src}
                while frontier != {corner}:       # every slot's next hop: x changes, y does not
                    step = set()
                    for here in frontier - {corner}:
                        for slot in range(ECMP_SLOTS):
                            action, port = route_ports[here][sources[nic.subnet], slot]
                            assert action == "to_intermediate"
                            peer = topo.switches[here].ports[port].peer
                            assert coords[peer][1] == coords[here][1] and coords[peer][0] != coords[here][0]
                            step.add(peer)
                    frontier = step | (frontier & {corner})
            else:
                assert coords[dst][0] == coords[src][0] or coords[dst][1] == coords[src][1]
            frontier = {corner}
            while frontier != {dst}:              # then minimal: one coordinate changes
                step = set()
                for here in frontier - {dst}:
                    for hop in minimal[here][nic.subnet]:
                        peer = topo.switches[here].ports[hop.port].peer
                        if nic.subnet in sources:
                            assert coords[peer][0] == coords[here][0], (src, dst, here, peer)
                        step.add(peer)
                frontier = step | (frontier & {dst})
