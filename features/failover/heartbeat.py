"""Heartbeats for data-plane failover (p4src/include/failover.p4): small
source-routed packets sent from the hosts along paths that cross every
link in both directions, every period. Each switch records, per ingress
port, when it last heard one (register port_heard); a port silent for the
failover timeout is dead and its ECMP members fail over to their backups.

    fabric heartbeats --topology leaf-spine [--period-ms 20] [--duration 60]

Runs in the root namespace of a running network (`make run` runs it when the
topology has `failover:`) and sends from inside the hosts' namespaces. One
heartbeat per switch link goes across it and back (planned_heartbeats), so
a dead switch silences only its own links' heartbeats (a single tour through
every link, like the INT probes', would go silent after the first dead
switch and kill every link behind it). A heartbeat is
Ether(type=ETHERTYPE_SOURCE_ROUTE) / SourceRoute(ports) / IPv4 / UDP to
HEARTBEAT_UDP_PORT / "heartbeat <seq>", without INT (reports stay for probes).
"""
from __future__ import annotations

import argparse
import contextlib
import pickle
import select
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from emulator.netns import socket_in_netns
from features.failover.data_plane import edge_switches
from wire.source_routing import ETHERTYPE_SOURCE_ROUTE, SOURCE_ROUTE_MAX_HOPS, SourceRoute, SourceRouteError

HEARTBEAT_UDP_PORT = 6200          # p4src/include/defines.p4 (tests check they agree)
HEARTBEAT_ORIGIN_PORT_BASE = 0xC000   # a path heartbeat's source port: base + its edge switch's index


def heartbeat_frame(ports: list[int], *, src_mac: str, dst_mac: str, src_ip: str, dst_ip: str, seq: int = 0,
                    origin: Optional[int] = None) -> bytes:
    """A heartbeat that leaves switch i out of ports[i]; a path heartbeat
    when `origin` (its edge switch's index) is given."""
    if not 1 <= len(ports) <= SOURCE_ROUTE_MAX_HOPS:
        raise SourceRouteError(f"a heartbeat takes 1..{SOURCE_ROUTE_MAX_HOPS} hops, got {len(ports)}")
    return bytes(Ether(src=src_mac, dst=dst_mac, type=ETHERTYPE_SOURCE_ROUTE) / SourceRoute(ports=ports)
                 / IP(src=src_ip, dst=dst_ip)
                 / UDP(sport=HEARTBEAT_UDP_PORT if origin is None else HEARTBEAT_ORIGIN_PORT_BASE + origin,
                       dport=HEARTBEAT_UDP_PORT)
                 / Raw(b"heartbeat %d" % seq))


@dataclass
class HeartbeatPath:
    host: str
    iface: str
    frame: bytes
    links: list[tuple[str, str]]     # the directed switch links whose far end records it
    paths: list[tuple[str, str, str]] = field(default_factory=list)   # (edge A, A's neighbour N, edge B): A hears B's round trip via N


def _port_to(topo, switch: str, peer: str) -> int:
    return next(p.number for p in topo.switches[switch].ports.values() if p.peer == peer)


def _switch_path(topo, src: str, dst: str) -> list[str]:
    """Shortest switch path src .. dst (BFS over switch links)."""
    prev: dict[str, Optional[str]] = {src: None}
    frontier = [src]
    while frontier and dst not in prev:
        nxt = []
        for s in frontier:
            for port in topo.switches[s].ports.values():
                if port.peer in topo.switches and port.peer not in prev:
                    prev[port.peer] = s
                    nxt.append(port.peer)
        frontier = nxt
    if dst not in prev:
        raise SourceRouteError(f"no switch path from {src} to {dst}")
    path = [dst]
    up = prev[dst]
    while up is not None:
        path.append(up)
        up = prev[up]
    return path[::-1]


def planned_heartbeats(topo, max_hops: int = SOURCE_ROUTE_MAX_HOPS, paths: Optional[bool] = None) -> list[HeartbeatPath]:
    """One heartbeat per switch link A-B, recorded at both ends: from a host
    h next to A (or the nearest host), to A, across to B and back to A
    (B records A->B, A records B->A), then home to h. A link with a host
    behind one end (leaf-spine, dual-plane, rails) is tested by itself; one
    between two switches without hosts (fat-tree aggregation-core) also
    depends on the switches between it and the host.

    With `paths` (default: the topology's failover.paths), also one path
    heartbeat per edge switch A, other edge switch B and neighbour N of A
    on a shortest A-B path: from a host at A through N along a shortest
    path to B and the same way back, home; it carries B's index, and A,
    hearing it back from N, records that the round trip to B through N
    works (a failure in either direction stops it)."""
    out: list[HeartbeatPath] = []
    done = set()
    hosts_at: dict[str, Any] = {}   # switch -> the first NIC attached to it
    for h in topo.hosts.values():
        for nic in h.nics.values():
            hosts_at.setdefault(nic.switch, nic)
    for sw in sorted(topo.switches):
        for port in sorted(topo.switches[sw].ports.values(), key=lambda p: p.number):
            a, b = sw, port.peer
            if b not in topo.switches or (b, a) in done:
                continue
            done.add((a, b))
            if a not in hosts_at and b in hosts_at:
                a, b = b, a
            home = a if a in hosts_at else min(hosts_at, key=lambda s: (len(_switch_path(topo, s, a)), s))
            nic = hosts_at[home]
            there = _switch_path(topo, home, a)
            ports = [_port_to(topo, x, y) for x, y in zip(there, there[1:])]
            ports += [_port_to(topo, a, b), _port_to(topo, b, a)]
            back = there[::-1]
            ports += [_port_to(topo, x, y) for x, y in zip(back, back[1:])]
            ports.append(nic.switch_port)
            if len(ports) > max_hops:
                raise SourceRouteError(f"the heartbeat of {a}-{b} needs {len(ports)} hops, more than {max_hops}")
            frame = heartbeat_frame(ports, src_mac=nic.mac, dst_mac=nic.gateway_mac, src_ip=nic.ip,
                                    dst_ip=nic.ip, seq=len(out))
            out.append(HeartbeatPath(nic.host, nic.iface, frame, [(a, b), (b, a)]))
    if paths is None:
        cfg = topo.features.get("failover")
        paths = bool(cfg and cfg.paths)
    if paths:
        out += _path_heartbeats(topo, hosts_at, max_hops)
    return out


def _path_heartbeats(topo, hosts_at, max_hops: int) -> list[HeartbeatPath]:
    edges = edge_switches(topo)
    out = []
    for a in edges:
        nic = hosts_at[a]
        for far, b in enumerate(edges):
            if b == a:
                continue
            try:
                direct = len(_switch_path(topo, a, b))
            except SourceRouteError:
                continue                     # another plane
            for n in sorted({p.peer for p in topo.switches[a].ports.values() if p.peer in topo.switches}):
                there = [a] + _switch_path(topo, n, b)
                if len(there) != direct:
                    continue                 # n is not on a shortest path to b
                back = there[::-1]
                ports = [_port_to(topo, x, y) for x, y in zip(there, there[1:])]
                ports += [_port_to(topo, x, y) for x, y in zip(back, back[1:])] + [nic.switch_port]
                if len(ports) > max_hops:
                    raise SourceRouteError(f"the path heartbeat {a}->{n}->{b} and back needs {len(ports)} hops, "
                                     f"more than {max_hops}")
                frame = heartbeat_frame(ports, src_mac=nic.mac, dst_mac=nic.gateway_mac, src_ip=nic.ip,
                                        dst_ip=nic.ip, seq=far, origin=far)
                out.append(HeartbeatPath(nic.host, nic.iface, frame, [], [(a, n, b)]))
    return out


class HeartbeatSender:
    """Raw sockets in the hosts' namespaces; send() one round."""

    def __init__(self, paths: list[HeartbeatPath]):
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


def _serve() -> None:
    """The heartbeat process of running_heartbeats: (topology, period_s)
    pickled on stdin, "ready" on stdout once its sockets are open, sends
    until SIGTERM."""
    topo, period_s = pickle.load(sys.stdin.buffer)
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    sender = HeartbeatSender(planned_heartbeats(topo))
    print("ready", flush=True)
    try:
        sender.run(period_s, None, stop=lambda: bool(stopping))
    finally:
        sender.close()


@contextlib.contextmanager
def running_heartbeats(topo, period_s: float):
    """Heartbeats on every link of a running network for as long as the block
    runs, from a process of their own: in the caller's process a pause of
    the interpreter (the controller reconciling, a garbage collection) longer
    than the failover timeout would silence every link at once, and the
    switches would rightly declare them all dead."""
    repo = Path(__file__).resolve().parents[2]
    proc = subprocess.Popen([sys.executable, "-c", "from features.failover.heartbeat import _serve; _serve()"],
                            cwd=repo, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert proc.stdin is not None and proc.stdout is not None     # both PIPE
    try:
        proc.stdin.write(pickle.dumps((topo, period_s)))
        proc.stdin.close()
        ready, _, _ = select.select([proc.stdout], [], [], 30.0)
        if not ready or proc.stdout.readline().strip() != b"ready":
            raise RuntimeError(f"the heartbeat process did not start (exit code {proc.poll()})")
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(5.0)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        proc.stdout.close()


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--period-ms", type=float, default=None,
                    help="default: the topology's failover.heartbeat_ms, else 20")
    ap.add_argument("--duration", type=float, default=None, help="seconds (default: until SIGTERM/SIGINT)")


def run_cli(args: argparse.Namespace, topo) -> int:
    """`fabric heartbeats --topology T`: heartbeats on every link of a running network."""
    cfg = topo.features.get("failover")
    period_ms = args.period_ms or (cfg.heartbeat_ms if cfg else 20.0)
    if period_ms <= 0:
        raise SystemExit("fabric heartbeats: --period-ms must be above 0")
    paths = planned_heartbeats(topo)
    sender = HeartbeatSender(paths)
    stopping = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stopping.append(True))
    covered = {link for p in paths for link in p.links}
    print(f"heartbeats: {len(paths)} links, {len(covered)} directions, every {period_ms:g} ms",
          flush=True)
    sender.run(period_ms / 1000, args.duration, stop=lambda: bool(stopping))
    sender.close()
    print(f"heartbeats: {sender.rounds} rounds sent ({sender.errors} sends refused)")
    return 0
