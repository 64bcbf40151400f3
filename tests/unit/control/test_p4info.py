"""Building P4Runtime entities from the P4Info: what the controller writes,
and the clear errors for what it must refuse.

Uses the `p4info` fixture (tests/unit/conftest.py)."""
from pathlib import Path

import pytest

from features import ecn

from control import forwarding
from features.ecn import EcnProfile
from control.p4info import EntryError
from features import load_topology

REPO = Path(__file__).resolve().parents[3]


def test_lpm_entry_is_canonical(p4info):
    e = p4info.table_entry("ipv4_lpm", {"hdr.ipv4.dst_addr": "10.0.3.0/24"}, action="set_next_id",
                           params={"next_id": 2})
    assert e.table_id == p4info.table("FabricIngress.forwarding.ipv4_lpm").preamble.id
    (m,) = e.match
    assert (m.lpm.value, m.lpm.prefix_len) == (bytes([10, 0, 3, 0]), 24)
    assert e.action.action.params[0].value == b"\x02"  # canonical: no leading zero bytes


def test_slot_entry_is_canonical(p4info):
    e = p4info.table_entry("next_hop", {"meta.next_id": 1, "meta.ecmp_slot": 0}, action="route",
                           params={"port": 3, "src_mac": "0a:00:00:00:03:03", "dst_mac": "0a:00:00:00:01:01"})
    assert [m.exact.value for m in e.match] == [b"\x01", b"\x00"]
    values = [p.value for p in e.action.action.params]
    assert values == [b"\x03", bytes.fromhex("0a0000000303"), bytes.fromhex("0a0000000101")]


ROUTE = {"action": "set_next_id", "params": {"next_id": 1}}


@pytest.mark.parametrize("build,message", [
    pytest.param(lambda i: i.table_entry("ipv4_routes", {}, **ROUTE),
                 "unknown table 'ipv4_routes'", id="unknown-table"),
    pytest.param(lambda i: i.table_entry("ipv4_lpm", {"hdr.ipv4.src_addr": "10.0.0.0/8"}, **ROUTE),
                 "unknown match field 'hdr.ipv4.src_addr'", id="unknown-field"),
    pytest.param(lambda i: i.table_entry("ipv4_lpm", {"hdr.ipv4.dst_addr": "10.0.0.0/33"}, **ROUTE),
                 "prefix length 33 outside 0..32", id="prefix-too-long"),
    pytest.param(lambda i: i.table_entry("ipv4_lpm", {"hdr.ipv4.dst_addr": "10.0.0.1/24"}, **ROUTE),
                 "bits set beyond the /24 prefix", id="host-bits-set"),
    pytest.param(lambda i: i.table_entry("ipv4_lpm", {"hdr.ipv4.dst_addr": "10.0.0.0/8"}, action="set_next_id",
                                         params={"next_id": 70000}),
                 "value 70000 does not fit in 16 bits", id="param-too-wide"),
    pytest.param(lambda i: i.table_entry("next_hop", {"meta.next_id": 1, "meta.ecmp_slot": 0}, action="set_next_id",
                                         params={"next_id": 2}),
                 "action 'FabricIngress.forwarding.set_next_id' is not allowed", id="action-not-in-table"),
    pytest.param(lambda i: i.table_entry("ipv4_lpm", {"hdr.ipv4.dst_addr": "10.0.0.0/8"}, action="set_next_id",
                                         params={"next": 1}),
                 "unknown parameter 'next'", id="unknown-param"),
    pytest.param(lambda i: i.table_entry("ipv4_lpm", {"hdr.ipv4.dst_addr": "10.0.0.0/8"}, action="set_next_id"),
                 "missing parameter 'next_id'", id="missing-param"),
    pytest.param(lambda i: i.table_entry("next_hop", {"meta.next_id": 1}, action="route",
                                         params={"port": 1, "src_mac": 0, "dst_mac": 0}),
                 "missing exact match field 'meta.ecmp_slot'", id="missing-exact"),
    pytest.param(lambda i: i.table_entry("next_hop", {"meta.next_id": 1, "meta.ecmp_slot": 16}, action="route",
                                         params={"port": 1, "src_mac": 0, "dst_mac": 0}),
                 "does not fit in 4 bits", id="slot-beyond-group"),
    pytest.param(lambda i: i.table_entry("ipv4_lpm", {"hdr.ipv4.dst_addr": "10.0.0.0/8"}, member_id=1),
                 "is direct", id="member-on-direct-table"),
    pytest.param(lambda i: i.table_entry("ipv4_lpm", {"hdr.ipv4.dst_addr": "10.0.0.0/8"}, action="route",
                                         params={"port": 512, "src_mac": 0, "dst_mac": 0}),
                 "port: value 512 does not fit in 9 bits", id="port-too-wide"),
    pytest.param(lambda i: i.table_entry("ipv4_lpm", {"hdr.ipv4.dst_addr": "10.0.0.0/8"}, action="route",
                                         params={"port": 1, "src_mac": "0a:zz", "dst_mac": 0}),
                 "cannot read '0a:zz'", id="bad-mac"),
    pytest.param(lambda i: i.counter_entry("drop_counter", 99), "index 99 outside 0..18", id="counter-index"),
    pytest.param(lambda i: i.table_entry("ecn_profile", {"std_meta.egress_port": 1, "std_meta.priority": 0}, action="mark_step",
                                         params={"k": 1 << 19}), "does not fit in 19 bits", id="k-too-deep"),
])
def test_invalid_entries_are_refused_with_a_clear_message(p4info, build, message):
    with pytest.raises(EntryError) as err:
        build(p4info)
    assert message in str(err.value)


def test_forwarding_state_for_leaf_spine(p4info):
    topo = load_topology(REPO / "topologies" / "leaf-spine.yaml")
    state = forwarding.forwarding_state(p4info, topo.routes()["leaf1"], seed=forwarding.ecmp_seed(3))
    # 4 routes (2 hosts straight to their port, 2 remote to the ECMP group), 16 slots, seed default
    assert len(state.table_entries) == 4 + forwarding.ECMP_SLOTS + 1
    actions = [p4info.by_id(e.action.action.action_id).preamble.name.split(".")[-1] for e in state.table_entries]
    assert actions.count("set_next_id") == 2 and actions.count("route") == 2 + forwarding.ECMP_SLOTS
    assert forwarding.slots_on_switch(p4info, state)[1] and not state.members and not state.groups
    spine = forwarding.forwarding_state(p4info, topo.routes()["spine1"])  # no seed: keep the switch's
    assert len(spine.table_entries) == 4  # one route per host subnet, one next hop each


def test_forwarding_state_keeps_current_slots(p4info):
    topo = load_topology(REPO / "topologies" / "leaf-spine.yaml")
    routes = topo.routes()["leaf1"]
    first = forwarding.forwarding_state(p4info, routes)
    current = forwarding.slots_on_switch(p4info, first)
    (next_id, hops), = current.items()
    rotated = {next_id: hops[1:] + hops[:1]}  # a switch whose slots differ from a fresh plan
    again = forwarding.forwarding_state(p4info, routes, rotated)
    assert forwarding.slots_on_switch(p4info, again) == rotated


def test_ecn_state(p4info):
    state = ecn.ecn_state(p4info, {3: EcnProfile.step(12), 4: EcnProfile.wred(5, 30, 0.25)})
    step, wred = state.table_entries
    assert p4info.by_id(step.action.action.action_id).preamble.name.endswith("mark_step")
    assert [int.from_bytes(p.value, "big") for p in wred.action.action.params] == [5, 30, 250_000]


def test_ecn_state_per_queue(p4info):
    """A port's profile covers every queue; a queue's own profile wins."""
    state = ecn.ecn_state(p4info, {3: EcnProfile.step(12)}, queues=4, queue_profiles={(3, 2): EcnProfile.step(5)})
    keys = {tuple(int.from_bytes(m.exact.value, "big") for m in e.match): e for e in state.table_entries}
    assert sorted(keys) == [(3, 0), (3, 1), (3, 2), (3, 3)]
    assert [int.from_bytes(p.value, "big") for p in keys[(3, 2)].action.action.params] == [5]
    assert [int.from_bytes(p.value, "big") for p in keys[(3, 0)].action.action.params] == [12]


def test_seed_is_a_default_entry_and_differs_per_switch(p4info):
    topo = load_topology(REPO / "topologies" / "fat-tree-k4.yaml")
    seeds = {forwarding.ecmp_seed(sw.device_id) for sw in topo.switches.values()}
    assert len(seeds) == len(topo.switches) and all(s & 1 for s in seeds)
    state = forwarding.forwarding_state(p4info, topo.routes()["a11"], seed=forwarding.ecmp_seed(5))
    (default,) = [e for e in state.table_entries if e.is_default_action]
    assert int.from_bytes(default.action.action.params[0].value, "big") == forwarding.ecmp_seed(5)
    with pytest.raises(EntryError, match="'NoAction' is not allowed as an entry's action"):
        p4info.table_entry("next_hop", {"meta.next_id": 1, "meta.ecmp_slot": 0}, action="NoAction")  # @defaultonly
