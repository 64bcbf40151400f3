"""Topology files: loading, validation, and what follows from a topology
(port numbers, addresses, MACs, shortest-path ECMP routes on the switches,
and each host's own routing when it has several NICs).

The file format is documented in topologies/README.md. Every error names the
file, the field and what is wrong, and is raised before anything is started.

Hosts may be multi-homed: a host has one or more NICs, each with its own
link, address, MAC and gateway. A NIC (and a switch) may carry a `plane`
label (disjoint copies of the fabric: switches of different planes share no
link, and each plane routes only its own NICs' subnets) and a `rail` label
(rail-optimised fabrics: NIC i of every server on rail i's leaf).
"""
from __future__ import annotations

import ipaddress
import re
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, NoReturn, Optional, Sequence

import yaml

from control.feature import HostSection, check_sections
from control.link_defaults import DEFAULT_LINK

if TYPE_CHECKING:
    from control.feature import Feature

NAME_RE = re.compile(r"^[a-z][a-z0-9]{0,9}$")  # "<name>-eth<NN>" must fit IFNAMSIZ
# Names a node may not take: the Kathara export (fabric/kathara.py) makes a
# device or a lab folder of each (the controller's device, the lab's CA,
# Kathara's shared folder), and a node of that name would merge with it.
RESERVED_NAMES = {"controller": "the Kathara lab's controller device", "pki": "the Kathara lab's CA folder",
                  "shared": "Kathara's shared folder"}
NIC_NAME_RE = re.compile(r"^[a-z][a-z0-9]*$")
PLANE_RE = re.compile(r"^[a-z0-9]{1,8}$")
IFNAME_MAX = 15  # Linux IFNAMSIZ (16) less the terminating NUL
LINK_FIELDS = {"a", "b", "bandwidth_mbps", "delay_ms", "loss_pct"}
NODE_FIELDS = {"name", "role"}
LABEL_FIELDS = {"plane", "rail"}
SWITCH_FIELDS = NODE_FIELDS | LABEL_FIELDS | {"management_ip", "group"}
HOST_FIELDS = NODE_FIELDS | {"nics"}
NIC_FIELDS = {"name"} | LABEL_FIELDS
DEFAULT_NIC = "eth0"  # the one NIC of a host that declares none
MAX_HOSTS = 254       # 10.<nic>.<host>.0/24
MAX_NICS = 256        # per host: 10.<nic>.<host>.0/24
# Multi-homed hosts: NIC i's policy-routing table and rule priority.
HOST_TABLE_BASE = 100
HOST_RULE_PRIORITY_BASE = 1000
# Besides these, each feature's section (control/feature.py validates it).
BASE_FIELDS = {"name", "description", "defaults", "switches", "hosts", "links"}

TOPOLOGIES = Path(__file__).resolve().parent.parent / "topologies"

# Switch n listens on P4Runtime 9559+n and Thrift 9090+n: below Linux's
# ephemeral range (32768+), so an outgoing connection never holds the port.
GRPC_PORT_BASE = 9559
THRIFT_PORT_BASE = 9090


class TopologyError(ValueError):
    """A topology file is invalid; the message names file, field and problem."""


@dataclass(frozen=True)
class LinkSpec:
    a: str                  # node names (a host's name, not host.nic)
    b: str
    bandwidth_mbps: float
    delay_ms: float
    loss_pct: float
    a_nic: str = ""         # the NIC, when that end is a host
    b_nic: str = ""

    def nic_of(self, node: str) -> str:
        return self.a_nic if node == self.a else self.b_nic


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
    peer_nic: str = ""     # the host's NIC when the peer is a host

    @property
    def peer_iface(self) -> str:
        """The interface at the other end when the peer is a switch ("" for
        a host: its NIC is in the host's namespace)."""
        return switch_iface(self.peer, self.peer_port) if self.peer_port is not None else ""


def switch_iface(switch: str, port: int) -> str:
    """The veth behind a switch's port."""
    return f"{switch}-eth{port}"


@dataclass
class Switch:
    name: str
    device_id: int
    role: str | None
    ports: dict[int, Port] = field(default_factory=dict)
    plane: str | None = None
    rail: int | None = None
    management_ip: str | None = None     # a switch that runs apart (a Kathara lab): where it listens
    group: int | None = None             # its Dragonfly group (non-minimal routing's intermediates)

    @property
    def grpc_addr(self) -> str:
        """Its P4Runtime server: loopback, port 9559 + device id; on its
        management address, port 9559, when it has one."""
        if self.management_ip is not None:
            return f"{self.management_ip}:{GRPC_PORT_BASE}"
        return f"127.0.0.1:{GRPC_PORT_BASE + self.device_id}"

    @property
    def thrift_host(self) -> str:
        return self.management_ip or "127.0.0.1"

    @property
    def thrift_port(self) -> int:
        return THRIFT_PORT_BASE + self.device_id

    @property
    def address(self) -> str:
        """The switch's own IPv4 address: the source of what it originates
        (telemetry reports, partial aggregates), never routed to."""
        return switch_address(self.device_id)


SWITCH_ADDRESS_NET = ipaddress.ip_network("10.255.0.0/16")   # 10.255.<device id / 256>.<device id % 256>


def switch_address(device_id: int) -> str:
    return str(SWITCH_ADDRESS_NET[device_id])


@dataclass
class Nic:
    """One network interface of a host: its own link, subnet, MAC and gateway."""
    host: str
    name: str               # e.g. eth0; the interface in the host's namespace is `iface`
    index: int              # position in the host's list, from 0: 10.<index>.<host>.1
    ip: str
    prefix_len: int
    mac: str
    iface: str              # "<host>-<name>"
    gateway_ip: str
    plane: str | None = None  # from the file, else from the switch it is plugged into
    rail: int | None = None
    switch: str = ""
    switch_port: int = 0
    gateway_mac: str = ""
    label: str = ""         # how people see it: the host name for a one-NIC host, else host.nic

    @property
    def id(self) -> str:
        return f"{self.host}.{self.name}"

    @property
    def subnet(self) -> str:
        return str(ipaddress.ip_network(f"{self.ip}/{self.prefix_len}", strict=False))


@dataclass
class Host:
    """A host (a network namespace) and its NICs, in file order. The
    attributes of a one-NIC host of old (ip, mac, iface, switch, gateway...)
    are those of its first NIC."""
    name: str
    index: int
    role: str | None
    nics: dict[str, Nic] = field(default_factory=dict)

    @property
    def primary(self) -> Nic:
        return next(iter(self.nics.values()))

    @property
    def multi_homed(self) -> bool:
        return len(self.nics) > 1

    ip = property(lambda self: self.primary.ip)
    prefix_len = property(lambda self: self.primary.prefix_len)
    mac = property(lambda self: self.primary.mac)
    iface = property(lambda self: self.primary.iface)
    switch = property(lambda self: self.primary.switch)
    switch_port = property(lambda self: self.primary.switch_port)
    gateway_ip = property(lambda self: self.primary.gateway_ip)
    gateway_mac = property(lambda self: self.primary.gateway_mac)
    subnet = property(lambda self: self.primary.subnet)


@dataclass(frozen=True)
class Failures:
    """Links (unordered switch pairs) and switches routes must avoid."""
    links: frozenset = frozenset()      # of frozenset({a, b})
    switches: frozenset = frozenset()

    def cuts(self, switch: str, port: "Port") -> bool:
        return (switch in self.switches or port.peer in self.switches
                or frozenset((switch, port.peer)) in self.links)

    def __bool__(self) -> bool:
        return bool(self.links or self.switches)

    def __str__(self) -> str:
        parts = [f"link {'-'.join(sorted(link))}" for link in sorted(self.links, key=sorted)]
        parts += [f"switch {s}" for s in sorted(self.switches)]
        return ", ".join(parts) or "nothing"


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
    nic: str = ""                     # and its NIC


@dataclass(frozen=True)
class HostRoute:
    """One route in a host's namespace: `ip route add <prefix> via <via> dev <dev> [table <table>]`."""
    prefix: str                       # "default" or a subnet
    via: str
    dev: str
    table: int | None = None          # None: the main table


@dataclass(frozen=True)
class HostRule:
    """A policy rule: `ip rule add from <source> table <table> priority <priority>`."""
    source: str
    table: int
    priority: int


@dataclass
class Topology:
    name: str
    description: str
    source: str
    switches: dict[str, Switch]
    hosts: dict[str, Host]
    links: list[LinkSpec]
    features: dict[str, Any] = field(default_factory=dict)  # parsed sections: features' ("ecn"), host sections'
    known_features: tuple = ()   # the Features it was loaded with (control/feature.py): what a controller programs
    overlays: tuple[str, ...] = ()   # overlay files applied over `source`, in order (load(..., overlays=))

    # -- NICs, planes, rails ------------------------------------------------

    @property
    def nics(self) -> list[Nic]:
        """Every NIC, hosts in file order, each host's NICs in its order."""
        return [nic for host in self.hosts.values() for nic in host.nics.values()]

    def nic(self, ref: str) -> Nic:
        """A NIC by "host.nic", or a one-NIC host's NIC by the host's name."""
        host, _, nic = ref.partition(".")
        if host not in self.hosts:
            raise KeyError(f"no host {host!r}")
        if not nic:
            if self.hosts[host].multi_homed:
                raise KeyError(f"{host} has several NICs ({', '.join(self.hosts[host].nics)}): say which")
            return self.hosts[host].primary
        if nic not in self.hosts[host].nics:
            raise KeyError(f"{host} has no NIC {nic!r} (NICs: {', '.join(self.hosts[host].nics)})")
        return self.hosts[host].nics[nic]

    def access_link(self, nic: "Nic | Host") -> LinkSpec:
        """The link between a NIC (a host: its first) and its switch."""
        return self.switches[nic.switch].ports[nic.switch_port].link

    def link_nic(self, link: LinkSpec, node: str) -> Nic:
        """The NIC of host `node` that `link` plugs in."""
        host = self.hosts[node]
        return host.nics.get(link.nic_of(node)) or host.primary

    @property
    def multi_homed(self) -> bool:
        return any(h.multi_homed for h in self.hosts.values())

    @property
    def planes(self) -> list[str]:
        """Plane labels in order of first appearance among the switches ([] if none)."""
        return list(dict.fromkeys(s.plane for s in self.switches.values() if s.plane is not None))

    @property
    def rails(self) -> list[int]:
        """Rail numbers of the NICs, sorted ([] if none)."""
        return sorted({n.rail for n in self.nics if n.rail is not None})

    def reachable(self, a: Nic, b: Nic) -> bool:
        """Whether the fabric connects NIC a's switch to NIC b's (false across planes)."""
        return b.switch in self.hops_between_switches()[a.switch]

    def nic_pairs(self) -> list[tuple[Nic, Nic, bool]]:
        """Every ordered pair of NICs on different hosts, and whether the
        fabric should carry traffic between them (the connectivity check)."""
        dist = self.hops_between_switches()
        return [(a, b, b.switch in dist[a.switch]) for a in self.nics for b in self.nics if a.host != b.host]

    # -- paths ----------------------------------------------------------------

    def switch_neighbours(self, name: str, failed: "Failures | None" = None) -> list[Port]:
        """The ports of `name` that lead to a switch (minus failed links and switches)."""
        return [p for p in self.switches[name].ports.values()
                if p.peer in self.switches and (failed is None or not failed.cuts(name, p))]

    def hops_from(self, sources: Iterable[str], failed: "Failures | None" = None) -> dict[str, int]:
        """Each switch's hop count from the nearest of `sources` (BFS); a
        switch missing from the result is not reachable from them."""
        dist = dict.fromkeys(sources, 0)
        queue = deque(dist)
        while queue:
            cur = queue.popleft()
            for port in self.switch_neighbours(cur, failed):
                if port.peer not in dist:
                    dist[port.peer] = dist[cur] + 1
                    queue.append(port.peer)
        return dist

    def hops_between_switches(self, failed: "Failures | None" = None) -> dict[str, dict[str, int]]:
        """All-pairs shortest hop count between switches (BFS per switch);
        a switch missing from dist[a] is not reachable from a (another plane,
        or cut off by `failed`)."""
        return {src: self.hops_from([src], failed) for src in self.switches}

    def next_hops_nearer(self, switch: str, dist: dict[str, int], failed: "Failures | None" = None
                         ) -> tuple[NextHop, ...]:
        """The next hops of `switch` to neighbours one hop nearer than it by
        `dist` (hop counts to a target): every equal-cost way toward it."""
        here = dist[switch]
        return tuple(NextHop(p.number, p.mac, self.switches[p.peer].ports[p.peer_port].mac, p.peer)
                     for p in self.switch_neighbours(switch, failed)
                     if p.peer_port is not None and dist.get(p.peer) == here - 1)

    def tiers(self) -> dict[str, int]:
        """Each switch's tier: its hop count from the nearest switch a host
        plugs into (leaves and edge switches 0, spines and aggregation 1,
        cores 2). A packet that arrives from a higher tier and leaves to a
        higher tier turned back up: a bounce, off the up-down routes."""
        edge = {nic.switch for nic in self.nics}
        return self.hops_from([name for name in self.switches if name in edge])

    def routes(self, failed: "Failures | None" = None) -> dict[str, list[Route]]:
        """Per switch, one route per NIC subnet it can reach, with every
        equal-cost next hop. A switch has no route to a NIC on another plane,
        nor (with `failed`) around failed links and switches."""
        dist = self.hops_between_switches(failed)
        table: dict[str, list[Route]] = {}
        for sw_name, sw in self.switches.items():
            routes = []
            for nic in self.nics:
                if failed is not None and (sw_name in failed.switches or nic.switch in failed.switches):
                    continue
                if nic.switch == sw_name:
                    port = sw.ports[nic.switch_port]
                    hops: tuple[NextHop, ...] = (NextHop(port.number, port.mac, nic.mac, nic.label),)
                elif nic.switch in dist[sw_name]:
                    hops = self.next_hops_nearer(sw_name, dist[nic.switch], failed)
                else:
                    continue
                routes.append(Route(nic.subnet, hops, nic.host, nic.name))
            table[sw_name] = routes
        return table

    def host_routing(self, name: str) -> tuple[list[HostRoute], list[HostRule]]:
        """What host `name` installs besides its addresses and gateway ARP entries.

        One NIC: a default route via its gateway (no policy rules).
        Several NICs:
          - per NIC i, table HOST_TABLE_BASE+i holds `default via <gateway i>`
            and a rule sends everything *from* NIC i's address there: a
            socket bound to an address (ping -I, NCCL binding a NIC) always
            leaves through that NIC, whatever the destination;
          - the main table (unbound sockets) has one route per other host's
            NIC subnet through the local NIC closest to it (fewest switch hops
            between the two NICs' switches; the first NIC on ties): on a
            rail-optimised fabric the NIC on the destination's rail, on a
            multi-plane fabric the NIC on the destination's plane. Subnets no
            local NIC reaches get no route; there is no main default route.
        """
        host = self.hosts[name]
        if not host.multi_homed:
            nic = host.primary
            return [HostRoute("default", nic.gateway_ip, nic.iface)], []
        dist = self.hops_between_switches()
        routes: list[HostRoute] = []
        rules: list[HostRule] = []
        for nic in host.nics.values():
            table = HOST_TABLE_BASE + nic.index
            routes.append(HostRoute("default", nic.gateway_ip, nic.iface, table))
            rules.append(HostRule(nic.ip, table, HOST_RULE_PRIORITY_BASE + nic.index))
        for dest in self.nics:
            if dest.host == name:
                continue
            candidates = [(dist[n.switch][dest.switch], n.index, n) for n in host.nics.values()
                          if dest.switch in dist[n.switch]]
            if candidates:
                nic = min(candidates, key=lambda c: c[:2])[2]
                routes.append(HostRoute(dest.subnet, nic.gateway_ip, nic.iface))
        return routes, rules


def switch_port_mac(device_id: int, port: int) -> str:
    # 0a:... is a locally administered unicast address.
    return "0a:00:00:%02x:%02x:%02x" % (device_id >> 8, device_id & 0xFF, port)


def host_mac(index: int, nic: int = 0) -> str:
    """NIC `nic` (from 0) of host `index`: 0a:00:01:<nic>:<index>."""
    return "0a:00:01:%02x:%02x:%02x" % (nic, index >> 8, index & 0xFF)


def host_address(index: int, nic: int = 0) -> tuple[str, int, str]:
    """NIC i of host n lives alone in 10.i.n.0/24 at .1; its gateway is .254.
    (A one-NIC host: 10.0.n.1/24, as it always was.)"""
    return f"10.{nic}.{index}.1", 24, f"10.{nic}.{index}.254"


# --------------------------------------------------------------------------
# Loading and validation

def resolve(arg: str | Path) -> Path:
    """A topology name (a file in topologies/) or a path."""
    path = Path(arg)
    if path.suffix in (".yaml", ".yml") or path.exists():
        return path
    candidate = TOPOLOGIES / f"{arg}.yaml"
    if not candidate.exists():
        names = sorted(p.stem for p in TOPOLOGIES.glob("*.yaml"))
        raise TopologyError(f"no topology named {arg!r} (available: {', '.join(names)}; or give a path)")
    return candidate


def _read_yaml(path: Path, what: str) -> Any:
    try:
        text = path.read_text()
    except OSError as exc:
        raise TopologyError(f"{path}: cannot read {what}: {exc.strerror}") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise TopologyError(f"{path}: not valid YAML: {exc}") from None


def load(path: str | Path, features: Sequence["Feature"] = (),
         overlays: Sequence[str | Path] = (), sections: Sequence[HostSection] = ()) -> Topology:
    """Load and validate a topology file (a name in topologies/ or a path),
    its feature sections parsed by `features` (features.FEATURES for all)
    and its host sections by `sections` (features.SECTIONS; a section
    neither knows is an error), with `overlays` (files
    of feature sections, `fabric tune --out` writes one) applied over it in
    order: see apply_overlays. The result is validated whole, as a file
    would be: a bad overlay is an error naming the overlay file and the
    field, and nothing of it is applied."""
    path = resolve(path)
    data = _read_yaml(path, "topology file")
    data, sources = apply_overlays(data, overlays, features, sections)
    return from_dict(data, source=str(path), features=features, section_sources=sources,
                     overlays=tuple(str(o) for o in overlays), sections=sections)


def read_overlay(path: str | Path, features: Sequence["Feature"] = (),
                 host_sections: Sequence[HostSection] = ()) -> dict[str, Any]:
    """An overlay file: a mapping of feature sections (`lossless:`, `ecn:`,
    ...) and nothing else; a section set to null removes the topology's.
    The sections' contents are checked when the overlay is applied (by the
    features, against the topology)."""
    path = Path(path)
    data = _read_yaml(path, "overlay")
    v = _Validator(f"{path} (overlay)")
    sections = set(check_sections(features, host_sections))
    if not isinstance(data, dict) or not data:
        v.fail("", f"expected a mapping of feature sections ({', '.join(sorted(sections))}), got "
                   f"{type(data).__name__ if data is not None else 'nothing'}")
    for key in data:
        if key in BASE_FIELDS:
            v.fail(str(key), "an overlay sets feature sections only, not the topology's base fields "
                             f"({', '.join(sorted(BASE_FIELDS))})")
        if key not in sections:
            v.fail(str(key), f"unknown section (an overlay sets feature sections: {', '.join(sorted(sections))})")
    return data


def apply_overlays(data: Any, overlays: Sequence[str | Path], features: Sequence["Feature"] = (),
                   sections: Sequence[HostSection] = ()) -> tuple[Any, dict[str, str]]:
    """A topology's mapping with `overlays` applied in order, section by
    section: an overlay's section replaces the topology's whole (or adds
    it); null removes it. Returns the new mapping (the given one is not
    changed) and {section: the overlay file it came from}, for from_dict's
    errors. Nothing is validated here beyond the overlays' own shape."""
    if not overlays:
        return data, {}
    merged = dict(data) if isinstance(data, dict) else data
    sources: dict[str, str] = {}
    for overlay in overlays:
        for section, value in read_overlay(overlay, features, sections).items():
            if not isinstance(merged, dict):
                break                           # from_dict names what is wrong with the topology itself
            if value is None:
                merged.pop(section, None)
                sources.pop(section, None)
            else:
                merged[section] = value
                sources[section] = str(overlay)
    return merged, sources


def from_dict(data: Any, source: str = "<topology>", features: Sequence["Feature"] = (), *,
              section_sources: Optional[dict[str, str]] = None, overlays: tuple[str, ...] = (),
              sections: Sequence[HostSection] = ()) -> Topology:
    """Validate a topology's mapping, its feature sections parsed by
    `features` and its host sections by `sections`. `section_sources`
    names, for a section an overlay gave, the overlay file: its errors name
    that file (as `<overlay> (overlay on <source>): <field>: ...`)."""
    v = _Validator(source)
    feature_sections = check_sections(features, sections)
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
        sw_name, role = v.node(where, raw, SWITCH_FIELDS, node_names)
        plane, rail = v.labels(where, raw)
        switches[sw_name] = Switch(sw_name, device_id=len(switches) + 1, role=role, plane=plane, rail=rail,
                                   management_ip=v.management_ip(where, raw), group=v.group(where, raw))
    _check_planes_everywhere(v, switches)

    hosts: dict[str, Host] = {}
    for i, raw in enumerate(v.list_of("hosts", data.get("hosts"), min_len=0)):
        where = f"hosts[{i}]"
        h_name, role = v.node(where, raw, HOST_FIELDS, node_names)
        index = len(hosts) + 1
        if index > MAX_HOSTS:
            v.fail(where, f"at most {MAX_HOSTS} hosts are supported (10.<nic>.<n>.0/24 per host NIC)")
        hosts[h_name] = v.host(where, raw, h_name, index, role)

    links: list[LinkSpec] = []
    for i, raw in enumerate(v.list_of("links", data.get("links"), min_len=1)):
        links.append(v.link(f"links[{i}]", raw, defaults, switches, hosts))

    _attach(v, switches, hosts, links)
    topo = Topology(name, str(description), source, switches, hosts, links, known_features=tuple(features),
                    overlays=overlays)
    _check_connected(v, topo)
    for section, feature in feature_sections.items():
        if data.get(section) is not None:
            given_by = (section_sources or {}).get(section)
            fail = _Validator(f"{given_by} (overlay on {source})").fail if given_by else v.fail
            topo.features[section] = feature.parse_section(data[section], topo, fail)
    return topo


def _check_planes_everywhere(v: "_Validator", switches: dict[str, Switch]) -> None:
    """Planes partition the fabric: if one switch is on a plane, all are."""
    planed = next((sw for sw in switches.values() if sw.plane is not None), None)
    if planed is None:
        return
    for i, sw in enumerate(switches.values()):
        if sw.plane is None:
            v.fail(f"switches[{i}].plane", f"missing: {planed.name!r} is on plane {planed.plane!r}, so every "
                   "switch must be on a plane (planes partition the fabric)")


def _attach(v: "_Validator", switches: dict[str, Switch], hosts: dict[str, Host], links: list[LinkSpec]) -> None:
    next_port = {s: 1 for s in switches}
    for i, link in enumerate(links):
        where = f"links[{i}]"
        if link.a in switches and link.b in switches:
            plane_a, plane_b = switches[link.a].plane, switches[link.b].plane
            if plane_a != plane_b:
                v.fail(where, f"{link.a!r} (plane {plane_a}) and {link.b!r} (plane {plane_b}) are on different "
                       "planes: planes share no links")
        ends: list[tuple[str, Optional[int]]] = []
        for end in (link.a, link.b):
            if end in switches:
                num = next_port[end]
                next_port[end] += 1
                if num > 99:
                    v.fail(where, f"switch {end!r} has more than 99 ports")
                iface = switch_iface(end, num)
                if len(iface) > IFNAME_MAX:
                    v.fail(where, f"switch {end!r} port {num}: interface name {iface!r} is {len(iface)} characters, "
                           f"Linux allows at most {IFNAME_MAX} (IFNAMSIZ): shorten the switch name")
                ends.append((end, num))
            else:
                host = hosts[end]
                nic = host.nics[link.nic_of(end)]
                if nic.switch:
                    if not host.multi_homed:
                        v.fail(where, f"host {end!r} already has a link (to {nic.switch!r}); a host has exactly one "
                               "per NIC (a multi-homed host lists its NICs: hosts[].nics)")
                    v.fail(where, f"NIC {nic.id} already has a link (to {nic.switch!r}); a NIC has exactly one")
                ends.append((end, None))
        (a, pa), (b, pb) = ends
        for (me, mp), (peer, pp), peer_key in (((a, pa), (b, pb), "b"), ((b, pb), (a, pa), "a")):
            if mp is None:
                continue
            sw = switches[me]
            peer_nic = link.nic_of(peer) if peer in hosts else ""
            sw.ports[mp] = Port(me, mp, switch_iface(me, mp), switch_port_mac(sw.device_id, mp), peer, pp, link,
                                peer_nic)
            if peer in hosts:
                nic = hosts[peer].nics[peer_nic]
                nic.switch, nic.switch_port, nic.gateway_mac = me, mp, sw.ports[mp].mac
                _check_nic_labels(v, f"{where}.{peer_key}", nic, sw)
    for name, host in hosts.items():
        for nic in host.nics.values():
            if not nic.switch:
                if not host.multi_homed:
                    v.fail("links", f"host {name!r} has no link to a switch")
                v.fail("links", f"NIC {nic.id} has no link to a switch")


def _check_nic_labels(v: "_Validator", where: str, nic: Nic, sw: Switch) -> None:
    """A NIC's plane/rail, when the file gives one, is its switch's; when it
    does not, the NIC takes the switch's."""
    for label in ("plane", "rail"):
        mine, theirs = getattr(nic, label), getattr(sw, label)
        if mine is None:
            setattr(nic, label, theirs)
        elif theirs is None:
            v.fail(where, f"NIC {nic.id} is on {label} {mine} but {sw.name!r} is on no {label} "
                   f"(give the switch `{label}: {mine}`, or the NIC none)")
        elif mine != theirs:
            v.fail(where, f"NIC {nic.id} is on {label} {mine} but is linked to {sw.name!r}, "
                   f"which is on {label} {theirs}")


def _check_connected(v: "_Validator", topo: Topology) -> None:
    """Every switch reaches every other; on a multi-plane fabric, every
    switch reaches every other of its plane (and, by the link rule, none else)."""
    dist = topo.hops_between_switches()
    planes: list[Optional[str]] = list(topo.planes) or [None]
    for plane in planes:
        members = [s for s in topo.switches.values() if s.plane == plane]
        first = members[0].name
        unreachable = [s.name for s in members if s.name not in dist[first]]
        if unreachable and plane is None:
            v.fail("links", f"switches {unreachable} are not connected to {first!r}: every host must reach every other")
        if unreachable:
            v.fail("links", f"plane {plane}: switches {unreachable} are not connected to {first!r}: every NIC on a "
                   "plane must reach every other on it")


class _Validator:
    def __init__(self, source: str):
        self.source = source

    def fail(self, where: str, what: str) -> NoReturn:
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
        if name in RESERVED_NAMES:
            self.fail(f"{where}.name", f"{name!r} is reserved ({RESERVED_NAMES[name]}): choose another name")
        if name in seen:
            self.fail(f"{where}.name", f"duplicate node name {name!r}")
        seen.add(name)
        role = raw.get("role")
        if role is not None and not isinstance(role, str):
            self.fail(f"{where}.role", f"expected a string, got {role!r}")
        return name, role

    def management_ip(self, where: str, raw: Any) -> str | None:
        value = raw.get("management_ip") if isinstance(raw, dict) else None
        if value is None:
            return None
        try:
            return str(ipaddress.IPv4Address(value))
        except (ipaddress.AddressValueError, ValueError):
            self.fail(f"{where}.management_ip", f"{value!r} is not an IPv4 address")

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
        ends, nics = [], []
        for key in ("a", "b"):
            end = raw.get(key)
            if end is None:
                self.fail(f"{where}.{key}", "missing link end")
            node, nic = self.link_end(f"{where}.{key}", end, switches, hosts)
            ends.append(node)
            nics.append(nic)
        a, b = ends
        if a == b:
            self.fail(where, f"link from {a!r} to itself")
        if a in hosts and b in hosts:
            self.fail(where, f"link between two hosts ({a!r}, {b!r}): hosts attach to switches")
        values = {k: self.link_number(f"{where}.{k}", k, raw[k]) if k in raw else defaults[k]
                  for k in DEFAULT_LINK}
        return LinkSpec(a, b, **values, a_nic=nics[0], b_nic=nics[1])

    def link_end(self, where: str, end: Any, switches: dict, hosts: dict) -> tuple[str, str]:
        """A link end: a switch, a one-NIC host, or host.nic -> (node, NIC name or "")."""
        if isinstance(end, str) and end in switches:
            return end, ""
        if isinstance(end, str) and end in hosts:
            host = hosts[end]
            if host.multi_homed:
                self.fail(where, f"host {end!r} has {len(host.nics)} NICs ({', '.join(host.nics)}): name one, "
                          f"e.g. {end}.{host.primary.name}")
            return end, host.primary.name
        if isinstance(end, str) and "." in end:
            node, nic = end.split(".", 1)
            if node in switches:
                self.fail(where, f"{end!r}: {node!r} is a switch; only a host end names a NIC (host.nic)")
            if node in hosts:
                if nic not in hosts[node].nics:
                    self.fail(where, f"unknown NIC {nic!r} of host {node!r} (NICs: {', '.join(hosts[node].nics)})")
                return node, nic
        self.fail(where, f"unknown node {end!r}")
        raise AssertionError("unreachable")

    def group(self, where: str, raw: Any) -> int | None:
        """A switch's optional Dragonfly group, an integer >= 1."""
        group = raw.get("group") if isinstance(raw, dict) else None
        if group is not None and (isinstance(group, bool) or not isinstance(group, int) or group < 1):
            self.fail(f"{where}.group", f"expected a group number (an integer >= 1), got {group!r}")
        return group

    def labels(self, where: str, raw: Any) -> tuple[str | None, int | None]:
        """The optional plane and rail of a switch or NIC mapping."""
        if not isinstance(raw, dict):
            return None, None
        plane, rail = raw.get("plane"), raw.get("rail")
        if plane is not None:
            if isinstance(plane, int) and not isinstance(plane, bool) and plane >= 0:
                plane = str(plane)
            if not isinstance(plane, str) or not PLANE_RE.match(plane):
                self.fail(f"{where}.plane", f"expected a plane label (1 to 8 lowercase letters/digits), got {plane!r}")
        if rail is not None and (isinstance(rail, bool) or not isinstance(rail, int) or rail < 0):
            self.fail(f"{where}.rail", f"expected a rail number (an integer >= 0), got {rail!r}")
        return plane, rail

    def host(self, where: str, raw: Any, name: str, index: int, role: str | None) -> Host:
        """A host and its NICs (one, eth0, when the file lists none)."""
        raw_nics = raw.get("nics") if isinstance(raw, dict) else None
        items = [DEFAULT_NIC] if raw_nics is None else self.list_of(f"{where}.nics", raw_nics, min_len=1)
        if len(items) > MAX_NICS:
            self.fail(f"{where}.nics", f"at most {MAX_NICS} NICs per host (10.<nic>.<host>.0/24), got {len(items)}")
        host = Host(name, index, role)
        for j, item in enumerate(items):
            nwhere = f"{where}.nics[{j}]"
            if isinstance(item, str):
                item = {"name": item}
            if not isinstance(item, dict):
                self.fail(nwhere, f"expected a NIC name or a mapping {{name, plane, rail}}, got {item!r}")
            self.no_unknown_keys(nwhere, item, NIC_FIELDS)
            nic_name = item.get("name")
            if not isinstance(nic_name, str) or not NIC_NAME_RE.match(nic_name):
                self.fail(f"{nwhere}.name", f"{nic_name!r} is not a valid NIC name "
                          "(lowercase letter, then lowercase letters/digits)")
            if nic_name in host.nics:
                self.fail(f"{nwhere}.name", f"duplicate NIC name {nic_name!r} on host {name!r}")
            iface = f"{name}-{nic_name}"
            if len(iface) > IFNAME_MAX:
                self.fail(f"{nwhere}.name", f"interface name {iface!r} (<host>-<nic>) is {len(iface)} characters, "
                          f"Linux allows at most {IFNAME_MAX} (IFNAMSIZ)")
            plane, rail = self.labels(nwhere, item)
            ip, plen, gw = host_address(index, j)
            host.nics[nic_name] = Nic(name, nic_name, j, ip, plen, host_mac(index, j), iface, gw, plane, rail)
        for nic in host.nics.values():
            nic.label = nic.id if host.multi_homed else name
        return host
