"""`fabric tune` (fabric/tune.py) run in-process: what it prints and the
overlay it writes, and the overlay taken by `fabric run`, `fabric train`
and the ECN and lossless experiments, a bad one refused by name before
anything starts."""
import dataclasses
import signal
from pathlib import Path

import pytest
import yaml

from emulator.dilation import Dilation
from experiments import common, ecn_incast, lossless, rdma, train
from features import load_topology, topology_from_dict
from features.tuning import derive, overlay
from hostagent.collectives import ddp
from hostagent.rdma import agent as rdma_agent
from features.ecn import EcnProfile
from features import lossless as lossless_feature
from features.lossless import PfcThresholds
from fabric import cli, run, tune

REPO = Path(__file__).resolve().parents[3]
# the section the lossless experiment's incast phase gives incast.yaml (experiments/lossless.py section())
CLASSES = {"lossless": {"queues": 8, "classes": [{"name": "collective", "class": 3, "dscp": [26], "lossless": True}],
                        "pfc": {"xoff": 24, "xon": 12, "headroom": 32}}}


def test_leaf_spine_prints_every_derivation_and_the_congestion_controls_constants_to_write(capsys):
    assert tune.main(["--topology", str(REPO / "topologies" / "leaf-spine.yaml")]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"fabric tune: {REPO / 'topologies' / 'leaf-spine.yaml'} (leaf-spine)\n")
    assert "\n  rtt = 3.6 ms  (max over host pairs of 2 (cable delays one way)" in out
    assert "no lossless class in this topology" in out and "not written (--ecn step|wred writes them)" in out
    assert "\n  ecn.k[spine1:1,2 spine2:1,2 leaf1:1-4 leaf2:1-4] = 5 packets  (max(1, ceil(BDP / 7)); " \
           "r = 8333 packets/s, RTT = 3.6 ms, BDP = r RTT = 30 packets) [dctcp]\n" in out
    assert "\n  dcqcn.rate_timer_s = 0.0198 s  (T_ref x s; T_ref = 55 us, s = 360) [dcqcn]\n" in out
    assert "carried by: overlay: congestion_control.dcqcn.rate_timer_s (fabric train, fabric experiment rdma " \
           "--overlay: python -m hostagent.rdma send --cc-param rate_timer_s=VALUE); fabric experiment ecn_incast|lossless " \
           "--overlay (python -m hostagent.ecn.roce send --rate-timer-s), or ecn_incast --dcqcn rate_timer_s=VALUE" in out
    assert "\n  hpcc.w_ai[NIC line rate 8333 packets/s] = 0.5 packets  (W_init (1 - eta) / N; W_init = 30 packets, " \
           "eta = 0.95, N = 3) [hpcc]\n" in out
    assert "carried by: overlay: congestion_control.hpcc.base_rtt_s (fabric train, fabric experiment rdma " \
           "--overlay: python -m hostagent.rdma send --cc-param base_rtt_s=VALUE)" in out
    # no lossless class, no ECN profile written: the overlay holds the congestion controls' constants only
    overlay = out.split("apply it):\n", 1)[1]
    assert list(yaml.safe_load(overlay)) == ["congestion_control"]
    assert "\n  hpcc: {base_rtt_s: 0.0036, eta: 0.95, max_stage: 5, expected_flows: 3}\n" in overlay


def test_the_front_door_runs_it_and_the_overlay_it_writes_loads(tmp_path, capsys):
    out_file = tmp_path / "tuned.yaml"
    assert cli.main(["tune", "--topology", "leaf-spine", "--ecn", "step", "--rtt-us", "7200",
                     "--out", str(out_file)]) == 0
    out = capsys.readouterr().out
    assert "\n  rtt = 7.2 ms  (given (--rtt-us); unloaded, the topology's longest = 3.6 ms) [project]\n" in out
    assert f"overlay written: {out_file} (ecn, congestion_control); apply it with fabric run --topology leaf-spine " \
           f"--overlay {out_file}" in out
    text = out_file.read_text()
    assert text.startswith("# Overlay derived by `fabric tune --topology leaf-spine --rtt-us 7200 --ecn step` from ")
    written = yaml.safe_load(text)
    assert written["ecn"] == [{"switch": s, "port": "all", "mode": "step", "k": 9}
                              for s in ("spine1", "spine2", "leaf1", "leaf2")]
    assert written["congestion_control"]["timely"]["min_rtt_s"] == 0.0072 and list(written) == ["ecn",
                                                                                                "congestion_control"]
    topo = load_topology("leaf-spine", overlays=[out_file])
    assert topo.features["ecn"][("leaf1", 3, None)] == EcnProfile.step(9)


def test_a_lossless_topology_gets_its_pfc_section_written(tmp_path, capsys):
    """incast.yaml as the lossless experiment composes it (its class, given by --overlay)."""
    classes = tmp_path / "classes.yaml"
    classes.write_text(yaml.safe_dump(CLASSES))
    out_file = tmp_path / "tuned.yaml"
    assert tune.main(["--topology", "incast", "--overlay", str(classes), "--out", str(out_file)]) == 0
    out = capsys.readouterr().out
    assert "\n  rtt = 1.2 ms  (" in out                                # one switch: two traversals
    # the senders' 100 Mbit/s ports need the most headroom; h5's 9.6 Mbit/s port (800 packets/s) the least
    assert "\n  lossless.pfc.headroom[s1:1-4 class collective] = 12 packets  (ceil(2 d r + 2 + 2 t_hop r)" in out
    assert "\n  lossless.pfc.headroom[s1:5 class collective] = 3 packets  (" in out
    assert "\n  lossless.pfc.headroom[section] = 12 packets  (max over ports and classes" in out
    written = yaml.safe_load(out_file.read_text())
    # the hold loop at the fastest lossless port's rate (100 Mbit/s: 8333 packets/s); h5's port its own values
    own = written["lossless"].pop("pfc_ports")
    assert written["lossless"] == {**CLASSES["lossless"], "hold_rate_pps": 8333,
                                   "pfc": {"xoff": 13, "xon": 11, "headroom": 12, "pause_quanta": 65535}}
    assert own == [{"switch": "s1", "from": "h5", "class": "collective", "xoff": own[0]["xoff"],
                    "xon": own[0]["xon"], "headroom": 3}] and own[0]["xon"] < own[0]["xoff"] < 13, own
    assert "1 (port, class) cells have values of their own (carried by the overlay's lossless.pfc_ports)" in out
    # DCQCN's per-line-rate constants: one entry per NIC line rate (the senders' 100 Mbit/s, h5's 9.6)
    assert [e["line_rate_pps"] for e in written["congestion_control"]["dcqcn"]["at_line_rate"]] == [800, 8333]
    assert f"fabric run --topology incast --overlay {classes} --overlay {out_file}" in out
    topo = load_topology("incast", overlays=[classes, out_file])
    assert topo.features["lossless"].pfc == PfcThresholds(13, 11, 12)
    assert topo.features["lossless"].hold_rate_pps == 8333
    assert lossless_feature.port_thresholds(topo, "s1", topo.features["lossless"]) == {
        (5, 3): PfcThresholds(own[0]["xoff"], own[0]["xon"], 3)}


@pytest.mark.parametrize("argv,message", [
    (["--topology", "nope"], "no topology named 'nope'"),
    (["--topology", "leaf-spine", "--rtt-us", "0"], "--rtt-us must be > 0"),
    (["--topology", "leaf-spine", "--flows", "0"], "--flows must be >= 1"),
    (["--topology", "leaf-spine", "--overlay", "/nonexistent/o.yaml"], "/nonexistent/o.yaml: cannot read overlay"),
])
def test_bad_arguments_are_named(argv, message, capsys):
    assert tune.main(argv) == 2
    assert message in capsys.readouterr().err


@pytest.fixture
def sigterm_kept():
    """fabric run's and fabric train's mains install a SIGTERM handler: put the test process's back."""
    kept = signal.getsignal(signal.SIGTERM)
    yield
    signal.signal(signal.SIGTERM, kept)


def bad_overlay(tmp_path: Path) -> Path:
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump({"lossless": {**CLASSES["lossless"], "pfc": {"xoff": 5, "xon": 10}}}))
    return path


def test_fabric_run_refuses_a_bad_overlay_before_anything_starts(tmp_path, capsys, sigterm_kept):
    bad = bad_overlay(tmp_path)
    assert run.main(["--topology", "leaf-spine", "--overlay", str(bad), "--no-cli"]) == 2
    err = capsys.readouterr().err
    assert f"error: {bad} (overlay on {REPO / 'topologies' / 'leaf-spine.yaml'}): lossless.pfc.xon: " \
           "xon (10) must be below xoff (5)" in err


def test_fabric_train_takes_an_overlay_into_its_composition(tmp_path, capsys, sigterm_kept):
    over = tmp_path / "o.yaml"
    over.write_text(yaml.safe_dump({"lossless": {**CLASSES["lossless"], "pfc": {"xoff": 12, "xon": 10, "headroom": 12}},
                                    "ecn": [{"switch": "leaf1", "port": "all", "mode": "step", "k": 5}],
                                    "aggregation": {"jobs": []}, "failover": None}))
    topo, raw = train.composed_topology("leaf-spine", train.Composition(), ["h1", "h2", "h3", "h4"], [over])
    assert topo.features["lossless"].pfc == PfcThresholds(12, 10, 12) and ("leaf1", 1, None) in topo.features["ecn"]
    assert "aggregation" not in raw and "failover" in raw          # a technique's on/off is the composition's
    assert topo.overlays == (str(over),)
    lossy, raw = train.composed_topology("leaf-spine", train.Composition(traffic_class="lossy"), ["h1", "h2"], [over])
    assert "lossless" not in raw and "ecn" in raw
    _, sources, left = train.overlay_sections(train.composed_topology("leaf-spine", train.Composition(),
                                                                      ["h1", "h2"])[1], [over])
    assert sorted(sources) == ["ecn", "lossless"] and sorted(left) == ["aggregation", "failover"]
    other = tmp_path / "other-class.yaml"
    other.write_text(yaml.safe_dump({"lossless": {"classes": [{"name": "c", "class": 4, "dscp": [26],
                                                               "lossless": True}]}}))
    with pytest.raises(ValueError, match="the ranks send DSCP 26 in lossless class 3"):
        train.composed_topology("leaf-spine", train.Composition(), ["h1", "h2"], [other])
    assert train.main(["--topology", "leaf-spine", "--overlay", str(bad_overlay(tmp_path))]) == 2
    assert "lossless.pfc.xon: xon (10) must be below xoff (5)" in capsys.readouterr().out


def test_the_ecn_experiment_takes_the_bottlenecks_profile_of_each_mode(tmp_path):
    port = load_topology("incast").hosts["h5"].switch_port
    step = tmp_path / "step.yaml"
    step.write_text(yaml.safe_dump({"ecn": [{"switch": "s1", "port": port, "mode": "step", "k": 2}]}))
    cases = {c.name: c.profile for c in ecn_incast.tuned_cases(load_topology("incast", overlays=[step]))}
    assert cases == {"no-ecn": None, "step-ecn-dcqcn": EcnProfile.step(2), "wred-ecn-dcqcn": EcnProfile.wred(5, 30, 0.2)}
    assert [c.profile for c in ecn_incast.tuned_cases(load_topology("incast"))] == [c.profile for c in ecn_incast.CASES]
    with pytest.raises(SystemExit) as exc:
        ecn_incast.main(["--overlay", str(bad_overlay(tmp_path))])
    assert exc.value.code == 2


def test_the_ecn_and_lossless_experiments_dcqcn_agents_take_the_overlays_constants(tmp_path, capsys):
    over = tmp_path / "cc.yaml"
    over.write_text(yaml.safe_dump({"congestion_control": {"dilation": 1, "dcqcn": {
        "cnp_interval_s": 0.018, "rate_timer_s": 0.0198,
        "at_line_rate": [{"line_rate_pps": 500, "byte_counter_bytes": 90000, "r_ai_pps": 0.5}]}}}))
    topo = load_topology("incast", overlays=[over])
    assert common.dcqcn_constants(topo, 500, []) == {"cnp_interval_s": 0.018, "rate_timer_s": 0.0198,
                                                         "byte_counter_bytes": 90000, "r_ai_pps": 0.5}
    assert "dcqcn from the overlay's congestion_control: " in capsys.readouterr().out
    # --dcqcn over the overlay's; at another line rate the per-rate entry does not apply, and it says so
    got = common.dcqcn_constants(topo, 800, [("rate_timer_s", 0.05), ("g", 0.0625)])
    assert got == {"cnp_interval_s": 0.018, "rate_timer_s": 0.05, "g": 0.0625}
    out = capsys.readouterr().out
    assert "has no entry at the agents' line rate 800 packets/s (entries at 500): byte_counter_bytes, r_ai_pps " \
           "left at their defaults" in out
    assert "dcqcn from --dcqcn: rate_timer_s = 0.05, g = 0.0625" in out
    assert common.dcqcn_constants(load_topology("incast"), 500, []) == {}
    for bad, named in ([("rate_timer", 1)], "rate_timer: not a parameter of dcqcn"), \
            ([("byte_counter_bytes", 1.5)], "byte_counter_bytes: expected a whole number"), \
            ([("line_rate_pps", 400)], "the senders' line rate is the experiment's --sender-rate"):
        with pytest.raises(ValueError, match=named):
            common.dcqcn_constants(topo, 500, bad)
    for flag, named in (("g", "expected NAME=VALUE"), ("r_ai_pps=nan", "r_ai_pps: expected a finite number")):
        with pytest.raises(SystemExit) as exc:
            ecn_incast.main(["--dcqcn", flag])
        assert exc.value.code == 2 and named in capsys.readouterr().err
    # the agents get them as their own flags (the CNP interval the receiver's)
    assert common.roce_dcqcn_args({"cnp_interval_s": 0.018, "rate_timer_s": 0.0198, "byte_counter_bytes": 90000}) \
        == (["--cnp-interval-s", "0.018"], ["--rate-timer-s", "0.0198", "--byte-counter-bytes", "90000"])
    with pytest.raises(SystemExit) as exc:
        ecn_incast.main(["--overlay", str(over), "--dcqcn", "min_rate_pps=0"])
    assert exc.value.code == 2 and "min_rate_pps" in capsys.readouterr().err
    # the lossless experiment's incast (its pfc-dcqcn case) takes them too, refused by name before it starts
    bad = tmp_path / "bad-cc.yaml"
    bad.write_text(yaml.safe_dump({"congestion_control": {"dilation": 1, "dcqcn": {"g": 2.0}}}))
    with pytest.raises(SystemExit) as exc:
        lossless.main(["--phases", "incast", "--overlay", str(bad)])
    assert exc.value.code == 2 and "g must be within (0, 1]" in capsys.readouterr().err


def test_the_lossless_experiments_incast_takes_pfc_and_marking_from_an_overlay(tmp_path):
    port = load_topology("incast").hosts["h5"].switch_port
    over = tmp_path / "o.yaml"
    over.write_text(yaml.safe_dump({**CLASSES, "ecn": [{"switch": "s1", "port": port, "queue": 3, "mode": "step",
                                                        "k": 1}]}))
    over.write_text(over.read_text().replace("xoff: 24", "xoff: 12").replace("xon: 12", "xon: 10")
                    .replace("headroom: 32", "headroom: 12"))
    assert lossless.incast_tuning(load_topology("incast", overlays=[over])) == (PfcThresholds(12, 10, 12),
                                                                               EcnProfile.step(1))
    assert lossless.incast_tuning(load_topology("incast")) == (lossless.INCAST_PFC, lossless.INCAST_MARKING)
    assert lossless.section(True).pfc == PfcThresholds(24, 12, 32)        # hand-set, as before
    with pytest.raises(SystemExit) as exc:
        lossless.main(["--overlay", str(bad_overlay(tmp_path))])
    assert exc.value.code == 2


AGENT = ["send", "--iface", "h1-eth0", "--src-ip", "10.0.1.1", "--src-mac", "02:00:00:00:00:01",
         "--gw-mac", "02:00:00:00:00:02", "--dst-ip", "10.0.2.1", "--qp", "1"]


def built_params(cc: str, line_rate_pps: float, cc_args: list[str], dilation: float = 1.0) -> dict:
    """The Params the RDMA agent builds from these options, as a mapping."""
    a = rdma_agent.parser().parse_args([*AGENT, "--cc", cc, "--line-rate-pps", f"{line_rate_pps:g}",
                                        "--dilation", f"{dilation:g}", *cc_args])
    made = rdma_agent.congestion_controls()[cc](a)
    return dataclasses.asdict(made.params if cc == "dcqcn" else made.p)


def test_the_overlays_constants_reach_the_agents_the_experiments_start_as_written(tmp_path, capsys):
    """fabric tune --out, then the rdma experiment's and fabric train's agents: the same numbers."""
    tuned = tmp_path / "tuned.yaml"
    assert tune.main(["--topology", "incast-leaf-spine", "--out", str(tuned)]) == 0
    written = yaml.safe_load(tuned.read_text())["congestion_control"]
    assert written["dilation"] == 1
    topo = rdma.with_int_to_host(REPO / "topologies" / "incast-leaf-spine.yaml", overlays=[tuned])
    capacity = rdma.bottleneck_pps(topo)                           # 833 packets/s: the NICs' line rate
    for cc in ("dcqcn", "hpcc", "timely", "swift"):
        args = rdma.cc_arguments(topo, cc, "send", capacity, Dilation())
        params = built_params(cc, capacity, args)
        expected = {k: v for k, v in written[cc].items() if k != "at_line_rate"}
        for entry in written[cc].get("at_line_rate", []):
            if entry["line_rate_pps"] == capacity:
                expected.update({k: v for k, v in entry.items() if k != "line_rate_pps"})
        assert expected and {k: params[k] for k in expected} == expected, cc
    assert [sorted(e) for e in written["dcqcn"]["at_line_rate"]] == [["byte_counter_bytes", "line_rate_pps",
                                                                      "r_ai_pps"]]      # one NIC line rate here
    receiver = rdma.cc_arguments(topo, "dcqcn", "receive", capacity, Dilation())
    assert receiver == ["--cc-param", f"cnp_interval_s={written['dcqcn']['cnp_interval_s']!r}"]
    rx = rdma_agent.parser().parse_args(["receive", *AGENT[1:9], *receiver])
    assert rdma_agent.transport_params(rx).cnp_interval_s == written["dcqcn"]["cnp_interval_s"]
    assert rdma.check_cc_constants(topo, ["hpcc"], capacity, Dilation()) == [
        "hpcc from the overlay's congestion_control: " + ", ".join(f"{k} = {v:g}" for k, v in written["hpcc"].items())]
    # fabric train: the ranks' command lines (hostagent.collectives.ddp) carry the same numbers
    ranks = ["h1", "h2", "h3", "h4"]
    composition = train.Composition(cc="timely")
    topo_t, _ = train.composed_topology("incast-leaf-spine", composition, ranks, [tuned])
    given, unmatched = train.cc_constants(topo_t, "timely", 400.0, train.MTU)
    assert given == written["timely"] and unmatched == ""
    hosts = [topo_t.hosts[n].primary for n in ranks]
    cmd = train.rank_args(0, hosts, composition, 5, 400.0, topo_t, tmp_path / "t.yaml", tmp_path, given)
    rank = ddp.parser().parse_args(cmd)
    assert rdma_agent.cc_param_values(rank.cc, rank.cc_param, "send", rank.line_rate_pps) == written["timely"]
    # DCQCN's per-line-rate constants have no entry at the ranks' 400 packets/s: said, not guessed
    assert "no entry at the agents' line rate 400 packets/s (entries at 833)" in \
        train.cc_constants(topo_t, "dcqcn", 400.0, train.MTU)[1]


def test_values_derived_on_a_dilated_fabric_are_not_dilated_again(tmp_path):
    """What fabric tune --validate writes (derived on the fabric dilated 4 times, its section's dilation 4):
    a run at 4 gives the agents those numbers; a run at 2 rescales them from 4, not from 1."""
    path = REPO / "topologies" / "incast-leaf-spine.yaml"
    raw_d = Dilation(4).topology(yaml.safe_load(path.read_text()))
    tuning = derive(topology_from_dict(raw_d))
    args = tune.parser().parse_args(["--topology", "incast-leaf-spine", "--validate"])
    tuned = tmp_path / "tuned.yaml"
    tuned.write_text(tune.render(overlay(tuning, raw_d, 4.0), tuning.source, args, Dilation(4)))
    text = tuned.read_text()
    assert "--validate --dilation 4` from" in text and "values are the fabric's at dilation 4" in text
    written = yaml.safe_load(text)["congestion_control"]
    assert written["dilation"] == 4 and written["timely"]["min_rtt_s"] == pytest.approx(tuning.rtt_s, rel=1e-5)
    at_4 = rdma.with_int_to_host(path, Dilation(4), overlays=[tuned])
    capacity = rdma.bottleneck_pps(at_4)                          # 208 packets/s: 833 / 4, rounded down
    assert capacity == 208 and [e["line_rate_pps"] for e in written["dcqcn"]["at_line_rate"]] == [208]
    params = built_params("timely", capacity, rdma.cc_arguments(at_4, "timely", "send", capacity, Dilation(4)), 4)
    assert {k: params[k] for k in written["timely"]} == written["timely"]
    dcqcn = built_params("dcqcn", capacity, rdma.cc_arguments(at_4, "dcqcn", "send", capacity, Dilation(4)), 4)
    assert dcqcn["rate_timer_s"] == written["dcqcn"]["rate_timer_s"]
    assert dcqcn["r_ai_pps"] == written["dcqcn"]["at_line_rate"][0]["r_ai_pps"]
    at_2 = rdma.with_int_to_host(path, Dilation(2), overlays=[tuned])
    capacity = rdma.bottleneck_pps(at_2)
    params = built_params("timely", capacity, rdma.cc_arguments(at_2, "timely", "send", capacity, Dilation(2)), 2)
    assert params["min_rtt_s"] == pytest.approx(written["timely"]["min_rtt_s"] / 2)


def test_the_lossless_section_derived_on_a_dilated_fabric_is_written_undilated_and_runs_as_validated(tmp_path):
    """The watchdog's timers and the hold rate fabric tune --validate derived at x4 are written in the
    undilated network's units (the section says no dilation, as a topology's own); a plain run (x1) gets a
    quarter of the times, a run at x4 what was validated. SONiC's 200 ms detection is a network time:
    derived at x4 it is 800 ms of the dilated fabric's."""
    raw, _ = tune.lossless_class(yaml.safe_load((REPO / "topologies" / "dumbbell.yaml").read_text()))
    raw["lossless"]["watchdog"] = {"detect_ms": 200, "action": "drop"}
    raw_d = Dilation(4).topology(raw)
    tuning = derive(topology_from_dict(raw_d), dilation=4.0)
    assert tuning.watchdog is not None and tuning.watchdog["detect_ms"] >= 800.0
    assert derive(topology_from_dict(raw)).watchdog["detect_ms"] >= 200.0
    args = tune.parser().parse_args(["--topology", "dumbbell", "--validate"])
    tuned = tmp_path / "tuned.yaml"
    tuned.write_text(tune.render(tune.written(overlay(tuning, raw_d, 4.0), Dilation(4)), tuning.source, args,
                                 Dilation(4)))
    assert "times and rates, derived at x4, are\n# the undilated network's" in tuned.read_text()
    section = yaml.safe_load(tuned.read_text())["lossless"]
    assert "dilation" not in section
    assert section["watchdog"]["detect_ms"] == pytest.approx(tuning.watchdog["detect_ms"] / 4)
    assert section["hold_rate_pps"] == round(4 * tuning.hold_rate_pps)
    plain = load_topology(REPO / "topologies" / "dumbbell.yaml", [tuned]).features["lossless"]
    assert plain.watchdog.detect_ms == pytest.approx(tuning.watchdog["detect_ms"] / 4)
    again = topology_from_dict(Dilation(4).topology({**raw, "lossless": section})).features["lossless"]
    assert again.watchdog.detect_ms == pytest.approx(tuning.watchdog["detect_ms"])
    assert again.hold_rate_pps == tuning.hold_rate_pps and again.pfc == PfcThresholds(**tuning.pfc)


def test_the_rdma_experiment_refuses_a_bad_section_before_anything_starts(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"congestion_control": {"dilation": 1, "timely": {"t_lo_s": 0.01}}}))
    with pytest.raises(SystemExit) as exit_:
        rdma.main(["--overlay", str(bad), "--out", str(tmp_path / "out")])
    assert exit_.value.code == 2
    assert f"--overlay: {bad} (overlay on " in capsys.readouterr().err
    # fields each valid, together not: TIMELY's T_low above its T_high, refused as the agent would
    crossed = tmp_path / "crossed.yaml"
    crossed.write_text(yaml.safe_dump({"congestion_control": {"dilation": 1,
                                                              "timely": {"t_low_s": 0.05, "t_high_s": 0.01}}}))
    with pytest.raises(SystemExit):
        rdma.main(["--overlay", str(crossed), "--ccs", "timely", "--phases", "incast", "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert "--overlay: congestion_control.timely: t_high_s, t_low_s: invalid TIMELY parameters: t_low_s must be > 0 " \
           "and below t_high_s" in err
    assert not (tmp_path / "out").exists() and not (tmp_path / "o").exists()


def test_fabric_train_refuses_constants_its_ranks_would_refuse_before_anything_starts(tmp_path, capsys,
                                                                                     sigterm_kept, monkeypatch):
    crossed = tmp_path / "crossed.yaml"
    crossed.write_text(yaml.safe_dump({"congestion_control": {"dilation": 1,
                                                              "hpcc": {"eta": 0.9, "min_window_packets": 0}}}))
    monkeypatch.setattr(train, "compile_p4", lambda: pytest.fail("compiled before the overlay was checked"))
    assert train.main(["--topology", "leaf-spine", "--overlay", str(crossed), "--line-rate-pps", "400",
                       "--out", str(tmp_path / "out")]) == 2
    assert "fabric train: congestion_control.hpcc: eta, min_window_packets: invalid HPCC parameters: " \
           "min_window_packets must be > 0, got 0" in capsys.readouterr().out
