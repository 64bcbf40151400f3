"""Topology files: loading, validation, and what follows from a topology
(port numbers, addresses, MACs, and shortest-path ECMP routes).

The file format is documented in topologies/README.md. Every error names the
file, the field and what is wrong, and is raised before anything is started.
"""
from __future__ import annotations

import ipaddress
import re
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

NAME_RE = re.compile(r"^[a-z][a-z0-9]{0,9}$")  # "<name>-eth<NN>" must fit IFNAMSIZ
LINK_FIELDS = {"a", "b", "bandwidth_mbps", "delay_ms", "loss_pct"}
NODE_FIELDS = {"name", "role"}
HOST_FIELDS = NODE_FIELDS
# Besides these, each feature's section (control/features.py validates it).
BASE_FIELDS = {"name", "description", "defaults", "switches", "hosts", "links"}
DEFAULT_LINK = {"bandwidth_mbps": 100.0, "delay_ms": 0.0, "loss_pct": 0.0}

# Switch n listens on P4Runtime 9559+n and Thrift 9090+n: below Linux's
# ephemeral range (32768+), so an outgoing connection never holds the port.
GRPC_PORT_BASE = 9559
THRIFT_PORT_BASE = 9090


class TopologyError(ValueError):
    """A topology file is invalid; the message names file, field and problem."""


@dataclass(frozen=True)
class LinkSpec:
    a: str
    b: str
    bandwidth_mbps: float
    delay_ms: float
    loss_pct: float


@dataclass
class Port:
    """One switch port: its number on the switch, the veth behind it and
    what is at the other end."""
    switch: str
    number: int
    iface: str
    mac: str
    peer: str
    peer_port: int | None  # None when the peer is a host
    link: LinkSpec


@dataclass
class Switch:
    name: str
    device_id: int
    role: str | None
    ports: dict[int, Port] = field(default_factory=dict)

    @property
    def grpc_addr(self) -> str:
        return f"127.0.0.1:{GRPC_PORT_BASE + self.device_id}"

    @property
    def thrift_port(self) -> int:
        return THRIFT_PORT_BASE + self.device_id


@dataclass
class Host:
    name: str
    index: int
    role: str | None
    ip: str
    prefix_len: int
    mac: str
    iface: str
    switch: str = ""
    switch_port: int = 0
    gateway_ip: str = ""
    gateway_mac: str = ""

    @property
    def subnet(self) -> str:
        return str(ipaddress.ip_network(f"{self.ip}/{self.prefix_len}", strict=False))


@dataclass(frozen=True)
class NextHop:
    port: int
    src_mac: str
    dst_mac: str
    peer: str = field(default="", compare=False)  # neighbour name, for humans


@dataclass(frozen=True)
class Route:
    prefix: str                       # e.g. "10.0.3.0/24"
    next_hops: tuple[NextHop, ...]    # more than one: an ECMP set
    host: str                         # the host this prefix belongs to


@dataclass
class Topology:
    name: str
    description: str
    source: str
    switches: dict[str, Switch]
    hosts: dict[str, Host]
    links: list[LinkSpec]
    features: dict[str, Any] = field(default_factory=dict)  # parsed feature sections, e.g. "ecn"

    def switch_neighbours(self, name: str) -> list[Port]:
        return [p for p in self.switches[name].ports.values() if p.peer in self.switches]

    def hops_between_switches(self) -> dict[str, dict[str, int]]:
        """All-pairs shortest hop count between switches (BFS per switch)."""
        dist: dict[str, dict[str, int]] = {}
        for src in self.switches:
            d = {src: 0}
            queue = deque([src])
            while queue:
                cur = queue.popleft()
                for port in self.switch_neighbours(cur):
                    if port.peer not in d:
                        d[port.peer] = d[cur] + 1
                        queue.append(port.peer)
            dist[src] = d
        return dist

    def routes(self) -> dict[str, list[Route]]:
        """Per switch, one route per host subnet, with every equal-cost next hop."""
        dist = self.hops_between_switches()
        table: dict[str, list[Route]] = {}
        for sw_name, sw in self.switches.items():
            routes = []
            for host in self.hosts.values():
                if host.switch == sw_name:
                    port = sw.ports[host.switch_port]
                    hops = (NextHop(port.number, port.mac, host.mac, host.name),)
                else:
                    target = dist[sw_name][host.switch]
                    hops = tuple(
                        NextHop(p.number, p.mac, self.switches[p.peer].ports[p.peer_port].mac, p.peer)
                        for p in self.switch_neighbours(sw_name)
                        if dist[p.peer].get(host.switch) == target - 1)
                routes.append(Route(host.subnet, hops, host.name))
            table[sw_name] = routes
        return table


def switch_port_mac(device_id: int, port: int) -> str:
    # 0a:... is a locally administered unicast address.
    return "0a:00:00:%02x:%02x:%02x" % (device_id >> 8, device_id & 0xFF, port)


def host_mac(index: int) -> str:
    return "0a:00:01:00:%02x:%02x" % (index >> 8, index & 0xFF)


def host_address(index: int) -> tuple[str, int, str]:
    """Host n lives alone in 10.0.n.0/24 at .1; its gateway is .254."""
    return f"10.0.{index}.1", 24, f"10.0.{index}.254"


# --------------------------------------------------------------------------
# Loading and validation

def load(path: str | Path) -> Topology:
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise TopologyError(f"{path}: cannot read topology file: {exc.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise TopologyError(f"{path}: not valid YAML: {exc}") from None
    return from_dict(data, source=str(path))


def from_dict(data: Any, source: str = "<topology>") -> Topology:
    from . import features  # feature modules import this module's types

    v = _Validator(source)
    feature_sections = features.sections()
    top_fields = BASE_FIELDS | set(feature_sections)
    if not isinstance(data, dict):
        v.fail("", f"expected a mapping with keys {sorted(top_fields)}, got {type(data).__name__}")
    v.no_unknown_keys("", data, top_fields)
    name = v.string("name", data.get("name"))
    description = data.get("description", "") or ""

    defaults = dict(DEFAULT_LINK)
    raw_defaults = data.get("defaults") or {}
    if not isinstance(raw_defaults, dict):
        v.fail("defaults", "expected a mapping")
    v.no_unknown_keys("defaults", raw_defaults, {"link"})
    raw_link_defaults = raw_defaults.get("link") or {}
    if not isinstance(raw_link_defaults, dict):
        v.fail("defaults.link", "expected a mapping")
    v.no_unknown_keys("defaults.link", raw_link_defaults, set(DEFAULT_LINK))
    for key, value in raw_link_defaults.items():
        defaults[key] = v.link_number(f"defaults.link.{key}", key, value)

    node_names: set[str] = set()
    switches: dict[str, Switch] = {}
    for i, raw in enumerate(v.list_of("switches", data.get("switches"), min_len=1)):
        where = f"switches[{i}]"
        sw_name, role = v.node(where, raw, NODE_FIELDS, node_names)
        switches[sw_name] = Switch(sw_name, device_id=len(switches) + 1, role=role)

    hosts: dict[str, Host] = {}
    for i, raw in enumerate(v.list_of("hosts", data.get("hosts"), min_len=0)):
        where = f"hosts[{i}]"
        h_name, role = v.node(where, raw, HOST_FIELDS, node_names)
        index = len(hosts) + 1
        if index > 254:
            v.fail(where, "at most 254 hosts are supported (10.0.<n>.0/24 per host)")
        ip, plen, gw = host_address(index)
        hosts[h_name] = Host(h_name, index, role, ip, plen, host_mac(index), f"{h_name}-eth0",
                             gateway_ip=gw)

    links: list[LinkSpec] = []
    for i, raw in enumerate(v.list_of("links", data.get("links"), min_len=1)):
        links.append(v.link(f"links[{i}]", raw, defaults, switches, hosts))

    _attach(v, switches, hosts, links)
    topo = Topology(name, str(description), source, switches, hosts, links)
    _check_connected(v, topo)
    for section, feature in feature_sections.items():
        if data.get(section) is not None:
            topo.features[section] = feature.parse_section(data[section], topo, v.fail)
    return topo


def _attach(v: "_Validator", switches, hosts, links) -> None:
    next_port = {s: 1 for s in switches}
    for i, link in enumerate(links):
        ends = []
        for end in (link.a, link.b):
            if end in switches:
                num = next_port[end]
                next_port[end] += 1
                if num > 99:
                    v.fail(f"links[{i}]", f"switch {end!r} has more than 99 ports")
                ends.append((end, num))
            else:
                host = hosts[end]
                if host.switch:
                    v.fail(f"links[{i}]", f"host {end!r} already has a link (to {host.switch!r}); a host has exactly one")
                ends.append((end, None))
        (a, pa), (b, pb) = ends
        for (me, mp), (peer, pp) in (((a, pa), (b, pb)), ((b, pb), (a, pa))):
            if mp is None:
                continue
            sw = switches[me]
            sw.ports[mp] = Port(me, mp, f"{me}-eth{mp}", switch_port_mac(sw.device_id, mp), peer, pp, link)
            if peer in hosts:
                host = hosts[peer]
                host.switch, host.switch_port = me, mp
                host.gateway_mac = sw.ports[mp].mac
    for name, host in hosts.items():
        if not host.switch:
            v.fail("links", f"host {name!r} has no link to a switch")


def _check_connected(v: "_Validator", topo: Topology) -> None:
    dist = topo.hops_between_switches()
    first = next(iter(topo.switches))
    unreachable = [s for s in topo.switches if s not in dist[first]]
    if unreachable:
        v.fail("links", f"switches {unreachable} are not connected to {first!r}: every host must reach every other")


class _Validator:
    def __init__(self, source: str):
        self.source = source

    def fail(self, where: str, what: str):
        location = f"{self.source}: {where}" if where else self.source
        raise TopologyError(f"{location}: {what}")

    def no_unknown_keys(self, where: str, mapping: dict, allowed: set[str]) -> None:
        unknown = sorted(set(map(str, mapping)) - allowed)
        if unknown:
            field_ = f"{where}.{unknown[0]}" if where else unknown[0]
            self.fail(field_, f"unknown field (allowed: {', '.join(sorted(allowed))})")

    def string(self, where: str, value: Any) -> str:
        if not isinstance(value, str) or not value.strip():
            self.fail(where, f"expected a non-empty string, got {value!r}")
        return value

    def list_of(self, where: str, value: Any, min_len: int) -> list:
        if value is None and min_len == 0:
            return []
        if not isinstance(value, list):
            self.fail(where, f"expected a list, got {type(value).__name__}")
        if len(value) < min_len:
            self.fail(where, f"needs at least {min_len} entr{'y' if min_len == 1 else 'ies'}")
        return value

    def node(self, where: str, raw: Any, allowed: set[str], seen: set[str]) -> tuple[str, str | None]:
        if isinstance(raw, str):
            raw = {"name": raw}
        if not isinstance(raw, dict):
            self.fail(where, f"expected a name or a mapping, got {raw!r}")
        self.no_unknown_keys(where, raw, allowed)
        name = raw.get("name")
        if not isinstance(name, str) or not NAME_RE.match(name):
            self.fail(f"{where}.name", f"{name!r} is not a valid node name "
                      "(lowercase letter, then up to 9 lowercase letters/digits)")
        if name in seen:
            self.fail(f"{where}.name", f"duplicate node name {name!r}")
        seen.add(name)
        role = raw.get("role")
        if role is not None and not isinstance(role, str):
            self.fail(f"{where}.role", f"expected a string, got {role!r}")
        return name, role

    def link_number(self, where: str, key: str, value: Any) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            self.fail(where, f"expected a number, got {value!r}")
        value = float(value)
        if key == "bandwidth_mbps" and not value > 0:
            self.fail(where, f"bandwidth must be > 0 Mbit/s, got {value:g}")
        if key == "delay_ms" and not 0 <= value <= 10_000:
            self.fail(where, f"delay must be within 0..10000 ms, got {value:g}")
        if key == "loss_pct" and not 0 <= value <= 100:
            self.fail(where, f"loss must be a percentage within 0..100, got {value:g}")
        return value

    def link(self, where: str, raw: Any, defaults: dict, switches: dict, hosts: dict) -> LinkSpec:
        if isinstance(raw, list):
            if len(raw) != 2:
                self.fail(where, f"a short link is [node, node], got {raw!r}")
            raw = {"a": raw[0], "b": raw[1]}
        if not isinstance(raw, dict):
            self.fail(where, f"expected [a, b] or a mapping with a, b, got {raw!r}")
        self.no_unknown_keys(where, raw, LINK_FIELDS)
        ends = []
        for key in ("a", "b"):
            end = raw.get(key)
            if end is None:
                self.fail(f"{where}.{key}", "missing link end")
            if end not in switches and end not in hosts:
                self.fail(f"{where}.{key}", f"unknown node {end!r}")
            ends.append(end)
        a, b = ends
        if a == b:
            self.fail(where, f"link from {a!r} to itself")
        if a in hosts and b in hosts:
            self.fail(where, f"link between two hosts ({a!r}, {b!r}): hosts attach to switches")
        values = {k: self.link_number(f"{where}.{k}", k, raw[k]) if k in raw else defaults[k]
                  for k in DEFAULT_LINK}
        return LinkSpec(a, b, **values)
