"""Path-aware connections: which path through the fabric a RoCEv2 flow
takes, from the topology's routes and a model of the data plane's ECMP hash,
and source ports chosen so that a peer pair's channels take disjoint paths
(Alibaba's path control: the switches' hash is a known function of the
5-tuple, so a host picks the UDP source port that lands where it wants).

The model (p4src/include/forwarding.p4, ECMP mode): a switch whose route to
the destination has several next hops hashes the flow key (source and
destination address, protocol, L4 ports: 13 bytes) with CRC16, multiplies
by its seed, takes control.forwarding.slot_of of that, and the group's slot
table (control.forwarding.assign_slots over the next hops sorted by port and
MAC, as the controller installs it on a switch with no history) names the
next hop. A flow on the topology's INT watchlist leaves its first switch
with INT inside and UDP destination port INT_UDP_PORT, which is what the
switches after it hash. The model holds while the load-balancing mode of
the groups is ECMP and the controller has not moved slots (a failure does);
the e2e test checks it against a live fabric's counters.
"""
from __future__ import annotations

import ipaddress
import struct
from collections import Counter
from dataclasses import dataclass
from typing import Sequence

from control.forwarding import assign_slots, crc16, ecmp_seed, slot_of
from control.topology import Nic, Route, Topology
from features.int_telemetry import IntConfig, WatchRule
from wire.int_telemetry_codec import INT_UDP_PORT
from wire.roce import ROCEV2_UDP_PORT
from wire.uet_codec import UET_PORT as UET_UDP_PORT

IP_PROTO_UDP = 17
SPORT_RANGE = range(0xC000, 0x10000)   # RoCEv2 source ports


def flow_hash(src_ip: str, dst_ip: str, protocol: int, sport: int, dport: int) -> int:
    """CRC16 of the flow key, as forwarding.p4's hash_flow reads it."""
    key = (ipaddress.IPv4Address(src_ip).packed + ipaddress.IPv4Address(dst_ip).packed
           + struct.pack("!BHH", protocol, sport, dport))
    return crc16(key)


@dataclass(frozen=True)
class Path:
    """The switches a flow crosses, and the port it leaves each by."""
    hops: tuple[tuple[str, int], ...]       # (switch, egress port)


class PathModel:
    """Routes of a topology, as the controller installs them with no failures."""

    def __init__(self, topology: Topology):
        self.topology = topology
        self._routes: dict[str, list[Route]] = topology.routes()
        self._seeds = {name: ecmp_seed(sw.device_id) for name, sw in topology.switches.items()}

    def _nic_of(self, ip: str) -> Nic:
        for nic in self.topology.nics:
            if nic.ip == ip:
                return nic
        raise ValueError(f"no host NIC has address {ip} in this topology")

    def path(self, src_ip: str, dst_ip: str, sport: int, dport: int = ROCEV2_UDP_PORT,
             protocol: int = IP_PROTO_UDP) -> Path:
        src, dst = self._nic_of(src_ip), self._nic_of(dst_ip)
        h = flow_hash(src_ip, dst_ip, protocol, sport, dport)
        switch = src.switch
        hops = []
        for i in range(len(self.topology.switches) + 1):
            if i == 1 and self._int_source(src_ip, dst_ip, protocol, sport, dport):
                h = flow_hash(src_ip, dst_ip, protocol, sport, INT_UDP_PORT)
            route = next((r for r in self._routes[switch] if r.prefix == dst.subnet), None)
            if route is None:
                raise ValueError(f"{switch} has no route to {dst_ip}")
            next_hops = sorted(set(route.next_hops), key=lambda x: (x.port, x.dst_mac))
            hop = next_hops[0] if len(next_hops) == 1 else \
                assign_slots(next_hops)[slot_of(h, self._seeds[switch])]
            hops.append((switch, hop.port))
            if switch == dst.switch:
                return Path(tuple(hops))
            port = self.topology.switches[switch].ports[hop.port]
            switch = port.peer
        raise ValueError(f"routes from {src_ip} to {dst_ip} loop")

    def _int_source(self, src_ip: str, dst_ip: str, protocol: int, sport: int, dport: int) -> bool:
        """Whether the first switch adds INT to every packet of this flow."""
        config = self.topology.features.get("int")
        if not isinstance(config, IntConfig) or protocol != IP_PROTO_UDP:
            return False

        def matches(rule: WatchRule) -> bool:
            return ((rule.src is None or ipaddress.IPv4Address(src_ip) in ipaddress.ip_network(rule.src))
                    and (rule.dst is None or ipaddress.IPv4Address(dst_ip) in ipaddress.ip_network(rule.dst))
                    and rule.protocol in (None, IP_PROTO_UDP)
                    and rule.src_ports[0] <= sport <= rule.src_ports[1]
                    and rule.dst_ports[0] <= dport <= rule.dst_ports[1])
        rule = next((r for r in config.watchlist if matches(r)), None)    # the first rule that matches decides
        return rule is not None and rule.sample == 1

    def choose_ports(self, src_ip: str, dst_ip: str, channels: int, start: int = SPORT_RANGE.start,
                     candidates: int = 512, dport: int = ROCEV2_UDP_PORT) -> list[int]:
        """Source ports for `channels` connections from src to dst, each on a
        path no other channel uses while there are unused ones (then spread
        evenly over the paths), the lowest fitting port first. `dport`: the
        flows' destination port (UET's 4793: a PDC's entropy values)."""
        if channels < 1:
            raise ValueError(f"channels must be >= 1, got {channels}")
        by_path: dict[Path, list[int]] = {}
        for sport in range(start, min(start + candidates, SPORT_RANGE.stop)):
            by_path.setdefault(self.path(src_ip, dst_ip, sport, dport), []).append(sport)
        use: Counter[Path] = Counter({p: 0 for p in by_path})
        chosen = []
        for _ in range(channels):
            path = min(by_path, key=lambda p: (use[p], by_path[p][use[p]] if use[p] < len(by_path[p]) else 1 << 20))
            if use[path] >= len(by_path[path]):
                raise ValueError(f"not enough source ports among {candidates} candidates for {channels} channels")
            chosen.append(by_path[path][use[path]])
            use[path] += 1
        return chosen

    def paths_between(self, src_ip: str, dst_ip: str, candidates: int = 512) -> set[Path]:
        """The distinct paths the candidate source ports reach."""
        return {self.path(src_ip, dst_ip, s) for s in range(SPORT_RANGE.start, SPORT_RANGE.start + candidates)}


def path_aware_entropies(model: PathModel, src_ip: str, count: int = 16):
    """A UET endpoint's `entropies_of` (peer) -> ports: `count` entropy values
    spread evenly over the paths to the peer (UDP 4793's hash), per peer."""
    cache: dict[str, tuple[int, ...]] = {}

    def entropies_of(peer: str) -> tuple[int, ...]:
        if peer not in cache:
            cache[peer] = tuple(model.choose_ports(src_ip, peer, count, dport=UET_UDP_PORT))
        return cache[peer]
    return entropies_of


def path_aware_sports(model: PathModel, addresses: Sequence[str], channels: int):
    """A Communicator's `sport_of` (rank, peer, channel) -> port: per pair,
    the channels on disjoint paths (computed once per pair)."""
    cache: dict[tuple[int, int], list[int]] = {}

    def sport_of(rank: int, peer: int, channel: int) -> int:
        if (rank, peer) not in cache:
            cache[(rank, peer)] = model.choose_ports(addresses[rank], addresses[peer], channels)
        return cache[(rank, peer)][channel]
    return sport_of
