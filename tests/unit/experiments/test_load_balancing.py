"""The load-balancing experiment's budget, without a network: the flows it
states its cost by are the case's own pairs at the case's rate."""
import pytest

from emulator.calibration import demand
from experiments.load_balancing import FABRICS, flows_of, offered
from features import load_topology


@pytest.mark.parametrize("name", ["leaf-spine", "fat-tree-k4"])
def test_the_budget_counts_every_flow_of_the_case_at_its_rate(name):
    fab = FABRICS[name]
    n = 2 * fab.paths
    flows = offered(fab, n, 95.0)
    assert [(f.src, f.dst) for f in flows] == [(f.sender, f.receiver) for f in flows_of(fab, n)]
    assert all(f.pps == 95.0 for f in flows)
    need = demand(load_topology(name), flows)
    assert need.host_pps == pytest.approx(2 * 95.0 * n)          # each packet sent and received once
    # every packet crosses the senders' and the receivers' side: leaf-spine's two leaves, the fat tree's two pods
    first = "leaf1" if name == "leaf-spine" else "e11"
    assert need.switch_pps[first] == pytest.approx(95.0 * sum(1 for f in flows_of(fab, n) if f.sender in ("h1", "h2")))
