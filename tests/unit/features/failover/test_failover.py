"""The failover control-plane module (features/failover/__init__.py) and heartbeats
(features/failover/heartbeat.py): validation naming the field, each slot's backup
on another port (nearest following slot), the entries a switch gets from
the routing it is about to write, and heartbeat paths covering every
directed switch link."""
import pytest
from scapy.layers.l2 import Ether

from features.failover import data_plane as fo
from control.forwarding import NEXT_HOP_TABLE
from control.topology import NextHop, TopologyError
from features import load_topology, topology_from_dict
from features.failover.heartbeat import HEARTBEAT_ORIGIN_PORT_BASE, HEARTBEAT_UDP_PORT, heartbeat_frame, planned_heartbeats
from hostagent.int_telemetry.probes import SourceRoute

LS = load_topology("topologies/leaf-spine.yaml")
LS_RAW = {"name": "ls", "switches": [{"name": n} for n in ("spine1", "spine2", "leaf1", "leaf2")],
          "hosts": ["h1", "h2", "h3", "h4"],
          "links": [["h1", "leaf1"], ["h2", "leaf1"], ["h3", "leaf2"], ["h4", "leaf2"], ["leaf1", "spine1"],
                    ["leaf1", "spine2"], ["leaf2", "spine1"], ["leaf2", "spine2"]]}


def hop(port):
    return NextHop(port, f"0a:00:00:00:01:{port:02x}", f"0a:00:02:00:00:{port:02x}")


def test_backup_is_the_nearest_following_slot_on_another_port():
    slots = [hop(2), hop(2), hop(3), hop(4)]
    b = fo.backups(slots)
    assert [b[s].port for s in range(4)] == [3, 3, 4, 2]
    assert fo.backups([hop(2)] * 16) == {}


@pytest.mark.parametrize("section, field, message", [
    ([], "failover", "expected a mapping"),
    ({"period": 1}, "failover.period", "unknown field"),
    ({"heartbeat_ms": 0}, "failover.heartbeat_ms", "above 0"),
    ({"heartbeat_ms": 20, "timeout_ms": 30}, "failover.timeout_ms", "less than two heartbeats"),
    ({"paths": "yes"}, "failover.paths", "expected true or false"),
], ids=["not-mapping", "unknown-field", "zero-period", "timeout-too-short", "paths-not-bool"])
def test_bad_sections_name_the_field(section, field, message):
    raw = {"name": "t", "switches": [{"name": "s1"}], "hosts": ["h1"], "links": [["h1", "s1"]], "failover": section}
    with pytest.raises(TopologyError) as err:
        topology_from_dict(raw, "t.yaml")
    assert field in str(err.value) and message in str(err.value)


def test_a_leaf_gets_watch_and_a_backup_per_slot(p4info):
    raw = {"name": "ls", "switches": [{"name": "spine1"}, {"name": "spine2"}, {"name": "leaf1"}, {"name": "leaf2"}],
           "hosts": ["h1", "h2"], "links": [["h1", "leaf1"], ["h2", "leaf2"], ["leaf1", "spine1"],
                                           ["leaf1", "spine2"], ["leaf2", "spine1"], ["leaf2", "spine2"]],
           "failover": {"heartbeat_ms": 10, "timeout_ms": 50}}
    t = topology_from_dict(raw, "ls.yaml")
    assert t.features["failover"].detection_bound_ms == 60
    state = fo.switch_state(p4info, t, "leaf1")
    default = [e for e in state.table_entries if e.is_default_action]
    assert len(default) == 1 and int.from_bytes(default[0].action.action.params[0].value, "big") == 50_000
    backup_table = p4info.table(fo.BACKUP_TABLE).preamble.id
    assert len([e for e in state.table_entries if e.table_id == backup_table]) == 16   # one group of 16 slots
    assert fo.empty_state(p4info).table_entries[0].is_default_action
    assert p4info.table(NEXT_HOP_TABLE)


def test_heartbeat_constants_match_the_p4_program():
    from control.p4constants import constants
    c = constants()
    assert c["HEARTBEAT_UDP_PORT"] == HEARTBEAT_UDP_PORT
    assert c["HEARTBEAT_ORIGIN_PORT_BASE"] == HEARTBEAT_ORIGIN_PORT_BASE
    assert 1 << c["FAILOVER_ORIGIN_BITS"] == fo.FAILOVER_ORIGINS


def test_too_many_edge_switches_for_paths_is_named():
    n = fo.FAILOVER_ORIGINS + 1
    raw = {"name": "big", "switches": [{"name": "core"}] + [{"name": f"e{i}"} for i in range(n)],
           "hosts": [f"h{i}" for i in range(n)],
           "links": [[f"h{i}", f"e{i}"] for i in range(n)] + [[f"e{i}", "core"] for i in range(n)],
           "failover": {}}
    with pytest.raises(TopologyError, match="failover.paths.*at most 64"):
        topology_from_dict(raw, "big.yaml")
    raw["failover"] = {"paths": False}
    assert topology_from_dict(raw, "big.yaml").features["failover"].paths is False


def test_each_remote_subnet_maps_to_its_edge_switch(p4info):
    raw = {**LS_RAW, "failover": {}}
    t = topology_from_dict(raw, "ls.yaml")
    assert fo.edge_switches(t) == ["leaf1", "leaf2"]
    assert fo.destinations(t, "leaf1") == {t.hosts[h].primary.subnet: 1 for h in ("h3", "h4")}
    assert fo.destinations(t, "spine1") == {**{t.hosts[h].primary.subnet: 0 for h in ("h1", "h2")},
                                            **{t.hosts[h].primary.subnet: 1 for h in ("h3", "h4")}}
    dest_table = p4info.table(fo.DESTINATION_TABLE).preamble.id
    assert len([e for e in fo.switch_state(p4info, t, "leaf1").table_entries if e.table_id == dest_table]) == 2
    t = topology_from_dict({**raw, "failover": {"paths": False}}, "ls.yaml")
    assert not [e for e in fo.switch_state(p4info, t, "leaf1").table_entries if e.table_id == dest_table]


@pytest.mark.parametrize("name, count", [("leaf-spine", 4), ("dual-plane", 8), ("fat-tree-k4", 112)])
def test_path_heartbeats_go_to_every_edge_through_each_first_hop_and_back(name, count):
    topo = load_topology(f"topologies/{name}.yaml")
    edges = fo.edge_switches(topo)
    paths = [hb for hb in planned_heartbeats(topo, paths=True) if hb.paths]
    assert len(paths) == count
    for hb in paths:
        (a, n, b), = hb.paths
        frame = Ether(hb.frame)
        assert frame["UDP"].sport == HEARTBEAT_ORIGIN_PORT_BASE + edges.index(b), "carries the far edge's index"
        assert frame["UDP"].dport == HEARTBEAT_UDP_PORT and frame["IP"].dst == frame["IP"].src
        ports = frame[SourceRoute].ports
        home = next(nic for nic in topo.hosts[hb.host].nics.values() if nic.iface == hb.iface)
        assert home.switch == a and len(ports) % 2 == 1 and ports[-1] == home.switch_port, "there, back, home"
        first_hop = next(p.peer for p in topo.switches[a].ports.values() if p.number == ports[0])
        assert first_hop == n
    if name == "leaf-spine":
        assert {hb.paths[0] for hb in paths} == {(a, n, b) for a in ("leaf1", "leaf2") for b in ("leaf1", "leaf2")
                                                 if a != b for n in ("spine1", "spine2")}
    assert not [hb for hb in planned_heartbeats(topo, paths=False) if hb.paths]
