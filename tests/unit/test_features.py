"""The feature registry: every feature module has the whole interface, and
the topology loader and controller find features through it."""
import pytest

from control import features
from control.p4info import P4Info
from control.topology import TopologyError, from_dict

STAR = {"name": "t", "switches": [{"name": "s1"}], "hosts": ["h1", "h2"], "links": [["h1", "s1"], ["h2", "s1"]]}


def test_every_feature_module_has_the_interface():
    for mod in features.features():
        for attr in ("SECTION", "parse_section", "switch_state", "bench_state"):
            assert hasattr(mod, attr), f"{mod.__name__} lacks {attr}"


def test_sections_are_topology_keys():
    topo = from_dict({**STAR, "ecn": [{"switch": "s1", "port": 1, "mode": "step", "k": 5}]})
    assert set(topo.features) == {"ecn"}


def test_an_unknown_section_names_the_allowed_ones():
    with pytest.raises(TopologyError) as err:
        from_dict({**STAR, "telemetry": []})
    assert "telemetry" in str(err.value) and "ecn" in str(err.value)


def test_switch_state_of_a_file_without_the_section_still_manages_the_tables(p4info: P4Info):
    topo = from_dict(STAR)
    for mod in features.features():
        state = mod.switch_state(p4info, topo, "s1")
        # nothing but default actions put back to "off"
        assert state.managed_tables and all(e.is_default_action for e in state.table_entries), mod.__name__


def test_bench_state_switches_the_feature_on(p4info: P4Info):
    for mod in features.features():
        assert mod.bench_state(p4info, 2).table_entries, mod.__name__


def test_unknown_feature_by_name():
    with pytest.raises(KeyError, match="no feature 'nope'"):
        features.by_name("nope")
