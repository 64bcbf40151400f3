"""The non-minimal routing experiment's budget, without a network: each host
offers the case's load, spread evenly over its pattern's destinations."""
import pytest

from emulator.calibration import demand
from experiments.nonminimal_routing import LINK_PPS, build_topology, destinations, offered


@pytest.mark.parametrize("pattern", ["uniform", "shift"])
def test_every_host_offers_the_load_spread_over_its_destinations(pattern):
    topo = build_topology(LINK_PPS)
    flows = offered(topo, pattern, 0.5, LINK_PPS)
    dsts = destinations(topo, pattern)
    assert len(flows) == sum(len(d) for d in dsts.values())
    for h in topo.hosts:
        assert sum(f.pps for f in flows if f.src == h) == pytest.approx(0.5 * LINK_PPS)
        assert {f.dst for f in flows if f.src == h} == set(dsts[h])
    need = demand(topo, flows)
    assert need.host_pps == pytest.approx(2 * 0.5 * LINK_PPS * len(topo.hosts))
    assert need.switches == 12
