"""Addresses, MACs, ports and shortest-path ECMP routes computed from topologies."""
from pathlib import Path

from features import load_topology

TOPOLOGIES = Path(__file__).resolve().parents[3] / "topologies"


def test_leaf_spine_addresses_and_ports():
    topo = load_topology(TOPOLOGIES / "leaf-spine.yaml")
    h1, h3 = topo.hosts["h1"], topo.hosts["h3"]
    assert (h1.ip, h1.prefix_len, h1.gateway_ip) == ("10.0.1.1", 24, "10.0.1.254")
    assert (h3.switch, h3.switch_port) == ("leaf2", 1)
    leaf1 = topo.switches["leaf1"]
    # Ports are numbered in link order; the gateway MAC is the leaf's port MAC.
    assert [(p.number, p.peer) for p in leaf1.ports.values()] == [(1, "h1"), (2, "h2"), (3, "spine1"), (4, "spine2")]
    assert h1.gateway_mac == leaf1.ports[1].mac
    macs = [h.mac for h in topo.hosts.values()] + [p.mac for s in topo.switches.values() for p in s.ports.values()]
    assert len(set(macs)) == len(macs)
    assert all(int(m.split(":")[0], 16) & 1 == 0 for m in macs), "unicast MACs only"


def test_leaf_spine_routes_use_both_spines():
    topo = load_topology(TOPOLOGIES / "leaf-spine.yaml")
    routes = {r.host: r for r in topo.routes()["leaf1"]}
    assert [h.peer for h in routes["h1"].next_hops] == ["h1"]
    assert routes["h1"].next_hops[0].dst_mac == topo.hosts["h1"].mac
    remote = routes["h3"]
    assert remote.prefix == "10.0.3.0/24"
    assert sorted(h.peer for h in remote.next_hops) == ["spine1", "spine2"]
    spine1_port = topo.switches["spine1"].ports[1]  # spine1's link to leaf1
    hop = next(h for h in remote.next_hops if h.peer == "spine1")
    assert hop.dst_mac == spine1_port.mac and hop.port == 3
    # Spines have one path down to each leaf.
    for r in topo.routes()["spine1"]:
        assert len(r.next_hops) == 1


def test_fat_tree_k4_path_diversity():
    topo = load_topology(TOPOLOGIES / "fat-tree-k4.yaml")
    routes = topo.routes()
    dest = topo.hosts["h16"]  # pod 4
    edge_routes = {r.host: r for r in routes["e11"]}
    agg_routes = {r.host: r for r in routes["a11"]}
    assert len(edge_routes["h16"].next_hops) == 2      # up to either aggregation switch
    assert len(agg_routes["h16"].next_hops) == 2       # up to either core of its group
    assert len({r.host: r for r in routes["c1"]}["h16"].next_hops) == 1  # down: one way
    assert len(edge_routes["h2"].next_hops) == 1       # same edge switch: direct
    assert dest.subnet == "10.0.16.0/24"
    hops = topo.hops_between_switches()
    assert hops["e11"]["e42"] == 4 and hops["e11"]["e12"] == 2


def test_dumbbell_single_path_through_bottleneck():
    topo = load_topology(TOPOLOGIES / "dumbbell.yaml")
    s1_to_h3 = {r.host: r for r in topo.routes()["s1"]}["h3"]
    assert [h.peer for h in s1_to_h3.next_hops] == ["s2"]
    bottleneck = topo.switches["s1"].ports[s1_to_h3.next_hops[0].port].link
    assert bottleneck.bandwidth_mbps == 10 and bottleneck.delay_ms == 1
