"""The feature registry: every feature has the whole contract (control/feature.py)
and its pieces where it says, and the topology loader and the controller
find features through it."""
import pickle
from pathlib import Path

import pytest

import features
from control.feature import Feature, FeatureSpec, HostSection, check_features, check_sections
from control.p4info import P4Info
from control.topology import TopologyError, from_dict
from features import FEATURES, topology_from_dict

REPO = Path(__file__).resolve().parents[3]
STAR = {"name": "t", "switches": [{"name": "s1"}], "hosts": ["h1", "h2"], "links": [["h1", "s1"], ["h2", "s1"]]}


@pytest.mark.parametrize("feature", FEATURES, ids=lambda f: f.name)
def test_every_feature_has_the_contract(feature):
    assert isinstance(feature, Feature)
    assert feature.name and feature.section and feature.summary


@pytest.mark.parametrize("feature", FEATURES, ids=lambda f: f.name)
def test_every_piece_exists_and_carries_the_stem(feature):
    missing = [p for p in feature.pieces.paths() if not (REPO / p).exists()]
    assert not missing, f"{feature.name}: missing {missing}"
    for path in feature.pieces.paths():
        parts = Path(path).parts
        named = Path(path).stem if Path(path).stem != "__init__" else parts[-2]
        assert named.startswith(feature.name), f"{feature.name}: {path} does not carry the stem"


def test_sections_are_topology_keys():
    topo = topology_from_dict({**STAR, "ecn": [{"switch": "s1", "port": 1, "mode": "step", "k": 5}]})
    assert set(topo.features) == {"ecn"}
    assert topo.known_features == FEATURES


def test_an_unknown_section_names_the_allowed_ones():
    with pytest.raises(TopologyError) as err:
        topology_from_dict({**STAR, "telemetry": []})
    assert "telemetry" in str(err.value) and "ecn" in str(err.value)


def test_without_features_a_section_is_refused():
    with pytest.raises(TopologyError, match="ecn"):
        from_dict({**STAR, "ecn": []})


def test_switch_state_of_a_file_without_the_section_still_manages_the_tables(p4info: P4Info):
    topo = topology_from_dict(STAR)
    for f in FEATURES:
        state = f.switch_state(p4info, topo, "s1")
        # nothing but default actions put back to "off"
        assert state.managed_tables and all(e.is_default_action for e in state.table_entries), f.name


def test_bench_states_switch_the_feature_on(p4info: P4Info):
    for f in FEATURES:
        states = f.bench_states(p4info, 2)
        assert states and all(s.table_entries for s in states.values()), f.name


def test_unknown_feature_by_name():
    assert features.by_name("ecn").section == "ecn"
    with pytest.raises(KeyError, match="no feature 'nope'"):
        features.by_name("nope")


def test_two_features_may_not_share_a_name():
    ecn = features.by_name("ecn")
    twin = FeatureSpec("ecn", "ecn2", "a second ecn", ecn.pieces, ecn.parse_section, ecn.switch_state,
                       ecn.bench_states)

    with pytest.raises(TypeError, match="both use 'ecn'"):
        check_features((*FEATURES, twin))
    with pytest.raises(TypeError, match="is not a Feature"):
        check_features((object(),))


@pytest.mark.parametrize("path", sorted((Path(__file__).resolve().parents[3] / "topologies").glob("*.yaml")),
                         ids=lambda p: p.stem)
def test_a_loaded_topology_pickles_with_its_features(path: Path):
    """Background processes (heartbeats) receive the topology pickled: every feature it carries must pickle."""
    topo = features.load_topology(path)
    again = pickle.loads(pickle.dumps(topo))
    assert [f.name for f in again.known_features] == [f.name for f in topo.known_features]
    assert again.features.keys() == topo.features.keys()


def test_host_sections_load_as_feature_sections_do_and_may_not_share_one():
    """A host section (no switch state: the congestion controls' constants) is a topology key beside the
    features', known to overlays too; one that takes a feature's name, or is not a HostSection, is refused."""
    topo = topology_from_dict({**STAR, "congestion_control": {"dilation": 1, "hpcc": {"eta": 0.9}}})
    assert set(topo.features) == {"congestion_control"} and topo.known_features == FEATURES
    with pytest.raises(TopologyError, match="congestion_control"):
        from_dict({**STAR, "congestion_control": {"dilation": 1}}, features=FEATURES)     # without SECTIONS
    ecn = features.by_name("ecn")
    with pytest.raises(TypeError, match="the section 'ecn' is both a feature's and a host section's"):
        check_sections(FEATURES, (HostSection("ecn", "a second ecn", ecn.parse_section),))
    with pytest.raises(TypeError, match="is not a HostSection"):
        check_sections(FEATURES, (ecn,))      # type: ignore[arg-type]
    assert [s.section for s in features.SECTIONS] == ["congestion_control"]
