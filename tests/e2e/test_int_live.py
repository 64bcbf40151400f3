"""INT on a live leaf-spine network: watchlisted flows between every pair of
hosts are reported by their sinks with every hop, the right node ids and
the right ports; traffic outside the watchlist is not reported; the planned
source-routed probes cover every directed switch link."""
import socket
import time
from pathlib import Path

import pytest
import yaml

from emulator.build import compile_p4
from control.controller import FabricController
from emulator.network import Network
from features import topology_from_dict
from hostagent.int_telemetry.probes import planned_probes, report_links, send_probes
from telemetry.collector import Collector
from emulator.netns import socket_in_netns
from control.probe_planner import directed_links

REPO = Path(__file__).resolve().parents[2]
WATCHED_PORT = 5001


@pytest.fixture(scope="module")
def topo():
    raw = yaml.safe_load((REPO / "topologies" / "leaf-spine.yaml").read_text())
    raw["int"] = {"collector": "h4", "refresh_ms": 0,
                  "watchlist": [{"protocol": "udp", "dst_ports": WATCHED_PORT,
                                 "instructions": ["node_id", "l1_ports", "hop_latency", "queue"]}]}
    return topology_from_dict(raw, "leaf-spine + int")


@pytest.fixture(scope="module")
def live(topo, tmp_path_factory):
    compile_p4()
    run = tmp_path_factory.mktemp("int-live")
    reports = []
    with Network(topo, run / "net", log_level="warn") as net:
        with FabricController(topo) as ctl:
            ctl.program()
            names = {sw.device_id: sw.name for sw in topo.switches.values()}
            with Collector(bind="0.0.0.0", netns="h4", metrics_port=None, out_dir=run / "collector",
                           node_names=names, listeners=[lambda t, data, pkt: reports.append(pkt)]) as collector:
                yield net, collector, reports


def send_udp(host: str, dst_ip: str, dport: int, count: int = 3, sport: int = 40000) -> None:
    sock = socket_in_netns(host)
    try:
        sock.bind(("0.0.0.0", sport))
        for i in range(count):
            sock.sendto(b"int e2e %d" % i, (dst_ip, dport))
    finally:
        sock.close()


def wait_for(predicate, timeout: float = 5.0) -> bool:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return predicate()


def test_every_hop_of_every_watchlisted_flow_is_reported(live, topo):
    net, collector, reports = live
    hosts = [topo.hosts[h].primary for h in ("h1", "h2", "h3", "h4")]
    pairs = [(a, b) for a in hosts for b in hosts if a.host != b.host]
    for i, (a, b) in enumerate(pairs):
        send_udp(a.host, b.ip, WATCHED_PORT, sport=41000 + i)

    def flows():
        return {(r.inner.src, r.inner.dst): (pkt, r) for pkt in list(reports) for r in pkt.reports
                if r.inner is not None and r.inner.int_stack is not None and not r.q}
    assert wait_for(lambda: len(flows()) == len(pairs)), f"reports for {len(flows())} of {len(pairs)} flows"
    names = {sw.device_id: sw.name for sw in topo.switches.values()}
    for (a, b) in pairs:
        pkt, r = flows()[(a.ip, b.ip)]
        hops = list(reversed(r.inner.int_stack.hops)) + [r.metadata]   # source first, the sink last
        switches = [names[h.node_id] for h in r.inner.int_stack.hops[::-1]] + [names[pkt.node_id]]
        where = f"{a.label}->{b.label}: {switches}"
        assert switches[0] == a.switch and switches[-1] == b.switch, where
        assert len(switches) == (1 if a.switch == b.switch else 3), where
        assert hops[0].ingress_port == a.switch_port and hops[-1].egress_port == b.switch_port, where
        for (u, hu), (v, hv) in zip(zip(switches, hops), zip(switches[1:], hops[1:])):
            assert topo.switches[u].ports[hu.egress_port].peer == v, where
            assert topo.switches[v].ports[hv.ingress_port].peer == u, where
        for h in hops:
            assert h.queue_occupancy is not None and h.hop_latency is not None, where


def test_traffic_outside_the_watchlist_is_not_reported(live, topo):
    net, collector, reports = live
    before = len(reports)
    send_udp("h1", topo.hosts["h3"].primary.ip, WATCHED_PORT + 1, count=5, sport=42000)
    time.sleep(1.0)
    assert not [r for pkt in reports[before:] for r in pkt.reports
                if r.inner is not None and r.inner.sport == 42000]


def test_probes_cover_every_directed_switch_link(live, topo):
    net, collector, reports = live
    before = len(reports)
    probes = planned_probes(topo)
    send_probes(probes)
    want = directed_links(topo)

    def covered():
        links = set()
        for pkt in reports[before:]:
            links |= report_links(pkt, topo)
        return links
    assert wait_for(lambda: covered() >= want), f"missing {sorted(want - covered())}"
    assert len(probes) == 1, "leaf-spine is one Euler circuit"
    net.check_alive()
