"""The calibration record (what identifies it, when it no longer holds) and
the budget arithmetic: a run's demand over the topology's shortest paths,
the cores it costs, and the dilation that brings it within budget."""
import datetime as dt
from pathlib import Path

import pytest

from emulator.calibration import (CALIBRATION_DIR, Calibration, CalibrationError, Demand, Flow, Identity,
                                  calibration_file, cpu_model, current, demand, fitting_rate, plan, store)
from features import load_topology

REPO = Path(__file__).resolve().parents[3]
LEAF_SPINE = load_topology(REPO / "topologies" / "leaf-spine.yaml")
ID = Identity("AMD EPYC", 2, "/opt/p4/bin/simple_switch_grpc 1.15.5 sha256:0123456789ab", "42")
NOW = dt.datetime(2026, 11, 28, 12, 0, tzinfo=dt.timezone.utc)


def calibration(**over) -> Calibration:
    fields = dict(identity=ID, measured_at="2026-11-27T12:00:00+00:00",
                  switch_pps_per_core={"fabric": 10_000.0, "training": 5_000.0}, switch_idle_cores=0.01,
                  agent_pps_per_core=20_000.0, rdma_agent_pps_per_core=4_000.0,
                  uet_agent_pps_per_core=2_500.0)
    return Calibration(**{**fields, **over})


def test_cpu_model_from_cpuinfo():
    assert cpu_model("processor\t: 0\nmodel name\t: AMD EPYC 7B13\nflags\t: fpu\n") == "AMD EPYC 7B13"
    assert cpu_model("processor\t: 0\n") == "unknown"


def test_a_calibration_holds_on_its_machine_build_and_pipeline_for_a_week():
    assert calibration().stale_because(ID, NOW) is None
    assert "another cores" in calibration().stale_because(Identity("AMD EPYC", 4, ID.bmv2, ID.pipeline), NOW)
    fast = Identity(ID.cpu_model, 2, "/opt/p4-fast/bin/simple_switch_grpc 1.15.5 sha256:fedcba987654", "42")
    assert "another bmv2" in calibration().stale_because(fast, NOW)
    assert "another pipeline" in calibration().stale_because(Identity(ID.cpu_model, 2, ID.bmv2, "43"), NOW)
    assert "8 days ago" in calibration(measured_at="2026-11-20T11:00:00+00:00").stale_because(ID, NOW)


def test_each_bmv2_build_keeps_its_own_calibration_file():
    fast = Identity(ID.cpu_model, 2, "/opt/p4-fast/bin/simple_switch_grpc 1.15.5-9674187f sha256:fedcba987654", "42")
    assert calibration_file(ID) == CALIBRATION_DIR / "1.15.5-0123456789ab.json"
    assert calibration_file(fast) == CALIBRATION_DIR / "1.15.5-9674187f-fedcba987654.json"
    spaced = Identity(ID.cpu_model, 2, "/opt/my p4/bin/simple_switch_grpc 1.15.5 sha256:0123456789ab", "42")
    assert calibration_file(spaced) == calibration_file(ID)        # the build, wherever it is installed


def test_stored_and_read_back_and_a_malformed_file_is_named(tmp_path):
    path = store(calibration(), tmp_path / "calibration.json")
    cal, why = current(ID, path)
    assert why == "" or "days ago" in why                 # measured_at is fixed; today moves on
    assert Calibration.from_json(path.read_text()) == calibration()
    assert current(ID, tmp_path / "none.json") == (None, f"no calibration ({tmp_path / 'none.json'})")
    path.write_text('{"identity": {}}')
    cal, why = current(ID, path)
    assert cal is None and why.startswith("malformed calibration")
    bad = calibration(switch_pps_per_core={"fabric": 10_000.0})
    with pytest.raises(CalibrationError, match="no switch rate for training"):
        Calibration.from_json(bad.to_json())


def test_a_flow_crosses_every_switch_of_its_path_split_over_equal_paths():
    # h1 (leaf1) -> h3 (leaf2): leaf1, then spine1 or spine2 (half each), then leaf2
    need = demand(LEAF_SPINE, [Flow("h1", "h3", 1000.0)])
    assert need.switch_pps == {"leaf1": 1000.0, "leaf2": 1000.0, "spine1": 500.0, "spine2": 500.0}
    assert need.traversals_pps == 3000.0
    assert need.host_pps == 2000.0                  # sent by h1, received by h3
    assert need.switches == 4


def test_a_flow_within_one_leaf_crosses_only_that_leaf_and_acks_come_back():
    need = demand(LEAF_SPINE, [Flow("h1", "h2", 1000.0)], ack_share=0.5)
    assert need.switch_pps == {"leaf1": 1500.0, "leaf2": 0.0, "spine1": 0.0, "spine2": 0.0}
    assert need.host_pps == 3000.0


def test_an_unknown_host_is_named():
    with pytest.raises(ValueError, match="no host or NIC 'h9' in leaf-spine"):
        demand(LEAF_SPINE, [Flow("h1", "h9", 10.0)])


def test_the_cores_a_run_needs_and_the_dilation_that_fits_it():
    need = Demand({"s1": 8_000.0, "s2": 4_000.0}, host_pps=10_000.0, switches=2)
    p = plan(need, calibration())
    # 12k traversals / 10k per core + 10k host packets / 20k + 2 x 0.01 idle
    assert p.needed_cores == pytest.approx(1.2 + 0.5 + 0.02)
    assert p.budget_cores == 1.0                     # half of 2 cores
    assert p.dilation == pytest.approx(1.7 / 0.98)   # the rate-bound part over what idle switches leave
    assert not p.within_budget
    assert p.busiest_switch == "s1" and p.busiest_switch_cores == pytest.approx(0.8)
    assert "over budget, rates / 1.73 would fit" in str(p)
    training = plan(need, calibration(), composition="training")
    assert training.needed_cores == pytest.approx(2.4 + 0.5 + 0.02) and training.dilation > p.dilation


def test_a_light_run_is_within_budget():
    p = plan(Demand({"s1": 1000.0}, host_pps=2000.0, switches=1), calibration())
    assert p.within_budget and p.dilation == 1.0
    assert str(p).endswith("within budget")


def test_idle_switches_alone_over_budget_cannot_be_dilated_away():
    p = plan(Demand({"s": 10.0}, host_pps=0.0, switches=200), calibration())
    assert p.dilation == float("inf")


def test_an_unknown_composition_is_named():
    with pytest.raises(ValueError, match="no calibration for composition 'int'"):
        plan(Demand({}, 0.0, 0), calibration(), composition="int")


def test_the_fitting_rate_fills_the_budget_exactly():
    cal = calibration()
    pairs = [("h1", "h3"), ("h3", "h1")]
    rate = fitting_rate(LEAF_SPINE, pairs, cal)
    at_rate = plan(demand(LEAF_SPINE, [Flow(a, b, rate) for a, b in pairs]), cal)
    assert at_rate.needed_cores == pytest.approx(at_rate.budget_cores)
    assert plan(demand(LEAF_SPINE, [Flow(a, b, 1.1 * rate) for a, b in pairs]), cal).dilation > 1
    # the costlier composition and ACKs leave a lower rate
    assert fitting_rate(LEAF_SPINE, pairs, cal, "training") < rate
    assert fitting_rate(LEAF_SPINE, pairs, cal, ack_share=0.25) < rate
    # and so do agents that cost more a packet (fabric train's ranks: the RC transport's)
    assert fitting_rate(LEAF_SPINE, pairs, cal, agents="uet") < fitting_rate(LEAF_SPINE, pairs, cal,
                                                                              agents="rdma") < rate


@pytest.mark.parametrize("line,named", [('  "rdma_agent_pps_per_core": 4000.0,\n', "RDMA agents' rate"),
                                         ('  "uet_agent_pps_per_core": 2500.0,\n', "UET agents' rate")])
def test_an_older_calibration_without_an_agents_rate_is_measured_again(tmp_path, line, named):
    path = tmp_path / "calibration.json"
    old = calibration().to_json()
    assert line in old
    path.write_text(old.replace(line, ""))
    cal, why = current(ID, path)
    assert cal is None and named in why


def test_the_rdma_agents_cost_what_they_were_measured_to():
    need = Demand({"s1": 0.0}, host_pps=4_000.0, switches=1)
    cal = calibration(switch_idle_cores=0.0)
    assert plan(need, cal).needed_cores == pytest.approx(0.2)               # the fast loop: 20,000 a core
    assert plan(need, cal, agents="rdma").needed_cores == pytest.approx(1.0)    # 4,000 a core
    assert plan(need, cal, agents="uet").needed_cores == pytest.approx(1.6)     # 2,500 a core
    with pytest.raises(ValueError, match="agents 'dpdk'"):
        plan(need, cal, agents="dpdk")
