"""The derivations of `fabric tune` (features/tuning.py, docs/tuning.md):
each formula against its source's worked numbers, the scaling from bytes at
a reference rate to packets at an emulated port, and the derivation of a
whole topology (per port and class, the section's values, the overlay)."""
import math
from pathlib import Path

import pytest
import yaml

from features import load_topology, topology_from_dict
from features import tuning as tn
from hostagent.ecn.dcqcn import DcqcnParams
from hostagent.rdma.cc.hpcc import HpccParams
from hostagent.rdma.cc.nscc import NsccParams
from hostagent.rdma.cc.rccc import RcccParams
from hostagent.rdma.cc.swift import SwiftParams
from hostagent.rdma.cc.timely import TimelyParams
from wire.lossless import pause_us

REPO = Path(__file__).resolve().parents[3]
LEAF_SPINE = yaml.safe_load((REPO / "topologies" / "leaf-spine.yaml").read_text())
LOSSLESS = {"queues": 8, "classes": [{"name": "collective", "class": 3, "dscp": [26], "lossless": True},
                                     {"name": "storage", "class": 1, "dscp": [10], "share": 0.4}],
            "pfc": {"xoff": 24, "xon": 12, "headroom": 64}, "hold_rate_pps": 500,
            "watchdog": {"detect_ms": 200, "action": "drop"}}


# -- the formulas against their sources -----------------------------------------------------------------------

def test_pfc_headroom_is_ciscos_sum_at_10_gbits_over_100_m_of_fibre():
    """Cisco's PFC white paper at 10 Gbit/s: 641 bytes per 100 m of single-mode fibre each way (513 ns), a
    response of 60 quanta (30720 bit times, 3840 bytes: IEEE 802.1Qbb's bound at 10G), one MTU at each end."""
    one_way = 513e-9
    assert one_way * 10e9 / 8 == pytest.approx(641.25)
    response_s = 60 * 512 / 10e9
    assert response_s * 10e9 / 8 == pytest.approx(3840)
    assert tn.pfc_headroom_bytes(10e9, one_way, 1500, response_s) == pytest.approx(1500 + 2 * 641.25 + 3840 + 1500)


def test_pfc_headroom_without_a_response_is_hpcc_ns3s_bdp_plus_two_packets():
    """HPCC's ns-3 descendants: headroom = rate x delay x 2 + 2 MTU (at 100 Gbit/s, 1 us, 1000 B: 27000 B)."""
    assert tn.pfc_headroom_bytes(100e9, 1e-6, 1000, 0) == pytest.approx(100e9 * 1e-6 / 8 * 2 + 2 * 1000)


def test_headroom_in_packets_is_the_same_sum_at_the_emulated_rate():
    # 100 Mbit/s: 8333 packets/s of 1500 B; no cable delay; two BMv2 traversals of 0.6 ms: 2 frames + 10
    assert tn.headroom_packets(8333, 0, 0.0006) == pytest.approx(2 + 2 * 0.0006 * 8333)
    assert tn.ceil(tn.headroom_packets(8333, 0, 0.0006)) == 12
    for r, d, h in ((833, 0.001, 0.0006), (416, 0.0, 0.0), (8333, 0.004, 0.001)):
        assert tn.headroom_packets(r, d, h) == pytest.approx(
            tn.pfc_headroom_bytes(r * 1500 * 8, d, 1500, 2 * h) / 1500)
    assert tn.ceil(tn.headroom_packets(833, 0.001, 0.0006)) == 5        # 1.67 + 2 + 1.0


def test_xon_keeps_the_egress_busy_and_xoff_sits_above_it_and_above_ecn():
    assert tn.xon_packets(8333, 0, 0.0006) == 11                        # 8333 x 1.2 ms, and the one left below XON
    assert tn.xon_packets(100, 0, 0.0006) == 2                          # the P4 resumes below XON: 1 left
    assert tn.xon_packets(100, 0, 0.0) == 1                             # no round trip: resume when empty
    # HPCC's ns-3 resumes 3 KB below its pause threshold: two of our packets
    assert tn.HYSTERESIS == round(3 * 1024 / tn.PACKET_BYTES) == 2
    assert tn.xoff_packets(10, None) == 12
    assert tn.xoff_packets(10, 20) == 21                                # ECN marks before PFC pauses
    assert tn.xoff_packets(10, 5) == 12


def test_dcqcn_thresholds_are_the_papers_at_its_own_rate_and_rtt():
    """DCQCN at 40 Gbit/s: Kmin 5 KB, Kmax 200 KB, Pmax 1%; its constants fit an RTT of N - Kmax/C = 10 us."""
    assert tn.DCQCN_RTT_S == pytest.approx(50e-6 - 200e3 * 8 / 40e9) == pytest.approx(10e-6)
    pps_40g = 40e9 / 8 / tn.PACKET_BYTES
    assert tn.dcqcn_threshold(5_000, pps_40g, tn.DCQCN_RTT_S) * tn.PACKET_BYTES == pytest.approx(5_000)
    assert tn.dcqcn_threshold(200_000, pps_40g, tn.DCQCN_RTT_S) * tn.PACKET_BYTES == pytest.approx(200_000)
    assert tn.DCQCN_PMAX == 0.01


def test_thresholds_scale_with_the_ports_bdp():
    """Bytes at 40 Gbit/s become packets at the port's rate x the emulated RTT: 0.1 and 4 BDPs."""
    kmin = tn.dcqcn_threshold(tn.DCQCN_KMIN_BYTES, 8333, 0.0036)
    kmax = tn.dcqcn_threshold(tn.DCQCN_KMAX_BYTES, 8333, 0.0036)
    assert kmin == pytest.approx(0.1 * 8333 * 0.0036) and kmax == pytest.approx(4 * 8333 * 0.0036)
    assert tn.dcqcn_threshold(tn.DCQCN_KMAX_BYTES, 2 * 8333, 0.0036) == pytest.approx(2 * kmax)
    assert tn.dcqcn_threshold(tn.DCQCN_KMAX_BYTES, 8333, 2 * 0.0036) == pytest.approx(2 * kmax)


def test_dctcp_k_is_a_seventh_of_the_bdp():
    assert tn.dctcp_k(8333, 0.0036) == math.ceil(8333 * 0.0036 / 7) == 5
    assert tn.dctcp_k(800, 0.0012) == 1                                  # at least one packet
    assert tn.dctcp_k(10e9 / 8 / 1500, 100e-6) == 12                     # 10 Gbit/s, 100 us: 83.3 packets / 7


def test_dcqcn_time_constants_scale_with_the_rtt():
    s = tn.dcqcn_time_scale(0.0036)
    assert s == pytest.approx(360)
    # the project scaled DCQCN's 55 us to 20 ms by hand (hostagent/ecn/dcqcn.py); 3.6 ms of RTT gives 19.8
    assert tn.DCQCN_T_S * s == pytest.approx(0.0198)
    assert DcqcnParams().rate_timer_s == pytest.approx(0.020)


def test_hpcc_additive_step_is_the_projects_formula_and_the_paper_constants_its_defaults():
    p = HpccParams(line_rate_pps=8333, mtu_bytes=1500, base_rtt_s=0.0036, expected_flows=3)
    assert tn.hpcc_w_ai(p.w_init_bytes, 3) == pytest.approx(p.w_ai_bytes)
    assert tn.hpcc_w_ai(30.0, 3) == pytest.approx(0.5)                   # 30 x 0.05 / 3
    assert (tn.HPCC_ETA, tn.HPCC_MAX_STAGE) == (HpccParams().eta, HpccParams().max_stage) == (0.95, 5)


def test_a_healthy_pause_is_each_hop_draining_to_xon_and_resuming():
    # 3 hops, from 12 + 12 to below 10 at 8333 packets/s (15 packets: 1.8 ms) + 1.2 ms of response: 9 ms
    assert tn.healthy_pause_s(12, 12, 10, 8333, 3, 0.0006, 0) == pytest.approx(3 * (15 / 8333 + 0.0012))


def test_numbers_and_port_lists_print_short():
    assert tn.fmt(12.0) == "12" and tn.fmt(0.0198) == "0.0198" and tn.fmt(8.33333) == "8.333"
    assert tn.fmt(4166.5) == "4166.5" and tn.fmt(335.54) == "335.5"
    assert tn.ceil(2.0000000000000004) == 2 and tn.ceil(2.1) == 3
    assert tn.port_list([("leaf1", 4), ("leaf1", 1), ("leaf1", 2), ("leaf1", 3), ("spine1", 1), ("spine1", 2),
                         ("leaf2", 1), ("leaf2", 3)]) == "leaf1:1-4 spine1:1,2 leaf2:1,3"


# -- a topology ------------------------------------------------------------------------------------------------

def test_round_trips_from_cable_delays_and_switch_traversals():
    ls = tn.Paths.of(load_topology("leaf-spine"), tn.HOP_S)
    assert (ls.rtt_max_s, ls.rtt_min_s, ls.switches_max) == pytest.approx((0.0036, 0.0012, 3))
    dumbbell = tn.Paths.of(load_topology("dumbbell"), tn.HOP_S)    # the 1 ms bottleneck both ways, 2 switches
    assert dumbbell.rtt_max_s == pytest.approx(2 * 0.001 + 2 * 2 * 0.0006) and dumbbell.delay_max_s == 0.001
    star = tn.Paths.of(load_topology("star"), 0.001)
    assert star.rtt_max_s == star.rtt_min_s == pytest.approx(0.002)


def by_name(t: tn.Tuning, section: str, name: str, where: str = "") -> list[tn.Derived]:
    return [d for d in t.sections[section] if d.name == name and (not where or d.where == where)]


def test_leaf_spine_without_lossless_or_ecn_derives_ecn_and_congestion_control_only():
    t = tn.derive(load_topology("leaf-spine"))
    assert t.rtt_s == pytest.approx(0.0036) and t.pfc is None and t.ecn == []
    assert "no lossless class in this topology" in t.notes["lossless"][0]
    assert "not written" in t.notes["ecn"][0]
    [k] = by_name(t, "ecn", "ecn.k")
    assert k.value == 5 and k.where == "spine1:1,2 spine2:1,2 leaf1:1-4 leaf2:1-4"
    assert [d.value for d in t.sections["ecn"][1:]] == [3, 63, 0.01]          # Kmax 120 capped below 64
    assert "capped below the queue's depth (64)" in t.sections["ecn"][2].formula
    written = tn.overlay(t, LEAF_SPINE)
    assert list(written) == ["congestion_control"]        # no lossless class, no ECN written: the constants only
    values = {d.name: d.value for section in ("dcqcn", "hpcc", "timely", "swift") for d in t.sections[section]}
    carried = written["congestion_control"]
    assert carried["dilation"] == 1
    assert carried["dcqcn"]["cnp_interval_s"] == 0.018           # 6 significant digits, not 0.018000000000000002
    assert carried["dcqcn"]["rate_timer_s"] == pytest.approx(values["dcqcn.rate_timer_s"], rel=1e-6)
    assert carried["dcqcn"]["at_line_rate"] == [{"line_rate_pps": 8333, "byte_counter_bytes": 8999640,
                                                 "r_ai_pps": pytest.approx(values["dcqcn.r_ai_pps"], rel=1e-6)}]
    assert carried["hpcc"] == {"base_rtt_s": 0.0036, "eta": 0.95, "max_stage": 5,
                               "expected_flows": 3}             # W_init and W_AI follow from these and the line rate
    assert carried["swift"] == {"hops": 3, "per_hop_s": 0.0012, "base_target_s": 0.000120005}
    assert carried["nscc"] == {"base_rtt_s": 0.0036, "target_qdelay_s": 0.0027}        # 0.75 x RTT
    assert carried["rccc"] == {"base_rtt_s": 0.0036}                 # the initial credit follows: a BDP
    assert values["dcqcn.rate_timer_s"] == pytest.approx(0.0198)
    assert values["dcqcn.cnp_interval_s"] == pytest.approx(0.018)
    assert values["dcqcn.byte_counter_bytes"] == round(10e6 * 8333 * 12000 / 40e9 * 360)
    assert values["dcqcn.r_ai_pps"] == pytest.approx(8.333)
    assert values["hpcc.base_rtt_s"] == pytest.approx(0.0036) and values["hpcc.expected_flows"] == 3
    assert values["hpcc.w_init"] == pytest.approx(8333 * 0.0036) and values["hpcc.w_ai"] == pytest.approx(0.5, rel=1e-3)
    assert values["timely.t_low_s"] == pytest.approx(0.0036 + 1 / 8333)
    assert values["timely.t_high_s"] == pytest.approx(0.0036 + 32 / 8333)
    assert values["swift.hops"] == 3 and values["swift.per_hop_s"] == pytest.approx(0.0012)
    assert values["swift.base_target_s"] + 3 * values["swift.per_hop_s"] == pytest.approx(0.0036 + 1 / 8333)


def test_every_value_prints_as_name_value_formula_and_inputs():
    t = tn.derive(load_topology("leaf-spine"))
    lines = tn.report(t)
    assert "  rtt = 3.6 ms  (max over host pairs of 2 (cable delays one way) + 2 (switches on the path) t_hop; " \
           "switches on that path = 3, cable delays one way = 0 ms, t_hop = 0.6 ms, shortest host pair's = 1.2 ms) " \
           "[project]" in lines
    derived = [line for line in lines if " = " in line and line.startswith("  ") and "(" in line]
    assert len(derived) == sum(len(v) for v in t.sections.values())
    for d in (d for v in t.sections.values() for d in v):
        assert d.line().startswith(f"{d.name}{'[' + d.where + ']' if d.where else ''} = {tn.fmt(d.value)}")
        assert f"  ({d.formula}" in d.line() and d.source in tn.SOURCES


def lossless_leaf_spine(ecn=None):
    return topology_from_dict({**LEAF_SPINE, "lossless": LOSSLESS, **({"ecn": ecn} if ecn else {})}, "ls.yaml")


def test_a_lossless_class_gets_headroom_xon_xoff_per_port_and_the_section_the_largest():
    ecn = [{"switch": "leaf1", "towards": "h1", "mode": "step", "k": 10},
           {"switch": "leaf2", "port": "all", "queue": 3, "mode": "wred", "kmin": 5, "kmax": 30, "pmax": 0.2}]
    t = tn.derive(lossless_leaf_spine(ecn))
    assert t.pfc == {"xoff": 13, "xon": 11, "headroom": 12, "pause_quanta": 65535}
    wheres = {d.where for d in by_name(t, "lossless", "lossless.pfc.headroom")}
    assert wheres == {"spine1:1,2 spine2:1,2 class collective", "leaf1:1-4 class collective",
                      "leaf2:1-4 class collective", "section"}          # storage is not lossless: no PFC
    [xoff_leaf1] = by_name(t, "lossless", "lossless.pfc.xoff", "leaf1:1-4 class collective")
    assert xoff_leaf1.value == 13 and any(i.name == "marking starts at" and i.value == 5 for i in xoff_leaf1.inputs)
    # ECN: the section's ports, in its modes, the lossless queue's depth (4 ports x 25) for the cap
    assert t.ecn == [{"switch": "leaf1", "port": 1, "mode": "step", "k": 5},
                     {"switch": "leaf2", "port": "all", "queue": 3, "mode": "wred", "kmin": 3, "kmax": 99,
                      "pmax": 0.01}]
    assert t.watchdog == {"detect_ms": 200, "restore_ms": 400}
    [detect] = t.sections["watchdog"][:1]
    assert any(i.name == "healthy pause" and i.value == pytest.approx(9.0, rel=1e-3) for i in detect.inputs)
    out = tn.overlay(t, {**LEAF_SPINE, "lossless": LOSSLESS})
    assert out["lossless"]["pfc"] == t.pfc and out["lossless"]["classes"] == LOSSLESS["classes"]
    assert out["lossless"]["watchdog"] == {"detect_ms": 200, "action": "drop", "restore_ms": 400}
    assert out["ecn"] == t.ecn
    topo = topology_from_dict({**LEAF_SPINE, **out}, "ls + overlay")   # what it writes is a valid section
    assert topo.features["lossless"].pfc.xoff == 13


def test_a_class_capped_by_its_share_arrives_from_switches_at_that_rate():
    section = {**LOSSLESS, "classes": [{"name": "collective", "class": 3, "dscp": [26], "lossless": True,
                                        "share": 0.5}]}
    t = tn.derive(topology_from_dict({**LEAF_SPINE, "lossless": section}, "ls.yaml"))
    rates = {d.where: next(i.value for i in d.inputs if i.name == "r")
             for d in by_name(t, "lossless", "lossless.pfc.headroom") if d.where != "section"}
    # from a switch: the upstream's queue for the class is capped at half the link; from a host: the NIC's rate
    assert rates == {"spine1:1,2 spine2:1,2 leaf1:3,4 leaf2:3,4 class collective": pytest.approx(4166.5),
                     "leaf1:1,2 leaf2:1,2 class collective": 8333}
    assert t.pfc is not None and t.pfc["headroom"] == 12                # the hosts' ports need the most


def test_ecn_mode_writes_every_switch_port_per_lossless_queue():
    t = tn.derive(lossless_leaf_spine(), ecn_mode="step")
    assert t.ecn == [{"switch": s, "port": "all", "queue": 3, "mode": "step", "k": 5}
                     for s in ("spine1", "spine2", "leaf1", "leaf2")]
    assert t.pfc is not None and t.pfc["xoff"] == 13                     # 11 + 2 > 5 + 1
    with pytest.raises(ValueError, match="step or wred"):
        tn.derive(lossless_leaf_spine(), ecn_mode="red")


def test_the_watchdog_restores_no_sooner_than_a_storming_peers_longest_pause():
    raw = yaml.safe_load((REPO / "topologies" / "ring.yaml").read_text())           # 10 Mbit/s links
    t = tn.derive(topology_from_dict({**raw, "lossless": LOSSLESS}, "ring.yaml"))
    detect, restore = (d.value for d in t.sections["watchdog"])
    assert detect == 200
    assert restore == pytest.approx(pause_us(65535, 10) / 1000)           # 3.36 s: beyond SONiC's 2 x 200 ms


def test_a_measured_rtt_replaces_the_topologys():
    t = tn.derive(load_topology("leaf-spine"), rtt_s=0.0072, hop_s=0.001, flows=10)
    assert t.sections["rtt"][0].value == pytest.approx(7.2) and t.sections["rtt"][0].formula == "given (--rtt-us)"
    values = {d.name: d.value for d in t.sections["hpcc"]}
    assert values["hpcc.base_rtt_s"] == 0.0072 and values["hpcc.expected_flows"] == 10
    for bad in ({"rtt_s": 0}, {"hop_s": -1}, {"flows": 0}):
        with pytest.raises(ValueError):
            tn.derive(load_topology("leaf-spine"), **bad)


def test_what_carries_each_constant_is_true(capsys):
    """The flags `fabric tune` names exist, and every constant of the
    RDMA agents' congestion controls is carried by the overlay's section,
    as a --cc-param the agent takes (the receiver's too for DCQCN's N), or
    said to follow from what is."""
    import argparse

    from hostagent.ecn import roce
    from hostagent.rdma import agent
    helps = {}
    for role in ("send", "receive"):
        with pytest.raises(SystemExit):
            roce.main([role, "--help"])
        helps[role] = capsys.readouterr().out
    t = tn.derive(load_topology("leaf-spine"))
    for d in t.sections["dcqcn"][1:]:
        field = d.name.split(".", 1)[1]
        assert hasattr(DcqcnParams(), field)
        assert f"--dcqcn {field}=VALUE" in d.carried_by
        role = "receive" if field == "cnp_interval_s" else "send"
        flag = "--" + field.replace("_", "-")
        assert f"hostagent.ecn.roce {role} {flag}" in d.carried_by and flag in helps[role]
    agent_options = {p.prog.split()[-1]: set(p._option_string_actions) for a in agent.parser()._actions
                     if isinstance(a, argparse._SubParsersAction) for p in a.choices.values()}
    carried = 0
    for section in ("dcqcn", "hpcc", "timely", "swift", "nscc", "rccc"):
        for d in t.sections[section]:
            field = d.name.split(".", 1)[1]
            if field in ("time_scale", "w_init", "w_ai", "max_cwnd", "initial_credit_packets"):
                assert field == "time_scale" or "follows from" in d.carried_by, d.name
                continue
            assert field in agent.cc_param_fields(section), d.name
            assert f"congestion_control.{section}" in d.carried_by and f"--cc-param {field}=VALUE" in d.carried_by
            roles = ("send", "receive") if field in agent.RECEIVER_CC_PARAMS else ("send",)
            assert f"python -m hostagent.rdma {' and '.join(roles)} --cc-param" in d.carried_by, d.name
            assert all("--cc-param" in agent_options[role] for role in roles)
            carried += 1
    # DCQCN's 3 timers and 2 at the line rate; HPCC 4; TIMELY 3; Swift 3; NSCC 2; RCCC 1
    assert carried == 5 + 4 + 3 + 3 + 2 + 1


def test_nscc_targets_three_quarters_of_the_rtt_as_the_uec_model_does_and_never_below_a_packet():
    """The UEC's htsim model (spcl/HTSIM uec.cpp initNsccParams) with
    trimming: target_Qdelay = 0.75 x the network's RTT; at its reference
    network's 12 us, 9 us. Here at least one packet at the slowest link
    (leaf-spine's 8333 packets/s: 0.12 ms); windows and credit follow from
    the line rate and the RTT (not carried)."""
    topo = load_topology("leaf-spine")
    value = {d.name: d for cc in ("nscc", "rccc") for d in tn.derive(topo, rtt_s=0.012).sections[cc]}
    assert value["nscc.target_qdelay_s"].value == pytest.approx(0.009)
    assert value["nscc.max_cwnd"].value == pytest.approx(1.5 * 8333 * 0.012)
    assert value["rccc.initial_credit_packets"].value == pytest.approx(8333 * 0.012)
    assert "not in the overlay" in value["rccc.initial_credit_packets"].carried_by
    tiny = {d.name: d.value for d in tn.derive(topo, rtt_s=0.0001).sections["nscc"]}
    assert tiny["nscc.target_qdelay_s"] == pytest.approx(1 / 8333)        # 0.075 ms < one packet's 0.12 ms
    written = tn.overlay(tn.derive(topo, rtt_s=0.012), LEAF_SPINE)["congestion_control"]
    assert NsccParams(line_rate_pps=8333, **written["nscc"]).target_qdelay_s == pytest.approx(0.009)
    assert RcccParams(line_rate_pps=8333, **written["rccc"]).base_rtt_s == 0.012


def test_marking_starts_at_the_ports_fan_in_where_the_bdp_would_mark_coincidence():
    """incast's s1 has five ports: packets from the four others arriving
    together queue three deep at the fifth with no overload, so K is 4 there,
    though its 800 packets/s and 1.2 ms make C x RTT / 7 one packet (and 2
    at the hosts' 8333). On leaf-spine at 3.6 ms the BDP's K, 5, is above
    every fan-in and stands."""
    t = tn.derive(load_topology("incast"), ecn_mode="step")
    assert tn.fan_in(load_topology("incast"), "s1") == 4
    ks = {d.where: d for d in by_name(t, "ecn", "ecn.k")}
    assert {w: d.value for w, d in ks.items()} == {"s1:1-4": 4, "s1:5": 4}
    assert ks["s1:5"].formula.startswith("the port's fan-in, above ceil(BDP / 7) = 1")
    assert "fan-in = 4 ports" in ks["s1:5"].line()
    assert all(item["k"] == 4 for item in t.ecn)
    wide = tn.derive(load_topology("leaf-spine"), ecn_mode="step")   # 8333 packets/s, 3.6 ms: 5 > fan-in 3
    [k] = by_name(wide, "ecn", "ecn.k")
    assert k.value == 5 and k.formula == "max(1, ceil(BDP / 7))"
