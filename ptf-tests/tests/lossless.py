"""PTF tests of lossless classes and PFC (p4src/include/lossless.p4).

PFC frames the switch sends are decoded with Scapy's own 802.1Qbb layer
(scapy.contrib.mac_control), not with the project's encoder. Queues are
built deterministically: the class's egress queue gets a low rate over
Thrift and a burst arrives far faster, so the buffer model's occupancy
follows the packets sent (one packet of slack where one may leave during
the burst). Links are declared at 10 Mbit/s, so a pause quantum lasts
51.2 us and the longest pause 3.36 s, longer than any test waits: pauses
end when a test says so, never by accident of the machine's speed.
"""
from __future__ import annotations

import threading
import time
from dataclasses import replace

from ptf_lib.base_test import HOST_MAC, SWITCH_MAC, P4RuntimeTest, neighbour_mac, port_mac
from scapy.contrib.mac_control import MACControlClassBasedFlowControl
from scapy.contrib.roce import BTH
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import ARP, Dot1Q, Ether

from control.sync import SwitchState
from emulator import queue_depth
from emulator.bmv2_thrift import Bmv2Thrift
from features.ecn import EcnProfile, ecn_state
from features.int_telemetry import Instructions, ReportPath, ReportSettings, WatchRule, int_state, report_counts
from features.lossless import (PAUSED_REGISTER, PEAK_REGISTER, LosslessConfig, PfcThresholds, TrafficClass, Watchdog, cell,
                               lossless_state, queue_plan)
from hostagent.ecn.roce import open_socket
from hostagent.lossless import PauseState
from hostagent.sender import RawSender
from wire.ecn import CE, ECT0
from wire.lossless import PFC_DST_MAC, encode_pfc, quantum_us
from wire.roce import roce_data

IN_PORT, OUT_PORT, OTHER_PORT, COLLECTOR_PORT = 1, 2, 3, 4
LINK_MBPS = 10.0                    # quantum 51.2 us; hold queue at the link's 833 packets/s
LOSSLESS, BULK, CHANGED = 3, 1, 4   # classes (and their queues)
LOSSLESS_DSCP, BULK_DSCP, CHANGED_DSCP = 26, 10, 34
THIRD, THIRD_DSCP = 5, 40           # a third lossless class: a Dragonfly's after its second global hop
UNLIMITED_PPS = 10_000_000
PORTS = {p: (port_mac(p), LINK_MBPS) for p in (1, 2, 3, 4)}
PEER_MAC = "0a:00:00:00:02:99"      # the device behind OUT_PORT that pauses the switch
ELSEWHERE = "10.0.9.2"              # an address PauseLastsUntilXonTest routes out of OTHER_PORT


def config(xoff: int = 8, xon: int = 4, headroom: int = 32, quanta: int = 0xFFFF,
           watchdog: Watchdog | None = None) -> LosslessConfig:
    """Classes 3 and 4 lossless, class 1 not. Held packets loop at 200
    packets/s a port: recirculated packets go before new ones in BMv2's
    ingress, and the PTF runner's switch (logging at info) has little
    capacity to spare."""
    return LosslessConfig(queues=8, classes=(TrafficClass("collective", LOSSLESS, LOSSLESS, (LOSSLESS_DSCP,), True),
                                             TrafficClass("bulk", BULK, BULK, (BULK_DSCP,)),
                                             TrafficClass("collective-2", CHANGED, CHANGED, (CHANGED_DSCP,), True)),
                          pfc=PfcThresholds(xoff, xon, headroom, quanta), watchdog=watchdog, hold_rate_pps=200)


def data(seq: int, dscp: int = LOSSLESS_DSCP, ecn: int = ECT0, pcp: int | None = None,
         dst: str = "10.0.0.2") -> bytes:
    return bytes(roce_data(HOST_MAC, SWITCH_MAC, "10.9.0.1", dst, qp=7, psn=seq, payload=100, dscp=dscp,
                           ecn=ecn, pcp=pcp))


def psn(frame: bytes) -> int:
    return Ether(frame)[BTH].psn


def dscp(frame: bytes) -> int:
    return Ether(frame)[IP].tos >> 2


def pfc_times(frame: bytes) -> dict[int, int]:
    """{class: pause time} of a PFC frame, read with Scapy's layer; checks the frame is 802.1Qbb."""
    pkt = Ether(frame)
    assert pkt.dst == PFC_DST_MAC and pkt.type == 0x8808 and len(frame) == 60, pkt.summary()
    layer = pkt[MACControlClassBasedFlowControl]
    assert layer._op_code == 0x0101 and layer._reserved == 0
    return {c: getattr(layer, f"c{c}_pause_time") for c in range(8) if getattr(layer, f"c{c}_enabled")}


def quanta_for(ms: float) -> int:
    return round(ms * 1000 / quantum_us(LINK_MBPS))


class LosslessTest(P4RuntimeTest):
    def setUp(self):
        super().setUp()
        self.dataplane.set_qlen(10_000)
        self.thrift = Bmv2Thrift(self.thrift_port)
        self.route_all_to(OUT_PORT)

    def tearDown(self):
        try:
            for p in PORTS:
                self.thrift.set_queue_rate(p, UNLIMITED_PPS)
                self.thrift.set_queue_depth(p, 64)
            self.thrift.close()
        finally:
            super().tearDown()

    def program(self, cfg: LosslessConfig, changes: dict | None = None, beside: SwitchState | None = None,
                thresholds: dict | None = None) -> None:
        """The lossless state `cfg` (with its cells' own `thresholds`, and
        another feature's entries `beside` it) on the switch, its queues set."""
        feature = lossless_state(self.p4info, cfg, PORTS, changes, thresholds)
        self.state.table_entries = ([e for e in self.forwarding if e.table_id not in feature.managed_tables]
                                    + feature.table_entries + (beside.table_entries if beside else []))
        self.state.clone_sessions = list(feature.clone_sessions) + (list(beside.clone_sessions) if beside else [])
        self.apply()
        for (port, queue), s in queue_plan(cfg, PORTS, thresholds).settings.items():
            if s.rate_pps:
                self.thrift.set_priority_queue_rate(port, queue, s.rate_pps)
            if s.depth:
                self.thrift.set_priority_queue_depth(port, queue, s.depth)

    def send(self, port: int, frames: list[bytes]) -> None:
        """Back to back, but a breath every 8 frames (at most 800 frames/s):
        BMv2 (logging at info in the PTF runner) takes about 30 frames of a
        burst on a port (measured) before the kernel drops the rest, fewer on
        a busy machine, and that is not what a test is about."""
        with RawSender(self.iface(port)) as tx:
            for i, f in enumerate(frames):
                tx.send(f)
                if i % 8 == 7:
                    time.sleep(0.01)

    def pause(self, quanta: int, tclass: int = LOSSLESS) -> None:
        """The device behind OUT_PORT pauses (or, with 0, resumes) `tclass`."""
        self.send(OUT_PORT, [encode_pfc(PEER_MAC, {tclass: quanta})])

    def sent_out(self, port: int, timeout: float = 1.0) -> list[bytes]:
        """Data packets the switch sent out of `port` (PTF also sees what a
        test itself sends there, the pauses it injects)."""
        return [f for f in self.receive_all(port, timeout) if Ether(f).src == port_mac(port) and IP in Ether(f)]

    def pfc_out(self, port: int, timeout: float = 0.5) -> list[bytes]:
        """PFC frames the switch sent out of `port`."""
        return [f for f in self.receive_all(port, timeout)
                if Ether(f).dst == PFC_DST_MAC and Ether(f).src == port_mac(port)]

    def count(self, name: str, port: int, tclass: int = LOSSLESS) -> int:
        return self.counter(name, cell(port, tclass))[0]

    def release_held(self, held: int, quanta: int) -> None:
        """The downstream resumes: the `held` packets leave OUT_PORT in order,
        and the upstream got refreshes of `quanta`, then one resume."""
        self.pause(0)
        self.assertEqual([psn(f) for f in self.sent_out(OUT_PORT, timeout=1.0)], list(range(held)))
        times = [pfc_times(f)[LOSSLESS] for f in self.pfc_out(IN_PORT, timeout=0.2)]
        self.assertEqual(set(times[:-1]), {quanta})
        self.assertEqual(times[-1], 0, "resumed once released")


class PauseAndResumeFramesTest(LosslessTest):
    """Crossing XOFF sends one 802.1Qbb pause for the class out of the ingress
    port (not one per packet above it); draining below XON sends one resume."""

    def runTest(self):
        self.program(config(xoff=8, xon=4))
        self.thrift.set_priority_queue_rate(OUT_PORT, LOSSLESS, 10)
        self.send(IN_PORT, [data(i) for i in range(12)])
        out = self.sent_out(OUT_PORT, timeout=1.0)
        self.assertEqual([psn(f) for f in out], list(range(12)), "lossless and in order")
        frames = self.pfc_out(IN_PORT)
        self.assertEqual(len(frames), 2, "one pause, one resume")
        pause, resume = (pfc_times(f) for f in frames)
        self.assertEqual(pause, {LOSSLESS: 0xFFFF})
        self.assertEqual(resume, {LOSSLESS: 0})
        self.assertEqual(Ether(frames[0]).src, port_mac(IN_PORT))
        self.assertEqual(self.count("pfc_pause_sent", IN_PORT), 1)
        self.assertEqual(self.count("pfc_resume_sent", IN_PORT), 1)
        self.assertEqual(self.counter("egress_port_counter", IN_PORT)[0], 2,
                         "the PFC frames a port sends are counted out of it, as every frame it sends")
        self.assertEqual(self.pfc_out(OTHER_PORT, timeout=0.1), [], "only the ingress port is paused")


class ResumeIsNotReplacedByAnIntReportTest(LosslessTest):
    """A packet that both releases the cell below XON (its clone becomes the
    resume) and leaves through an INT sink that reports every packet (its
    clone would become the report): BMv2 keeps one clone a pass, so the
    resume goes and the report waits for the next packet (counted as
    yielded). Before, the report replaced the resume and the upstream
    stayed paused until its pause ran out (3.36 s here)."""

    def runTest(self):
        report = ReportPath(COLLECTOR_PORT, port_mac(COLLECTOR_PORT), neighbour_mac(COLLECTOR_PORT),
                            "10.255.0.7", "10.0.9.1", 32766)
        telemetry = int_state(self.p4info, node_id=7, ports={p: 10 for p in PORTS}, sink_ports={IN_PORT, OUT_PORT},
                              rules=(WatchRule(protocol=17, dst_ports=(4791, 4791),
                                               instructions=Instructions.of(["node_id", "queue"]), max_hops=4),),
                              report=report, reports=ReportSettings(refresh_ms=0, drop_report_interval_ms=None))
        self.program(config(xoff=8, xon=4), beside=telemetry)
        before = report_counts(self.sw, self.p4info)
        self.thrift.set_priority_queue_rate(OUT_PORT, LOSSLESS, 10)
        self.send(IN_PORT, [data(i) for i in range(12)])
        out = self.sent_out(OUT_PORT, timeout=1.5)
        self.assertEqual([psn(f) for f in out], list(range(12)), "lossless and in order, INT stripped at the sink")
        frames = [pfc_times(f) for f in self.pfc_out(IN_PORT)]
        self.assertEqual(frames, [{LOSSLESS: 0xFFFF}, {LOSSLESS: 0}], "one pause, then the resume")
        self.assertEqual(self.count("pfc_resume_sent", IN_PORT), 1)
        after = report_counts(self.sw, self.p4info)
        yielded, flow = (after[k] - before[k] for k in ("yielded", "flow"))
        self.assertEqual(yielded, 1, "the resume's packet sent no report")
        self.assertEqual(flow, 11, "every other packet reported")
        reports = [f for f in self.receive_all(COLLECTOR_PORT, 0.5) if UDP in Ether(f)]
        self.assertEqual(len(reports), 11)


class PauseIsRefreshedWhileAboveXoffTest(LosslessTest):
    """A pause of 100 ms is sent again every 50 ms while the class stays above XOFF."""

    def runTest(self):
        quanta = quanta_for(100)
        self.program(config(xoff=4, xon=2, headroom=64, quanta=quanta))
        self.thrift.set_priority_queue_rate(OUT_PORT, LOSSLESS, 20)
        self.send(IN_PORT, [data(i) for i in range(30)])       # above XOFF for ~1.3 s of draining
        out = self.sent_out(OUT_PORT, timeout=1.0)
        self.assertEqual(len(out), 30)
        times = [pfc_times(f)[LOSSLESS] for f in self.pfc_out(IN_PORT)]
        self.assertEqual(times[-1], 0, "ends with a resume")
        self.assertGreaterEqual(times.count(quanta), 10, f"refreshed about every 50 ms: {times}")


class PausedClassHoldsWhileAnotherFlowsTest(LosslessTest):
    """Paused for class 3, the port holds class 3 (none lost, order kept)
    while class 1 keeps flowing; a resume releases class 3."""

    def runTest(self):
        self.program(config(xoff=200, xon=100))
        self.pause(0xFFFF)
        frames = []
        for i in range(10):
            frames += [data(i), data(100 + i, BULK_DSCP)]
        self.send(IN_PORT, frames)
        out = self.sent_out(OUT_PORT, timeout=1.0)
        self.assertEqual([psn(f) for f in out], [100 + i for i in range(10)], "only class 1 leaves")
        self.assertEqual(self.count("pfc_held", OUT_PORT), 10)
        self.pause(0)
        out = self.sent_out(OUT_PORT, timeout=1.0)
        self.assertEqual([psn(f) for f in out], list(range(10)), "class 3 after the resume, in order")
        self.assertEqual(self.count("pfc_frames_received", OUT_PORT), 2)
        self.assertEqual(self.drops("PFC_FRAME"), 2, "PFC frames are consumed")
        self.assertEqual(self.drops("LOSSLESS_HEADROOM"), 0)


class PauseExpiresWithoutResumeTest(LosslessTest):
    """A pause of 300 ms holds the class that long, then it flows again by itself."""

    def runTest(self):
        self.program(config(xoff=200, xon=100))
        self.pause(quanta_for(300))
        t0 = time.monotonic()
        self.send(IN_PORT, [data(i) for i in range(5)])
        early = self.sent_out(OUT_PORT, timeout=0.1)
        if time.monotonic() - t0 < 0.25:                 # judged only while the pause surely runs
            self.assertEqual(early, [], "held while paused")
        out = early + self.sent_out(OUT_PORT, timeout=1.0)
        self.assertEqual([psn(f) for f in out], list(range(5)))


class HeldBurstIsNotLostTest(LosslessTest):
    """While paused, a burst of 100 packets is held whole and released in order."""

    def runTest(self):
        self.program(config(xoff=200, xon=100, headroom=100))
        self.pause(0xFFFF)
        self.send(IN_PORT, [data(i) for i in range(100)])
        self.assertEqual(self.sent_out(OUT_PORT, timeout=0.5), [])
        self.pause(0)
        out = self.sent_out(OUT_PORT, timeout=1.5)
        self.assertEqual([psn(f) for f in out], list(range(100)), "every packet, in order")
        self.assertEqual(self.count("pfc_held", OUT_PORT), 100)


class LosslessUnderABurstLargerThanTheQueueTest(LosslessTest):
    """A sender that honours PFC (as a lossless NIC: hostagent.lossless.PauseState)
    offers 100 packets at 500 packets/s into a class queue of 16 packets
    served at 100 packets/s: XOFF pauses it before the queue overflows, XON
    resumes it; every packet arrives, in order. The headroom (9 packets)
    covers 18 ms of the sender's reaction to a pause: the switch's frame, the
    sender's read of it."""

    def runTest(self):
        self.program(config(xoff=6, xon=3, headroom=9))        # at most 15 admitted from the port < 16
        self.thrift.set_priority_queue_rate(OUT_PORT, LOSSLESS, 100)
        self.thrift.set_priority_queue_depth(OUT_PORT, LOSSLESS, 16)
        nic = PauseState(LINK_MBPS)
        sock = open_socket(self.iface(IN_PORT))
        sock.setblocking(False)
        sent, deadline = 0, time.monotonic() + 20
        try:
            while sent < 100 and time.monotonic() < deadline:
                while True:
                    try:
                        nic.on_frame(sock.recv(2048), time.monotonic())
                    except BlockingIOError:
                        break
                if nic.paused(LOSSLESS, time.monotonic()):
                    time.sleep(0.0005)
                    continue
                sock.send(data(sent))
                sent += 1
                time.sleep(0.002)
        finally:
            sock.close()
        self.assertEqual(sent, 100)
        out = self.sent_out(OUT_PORT, timeout=1.0)
        self.assertEqual([psn(f) for f in out], list(range(100)), "nothing lost, in order")
        self.assertGreaterEqual(nic.summary()["pfc_frames"], 2, "paused and resumed at least once")
        self.assertEqual(self.drops("LOSSLESS_HEADROOM"), 0)


class HeadroomOverflowIsDroppedAndCountedTest(LosslessTest):
    """Beyond XOFF + headroom a lossless packet is dropped, and counted as
    such, for the switch and for its cell (pfc_headroom_dropped); the
    cell's peak (pfc_occupancy_peak) counts the first one refused."""

    def runTest(self):
        self.program(config(xoff=8, xon=4, headroom=4))
        self.thrift.register_write(PEAK_REGISTER, cell(IN_PORT, LOSSLESS), 0)
        self.pause(0xFFFF)
        self.send(IN_PORT, [data(i) for i in range(20)])
        self.assertEqual(self.sent_out(OUT_PORT, timeout=0.5), [])
        self.assertEqual(self.drops("LOSSLESS_HEADROOM"), 8, "12 admitted, 8 beyond the headroom")
        self.assertEqual(self.count("pfc_headroom_dropped", IN_PORT), 8, "counted for the cell they arrived in")
        self.assertEqual(self.thrift.register_read(PEAK_REGISTER, cell(IN_PORT, LOSSLESS)), 13,
                         "the cell's peak counts a refused packet: 5 arrived beyond XOFF (fabric tune reads it)")
        self.pause(0)
        self.assertEqual([psn(f) for f in self.sent_out(OUT_PORT, timeout=1.0)], list(range(12)))


class PortThresholdsReplaceTheClassesTest(LosslessTest):
    """An ingress port's own thresholds for a class (pfc_port_thresholds)
    replace the class's for its packets only: with the peer behind OUT_PORT
    pausing, 12 packets from IN_PORT (xoff 4, headroom 4 of its own) are 8
    admitted and 4 refused, and IN_PORT is paused; 12 from OTHER_PORT (the
    class's xoff 200) are all admitted and OTHER_PORT is not paused. Once
    resumed, the admitted leave in order, and IN_PORT is resumed below its
    own XON (held packets keep their port's thresholds through the hold
    loop)."""

    def runTest(self):
        self.program(config(xoff=200, xon=100, headroom=100),
                     thresholds={(IN_PORT, LOSSLESS): PfcThresholds(xoff=4, xon=2, headroom=4)})
        self.pause(0xFFFF)
        self.send(IN_PORT, [data(i) for i in range(12)])
        self.send(OTHER_PORT, [data(100 + i) for i in range(12)])
        self.assertEqual(self.sent_out(OUT_PORT, timeout=0.5), [])
        self.assertEqual(self.drops("LOSSLESS_HEADROOM"), 4, "IN_PORT: 8 admitted (its xoff 4 + headroom 4), 4 refused")
        self.assertEqual((self.count("pfc_headroom_dropped", IN_PORT), self.count("pfc_headroom_dropped", OTHER_PORT)),
                         (4, 0), "the refused packets counted for IN_PORT's cell, whose headroom was short")
        self.assertEqual(self.count("pfc_pause_sent", IN_PORT), 1, "IN_PORT paused at its own XOFF")
        self.assertEqual(self.count("pfc_pause_sent", OTHER_PORT), 0, "OTHER_PORT below the class's XOFF")
        self.pause(0)
        out = [psn(f) for f in self.sent_out(OUT_PORT, timeout=1.5)]
        self.assertEqual(sorted(out), list(range(8)) + list(range(100, 112)), "every admitted packet, none twice")
        self.assertEqual([p for p in out if p < 100], list(range(8)), "IN_PORT's in order")
        frames = [pfc_times(f) for f in self.pfc_out(IN_PORT)]
        self.assertEqual((frames[0], frames[-1]), ({LOSSLESS: 0xFFFF}, {LOSSLESS: 0}), "paused, then resumed")
        self.assertEqual(self.count("pfc_resume_sent", IN_PORT), 1)
        self.assertEqual(self.pfc_out(OTHER_PORT, timeout=0.1), [], "OTHER_PORT never paused")


class DscpToClassAndQueueTest(LosslessTest):
    """DSCP picks the class and its queue: a backlogged class 1 (its queue at
    20 pps) does not hold class 3 back; per-class counters count each, and
    each queue's depth is recorded apart."""

    def runTest(self):
        self.program(config(xoff=200, xon=100))
        self.thrift.set_priority_queue_rate(OUT_PORT, BULK, 20)
        self.send(IN_PORT, [data(100 + i, BULK_DSCP) for i in range(10)] + [data(i) for i in range(10)])
        out = self.sent_out(OUT_PORT, timeout=1.0)
        self.assertEqual(len(out), 20)
        order = [dscp(f) for f in out]
        self.assertLessEqual(order.index(LOSSLESS_DSCP), 2, f"class 3 not behind class 1's queue: {order}")
        self.assertEqual(order[-1], BULK_DSCP)
        self.assertEqual(self.count("class_packets", OUT_PORT, LOSSLESS), 10)
        self.assertEqual(self.count("class_packets", OUT_PORT, BULK), 10)
        # Each queue's depth in its own cell (queue_depth.p4): class 1's last packets
        # waited behind its backlog at 20 pps; class 3's queue, served at the link's
        # 833 pps, held only the few of each 8-frame breath.
        bulk, lossless = (queue_depth.read(self.thrift, OUT_PORT, q) for q in (BULK, LOSSLESS))
        self.assertIsNotNone(bulk)
        self.assertIsNotNone(lossless)
        self.assertGreaterEqual(bulk.depth, 5, f"class 1's queue: {bulk}")
        self.assertLess(lossless.depth, bulk.depth, f"class 3's queue: {lossless}, class 1's: {bulk}")


class PcpToClassTest(LosslessTest):
    """A priority-tagged frame is classified by its PCP: it leaves untagged
    (the fabric is routed) with its class's DSCP, in its class's queue, and
    counts in its ingress port's buffer model, so it is paused with PFC
    priority = PCP. A PCP no class names leaves its DSCP as it was. A tag
    around something other than IPv4, a second tag, and a tagged frame that
    ends inside its IPv4 header are dropped and counted; the switch keeps
    forwarding. (A frame that ends inside its tag never reaches the switch:
    Linux drops it when it takes the tag off on receive.)"""

    def runTest(self):
        cfg = config(xoff=8, xon=4)
        classes = (replace(cfg.classes[0], pcp=(LOSSLESS,)), replace(cfg.classes[1], pcp=(0, BULK)), cfg.classes[2])
        self.program(replace(cfg, classes=classes))
        self.thrift.set_priority_queue_rate(OUT_PORT, LOSSLESS, 10)
        self.send(IN_PORT, [data(i, dscp=0, pcp=LOSSLESS) for i in range(12)])
        out = self.sent_out(OUT_PORT, timeout=1.0)
        self.assertEqual([psn(f) for f in out], list(range(12)), "lossless and in order")
        for f in out:
            self.assertNotIn(Dot1Q, Ether(f), "the tag ends at the routed port")
            self.assertEqual(dscp(f), LOSSLESS_DSCP, "the class travels on in its DSCP")
        self.assertEqual(self.count("class_packets", OUT_PORT, LOSSLESS), 12)
        (pause, resume) = (pfc_times(f) for f in self.pfc_out(IN_PORT))
        self.assertEqual((pause, resume), ({LOSSLESS: 0xFFFF}, {LOSSLESS: 0}), "PFC priority = the PCP")
        self.send(IN_PORT, [data(100, dscp=0, pcp=BULK), data(101, dscp=BULK_DSCP, pcp=5)])
        out = self.sent_out(OUT_PORT, timeout=0.5)
        self.assertEqual([(psn(f), dscp(f), Dot1Q in Ether(f)) for f in out],
                         [(100, BULK_DSCP, False), (101, BULK_DSCP, False)], "PCP 5 is no class's: DSCP kept")
        self.assertEqual(self.count("class_packets", OUT_PORT, BULK), 2)
        tagged = Ether(data(200, pcp=LOSSLESS))
        tagged_arp = bytes(Ether(src=HOST_MAC, dst=SWITCH_MAC) / Dot1Q(prio=LOSSLESS) / ARP())
        double = bytes(Ether(src=HOST_MAC, dst=SWITCH_MAC) / Dot1Q(prio=LOSSLESS) / tagged[Dot1Q])
        before = self.drops("NOT_IPV4"), self.drops("PARSER_ERROR")
        self.send(IN_PORT, [tagged_arp, double, bytes(tagged)[:30]])
        time.sleep(0.2)
        self.assertEqual((self.drops("NOT_IPV4") - before[0], self.drops("PARSER_ERROR") - before[1]), (2, 1))
        self.send(IN_PORT, [data(300, pcp=LOSSLESS)])
        self.assertEqual([psn(f) for f in self.sent_out(OUT_PORT, timeout=0.5)], [300], "still forwarding")


class MalformedMacControlIsDroppedAndCountedTest(LosslessTest):
    """802.3x PAUSE, a runt PFC frame and PFC on a port without PFC are
    dropped and counted; the switch keeps forwarding."""

    def runTest(self):
        self.program(config())
        good = encode_pfc(PEER_MAC, {LOSSLESS: 0xFFFF})
        pause_8023x = good[:14] + b"\x00\x01" + good[16:]
        runt = good[:34]
        self.send(OUT_PORT, [pause_8023x, runt])
        time.sleep(0.2)
        self.assertEqual(self.drops("PFC_MALFORMED"), 2)
        self.assertEqual(self.count("pfc_frames_received", OUT_PORT), 0, "neither paused anything")
        self.program(LosslessConfig(classes=(TrafficClass("bulk", BULK, BULK, (BULK_DSCP,)),)))   # PFC off
        self.send(OUT_PORT, [good])
        time.sleep(0.2)
        self.assertEqual(self.drops("PFC_PORT_OFF"), 1)
        self.send(IN_PORT, [data(0)])
        self.assertEqual(len(self.sent_out(OUT_PORT, timeout=0.5)), 1, "still forwarding")


class WatchdogDropsAStormAndRestoresTest(LosslessTest):
    """A peer that keeps pausing (100 ms pauses every 50 ms): the watchdog
    (detect 200 ms) finds the storm, drops the class's packets instead of
    holding them, and restores PFC once no pause came for 400 ms."""

    def runTest(self):
        self.program(config(xoff=200, xon=100, headroom=100,
                            watchdog=Watchdog(detect_ms=200, restore_ms=400, action="drop")))
        stop = threading.Event()

        def storm():
            with RawSender(self.iface(OUT_PORT)) as tx:
                while not stop.is_set():
                    tx.send(encode_pfc(PEER_MAC, {LOSSLESS: quanta_for(100)}))
                    stop.wait(0.05)

        stormer = threading.Thread(target=storm, daemon=True)
        stormer.start()
        try:
            time.sleep(0.1)
            with RawSender(self.iface(IN_PORT)) as tx:
                for i in range(40):                     # 0.8 s of class-3 packets at 50 pps
                    tx.send(data(i))
                    time.sleep(0.02)
        finally:
            stop.set()
            stormer.join()
        self.assertEqual(self.count("pfc_storms_detected", OUT_PORT), 1)
        dropped = self.count("pfc_storm_dropped", OUT_PORT)
        self.assertGreater(dropped, 0, "the storm's packets are dropped, not held")
        delivered = self.sent_out(OUT_PORT, timeout=0.3)
        self.assertEqual(len(delivered) + dropped, 40, "every packet either left or was dropped by the watchdog")
        time.sleep(0.6)                                  # no pause for longer than the restoration time
        self.send(IN_PORT, [data(100 + i) for i in range(5)])
        out = self.sent_out(OUT_PORT, timeout=1.0)
        self.assertEqual([psn(f) for f in out], [100 + i for i in range(5)])
        self.assertEqual(self.count("pfc_storms_restored", OUT_PORT), 1)


class PauseIsRefreshedWhileHeldTest(LosslessTest):
    """Nothing arrives and nothing leaves: the downstream paused the class,
    the packets above XOFF are held. Their rounds through the hold queue
    keep the upstream paused (100 ms pauses, again every 50 ms), as a
    switch's pause timer would; without that a paused cycle would unwind by
    itself when its pauses ran out. The resume releases them and the
    upstream."""

    def runTest(self):
        quanta = quanta_for(100)
        self.program(config(xoff=8, xon=4, headroom=32, quanta=quanta))
        self.pause(0xFFFF)
        self.send(IN_PORT, [data(i) for i in range(12)])
        time.sleep(1.0)
        self.assertGreaterEqual(self.count("pfc_pause_sent", IN_PORT), 15, "refreshed about every 50 ms for 1 s")
        self.assertEqual(self.count("pfc_resume_sent", IN_PORT), 0, "no resume while held")
        self.release_held(12, quanta)


class PauseLastsUntilXonTest(LosslessTest):
    """802.1Qbb's XOFF state lasts until the cell drains below XON. Six
    packets held (the downstream paused the class) and four more from the
    same port that leave by another port, slowly: the cell reaches XOFF
    (10 >= 8) and pauses the upstream, then drains to 6, between XON and
    XOFF, and stays there. The held packets' rounds go on refreshing the
    pause and no resume goes; the resume comes when they are released.
    (Refreshed only at XOFF, the pause would lapse: a ring of paused
    switches unwound that way whenever one cell lost a packet to a host.)"""

    def runTest(self):
        quanta = quanta_for(100)
        self.add_direct_route(f"{ELSEWHERE}/32", OTHER_PORT)
        self.forwarding = list(self.state.table_entries)
        self.program(config(xoff=8, xon=4, headroom=32, quanta=quanta))
        self.thrift.set_priority_queue_rate(OTHER_PORT, LOSSLESS, 20)
        self.pause(0xFFFF)
        self.send(IN_PORT, [data(i) for i in range(6)] + [data(100 + i, dst=ELSEWHERE) for i in range(4)])
        self.assertEqual([psn(f) for f in self.sent_out(OTHER_PORT, timeout=0.5)], [100, 101, 102, 103])
        paused = self.count("pfc_pause_sent", IN_PORT)
        time.sleep(1.0)
        self.assertGreaterEqual(self.count("pfc_pause_sent", IN_PORT) - paused, 15,
                                "6 in the cell, below XOFF: refreshed about every 50 ms for 1 s")
        self.assertEqual(self.count("pfc_resume_sent", IN_PORT), 0, "above XON: no resume")
        self.release_held(6, quanta)


class ClassChangeTest(LosslessTest):
    """A class change (Tagger): class-3 packets from IN_PORT to OUT_PORT
    leave in class 4, with its DSCP. Downstream pauses of class 4 hold them,
    of class 3 do not; above XOFF the upstream is paused in class 3, the
    class they arrived in."""

    def runTest(self):
        self.program(config(xoff=6, xon=3, headroom=32), changes={(IN_PORT, OUT_PORT, "collective"): "collective-2"})
        self.pause(0xFFFF, tclass=LOSSLESS)              # not theirs any more
        self.send(IN_PORT, [data(i) for i in range(4)])
        out = self.sent_out(OUT_PORT, timeout=0.5)
        self.assertEqual([psn(f) for f in out], list(range(4)), "class 3 paused, class 4 flows")
        self.assertEqual({dscp(f) for f in out}, {CHANGED_DSCP})
        self.assertEqual(self.count("class_packets", OUT_PORT, CHANGED), 4)
        self.pause(0, tclass=LOSSLESS)
        self.pause(0xFFFF, tclass=CHANGED)
        self.send(IN_PORT, [data(10 + i) for i in range(10)])
        self.assertEqual(self.sent_out(OUT_PORT, timeout=0.5), [], "class 4 paused: held")
        self.assertEqual(self.count("pfc_held", OUT_PORT, CHANGED), 10)
        pauses = [pfc_times(f) for f in self.pfc_out(IN_PORT, timeout=0.2)]
        self.assertEqual(pauses[:1], [{LOSSLESS: 0xFFFF}], "the upstream paused in the class they arrived in")
        self.pause(0, tclass=CHANGED)
        out = self.sent_out(OUT_PORT, timeout=1.0)
        self.assertEqual([psn(f) for f in out], [10 + i for i in range(10)])
        self.assertEqual({dscp(f) for f in out}, {CHANGED_DSCP})
        self.send(OTHER_PORT, [data(20)])               # no change from another port: leaves in class 3
        self.assertEqual([dscp(f) for f in self.sent_out(OUT_PORT, timeout=0.5)], [LOSSLESS_DSCP])


class ClassPerGlobalHopTest(LosslessTest):
    """Class changes keyed by class, as a Dragonfly's class per global hop
    installs them ({switch: all, from: global, to: any}, one rule a class):
    on the same ports class 3 leaves in class 4 and class 4 in class 5, one
    change a hop (a class-3 packet leaves in 4, not 5)."""

    def runTest(self):
        cfg = config()
        cfg = replace(cfg, classes=cfg.classes + (TrafficClass("collective-3", THIRD, THIRD, (THIRD_DSCP,), True),))
        self.program(cfg, changes={(IN_PORT, OUT_PORT, "collective"): "collective-2",
                                   (IN_PORT, OUT_PORT, "collective-2"): "collective-3"})
        self.send(IN_PORT, [data(i) for i in range(3)] + [data(10 + i, CHANGED_DSCP) for i in range(3)])
        out = {psn(f): dscp(f) for f in self.sent_out(OUT_PORT, timeout=1.0)}
        self.assertEqual(out, {**{i: CHANGED_DSCP for i in range(3)}, **{10 + i: THIRD_DSCP for i in range(3)}})
        self.assertEqual(self.count("class_packets", OUT_PORT, CHANGED), 3)
        self.assertEqual(self.count("class_packets", OUT_PORT, THIRD), 3)


class PerClassEcnTest(LosslessTest):
    """ECN profiles per traffic class (its queue): step K=0 on class 3's
    queue marks every ECN-capable class-3 packet; class 1 on the same port,
    with no profile of its own, is not marked."""

    def runTest(self):
        self.program(config(xoff=200, xon=100))
        ecn = ecn_state(self.p4info, {}, queues=8, queue_profiles={(OUT_PORT, LOSSLESS): EcnProfile.step(0)})
        self.state.table_entries = [e for e in self.state.table_entries if e.table_id not in ecn.managed_tables]
        self.state.table_entries += ecn.table_entries
        self.apply()
        self.send(IN_PORT, [data(i) for i in range(5)] + [data(100 + i, BULK_DSCP) for i in range(5)])
        out = {psn(f): Ether(f)[IP].tos & 3 for f in self.sent_out(OUT_PORT, timeout=1.0)}
        self.assertEqual(out, {**{i: CE for i in range(5)}, **{100 + i: ECT0 for i in range(5)}},
                         "class 3 marked CE, class 1 left ECT(0)")


class PausedTimeIsCountedTest(LosslessTest):
    """pfc_paused_us[port, class]: the time the peer kept the class paused,
    counted as the next frame for it arrives: up to a resume, or up to the
    end of a pause that ran out by itself."""

    def runTest(self):
        self.program(config(xoff=200, xon=100))
        with Bmv2Thrift(self.thrift_port) as thrift:
            def paused_s() -> float:
                return thrift.register_read(PAUSED_REGISTER, cell(OUT_PORT, LOSSLESS)) / 1e6

            self.pause(0xFFFF)
            time.sleep(0.5)
            self.pause(0)
            first = paused_s()
            self.assertTrue(0.45 <= first <= 0.75, f"paused ~0.5 s until the resume: {first}")
            self.pause(quanta_for(200))
            time.sleep(0.5)
            self.pause(0)                                # after the pause ran out: its 200 ms count
            self.assertAlmostEqual(paused_s() - first, 0.2, delta=0.01)
            self.assertEqual(thrift.register_read(PAUSED_REGISTER, cell(OUT_PORT, BULK)), 0)
