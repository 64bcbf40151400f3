"""PTF tests of packet trimming (p4src/include/trimming.p4).

Expected bytes come from the model of a trim (wire/trimming.py: the first
bytes of the routed packet, IPv4 total length and UDP length saying so,
the UDP checksum zeroed, the trimmed DSCP) applied to what the switch
routes (MACs rewritten, TTL decremented).

Queues are built as in the ECN tests: the egress port's data queue is
served at a few packets/s (Thrift) and a burst arrives much faster, so
packet i of a burst finds at most i packets queued (the first `threshold`
are never trimmed) and, at RATE_PPS, a burst that reaches the switch
within (COUNT - threshold) / RATE_PPS seconds fills the queue past the
threshold (the last packet is trimmed). The header queue is left
unlimited, so a trimmed header leaves at once, ahead of the data queued
before it (strict priority). Which queue a packet left from is read from
the queue depth record (queue_depth.p4: every queue's last departure time).
"""
from __future__ import annotations

from ptf_lib.base_test import HOST_MAC, SWITCH_MAC, P4RuntimeTest, neighbour_mac, port_mac
from scapy.layers.inet import IP, TCP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from control.p4constants import drop_reasons
from emulator import queue_depth
from emulator.bmv2_thrift import Bmv2Thrift
from features.int_telemetry import ReportPath, ReportSettings, int_state, report_counts
from features.trimming import TRIM_COUNTER, TrimProfile, cell, trimming_state
from hostagent.sender import RawSender
from wire.int_telemetry import (REPORT_UDP_PORT, HopMetadata, INTReportMain, TelemetryReportGroup,
                                TelemetryReportIndividual, report_frame)
from wire.roce import roce_data
from wire.trimming import TRIM_BYTES, TRIMMED_DSCP, dscp, trimmed

IN_PORT, OUT_PORT, COLLECTOR_PORT = 1, 2, 4
DATA_QUEUE, HEADER_QUEUE = 0, 1
UNLIMITED_PPS = 10_000_000
PAYLOAD = 1000


def data_packet(seq: int, payload: int = PAYLOAD, dscp_value: int = 0) -> bytes:
    return bytes(roce_data(HOST_MAC, SWITCH_MAC, "10.9.0.1", "10.0.0.2", qp=7, psn=seq, payload=payload,
                           dscp=dscp_value))


def routed(frame: bytes, port: int = OUT_PORT) -> bytes:
    """`frame` as the switch routes it out of `port`: MACs rewritten, TTL - 1, IPv4 checksum recomputed."""
    out = Ether(frame)
    out[Ether].src, out[Ether].dst = port_mac(port), neighbour_mac(port)
    out[IP].ttl -= 1
    del out[IP].chksum
    return bytes(out)


class TrimmingTest(P4RuntimeTest):
    COUNT = 14
    RATE_PPS = 5

    def setUp(self):
        super().setUp()
        self.dataplane.set_qlen(10_000)
        self.thrift = Bmv2Thrift(self.thrift_port)
        self.route_all_to(OUT_PORT)
        for queue in (DATA_QUEUE, HEADER_QUEUE):
            queue_depth.clear(self.thrift, OUT_PORT, queue)

    def tearDown(self):
        try:
            self.thrift.set_queue_rate(OUT_PORT, UNLIMITED_PPS)
            self.thrift.close()
        finally:
            super().tearDown()

    def set_profile(self, profile: TrimProfile | None) -> None:
        self.with_feature(trimming_state(self.p4info, {(OUT_PORT, DATA_QUEUE): profile} if profile else {}))

    def burst(self, frames: list[bytes]) -> list[bytes]:
        """Send `frames` back to back into the data queue served at RATE_PPS
        (the header queue unlimited); return what left, in order."""
        self.thrift.set_queue_rate(OUT_PORT, self.RATE_PPS)
        self.thrift.set_priority_queue_rate(OUT_PORT, HEADER_QUEUE, UNLIMITED_PPS)
        with RawSender(self.iface(IN_PORT)) as tx:
            for frame in frames:
                tx.send(frame)
        got = self.receive_all(OUT_PORT, timeout=max(1.0, 3.0 / self.RATE_PPS))
        self.thrift.set_queue_rate(OUT_PORT, UNLIMITED_PPS)
        self.assertEqual(len(got), len(frames), "trimming never drops: every packet leaves, whole or trimmed")
        return got

    def trims(self) -> int:
        return self.counter(TRIM_COUNTER, cell(OUT_PORT, DATA_QUEUE))[0]

    def occupancy(self) -> int:
        """What the switch counts in the data queue: admitted - departed (trimming.p4)."""
        index = cell(OUT_PORT, DATA_QUEUE)
        return (self.thrift.register_read("trim_admitted", index)
                - self.thrift.register_read("trim_departed", index)) & 0xFFFFFFFF

    def left_from(self, queue: int) -> bool:
        """Some packet left OUT_PORT's `queue` since setUp cleared its record."""
        return queue_depth.read(self.thrift, OUT_PORT, queue) is not None


class TrimAboveThresholdTest(TrimmingTest):
    """Above the threshold a packet leaves as the model's trim of it: its
    first 64 bytes, lengths, DSCP and checksums as the model says; below
    it, exactly as routed. The first `threshold` are never trimmed, the
    last is; trimmed headers leave from the header queue, ahead of data
    queued before them; the counter counts each trim; and the queue's count
    is back to 0 once it drained (no packet counted in and never out)."""

    THRESHOLD = 4

    def runTest(self):
        self.set_profile(TrimProfile(self.THRESHOLD, header_queue=HEADER_QUEUE))
        sent = [data_packet(seq) for seq in range(self.COUNT)]
        got = self.burst(sent)
        whole = {routed(f): i for i, f in enumerate(sent)}
        cut = {trimmed(routed(f)): i for i, f in enumerate(sent)}
        kinds, trimmed_seqs = [], []
        for n, frame in enumerate(got):
            if frame in whole:
                kinds.append("whole")
            elif frame in cut:
                kinds.append("trimmed")
                trimmed_seqs.append(cut[frame])
                self.assertEqual(len(frame), TRIM_BYTES)
                self.assertEqual(dscp(frame), TRIMMED_DSCP)
            else:
                self.fail(f"frame {n} is neither a routed packet nor the model's trim of one: {frame.hex()}")
        self.assertFalse([s for s in trimmed_seqs if s < self.THRESHOLD],
                         "a packet that found fewer than threshold queued was trimmed")
        self.assertIn(self.COUNT - 1, trimmed_seqs, "the last packet of the burst found the queue full: trimmed")
        self.assertLess(kinds.index("trimmed"), len(kinds) - 1 - kinds[::-1].index("whole"),
                        "a trimmed header leaves ahead of data queued before it (strict priority)")
        self.assertEqual(self.trims(), len(trimmed_seqs), "the counter counts each trim")
        self.assertTrue(self.left_from(HEADER_QUEUE), "trimmed packets leave from the header queue")
        self.assertEqual(self.occupancy(), 0, "every packet counted into the queue was counted out")


class BelowThresholdNothingTrimmedTest(TrimmingTest):
    """A threshold the burst never reaches: every packet leaves whole, in order, from the data queue."""

    def runTest(self):
        self.set_profile(TrimProfile(63, header_queue=HEADER_QUEUE))
        sent = [data_packet(seq) for seq in range(self.COUNT)]
        self.assertEqual(self.burst(sent), [routed(f) for f in sent])
        self.assertEqual(self.trims(), 0)
        self.assertFalse(self.left_from(HEADER_QUEUE))
        self.assertEqual(self.occupancy(), 0)


class HeaderClassNeverTrimmedTest(TrimmingTest):
    """Packets already marked trimmed go to the header queue and are never
    trimmed again, however full the data queue is (threshold 1), nor counted."""

    def runTest(self):
        self.set_profile(TrimProfile(1, header_queue=HEADER_QUEUE))
        sent = [data_packet(seq, dscp_value=TRIMMED_DSCP) for seq in range(self.COUNT)]
        self.assertEqual(self.burst(sent), [routed(f) for f in sent])
        self.assertEqual(self.trims(), 0)
        self.assertTrue(self.left_from(HEADER_QUEUE))
        self.assertFalse(self.left_from(DATA_QUEUE), "a header is never queued behind data")
        self.assertEqual(self.occupancy(), 0)


class ShortPacketsJoinTheirQueueTest(TrimmingTest):
    """A packet no longer than the trim has nothing to cut: above the
    threshold it joins the data queue as it is (and is counted in and out)."""

    def runTest(self):
        self.set_profile(TrimProfile(1, header_queue=HEADER_QUEUE))
        sent = [data_packet(seq, payload=0) for seq in range(self.COUNT)]      # 54 bytes, under 64
        self.assertLessEqual(len(sent[0]), TRIM_BYTES)
        self.assertEqual(self.burst(sent), [routed(f) for f in sent])
        self.assertEqual(self.trims(), 0)
        self.assertEqual(self.occupancy(), 0)


class TcpJoinsItsQueueWholeTest(TrimmingTest):
    """Only UDP is cut: TCP segments (with timestamps, as Linux sends them:
    a 64-byte trim would cut their options, which the next hop's parser
    reads) join the data queue whole past the threshold, in order, uncounted."""

    def runTest(self):
        self.set_profile(TrimProfile(2, header_queue=HEADER_QUEUE))
        sent = [bytes(Ether(src=HOST_MAC, dst=SWITCH_MAC) / IP(src="10.9.0.1", dst="10.0.0.2", id=seq)
                      / TCP(sport=1000, dport=2000, seq=seq, options=[("Timestamp", (seq, 0))])
                      / Raw(b"x" * PAYLOAD)) for seq in range(self.COUNT)]
        self.assertGreater(len(sent[0]) - 54, 0)          # options after the fixed TCP header
        self.assertEqual(self.burst(sent), [routed(f) for f in sent])
        self.assertEqual(self.trims(), 0)
        self.assertFalse(self.left_from(HEADER_QUEUE))
        self.assertEqual(self.occupancy(), 0)


class TrimmingOffLeavesEveryPacketTest(TrimmingTest):
    """No entry: the same burst leaves whole and in order, nothing counted,
    the packets' own DSCP kept (even the trimmed one's value)."""

    def runTest(self):
        self.set_profile(None)
        sent = [data_packet(seq, dscp_value=TRIMMED_DSCP if seq % 2 else 0) for seq in range(self.COUNT)]
        self.assertEqual(self.burst(sent), [routed(f) for f in sent])
        self.assertEqual(self.trims(), 0)
        self.assertFalse(self.left_from(HEADER_QUEUE))
        self.assertEqual(self.occupancy(), 0)


# -- trims in INT drop reports (int_telemetry_drop_report.p4, reason DROP_TRIMMED) ---------

NODE_ID = 7
REPORT = ReportPath(COLLECTOR_PORT, port_mac(COLLECTOR_PORT), neighbour_mac(COLLECTOR_PORT),
                    "10.255.0.7", "10.0.9.1", REPORT_UDP_PORT)
TRIMMED_REASON = drop_reasons()["TRIMMED"]


def drop_report_frame(dropped: bytes, *, seq_no: int, ingress_ts: int, reason: int = TRIMMED_REASON) -> bytes:
    """The drop report the switch sends for `dropped` (as it arrived on
    IN_PORT): Telemetry Report v2.0, D and I set, RepMdBits 1, 4 and 15 (no
    egress port: 0xFFFF), Report Length 0xFF, the packet from IPv4 on cut to
    64 bytes; outer IPv4 id 0, DF, TTL 64, UDP checksum 0."""
    meta = HopMetadata(ingress_port=IN_PORT, egress_port=0xFFFF, ingress_ts=ingress_ts, drop_queue_id=0,
                       drop_reason=reason)
    report = (TelemetryReportGroup(hw_id=0, seq_no=seq_no, node_id=NODE_ID)
              / TelemetryReportIndividual(in_type=4, report_length=0xFF, md_length=4, d=1, i=1)
              / INTReportMain(rep_md_bits=0x4801, metadata=meta) / Raw(bytes(Ether(dropped)[IP])[:64]))
    frame = report_frame(report, src_mac=REPORT.src_mac, dst_mac=REPORT.dst_mac, src_ip=REPORT.src_ip,
                         dst_ip=REPORT.collector_ip, sport=REPORT_UDP_PORT, dport=REPORT.collector_port)
    frame[IP].id, frame[IP].ttl, frame[UDP].chksum = 0, 64, 0
    return bytes(Ether(bytes(frame)))


class TrimReportTest(TrimmingTest):
    """Trimming on OUT_PORT's data queue and INT on at the switch (no sinks,
    no watchlist: only drop reports, to COLLECTOR_PORT)."""
    THRESHOLD = 4

    def set_reports(self, drop_report_interval_ms: float | None) -> None:
        feature = trimming_state(self.p4info, {(OUT_PORT, DATA_QUEUE): TrimProfile(self.THRESHOLD,
                                                                                 header_queue=HEADER_QUEUE)})
        feature.merge(int_state(self.p4info, node_id=NODE_ID, ports={p: 1000 for p in self.ports}, sink_ports=set(),
                                rules=(), report=REPORT,
                                reports=ReportSettings(refresh_ms=0, drop_report_interval_ms=drop_report_interval_ms)))
        self.state.clone_sessions = list(feature.clone_sessions)
        self.with_feature(feature)

    def trimmed_burst(self) -> tuple[list[bytes], list[int]]:
        """A burst that is trimmed above the threshold, each packet leaving
        whole or as the model's trim of it (as without reports); returns what
        was sent and the sequence numbers trimmed."""
        sent = [data_packet(seq) for seq in range(self.COUNT)]
        got = self.burst(sent)
        whole = {routed(f): i for i, f in enumerate(sent)}
        cut = {trimmed(routed(f)): i for i, f in enumerate(sent)}
        trimmed_seqs = []
        for n, frame in enumerate(got):
            if frame in cut:
                trimmed_seqs.append(cut[frame])
            else:
                self.assertIn(frame, whole, f"frame {n} is neither a routed packet nor the model's trim of one")
        self.assertIn(self.COUNT - 1, trimmed_seqs, "the last packet of the burst found the queue full: trimmed")
        self.assertEqual(self.trims(), len(trimmed_seqs), "the counter counts each trim")
        self.assertEqual(self.occupancy(), 0, "every packet counted into the queue was counted out")
        self.assertEqual(self.drops("TRIMMED"), 0, "a trim is not a drop")
        return sent, sorted(trimmed_seqs)


class TrimIsReportedAsADropTest(TrimReportTest):
    """Drop reports on: the trimmed packets leave exactly as without them,
    and the first trim makes a drop report of reason TRIMMED, its bytes the
    wire model's (the packet as it arrived, cut to 64 bytes); the other
    trims of the burst, within the rate limit's interval, are counted as
    limited, not reported. Nothing is counted as a drop."""

    def runTest(self):
        self.set_reports(drop_report_interval_ms=60_000)
        before = report_counts(self.sw, self.p4info)
        sent, trimmed_seqs = self.trimmed_burst()
        reports = self.receive_all(COLLECTOR_PORT, timeout=0.5)
        self.assertEqual(len(reports), 1, "one report per reason per interval")
        report = Ether(reports[0])
        group = TelemetryReportGroup(bytes(report[UDP].payload))
        meta = group.reports[0][INTReportMain].metadata
        self.assertEqual(meta.drop_reason, TRIMMED_REASON)
        self.assertEqual(reports[0], drop_report_frame(sent[trimmed_seqs[0]], seq_no=group.seq_no,
                                                       ingress_ts=meta.ingress_ts),
                         "the first trim's report: the packet as it arrived, cut to 64 bytes")
        after = report_counts(self.sw, self.p4info)
        self.assertEqual(after["drop"] - before["drop"], 1)
        self.assertEqual(self.counter("drop_reports_limited", TRIMMED_REASON)[0], len(trimmed_seqs) - 1,
                         "the other trims: held back by the rate limit, counted")
        self.assertEqual(sum(self.counter("drop_counter", i)[0] for i in drop_reasons().values()), 0,
                         "nothing counted as a drop")


class TrimNotReportedWithDropReportsOffTest(TrimReportTest):
    """INT on but drop reports off: the same burst is trimmed the same way,
    and nothing goes to the collector."""

    def runTest(self):
        self.set_reports(drop_report_interval_ms=None)
        _, trimmed_seqs = self.trimmed_burst()
        self.assertTrue(trimmed_seqs)
        self.assertEqual(self.receive_all(COLLECTOR_PORT, timeout=0.5), [], "no report")
        self.assertEqual(self.counter("drop_reports_limited", TRIMMED_REASON)[0], 0)
