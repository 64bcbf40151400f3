"""PTF tests of central routing (p4src/include/central_routing.p4): a flow
the controller assigned a path leaves by that path's port, with that next
hop's MACs and the TTL down by one, even where ECMP's hash picks another
port; a flow without an entry, a TCP flow with a pinned UDP flow's ports,
and every flow with the feature off follow ECMP; a destination routed to a
single next hop ignores the entries; the entry does not match on the
destination port (INT rewrites it after a watched flow's first switch);
TTL 1 is still dropped.

The switch under test is leaf1 of topologies/leaf-spine.yaml with the
entries the controller writes for it (control.forwarding, and
features.central_routing from a `central_routing:` section): port 1 is h1,
port 2 h2, port 3 spine1, port 4 spine2. Which port ECMP picks for a flow
comes from the model of the hash (hostagent/collectives/paths.py), checked
here against the switch with the feature off.
"""
from __future__ import annotations

import ptf.testutils as tu
import yaml
from ptf_lib.base_test import HOST_MAC, P4RuntimeTest
from scapy.layers.inet import IP, TCP, UDP
from scapy.layers.l2 import Ether

from control.feature import REPO
from control.forwarding import ecmp_seed, forwarding_state
from control.path_assignment import Flow
from control.topology import NextHop
from features import topology_from_dict
from features.central_routing import SECTION, empty_state, flow_entry, gate_entry, parse_section, routing_state
from hostagent.collectives.paths import PathModel

SWITCH = "leaf1"
H1, H2, H3 = "10.0.1.1", "10.0.2.1", "10.0.3.1"
SPINE_PORTS = (3, 4)
FLOWS = 16
SPORTS = [49152 + i for i in range(FLOWS)]


def packet(dst: str, sport: int, *, src: str = H1, dport: int = 4791, ttl: int = 64, tcp: bool = False):
    l4 = TCP(sport=sport, dport=dport) if tcp else UDP(sport=sport, dport=dport)
    return Ether(dst="0a:00:00:00:03:01", src=HOST_MAC) / IP(src=src, dst=dst, ttl=ttl) / l4 / (b"%08d" % sport)


class CentralRoutingTestBase(P4RuntimeTest):
    section: dict = {}

    def setUp(self):
        super().setUp()
        self.dataplane.set_qlen(10_000)
        data = yaml.safe_load((REPO / "topologies" / "leaf-spine.yaml").read_text())
        data.pop("int", None)
        data.pop("aggregation", None)
        self.topo = topology_from_dict(data)
        self.sw_ports = self.topo.switches[SWITCH].ports
        forwarding = forwarding_state(self.p4info, self.topo.routes()[SWITCH],
                                      seed=ecmp_seed(self.topo.switches[SWITCH].device_id))
        self.forwarding = list(forwarding.table_entries)
        self.model = PathModel(self.topo)
        self.set_section(self.section)

    def set_section(self, section: dict):
        def fail(field: str, what: str):
            raise AssertionError(f"{field}: {what}")
        self.config = parse_section(section, self.topo, fail)
        self.with_feature(routing_state(self.p4info, self.topo, SWITCH, self.config))
        return self.config

    def ecmp_port(self, dst: str, sport: int, dport: int = 4791) -> int:
        return self.model.path(H1, dst, sport, dport).hops[0][1]

    def expected(self, pkt, port: int):
        """`pkt` routed out of `port`: that port's MAC and its neighbour's, TTL - 1."""
        p = self.sw_ports[port]
        peer_mac = (self.topo.switches[p.peer].ports[p.peer_port].mac if p.peer_port is not None
                    else self.topo.nic(p.peer).mac)
        out = pkt.copy()
        out[Ether].src, out[Ether].dst = p.mac, peer_mac
        out[IP].ttl -= 1
        del out[IP].chksum
        return Ether(bytes(out))

    def send_and_expect(self, pkt, port: int) -> None:
        tu.send_packet(self, 1, bytes(pkt))
        tu.verify_packet(self, self.expected(pkt, port), port)


def section_of(sports, dst: str = H3) -> dict:
    return {"flows": [{"src": "h1", "dst": "h3" if dst == H3 else dst, "sport": s, "bytes": 1_000_000}
                      for s in sports]}


class PinnedFlowsTakeTheirPathsTest(CentralRoutingTestBase):
    """Sixteen equal flows h1 -> h3: eight on each spine, each leaving by its
    assigned port with the spine's MACs and TTL 63, where ECMP's hash sends
    some of them to the other spine."""
    section = section_of(SPORTS)

    def runTest(self):
        a = self.config.assignment
        assigned = {f.sport: path[0][1] for f, path in zip(a.flows, a.paths)}
        self.assertEqual(sorted(list(assigned.values()).count(p) for p in SPINE_PORTS), [8, 8])
        differs = [s for s in SPORTS if assigned[s] != self.ecmp_port(H3, s)]
        self.assertTrue(differs, "some flow is pinned away from ECMP's choice")
        for sport in SPORTS:
            self.send_and_expect(packet(H3, sport), assigned[sport])
        tu.verify_no_other_packets(self)


class UnpinnedFlowsFollowEcmpTest(CentralRoutingTestBase):
    """With the feature on: a flow without an entry, a TCP flow with a pinned
    flow's ports, follow ECMP's hash (the model's port); a pinned flow's
    packets to another destination port keep its entry (the key leaves the
    port out: INT rewrites it after the first switch)."""

    def runTest(self):
        # Pin each flow to the spine ECMP does not pick, so a hit and a miss tell apart.
        ecmp = {s: self.ecmp_port(H3, s) for s in SPORTS}
        pinned = {s: SPINE_PORTS[1] if ecmp[s] == SPINE_PORTS[0] else SPINE_PORTS[0] for s in SPORTS[:8]}
        state = empty_state(self.p4info)
        state.table_entries.append(gate_entry(self.p4info, True))
        for s, port in pinned.items():
            p = self.sw_ports[port]
            state.table_entries.append(flow_entry(self.p4info, Flow(H1, H3, s, 1), NextHop(
                port, p.mac, self.topo.switches[p.peer].ports[p.peer_port].mac)))
        self.with_feature(state)
        for s in SPORTS[:8]:
            self.send_and_expect(packet(H3, s), pinned[s])
            self.send_and_expect(packet(H3, s, dport=4792), pinned[s])
            self.send_and_expect(packet(H3, s, tcp=True), self.model.path(H1, H3, s, 4791, protocol=6).hops[0][1])
        for s in SPORTS[8:]:
            self.send_and_expect(packet(H3, s), ecmp[s])
        tu.verify_no_other_packets(self)


class OffChangesNothingTest(CentralRoutingTestBase):
    """No section: every flow where ECMP's hash sends it (the model agrees
    with the switch). Entries written but the gate off: the same. A section
    and then none again: the same."""

    def check_ecmp(self) -> None:
        for s in SPORTS:
            self.send_and_expect(packet(H3, s), self.ecmp_port(H3, s))
        tu.verify_no_other_packets(self)

    def runTest(self):
        self.check_ecmp()
        config = parse_section(section_of(SPORTS), self.topo, lambda f, w: self.fail(f"{f}: {w}"))
        state = routing_state(self.p4info, self.topo, SWITCH, config)
        state.table_entries = [e for e in state.table_entries if not e.is_default_action]
        state.table_entries.append(gate_entry(self.p4info, False))
        self.assertEqual(len(state.table_entries), FLOWS + 1)
        self.with_feature(state)
        self.check_ecmp()
        self.set_section(section_of(SPORTS))
        self.set_section({})
        self.check_ecmp()


class SingleNextHopIgnoresEntriesTest(CentralRoutingTestBase):
    """h1 -> h2 is routed straight to port 2 (no ECMP group): an entry for
    the flow toward a spine is never looked up."""

    def runTest(self):
        state = empty_state(self.p4info)
        state.table_entries.append(gate_entry(self.p4info, True))
        p = self.sw_ports[3]
        state.table_entries.append(flow_entry(self.p4info, Flow(H1, H2, 40000, 1),
                                              NextHop(3, p.mac, "0a:00:00:00:01:01")))
        self.with_feature(state)
        self.send_and_expect(packet(H2, 40000), 2)
        tu.verify_no_other_packets(self)


class TtlStaysRightTest(CentralRoutingTestBase):
    """A pinned flow at TTL 2 leaves at TTL 1 (decremented once, by the
    route); at TTL 1 it is dropped as expired, not pinned."""
    section = section_of(SPORTS[:2])

    def runTest(self):
        a = self.config.assignment
        port = a.paths[0][0][1]
        before = self.drops("TTL_EXPIRED")
        self.send_and_expect(packet(H3, SPORTS[0], ttl=2), port)
        tu.send_packet(self, 1, bytes(packet(H3, SPORTS[0], ttl=1)))
        tu.verify_no_other_packets(self)
        self.assertEqual(self.drops("TTL_EXPIRED"), before + 1)
