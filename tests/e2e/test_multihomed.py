"""Multi-homed topologies on live BMv2: `make run` on rail-optimized and
dual-plane proves every NIC pair that should reach each other does (per
rail, per plane) and that the planes are disjoint; on a live rail fabric,
each NIC is configured as the file says and the source address picks the
NIC (bound: across the spines; unbound: along the destination's rail)."""
from pathlib import Path

from test_make_run import leftovers, make_run, top_tier_packets

from emulator.build import compile_p4
from control.controller import FabricController
from emulator.network import Network
from control.p4constants import drop_reasons
from features import load_topology

REPO = Path(__file__).resolve().parents[2]


def test_make_run_rail_optimized_reaches_every_nic_on_every_rail():
    topo = load_topology(REPO / "topologies" / "rail-optimized.yaml")
    assert leftovers(topo) == [], "a previous run left things behind"
    out = make_run("TOPO=rail-optimized", "ARGS=--no-cli --log-level warn")
    assert "All-pairs connectivity: 192/192 NIC pairs OK" in out, out
    for rail in range(4):
        assert f"rail {rail}: 12/12 NIC pairs within the rail OK, 36/36 to other rails OK" in out, out
    counts = top_tier_packets(out)  # cross-rail pings climb to the spines: both carried some
    assert len(counts) == 2 and all(c > 0 for c in counts), out
    assert leftovers(topo) == [], out


def test_make_run_dual_plane_reaches_each_plane_and_keeps_planes_apart():
    topo = load_topology(REPO / "topologies" / "dual-plane.yaml")
    assert leftovers(topo) == [], "a previous run left things behind"
    out = make_run("TOPO=dual-plane", "ARGS=--no-cli --log-level warn")
    assert "All-pairs connectivity: 24/24 NIC pairs OK" in out, out
    assert "plane a: 12/12 NIC pairs OK" in out and "plane b: 12/12 NIC pairs OK" in out, out
    assert "across planes: 0/24 NIC pairs answered (OK: the planes are disjoint)" in out, out
    assert "failover on: heartbeats every 20 ms" in out, "dual-plane ships with data-plane failover"
    counts = top_tier_packets(out)  # spine1a, spine2a, spine1b, spine2b
    assert len(counts) == 4 and counts[0] + counts[1] > 0 and counts[2] + counts[3] > 0, out
    assert leftovers(topo) == [], out


def ns(net, host: str, *cmd: str) -> str:
    proc = net.host_cmd(host, list(cmd))
    assert proc.returncode == 0, f"{host}: {' '.join(cmd)}: {proc.stderr}"
    return proc.stdout


def spine_rx(ctl) -> int:
    return sum(pkts for sw in ("spine1", "spine2") for pkts, _ in ctl.counter(sw, "ingress_port_counter").values())


def test_live_rail_fabric_nics_and_source_routing(tmp_path):
    compile_p4()
    topo = load_topology(REPO / "topologies" / "rail-optimized.yaml")
    with Network(topo, tmp_path / "run", log_level="warn") as net, FabricController(topo) as ctl:
        ctl.program()
        # Every NIC: its interface, MAC and address in the host's one namespace.
        for host in topo.hosts.values():
            addrs = ns(net, host.name, "ip", "-o", "-4", "addr", "show")
            links = ns(net, host.name, "ip", "-o", "link", "show")
            for nic in host.nics.values():
                assert f"{nic.iface}    inet {nic.ip}/24" in addrs, addrs
                line = next((ln for ln in links.splitlines() if f" {nic.iface}@" in ln or f" {nic.iface}:" in ln), "")
                assert f"link/ether {nic.mac}" in line, links
            rules = ns(net, host.name, "ip", "rule", "show")
            for nic in host.nics.values():
                assert f"{1000 + nic.index}:\tfrom {nic.ip} lookup {100 + nic.index}" in rules, rules
        g1, g2 = topo.hosts["g1"], topo.hosts["g2"]
        dest = g2.nics["eth2"]
        # Unbound: the NIC on the destination's rail; bound to eth0: eth0, whatever the destination.
        assert f"dev g1-eth2 src {g1.nics['eth2'].ip}" in ns(net, "g1", "ip", "route", "get", dest.ip)
        assert "dev g1-eth0" in ns(net, "g1", "ip", "route", "get", dest.ip, "from", g1.nics["eth0"].ip)
        ping = ["ping", "-n", "-q", "-c", "3", "-W", "2"]
        before = spine_rx(ctl)
        ns(net, "g1", *ping, dest.ip)  # rail-aligned: rail2 leaf only
        assert spine_rx(ctl) == before, "an unbound ping to a NIC on rail 2 went through the spines"
        ns(net, "g1", *ping, "-I", g1.nics["eth0"].ip, dest.ip)  # rail 0 -> rail 2: up and over
        assert spine_rx(ctl) >= before + 6, "a ping from rail 0 to rail 2 did not cross the spines"
        rx = ctl.counter("rail0", "ingress_port_counter")
        assert rx.get(g1.nics["eth0"].switch_port, (0, 0))[0] >= 3, "g1.eth0 did not send the bound ping"


def test_live_dual_plane_drops_cross_plane_traffic_at_the_first_leaf(tmp_path):
    """A ping from h1's plane-a NIC to h3's plane-b NIC leaves through eth0,
    reaches leaf1a, finds no route there (plane a has none to plane b) and is
    dropped; the same destination from the plane-b NIC answers."""
    compile_p4()
    topo = load_topology(REPO / "topologies" / "dual-plane.yaml")
    no_route = drop_reasons()["NO_ROUTE"]
    with Network(topo, tmp_path / "run", log_level="warn") as net, FabricController(topo) as ctl:
        ctl.program()
        h1, h3 = topo.hosts["h1"], topo.hosts["h3"]
        target = h3.nics["eth1"]  # plane b
        ping = ["ping", "-n", "-q", "-c", "3", "-W", "1"]
        drops = ctl.counter("leaf1a", "drop_counter").get(no_route, (0, 0))[0]
        assert net.host_cmd("h1", [*ping, "-I", h1.nics["eth0"].ip, target.ip]).returncode != 0
        assert ctl.counter("leaf1a", "drop_counter").get(no_route, (0, 0))[0] == drops + 3
        assert net.host_cmd("h1", [*ping, "-I", h1.nics["eth1"].ip, target.ip]).returncode == 0
        assert net.host_cmd("h1", [*ping, target.ip]).returncode == 0  # unbound: the main table picks eth1
        for sw in ("spine1a", "spine2a", "leaf2a"):  # nothing of it went further on plane a
            assert ctl.counter(sw, "drop_counter").get(no_route, (0, 0))[0] == 0
