"""PTF tests of ECN marking (p4src/include/ecn.p4).

Queues are built deterministically with BMv2's traffic manager: the egress
port gets a low queue rate (Thrift set_queue_rate) and a burst arrives much
faster, so packet i of a burst is enqueued behind about i others. enq_qdepth
may or may not count the packet itself and one packet may leave during the
burst, so thresholds are checked with one packet of slack on each side.
"""
from __future__ import annotations

import math

from ptf_lib.base_test import HOST_MAC, SWITCH_MAC, P4RuntimeTest
from scapy.layers.inet import IP
from scapy.layers.l2 import Ether

from emulator.bmv2_thrift import Bmv2Thrift
from features.ecn import MARKED_COUNTER, EcnProfile, ecn_state
from wire.ecn import CE, ECT0, ECT1, NOT_ECT
from wire.roce import roce_data
from hostagent.sender import RawSender

IN_PORT, OUT_PORT = 1, 2
UNLIMITED_PPS = 10_000_000


def data_packet(seq: int, ecn: int) -> bytes:
    return bytes(roce_data(HOST_MAC, SWITCH_MAC, "10.9.0.1", "10.0.0.2", qp=7, psn=seq, payload=200, ecn=ecn))


def ecn_of(frame: bytes) -> int:
    return Ether(frame)[IP].tos & 0b11


def checksum_ok(frame: bytes) -> bool:
    ip = Ether(frame)[IP]
    again = ip.copy()
    del again.chksum
    return IP(bytes(again)).chksum == ip.chksum


class EcnTest(P4RuntimeTest):
    def setUp(self):
        super().setUp()
        self.dataplane.set_qlen(10_000)
        self.thrift = Bmv2Thrift(self.thrift_port)
        self.route_all_to(OUT_PORT)

    def tearDown(self):
        try:
            self.thrift.set_queue_rate(OUT_PORT, UNLIMITED_PPS)
            self.thrift.set_queue_depth(OUT_PORT, 64)
            self.thrift.close()
        finally:
            super().tearDown()

    def set_profile(self, profile: EcnProfile | None) -> None:
        self.state.table_entries = [e for e in self.state.table_entries
                                    if e.table_id != self.p4info.table("ecn_profile").preamble.id]
        if profile is not None:
            self.state.table_entries += ecn_state(self.p4info, {OUT_PORT: profile}).table_entries
        self.apply()

    def burst(self, count: int, ecn: int, rate_pps: int = 20) -> list[bytes]:
        """Send `count` packets back to back into a port served at `rate_pps`;
        return what left, in order."""
        self.thrift.set_queue_rate(OUT_PORT, rate_pps)
        with RawSender(self.iface(IN_PORT)) as tx:
            for seq in range(count):
                tx.send(data_packet(seq, ecn))
        frames = self.receive_all(OUT_PORT, timeout=max(1.0, 3.0 / rate_pps))
        self.thrift.set_queue_rate(OUT_PORT, UNLIMITED_PPS)
        self.assertEqual(len(frames), count, "the burst fits the queue: nothing may be lost")
        return frames

    def marked(self) -> int:
        return self.counter(MARKED_COUNTER, OUT_PORT)[0]


class StepMarkingTest(EcnTest):
    """ECT(0) and ECT(1) are not marked below K and are marked at/above K;
    the checksum is valid after marking; the counter counts every mark.

    Independent of the machine's speed: packet i of a burst finds at most i
    packets queued (so the first K - 1 are never marked), and the port is
    served at RATE_PPS, so a burst that reaches the switch within (COUNT - K)
    / RATE_PPS seconds (1.6 s: even a slow or busy machine) builds a queue of
    at least K; each case is judged on its own marks (counter before/after)."""

    K = 6
    COUNT = 14
    RATE_PPS = 5

    def runTest(self):
        self.set_profile(EcnProfile.step(self.K))
        for name, ecn in (("ECT(0)", ECT0), ("ECT(1)", ECT1)):
            with self.subTest(codepoint=name):
                before = self.marked()
                frames = self.burst(self.COUNT, ecn, rate_pps=self.RATE_PPS)
                marks = [ecn_of(f) == CE for f in frames]
                for i, frame in enumerate(frames):
                    self.assertTrue(checksum_ok(frame), f"packet {i}: bad IPv4 checksum")
                    self.assertIn(ecn_of(frame), (ecn, CE), f"packet {i}: another codepoint")
                    if i <= self.K - 2:
                        self.assertFalse(marks[i], f"packet {i} (at most {i + 1} queued, < K) must not be marked")
                self.assertTrue(marks[-1], "the last packet of the burst (queue >= K) must be CE")
                self.assertEqual(self.marked() - before, sum(marks), "the counter counts this burst's marks")


class NotEctNeverMarkedTest(EcnTest):
    """Not-ECT packets are never marked, however deep the queue."""

    def runTest(self):
        self.set_profile(EcnProfile.step(0))
        frames = self.burst(14, NOT_ECT)
        self.assertEqual([ecn_of(f) for f in frames], [NOT_ECT] * 14)
        self.assertEqual(self.marked(), 0)


class CeStaysCeTest(EcnTest):
    """CE arrives, CE leaves (never cleared), and is not counted as a new mark."""

    def runTest(self):
        self.set_profile(EcnProfile.step(1000))  # would not mark anything itself
        frames = self.burst(10, CE)
        self.assertEqual([ecn_of(f) for f in frames], [CE] * 10)
        self.assertTrue(all(checksum_ok(f) for f in frames))
        self.assertEqual(self.marked(), 0)


class NoProfileNoMarkingTest(EcnTest):
    """A port without a profile never marks."""

    def runTest(self):
        frames = self.burst(20, ECT0)
        self.assertEqual([ecn_of(f) for f in frames], [ECT0] * 20)
        self.assertEqual(self.marked(), 0)


class ProfileChangeAtRuntimeTest(EcnTest):
    """Changing a port's profile takes effect on the next packets."""

    def runTest(self):
        self.set_profile(EcnProfile.step(2))
        self.assertGreater(sum(ecn_of(f) == CE for f in self.burst(12, ECT0)), 5)
        self.set_profile(EcnProfile.step(40))
        self.assertEqual(sum(ecn_of(f) == CE for f in self.burst(12, ECT0)), 0)
        self.set_profile(EcnProfile.wred(0, 1, 1.0))  # at/above Kmax: always
        self.assertGreater(sum(ecn_of(f) == CE for f in self.burst(12, ECT0)), 9)
        self.set_profile(None)
        self.assertEqual(sum(ecn_of(f) == CE for f in self.burst(12, ECT0)), 0)


class WredProbabilityTest(EcnTest):
    """Between Kmin and Kmax, WRED marks with probability
    Pmax (q - Kmin) / (Kmax - Kmin).

    The queue is held full: depth limit D, service rate R, arrivals at 5R.
    After the first D packets, every admitted packet was enqueued at depth D-1
    or D, so its marking probability lies within [p(D-1), p(D)]. The measured
    fraction over n packets must fall inside that range widened by 4 standard
    deviations (sqrt(p (1-p) / n)): a wrong probability scale, a missing ramp
    or marking everything all fail it.
    """

    D, RATE, KMIN, KMAX, PMAX = 20, 200, 0, 40, 1.0

    def p(self, q: int) -> float:
        return self.PMAX * (q - self.KMIN) / (self.KMAX - self.KMIN)

    def runTest(self):
        self.set_profile(EcnProfile.wred(self.KMIN, self.KMAX, self.PMAX))
        self.thrift.set_queue_depth(OUT_PORT, self.D)
        self.thrift.set_queue_rate(OUT_PORT, self.RATE)
        frames = [data_packet(seq, ECT0) for seq in range(64)]
        with RawSender(self.iface(IN_PORT)) as tx:
            tx.blast(frames, duration_s=3.0, rate_pps=5 * self.RATE)
        received = self.receive_all(OUT_PORT, timeout=1.0)
        steady = received[self.D + 2:]
        n = len(steady)
        self.assertGreater(n, 300, f"only {n} packets were admitted at a full queue")
        fraction = sum(ecn_of(f) == CE for f in steady) / n
        low, high = self.p(self.D - 1), self.p(self.D)
        sigma = math.sqrt(max(low * (1 - low), high * (1 - high)) / n)
        print(f"\nWRED: {n} packets at depth {self.D - 1}..{self.D}: marked {fraction:.3f}, "
              f"expected {low:.3f}..{high:.3f} +- {4 * sigma:.3f}")
        self.assertGreaterEqual(fraction, low - 4 * sigma)
        self.assertLessEqual(fraction, high + 4 * sigma)
        self.assertEqual(self.marked(), sum(ecn_of(f) == CE for f in received))
