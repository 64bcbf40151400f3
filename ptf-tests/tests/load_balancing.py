"""PTF tests of load balancing beyond ECMP (p4src/include/load_balancing.p4):
ECMP keeps a flow on one member; flowlets stay put within the gap and move
across gaps; spraying spreads one flow over every member; adaptive avoids a
member whose queue is built up; modes change at runtime; a removed member is
never chosen; the per-member counters count what left.

Group 1 routes 10.0.0.0/8 over ports 2 and 3 (8 slots each); packets enter on
port 1. Time-dependent tests use gaps far from the threshold (5 ms packets
against a 200 ms flowlet gap, 300 ms pauses), so scheduling jitter of the
test or of BMv2 cannot flip an outcome; statistical ones state their bounds.
"""
from __future__ import annotations

import time
from collections import Counter

from ptf_lib.base_test import HOST_MAC, SWITCH_MAC, P4RuntimeTest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from emulator.bmv2_thrift import Bmv2Thrift
from features.load_balancing import FLOWLETS_COUNTER, LbMode, lb_state, member_packets
from hostagent.sender import RawSender

IN_PORT = 1
MEMBERS = [2, 3]
GROUP = 1
UNLIMITED_PPS = 10_000_000


def flow_packet(sport: int = 40000, seq: int = 0) -> bytes:
    return bytes(Ether(dst=SWITCH_MAC, src=HOST_MAC) / IP(src="10.9.0.1", dst="10.0.0.2")
                 / UDP(sport=sport, dport=4791) / (b"%08d" % seq + b"\0" * 40))


class LbTestBase(P4RuntimeTest):
    def setUp(self):
        super().setUp()
        self.dataplane.set_qlen(10_000)
        self.route_through_group("10.0.0.0/8", GROUP, MEMBERS)
        self.set_mode(LbMode("ecmp"))

    def set_mode(self, mode: LbMode, members: list[int] | None = None) -> None:
        if members is not None:
            self.state.table_entries = list(self.forwarding)
            self.slots = self.set_ecmp_group(GROUP, members, previous=self.slots)
            self.forwarding = list(self.state.table_entries)
        self.with_feature(lb_state(self.p4info, {GROUP: self.slots}, mode))

    def ports_of(self, frames_by_port: dict[int, list[bytes]]) -> Counter:
        return Counter({port: len(frames) for port, frames in frames_by_port.items()})

    def send_and_count(self, frames: list[bytes], gap_s: float = 0.002, timeout: float = 2.0) -> Counter:
        """Send paced (back to back, BMv2's capture drops some; 0.5 ms apart, CI
        once received 33 of 40), count per egress port."""
        with RawSender(self.iface(IN_PORT)) as tx:
            for frame in frames:
                tx.send(frame)
                if gap_s:
                    time.sleep(gap_s)
        by_port = self.receive_by_port([p for p in self.ports if p != IN_PORT], expected=len(frames), timeout=timeout)
        counts = Counter({port: len(got) for port, got in by_port.items() if got})
        self.assertEqual(sum(counts.values()), len(frames), f"every packet forwarded once: {dict(counts)}")
        return counts


class EcmpKeepsAFlowOnOneMemberTest(LbTestBase):
    def runTest(self):
        counts = self.send_and_count([flow_packet(seq=i) for i in range(50)])
        self.assertEqual(len(counts), 1, dict(counts))


class FlowletTest(LbTestBase):
    """Gap 200 ms. 30 packets 5 ms apart: one flowlet, one member. Then 16
    packets each after a 300 ms pause: 16 new flowlets, each on a random
    slot; all 16 on one member has probability 2^-15. flowlets_started
    counts exactly 17."""

    def runTest(self):
        self.set_mode(LbMode("flowlet", flowlet_gap_us=200_000))
        before = self.counter(FLOWLETS_COUNTER, GROUP)[0]
        close = self.send_and_count([flow_packet(seq=i) for i in range(30)], gap_s=0.005)
        self.assertEqual(len(close), 1, f"within the gap the flow stays on one member: {dict(close)}")
        apart = Counter()
        for i in range(16):
            time.sleep(0.3)
            apart += self.send_and_count([flow_packet(seq=100 + i)], timeout=0.05)
        self.assertEqual(set(apart), set(MEMBERS), f"flowlets move across members: {dict(apart)}")
        self.assertEqual(self.counter(FLOWLETS_COUNTER, GROUP)[0] - before, 17)


class SprayTest(LbTestBase):
    """One flow, 400 packets sprayed over 2 members of 8 slots each: each
    gets Binomial(400, 1/2) = 200 +- 10 (one standard deviation); the test
    accepts 150..250 (5 sigma)."""

    def runTest(self):
        self.set_mode(LbMode("spray"))
        counts = self.send_and_count([flow_packet(seq=i) for i in range(400)])
        for port in MEMBERS:
            self.assertTrue(150 <= counts[port] <= 250, dict(counts))


class AdaptiveAvoidsTheSlowMemberTest(LbTestBase):
    """Port 2 served at 40 packets/s, port 3 at full speed, 300 packets 1 ms
    apart. Spraying sends half to the slow port (its queue fills); adaptive
    compares a random slot and its neighbour (one per member) by their ports'
    recorded queues and sends at least 85% to the fast one (it sends to the
    slow port while that port's recorded queue is still as short)."""

    def setUp(self):
        super().setUp()
        self.thrift = Bmv2Thrift(self.thrift_port)
        self.thrift.set_queue_depth(2, 1000)

    def tearDown(self):
        try:
            self.thrift.set_queue_rate(2, UNLIMITED_PPS)
            self.thrift.set_queue_depth(2, 64)
            self.thrift.close()
        finally:
            super().tearDown()

    def burst(self, mode: LbMode) -> Counter:
        self.set_mode(mode)
        self.thrift.set_queue_rate(2, 40)
        with RawSender(self.iface(IN_PORT)) as tx:
            for i in range(300):
                tx.send(flow_packet(seq=i))
                time.sleep(0.001)
        fast = len(self.receive_all(3, timeout=1.0))
        self.thrift.set_queue_rate(2, UNLIMITED_PPS)
        slow = len(self.receive_all(2, timeout=1.0))
        return Counter({2: slow, 3: fast})

    def runTest(self):
        sprayed = self.burst(LbMode("spray"))
        self.assertEqual(sum(sprayed.values()), 300)
        self.assertLess(sprayed[3], 0.62 * 300, f"spraying ignores queues: {dict(sprayed)}")
        time.sleep(0.5)
        adaptive = self.burst(LbMode("adaptive", queue_stale_us=200_000))
        self.assertEqual(sum(adaptive.values()), 300)
        self.assertGreaterEqual(adaptive[3], 0.85 * 300, f"adaptive avoids the slow port: {dict(adaptive)}")


class ModeChangesAtRuntimeTest(LbTestBase):
    def runTest(self):
        ecmp = self.send_and_count([flow_packet(seq=i) for i in range(40)])
        self.assertEqual(len(ecmp), 1)
        self.set_mode(LbMode("spray"))
        sprayed = self.send_and_count([flow_packet(seq=i) for i in range(40)])
        self.assertEqual(set(sprayed), set(MEMBERS))
        self.set_mode(LbMode("ecmp"))
        self.assertEqual(self.send_and_count([flow_packet(seq=i) for i in range(40)]), ecmp)


class RemovedMemberIsNeverChosenTest(LbTestBase):
    """Spray and adaptive over [2, 3], then port 2 removed from the group
    (its slots move to 3): nothing leaves port 2 any more."""

    def runTest(self):
        for mode in (LbMode("spray"), LbMode("adaptive"), LbMode("flowlet", flowlet_gap_us=1)):
            with self.subTest(mode=str(mode)):
                self.set_mode(mode, members=[2, 3])
                self.set_mode(mode, members=[3])
                counts = self.send_and_count([flow_packet(sport=41000 + i, seq=i) for i in range(100)])
                self.assertEqual(dict(counts), {3: 100})


class MemberCountersTest(LbTestBase):
    """next_hop's direct counter, summed per member, equals what left each port."""

    def runTest(self):
        self.set_mode(LbMode("spray"))
        counts = self.send_and_count([flow_packet(seq=i) for i in range(120)])
        by_member = {port: n for (group, port), n in member_packets(self.sw, self.p4info).items() if group == GROUP}
        self.assertEqual(by_member, dict(counts))
