"""Ranks from a topology: rail-aware order keeps a ring on its rails."""
from __future__ import annotations

import pytest

from features import load_topology
from hostagent.collectives.placement import HOST_MAJOR, RAIL_AWARE, ranks, ring_hops_across_rails


def test_rail_aware_ring_crosses_a_spine_once_per_rail():
    topo = load_topology("rail-optimized")
    aware, naive = ranks(topo, placement=RAIL_AWARE), ranks(topo, placement=HOST_MAJOR)
    assert len(aware) == len(naive) == 16 and set(aware) == set(naive)
    assert [r.rail for r in aware[:4]] == [0, 0, 0, 0] and [r.host for r in aware[:4]] == ["g1", "g2", "g3", "g4"]
    assert ring_hops_across_rails(aware) == 4
    assert ring_hops_across_rails(naive) == 16
    assert all(r.iface == f"{r.host}-{r.nic}" and r.ip and r.gateway_mac for r in aware)


def test_a_fabric_without_rails_gives_primary_nics_in_order():
    topo = load_topology("leaf-spine")
    assert [r.host for r in ranks(topo)] == ["h1", "h2", "h3", "h4"]
    assert [r.host for r in ranks(topo, ["h4", "h1"], HOST_MAJOR)] == ["h4", "h1"]


def test_bad_requests_are_named():
    topo = load_topology("leaf-spine")
    with pytest.raises(ValueError, match="no host named h9"):
        ranks(topo, ["h1", "h9"])
    with pytest.raises(ValueError, match="placement must be one of rail-aware, host-major"):
        ranks(topo, placement="random")
    with pytest.raises(ValueError, match="hosts must be distinct"):
        ranks(topo, ["h1", "h1"])
