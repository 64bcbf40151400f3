"""The INT control-plane module (features/int_telemetry.py): topology-file
validation with errors naming the field, instruction sets and HopML from the
collector's own layout code, the entries each switch gets, and the probe
layer against the P4 program's constants."""
import pytest

from features import int_telemetry as it
from control.p4constants import constants
from control.topology import TopologyError
from features import topology_from_dict
from wire import int_telemetry as ih
from hostagent.int_telemetry import probes

LEAF_SPINE = {
    "name": "ls", "defaults": {"link": {"bandwidth_mbps": 100}},
    "switches": [{"name": "spine1"}, {"name": "leaf1"}, {"name": "leaf2"}],
    "hosts": [{"name": "h1"}, {"name": "h2"}, {"name": "h3"}],
    "links": [["h1", "leaf1"], ["h2", "leaf2"], ["h3", "leaf2"], ["leaf1", "spine1"], ["leaf2", "spine1"]],
}


def topo_with(section):
    return topology_from_dict({**LEAF_SPINE, "int": section}, "t.yaml")


def test_a_valid_section_parses_with_defaults():
    t = topo_with({"collector": "h3", "watchlist": [{"protocol": "udp", "dst_ports": [4791, 4800], "sample": 4}]})
    cfg = t.features["int"]
    assert cfg.collector == "h3" and cfg.collector_port == ih.REPORT_UDP_PORT and cfg.mtu == 1500
    rule = cfg.watchlist[0]
    assert (rule.protocol, rule.dst_ports, rule.src_ports, rule.sample) == (17, (4791, 4800), (0, 0xFFFF), 4)
    assert rule.instructions == it.Instructions.of(it.DEFAULT_INSTRUCTIONS)


@pytest.mark.parametrize("section, field, words", [
    ({"watchlist": []}, "int.collector", "missing"),
    ({"collector": "h9"}, "int.collector", "no host 'h9'"),
    ({"collector": "h1", "mtu": 20}, "int.mtu", "68..65535"),
    ({"collector": "h1", "colector_port": 1}, "int.colector_port", "unknown field"),
    ({"collector": "h1", "latency_bucket_us": 3}, "int.latency_bucket_us", "power of two"),
    ({"collector": "h1", "queue_report_threshold": -1}, "int.queue_report_threshold", "queue depth"),
    ({"collector": "h1", "watchlist": [{"protocol": "icmp"}]}, "int.watchlist[0].protocol", "udp, tcp or any"),
    ({"collector": "h1", "watchlist": [{"src": "10.0.1.1/24"}]}, "int.watchlist[0].src", "IPv4 prefix"),
    ({"collector": "h1", "watchlist": [{"dst_ports": [5, 2]}]}, "int.watchlist[0].dst_ports", "low <= high"),
    ({"collector": "h1", "watchlist": [{"instructions": ["node_id", "colour"]}]},
     "int.watchlist[0].instructions", "unknown instruction 'colour'"),
    ({"collector": "h1", "watchlist": [{"instructions": []}]}, "int.watchlist[0].instructions", "no instructions"),
    ({"collector": "h1", "watchlist": [{"max_hops": 0}]}, "int.watchlist[0]", "max_hops"),
    ({"collector": "h1", "watchlist": [{"sample": 0}]}, "int.watchlist[0]", "sample"),
    ({"collector": "h1", "watchlist": [{"max_hops": 20, "instructions": ["ingress_ts", "egress_ts"]}]},
     "int.watchlist[0]", "64-word stack"),
], ids=lambda v: v if isinstance(v, str) else None)
def test_bad_sections_name_the_field(section, field, words):
    with pytest.raises(TopologyError) as err:
        topo_with(section)
    assert field in str(err.value) and words in str(err.value)


@pytest.mark.parametrize("names, hop_ml", [
    (["node_id"], 1),
    (["node_id", "queue"], 2),
    (["ingress_ts", "egress_ts"], 4),
    (["node_id", "l1_ports", "hop_latency", "queue", "ingress_ts", "egress_ts"], 8),
    (["node_id", "tx_bytes", "tx_time", "link_rate"], 4),
    (["l2_ports", "tx_utilization", "buffer", "checksum_complement"], 5),
])
def test_hop_ml_comes_from_the_layout_the_collector_decodes_with(names, hop_ml):
    ins = it.Instructions.of(names)
    assert ins.hop_ml == hop_ml
    assert ins.ds_id == (ih.FABRIC_DS_ID if ins.ds_bits else 0)


def test_switch_state_sources_on_host_ports_sinks_there_and_reports_towards_the_collector(p4info):
    t = topo_with({"collector": "h3", "refresh_ms": 50, "watchlist": [{"protocol": "udp"}]})
    leaf1 = t.switches["leaf1"]
    state = it.switch_state(p4info, t, "leaf1")
    watch_id = p4info.table(it.WATCHLIST_TABLE).preamble.id
    port_id = p4info.table(it.PORT_TABLE).preamble.id
    watch = [e for e in state.table_entries if e.table_id == watch_id]
    assert len(watch) == 1                       # one rule x one host port x UDP
    ports = [e for e in state.table_entries if e.table_id == port_id]
    assert len(ports) == 3 * len(leaf1.ports)    # normal, E2E-clone and ingress-clone entries per port
    assert [s.session_id for s in state.clone_sessions] == [it.REPORT_SESSION]
    # leaf1 reaches h3 (on leaf2) through spine1
    uplink = next(p.number for p in leaf1.ports.values() if p.peer == "spine1")
    assert state.clone_sessions[0].replicas[0].egress_port == uplink
    defaults = [e for e in state.table_entries if e.is_default_action]
    assert len(defaults) == 2                   # int_switch on, drop_report on


def test_without_the_section_int_is_switched_off(p4info):
    state = it.switch_state(p4info, topology_from_dict(LEAF_SPINE, "t.yaml"), "leaf1")
    no_action = p4info.action("NoAction").preamble.id
    assert state.table_entries and all(e.is_default_action and e.action.action.action_id == no_action
                                       for e in state.table_entries)
    assert state.managed_clone_sessions == {it.REPORT_SESSION} and not state.clone_sessions


def test_probe_layer_matches_the_p4_program():
    c = constants()
    assert probes.ETHERTYPE_SOURCE_ROUTE == c["ETHERTYPE_SOURCE_ROUTE"]
    assert probes.SOURCE_ROUTE_MAX_HOPS == c["SOURCE_ROUTE_MAX_HOPS"]
    assert c["SOURCE_ROUTE_REST_BITS"] == (c["SOURCE_ROUTE_MAX_HOPS"] - 1) * 16
    assert c["INT_STACK_BITS"] == c["INT_MAX_STACK_WORDS"] * 32
    for name in ("INT_UDP_PORT", "REPORT_UDP_PORT", "FABRIC_DS_ID"):
        assert getattr(ih, name) == c[name], name
    assert ih.INT_DSCP == c["INT_DSCP"]
    assert (ih.DS_FLAG_CHANGED, ih.DS_FLAG_TO_HOST) == (c["INT_DS_FLAG_CHANGED"], c["INT_DS_FLAG_TO_HOST"])


def test_probe_frames_dissect_back():
    from scapy.layers.l2 import Ether
    frame = probes.probe_frame([3, 1, 2], src_mac="0a:00:00:00:00:01", dst_mac="0a:00:00:00:00:02",
                               src_ip="10.0.1.1", dst_ip="10.0.2.1", probe_id=5)
    back = Ether(bytes(frame))
    route = back[probes.SourceRoute]
    assert (route.hops_left, route.ports) == (3, [3, 1, 2])
    assert back[ih.INTShim].orig_dport == probes.PROBE_UDP_PORT
    assert back[ih.INTMetadataHeader].remaining_hop_cnt == 3
    with pytest.raises(probes.ProbeError, match="1..16 hops"):
        probes.probe_frame([], src_mac="0a:00:00:00:00:01", dst_mac="0a:00:00:00:00:02",
                           src_ip="10.0.1.1", dst_ip="10.0.2.1")
