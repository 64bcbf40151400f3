"""The topology generators: the shipped files are their output, and other
sizes load, validate and have the promised shape."""
import subprocess
import sys
from pathlib import Path

import pytest

from features import load_topology, topology_from_dict

TOPOLOGIES = Path(__file__).resolve().parents[3] / "topologies"




from control.generators.dual_plane import dual_plane
from control.generators.fat_tree import fat_tree
from control.generators.rail_optimized import rail_optimized


@pytest.mark.parametrize("shipped,text", [
    ("fat-tree-k4.yaml", lambda: fat_tree(4)),
    ("rail-optimized.yaml", lambda: rail_optimized()),
    ("dual-plane.yaml", lambda: dual_plane()),
])
def test_shipped_files_are_the_generator_output(shipped, text):
    assert (TOPOLOGIES / shipped).read_text() == text(), \
        f"topologies/{shipped} differs from its generator's output: regenerate it (see topologies/README.md)"


def parse(text: str):
    import yaml
    return topology_from_dict(yaml.safe_load(text), source="<generated>")


@pytest.mark.parametrize("servers,nics,spines,per_leaf,leaves", [
    (4, 4, 2, None, 4), (8, 8, 4, None, 8), (8, 4, 2, 4, 8), (2, 1, 1, None, 1), (16, 8, 8, 4, 32)])
def test_rail_optimized_sizes(servers, nics, spines, per_leaf, leaves):
    topo = parse(rail_optimized(servers, nics, spines, per_leaf))
    spine_names = [s for s in topo.switches.values() if s.role == "spine"]
    leaf_names = [s for s in topo.switches.values() if s.role == "leaf"]
    assert (len(spine_names), len(leaf_names), len(topo.hosts), len(topo.nics)) == (spines, leaves, servers,
                                                                                    servers * nics)
    assert topo.rails == list(range(nics))
    for nic in topo.nics:  # NIC i on a rail-i leaf, address 10.i.<server>.1
        assert topo.switches[nic.switch].rail == nic.rail == nic.index
        assert nic.ip == f"10.{nic.rail}.{int(nic.host[1:])}.1"
    for leaf in leaf_names:  # every leaf under every spine
        assert sorted(p.peer for p in topo.switch_neighbours(leaf.name)) == sorted(s.name for s in spine_names)
    assert all(connected for _, _, connected in topo.nic_pairs())


@pytest.mark.parametrize("planes,leaves,spines,per_leaf", [(2, 2, 2, 2), (2, 4, 4, 4), (4, 2, 2, 1), (1, 3, 1, 2)])
def test_dual_plane_sizes(planes, leaves, spines, per_leaf):
    topo = parse(dual_plane(planes, leaves, spines, per_leaf))
    assert len(topo.planes) == planes
    assert len(topo.switches) == planes * (leaves + spines)
    assert len(topo.hosts) == leaves * per_leaf and len(topo.nics) == planes * leaves * per_leaf
    for host in topo.hosts.values():  # homed once on every plane
        assert [n.plane for n in host.nics.values()] == topo.planes
    for link in topo.links:  # no link between planes
        if link.a in topo.switches and link.b in topo.switches:
            assert topo.switches[link.a].plane == topo.switches[link.b].plane
    assert all(connected == (a.plane == b.plane) for a, b, connected in topo.nic_pairs())
    for sw_name, routes in topo.routes().items():
        assert len(routes) == leaves * per_leaf  # its own plane's NICs only


@pytest.mark.parametrize("call,message", [
    (lambda: rail_optimized(servers=6, servers_per_leaf=4), "multiple of servers-per-leaf"),
    (lambda: rail_optimized(servers=255), "at most 254 servers"),
    (lambda: rail_optimized(spines=0), ">= 1"),
    (lambda: rail_optimized(servers=98, spines=2), "more than 99 ports"),
    (lambda: dual_plane(planes=27), "within 1..26"),
    (lambda: dual_plane(leaves=0), ">= 1"),
    (lambda: dual_plane(leaves=100, hosts_per_leaf=1), "more than 99 ports"),
])
def test_generators_reject_impossible_sizes(call, message):
    with pytest.raises(SystemExit, match=message):
        call()


def test_generators_write_to_stdout(tmp_path):
    for script, args, name in [("rail_optimized", ["--servers", "2", "--nics", "2", "--spines", "1"],
                                "rail-optimized"),
                               ("dual_plane", ["--planes", "3", "--leaves", "1"], "multi-plane-3")]:
        out = subprocess.run([sys.executable, "-m", f"control.generators.{script}", *args], capture_output=True, text=True,
                             check=True).stdout
        path = tmp_path / f"{name}.yaml"
        path.write_text(out)
        assert load_topology(path).name == name
