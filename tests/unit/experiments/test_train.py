"""fabric train's parts that need no network: the composition's topology,
the ablation's cases, --fail's parsing and errors, joining the ranks' step
records into step lines, the ideal step."""
from __future__ import annotations

import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from experiments import train
from experiments.train import Composition, Failure


def test_the_composition_writes_its_sections_and_nothing_else():
    topo, raw = train.composed_topology("leaf-spine", Composition(), ["h1", "h2", "h3", "h4"])
    assert {"int", "lossless", "failover"} <= set(raw) and "aggregation" not in raw and "load_balancing" not in raw
    assert raw["int"]["watchlist"][0]["to_host"] is True           # HPCC's INT goes to the receiving host
    assert raw["lossless"]["classes"][0]["dscp"] == [train.LOSSLESS_DSCP]
    plain = Composition(traffic_class="lossy", cc="dcqcn", paths="spray", failover=False)
    _, raw = train.composed_topology("leaf-spine", plain, ["h1", "h2"])
    assert raw["load_balancing"] == [{"switch": "all", "mode": "spray"}]
    assert not {"int", "lossless", "failover", "aggregation"} & set(raw)
    assert topo.features["failover"] is not None
    assert "ecn" not in train.composed_topology("leaf-spine", Composition(), ["h1", "h2"])[1]     # HPCC: no marks


def test_dcqcn_gets_red_marking_on_every_switch_port_at_the_derived_thresholds():
    """DCQCN cuts on CNPs: without marks it would send at line rate. Its
    composition marks RED-style (DCQCN's Kmin/Kmax/Pmax) in the ranks' class,
    from the fan-in up (fabric tune's derivation)."""
    topo, raw = train.composed_topology("leaf-spine", Composition(cc="dcqcn"), ["h1", "h2", "h3", "h4"])
    marked = topo.features["ecn"]
    assert {(sw, port) for sw, port, _ in marked} == {(sw.name, p) for sw in topo.switches.values() for p in sw.ports}
    assert {q for _, _, q in marked} == {train.LOSSLESS_CLASS}
    for (sw, _, _), profile in marked.items():
        assert profile.mode == "wred" and profile.pmax == 0.01
        assert len(topo.switches[sw].ports) - 1 <= profile.kmin < profile.kmax
    lossy = train.composed_topology("leaf-spine", Composition(cc="dcqcn", traffic_class="lossy"), ["h1", "h2"])[0]
    assert lossy.features["ecn"] and all(q is None for _, _, q in lossy.features["ecn"])


def test_the_uet_composition_trims_on_every_switch_port_and_has_no_lossless_class():
    c = Composition(traffic_class="lossy", cc="nscc", transport="uet")
    topo, raw = train.composed_topology("leaf-spine", c, ["h1", "h2", "h3", "h4"])
    assert raw["trimming"] == [{"switch": "all", "port": "all", "threshold": train.UET_TRIM_THRESHOLD,
                                "header_queue": train.UET_HEADER_QUEUE}]
    assert "int" not in raw
    assert len(topo.features["trimming"]) == sum(len(sw.ports) for sw in topo.switches.values())
    # UE's control class: lossy, above the data's queue and below the trimmed headers'; no lossless class
    (control,) = topo.features["lossless"].classes
    assert (control.tclass, control.dscp, control.lossless) == (train.UET_CONTROL_CLASS, (train.UET_CONTROL_DSCP,),
                                                                False)
    assert 0 < control.queue < train.UET_HEADER_QUEUE
    cmd = train.rank_args(0, [topo.hosts[n].primary for n in ("h1", "h2", "h3", "h4")], c, 4, 400.0, topo,
                             Path("t.yaml"), Path("/tmp"))
    assert cmd[cmd.index("--mode") + 1] == "uet" and "--tclass" not in cmd
    assert cmd[cmd.index("--control-dscp") + 1] == str(train.UET_CONTROL_DSCP)


def test_links_at_the_nic_rate_carry_a_ranks_channels_and_their_acks():
    c = Composition()
    pps = train.nic_link_pps(c.channels, 150.0)
    assert pps == pytest.approx(2 * 150 * (1 + train.RANK_ACK_SHARE))
    topo, _ = train.composed_topology("incast-leaf-spine", c, ["h1", "h2", "h5", "h6"], link_pps=pps)
    from emulator.network import queue_rate_pps
    rates = {queue_rate_pps(link.bandwidth_mbps) for link in topo.links}
    assert rates == {int(pps)}, rates              # host links and the fabric's (the file gives them 10 and 100)
    assert topo.access_link(topo.hosts["h1"]).bandwidth_mbps == topo.links[-1].bandwidth_mbps


def test_an_incast_hangs_off_the_first_ranks_switch_and_sends_to_a_rank_on_another():
    incast = train.Incast.parse("2@300")
    assert (incast.senders, incast.pps, incast.hosts) == (2, 300.0, ["incast1", "incast2"])
    topo, raw = train.composed_topology("leaf-spine", Composition(), ["h1", "h2", "h3", "h4"], incast=incast)
    assert incast.places(topo, ["h1", "h2", "h3", "h4"]) == ("leaf1", "h3")
    assert [topo.hosts[h].switch for h in incast.hosts] == ["leaf1", "leaf1"]
    assert [h["name"] for h in raw["hosts"]][:4] == ["h1", "h2", "h3", "h4"]      # the ranks' addresses stay
    with pytest.raises(ValueError, match="every rank is on leaf1"):
        incast.places(topo, ["h1", "h2"])
    for bad in ("2", "0@300", "2@-1", "x@300", "2@fast"):
        with pytest.raises(ValueError, match="expected SENDERS@PPS"):
            train.Incast.parse(bad)


def test_the_scenario_is_part_of_what_a_runs_cost_is_recorded_under():
    from argparse import Namespace
    plain = Namespace(link_rate="file", incast=None)
    loaded = Namespace(link_rate="nic", incast=train.Incast(2, 300.0))
    assert train.scenario_text(plain) == ""
    assert train.scenario_text(loaded) == "links at the NIC rate, incast 2 x 300 packets/s"
    assert train.cost_key("leaf-spine", 4, Composition()) != \
        train.cost_key("leaf-spine", 4, Composition(), scenario=train.scenario_text(loaded))


def test_ablation_switches_off_one_technique_a_case():
    cases = train.ablations(Composition())
    assert [name for name, _ in cases] == ["composed", "lossy class (no PFC)", "dcqcn instead of hpcc",
                                           "ecmp instead of path-aware", "fixed split instead of least-loaded",
                                           "no failover", "UET (trimming, spraying, nscc) instead of RC"]
    fields = ("algorithm", "traffic_class", "cc", "paths", "channel_choice", "failover", "transport")
    for (_, c), changed in zip(cases[1:], (["traffic_class"], ["cc"], ["paths"], ["channel_choice"], ["failover"],
                                           ["traffic_class", "cc", "transport"])):
        assert [f for f in fields if getattr(c, f) != getattr(Composition(), f)] == changed
    uet = cases[-1][1]
    assert (uet.transport, uet.traffic_class, uet.cc) == ("uet", "lossy", "nscc")
    assert [n for n, _ in train.ablations(uet, ("transport",))] == ["composed", "RC (lossless, hpcc) instead of UET"]
    assert Composition().channels == 2 and Composition(paths="ecmp").channels == 1
    assert Composition(algorithm="in-network").channels == 1       # its packets are not the RC transport's
    assert [n for n, _ in train.ablations(Composition("tree", "lossy", "dcqcn", "ecmp", "least-loaded", False))] == \
        ["composed", "ring instead of tree", "UET (trimming, spraying, nscc) instead of RC"]
    # --ablate channel-choice,failover: only those
    assert [n for n, _ in train.ablations(Composition(), ("failover", "channel-choice"))] == \
        ["composed", "fixed split instead of least-loaded", "no failover"]
    with pytest.raises(ValueError, match="no technique 'pfc'"):
        train.ablations(Composition(), ("pfc",))


def test_central_routing_gets_the_jobs_flows_one_per_pair_and_channel():
    addresses = ["10.0.1.1", "10.0.1.2", "10.0.2.1", "10.0.2.2"]
    flows = train.job_flows(Composition(paths="central"), addresses)
    # ring: each rank sends to the next, on 2 channels, 2 (n-1)/n of the gradient's 4810 float32 in all
    assert len(flows) == 4 * 2
    assert {(f["src"], f["dst"]) for f in flows} == {(addresses[r], addresses[(r + 1) % 4]) for r in range(4)}
    assert len({(f["src"], f["dst"], f["sport"]) for f in flows}) == 8
    per_rank = sum(f["bytes"] for f in flows if f["src"] == addresses[0])
    assert abs(per_rank - 4 * 2 * 3 * 4810 // 4) <= 8


def test_failures_parse_against_the_topology():
    topo, _ = train.composed_topology("leaf-spine", Composition(), ["h1", "h2", "h3", "h4"])
    assert Failure.parse("spine1@step5", topo, 12) == Failure("switch", "spine1", 5)
    assert Failure.parse("leaf1-spine2@step2", topo, 12) == Failure("link", "leaf1-spine2", 2)
    assert Failure.parse("blackhole:spine1@step12", topo, 12) == Failure("blackhole", "spine1", 12)
    for text, error in (("spine1", "expected TARGET@stepK"), ("spine1@step1", "within 2..12"),
                        ("spine1@step13", "within 2..12"), ("spine9@step3", "neither a switch"),
                        ("leaf1-leaf2@step3", "neither a switch"), ("h1-leaf1@step3", "neither a switch"),
                        ("cut:leaf1-spine1@step3", "the only kind is blackhole"),
                        ("blackhole:leaf1-spine1@step3", "neither a switch")):
        with pytest.raises(ValueError, match=error):
            Failure.parse(text, topo, 12)


def test_a_link_drops_both_ways_and_a_black_hole_every_link_of_the_switch():
    topo, _ = train.composed_topology("leaf-spine", Composition(), ["h1", "h2", "h3", "h4"])
    assert sorted(Failure("link", "leaf1-spine1", 3).ifaces(topo)) == ["leaf1-eth3", "spine1-eth1"]
    assert sorted(Failure("blackhole", "spine1", 3).ifaces(topo)) == \
        ["leaf1-eth3", "leaf2-eth3", "spine1-eth1", "spine1-eth2"]


def record(step: int, start: float, end: float, loss: float, resent: int, allreduce_s: float) -> dict:
    return {"step": step, "epoch": 0, "start": start, "forward_s": 0.001, "backward_s": 0.002 + allreduce_s,
            "optimizer_s": 0.001, "end": end, "loss": loss, "buckets": [[start + 0.002, start + 0.002 + allreduce_s,
                                                                         100]],
            "retransmitted": resent, "timeouts": 0}


def test_a_step_line_joins_every_ranks_record():
    records = [[record(0, 10.0, 10.1, 2.0, 0, 0.05), record(1, 10.1, 10.3, 1.0, 4, 0.1)],
               [record(0, 10.02, 10.12, 3.0, 1, 0.06), record(1, 10.12, 10.25, 2.0, 1, 0.12)]]
    first = train.join_step(0, records, [2.5, 1.5], None)
    assert first.ms == pytest.approx(100.0)                 # the slowest rank's end - the last start
    assert first.loss == 2.5 and first.resent == 1
    second = train.join_step(1, records, [2.5, 1.5], previous_end=10.12)
    assert second.ms == pytest.approx(180.0)                # the slowest end of step 2 - that of step 1
    assert second.loss == 1.5 and second.resent == 4        # 4 more on rank 0, none more on rank 1
    assert second.allreduce_ms == pytest.approx(120.0)
    assert second.compute_ms == pytest.approx(4.0)


def test_a_step_line_counts_the_pauses_the_ranks_nics_received_during_it():
    records = [[record(0, 10.0, 10.1, 2.0, 0, 0.05), record(1, 10.1, 10.3, 1.0, 0, 0.1)],
               [record(0, 10.02, 10.12, 3.0, 0, 0.06), record(1, 10.12, 10.25, 2.0, 0, 0.12)]]
    for rank, so_far in enumerate((((2, 0.1), (5, 0.4)), ((0, 0.0), (1, 0.05)))):
        for r, (pauses, paused_s) in zip(records[rank], so_far):
            r["pauses_received"], r["paused_s"] = pauses, paused_s
    first = train.join_step(0, records, [2.5, 1.5], None)
    assert (first.pauses_received, first.ranks_paused_s) == (2, pytest.approx(0.1))
    second = train.join_step(1, records, [2.5, 1.5], previous_end=10.12)
    assert (second.pauses_received, second.ranks_paused_s) == (3 + 1, pytest.approx(0.3 + 0.05))
    text = train.step_text(second, 2)
    assert "pauses    0 sent    4 at ranks ( 350.0 ms paused)" in text
    old = [[{k: v for k, v in r.items() if k not in ("pauses_received", "paused_s")} for r in rank]
           for rank in records]             # records of a rank whose NIC honours no PFC: none
    assert train.join_step(1, old, [2.5, 1.5], 10.12).pauses_received == 0


def test_a_lossless_rank_honours_its_class_at_its_links_rate():
    c = Composition()
    topo, _ = train.composed_topology("leaf-spine", c, ["h1", "h2", "h3", "h4"])
    hosts = [topo.hosts[n].primary for n in ("h1", "h2", "h3", "h4")]
    cmd = train.rank_args(1, hosts, c, 4, 1000.0, topo, Path("topology.yaml"), Path("out"))
    mbps = topo.switches[hosts[1].switch].ports[hosts[1].switch_port].link.bandwidth_mbps
    at = cmd.index("--dscp")
    assert cmd[at:at + 6] == ["--dscp", str(train.LOSSLESS_DSCP), "--tclass", str(train.LOSSLESS_CLASS),
                              "--link-mbps", f"{mbps:g}"]
    assert train.LOSSLESS_SECTION["classes"][0]["class"] == train.LOSSLESS_CLASS
    lossy = replace(c, traffic_class="lossy")
    cmd = train.rank_args(1, hosts, lossy, 4, 1000.0, topo, Path("topology.yaml"), Path("out"))
    assert not {"--dscp", "--tclass", "--link-mbps"} & set(cmd)


def test_ideal_step_counts_the_busiest_ranks_bytes_at_its_channels_rate():
    assert 64 * train.HIDDEN + train.HIDDEN + train.HIDDEN * 10 + 10 == 4810       # the MLP's parameters
    # ring on 4 ranks: each sends 2 (n-1)/n of 4810 float32 (28,860 bytes): 29 packets of 1 KB at 1000/s,
    # over one connection (ECMP), or two (path-aware: 2 channels a peer pair, each at the line rate)
    one = train.ideal_step_ms(Composition(paths="ecmp"), 4, compute_ms=2.0, line_rate_pps=1000.0)
    assert one == pytest.approx(2.0 + 29.0, abs=1.0)
    assert train.ideal_step_ms(Composition(), 4, 2.0, 1000.0) == pytest.approx(2.0 + 29.0 / 2, abs=1.0)
    assert train.ideal_step_ms(Composition(algorithm="tree", paths="ecmp"), 4, 2.0, 1000.0) > one


def test_the_latency_term_counts_each_round_of_the_schedule_at_its_slowest_pair_one_way():
    ring = Composition()
    pairs = train.probed_pairs(ring, 4)
    assert pairs == [(0, 1), (0, 3), (1, 2), (2, 3)]                  # the ring's neighbours
    rtt = {p: 2.0 for p in pairs} | {(2, 3): 6.0}
    # a ring all-reduce on 4 ranks: 2 (n - 1) = 6 rounds, each waiting for the slow pair one way (3 ms)
    assert train.all_reduce_latency_ms(ring, 4, rtt) == pytest.approx(6 * 3.0)
    assert train.all_reduce_latency_ms(ring, 4, {}) == 0.0, "nothing probed: no latency, still a bound"
    hd = Composition(algorithm="halving-doubling")
    assert (0, 2) in train.probed_pairs(hd, 4)                         # partners at distance 2 too
    assert train.all_reduce_latency_ms(Composition(algorithm="in-network"), 4, rtt) == 6.0     # one round trip
    with_latency = train.ideal_step_ms(ring, 4, 2.0, 1000.0, latency_ms=18.0, buckets=2)
    assert with_latency == pytest.approx(train.ideal_step_ms(ring, 4, 2.0, 1000.0) + 36.0)


def run_of(case: str, step_ms: list[float], run: int = 1, fidelity: str = "ok") -> train.RunResult:
    lines = [train.StepLine(i, ms, 1.0, 1.0, 0, 0, 0, ms / 2, ms / 2) for i, ms in enumerate(step_ms, 1)]
    return train.RunResult(case, Composition(), lines, len(step_ms), None, [], 10.0, [], fidelity=fidelity, run=run)



def test_ecn_marks_are_a_runs_count_where_the_fabric_marks_and_absent_where_it_does_not():
    marked = replace(run_of("composed", [100.0, 101.0]), ecn_marks=0)
    assert marked.summary()["ecn_marks"] == 0                        # measured: none marked
    assert run_of("composed", [100.0, 101.0]).summary()["ecn_marks"] == ""     # no switch marks: not a zero

def test_an_incasts_bottleneck_is_the_target_ranks_port_in_the_ranks_class():
    incast, names = train.Incast.parse("2@300"), ["h1", "h2", "h3", "h4"]
    topo, _ = train.composed_topology("leaf-spine", Composition(), names, incast=incast)
    h3 = topo.hosts["h3"].primary
    assert incast.bottleneck(topo, names, Composition()) == (h3.switch, h3.switch_port, train.LOSSLESS_CLASS)
    assert incast.bottleneck(topo, names, Composition(traffic_class="lossy")) == (h3.switch, h3.switch_port, 0)


def test_the_bottleneck_queue_is_a_runs_percentiles_and_the_verdicts_median_of_faithful_runs():
    assert run_of("composed", [100.0]).summary()["queue_p99"] == ""             # no incast: not measured, not 0
    sampled = replace(run_of("composed", [100.0]), queue=list(range(100)))
    assert (sampled.summary()["queue_p50"], sampled.summary()["queue_p99"]) == (50.0, 99.0)
    results = [replace(run_of("composed", [100, 100], r), queue=[0] * 99 + [q]) for r, q in enumerate((10, 12, 14))]
    results += [replace(run_of("dcqcn instead of hpcc", [80, 80], r), queue=[0] * 99 + [40]) for r in range(3)]
    results.append(replace(run_of("dcqcn instead of hpcc", [80, 80], 4, fidelity="violated: cpu"), queue=[500] * 100))
    (v,) = train.technique_verdicts(results)
    assert (v["queue_p99_median"], v["composed_queue_p99_median"]) == (40, 12)       # the violated run left out
    (v,) = train.technique_verdicts([run_of("composed", [1.0], r) for r in range(3)]
                                    + [run_of("no failover", [1.0], r) for r in range(3)])
    assert v["queue_p99_median"] == "" and v["composed_queue_p99_median"] == ""


def test_a_technique_whose_absence_slows_every_run_helps_with_an_interval_above_zero():
    results = [run_of("composed", [100 + r, 102 + r, 98], r) for r in range(5)]
    results += [run_of("fixed split instead of least-loaded", [130 + r, 128, 131 + r], r) for r in range(5)]
    results += [run_of("ecmp instead of path-aware", [99 + r, 101, 100 + r], r) for r in range(5)]
    results += [run_of("no failover", [80 - r, 81, 79], r) for r in range(5)]
    helps, same, hurts = train.technique_verdicts(results)         # the runs' medians: 132, 100, 79 against 102 ms
    assert helps["verdict"].startswith("helps by 29.4% [2") and 0 < helps["interval_low"] <= helps["change"] \
        <= helps["interval_high"], helps
    assert same["verdict"].startswith("no significant difference") and same["interval_low"] < 0 < same["interval_high"]
    assert hurts["verdict"].startswith("hurts by 22.5% [2") and hurts["interval_high"] < 0, hurts     # 79 / 102 ms
    assert (helps["runs"], helps["faithful"], helps["composed_faithful"]) == (5, 5, 5)


def test_only_faithful_complete_runs_are_judged_and_too_few_are_not():
    results = [run_of("composed", [100, 100], r) for r in range(3)]
    results += [run_of("no failover", [200, 200], 1), run_of("no failover", [200, 200], 2),
                run_of("no failover", [200, 200], 3, fidelity="violated: cpu: threads waited for a core 45%")]
    incomplete = run_of("no failover", [200, 200], 4)
    incomplete.steps = 3                              # the run stopped a step short
    (v,) = train.technique_verdicts(results + [incomplete])
    assert v["verdict"] == ("not judged: 2 of 4 runs faithful and complete (1 more stopped), the composition "
                            "3 of 3 (at least 3 each)"), v
    assert v["step_ms_median"] == 200.0 and v["change"] == ""


def test_a_technique_without_which_the_job_stops_helps():
    """A spine black-holed with failover off: a rank gives up (retry count
    exceeded) and the job stops; the composition absorbed it every time."""
    results = [run_of("composed", [100, 300, 100], r) for r in range(3)]
    for r, done in enumerate((9, 9, 8)):
        stopped = run_of("no failover", [100] * done, r)
        stopped.steps = 40
        results.append(stopped)
    (v,) = train.technique_verdicts(results)
    assert v["verdict"] == ("helps: without it the job stopped in 3 of 3 faithful runs (after step 8-9); "
                            "the composition completed 3 of 3"), v
    assert (v["stopped"], v["faithful"], v["change"]) == (3, 3, "")
    # when the composition stopped too, there is nothing to compare
    base_stopped = run_of("composed", [100], 9)
    base_stopped.steps = 40
    (v,) = train.technique_verdicts(results + [base_stopped])
    assert v["verdict"].startswith("not judged: 0 of 3 runs faithful and complete (3 more stopped)"), v


def test_the_runs_option_is_checked_before_anything_starts(capsys):
    assert train.main(["--topology", "leaf-spine", "--runs", "0"]) == 2
    assert "--runs 0: at least 1" in capsys.readouterr().out


def test_the_line_rate_comes_from_what_earlier_runs_of_the_composition_cost(tmp_path, monkeypatch):
    from emulator import run_costs
    from emulator.calibration import Identity
    ident = Identity("AMD EPYC", 2, "/opt/p4-fast/bin/simple_switch_grpc 1.15.5 sha256:0123456789ab", "42")
    monkeypatch.setattr(train, "machine_identity", lambda: ident)
    monkeypatch.setattr(run_costs, "costs_file", lambda identity: tmp_path / "runs.json")
    c = Composition()
    names = ["h1", "h2", "h3", "h4"]
    assert train.cost_fit("leaf-spine", names, c) is None
    now = run_costs.now_iso()
    for rate, busy in ((90, 0.96), (180, 1.35), (360, 1.76)):       # leaf-spine, 2026-12-01
        run_costs.record(ident, train.cost_key("leaf-spine", 4, c), run_costs.RunCost(rate, busy, now))
    rate, how = train.line_rate_for("leaf-spine", names, c)
    assert 130 <= rate <= 160 and rate % 10 == 0
    assert "earlier runs" in how and "over 3 runs" in how
    # another composition, overlay or rank count has no runs yet
    other = replace(c, traffic_class="lossy")
    assert train.cost_fit("leaf-spine", names, other) is None
    assert train.cost_fit("leaf-spine", names, c, ["tuned.yaml"]) is None
    assert train.cost_fit("leaf-spine", names[:2], c) is None


class FakeRank:
    """A rank process: exited with `code`, or (None) running until stopped."""

    def __init__(self, code: int | None):
        self.returncode = code
        self.waited = 0.0

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self.waited += timeout or 0.0
            raise subprocess.TimeoutExpired("rank", timeout or 0.0)
        return self.returncode


def test_a_rank_that_never_heard_a_failure_is_left_after_the_grace_period(tmp_path, monkeypatch):
    """Rank 1 failed; rank 0 exited on its notice; rank 2's notice was lost: follow_steps waits
    ABORT_GRACE_S for it (not RANK_TIMEOUT_S), says so, and returns, its caller stops it."""
    monkeypatch.setattr(train, "ABORT_GRACE_S", 0.5)
    said: list[str] = []
    ranks = [FakeRank(1), FakeRank(1), FakeRank(None)]
    lines, records, stalled = train.follow_steps(ranks, tmp_path, 3, [1.0, 1.0, 1.0], counters=None,
                                                 step_started=lambda k: None, say=said.append)
    assert (lines, stalled) == ([], []) and records == [[], [], []]
    assert 0 < ranks[2].waited <= 0.5
    assert said == ["ranks 2 still running 0.5 s after a rank failed (its notice lost): stopped"]
