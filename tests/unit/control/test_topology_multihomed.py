"""Multi-homed hosts: the file format (NICs, planes, rails), its validation
errors, the addresses of each NIC, the switches' routes per plane/rail and
the hosts' own routing."""
import copy
import re
from pathlib import Path

import pytest
import yaml

from control import forwarding
from control.topology import HostRoute, HostRule, TopologyError
from features import load_topology, topology_from_dict

TOPOLOGIES = Path(__file__).resolve().parents[3] / "topologies"


def planes():
    """Two planes of one switch each; two hosts, one NIC on each plane."""
    nics = [{"name": "p0", "plane": "a"}, {"name": "p1", "plane": "b"}]
    return {"name": "m", "switches": [{"name": "s1", "plane": "a"}, {"name": "s2", "plane": "b"}],
            "hosts": [{"name": "h1", "nics": copy.deepcopy(nics)}, {"name": "h2", "nics": copy.deepcopy(nics)}],
            "links": [["h1.p0", "s1"], ["h1.p1", "s2"], ["h2.p0", "s1"], ["h2.p1", "s2"]]}


def rails():
    """Two rail leaves under one spine; two servers with a NIC on each rail."""
    nics = [{"name": "eth0", "rail": 0}, {"name": "eth1", "rail": 1}]
    return {"name": "r", "switches": [{"name": "sp", "role": "spine"}, {"name": "r0", "rail": 0},
                                      {"name": "r1", "rail": 1}],
            "hosts": [{"name": "g1", "nics": copy.deepcopy(nics)}, {"name": "g2", "nics": copy.deepcopy(nics)}],
            "links": [["g1.eth0", "r0"], ["g1.eth1", "r1"], ["g2.eth0", "r0"], ["g2.eth1", "r1"],
                      ["r0", "sp"], ["r1", "sp"]]}


def changed(base, fn):
    data = base()
    fn(data)
    return data


def set_link(i, value):
    return lambda d: d["links"].__setitem__(i, value)


def set_nic(host, nic, key, value):
    return lambda d: d["hosts"][host]["nics"][nic].__setitem__(key, value)


@pytest.mark.parametrize("data,field,message", [
    pytest.param(changed(planes, set_link(0, ["h1.p9", "s1"])), "links[0].a", "unknown NIC 'p9' of host 'h1'",
                 id="unknown-nic"),
    pytest.param(changed(planes, set_link(0, ["h1", "s1"])), "links[0].a", "host 'h1' has 2 NICs (p0, p1): name one",
                 id="nic-not-named"),
    pytest.param(changed(planes, set_link(2, ["h1.p0", "s1"])), "links[2]", "NIC h1.p0 already has a link",
                 id="nic-linked-twice"),
    pytest.param(changed(planes, lambda d: d["links"].pop()), "links", "NIC h2.p1 has no link to a switch",
                 id="nic-unlinked"),
    pytest.param(changed(planes, set_link(0, ["s1", "h1.p1"])), "links[0].b",
                 "NIC h1.p1 is on plane b but is linked to 's1', which is on plane a", id="plane-mismatch"),
    pytest.param(changed(planes, lambda d: d["links"].append(["s1", "s2"])), "links[4]",
                 "different planes: planes share no links", id="link-between-planes"),
    pytest.param(changed(planes, lambda d: d["switches"][1].pop("plane")), "switches[1].plane",
                 "every switch must be on a plane", id="switch-without-plane"),
    pytest.param(changed(planes, lambda d: d["switches"].append({"name": "s3", "plane": "a"})), "links",
                 "plane a: switches ['s3'] are not connected to 's1'", id="plane-disconnected"),
    pytest.param(changed(planes, set_nic(0, 0, "plane", "A")), "hosts[0].nics[0].plane", "expected a plane label",
                 id="bad-plane-label"),
    pytest.param(changed(planes, set_nic(0, 0, "speed", 100)), "hosts[0].nics[0].speed", "unknown field",
                 id="unknown-nic-field"),
    pytest.param(changed(planes, set_nic(0, 1, "name", "p0")), "hosts[0].nics[1].name", "duplicate NIC name 'p0'",
                 id="duplicate-nic"),
    pytest.param(changed(planes, set_nic(0, 1, "name", "P1")), "hosts[0].nics[1].name", "not a valid NIC name",
                 id="bad-nic-name"),
    pytest.param(changed(planes, lambda d: d["hosts"][0].__setitem__("nics", [])), "hosts[0].nics",
                 "at least 1", id="no-nics"),
    pytest.param(changed(planes, lambda d: d["hosts"][0]["nics"].__setitem__(0, 7)), "hosts[0].nics[0]",
                 "expected a NIC name or a mapping", id="nic-not-a-mapping"),
    pytest.param(changed(planes, lambda d: d["hosts"][0].__setitem__("name", "gpuserver1")
                         or d["hosts"][0]["nics"][1].__setitem__("name", "eth10")), "hosts[0].nics[1].name",
                 "'gpuserver1-eth10' (<host>-<nic>) is 16 characters, Linux allows at most 15 (IFNAMSIZ)",
                 id="ifname-too-long"),
    pytest.param(changed(planes, set_link(0, ["h1.p0", "s1.p0"])), "links[0].b", "'s1' is a switch",
                 id="switch-with-nic"),
    pytest.param(changed(planes, set_link(0, ["h9.p0", "s1"])), "links[0].a", "unknown node 'h9.p0'",
                 id="nic-of-unknown-host"),
    pytest.param(changed(planes, set_link(0, ["h1.p0", "h2.p0"])), "links[0]", "two hosts", id="nic-to-nic"),
    pytest.param(changed(rails, set_link(0, ["g1.eth0", "r1"])), "links[0].a",
                 "NIC g1.eth0 is on rail 0 but is linked to 'r1', which is on rail 1", id="rail-mismatch"),
    pytest.param(changed(rails, set_link(0, ["g1.eth0", "sp"])), "links[0].a",
                 "NIC g1.eth0 is on rail 0 but 'sp' is on no rail", id="rail-on-spine"),
    pytest.param(changed(rails, set_nic(0, 0, "rail", -1)), "hosts[0].nics[0].rail", "integer >= 0",
                 id="negative-rail"),
    pytest.param(changed(rails, lambda d: d["switches"][1].__setitem__("rail", "zero")), "switches[1].rail",
                 "integer >= 0", id="rail-not-a-number"),
    pytest.param(changed(rails, lambda d: d["switches"][1].__setitem__("nics", ["eth0"])), "switches[1].nics",
                 "unknown field", id="switch-with-nics"),
    pytest.param({"name": "x", "switches": ["abcdefghij"], "hosts": [f"h{i}" for i in range(1, 11)],
                  "links": [[f"h{i}", "abcdefghij"] for i in range(1, 11)]}, "links[9]",
                 "'abcdefghij-eth10' is 16 characters", id="switch-ifname-too-long"),
])
def test_invalid_multihomed_topology_names_field_and_problem(data, field, message):
    with pytest.raises(TopologyError) as err:
        topology_from_dict(data, source="bad.yaml")
    text = str(err.value)
    assert text.startswith(f"bad.yaml: {field}:"), text
    assert message in text, text


def test_valid_bases_load():
    assert topology_from_dict(planes()).planes == ["a", "b"]
    assert topology_from_dict(rails()).rails == [0, 1]


def test_one_nic_host_is_unchanged():
    """`h1`, `{name: h1, nics: [eth0]}`, and a link to `h1.eth0` are all the host of old."""
    plain = {"name": "t", "switches": ["s1"], "hosts": ["h1", "h2"], "links": [["h1", "s1"], ["h2", "s1"]]}
    explicit = {"name": "t", "switches": ["s1"], "hosts": [{"name": "h1", "nics": ["eth0"]}, "h2"],
                "links": [["h1.eth0", "s1"], ["s1", "h2"]]}
    a, b = topology_from_dict(plain), topology_from_dict(explicit)
    for topo in (a, b):
        h1 = topo.hosts["h1"]
        assert not h1.multi_homed and list(h1.nics) == ["eth0"]
        assert (h1.ip, h1.prefix_len, h1.mac, h1.iface) == ("10.0.1.1", 24, "0a:00:01:00:00:01", "h1-eth0")
        assert (h1.gateway_ip, h1.gateway_mac, h1.switch, h1.switch_port) == (
            "10.0.1.254", topo.switches["s1"].ports[1].mac, "s1", 1)
        assert h1.primary.label == "h1"
        assert topo.host_routing("h1") == ([HostRoute("default", "10.0.1.254", "h1-eth0")], [])
    assert [r.next_hops for r in a.routes()["s1"]] == [r.next_hops for r in b.routes()["s1"]]
    assert [r.nic for r in a.routes()["s1"]] == ["eth0", "eth0"]


def test_addresses_per_nic():
    topo = topology_from_dict(planes())
    h2 = topo.hosts["h2"]
    p0, p1 = h2.nics["p0"], h2.nics["p1"]
    assert (p0.ip, p0.gateway_ip, p0.mac, p0.iface) == ("10.0.2.1", "10.0.2.254", "0a:00:01:00:00:02", "h2-p0")
    assert (p1.ip, p1.gateway_ip, p1.mac, p1.iface) == ("10.1.2.1", "10.1.2.254", "0a:00:01:01:00:02", "h2-p1")
    assert p1.subnet == "10.1.2.0/24" and p1.label == p1.id == "h2.p1"
    # Each NIC's gateway is the MAC of the switch port it is plugged into.
    s2 = topo.switches["s2"]
    assert (p1.switch, p1.switch_port) == ("s2", 2)
    assert p1.gateway_mac == s2.ports[2].mac
    assert (s2.ports[2].peer, s2.ports[2].peer_nic) == ("h2", "p1")
    # The host's own attributes are its first NIC's.
    assert (h2.ip, h2.mac, h2.iface, h2.switch) == (p0.ip, p0.mac, p0.iface, "s1")
    assert topo.nic("h2.p1") is p1


def test_labels_come_from_the_switch_when_the_nic_has_none():
    data = planes()
    for host in data["hosts"]:
        host["nics"] = ["p0", "p1"]
    topo = topology_from_dict(data)
    assert [(n.id, n.plane) for n in topo.nics] == [("h1.p0", "a"), ("h1.p1", "b"), ("h2.p0", "a"), ("h2.p1", "b")]
    data = rails()
    data["hosts"].append("g3")
    data["links"].append(["g3", "r1"])
    topo = topology_from_dict(data)
    assert topo.hosts["g3"].primary.rail == 1


@pytest.mark.parametrize("name", ["rail-optimized", "dual-plane"])
def test_shipped_multihomed_addresses_are_unique(name):
    topo = load_topology(TOPOLOGIES / f"{name}.yaml")
    ips = [n.ip for n in topo.nics]
    macs = [n.mac for n in topo.nics] + [p.mac for s in topo.switches.values() for p in s.ports.values()]
    ifaces = [n.iface for n in topo.nics] + [p.iface for s in topo.switches.values() for p in s.ports.values()]
    assert len(set(ips)) == len(ips) and len(set(macs)) == len(macs) and len(set(ifaces)) == len(ifaces)
    assert all(len(i) <= 15 for i in ifaces)


def test_rail_optimized_shape_and_addresses():
    topo = load_topology(TOPOLOGIES / "rail-optimized.yaml")
    assert (len(topo.switches), len(topo.hosts), len(topo.nics)) == (6, 4, 16)
    assert topo.rails == [0, 1, 2, 3] and topo.planes == []
    for nic in topo.nics:
        server = int(nic.host[1:])
        assert nic.switch == f"rail{nic.rail}" and nic.name == f"eth{nic.rail}"
        assert nic.ip == f"10.{nic.rail}.{server}.1"  # rail i is 10.i.0.0/16


def test_rail_optimized_switch_routes():
    topo = load_topology(TOPOLOGIES / "rail-optimized.yaml")
    routes = topo.routes()
    assert all(len(r) == 16 for r in routes.values()), "every switch routes every NIC"
    rail0 = {(r.host, r.nic): r for r in routes["rail0"]}
    same_rail = rail0[("g3", "eth0")]
    assert [(h.port, h.peer) for h in same_rail.next_hops] == [(3, "g3.eth0")]
    assert same_rail.next_hops[0].dst_mac == topo.nic("g3.eth0").mac
    other_rail = rail0[("g3", "eth2")]
    assert other_rail.prefix == "10.2.3.0/24"
    assert sorted(h.peer for h in other_rail.next_hops) == ["spine1", "spine2"]
    for r in routes["spine1"]:  # down to the destination's rail leaf, one way
        assert [h.peer for h in r.next_hops] == [f"rail{topo.nic(f'{r.host}.{r.nic}').rail}"]


def test_rail_optimized_host_routing():
    topo = load_topology(TOPOLOGIES / "rail-optimized.yaml")
    routes, rules = topo.host_routing("g1")
    assert rules == [HostRule(f"10.{i}.1.1", 100 + i, 1000 + i) for i in range(4)]
    tables = [r for r in routes if r.table is not None]
    assert tables == [HostRoute("default", f"10.{i}.1.254", f"g1-eth{i}", 100 + i) for i in range(4)]
    main = {r.prefix: r for r in routes if r.table is None}
    # One route per NIC of the 3 other servers, through the NIC on the destination's rail.
    assert len(main) == 12 and "default" not in main
    for rail in range(4):
        for server in (2, 3, 4):
            assert main[f"10.{rail}.{server}.0/24"] == HostRoute(f"10.{rail}.{server}.0/24", f"10.{rail}.1.254",
                                                                 f"g1-eth{rail}")


def test_rail_optimized_every_nic_pair_is_connected():
    topo = load_topology(TOPOLOGIES / "rail-optimized.yaml")
    pairs = topo.nic_pairs()
    assert len(pairs) == 16 * 12 and all(connected for _, _, connected in pairs)


def test_dual_plane_routes_are_disjoint():
    topo = load_topology(TOPOLOGIES / "dual-plane.yaml")
    assert topo.planes == ["a", "b"] and len(topo.nics) == 8
    plane_of_prefix = {n.subnet: n.plane for n in topo.nics}
    for sw_name, routes in topo.routes().items():
        sw = topo.switches[sw_name]
        assert len(routes) == 4, "a plane routes only its own 4 NICs"
        assert {plane_of_prefix[r.prefix] for r in routes} == {sw.plane}
        for r in routes:
            for hop in r.next_hops:
                peer = hop.peer.split(".")[0]
                if peer in topo.switches:
                    assert topo.switches[peer].plane == sw.plane
    leaf1a = {r.host: r for r in topo.routes()["leaf1a"]}
    assert sorted(h.peer for h in leaf1a["h3"].next_hops) == ["spine1a", "spine2a"]
    assert leaf1a["h3"].prefix == "10.0.3.0/24"
    leaf1b = {r.host: r for r in topo.routes()["leaf1b"]}
    assert leaf1b["h3"].prefix == "10.1.3.0/24"
    assert [h.peer for h in leaf1b["h2"].next_hops] == ["h2.eth1"]


def test_dual_plane_host_routing_and_pairs():
    topo = load_topology(TOPOLOGIES / "dual-plane.yaml")
    routes, rules = topo.host_routing("h1")
    assert rules == [HostRule("10.0.1.1", 100, 1000), HostRule("10.1.1.1", 101, 1001)]
    main = {r.prefix: r.dev for r in routes if r.table is None}
    assert main == {f"10.{p}.{k}.0/24": f"h1-eth{p}" for p in (0, 1) for k in (2, 3, 4)}
    pairs = topo.nic_pairs()
    assert len(pairs) == 8 * 6
    assert all(connected == (a.plane == b.plane) for a, b, connected in pairs)
    assert sum(connected for _, _, connected in pairs) == 24


def test_single_homed_host_on_a_plane_reaches_only_its_plane():
    data = planes()
    data["hosts"].append("h3")
    data["links"].append(["h3", "s2"])
    topo = topology_from_dict(data)
    h3 = topo.hosts["h3"].primary
    assert h3.plane == "b" and h3.label == "h3"
    reach = {(a.id, b.id): c for a, b, c in topo.nic_pairs()}
    assert reach[("h3.eth0", "h1.p1")] and not reach[("h3.eth0", "h1.p0")]
    assert topo.host_routing("h3") == ([HostRoute("default", "10.0.3.254", "h3-eth0")], [])
    # h1 reaches h3 through its plane-b NIC.
    assert HostRoute("10.0.3.0/24", "10.1.1.254", "h1-p1") in topo.host_routing("h1")[0]


@pytest.mark.parametrize("name", ["rail-optimized", "dual-plane"])
def test_multihomed_entries_build_against_the_p4info(p4info, name):
    topo = load_topology(TOPOLOGIES / f"{name}.yaml")
    for sw_name, routes in topo.routes().items():
        state = forwarding.forwarding_state(p4info, routes, seed=forwarding.ecmp_seed(topo.switches[sw_name].device_id))
        lpm = p4info.table(forwarding.LPM_TABLE).preamble.id
        assert sum(e.table_id == lpm for e in state.table_entries) == len(routes)


def test_readme_example_loads():
    text = (TOPOLOGIES / "README.md").read_text()
    example = re.search(r"```yaml\n(name: two-rails\n.*?)```", text, re.S).group(1)
    topo = topology_from_dict(yaml.safe_load(example), source="topologies/README.md")
    assert [(n.id, n.rail) for n in topo.nics] == [("g1.eth0", 0), ("g1.eth1", 1), ("g2.eth0", 0), ("g2.eth1", 1)]
