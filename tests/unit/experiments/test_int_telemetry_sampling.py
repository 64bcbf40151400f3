"""The adaptive INT sampling experiment's budget, without a network: its
traffic at the peak of a burst, and the reports of what h4's port delivers,
one in N when sampled."""
import pytest

from experiments.int_telemetry_sampling import BACKGROUND, BURSTER, RECEIVER, offered, topology


@pytest.mark.parametrize("case, reports", [("every-packet", 400), ("adaptive", 400), ("sampled", 25)])
def test_the_budget_counts_the_traffic_at_its_peak_and_the_reports_of_what_is_delivered(case, reports):
    flows = offered(topology(case, 16), case, 100.0, 350.0, 16)
    assert [(f.src, f.dst, f.pps) for f in flows[:3]] == [(h, RECEIVER, 100.0) for h in BACKGROUND] + \
        [(BURSTER, RECEIVER, 350.0)]
    (report,) = flows[3:]
    assert (report.src, report.dst) == (RECEIVER, "h5") and report.pps == pytest.approx(reports)  # h4's port: 400/s
