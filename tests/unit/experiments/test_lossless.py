"""The lossless experiment's own arithmetic, without a network: where
repeated runs write, and the end-to-end verdict (what the receivers missed,
not what the switches counted)."""
from pathlib import Path

import pytest

from emulator.calibration import Calibration, Identity, demand, plan
from experiments.lossless import SPREADING_FALLBACK_SCALE, SPREADING_OVERSUBSCRIPTION, VICTIM_SHARE, end_to_end, \
    main, runs, spreading_flows, spreading_oversubscription, spreading_rates, spreading_scale, spreading_topology


def row(run: int, case: str, sent: int, drops: int = 0, victim_drops: int = 0, headroom: int = 0,
        before: str = "", pipeline: str = "", fidelity: str = "ok") -> dict:
    return {"run": run, "case": case, "sent": sent, "drops": drops, "victim_drops": victim_drops,
            "headroom_drops": headroom, "lost_before_pipeline": before, "pipeline_drops": pipeline,
            "fidelity": fidelity}


def test_a_single_run_writes_where_it_always_did_several_each_in_their_own_directory(tmp_path):
    assert list(runs(tmp_path, 1)) == [(1, tmp_path)]
    assert list(runs(tmp_path, 3)) == [(1, tmp_path / "run-01"), (2, tmp_path / "run-02"), (3, tmp_path / "run-03")]


def test_every_lossless_packet_received_is_said_once_lossy_cases_left_out():
    results = [row(1, "lossy-8", 8000, drops=3770), row(1, "pfc-8", 3564), row(2, "lossy-8", 8000, drops=3700),
               row(2, "pfc-8", 3500)]
    v = end_to_end("spreading", results)
    assert v["lossless_cases"] == 2 and v["runs"] == 2 and v["cases_with_loss"] == 0 and v["missing"] == 0
    assert v["incast_sent"] == 7064
    assert v["verdict"].startswith("==> end to end, spreading: 2 lossless cases in 2 runs (2 faithful, 0 violated), "
                                   "7,064 packets sent")


def test_a_missing_lossless_packet_is_loud_and_named_with_what_the_run_saw_of_it():
    results = [row(1, "pfc-4", 3958), row(2, "pfc-4", 3900, drops=14, before="leaf3:12 kernel:softnet:1"),
               row(3, "pfc-dcqcn-8", 3779, victim_drops=2, headroom=2)]
    v = end_to_end("spreading", results)
    assert v["cases_with_loss"] == 2 and v["missing"] == 16
    assert v["lost_before_pipeline"] == 13 and v["headroom_drops"] == 2
    assert v["verdict"].startswith("!!! end to end, spreading: 2 of 3 lossless cases in 3 runs (3 faithful, "
                                   "0 violated) missed packets at the receivers (16 lost in faithful cases: the "
                                   "fabric's)")
    assert "run 2 pfc-4: 14 missing (headroom 0, before the pipeline leaf3:12 kernel:softnet:1; in a faithful " \
           "case)" in v["verdict"]
    assert "run 3 pfc-dcqcn-8: 2 missing (headroom 2; in a faithful case)" in v["verdict"]
    assert v["missing_in_faithful"] == 16 and v["violated_cases"] == 0


def test_a_loss_in_a_violated_case_is_the_machines_said_with_its_verdict_and_count():
    """The busy-machine target: every case loses nothing or is judged violated, with the count."""
    violated = "violated: input_path leaf3:12"
    results = [row(1, "pfc-4", 3958), row(1, "pfc-8", 3900, drops=12, before="leaf3:12", fidelity=violated),
               row(2, "pfc-4", 3950, fidelity="violated: cpu idle per core 3%/4%"), row(2, "pfc-8", 3890)]
    v = end_to_end("spreading", results)
    assert v["violated_cases"] == 2 and v["cases_with_loss"] == 1 and v["missing"] == 12
    assert v["missing_in_faithful"] == 0
    assert "(2 faithful, 2 violated) missed packets at the receivers (every loss in a case the fidelity monitor " \
           "judged violated: this machine's, not the fabric's)" in v["verdict"]
    assert f"run 1 pfc-8: 12 missing (headroom 0, before the pipeline leaf3:12; {violated})" in v["verdict"]


def test_the_incast_phase_rows_have_no_victim_and_no_pipeline_column():
    v = end_to_end("incast", [{"run": 1, "case": "pfc", "sent": 100, "drops": 1, "headroom_drops": 0,
                               "lost_before_pipeline": "", "fidelity": "ok"}])
    assert v["missing"] == 1 and "run 1 pfc: 1 missing (headroom 0; in a faithful case)" in v["verdict"]


def test_the_spreading_topology_at_its_files_rates_and_scaled():
    class Args:
        spreading_load = 1800.0
    full, half = spreading_topology(1.0), spreading_topology(SPREADING_FALLBACK_SCALE)
    assert spreading_oversubscription(full, Args) == pytest.approx(1800 / 833, rel=0.01)
    assert spreading_oversubscription(half, Args) == pytest.approx(2 * 1800 / 833, rel=0.01)


def test_the_spreading_traffic_is_shares_of_the_links_at_any_scale():
    for scale in (1.0, 0.5, 0.35):
        topo = spreading_topology(scale)
        load, victim = spreading_rates(topo)

        class Args:
            spreading_load = load
        assert spreading_oversubscription(topo, Args) == pytest.approx(SPREADING_OVERSUBSCRIPTION)
        assert victim == pytest.approx(VICTIM_SHARE * 833 * scale, rel=0.01)
    half = spreading_topology(0.5)
    assert spreading_rates(half)[0] == pytest.approx(800, rel=0.01)     # the rates of the phase before auto


def calibration(training_pps: float) -> Calibration:
    return Calibration(Identity("AMD EPYC", 2, "/opt/p4-fast/bin/simple_switch_grpc 1.15.5 sha256:0123", "42"),
                       "2026-12-03T10:00:00+00:00", {"fabric": 2 * training_pps, "training": training_pps}, 0.005,
                       130_000.0, 13_000.0, 11_000.0)


def test_auto_scale_is_the_largest_step_the_budget_fits_at_most_the_files_rates():
    full = spreading_topology(1.0)
    need = demand(full, spreading_flows(*spreading_rates(full)))
    # the incast (1,600 packets/s) and the victim (200) each cross three switches: 5,400 traversals/s at 1x
    assert need.traversals_pps == pytest.approx(5400, rel=0.01) and need.switches == 5
    fast = calibration(20_000.0)                    # the file's rates fit in half the machine: not above them
    assert plan(need, fast, "training").within_budget and spreading_scale(fast)[0] == 1.0
    slow = calibration(3_000.0)
    dilation = plan(need, slow, "training").dilation
    scale, how = spreading_scale(slow)
    assert scale <= 1 / dilation < scale + 0.05 and round(scale / 0.05, 6).is_integer(), (scale, dilation)
    assert plan(demand(spreading_topology(scale), spreading_flows(*spreading_rates(spreading_topology(scale)))),
                slow, "training").within_budget
    assert "over budget" in how
    assert spreading_scale(None, "no calibration (fabric calibrate)") == (
        SPREADING_FALLBACK_SCALE, "no calibration (fabric calibrate): x0.5, the scale measured faithful on a 2-core "
        "machine of 2026-11-27")


@pytest.mark.parametrize("argv, message", [(["--runs", "0"], "--runs must be at least 1"),
                                           (["--spreading-scale", "0"], "must be positive"),
                                           (["--spreading-scale", "fast"], "expected auto or a number"),
                                           (["--spreading-load", "-1"], "must be positive"),
                                           (["--busy", "-1"], "--busy must be 0 or more")])
def test_bad_arguments_are_refused_by_name_before_anything_starts(argv, message, capsys):
    with pytest.raises(SystemExit):
        main(argv)
    assert message in capsys.readouterr().err
