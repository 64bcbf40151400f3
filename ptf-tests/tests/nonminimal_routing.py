"""PTF tests of non-minimal routing (p4src/include/nonminimal_routing.p4):
the Valiant tag pushed at the source router, routed toward its intermediate
and removed there; UGAL's choice from the queue depths the load balancer
records (set here through Thrift); modes changed at runtime; malformed tags.

The switch under test is router g1r1 of topologies/dragonfly-small.yaml
(three groups of two routers), with the entries the controller writes for it
(control.forwarding, features.nonminimal_routing): port 1 is host h1, port 2
the local link to g1r2, port 3 the global link to g2r2. Intermediates are
the groups: 0 (g1, this one), 1 (g2), 2 (g3). Minimal routes: to h3
(10.0.3.1, on g2r1) out of port 3; toward group 2 (target 1) out of port 3;
toward group 3 (target 2) out of port 2 (via g1r2's global link).
"""
from __future__ import annotations

import time
from collections import Counter

import ptf.testutils as tu
import yaml
from ptf_lib.base_test import HOST_MAC, SWITCH_MAC, P4RuntimeTest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from emulator.bmv2_thrift import Bmv2Thrift
from control.feature import REPO
from control.forwarding import ecmp_seed, forwarding_state
from features import topology_from_dict
from features.nonminimal_routing import COUNTER, COUNTS, SECTION, parse_section, routing_state
from wire.nonminimal_routing import ETHERTYPE_VALIANT, ValiantTag

SWITCH = "g1r1"
HOST_PORT, LOCAL_PORT, GLOBAL_PORT = 1, 2, 3
H1, H2, H3, H5 = "10.0.1.1", "10.0.2.1", "10.0.3.1", "10.0.5.1"
OWN, GROUP2, GROUP3 = 0, 1, 2
FLOWS = 48                       # P(a target drawn by no flow) = 3 * (2/3)^48 < 1e-8


def udp(dst: str, sport: int, src: str = H1) -> IP:
    return IP(src=src, dst=dst, ttl=64) / UDP(sport=sport, dport=4791) / (b"%08d" % sport + b"\0" * 24)


def from_host(dst: str, sport: int) -> bytes:
    return bytes(Ether(dst=SWITCH_MAC, src=HOST_MAC) / udp(dst, sport))


def tagged(target: int, dst: str, sport: int, src: str = "10.0.4.1") -> bytes:
    return bytes(Ether(dst=SWITCH_MAC, src=HOST_MAC) / ValiantTag(target=target) / udp(dst, sport, src))


class NonminimalTestBase(P4RuntimeTest):
    section: dict = {"mode": "valiant"}
    topology, switch = "dragonfly-small", SWITCH

    def setUp(self):
        super().setUp()
        self.dataplane.set_qlen(10_000)
        data = yaml.safe_load((REPO / "topologies" / f"{self.topology}.yaml").read_text())
        data[SECTION] = self.section
        self.topo = topology_from_dict(data)
        forwarding = forwarding_state(self.p4info, self.topo.routes()[self.switch],
                                      seed=ecmp_seed(self.topo.switches[self.switch].device_id))
        self.forwarding = list(forwarding.table_entries)
        self.set_section(self.section)

    def set_section(self, section: dict) -> None:
        def fail(field: str, what: str):
            raise AssertionError(f"{field}: {what}")
        self.with_feature(routing_state(self.p4info, self.topo, self.switch, parse_section(section, self.topo, fail)))

    def count(self, what: str) -> int:
        return self.counter(COUNTER, COUNTS[what])[0]

    def outcome(self, frame: bytes) -> tuple[int | None, bytes]:
        """(the tag's target or None, the IPv4 packet) of a frame that left."""
        eth = Ether(frame)
        if eth.type == ETHERTYPE_VALIANT:
            return eth[ValiantTag].target, bytes(eth[ValiantTag].payload)
        return None, bytes(eth.payload)

    def send(self, port: int, frames: list[bytes]) -> None:
        for frame in frames:
            tu.send_packet(self, port, frame)
            time.sleep(0.003)

    def collect(self, timeout: float = 1.0) -> dict[int, list[tuple[int, int | None, IP]]]:
        """Per source port of the UDP flow: (egress port, tag target, IPv4) of every frame out."""
        out: dict[int, list] = {}
        for port, frames in self.receive_by_port(self.ports, timeout=timeout).items():
            for frame in frames:
                target, ip = self.outcome(frame)
                pkt = IP(ip)
                out.setdefault(pkt[UDP].sport, []).append((port, target, pkt))
        return out


class ValiantAtTheSourceTest(NonminimalTestBase):
    """From a host to h3 (group 2): every flow draws one intermediate and
    keeps it. Own group: untagged on the minimal port; group 2: tagged 1
    out of port 3; group 3: tagged 2 out of port 2. The IPv4 packet is
    intact (TTL down by one)."""

    def runTest(self):
        sports = [40000 + i for i in range(FLOWS)]
        self.send(HOST_PORT, [from_host(H3, s) for s in sports for _ in range(2)])
        got = self.collect()
        self.assertEqual(sorted(got), sports, "every flow came out")
        expected_port = {None: GLOBAL_PORT, GROUP2: GLOBAL_PORT, GROUP3: LOCAL_PORT}
        targets = Counter()
        for sport, frames in got.items():
            self.assertEqual(len(frames), 2, f"flow {sport}: {frames}")
            (port_a, target_a, ip_a), (port_b, target_b, _) = frames
            self.assertEqual((port_a, target_a), (port_b, target_b), f"flow {sport} keeps its intermediate")
            self.assertIn(target_a, expected_port, f"flow {sport}: target {target_a}")
            self.assertEqual(port_a, expected_port[target_a], f"flow {sport} to target {target_a}")
            self.assertEqual((ip_a.dst, ip_a.ttl), (H3, 63))
            self.assertEqual(bytes(ip_a[UDP].payload)[:8], b"%08d" % sport)
            targets[target_a] += 2
        self.assertEqual(set(targets), {None, GROUP2, GROUP3}, f"every intermediate drawn: {dict(targets)}")
        self.assertEqual(self.count("pushed"), 2 * FLOWS, "every packet tagged at its source")
        self.assertEqual(self.count("reached"), targets[None], "own-group tags removed at once")
        self.assertEqual(self.count("minimal"), 0)


class ValiantInTransitTest(NonminimalTestBase):
    """A tagged packet goes toward its intermediate whatever its destination,
    keeps its tag, and loses it in the intermediate, from where it is routed
    to its destination; a packet from another router is never tagged here."""

    def runTest(self):
        self.send(LOCAL_PORT, [tagged(GROUP2, H3, 41000)])        # toward group 2: port 3, still tagged
        self.send(GLOBAL_PORT, [tagged(GROUP3, H3, 41001)])       # toward group 3 (not h3's): port 2
        self.send(GLOBAL_PORT, [tagged(OWN, H2, 41002)])          # here: removed, minimal to h2: port 2
        self.send(LOCAL_PORT, [tagged(OWN, H1, 41003)])           # here: removed, to h1: port 1
        self.send(LOCAL_PORT, [from_host(H3, 41004)])             # untagged from a router: minimal, untagged
        got = self.collect()
        self.assertEqual({s: [(p, t) for p, t, _ in f] for s, f in got.items()},
                         {41000: [(GLOBAL_PORT, GROUP2)], 41001: [(LOCAL_PORT, GROUP3)],
                          41002: [(LOCAL_PORT, None)], 41003: [(HOST_PORT, None)], 41004: [(GLOBAL_PORT, None)]})
        self.assertEqual(got[41003][0][2].ttl, 63)
        self.assertEqual((self.count("pushed"), self.count("reached")), (0, 2))


class UgalChoosesByQueueDepthTest(NonminimalTestBase):
    """UGAL-L from h1 to h3: the minimal path is 2 hops out of port 3. With
    every queue empty, every packet is minimal. With port 3's queue at 20
    (fresh), a flow whose intermediate is group 3 (port 2, queue 0, 2 + 3
    hops) goes non-minimally, since 20 x 2 > 0 x 5; one whose intermediate is
    group 2 stays minimal (its port is port 3 too: 20 x 2 < 20 x 4); its own
    group has no candidate. A depth older than stale_us counts as empty."""
    section = {"mode": "ugal", "stale_us": 1_000_000}

    def send_one(self, thrift: Bmv2Thrift, sport: int, depth: int, age_s: float = 0.0) -> tuple[int, int | None]:
        for port, d in ((GLOBAL_PORT, depth), (LOCAL_PORT, 0)):
            thrift.register_write("lb_port_qdepth", port, d)
            thrift.register_write("lb_port_qdepth_time", port, thrift.now_us())
        if age_s:
            time.sleep(age_s)
        tu.send_packet(self, HOST_PORT, from_host(H3, sport))
        result = tu.dp_poll(self, device_number=0, timeout=2)
        self.assertIsInstance(result, self.dataplane.PollSuccess, f"flow {sport} came out")
        target, _ = self.outcome(bytes(result.packet))
        return result.port, target

    def runTest(self):
        sports = [42000 + i for i in range(FLOWS)]
        with Bmv2Thrift(self.thrift_port) as thrift:
            empty = {s: self.send_one(thrift, s, 0) for s in sports}
            self.assertEqual(set(empty.values()), {(GLOBAL_PORT, None)}, "empty queues: minimal")
            loaded = {s: self.send_one(thrift, s, 20) for s in sports}
            self.assertEqual(set(loaded.values()), {(GLOBAL_PORT, None), (LOCAL_PORT, GROUP3)},
                             "port 3 loaded: non-minimal through group 3, or minimal")
            again = {s: self.send_one(thrift, s, 20) for s in sports[:8]}
            self.assertEqual(again, {s: loaded[s] for s in sports[:8]}, "one flow, one intermediate")
            stale = {s: self.send_one(thrift, s, 20, age_s=1.2) for s in sports[:4]}
            self.assertEqual(set(stale.values()), {(GLOBAL_PORT, None)}, "a stale depth counts as empty")
        nonminimal = sum(1 for v in [*loaded.values(), *again.values()] if v[1] is not None)
        sent = len(empty) + len(loaded) + len(again) + len(stale)
        self.assertEqual(self.count("pushed"), nonminimal)
        self.assertEqual(self.count("minimal"), sent - nonminimal)


class ModeChangesAtRuntimeTest(NonminimalTestBase):
    """Minimal: nothing tagged, nothing counted; Valiant written over it
    (no restart): flows tagged; minimal again: untagged."""
    section = {"mode": "minimal"}

    def tags(self, base: int) -> Counter:
        self.send(HOST_PORT, [from_host(H3, base + i) for i in range(24)])
        return Counter(t for frames in self.collect().values() for _, t, _ in frames)

    def runTest(self):
        self.assertEqual(self.tags(43000), Counter({None: 24}))
        self.set_section({"mode": "valiant"})
        self.assertGreater(len(self.tags(43100)), 1, "Valiant: more than one outcome")
        self.set_section({"mode": "minimal"})
        self.assertEqual(self.tags(43200), Counter({None: 24}))
        self.assertEqual(self.count("pushed"), 24)


class DimensionOrderTest(NonminimalTestBase):
    """Router x1y1 of torus-3x3 (port 1 h1, port 2 x2y1, port 3 x1y2, port 4
    x1y3 over the wrap-around). To h5 on x2y2 and h6 on x2y3, minimal
    routing has two shortest paths (x first or y first); dimension order
    takes x first: every flow tagged for x2y1 (intermediate 3), out of port
    2. To h4 on x2y1 and h2 on x1y2, one dimension to correct: untagged,
    the minimal route."""
    topology, switch = "torus-3x3", "x1y1"
    section = {"mode": "dimension_order"}

    def runTest(self):
        flows = {"10.0.5.1": 45000, "10.0.6.1": 45100, "10.0.4.1": 45200, "10.0.2.1": 45300}
        self.send(HOST_PORT, [from_host(dst, base + i) for dst, base in flows.items() for i in range(8)])
        got = {s: [(p, t) for p, t, _ in f] for s, f in self.collect().items()}
        expected = {45000: (2, 3), 45100: (2, 3), 45200: (2, None), 45300: (3, None)}
        self.assertEqual(got, {base + i: [expected[base]] for base in expected for i in range(8)})
        self.assertEqual(self.count("pushed"), 16)


class MalformedTagTest(NonminimalTestBase):
    """A tag with no IPv4 inside, or cut short, is dropped and counted; the
    switch keeps forwarding."""

    def runTest(self):
        not_ipv4 = bytes(Ether(dst=SWITCH_MAC, src=HOST_MAC, type=ETHERTYPE_VALIANT)
                         / ValiantTag(target=1, type=0x86DD) / (b"\0" * 40))
        short = bytes(Ether(dst=SWITCH_MAC, src=HOST_MAC, type=ETHERTYPE_VALIANT)) + b"\x00"
        self.send(LOCAL_PORT, [not_ipv4, short])
        self.send(LOCAL_PORT, [tagged(GROUP2, H3, 44000)])
        got = self.collect()
        self.assertEqual({s: [(p, t) for p, t, _ in f] for s, f in got.items()}, {44000: [(GLOBAL_PORT, GROUP2)]})
        self.assertEqual(self.drops("NOT_IPV4"), 1)
        self.assertEqual(self.drops("PARSER_ERROR"), 1)
