"""The `congestion_control:` section (features/congestion_control.py): its
fields are the Params dataclasses', bad input is refused naming the field
(in a file or an overlay, and then nothing of the overlay is applied), an
agent gets its congestion control's fields and its line rate's entry, and
a section that says its dilation is rescaled, never dilated twice
(emulator/dilation.py)."""
import dataclasses
from pathlib import Path

import pytest
import yaml

from control.topology import TopologyError
from emulator.dilation import Dilation
from features import congestion_control as cc
from features import load_topology, topology_from_dict
from hostagent.rdma import agent

REPO = Path(__file__).resolve().parents[3]
LEAF_SPINE = yaml.safe_load((REPO / "topologies" / "leaf-spine.yaml").read_text())
SECTION = {"dilation": 1,
           "dcqcn": {"cnp_interval_s": 0.018, "rate_timer_s": 0.0198,
                     "at_line_rate": [{"line_rate_pps": 833, "byte_counter_bytes": 900000, "r_ai_pps": 0.833},
                                      {"line_rate_pps": 8333, "byte_counter_bytes": 8999640, "r_ai_pps": 8.333}]},
           "hpcc": {"base_rtt_s": 0.0036, "eta": 0.95, "max_stage": 5, "expected_flows": 3},
           "timely": {"min_rtt_s": 0.0036, "t_low_s": 0.00372, "t_high_s": 0.00744},
           "swift": {"hops": 3, "per_hop_s": 0.0012, "base_target_s": 0.00012}}


def parsed(section: dict) -> cc.CongestionControlConstants:
    return topology_from_dict({**LEAF_SPINE, "congestion_control": section}).features["congestion_control"]


@pytest.mark.parametrize("name", sorted(cc.FIELDS))
def test_the_fields_are_the_params_dataclasses(name):
    """The features layer imports no agent: its table is checked against them here
    (a field whose default is None, NSCC's init_cwnd, takes a float)."""
    params = agent.CC_PARAMS[name]
    fields = {f.name: type(getattr(params(), f.name) or 0.0) for f in dataclasses.fields(params)}
    assert cc.FIELDS[name] == {k: v for k, v in fields.items() if k not in cc.AGENT_OPTIONS}
    assert cc.FIELDS[name] == agent.cc_param_fields(name)
    assert set(cc.AGENT_OPTIONS) == set(agent.AGENT_OPTIONS)


def test_a_section_loads_and_gives_each_agent_its_fields_and_its_line_rates_entry():
    section = parsed(SECTION)
    assert section.dilation == 1.0
    assert section.params("hpcc", 8333) == {"base_rtt_s": 0.0036, "eta": 0.95, "max_stage": 5, "expected_flows": 3}
    assert isinstance(section.params("swift", 8333)["hops"], int)
    assert section.params("dcqcn", 833) == {"cnp_interval_s": 0.018, "rate_timer_s": 0.0198,
                                            "byte_counter_bytes": 900000, "r_ai_pps": 0.833}
    assert section.params("dcqcn", 8333)["r_ai_pps"] == 8.333
    assert section.params("dcqcn", 840) == section.params("dcqcn", 833)        # within 1%: a rounded rate
    assert section.unmatched("dcqcn", 833) == ""
    # an agent at a line rate with no entry gets the rest, and its launcher says what is left out
    assert section.params("dcqcn", 400) == {"cnp_interval_s": 0.018, "rate_timer_s": 0.0198}
    assert section.unmatched("dcqcn", 400) == ("congestion_control.dcqcn.at_line_rate has no entry at the agents' "
                                               "line rate 400 packets/s (entries at 833, 8333): byte_counter_bytes, "
                                               "r_ai_pps left at their defaults")
    assert section.params("nscc", 400) == {} and section.unmatched("hpcc", 400) == ""


def test_values_at_another_dilation_are_rescaled_from_the_sections():
    section = parsed({**SECTION, "dilation": 4})
    at_1 = section.params("dcqcn", 8333 * 4, dilation=1)         # undilated: times / 4, rates x 4
    assert at_1["cnp_interval_s"] == pytest.approx(0.018 / 4) and at_1["r_ai_pps"] == pytest.approx(8.333 * 4)
    assert at_1["byte_counter_bytes"] == 8999640                   # bytes are no time nor rate
    assert section.params("dcqcn", 8333, dilation=4)["cnp_interval_s"] == 0.018     # its own: as written


@pytest.mark.parametrize("section,field,message", [
    ({**SECTION, "cubic": {}}, "congestion_control.cubic", "unknown field (fields: dcqcn, dilation, hpcc, nscc, rccc, "
                                                            "swift, timely)"),
    ({**SECTION, "timely": {"t_low": 0.01}}, "congestion_control.timely.t_low", "unknown field (fields: alpha, "
                                                                               "at_line_rate, beta, delta_pps"),
    ({**SECTION, "hpcc": {"line_rate_pps": 833}}, "congestion_control.hpcc.line_rate_pps", "unknown field"),
    ({**SECTION, "hpcc": {"base_rtt_s": "3.6ms"}}, "congestion_control.hpcc.base_rtt_s",
     "expected a number, got '3.6ms'"),
    ({**SECTION, "hpcc": {"eta": True}}, "congestion_control.hpcc.eta", "expected a number, got True"),
    ({**SECTION, "swift": {"per_hop_s": -0.001}}, "congestion_control.swift.per_hop_s",
     "expected a finite number >= 0, got -0.001"),
    ({**SECTION, "swift": {"hops": 2.5}}, "congestion_control.swift.hops", "expected a whole number"),
    ({k: v for k, v in SECTION.items() if k != "dilation"}, "congestion_control.dilation",
     "missing: the dilation the values are in"),
    ({**SECTION, "dilation": 0.5}, "congestion_control.dilation", "expected a number >= 1 (1: undilated), got 0.5"),
    ({**SECTION, "dcqcn": {"at_line_rate": {"line_rate_pps": 833}}}, "congestion_control.dcqcn.at_line_rate",
     "expected a list of mappings"),
    ({**SECTION, "dcqcn": {"at_line_rate": [{"r_ai_pps": 1}]}}, "congestion_control.dcqcn.at_line_rate[0].line_rate_pps",
     "missing: the NIC line rate"),
    ({**SECTION, "dcqcn": {"at_line_rate": [{"line_rate_pps": 833}, {"line_rate_pps": 833.0}]}},
     "congestion_control.dcqcn.at_line_rate[1].line_rate_pps", "a second entry at 833 packets/s"),
    ({**SECTION, "dcqcn": {"at_line_rate": [{"line_rate_pps": 833, "g": "x"}]}},
     "congestion_control.dcqcn.at_line_rate[0].g", "expected a number"),
    ([1, 2], "congestion_control", "expected a mapping of dilation and congestion controls"),
])
def test_bad_input_is_refused_naming_the_field(section, field, message):
    with pytest.raises(TopologyError) as err:
        parsed(section)
    assert f"{field}: {message}" in str(err.value)


def test_a_bad_overlay_names_its_file_and_nothing_of_it_is_applied(tmp_path):
    bad = tmp_path / "tuned.yaml"
    bad.write_text(yaml.safe_dump({"ecn": [{"switch": "leaf1", "port": "all", "mode": "step", "k": 5}],
                                   "congestion_control": {**SECTION, "timely": {"hai_after": 1.5}}}))
    with pytest.raises(TopologyError) as err:
        load_topology("leaf-spine", overlays=[bad])
    assert str(err.value).startswith(f"{bad} (overlay on {REPO / 'topologies' / 'leaf-spine.yaml'}): "
                                     "congestion_control.timely.hai_after: expected a whole number")
    good = tmp_path / "good.yaml"
    good.write_text(yaml.safe_dump({"congestion_control": SECTION}))
    topo = load_topology("leaf-spine", overlays=[good])
    assert topo.features["congestion_control"] == parsed(SECTION) and "ecn" not in topo.features


def test_dilating_a_topology_rescales_the_section_from_its_dilation_once():
    undilated = Dilation(4).topology({**LEAF_SPINE, "congestion_control": SECTION})["congestion_control"]
    assert undilated["dilation"] == 4
    assert undilated["timely"]["t_low_s"] == pytest.approx(4 * 0.00372)          # times x 4
    assert undilated["dcqcn"]["at_line_rate"][0] == {"line_rate_pps": pytest.approx(833 / 4),   # rates / 4,
                                                     "byte_counter_bytes": 900000,       # bytes kept,
                                                     "r_ai_pps": pytest.approx(0.833 / 4)}   # not rounded whole
    assert undilated["swift"]["hops"] == 3 and undilated["hpcc"]["eta"] == 0.95
    # derived on a fabric dilated 4 times (fabric tune --validate): a run at 4 takes them as they are ...
    at_4 = {**SECTION, "dilation": 4}
    assert Dilation(4).topology({**LEAF_SPINE, "congestion_control": at_4})["congestion_control"] == at_4
    # ... a run at 2 or undilated rescales them from 4, not from 1
    at_2 = Dilation(2).topology({**LEAF_SPINE, "congestion_control": at_4})["congestion_control"]
    assert at_2["dilation"] == 2 and at_2["timely"]["t_low_s"] == pytest.approx(0.00372 / 2)
    at_1 = Dilation().topology({**LEAF_SPINE, "congestion_control": at_4})["congestion_control"]
    assert at_1["dilation"] == 1 and at_1["dcqcn"]["at_line_rate"][1]["line_rate_pps"] == pytest.approx(8333 * 4)
    # and what the dilated file parses to gives the agents the same numbers as the section would at that dilation
    run = topology_from_dict(Dilation(2).topology({**LEAF_SPINE, "congestion_control": at_4}))
    assert run.features["congestion_control"].params("timely", 8333, dilation=2) == \
        pytest.approx(parsed(at_4).params("timely", 8333, dilation=2))
