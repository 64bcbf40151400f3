"""Overlays (control/topology.py load(..., overlays=), what `fabric tune
--out` writes and `fabric run/train --overlay` apply): feature sections
applied over a topology file section by section, validated with it as one
file is, a bad one named by file and field and nothing of it applied."""
from pathlib import Path

import pytest
import yaml

from control.topology import TopologyError, apply_overlays, read_overlay
from features import FEATURES, load_topology

TOPOLOGIES = Path(__file__).resolve().parents[3] / "topologies"
LOSSLESS = {"classes": [{"name": "collective", "class": 3, "dscp": [26], "lossless": True}],
            "pfc": {"xoff": 12, "xon": 10, "headroom": 12}}


def write(tmp_path: Path, name: str, data) -> Path:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data))
    return path


def test_an_overlay_adds_and_replaces_sections_whole(tmp_path):
    plain = load_topology("leaf-spine")
    assert "lossless" not in plain.features and plain.features["int"].collector == "h4"
    over = write(tmp_path, "o.yaml", {"lossless": LOSSLESS, "int": {"collector": "h3"}})
    topo = load_topology("leaf-spine", overlays=[over])
    assert topo.features["lossless"].pfc.xoff == 12 and topo.features["lossless"].pfc.headroom == 12
    int_section = topo.features["int"]
    assert int_section.collector == "h3" and not int_section.watchlist      # replaced whole, not merged
    assert "aggregation" in topo.features                                    # untouched sections stay
    assert topo.source == str(TOPOLOGIES / "leaf-spine.yaml") and topo.overlays == (str(over),)


def test_overlays_apply_in_order_and_null_removes_a_section(tmp_path):
    first = write(tmp_path, "a.yaml", {"lossless": LOSSLESS})
    second = write(tmp_path, "b.yaml", {"lossless": {**LOSSLESS, "pfc": {"xoff": 30, "xon": 20, "headroom": 8}},
                                        "aggregation": None})
    topo = load_topology("leaf-spine", overlays=[first, second])
    assert topo.features["lossless"].pfc.xoff == 30 and "aggregation" not in topo.features
    data = yaml.safe_load((TOPOLOGIES / "leaf-spine.yaml").read_text())
    merged, sources = apply_overlays(data, [first, second], FEATURES)
    assert sources == {"lossless": str(second)} and "aggregation" not in merged
    assert "aggregation" in data                                             # the given mapping is not changed


@pytest.mark.parametrize("content,field,message", [
    pytest.param({"bogus": {}}, "bogus", "unknown section (an overlay sets feature sections: aggregation,",
                 id="unknown-section"),
    pytest.param({"links": []}, "links", "an overlay sets feature sections only", id="base-field"),
    pytest.param("- ecn\n", "", "expected a mapping of feature sections", id="not-a-mapping"),
    pytest.param("", "", "got nothing", id="empty"),
])
def test_an_overlay_that_is_not_sections_is_refused_naming_it(tmp_path, content, field, message):
    over = write(tmp_path, "o.yaml", content)
    with pytest.raises(TopologyError) as exc:
        load_topology("leaf-spine", overlays=[over])
    assert str(exc.value).startswith(f"{over} (overlay): {field + ': ' if field else ''}")
    assert message in str(exc.value)


@pytest.mark.parametrize("section,field,message", [
    pytest.param({"lossless": {**LOSSLESS, "pfc": {"xoff": 5, "xon": 10}}}, "lossless.pfc.xon",
                 "xon (10) must be below xoff (5)", id="xon-above-xoff"),
    pytest.param({"lossless": {**LOSSLESS, "pfc": {"xoff": "12"}}}, "lossless.pfc.xoff", "expected an integer",
                 id="wrong-type"),
    pytest.param({"ecn": [{"switch": "leaf1", "port": 9, "mode": "step", "k": 5}]}, "ecn[0].port",
                 "leaf1 has no port 9", id="a-port-the-topology-lacks"),
    pytest.param({"ecn": [{"switch": "leaf1", "port": "all", "mode": "wred", "kmin": 9, "kmax": 3, "pmax": 0.1}]},
                 "ecn[0].kmin", "kmin (9) must be below kmax (3)", id="wred-order"),
])
def test_a_bad_section_is_named_by_overlay_file_and_field_and_nothing_is_applied(tmp_path, section, field, message):
    good = write(tmp_path, "good.yaml", {"lossless": LOSSLESS})
    bad = write(tmp_path, "bad.yaml", section)
    with pytest.raises(TopologyError) as exc:
        load_topology("leaf-spine", overlays=[good, bad])
    assert str(exc.value) == f"{bad} (overlay on {TOPOLOGIES / 'leaf-spine.yaml'}): {field}: " + \
        str(exc.value).split(f"{field}: ", 1)[1]
    assert message in str(exc.value)
    # nothing half-applied: no topology came back, and the file alone loads as before
    assert "lossless" not in load_topology("leaf-spine").features


def test_the_topologys_own_errors_still_name_the_topology(tmp_path):
    data = yaml.safe_load((TOPOLOGIES / "leaf-spine.yaml").read_text())
    data["aggregation"]["jobs"][0]["server"] = "h9"
    topo_file = write(tmp_path, "ls.yaml", data)
    over = write(tmp_path, "o.yaml", {"lossless": LOSSLESS})
    with pytest.raises(TopologyError, match=rf"^{topo_file}: aggregation"):
        load_topology(topo_file, overlays=[over])


def test_read_overlay_gives_the_sections(tmp_path):
    over = write(tmp_path, "o.yaml", {"lossless": LOSSLESS, "ecn": None})
    assert read_overlay(over, FEATURES) == {"lossless": LOSSLESS, "ecn": None}
    with pytest.raises(TopologyError, match="cannot read overlay"):
        read_overlay(tmp_path / "missing.yaml", FEATURES)
