"""Source-routed INT probes (INT-path style): the Scapy layer of the port
list (p4src/include/source_routing.p4), probe packets for the paths that
control/probe_planner.py plans, their injection from the hosts, and the
link coverage the collected reports prove.

A probe is Ether(type=ETHERTYPE_SOURCE_ROUTE) / SourceRoute (a count and
one egress port per switch, popped per hop) / IPv4 / UDP(dport=INT_UDP_PORT)
/ INT shim + INT-MD header with an empty stack (the host is the INT source).
Every switch pops its entry and pushes its hop (node id, ingress and egress
port); the last switch's host port is a sink and reports the whole path.

    python -m hostagent.int_telemetry.probes --topology topologies/leaf-spine.yaml [--max-hops 16] [--rounds 1]

sends one round of probes from the hosts of a running network (`make run`,
INT configured with a collector) and prints what it sent.
"""
from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from typing import Iterable, Optional

from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from wire.source_routing import ETHERTYPE_SOURCE_ROUTE, SOURCE_ROUTE_MAX_HOPS, SourceRoute, SourceRouteError
from wire.int_telemetry import (INS_L1_PORTS, INS_NODE_ID, INT_UDP_PORT, NPT_UDP_PORT, INTMetadataHeader,
                          INTMetadataStack, INTShim)
from control.probe_planner import ProbePath, plan_probe_paths
from emulator.netns import socket_in_netns
from control.topology import TopologyError
from features import load_topology

PROBE_UDP_PORT = 6100              # the UDP port a probe restores at the sink (nothing listens)
PROBE_INSTRUCTIONS = INS_NODE_ID | INS_L1_PORTS   # what coverage needs: who, in which port, out of which


class ProbeError(SourceRouteError):
    """A probe that cannot be sent."""


def probe_frame(ports: Iterable[int], *, src_mac: str, dst_mac: str, src_ip: str, dst_ip: str,
                probe_id: int = 0) -> Ether:
    """A probe that leaves switch i out of ports[i]."""
    ports = list(ports)
    if not 1 <= len(ports) <= SOURCE_ROUTE_MAX_HOPS:
        raise ProbeError(f"a probe takes 1..{SOURCE_ROUTE_MAX_HOPS} hops, got {len(ports)}")
    for p in ports:
        if not 0 <= p < 1 << 16:
            raise ProbeError(f"port {p} does not fit the 16-bit port field")
    route = SourceRoute(ports=ports)
    md = INTMetadataHeader(remaining_hop_cnt=len(ports), instruction_bitmap=PROBE_INSTRUCTIONS)
    md.hop_ml = md.effective_hop_ml()
    inner = (IP(src=src_ip, dst=dst_ip) / UDP(sport=40000 + probe_id % 20000, dport=INT_UDP_PORT)
             / INTShim(type=1, npt=NPT_UDP_PORT, orig_dport=PROBE_UDP_PORT) / md / INTMetadataStack(hops=[])
             / Raw(b"probe %d" % probe_id))
    return Ether(bytes(Ether(src=src_mac, dst=dst_mac, type=ETHERTYPE_SOURCE_ROUTE) / route / inner))


@dataclass(frozen=True)
class PlannedProbe:
    """A planned path, ready to send from `host`'s NIC `iface`."""
    path: ProbePath
    host: str
    iface: str
    frame: bytes


def planned_probes(topo, max_hops: int = SOURCE_ROUTE_MAX_HOPS) -> list[PlannedProbe]:
    """Probe frames for the Euler plan of `topo` (one per path)."""
    if max_hops > SOURCE_ROUTE_MAX_HOPS:
        raise ProbeError(f"max_hops {max_hops} exceeds the {SOURCE_ROUTE_MAX_HOPS} entries a probe carries")
    probes = []
    for i, path in enumerate(plan_probe_paths(topo, max_hops=max_hops)):
        src = _nic_behind(topo, path.switches[0], path.start_host)
        dst = _nic_behind(topo, path.switches[-1], path.end_host)
        frame = probe_frame(path.ports, src_mac=src.mac, dst_mac=src.gateway_mac, src_ip=src.ip, dst_ip=dst.ip,
                            probe_id=i)
        probes.append(PlannedProbe(path, src.host, src.iface, bytes(frame)))
    return probes


def _nic_behind(topo, switch: str, host: str):
    for port in topo.switches[switch].ports.values():
        if port.peer == host:
            return topo.link_nic(port.link, host)
    raise ProbeError(f"{host} is not attached to {switch}")


def send_probes(probes: list[PlannedProbe]) -> None:
    """Send each probe from its host's namespace (needs root)."""
    import socket
    for probe in probes:
        sock = socket_in_netns(probe.host, socket.AF_PACKET, socket.SOCK_RAW)
        try:
            sock.bind((probe.iface, 0))
            sock.send(probe.frame)
        finally:
            sock.close()


# -- coverage from reports ------------------------------------------------------

def report_links(report, topo, node_names: Optional[dict[int, str]] = None) -> set[tuple[str, str]]:
    """The directed switch links one decoded telemetry report shows: every
    hop on the stack (node id, egress port) and the reporting switch's
    ingress port, mapped onto the topology."""
    names = node_names or {sw.device_id: sw.name for sw in topo.switches.values()}
    links: set[tuple[str, str]] = set()
    for individual in report.reports:
        inner = individual.inner
        if inner is None or inner.int_stack is None:
            continue
        hops = list(reversed(inner.int_stack.hops))        # first switch first
        for hop in hops:
            sw = names.get(hop.node_id)
            if sw is None or hop.egress_port is None:
                continue
            peer = topo.switches[sw].ports.get(hop.egress_port)
            if peer is not None and peer.peer in topo.switches:
                links.add((sw, peer.peer))
        sink = names.get(report.node_id)
        md = individual.metadata
        if sink is not None and md is not None and md.ingress_port is not None:
            port = topo.switches[sink].ports.get(md.ingress_port)
            if port is not None and port.peer in topo.switches:
                links.add((port.peer, sink))
    return links


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m hostagent.int_telemetry.probes", description=__doc__.split("\n\n")[0])
    ap.add_argument("--topology", "-t", required=True)
    ap.add_argument("--max-hops", type=int, default=SOURCE_ROUTE_MAX_HOPS)
    ap.add_argument("--rounds", type=int, default=1, help="how many times to send the whole plan")
    ap.add_argument("--interval", type=float, default=1.0, help="seconds between rounds")
    args = ap.parse_args(argv)
    try:
        topo = load_topology(args.topology)
        probes = planned_probes(topo, args.max_hops)
    except (TopologyError, ProbeError, ValueError) as exc:
        print(f"probes: {exc}", file=sys.stderr)
        return 2
    for r in range(args.rounds):
        send_probes(probes)
        print(f"round {r + 1}/{args.rounds}: {len(probes)} probes sent", flush=True)
        for p in probes:
            print(f"  {p.host}: {' -> '.join(p.path.switches)} -> {p.path.end_host}")
        if r + 1 < args.rounds:
            time.sleep(args.interval)
    return 0


if __name__ == "__main__":
    sys.exit(main())
