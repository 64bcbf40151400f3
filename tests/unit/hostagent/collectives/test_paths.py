"""The path model and the choice of source ports: channels of a peer pair
on disjoint paths while there are unused paths, then spread evenly. (Against
a live fabric's counters: tests/e2e/test_collectives_live.py.)"""
from __future__ import annotations

from collections import Counter

import pytest

from control.forwarding import crc16
from features import load_topology
from hostagent.collectives.paths import PathModel, flow_hash, path_aware_sports


def ends(topo, name):
    hosts = sorted(topo.hosts.values(), key=lambda h: h.index)
    return hosts[0].ip, hosts[-1].ip


def test_flow_hash_reads_the_flow_key_in_header_order():
    key = bytes([10, 0, 1, 1, 10, 0, 4, 1, 17, 0xC0, 0x00, 0x12, 0xB7])
    assert flow_hash("10.0.1.1", "10.0.4.1", 17, 0xC000, 4791) == crc16(key)


@pytest.mark.parametrize("name,paths", [("leaf-spine", 2), ("fat-tree-k4", 4)])
def test_channels_take_disjoint_paths_then_spread_evenly(name, paths):
    topo = load_topology(name)
    model = PathModel(topo)
    src, dst = ends(topo, name)
    assert len(model.paths_between(src, dst)) == paths
    for channels in (1, paths, 2 * paths + 1):
        ports = model.choose_ports(src, dst, channels)
        assert len(set(ports)) == channels
        used = Counter(model.path(src, dst, p) for p in ports)
        assert len(used) == min(channels, paths)
        assert max(used.values()) - min(used.values()) <= 1
    for p in model.choose_ports(src, dst, paths):
        path = model.path(src, dst, p)
        first, last = path.hops[0][0], path.hops[-1][0]
        assert first == topo.nics[0].switch and last == [n for n in topo.nics if n.ip == dst][0].switch


def test_same_leaf_has_one_path():
    topo = load_topology("leaf-spine")
    model = PathModel(topo)
    h1, h2 = topo.hosts["h1"].ip, topo.hosts["h2"].ip
    assert model.paths_between(h1, h2) == {model.path(h1, h2, 0xC000)}
    assert len(model.path(h1, h2, 0xC000).hops) == 1


def test_sport_of_for_a_communicator():
    topo = load_topology("fat-tree-k4")
    model = PathModel(topo)
    ips = [h.ip for h in sorted(topo.hosts.values(), key=lambda h: h.index)][:4]
    sport_of = path_aware_sports(model, ips, 2)
    assert sport_of(0, 3, 0) != sport_of(0, 3, 1)
    assert model.path(ips[0], ips[3], sport_of(0, 3, 0)) != model.path(ips[0], ips[3], sport_of(0, 3, 1))


def test_unknown_addresses_are_named():
    model = PathModel(load_topology("leaf-spine"))
    with pytest.raises(ValueError, match="no host NIC has address 10.9.9.9"):
        model.path("10.9.9.9", "10.0.1.1", 0xC000)
    with pytest.raises(ValueError, match="channels must be >= 1"):
        model.choose_ports("10.0.1.1", "10.0.4.1", 0)
