"""The failure diagnosis experiment's budget, without a network: every
ordered host pair at the rate its traffic threads send at most."""
import pytest

from emulator.calibration import demand
from experiments.failover_diagnosis import PAIR_PPS, offered
from features import load_topology


def test_the_budget_counts_every_ordered_host_pair_at_its_rate():
    topo = load_topology("leaf-spine")
    flows = offered(topo)
    hosts = list(topo.hosts)
    assert sorted((f.src, f.dst) for f in flows) == sorted((a, b) for a in hosts for b in hosts if a != b)
    assert demand(topo, flows).host_pps == pytest.approx(2 * PAIR_PPS * len(hosts) * (len(hosts) - 1))
