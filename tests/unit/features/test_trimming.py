"""The trimming control-plane module (features/trimming.py): the section's
validation naming the entry and field, its expansion to (switch, port,
queue), the lossless classes it keeps clear of, the entries, the header
queues a switch runs, and the runtime handle's refusals."""
import pytest
import yaml

from control.feature import REPO
from control.p4info import EntryError
from control.topology import TopologyError
from features import topology_from_dict
from features import trimming as tr
from tests.unit.features.switch_state import entries

LOSSLESS = {"classes": [{"name": "collective", "class": 3, "dscp": [26], "lossless": True},
                        {"name": "bulk", "class": 1, "dscp": [10]}]}


def incast(section, lossless=None):
    """topologies/incast.yaml with this `trimming:` section (and `lossless:` one)."""
    data = yaml.safe_load((REPO / "topologies" / "incast.yaml").read_text())
    if lossless:
        data["lossless"] = lossless
    data[tr.SECTION] = section
    return topology_from_dict(data, "incast.yaml")


def test_an_entry_expands_to_every_port_of_every_switch_with_the_defaults():
    topo = incast([{"switch": "all", "port": "all", "threshold": 16}])
    profiles = topo.features[tr.SECTION]
    assert set(profiles) == {("s1", p, 0) for p in topo.switches["s1"].ports}
    assert set(profiles.values()) == {tr.TrimProfile(16, header_queue=1, dscp=5, bytes=64)}


def test_towards_names_the_port_and_every_field_is_kept():
    topo = incast([{"switch": "s1", "towards": "h5", "threshold": 8, "header_queue": 3, "dscp": 7, "bytes": 80}])
    port = topo.hosts["h5"].switch_port
    assert topo.features[tr.SECTION] == {("s1", port, 0): tr.TrimProfile(8, 3, 7, 80)}


@pytest.mark.parametrize("item, field, what", [
    ({"port": 1}, "threshold", "expected packets queued, below the queue's depth in BMv2 \\(64\\), 1..63"),
    ({"port": 1, "threshold": 64}, "threshold", "1..63, got 64"),
    ({"port": 1, "threshold": 0}, "threshold", "1..63, got 0"),
    ({"port": 1, "threshold": True}, "threshold", "got True"),
    ({"port": 1, "threshold": 8, "queue": 7}, "queue", "0..6, got 7"),
    ({"port": 1, "threshold": 8, "queue": 2, "header_queue": 2}, "header_queue", "above the trimmed queue \\(2\\), 3..7"),
    ({"port": 1, "threshold": 8, "dscp": 64}, "dscp", "a DSCP, 0..63"),
    ({"port": 1, "threshold": 8, "dscp": 23}, "dscp", "announces INT over TCP"),
    ({"port": 1, "threshold": 8, "bytes": 41}, "bytes", "42..9216, got 41"),
    ({"port": 9, "threshold": 8}, "port", "s1 has no port 9"),
    ({"towards": "h9", "threshold": 8}, "towards", "s1 has no link to 'h9'"),
    ({"port": 1, "threshold": 8, "rate": 3}, "rate", "unknown field"),
])
def test_bad_entries_are_named(item, field, what):
    with pytest.raises(TopologyError, match=rf"trimming\[0\]\.{field}: .*{what}"):
        incast([{"switch": "s1", **item}])


def test_towards_on_every_switch_must_name_a_neighbour_of_one():
    with pytest.raises(TopologyError, match=r"trimming\[0\]\.towards: no switch has a link to 'h9'"):
        incast([{"switch": "all", "towards": "h9", "threshold": 8}])


def test_port_and_towards_are_exclusive_and_one_is_needed():
    for item in ({"threshold": 8}, {"port": 1, "towards": "h1", "threshold": 8}):
        with pytest.raises(TopologyError, match=r"trimming\[0\]: give exactly one of port"):
            incast([{"switch": "s1", **item}])


def test_a_queue_gets_one_entry():
    with pytest.raises(TopologyError, match=r"trimming\[1\]: s1 port 1 queue 0 already has a trimming entry"):
        incast([{"switch": "s1", "port": 1, "threshold": 8}, {"switch": "all", "port": "all", "threshold": 4}])


def test_with_traffic_classes_the_header_queue_is_named_and_kept_clear_of_them():
    with pytest.raises(TopologyError, match=r"trimming\[0\]: with a lossless: section, name the header_queue"):
        incast([{"switch": "s1", "port": 1, "threshold": 8}], LOSSLESS)
    with pytest.raises(TopologyError, match=r"trimming\[0\]\.queue: queue 3 is lossless class collective's queue"):
        incast([{"switch": "s1", "port": 1, "queue": 3, "threshold": 8, "header_queue": 5}], LOSSLESS)
    with pytest.raises(TopologyError, match=r"trimming\[0\]\.header_queue: queue 3 is class collective's queue"):
        incast([{"switch": "s1", "port": 1, "threshold": 8, "header_queue": 3}], LOSSLESS)
    with pytest.raises(TopologyError, match=r"trimming\[0\]\.header_queue: queue 7 is the lossless hold queue"):
        incast([{"switch": "s1", "port": 1, "threshold": 8, "header_queue": 7}], LOSSLESS)
    with pytest.raises(TopologyError, match=r"trimming\[0\]\.dscp: DSCP 10 is traffic class bulk's"):
        incast([{"switch": "s1", "port": 1, "threshold": 8, "header_queue": 5, "dscp": 10}], LOSSLESS)
    topo = incast([{"switch": "s1", "port": 1, "queue": 1, "threshold": 8, "header_queue": 5}], LOSSLESS)
    assert topo.features[tr.SECTION] == {("s1", 1, 1): tr.TrimProfile(8, header_queue=5)}


def test_entries_and_queues_of_a_switch(p4info):
    topo = incast([{"switch": "s1", "towards": "h5", "threshold": 16, "header_queue": 2, "bytes": 100}])
    port = topo.hosts["h5"].switch_port
    state = tr.switch_state(p4info, topo, "s1")
    assert entries(p4info, state, tr.TABLE) == [
        ({"std_meta.egress_spec": port, "std_meta.priority": 0}, "trim_above",
         {"threshold": 16, "header_queue": 2, "trimmed_dscp": 5, "trim_bytes": 100, "cell": port})]
    plan = tr.queues(topo, "s1")
    link_pps = 800                                   # 9.6 Mbit/s at 1500-byte packets
    assert plan.count == 3
    assert dict(plan.settings) == {(port, 2): tr.QueueSetting(rate_pps=link_pps * 1500 // 100)}


def test_without_the_section_nothing_is_trimmed_and_one_queue_suffices(p4info):
    topo = incast(None)
    assert entries(p4info, tr.switch_state(p4info, topo, "s1"), tr.TABLE) == []
    assert tr.queues(topo, "s1").count == 1


def test_the_counter_reads_by_port_and_queue():
    cells = {(0 << 9) | 5: (7, 0), (2 << 9) | 3: (1, 0), 9: (0, 0)}
    assert tr._per_cell({tr.TRIM_COUNTER: cells}) == {"5/0": 7.0, "3/2": 1.0}


class _Controller:
    def __init__(self, topo):
        self.topo = topo
        self.programmed = []

    def program_switch(self, switch):
        self.programmed.append(switch)
        return switch


def test_runtime_changes_a_profile_and_refuses_a_queue_the_switch_does_not_run(p4info):
    def entries_of(topo):
        return entries(p4info, tr.switch_state(p4info, topo, "s1"), tr.TABLE)

    topo = incast([{"switch": "s1", "port": 1, "threshold": 8}])     # s1 runs queues 0..1
    runtime = tr.TrimmingRuntime(_Controller(topo))
    runtime.set_profile("s1", 2, tr.TrimProfile(4))
    assert topo.features[tr.SECTION][("s1", 2, 0)] == tr.TrimProfile(4)
    runtime.set_profile("s1", 2, None)
    assert topo.features[tr.SECTION][("s1", 2, 0)] == tr.TrimProfile(4, on=False)
    assert [m["std_meta.egress_spec"] for m, _a, _p in entries_of(topo)] == [1], "off: no entry"
    runtime.set_profile("s1", 1, None)
    assert entries_of(topo) == [] and tr.queues(topo, "s1").count == 2, "the header queue s1 started with stays"
    runtime.set_profile("s1", 1, tr.TrimProfile(8))
    assert len(entries_of(topo)) == 1
    with pytest.raises(EntryError, match="runs queues 0..1: the header queue \\(3\\)"):
        runtime.set_profile("s1", 2, tr.TrimProfile(4, header_queue=3))
    with pytest.raises(EntryError, match="no switch 'x'"):
        runtime.set_profile("x", 2, tr.TrimProfile(4))
    with pytest.raises(EntryError, match="s1 has no port 42"):
        runtime.set_profile("s1", 42, tr.TrimProfile(4))


def test_many_profiles_program_each_switch_once_and_a_bad_one_applies_nothing():
    topo = incast([{"switch": "all", "port": "all", "threshold": 16}])
    ctl = _Controller(topo)
    runtime = tr.TrimmingRuntime(ctl)
    before = dict(topo.features[tr.SECTION])
    with pytest.raises(EntryError, match="s1 has no port 42"):
        runtime.set_profiles({**{key: None for key in before}, ("s1", 42, 0): tr.TrimProfile(4)})
    assert ctl.programmed == [] and topo.features[tr.SECTION] == before
    reports = runtime.set_profiles({key: None for key in before})
    assert sorted(ctl.programmed) == sorted({sw for sw, _, _ in before}) == sorted(reports)
    assert all(not p.on for p in topo.features[tr.SECTION].values())
