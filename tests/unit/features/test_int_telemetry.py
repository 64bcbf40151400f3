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
    defaults = {p4info.by_id(e.table_id).preamble.name.split(".")[-1]:
                p4info.by_id(e.action.action.action_id).preamble.name.split(".")[-1]
                for e in state.table_entries if e.is_default_action}
    assert defaults == {"drop_report": "report_drops", "int_source_port": "transit_port"}   # INT on


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


# -- sampling: samplers, raised ports and flows, the runtime ------------------------------

def _params(p4info, entry) -> dict[str, int]:
    action = p4info.action("int_source")
    names = {p.id: p.name for p in action.params}
    return {names[p.param_id]: int.from_bytes(p.value, "big") for p in entry.action.action.params}


def _watchlist(p4info, state):
    watch_id = p4info.table(it.WATCHLIST_TABLE).preamble.id
    return [e for e in state.table_entries if e.table_id == watch_id]


def _entries(p4info, state, table):
    tid = p4info.table(table).preamble.id
    return [e for e in state.table_entries if e.table_id == tid and not e.is_default_action]


def _port_rates(p4info, state) -> dict[int, tuple[str, int | None]]:
    """int_source_port: port -> (action, sample_one_in or None)."""
    out = {}
    for e in _entries(p4info, state, it.SOURCE_PORT_TABLE):
        action = p4info.by_id(e.action.action.action_id).preamble.name.split(".")[-1]
        params = [int.from_bytes(p.value, "big") for p in e.action.action.params]
        out[int.from_bytes(e.match[0].exact.value, "big")] = (action, params[0] if params else None)
    return out


SPARSE = {"collector": "h3", "watchlist": [{"protocol": "udp", "dst_ports": 4791, "sample": 16}]}
MIXED = {"collector": "h3", "watchlist": [{"protocol": "udp", "dst_ports": 4791, "sample": 16},
                                          {"protocol": "udp", "to_host": True, "instructions": ["tx_bytes"]}]}


def host_ports(t, switch):
    return sorted(p.number for p in t.switches[switch].ports.values() if p.peer in t.hosts)


def test_one_rate_for_a_ports_rules_is_counted_at_the_port_and_the_entries_take_every_packet(p4info):
    t = topo_with(SPARSE)
    state = it.switch_state(p4info, t, "leaf2")
    assert _port_rates(p4info, state) == {p: ("sample_port", 16) for p in host_ports(t, "leaf2")}
    params = [_params(p4info, e) for e in _watchlist(p4info, state)]
    assert [(p["sample_one_in"], p["sampler"]) for p in params] == [(1, 1), (1, 2)]


def test_rules_at_different_rates_look_every_packet_up_and_count_in_their_entries(p4info):
    t = topo_with(MIXED)
    state = it.switch_state(p4info, t, "leaf2")               # two host ports: h2, h3
    assert _port_rates(p4info, state) == {p: ("every_packet", None) for p in host_ports(t, "leaf2")}
    params = [_params(p4info, e) for e in _watchlist(p4info, state)]
    assert [(p["sample_one_in"], p["sampler"]) for p in params] == [(16, 1), (16, 2), (1, 0), (1, 0)]


def test_a_raised_port_samples_every_packet_and_its_entries_keep_their_samplers(p4info):
    t = topo_with(SPARSE)
    h2_port = t.nic("h2").switch_port
    t.features["int"] = it.replace(t.features["int"], raised=it.Raised(ports=frozenset({("leaf2", h2_port)})))
    state = it.switch_state(p4info, t, "leaf2")
    other = next(p for p in host_ports(t, "leaf2") if p != h2_port)
    assert _port_rates(p4info, state) == {h2_port: ("every_packet", None), other: ("sample_port", 16)}
    assert [_params(p4info, e)["sampler"] for e in _watchlist(p4info, state)] == [1, 2]


def test_a_raised_flow_is_an_exact_entry_at_its_first_switch_looked_up_before_its_port_counts(p4info):
    t = topo_with(SPARSE)
    h1 = t.nic("h1")
    flow = it.FlowKey(h1.ip, t.nic("h3").ip, 17, 49152, 4791)
    t.features["int"] = it.replace(t.features["int"], raised=it.Raised(flows=frozenset({flow})))
    state = it.switch_state(p4info, t, "leaf1")
    assert len(_entries(p4info, state, it.RAISED_FLOW_TABLE)) == 1
    assert _port_rates(p4info, state) == {h1.switch_port: ("sample_port_after_raised_flows", 16)}
    assert [_params(p4info, e)["sample_one_in"] for e in _watchlist(p4info, state)] == [1]
    assert _entries(p4info, it.switch_state(p4info, t, "leaf2"), it.RAISED_FLOW_TABLE) == []   # nothing elsewhere
    unwatched = it.FlowKey(h1.ip, t.nic("h3").ip, 6, 49152, 80)     # TCP: no rule watches it
    assert it.raised_flow_entries(p4info, t.features["int"].watchlist, [unwatched]) == []


@pytest.mark.parametrize("text", ["10.0.1.1:1>10.0.2.1:2/icmp", "10.0.1.1>10.0.2.1/udp", "x:1>10.0.2.1:2/udp",
                                  "10.0.1.1:70000>10.0.2.1:2/udp"])
def test_a_bad_flow_label_is_an_error_naming_it(text):
    with pytest.raises(it.IntConfigError, match="10.0.1.1|x:1"):
        it.FlowKey.parse(text)


def test_a_flow_label_round_trips():
    text = "10.0.1.1:49152>10.0.2.1:4791/udp"
    assert str(it.FlowKey.parse(text)) == text


@pytest.mark.parametrize("section, field, words", [
    ({"adaptive": {"queue": 0}}, "int.adaptive.queue", "positive integer"),
    ({"adaptive": {"quiet_ms": -1}}, "int.adaptive.quiet_ms", "positive"),
    ({"adaptive": {"colour": 1}}, "int.adaptive.colour", "unknown field"),
    ({"adaptive": 5}, "int.adaptive", "mapping"),
    ({"adaptive": {}, "watchlist": [{"sample": 1}]}, "int.adaptive", "nothing to raise"),
    ({"watchlist": [{"to_host": True, "instructions": ["tx_bytes"], "sample": 4}]}, "int.watchlist[0]",
     "every packet"),
], ids=lambda v: v if isinstance(v, str) else None)
def test_bad_adaptive_sections_name_the_field(section, field, words):
    with pytest.raises(TopologyError) as err:
        topo_with({"collector": "h3", "watchlist": [{"sample": 8}], **section})
    assert field in str(err.value) and words in str(err.value)


class _Controller:
    """What IntRuntime uses of a FabricController: topo and program_tables."""
    def __init__(self, topo, fail_on=None):
        self.topo, self.fail_on, self.programmed = topo, fail_on, []

    def program_tables(self, name, tables):
        assert tuple(tables) == it.SOURCE_TABLES == ("int_source_port", "int_raised_flow", "int_watchlist")
        if name == self.fail_on and self.topo.features["int"].raised:
            raise RuntimeError(f"{name} did not answer")
        self.programmed.append(name)


def test_set_raised_reprograms_only_the_switches_whose_entries_change():
    t = topo_with({**SPARSE, "adaptive": {}})
    ctl = _Controller(t)
    ints = it.IntRuntime(ctl)
    flow = it.FlowKey(t.nic("h1").ip, t.nic("h3").ip, 17, 49152, 4791)
    assert ints.set_raised(flows=[flow]) == ["leaf1"]
    assert ints.raised.flows == {flow} and ctl.programmed == ["leaf1"]
    assert ints.set_raised(flows=[flow]) == []                    # the same again: nothing written
    assert ints.set_raised(ports=[("leaf2", t.nic("h2").switch_port)]) == ["leaf1", "leaf2"]


def test_set_raised_refuses_what_is_not_a_host_port_or_a_fabric_flow_and_changes_nothing():
    t = topo_with({**MIXED, "adaptive": {}})
    ints = it.IntRuntime(_Controller(t))
    uplink = next(p.number for p in t.switches["leaf1"].ports.values() if p.peer == "spine1")
    with pytest.raises(it.IntConfigError, match=f"leaf1 port {uplink}: not a port facing a host"):
        ints.set_raised(ports=[("leaf1", uplink)])
    with pytest.raises(it.IntConfigError, match="no NIC of the fabric"):
        ints.set_raised(flows=[it.FlowKey("192.0.2.1", "10.0.1.1", 17, 1, 2)])
    assert not ints.raised


def test_a_failed_switch_puts_back_the_ones_already_done():
    t = topo_with({**SPARSE, "adaptive": {}})
    ctl = _Controller(t, fail_on="leaf2")
    ints = it.IntRuntime(ctl)
    with pytest.raises(RuntimeError, match="leaf2 did not answer"):
        ints.set_raised(ports=[("leaf1", t.nic("h1").switch_port), ("leaf2", t.nic("h2").switch_port)])
    assert not ints.raised and ctl.programmed == ["leaf1", "leaf1"]     # leaf1 written, then written back
