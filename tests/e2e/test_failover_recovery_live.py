"""Recovery on live leaf-spine and dual-plane networks: a switch whose process died is
restarted by the launcher and reprogrammed by the controller in one
reconciliation (nothing duplicated, every pair reachable again); a backup
controller (lower election id) cannot write while the primary is there,
takes over when the primary goes, and rewrites nothing that is already
right."""
import contextlib
import socket
import struct
import time
from pathlib import Path

import pytest
from p4.v1 import p4runtime_pb2

from emulator.build import compile_p4
from control.controller import FabricController
from features.load_balancing import LbMode
from emulator.netns import socket_in_netns
from emulator.network import Network, queue_rate_pps
from control.switch import SwitchError, update
from emulator.supervisor import Supervisor
from features.failover.rerouting import Rerouter
from control.topology import Failures
from features import load_topology, topology_from_dict

REPO = Path(__file__).resolve().parents[2]


TOPOLOGIES = ["leaf-spine", "dual-plane"]


def first(topo, role: str) -> str:
    """The first switch of `role` by name (of plane a on dual-plane): spine1, leaf1a, ..."""
    return sorted(s.name for s in topo.switches.values() if s.role == role)[0]


@pytest.fixture(params=TOPOLOGIES)
def net(tmp_path, request):
    compile_p4()
    topo = load_topology(REPO / "topologies" / f"{request.param}.yaml")
    with Network(topo, tmp_path / "net", log_level="warn") as network:
        yield network


def test_a_dead_switch_is_restarted_and_reprogrammed_once(net):
    with FabricController(net.topo) as ctl:
        ctl.program()
        assert all(net.ping_all().values())
        spine = first(net.topo, "spine")
        net.switches[spine].proc.kill()
        net.switches[spine].proc.wait()
        recovered = Supervisor(net, ctl, on_recovery=print).check_once()
        assert [r.switch for r in recovered] == [spine]
        assert recovered[0].result.pipeline_pushed and recovered[0].result.report.inserted > 0
        assert not net.dead_switches()
        assert all(net.ping_all().values()), "every pair reachable after the recovery"
        again = ctl.program()
        assert all(r.report.writes == 0 and not r.pipeline_pushed for r in again), [str(r.report) for r in again]
        assert Supervisor(net, ctl).check_once() == []


def test_backup_controller_takes_over_without_rewriting(net):
    primary = FabricController(net.topo, election_id=(0, 2))
    backup = FabricController(load_topology(REPO / "topologies" / f"{net.topo.name}.yaml"), election_id=(0, 1))
    try:
        primary.program()
        backup.connect()
        assert all(primary.primary_of().values())
        assert not any(backup.primary_of().values())
        route = backup.p4info.table_entry("ipv4_lpm", {"hdr.ipv4.dst_addr": "10.99.0.0/16"},
                                          action="set_next_id", params={"next_id": 1})
        with pytest.raises(SwitchError):
            backup.connections[first(net.topo, "leaf")].write([update(p4runtime_pb2.Update.INSERT, table_entry=route)])
        primary.close()                            # the primary controller goes away
        took = backup.wait_until_primary(timeout=10)
        print(f"\nbackup primary on every switch {took * 1000:.0f} ms after the primary left")
        results = backup.program()
        assert all(r.report.writes == 0 and not r.pipeline_pushed for r in results), [str(r.report) for r in results]
        assert backup.feature("load_balancing").set_mode(first(net.topo, "leaf"), LbMode("spray")).writes > 0, "the new primary writes"
        assert all(net.ping_all().values())
    finally:
        primary.close()
        backup.close()


@pytest.mark.parametrize("failover_network", TOPOLOGIES, indirect=True)
def test_routes_avoid_a_dead_switch_and_return_when_it_is_back(failover_network):
    topo, net, ctl = failover_network
    spine, leaf = first(topo, "spine"), first(topo, "leaf")
    rerouter = Rerouter(ctl, timeout_ms=100, on_change=print)
    time.sleep(0.3)
    assert rerouter.check_once() is None, "nothing failed yet"
    leaf_hops = {r.prefix: len(r.next_hops) for r in ctl.routes[leaf]}
    net.switches[spine].proc.kill()
    net.switches[spine].proc.wait()
    ctl.connections.pop(spine).close()
    assert rerouter.check_once() == Failures(switches=frozenset({spine}))
    assert all(len(r.next_hops) == 1 for r in ctl.routes[leaf] if leaf_hops[r.prefix] == 2)
    assert all(net.ping_all().values()), "every pair reachable around the dead spine"
    net.restart_switch(spine)
    rerouter.check_once()               # polled before its pipeline is back: no register yet, still failed
    ctl.recover_switch(spine)
    time.sleep(0.5)                     # heartbeats through the spine again
    assert rerouter.check_once() == Failures()
    assert {r.prefix: len(r.next_hops) for r in ctl.routes[leaf]} == leaf_hops, "routes are back"
    assert all(net.ping_all().values())
    assert all(r.report.writes == 0 for r in ctl.program()), "nothing left to fix"


SHAPED_PPS = 50                      # 0.6 Mbit/s: queue_rate_pps(0.6) packets/s on every port
SO_TIMESTAMPNS = 35                  # Linux; Python's socket module does not name it


def arrival_spread_s(net, src: str, dst: str, packets: int = 40) -> float:
    """Send `packets` UDP datagrams from `src` to `dst` 2 ms apart (80 ms in
    all: faster than the shaped link, slower than a burst BMv2's input path
    loses frames of; fewer than the queue holds) and return the time from the
    first arrival to the last, by the kernel's receive timestamps (a busy
    machine can only spread them further, never bunch them closer than the
    queue sent them, short of a first packet delayed more than the last)."""
    rx = socket_in_netns(dst)
    tx = socket_in_netns(src)
    try:
        rx.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        rx.bind((net.topo.hosts[dst].ip, 40000))
        for i in range(packets):
            tx.sendto(i.to_bytes(4, "big") + bytes(996), (net.topo.hosts[dst].ip, 40000))
            time.sleep(0.002)
        stamps = []
        rx.settimeout(3)
        with contextlib.suppress(socket.timeout):
            while len(stamps) < packets:
                _, ancdata, _, _ = rx.recvmsg(2048, 64)
                sec, nsec = struct.unpack("qq", ancdata[0][2][:16])
                stamps.append(sec + nsec / 1e9)
        assert len(stamps) >= packets - 5, f"{len(stamps)} of {packets} packets arrived"
        return max(stamps) - min(stamps)
    finally:
        rx.close()
        tx.close()


def test_a_restarted_switch_gets_its_link_rates_back(tmp_path):
    """A switch killed and recovered serves its queues at the link's rate
    again (set over Thrift, which P4Runtime does not reach): one switch
    between two hosts, so it alone shapes the path."""
    compile_p4()
    topo = topology_from_dict({"name": "shaped", "defaults": {"link": {"bandwidth_mbps": 0.6}},
                               "switches": [{"name": "s1"}], "hosts": [{"name": "h1"}, {"name": "h2"}],
                               "links": [["h1", "s1"], ["h2", "s1"]]}, "one shaped switch")
    assert queue_rate_pps(0.6) == SHAPED_PPS
    shaped_s = 34 / SHAPED_PPS                     # 35 packets or more leave 1/rate apart: 0.68 s or more
    with Network(topo, tmp_path / "net", log_level="warn") as net, FabricController(topo) as ctl:
        net.apply_queue_rates()
        ctl.program()
        assert all(net.ping_all().values())
        before = arrival_spread_s(net, "h1", "h2")
        net.switches["s1"].proc.kill()
        net.switches["s1"].proc.wait()
        assert [r.switch for r in Supervisor(net, ctl).check_once()] == ["s1"]
        after = arrival_spread_s(net, "h1", "h2")
        print(f"\n40 packets at {SHAPED_PPS} pps: arrivals spread {before:.2f} s before the restart, {after:.2f} s after")
        # Half the shaped time: a switch forwarding unshaped delivers them as sent, within about 80 ms.
        assert before >= 0.5 * shaped_s, f"the link was not shaped before the restart ({before:.2f} s)"
        assert after >= 0.5 * shaped_s, (f"after the restart 40 packets arrived within {after:.2f} s: the switch "
                                         f"forwards unshaped (a {SHAPED_PPS} pps queue takes {shaped_s:.2f} s)")
