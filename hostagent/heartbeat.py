"""Heartbeats for data-plane failover (p4src/include/failover.p4): small
source-routed packets sent from the hosts along paths that cross every
link in both directions, every period. Each switch records, per ingress
port, when it last heard one (register port_heard); a port silent for the
failover timeout is dead and its ECMP members fail over to their backups.

    python -m hostagent.heartbeat --topology topologies/leaf-spine.yaml [--period-ms 20] [--duration 60]

Runs in the root namespace of a running network (`make run`) and sends from
inside the hosts' namespaces. The paths are the INT probe plan
(telemetry/probe_planner.py: an Euler circuit per connected part, cut at
edge switches), so every directed switch link, and every host link towards
its switch, carries one heartbeat per period. A heartbeat is
Ether(type=ETHERTYPE_SOURCE_ROUTE) / SourceRoute(ports) / IPv4 / UDP to
HEARTBEAT_UDP_PORT / "heartbeat <seq>", without INT (reports stay for probes).
"""
from __future__ import annotations

import argparse
import signal
import socket
import sys
import time
from dataclasses import dataclass
from typing import Optional

from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from .probes import ETHERTYPE_SOURCE_ROUTE, SOURCE_ROUTE_MAX_HOPS, ProbeError, SourceRoute

HEARTBEAT_UDP_PORT = 6200


def heartbeat_frame(ports: list[int], *, src_mac: str, dst_mac: str, src_ip: str, dst_ip: str, seq: int = 0) -> bytes:
    """A heartbeat that leaves switch i out of ports[i]."""
    if not 1 <= len(ports) <= SOURCE_ROUTE_MAX_HOPS:
        raise ProbeError(f"a heartbeat takes 1..{SOURCE_ROUTE_MAX_HOPS} hops, got {len(ports)}")
    return bytes(Ether(src=src_mac, dst=dst_mac, type=ETHERTYPE_SOURCE_ROUTE) / SourceRoute(ports=ports)
                 / IP(src=src_ip, dst=dst_ip) / UDP(sport=HEARTBEAT_UDP_PORT, dport=HEARTBEAT_UDP_PORT)
                 / Raw(b"heartbeat %d" % seq))


@dataclass
class HeartbeatPath:
    host: str
    iface: str
    frame: bytes
    links: list[tuple[str, str]]


def planned_heartbeats(topo, max_hops: int = SOURCE_ROUTE_MAX_HOPS) -> list[HeartbeatPath]:
    """One heartbeat per path of the probe plan (every directed switch link)."""
    from telemetry.probe_planner import plan_probe_paths
    from .probes import _nic_behind
    out = []
    for i, path in enumerate(plan_probe_paths(topo, max_hops=max_hops)):
        src = _nic_behind(topo, path.switches[0], path.start_host)
        dst = _nic_behind(topo, path.switches[-1], path.end_host)
        frame = heartbeat_frame(list(path.ports), src_mac=src.mac, dst_mac=src.gateway_mac, src_ip=src.ip,
                                dst_ip=dst.ip, seq=i)
        links = list(zip(path.switches, path.switches[1:]))
        out.append(HeartbeatPath(src.host, src.iface, frame, links))
    return out


class HeartbeatSender:
    """Raw sockets in the hosts' namespaces; send() one round."""

    def __init__(self, paths: list[HeartbeatPath]):
        from telemetry.netns import socket_in_netns
        self.paths = paths
        self.socks = []
        for p in paths:
            s = socket_in_netns(p.host, socket.AF_PACKET, socket.SOCK_RAW)
            s.bind((p.iface, 0))
            self.socks.append(s)
        self.rounds = 0
        self.errors = 0

    def send(self) -> None:
        for s, p in zip(self.socks, self.paths):
            try:
                s.send(p.frame)
            except OSError:
                self.errors += 1          # a host link that is down: that path is silent, as it should be
        self.rounds += 1

    def close(self) -> None:
        for s in self.socks:
            s.close()

    def run(self, period_s: float, duration_s: Optional[float] = None, stop=lambda: False) -> None:
        start = time.monotonic()
        next_at = start
        while not stop() and (duration_s is None or time.monotonic() - start < duration_s):
            self.send()
            next_at += period_s
            time.sleep(max(0.0, next_at - time.monotonic()))


def main(argv: Optional[list[str]] = None) -> int:
    from control.topology import TopologyError, load
    ap = argparse.ArgumentParser(prog="python -m hostagent.heartbeat", description=__doc__.split("\n\n")[0])
    ap.add_argument("--topology", required=True)
    ap.add_argument("--period-ms", type=float, default=None,
                    help="default: the topology's failover.heartbeat_ms, else 20")
    ap.add_argument("--duration", type=float, default=None, help="seconds (default: until SIGTERM/SIGINT)")
    args = ap.parse_args(argv)
    try:
        topo = load(args.topology)
    except (TopologyError, OSError) as exc:
        ap.error(str(exc))
    cfg = topo.features.get("failover")
    period_ms = args.period_ms or (cfg.heartbeat_ms if cfg else 20.0)
    if period_ms <= 0:
        ap.error("--period-ms must be above 0")
    paths = planned_heartbeats(topo)
    sender = HeartbeatSender(paths)
    stopping = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stopping.append(True))
    covered = {link for p in paths for link in p.links}
    print(f"heartbeats: {len(paths)} paths covering {len(covered)} directed switch links, every {period_ms:g} ms",
          flush=True)
    sender.run(period_ms / 1000, args.duration, stop=lambda: bool(stopping))
    sender.close()
    print(f"heartbeats: {sender.rounds} rounds sent ({sender.errors} sends refused)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
