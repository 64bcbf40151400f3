"""PTF tests of IPv4 forwarding (p4src/include/forwarding.p4): LPM routing
and MAC rewrite, TTL and checksum, drops of expired, corrupted, unroutable
and malformed packets, per-port counters, and resilient ECMP."""
from __future__ import annotations

import random

import ptf.testutils as tu
from ptf.mask import Mask
from ptf_lib.base_test import HOST_MAC, SWITCH_MAC, P4RuntimeTest, neighbour_mac, port_mac
from scapy.layers.inet import IP, TCP, UDP
from scapy.layers.l2 import ARP, Ether
from scapy.packet import Raw


def ipv4_packet(dst: str, l4: str = "tcp", ttl: int = 64, sport: int = 1234, dport: int = 80,
                src: str = "10.9.0.1", **kw):
    builders = {
        "tcp": lambda: tu.simple_tcp_packet(eth_dst=SWITCH_MAC, eth_src=HOST_MAC, ip_src=src, ip_dst=dst,
                                            ip_ttl=ttl, tcp_sport=sport, tcp_dport=dport, **kw),
        "udp": lambda: tu.simple_udp_packet(eth_dst=SWITCH_MAC, eth_src=HOST_MAC, ip_src=src, ip_dst=dst,
                                            ip_ttl=ttl, udp_sport=sport, udp_dport=dport, **kw),
        "icmp": lambda: tu.simple_icmp_packet(eth_dst=SWITCH_MAC, eth_src=HOST_MAC, ip_src=src, ip_dst=dst,
                                              ip_ttl=ttl, **kw),
    }
    return builders[l4]()


def routed(pkt, port: int):
    """What `pkt` looks like after the switch routes it out of `port`:
    MACs rewritten, TTL decremented, IPv4 checksum recomputed."""
    out = pkt.copy()
    out[Ether].src, out[Ether].dst = port_mac(port), neighbour_mac(port)
    out[IP].ttl -= 1
    del out[IP].chksum
    return Ether(bytes(out))


class LpmRoutingTest(P4RuntimeTest):
    """The longest matching prefix wins, whether it routes straight to a next
    hop or through an ECMP group; MACs, TTL and checksum are rewritten."""

    def runTest(self):
        self.add_route("10.0.0.0/8", 1)
        self.add_direct_route("10.1.0.0/16", 3)
        self.add_route("10.1.2.0/24", 3)
        self.add_direct_route("10.1.2.3/32", 1)
        for next_id, port in ((1, 2), (3, 4)):
            self.add_next_hop(next_id, port)
        self.apply()
        cases = [("/8", "10.200.0.1", 2), ("/16", "10.1.200.1", 3), ("/24", "10.1.2.200", 4), ("/32", "10.1.2.3", 1)]
        for l4 in ("tcp", "udp", "icmp"):
            for name, dst, port in cases:
                with self.subTest(prefix=name, l4=l4):
                    pkt = ipv4_packet(dst, l4)
                    tu.send_packet(self, 1, pkt)
                    tu.verify_packet(self, routed(pkt, port), port)
        tu.verify_no_other_packets(self)


class TtlTest(P4RuntimeTest):
    """TTL 2 leaves with TTL 1 and a valid checksum; TTL 1 and 0 are dropped and counted."""

    def runTest(self):
        self.add_route("10.0.0.0/8", 1)
        self.add_next_hop(1, 2)
        self.apply()
        pkt = ipv4_packet("10.0.0.2", ttl=2)
        tu.send_packet(self, 1, pkt)
        expected = routed(pkt, 2)
        self.assertEqual(expected[IP].ttl, 1)
        tu.verify_packet(self, expected, 2)  # exact bytes: the checksum was recomputed
        for ttl in (1, 0):
            tu.send_packet(self, 1, ipv4_packet("10.0.0.2", ttl=ttl))
        tu.verify_no_other_packets(self)
        self.assertEqual(self.drops("TTL_EXPIRED"), 2)


class BadChecksumTest(P4RuntimeTest):
    """A corrupted IPv4 header checksum is dropped and counted; a good one passes."""

    def runTest(self):
        self.add_route("10.0.0.0/8", 1)
        self.add_next_hop(1, 2)
        self.apply()
        good = ipv4_packet("10.0.0.2")
        bad = good.copy()
        bad[IP].chksum = (Ether(bytes(good))[IP].chksum + 1) & 0xFFFF
        tu.send_packet(self, 1, bad)
        tu.verify_no_other_packets(self)
        self.assertEqual(self.drops("BAD_IPV4_CHECKSUM"), 1)
        tu.send_packet(self, 1, good)
        tu.verify_packet(self, routed(good, 2), 2)


class UnknownDestinationTest(P4RuntimeTest):
    """No matching route, or a route to a next hop that does not exist: dropped and counted."""

    def runTest(self):
        self.add_route("10.1.0.0/16", 1)
        self.add_next_hop(1, 2)
        self.add_route("10.2.0.0/16", 7)  # next_id 7 has no next_hop entry
        self.apply()
        tu.send_packet(self, 1, ipv4_packet("192.168.1.1"))
        tu.send_packet(self, 1, ipv4_packet("10.3.0.1"))
        tu.send_packet(self, 1, ipv4_packet("10.2.0.1"))
        tu.verify_no_other_packets(self)
        self.assertEqual(self.drops("NO_ROUTE"), 3)


class PortCounterTest(P4RuntimeTest):
    """Ingress and egress port counters count packets and bytes."""

    def runTest(self):
        self.add_route("10.0.0.0/8", 1)
        self.add_next_hop(1, 3)
        self.apply()
        pkt = ipv4_packet("10.0.0.2", pktlen=200)
        for _ in range(5):
            tu.send_packet(self, 2, pkt)
            tu.verify_packet(self, routed(pkt, 3), 3)
        self.assertEqual(self.counter("ingress_port_counter", 2), (5, 5 * 200))
        self.assertEqual(self.counter("egress_port_counter", 3), (5, 5 * 200))
        self.assertEqual(self.counter("ingress_port_counter", 3)[0], 0)


class EcmpTest(P4RuntimeTest):
    """Flows spread over every member; one flow sticks to one member; removing
    a member moves only the flows that were on it."""

    # A fixed set of flows with ephemeral-looking ports (seeded): CRC hashes
    # are linear, so consecutive port numbers alone would reach only some slots.
    FLOWS = [(s, d) for s, d in zip(random.Random(4791).sample(range(1024, 65536), 64),
                                    random.Random(17).sample(range(1, 65536), 64))]

    def send_flows(self, ports) -> dict[tuple, int]:
        """Send one packet of each flow; return the port each flow left on."""
        chosen = {}
        for flow in self.FLOWS:
            pkt = ipv4_packet("10.0.0.2", sport=flow[0], dport=flow[1])
            tu.send_packet(self, 1, pkt)
            any_rewrite = Mask(routed(pkt, ports[0]))
            any_rewrite.set_do_not_care_scapy(Ether, "src")
            any_rewrite.set_do_not_care_scapy(Ether, "dst")
            index, received = tu.verify_packet_any_port(self, any_rewrite, ports)
            port = ports[index]
            self.assertEqual(bytes(received)[:len(pkt)], bytes(routed(pkt, port)),
                             f"flow {flow}: MACs must be those of port {port}")
            chosen[flow] = port
        return chosen

    def runTest(self):
        members = [1, 2, 3, 4]
        self.add_route("10.0.0.0/8", 1)
        slots = self.set_ecmp_group(1, members)
        self.apply()

        before = self.send_flows(members)
        used = sorted(set(before.values()))
        self.assertEqual(used, members, f"64 flows should use every member, used {used}")

        flow = self.FLOWS[7]
        sticky = ipv4_packet("10.0.0.2", sport=flow[0], dport=flow[1])
        for _ in range(10):
            tu.send_packet(self, 1, sticky)
            tu.verify_packet(self, routed(sticky, before[flow]), before[flow])

        removed = 3
        self.set_ecmp_group(1, [p for p in members if p != removed], previous=slots)
        self.apply()
        remaining = [p for p in members if p != removed]
        after = self.send_flows(remaining)
        moved = {s for s in before if before[s] != after[s]}
        self.assertEqual(moved, {s for s in before if before[s] == removed},
                         "only the flows of the removed member may move")
        self.assertNotIn(removed, after.values())
        tu.verify_no_other_packets(self)


def _ip(**fields):
    return Ether(dst=SWITCH_MAC, src=HOST_MAC) / IP(dst="10.0.0.2", **fields)


MALFORMED = {
    "ethernet-header-only": Ether(dst=SWITCH_MAC, src=HOST_MAC, type=0x0800),
    "ipv4-header-truncated": Ether(bytes(_ip())[:14 + 10]),
    "ihl-below-5": _ip(ihl=4) / Raw(b"x" * 20),
    "ipv4-options": _ip(ihl=6, options=[]) / Raw(b"\x01" * 4 + b"y" * 20),
    "ihl-15-short-packet": _ip(ihl=15) / Raw(b"z" * 8),
    "version-6-in-ipv4-ethertype": _ip(version=6) / Raw(b"v" * 20),
    "tcp-header-truncated": Ether(bytes(_ip(proto=6) / TCP())[:14 + 20 + 8]),
    "udp-header-truncated": Ether(bytes(_ip(proto=17) / UDP())[:14 + 20 + 4]),
    "random-bytes-as-ipv4": Ether(dst=SWITCH_MAC, src=HOST_MAC, type=0x0800) / Raw(bytes(range(7, 71))),
    "arp-not-ipv4": Ether(dst="ff:ff:ff:ff:ff:ff", src=HOST_MAC) / ARP(pdst="10.0.0.2"),
}


class MalformedPacketTest(P4RuntimeTest):
    """Malformed and truncated frames are dropped (and counted) without
    crashing the switch, which still forwards afterwards."""

    def runTest(self):
        self.add_route("10.0.0.0/8", 1)
        self.add_next_hop(1, 2)
        self.apply()
        for name, frame in MALFORMED.items():
            with self.subTest(frame=name):
                tu.send_packet(self, 1, frame)
                tu.verify_no_other_packets(self)
        dropped = sum(self.drops(r) for r in ("PARSER_ERROR", "BAD_IPV4_CHECKSUM", "NOT_IPV4"))
        self.assertEqual(dropped, len(MALFORMED), "every malformed frame is counted as a drop")
        good = ipv4_packet("10.0.0.2")
        tu.send_packet(self, 1, good)
        tu.verify_packet(self, routed(good, 2), 2)
