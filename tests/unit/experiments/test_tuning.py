"""fabric tune --validate's pieces that need no live fabric: which hosts the
checks use, how a check reports, and the lossless class a topology without
one is validated with (the checks themselves: tests/e2e/test_tune_validate.py)."""
from pathlib import Path

import pytest
import yaml

from experiments.common import percentile
from experiments.tuning import (REFINE_ROUNDS, REFINED, RESPONSE_MARGIN_PACKETS, Check, Response, Validation,
                                Values, cli_number, longest_pair_hosts, missing)
from fabric.tune import choose_dilation, lossless_class
from features import load_topology, topology_from_dict
from features.tuning import HOP_S, Paths, derive, headroom_packets, overlay

REPO = Path(__file__).resolve().parents[3]


def test_the_incast_runs_along_the_longest_path_from_other_switches():
    topo = load_topology("leaf-spine")
    paths = Paths.of(topo, HOP_S)
    assert paths.switches_max == 3 and paths.pair == ("h1", "h3")   # leaf1 -> spine -> leaf2
    receiver, senders = longest_pair_hosts(topo, paths.pair)
    assert receiver == "h3" and senders == ["h1", "h2"]              # the other leaf's hosts, the pair's first
    fat = load_topology("fat-tree-k4")
    receiver, senders = longest_pair_hosts(fat, Paths.of(fat, HOP_S).pair)
    assert len(senders) == 4 and receiver not in senders
    assert len({fat.hosts[h].switch for h in senders}) == 4          # spread over four edge switches
    assert all(fat.hosts[h].switch != fat.hosts[receiver].switch for h in senders)


def test_a_topology_without_a_lossless_class_is_validated_with_the_trainings():
    raw = yaml.safe_load((REPO / "topologies" / "leaf-spine.yaml").read_text())
    with_class, note = lossless_class(raw)
    assert "fabric train's (class 3 'collective', DSCP 26)" in note and "lossless" not in raw
    config = topology_from_dict(with_class).features["lossless"]
    assert [(c.tclass, c.dscp, c.lossless) for c in config.classes] == [(3, (26,), True)]
    again, note = lossless_class(with_class)                          # one it has is kept
    assert again is with_class and note == ""


def test_a_given_dilation_is_taken_as_it_is():
    topo = load_topology("leaf-spine")
    dilation, why = choose_dilation(topo, "4", ("h1", "h3"))
    assert dilation.factor == 4.0 and why == "given"


def test_the_hold_loop_runs_at_the_fastest_lossless_ports_rate():
    raw = yaml.safe_load((REPO / "topologies" / "leaf-spine.yaml").read_text())
    topo = topology_from_dict(lossless_class(raw)[0])
    t = derive(topo)
    assert t.hold_rate_pps == 8333                                    # 100 Mbit/s, 1500-byte packets
    assert overlay(t, lossless_class(raw)[0])["lossless"]["hold_rate_pps"] == 8333


def test_a_check_names_the_parameter_when_it_fails_and_an_unfaithful_run_either_way():
    ok = Check("incast", "lossless.pfc.headroom", True, "0 missing", "0 missing")
    assert ok.lines()[0] == "PASS incast: 0 missing (target: 0 missing)" and len(ok.lines()) == 2
    bad = Check("incast", "lossless.pfc.headroom", False, "3 missing", "0 missing",
                "lossless.pfc.headroom = 3 packets is too small", "violated: cpu 40%")
    lines = bad.lines()
    assert lines[0].startswith("FAIL incast") and "lossless.pfc.headroom = 3 packets is too small" in lines[2]
    assert "not faithful" in lines[3]
    lucky = Check("incast", "lossless.pfc.headroom", True, "0 missing", "0 missing", fidelity="violated: cpu 40%")
    assert lucky.lines()[0].startswith("PASS") and "not faithful" in lucky.lines()[2] and "proves less" in lucky.lines()[2]


def test_percentile_is_a_sample_of_the_values():
    assert percentile([3, 1, 2], 0.5) == 2 and percentile(list(range(100)), 0.99) == 99
    assert percentile([5.0], 0.9) == 5.0 and percentile([], 0.5) == 0.0


def test_the_pause_response_gives_the_t_hop_that_makes_the_headroom_formula_hold_it_and_the_margin():
    # 3 packets arrived after a pause at a 740 packets/s port with no cable delay, 2 more for the runs to
    # come (RESPONSE_MARGIN_PACKETS): 2 + 2 t_hop r = 5
    assert RESPONSE_MARGIN_PACKETS == 2
    r = Response(beyond_xoff=3, where="leaf1:2", rate_pps=740.0, delay_s=0.0)
    assert r.hop_s() * 1000 == pytest.approx(2.027, abs=1e-3)
    assert headroom_packets(740.0, 0.0, r.hop_s()) == pytest.approx(5.0)
    with_cable = Response(beyond_xoff=3, where="s1:1", rate_pps=100.0, delay_s=0.005)   # the cable holds 1
    assert headroom_packets(100.0, 0.005, with_cable.hop_s()) == pytest.approx(5.0)
    assert Response(beyond_xoff=0, where="s1:1", rate_pps=740.0, delay_s=0.0).hop_s() == 0.0   # never below 0


def test_missing_counts_the_packets_after_the_last_one_received_too():
    rx = {"flows": {"a": {"packets": 90, "lost": 2}, "b": {"packets": 100, "lost": 0}}}
    assert missing(rx, {"h1": {"sent": 92}, "h2": {"sent": 100}}) == (192, 190, 2)     # gaps inside a flow
    assert missing(rx, {"h1": {"sent": 97}, "h2": {"sent": 100}}) == (197, 190, 7)     # and after its last packet


def test_derived_values_reach_the_agents_as_their_options_parse_them():
    assert cli_number(12_830_400) == "12830400", "an int option: no exponent"
    assert cli_number(356076.0) == "356076", "a whole number that came as a float (an overlay's)"
    assert cli_number(0.0625) == "0.0625" and float(cli_number(1234567.25)) == 1234567.25


def test_a_failed_check_names_the_parameter_it_judged_wrong_and_the_refinable_ones_are_t_hops():
    headroom = Check("incast", "lossless.pfc.headroom", False, "", "", why="lossless.pfc.headroom = 4 packets (xoff 5) "
                     "is too small: 2 lossless packets dropped")
    cell = Check("incast", "", False, "", "", why="lossless.pfc_ports (leaf1 from h1) headroom = 5 packets (xoff 6)")
    xon = Check("incast", "", False, "", "", why="lossless.pfc.xon = 4 packets: the receiver's link was used 0.69")
    lost = Check("incast", "", False, "", "", why="3 lossless packets missing at h3, none dropped at the headroom")
    assert (headroom.wrong, cell.wrong, xon.wrong, lost.wrong) == ("lossless.pfc.headroom", "lossless.pfc_ports",
                                                                    "lossless.pfc.xon", "")
    assert {headroom.wrong, cell.wrong, xon.wrong} == set(REFINED) and REFINE_ROUNDS >= 1
    assert Check("incast", "", True, "", "").wrong == ""


def test_a_headroom_drop_blames_the_cell_that_dropped_most_by_its_own_values_or_the_sections(tmp_path):
    """Headroom drops are counted per cell (pfc_headroom_dropped): the cell that dropped most names the values
    whose headroom was short, its own (lossless.pfc_ports) where it has them."""
    raw, _note = lossless_class(yaml.safe_load((REPO / "topologies" / "leaf-spine.yaml").read_text()))
    raw["lossless"]["pfc_ports"] = [{"switch": "leaf1", "from": "h1", "class": "collective",
                                     "xoff": 6, "xon": 4, "headroom": 5}]
    topo = topology_from_dict(raw)
    h1 = topo.hosts["h1"]
    spine_port = next(n for n, p in topo.switches["leaf1"].ports.items() if p.peer == "spine1")
    v = Validation(topo, tmp_path, 3, 26, ("h1", "h3"))
    values = Values(topo.features["lossless"])
    pfc = values.lossless.pfc
    short, where = v._short_headroom({("leaf1", h1.switch_port): 3, ("leaf1", spine_port): 1}, values)
    assert short == "lossless.pfc_ports (leaf1 from h1) headroom = 5 packets (xoff 6)"
    assert where == " ".join(sorted([f"leaf1:{h1.switch_port} (3)", f"leaf1:{spine_port} (1)"]))
    short, _ = v._short_headroom({("leaf1", h1.switch_port): 1, ("leaf1", spine_port): 2}, values)
    assert short == f"lossless.pfc.headroom = {pfc.headroom} packets (xoff {pfc.xoff})"
    assert Check("incast", "", False, "", "", why=short + " is too small: ...").wrong == "lossless.pfc.headroom"


def test_the_probes_figure_is_judged_against_each_cells_own_headroom(tmp_path):
    """What the pause-response probe saw arrive after a pause at a cell is compared with that cell's headroom:
    its own (lossless.pfc_ports) where it has one, the section's elsewhere; the cell furthest short is named."""
    raw, _note = lossless_class(yaml.safe_load((REPO / "topologies" / "leaf-spine.yaml").read_text()))
    raw["lossless"]["pfc"].update(headroom=4)
    raw["lossless"]["pfc_ports"] = [{"switch": "leaf1", "from": "h1", "class": "collective",
                                     "xoff": 6, "xon": 4, "headroom": 9}]
    topo = topology_from_dict(raw)
    h1 = topo.hosts["h1"].switch_port
    spine_port = next(n for n, p in topo.switches["leaf1"].ports.items() if p.peer == "spine1")
    v = Validation(topo, tmp_path, 3, 26, ("h1", "h3"))
    values = Values(topo.features["lossless"])

    def probe(by_cell):
        (where, most) = max(by_cell.items(), key=lambda kv: kv[1])
        return Response(most, f"{where[0]}:{where[1]}", 1000.0, 0.0, by_cell)

    # 8 at h1's cell is within its own 9; 5 at a spine's port is beyond the section's 4
    assert v._short_for_probe(probe({("leaf1", h1): 8, ("leaf1", spine_port): 5}), values) == \
        ("lossless.pfc.headroom = 4 packets", ("leaf1", spine_port), 5)
    assert v._short_for_probe(probe({("leaf1", h1): 12, ("leaf1", spine_port): 5}), values) == \
        ("lossless.pfc_ports (leaf1 from h1) headroom = 9 packets", ("leaf1", h1), 12)
    assert v._short_for_probe(probe({("leaf1", h1): 9, ("leaf1", spine_port): 4}), values) is None
    # a probe that kept its most only: judged at that cell
    assert v._short_for_probe(Response(8, f"leaf1:{h1}", 1000.0, 0.0), values) is None
