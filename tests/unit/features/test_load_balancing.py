"""The load-balancing control-plane module (features/load_balancing.py):
topology-file validation naming the field, the entries each mode writes
(adaptive's candidates mirror the group's slots), and the controller's view
of the groups it is about to write."""
import pytest

from features import load_balancing as lb
from control.forwarding import ECMP_SLOTS, ecmp_seed, forwarding_state, slots_on_switch
from control.topology import TopologyError
from features import topology_from_dict

LEAF_SPINE = {
    "name": "ls", "defaults": {"link": {"bandwidth_mbps": 100}},
    "switches": [{"name": "spine1"}, {"name": "spine2"}, {"name": "leaf1"}, {"name": "leaf2"}],
    "hosts": [{"name": "h1"}, {"name": "h2"}],
    "links": [["h1", "leaf1"], ["h2", "leaf2"], ["leaf1", "spine1"], ["leaf1", "spine2"],
              ["leaf2", "spine1"], ["leaf2", "spine2"]],
}


def topo_with(section):
    return topology_from_dict({**LEAF_SPINE, "load_balancing": section}, "t.yaml")


def test_all_then_one_switch_overrides():
    t = topo_with([{"switch": "all", "mode": "flowlet", "flowlet_gap_us": 300},
                   {"switch": "leaf2", "mode": "adaptive", "queue_stale_us": 5000}])
    modes = t.features["load_balancing"]
    assert modes["leaf1"].default == lb.LbMode("flowlet", flowlet_gap_us=300)
    assert modes["leaf2"].default == lb.LbMode("adaptive", queue_stale_us=5000)
    assert set(modes) == set(t.switches)


PREFIXED = {**LEAF_SPINE, "hosts": [{"name": "h1"}, {"name": "h2"}, {"name": "h3"}],
            "links": LEAF_SPINE["links"] + [["h3", "leaf2"]]}


def test_a_prefix_gives_its_group_its_own_mode(p4info):
    t = topology_from_dict({**PREFIXED, "load_balancing": [{"switch": "leaf1", "mode": "flowlet"},
                                                  {"switch": "leaf1", "prefix": "10.0.2.0/24", "mode": "spray"}]},
                  "t.yaml")
    modes = t.features["load_balancing"]["leaf1"]
    assert modes.default == lb.LbMode("flowlet") and modes.prefixes == {"10.0.2.0/24": lb.LbMode("spray")}
    # spine1 reaches each host's subnet through one leaf: no group there
    with pytest.raises(TopologyError, match="through one next hop"):
        topology_from_dict({**PREFIXED, "load_balancing": [{"switch": "spine1", "prefix": "10.0.2.0/24", "mode": "spray"}]},
                  "t.yaml")


def test_prefixes_sharing_a_group_must_agree_and_routes_must_exist():
    # leaf1 reaches h2 (10.0.2.0/24) and h3 (10.0.3.0/24) through the same two spines: one group
    section = [{"switch": "leaf1", "prefix": "10.0.2.0/24", "mode": "spray"},
               {"switch": "leaf1", "prefix": "10.0.3.0/24", "mode": "flowlet"}]
    with pytest.raises(TopologyError, match=r"load_balancing\[1\].prefix.*share an ECMP group"):
        topology_from_dict({**PREFIXED, "load_balancing": section}, "t.yaml")
    with pytest.raises(TopologyError, match="has no route 10.9.0.0/24"):
        topology_from_dict({**PREFIXED, "load_balancing": [{"switch": "leaf1", "prefix": "10.9.0.0/24", "mode": "spray"}]},
                  "t.yaml")


def test_prefix_mode_overrides_the_switch_default_for_its_group_only(p4info):
    t = topology_from_dict({**PREFIXED, "load_balancing": [{"switch": "leaf1", "mode": "ecmp"},
                                                  {"switch": "leaf1", "prefix": "10.0.2.0/24", "mode": "flowlet"}]},
                  "t.yaml")
    state = lb.switch_state(p4info, t, "leaf1")
    group_entries = [e for e in state.table_entries if e.table_id == p4info.table(lb.GROUP_TABLE).preamble.id]
    assert len(group_entries) == 1
    assert group_entries[0].action.action.action_id == p4info.action("flowlet").preamble.id


@pytest.mark.parametrize("section, field, words", [
    ({"switch": "leaf9", "mode": "spray"}, "load_balancing[0].switch", "unknown switch 'leaf9'"),
    ({"switch": "all", "mode": "random"}, "load_balancing[0].mode", "ecmp, flowlet, spray, adaptive"),
    ({"switch": "all", "mode": "spray", "flowlet_gap_us": 5}, "load_balancing[0].flowlet_gap_us",
     "not a parameter of mode spray"),
    ({"switch": "all", "mode": "flowlet", "flowlet_gap_us": 0}, "load_balancing[0].flowlet_gap_us", "microseconds"),
    ({"switch": "all", "mode": "adaptive", "queue_stale_us": "1ms"}, "load_balancing[0].queue_stale_us",
     "microseconds"),
    ({"switch": "all", "mode": "spray", "gap": 1}, "load_balancing[0].gap", "unknown field"),
], ids=lambda v: v if isinstance(v, str) else None)
def test_bad_items_name_the_field(section, field, words):
    with pytest.raises(TopologyError) as err:
        topo_with([section])
    assert field in str(err.value) and words in str(err.value)


def test_ecmp_writes_nothing_and_still_manages_the_tables(p4info):
    t = topo_with([{"switch": "all", "mode": "ecmp"}])
    state = lb.switch_state(p4info, t, "leaf1")
    assert not state.table_entries and state.managed_tables


@pytest.mark.parametrize("mode, entries_per_group", [("flowlet", 1), ("spray", 1), ("adaptive", 1 + 2 * ECMP_SLOTS)])
def test_each_mode_writes_its_group_entry(p4info, mode, entries_per_group):
    t = topo_with([{"switch": "leaf1", "mode": mode}])
    state = lb.switch_state(p4info, t, "leaf1")
    assert len(state.table_entries) == entries_per_group     # leaf1 has one group: its two spines


def test_adaptive_candidates_mirror_the_slots_forwarding_writes(p4info):
    t = topo_with([{"switch": "leaf1", "mode": "adaptive"}])
    routing = forwarding_state(p4info, t.routes()["leaf1"], seed=ecmp_seed(t.switches["leaf1"].device_id))
    groups = slots_on_switch(p4info, routing)
    state = lb.switch_state(p4info, t, "leaf1", forwarding=routing)
    table = p4info.table("lb_candidate_a")
    fields = {f.id: f.name for f in table.match_fields}
    seen = {}
    for e in state.table_entries:
        if e.table_id == table.preamble.id:
            m = {fields[x.field_id]: int.from_bytes(x.exact.value, "big") for x in e.match}
            seen[(m["meta.next_id"], m["meta.lb.sample_a"])] = int.from_bytes(e.action.action.params[0].value, "big")
    assert seen == {(g, slot): hop.port for g, hops in groups.items() for slot, hop in enumerate(hops)}
    # neighbouring slots (slot ^ 1, the second sample) belong to different members
    for hops in groups.values():
        assert all(hops[s].port != hops[s ^ 1].port for s in range(ECMP_SLOTS))


def test_bench_states_cover_every_mode(p4info):
    states = lb.bench_states(p4info, 2)
    assert set(states) == set(lb.BENCH_MODES)
    assert all(s.table_entries for s in states.values())
