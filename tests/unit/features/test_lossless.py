"""The lossless control-plane module (features/lossless.py): the section
validated with field-named errors, the entries and queue settings it gives
a switch, and runtime changes refused whole when invalid."""
from pathlib import Path

import pytest
import yaml

from control.topology import TopologyError
from features import lossless, topology_from_dict

REPO = Path(__file__).resolve().parents[3]

BASE = {
    "name": "t", "defaults": {"link": {"bandwidth_mbps": 100}},
    "switches": [{"name": "s1"}],
    "hosts": [{"name": "h1"}, {"name": "h2"}],
    "links": [["h1", "s1"], {"a": "h2", "b": "s1", "bandwidth_mbps": 10}],
}
SECTION = {"queues": 8,
           "classes": [{"name": "collective", "class": 3, "dscp": [26], "lossless": True},
                       {"name": "storage", "class": 1, "dscp": [10, 12], "share": 0.5}],
           "pfc": {"xoff": 20, "xon": 10, "headroom": 30, "pause_quanta": 1000},
           "watchdog": {"detect_ms": 200, "action": "forward"}}


def topo_with(section):
    return topology_from_dict({**BASE, "lossless": section}, "t.yaml")


def test_section_parsed_with_defaults():
    cfg = topo_with(SECTION).features["lossless"]
    assert [c.name for c in cfg.classes] == ["collective", "storage"]
    assert cfg.classes[0].queue == 3 and cfg.classes[0].lossless and not cfg.classes[1].lossless
    assert cfg.pfc == lossless.PfcThresholds(20, 10, 30, 1000)
    assert cfg.watchdog == lossless.Watchdog(200.0, 400.0, "forward"), "restoration defaults to 2x detection"
    assert cfg.hold_queue == 7 and cfg.lossless == (cfg.classes[0],)


@pytest.mark.parametrize("change,field,what", [
    ({"queues": 9}, "lossless.queues", "2..8"),
    ({"classes": []}, "lossless.classes", "non-empty"),
    ({"classes": [{"name": "a", "class": 8, "dscp": [1]}]}, "lossless.classes[0].class", "0..7"),
    ({"classes": [{"name": "a", "class": 1, "dscp": [1]}, {"name": "b", "class": 2, "dscp": [1]}]},
     "lossless.classes[1].dscp", "already class 'a'"),
    ({"classes": [{"name": "a", "class": 1, "dscp": [1]}, {"name": "a", "class": 2, "dscp": [2]}]},
     "lossless.classes[1].name", "named twice"),
    ({"classes": [{"name": "a", "class": 1, "dscp": [64]}]}, "lossless.classes[0].dscp", "0..63"),
    ({"classes": [{"name": "a", "class": 1, "queue": 7, "dscp": [1]}]}, "lossless.classes[0].queue", "0..6"),
    ({"classes": [{"name": "a", "class": 1, "dscp": [1], "share": 1.5}]}, "lossless.classes[0].share", "(0, 1]"),
    ({"classes": [{"name": "a", "class": 1, "dscp": [1], "color": "red"}]}, "lossless.classes[0].color", "unknown"),
    ({"pfc": {"xoff": 10, "xon": 10}}, "lossless.pfc.xon", "below xoff"),
    ({"pfc": {"pause_quanta": 70000}}, "lossless.pfc.pause_quanta", "1..65535"),
    ({"watchdog": {"action": "panic"}}, "lossless.watchdog.action", "drop, forward, alert"),
    ({"watchdog": {"detect_ms": 0}}, "lossless.watchdog.detect_ms", "> 0"),
    ({"classes": [{"name": "a", "class": 1, "dscp": [1], "pcp": [8]}]}, "lossless.classes[0].pcp", "0..7"),
    ({"classes": [{"name": "a", "class": 1, "dscp": [1], "pcp": 1}]}, "lossless.classes[0].pcp", "a list"),
    ({"classes": [{"name": "a", "class": 1, "dscp": [1], "pcp": [0, 1]}, {"name": "b", "class": 2, "dscp": [2],
                                                                        "pcp": [1]}]},
     "lossless.classes[1].pcp", "PCP 1 is already class 'a'"),
    ({"classes": [{"name": "a", "class": 3, "dscp": [26], "pcp": [4], "lossless": True}]},
     "lossless.classes[0].pcp", "its PFC priority, its class number 3"),
])
def test_mistakes_are_named(change, field, what):
    with pytest.raises(TopologyError) as err:
        topo_with({**SECTION, **change})
    assert field in str(err.value) and what in str(err.value), str(err.value)


def test_entries_of_a_switch(p4info):
    t = topo_with(SECTION)
    state = lossless.switch_state(p4info, t, "s1")
    names: dict[str, list] = {}
    for e in state.table_entries:
        names.setdefault(p4info.by_id(e.table_id).preamble.name.split(".")[-1], []).append(e)
    assert len(names["traffic_class"]) == 3                  # one entry per DSCP
    assert len(names["pfc_port"]) == len(names["pfc_source"]) == 2
    assert sorted(c.session_id for c in state.clone_sessions) == [lossless.SESSION_BASE + p for p in (1, 2)]
    quanta = {int.from_bytes(e.match[0].exact.value, "big"): int.from_bytes(e.action.action.params[0].value, "big")
              for e in names["pfc_port"]}
    assert quanta == {1: round(5.12 * 1024), 2: round(51.2 * 1024)}, "a quantum is 512 bit times of each link"


def test_pcp_entries_give_the_class_its_first_dscp(p4info):
    section = {**SECTION, "classes": [{"name": "collective", "class": 3, "dscp": [26, 28], "pcp": [3],
                                       "lossless": True},
                                      {"name": "bulk", "class": 1, "dscp": [10], "pcp": [0, 1, 2]}]}
    state = lossless.switch_state(p4info, topo_with(section), "s1")
    remarks = {int.from_bytes(e.match[0].exact.value, "big"): int.from_bytes(e.action.action.params[0].value, "big")
               for e in state.table_entries if p4info.by_id(e.table_id).preamble.name.endswith("pcp_to_dscp")}
    assert remarks == {3: 26, 0: 10, 1: 10, 2: 10}


def test_without_the_section_the_tables_are_still_managed(p4info):
    t = topology_from_dict(BASE, "t.yaml")
    state = lossless.switch_state(p4info, t, "s1")
    assert len(state.table_entries) == 1 and state.table_entries[0].is_default_action, "lossless_switch off"
    assert len(state.managed_tables) == 7
    assert lossless.queues(t, "s1").count == 1


def test_queue_plan():
    t = topo_with(SECTION)
    plan = lossless.queues(t, "s1")
    assert plan.count == 8
    link_pps = {1: 8333, 2: 833}
    for port, pps in link_pps.items():
        assert plan.settings[(port, 1)].rate_pps == pps // 2, "storage: half the link"
        assert plan.settings[(port, 7)].rate_pps == min(2000, pps), "hold queue: at most the link's rate"
        assert plan.settings[(port, 3)].depth == 2 * (20 + 30), "lossless queue: room for every port's headroom"


def test_cell():
    assert lossless.cell(2, 3) == 2 << 3 | 3


PORT_PFC = {"switch": "s1", "from": "h2", "xoff": 6, "xon": 4, "headroom": 5}   # h2's link is 10 Mbit/s


def test_a_port_s_own_thresholds_are_an_entry_per_lossless_class_and_size_the_queue(p4info):
    t = topo_with({**SECTION, "pfc_ports": [PORT_PFC]})
    cfg = t.features["lossless"]
    assert cfg.pfc_ports == (lossless.PortThresholds("s1", "h2", "collective", 6, 4, 5),)
    assert lossless.port_thresholds(t, "s1", cfg) == {(2, 3): lossless.PfcThresholds(6, 4, 5, 1000)}
    state = lossless.switch_state(p4info, t, "s1")
    (entry,) = [e for e in state.table_entries
                if p4info.by_id(e.table_id).preamble.name.endswith(lossless.THRESHOLDS_TABLE)]
    assert [int.from_bytes(m.exact.value, "big") for m in entry.match] == [2, 3]
    assert [int.from_bytes(p.value, "big") for p in entry.action.action.params] == [6, 4, 5]
    # the lossless queue holds each port's XOFF + headroom: port 1 the section's (50), port 2 its own (11)
    assert lossless.queues(t, "s1").settings[(1, 3)].depth == 64
    big = topo_with({**SECTION, "pfc": {"xoff": 40, "xon": 10, "headroom": 60}, "pfc_ports": [
        {**PORT_PFC, "xoff": 30, "headroom": 50}]})
    assert lossless.queues(big, "s1").settings[(1, 3)].depth == 100 + 80
    assert not [e for e in lossless.switch_state(p4info, topo_with(SECTION), "s1").table_entries
                if p4info.by_id(e.table_id).preamble.name.endswith(lossless.THRESHOLDS_TABLE)]


@pytest.mark.parametrize("change,field,what", [
    ({"switch": "s9"}, "lossless.pfc_ports[0].switch", "unknown switch 's9'"),
    ({"from": "h7"}, "lossless.pfc_ports[0].from", "s1 has no link from 'h7' (neighbours: h1, h2)"),
    ({"class": "storage"}, "lossless.pfc_ports[0].class", "a lossless class (collective)"),
    ({"xon": 6}, "lossless.pfc_ports[0].xon", "below xoff"),
    ({"headroom": 0}, "lossless.pfc_ports[0].headroom", "1..524287"),
    ({"xoff": None}, "lossless.pfc_ports[0].xoff", "missing"),
    ({"speed": 3}, "lossless.pfc_ports[0].speed", "unknown"),
])
def test_a_port_s_thresholds_mistakes_are_named(change, field, what):
    item = {k: v for k, v in {**PORT_PFC, **change}.items() if v is not None}
    with pytest.raises(TopologyError) as err:
        topo_with({**SECTION, "pfc_ports": [item]})
    assert field in str(err.value) and what in str(err.value), str(err.value)


def test_a_port_s_thresholds_given_twice_are_refused():
    with pytest.raises(TopologyError, match=r"pfc_ports\[1\]: s1 already has thresholds for class 'collective' from h2"):
        topo_with({**SECTION, "pfc_ports": [PORT_PFC, {**PORT_PFC, "class": "collective"}]})


RING = {
    "name": "r", "defaults": {"link": {"bandwidth_mbps": 100}},
    "switches": ["s1", "s2", "s3"],
    "hosts": ["h1"],
    "links": [["h1", "s1"], ["s1", "s2"], ["s2", "s3"], ["s3", "s1"]],
}
TWO_LOSSLESS = {"classes": [{"name": "collective", "class": 3, "dscp": [26], "lossless": True},
                            {"name": "collective-2", "class": 4, "dscp": [34, 36], "lossless": True},
                            {"name": "bulk", "class": 1, "dscp": [10]}]}
DATELINE = {"switch": "s1", "from": "s3", "to": "s2", "class": "collective", "becomes": "collective-2"}


def ring_with(*changes):
    return topology_from_dict({**RING, "lossless": {**TWO_LOSSLESS, "class_changes": list(changes)}}, "r.yaml")


def test_class_change_entries(p4info):
    t = ring_with(DATELINE)
    assert t.features["lossless"].class_changes == (lossless.ClassChange("s1", "s3", "s2", "collective",
                                                                         "collective-2"),)
    ports = {p.peer: p.number for p in t.switches["s1"].ports.values()}
    (entry,) = [e for e in lossless.switch_state(p4info, t, "s1").table_entries
                if p4info.by_id(e.table_id).preamble.name.endswith("class_change")]
    assert [int.from_bytes(m.exact.value, "big") for m in entry.match] == [ports["s3"], ports["s2"], 3]
    assert [int.from_bytes(p.value, "big") for p in entry.action.action.params] == [4, 4, 34], \
        "class 4, its queue, its first DSCP"
    assert not [e for e in lossless.switch_state(p4info, t, "s2").table_entries
                if p4info.by_id(e.table_id).preamble.name.endswith("class_change")]


@pytest.mark.parametrize("change,field,what", [
    ({"switch": "s9"}, "lossless.class_changes[0].switch", "unknown switch"),
    ({"from": "h1", "to": "s9"}, "lossless.class_changes[0].to", "no link to 's9'"),
    ({"class": "bulk"}, "lossless.class_changes[0].class", "expected a lossless class"),
    ({"becomes": "nope"}, "lossless.class_changes[0].becomes", "expected a lossless class"),
    ({"becomes": "collective"}, "lossless.class_changes[0].becomes", "needs another class"),
    ({"via": "s2"}, "lossless.class_changes[0].via", "unknown field"),
])
def test_class_change_mistakes_are_named(change, field, what):
    with pytest.raises(TopologyError) as err:
        ring_with({**DATELINE, **change})
    assert field in str(err.value) and what in str(err.value), str(err.value)


def test_the_same_class_change_twice_is_refused():
    with pytest.raises(TopologyError) as err:
        ring_with(DATELINE, DATELINE)
    assert "lossless.class_changes[1]" in str(err.value) and "already changes" in str(err.value)


def test_bounce_rule_on_a_clos():
    """`{switch: all, from: up, to: up}`: Tagger's rule for a Clos; every
    leaf changes the class of what comes down from one spine and goes up to
    another (a bounce); spines have no higher tier, so no rule."""
    data = {"name": "ls", "defaults": {"link": {"bandwidth_mbps": 100}},
            "switches": [{"name": "spine1", "role": "spine"}, {"name": "spine2", "role": "spine"}, "leaf1", "leaf2"],
            "hosts": ["h1", "h2"],
            "links": [["h1", "leaf1"], ["h2", "leaf2"], ["leaf1", "spine1"], ["leaf1", "spine2"],
                      ["leaf2", "spine1"], ["leaf2", "spine2"]],
            "lossless": {**TWO_LOSSLESS, "class_changes": [{"switch": "all", "from": "up", "to": "up",
                                                            "class": "collective", "becomes": "collective-2"}]}}
    changes = topology_from_dict(data, "ls.yaml").features["lossless"].class_changes
    assert {(c.switch, c.src, c.dst) for c in changes} == {
        ("leaf1", "spine1", "spine2"), ("leaf1", "spine2", "spine1"),
        ("leaf2", "spine1", "spine2"), ("leaf2", "spine2", "spine1")}


def test_switch_all_needs_up_neighbours():
    with pytest.raises(TopologyError) as err:
        ring_with({**DATELINE, "switch": "all"})
    assert "lossless.class_changes[0].from" in str(err.value) and "'up'" in str(err.value)


def test_a_class_a_global_hop_on_a_dragonfly():
    """`{switch: all, from: global, to: any}`, one rule a class: every
    switch moves what arrives over a global link (from a switch of another
    group) to the next class, whichever neighbour it leaves to; what
    arrives over a local link keeps its class."""
    raw = yaml.safe_load((REPO / "topologies" / "dragonfly-small.yaml").read_text())
    three = {"classes": [*TWO_LOSSLESS["classes"],
                         {"name": "collective-3", "class": 5, "dscp": [40], "lossless": True}],
             "class_changes": [{"switch": "all", "from": "global", "to": "any", "class": "collective",
                                "becomes": "collective-2"},
                               {"switch": "all", "from": "global", "to": "any", "class": "collective-2",
                                "becomes": "collective-3"}]}
    t = topology_from_dict({**raw, "lossless": three}, "df.yaml")
    changes = t.features["lossless"].class_changes
    # g1r1: global link to g2r2, local to g1r2, host h1
    assert {(c.src, c.dst, c.tclass, c.becomes) for c in changes if c.switch == "g1r1"} == {
        ("g2r2", "g1r2", "collective", "collective-2"), ("g2r2", "h1", "collective", "collective-2"),
        ("g2r2", "g1r2", "collective-2", "collective-3"), ("g2r2", "h1", "collective-2", "collective-3")}
    assert len(changes) == 6 * 2 * 2, "six switches, one global link each, two neighbours beyond it, two rules"
    with pytest.raises(TopologyError) as err:
        ring_with({**DATELINE, "switch": "all", "from": "global", "to": "any"})
    assert "lossless.class_changes[0].from" in str(err.value) and "needs a group on every switch" in str(err.value)
    with pytest.raises(TopologyError) as err:
        ring_with({**DATELINE, "to": "global"})
    assert "lossless.class_changes[0].to" in str(err.value) and "'any'" in str(err.value)
