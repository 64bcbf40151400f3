"""The failover control-plane module (control/failover.py) and heartbeats
(hostagent/heartbeat.py): validation naming the field, each slot's backup
on another port (nearest following slot), the entries a switch gets from
the routing it is about to write, and heartbeat paths covering every
directed switch link."""
import pytest
from scapy.layers.l2 import Ether

from control import failover as fo
from control.forwarding import NEXT_HOP_TABLE
from control.topology import NextHop, TopologyError, from_dict, load
from hostagent.heartbeat import HEARTBEAT_UDP_PORT, heartbeat_frame, planned_heartbeats
from hostagent.probes import SourceRoute

LS = load("topologies/leaf-spine.yaml")


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
], ids=["not-mapping", "unknown-field", "zero-period", "timeout-too-short"])
def test_bad_sections_name_the_field(section, field, message):
    raw = {"name": "t", "switches": [{"name": "s1"}], "hosts": ["h1"], "links": [["h1", "s1"]], "failover": section}
    with pytest.raises(TopologyError) as err:
        from_dict(raw, "t.yaml")
    assert field in str(err.value) and message in str(err.value)


def test_a_leaf_gets_watch_and_a_backup_per_slot(p4info):
    raw = {"name": "ls", "switches": [{"name": "spine1"}, {"name": "spine2"}, {"name": "leaf1"}, {"name": "leaf2"}],
           "hosts": ["h1", "h2"], "links": [["h1", "leaf1"], ["h2", "leaf2"], ["leaf1", "spine1"],
                                           ["leaf1", "spine2"], ["leaf2", "spine1"], ["leaf2", "spine2"]],
           "failover": {"heartbeat_ms": 10, "timeout_ms": 50}}
    t = from_dict(raw, "ls.yaml")
    assert t.features["failover"].detection_bound_ms == 60
    state = fo.switch_state(p4info, t, "leaf1")
    default = [e for e in state.table_entries if e.is_default_action]
    assert len(default) == 1 and int.from_bytes(default[0].action.action.params[0].value, "big") == 50_000
    backup_table = p4info.table(fo.BACKUP_TABLE).preamble.id
    assert len([e for e in state.table_entries if e.table_id == backup_table]) == 16   # one group of 16 slots
    assert fo.empty_state(p4info).table_entries[0].is_default_action
    assert p4info.table(NEXT_HOP_TABLE)


def test_heartbeat_port_matches_the_p4_program():
    from control.p4constants import constants
    assert constants()["HEARTBEAT_UDP_PORT"] == HEARTBEAT_UDP_PORT


def test_heartbeats_cover_every_directed_switch_link_without_int():
    paths = planned_heartbeats(LS)
    covered = {link for p in paths for link in p.links}
    wanted = {(a, b) for a in LS.switches for port in LS.switches[a].ports.values()
              for b in [port.peer] if b in LS.switches}
    assert covered == wanted
    frame = Ether(heartbeat_frame([3, 1], src_mac="0a:00:01:00:00:01", dst_mac="0a:00:00:00:01:01",
                                  src_ip="10.0.1.1", dst_ip="10.0.2.1"))
    assert frame[SourceRoute].ports == [3, 1] and frame["UDP"].dport == HEARTBEAT_UDP_PORT
    assert b"heartbeat" in bytes(frame)
