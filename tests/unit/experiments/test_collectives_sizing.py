"""The collectives experiment's rates, sized to the machine (docs/fidelity.md):
a phase's connection rate from what earlier runs of its fabrics cost here,
else from the calibration's budget, else the phase's default, said; the
least-loaded phase's rates scaled together to what the budget fits."""
from __future__ import annotations

import pytest

from emulator import run_costs
from emulator.calibration import Calibration, Flow, Identity, demand, plan
from experiments import collectives as exp
from experiments import common

ID = Identity("AMD EPYC", 2, "/opt/p4-fast/bin/simple_switch_grpc 1.15.5 sha256:0123456789ab", "42")
CAL = Calibration(ID, "2026-12-03T15:09:34+00:00", {"fabric": 12_000.0, "training": 6_700.0}, 0.005,
                  140_000.0, 14_000.0, 12_500.0)


@pytest.fixture
def machine(tmp_path, monkeypatch):
    """This machine as the tests give it: an identity, a calibration (or
    none: set it to None) and a file of earlier runs under tmp_path."""
    state = {"cal": CAL}
    monkeypatch.setattr(exp, "machine_identity", lambda: ID)
    for module in (exp, common):           # the sizing's and announce_budget's
        monkeypatch.setattr(module, "calibration_or_why",
                            lambda: (state["cal"], "" if state["cal"] else "no calibration (fabric calibrate)"))
    monkeypatch.setattr(run_costs, "costs_file", lambda identity: tmp_path / "runs.json")
    return state


def lb_fabric(tmp_path, channels: int = 2) -> exp.PhaseFabric:
    return exp.PhaseFabric("leaf-spine + ps", exp.lb_topology(tmp_path)[0], exp.RANKS, channels)


def test_without_runs_the_rate_is_the_highest_whose_ring_fits_the_budget(machine, tmp_path, capsys):
    fab = lb_fabric(tmp_path)
    sizing = exp.size_phase("lb", [fab], None, exp.FALLBACK_LINE_RATE_PPS)
    assert sizing.line_rate_pps % 10 == 0 and sizing.record and sizing.budget == "within"
    assert "calibration of 2026-12-03" in sizing.how and "the next sizes itself by" in sizing.how
    p = plan(demand(fab.topo, fab.flows(sizing.line_rate_pps), common.RANK_ACK_SHARE), CAL, agents="rdma")
    over = plan(demand(fab.topo, fab.flows(sizing.line_rate_pps + 10), common.RANK_ACK_SHARE), CAL, agents="rdma")
    assert p.within_budget and not over.within_budget          # the highest in steps of 10
    assert f"line rate (lb): {sizing.line_rate_pps:g} packets/s" in capsys.readouterr().out


def test_the_phase_takes_its_most_demanding_fabrics_rate(machine, tmp_path):
    two, four = (exp.PhaseFabric("leaf-spine + ps", exp.lb_topology(tmp_path)[0], exp.RANKS[:n], 2) for n in (2, 4))
    alone = exp.size_phase("allreduce", [two], None, 1000.0).line_rate_pps
    both = exp.size_phase("allreduce", [two, four], None, 1000.0)
    assert both.line_rate_pps == exp.size_phase("allreduce", [four], None, 1000.0).line_rate_pps < alone
    assert both.how.startswith("leaf-spine + ps:")


def test_earlier_runs_of_a_fabric_size_the_next(machine, tmp_path):
    fab = lb_fabric(tmp_path)
    now = run_costs.now_iso()
    for rate, busy in ((90, 0.96), (180, 1.35), (360, 1.76)):
        run_costs.record(ID, fab.cost_key, run_costs.RunCost(rate, busy, now))
    sizing = exp.size_phase("lb", [fab], None, exp.FALLBACK_LINE_RATE_PPS)
    assert 130 <= sizing.line_rate_pps <= 160 and "earlier runs" in sizing.how and "over 3 runs" in sizing.how
    # another channel count is another fabric: no runs of it yet
    assert "earlier runs" not in exp.size_phase("lb", [lb_fabric(tmp_path, 1)], None, 1000.0).how


def test_without_a_calibration_the_phase_default_is_taken_and_said(machine, tmp_path, capsys):
    machine["cal"] = None
    sizing = exp.size_phase("placement", [lb_fabric(tmp_path)], None, exp.FALLBACK_PLACEMENT_LINE_RATE_PPS)
    assert (sizing.line_rate_pps, sizing.budget) == (exp.FALLBACK_PLACEMENT_LINE_RATE_PPS, "unknown")
    assert "no calibration (fabric calibrate): the phase's default" in sizing.how
    assert "what this run costs the machine is unknown" in capsys.readouterr().out


def test_a_rate_given_by_hand_is_run_and_said_to_be_over_budget(machine, tmp_path, capsys):
    sizing = exp.size_phase("lb", [lb_fabric(tmp_path)], 3000.0, exp.FALLBACK_LINE_RATE_PPS)
    assert sizing.line_rate_pps == 3000.0 and sizing.how == "as given (--line-rate-pps)"
    assert sizing.budget.startswith("over x") and float(sizing.budget.removeprefix("over x")) > 5
    assert "!!! budget:" in capsys.readouterr().out
    assert sizing.columns() == {"line_rate_pps": 3000.0, "budget": sizing.budget}


def test_the_worst_budget_of_a_phases_fabrics():
    assert exp.worst_budget(["within", "within"]) == "within"
    assert exp.worst_budget(["within", "over x1.50", "over x3.25"]) == "over x3.25"
    assert exp.worst_budget(["over x2.00", "unknown"]) == "unknown"


def test_a_ranks_nic_is_where_its_traffic_enters(tmp_path):
    """On the rail fabric a rank is one NIC of a host (g1.eth2): its flows
    start at that NIC's rail switch, not the host's first NIC's."""
    topo = exp.topology_from_dict(exp.topology_raw("rail-optimized", without=()), "rail-optimized")
    nic = topo.hosts["g1"].nics["eth2"]
    need = demand(topo, [Flow("g1.eth2", "g2.eth2", 100.0)])
    assert need.switch_pps[nic.switch] == 100.0
    assert need.switch_pps[topo.hosts["g1"].switch] == (100.0 if topo.hosts["g1"].switch == nic.switch else 0.0)
    with pytest.raises(ValueError, match="no host or NIC 'g1.eth9'"):
        demand(topo, [Flow("g1.eth9", "g2.eth2", 1.0)])


def test_the_least_loaded_phase_scales_its_rates_together(machine, tmp_path):
    scale, how = exp.least_loaded_scale(None, tmp_path)
    assert 0 < scale < 1 and round(scale / exp.LL_SCALE_STEP, 6).is_integer()
    assert how.startswith("the budget: at scale 1 this run needs")
    fits = plan(demand(exp.least_loaded_topology(tmp_path, scale)[0], exp.least_loaded_flows(scale),
                       common.RANK_ACK_SHARE), CAL, agents="rdma")
    assert fits.within_budget
    topo, _ = exp.least_loaded_topology(tmp_path, scale)
    spine_links = {p.link.bandwidth_mbps for sw in topo.switches.values() for p in sw.ports.values()
                   if {sw.name, p.peer} & set(exp.SPINES)}
    assert len(spine_links) == 1 and spine_links.pop() == pytest.approx(exp.LL_SPINE_MBPS * scale)
    assert exp.least_loaded_scale(0.5, tmp_path) == (0.5, "as given (--least-loaded-scale)")
    machine["cal"] = None
    assert exp.least_loaded_scale(None, tmp_path)[0] == 1.0


def test_a_fitting_scale_is_a_whole_number_of_steps_at_most_one():
    assert common.fitting_scale(0.5) == 1.0
    assert common.fitting_scale(3.84) == 0.25
    assert common.fitting_scale(1000.0) == 0.05
    assert common.fitting_scale(1.0, 0.1) == 1.0


@pytest.mark.parametrize("argv, message", [(["--line-rate-pps", "0"], "--line-rate-pps must be above 0"),
                                           (["--least-loaded-scale", "-1"], "--least-loaded-scale must be above 0")])
def test_rates_given_by_hand_are_checked(argv, message, capsys):
    with pytest.raises(SystemExit):
        exp.main(argv)
    assert message in capsys.readouterr().err


def test_links_at_the_nic_rate_carry_a_ranks_channels_and_their_acks(tmp_path):
    from emulator.network import queue_rate_pps
    pps = common.nic_link_pps(2, 100.0)
    assert pps == pytest.approx(2 * 100.0 * (1 + common.RANK_ACK_SHARE))
    topo, _ = exp.lb_topology(tmp_path, pps)
    assert {queue_rate_pps(link.bandwidth_mbps) for link in topo.links} == {int(pps)}
    file_rates, _ = exp.lb_topology(tmp_path)
    assert {link.bandwidth_mbps for link in file_rates.links} == {100.0}
