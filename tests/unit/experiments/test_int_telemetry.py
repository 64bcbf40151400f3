"""The INT experiment's reading of its reports (experiments/int_telemetry.py):
each report placed at the time the sink saw the queue, not when it reached
the collector, and the held-report error against the register's samples;
the flows its budget prices."""
from experiments.int_telemetry import RECEIVER, RECEIVER_LINK_MBPS, SENDERS, SINK_SWITCH, held_error, offered, on_switch_clock, \
    topology


def report(arrived_s: float, egress_us: int, queue: int, switch: str = SINK_SWITCH, kind: str = "flow") -> dict:
    return {"t_s": arrived_s, "switch": switch, "kind": kind, "sink_queue": str(queue),
            "sink_egress_us": str(egress_us)}


def test_reports_are_placed_by_their_egress_timestamp_not_their_arrival():
    # the switch's clock starts 100 s before the run's; the first report took 2 ms to arrive,
    # the later ones fell behind (a collector's backlog) by up to 400 ms
    rows = [report(0.102, 100_000_000 + 100_000, 5), report(0.600, 100_000_000 + 200_000, 9),
            report(0.700, 100_000_000 + 300_000, 3), report(0.5, 0, 0, kind="drop"),
            report(0.5, 100_000_000 + 250_000, 7, switch="leaf1")]
    placed, delay_p50, delay_p95 = on_switch_clock(rows)
    assert [(round(t, 3), q) for t, q in placed] == [(0.102, 5), (0.202, 9), (0.302, 3)]
    assert (delay_p50, delay_p95) == (398.0, 398.0)


def test_no_stamped_report_leaves_nothing_to_compare():
    assert on_switch_clock([report(0.1, 0, 0, kind="drop")]) == ([], None, None)


def test_the_held_error_compares_each_sample_with_the_last_report_before_it():
    reports = [(0.0, 10), (1.0, 20)]
    samples = [(0.5, 12), (1.5, 20), (2.5, 26)]
    assert held_error(reports, samples, 0.0, 3.0) == (round((2 + 0 + 6) / 3, 2), 2)


def test_the_budget_counts_the_senders_and_in_the_every_packet_case_a_report_per_delivered_packet():
    suppressed = offered(topology("suppressed"), "suppressed", 500.0)
    assert [(f.src, f.dst, f.pps) for f in suppressed] == [(h, RECEIVER, 500.0) for h in SENDERS]
    every = offered(topology("every-packet"), "every-packet", 500.0)
    assert every[:3] == suppressed and (every[3].src, every[3].dst, every[3].pps) == (RECEIVER, "h5", 800)


def test_a_scale_slows_h4s_link_and_the_reports_it_prices_with_it():
    half = topology("every-packet", 0.5)
    assert half.access_link(half.hosts[RECEIVER]).bandwidth_mbps == RECEIVER_LINK_MBPS / 2
    assert offered(half, "every-packet", 250.0)[3].pps == 400      # a report per packet h4's port delivers


def test_the_scale_is_the_largest_the_budget_fits(monkeypatch):
    from emulator.calibration import Calibration, Identity, demand, plan
    from experiments import common
    cal = Calibration(Identity("AMD EPYC", 2, "simple_switch_grpc", "42"), "2026-12-03T15:09:34+00:00",
                      {"fabric": 6_000.0, "training": 2_800.0}, 0.005, 90_000.0, 12_500.0, 9_300.0)
    monkeypatch.setattr(common, "calibration_or_why", lambda: (cal, ""))
    full = topology("every-packet")
    scale, how = common.budget_scale(None, full, offered(full, "every-packet", 500.0), "training")
    assert 0.05 <= scale < 1 and how.startswith("the budget: at scale 1 this run needs")

    def fits(s: float) -> bool:
        topo = topology("every-packet", s)
        return plan(demand(topo, offered(topo, "every-packet", 500.0 * s)), cal, "training").within_budget
    assert fits(scale) and not fits(scale + 0.05)
    assert common.budget_scale(0.3, full, [], option="--scale") == (0.3, "as given (--scale)")
    monkeypatch.setattr(common, "calibration_or_why", lambda: (None, "no calibration (fabric calibrate)"))
    assert common.budget_scale(None, full, []) == (1.0, "no calibration (fabric calibrate): the rates as written")
