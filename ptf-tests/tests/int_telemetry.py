"""PTF tests of INT (p4src/include/int_telemetry_source.p4, int_telemetry_egress.p4): source,
transit and sink byte layouts, E and M bits, Telemetry Report v2.0 from the
sink with consecutive sequence numbers, malformed INT dropped with its own
reason, sampling, and traffic outside the watchlist left alone.

Expected bytes are written here with struct, field by field from the specs
(INT v2.1, Telemetry Report v2.0), not with the project's Scapy encoder.
What only the switch knows (timestamps, hop latency, queue depth) is read
from the received bytes and checked for consistency instead.

Ports: 1 a host port (the watchlist matches there), 2 the destination's
port (a sink or a transit port, per test), 3 a fabric port INT packets
arrive on, 4 the way to the collector.
"""
from __future__ import annotations

import struct
import time

import ptf.testutils as tu
from ptf_lib.base_test import HOST_MAC, SWITCH_MAC, P4RuntimeTest, neighbour_mac, port_mac
from scapy.layers.inet import IP, TCP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from emulator.bmv2_thrift import Bmv2Thrift
from features.int_telemetry import (FlowKey, Instructions, ReportPath, ReportSettings, WatchRule, int_state,
                                    report_counts, source_entries)
from control.p4constants import drop_reasons
from wire.int_telemetry import TelemetryReportGroup

HOST_PORT, DST_PORT, FABRIC_PORT, COLLECTOR_PORT = 1, 2, 3, 4
NODE_ID = 7
REPORT = ReportPath(COLLECTOR_PORT, port_mac(COLLECTOR_PORT), neighbour_mac(COLLECTOR_PORT),
                    "10.255.0.7", "10.0.9.1", 32766)
BASELINE = ["node_id", "l1_ports", "hop_latency", "queue", "ingress_ts", "egress_ts"]
HPCC = ["node_id", "l1_ports", "queue", "tx_bytes", "tx_time", "link_rate"]
LINK_RATE = 1000
DS_ID = 0xAF01
TO_HOST = 0x4000   # FABRIC_DS_ID DS flag: the receiving host is the sink


def udp_packet(payload: bytes = b"gradient chunk 0123456789abcdef", sport: int = 49152, dport: int = 4791,
               src: str = "10.0.1.1", dst: str = "10.0.2.1", **ip):
    return Ether(dst=SWITCH_MAC, src=HOST_MAC) / IP(src=src, dst=dst, id=7, **ip) / UDP(sport=sport, dport=dport) \
        / Raw(payload)


def tcp_packet(options=(("MSS", 1460), ("NOP", None), ("WScale", 7)), tos: int = 0x28 | 1):
    return Ether(dst=SWITCH_MAC, src=HOST_MAC) / IP(src="10.0.1.1", dst="10.0.2.1", id=9, tos=tos) \
        / TCP(sport=40000, dport=5001, flags="PA", seq=1000, options=list(options)) / Raw(b"tcp payload bytes")


def routed(pkt, port: int) -> bytes:
    out = pkt.copy()
    out[Ether].src, out[Ether].dst = port_mac(port), neighbour_mac(port)
    out[IP].ttl -= 1
    del out[IP].chksum
    return bytes(Ether(bytes(out)))


def l4_checksum_ok(frame: bytes) -> bool:
    """The TCP/UDP checksum of an Ethernet/IPv4 frame, recomputed by Scapy, equals the one sent."""
    ip = Ether(frame)[IP]
    l4 = ip.payload
    if isinstance(l4, UDP) and l4.chksum == 0:
        return True
    sent = l4.chksum
    again = IP(bytes(ip))
    del again.payload.chksum
    return IP(bytes(again)).payload.chksum == sent


# -- INT bytes written from the specs ------------------------------------------

def shim(npt: int, words: int, npt_field: int) -> bytes:
    """Type 1 (INT-MD) | NPT | rsvd | Length | 16 bits."""
    return struct.pack("!BBH", (1 << 4) | (npt << 2), words, npt_field)


def md_header(hop_ml: int, remaining: int, bitmap: int, ds_id: int = 0, ds_ins: int = 0,
              d: int = 0, e: int = 0, m: int = 0) -> bytes:
    first = (2 << 28) | (d << 27) | (e << 26) | (m << 25) | (hop_ml << 8) | remaining
    return struct.pack("!IHHHH", first, bitmap, ds_id, ds_ins, 0)


def words_of(names) -> int:
    sizes = {"node_id": 1, "l1_ports": 1, "hop_latency": 1, "queue": 1, "ingress_ts": 2, "egress_ts": 2,
             "l2_ports": 2, "tx_utilization": 1, "buffer": 1, "checksum_complement": 1,
             "tx_bytes": 1, "tx_time": 1, "link_rate": 1}
    return sum(sizes[n] for n in names)


class Hop:
    """One hop's metadata read back from `data` in the order the bitmaps
    give (INT v2.1 section 4.7): baseline bits, DS bits, checksum last."""
    ORDER = ["node_id", "l1_ports", "hop_latency", "queue", "ingress_ts", "egress_ts", "l2_ports",
             "tx_utilization", "buffer", "tx_bytes", "tx_time", "link_rate", "checksum_complement"]

    def __init__(self, names, data: bytes):
        self.values, self.raw = {}, {}
        offset = 0
        for name in self.ORDER:
            if name not in names:
                continue
            size = 4 * words_of([name])
            chunk = data[offset:offset + size]
            self.raw[name] = chunk
            self.values[name] = int.from_bytes(chunk, "big")
            offset += size
        assert offset == len(data), (offset, len(data))


class IntTestBase(P4RuntimeTest):
    sinks: set[int] = {HOST_PORT}
    mtu = 1500
    # Unless a test is about them: a report for every sink packet, no drop reports.
    reports = ReportSettings(refresh_ms=0, drop_report_interval_ms=None)

    def setUp(self):
        super().setUp()
        self.add_direct_route("10.0.2.0/24", DST_PORT)
        self.add_direct_route("10.0.1.0/24", HOST_PORT)
        self.add_direct_route("10.0.9.0/24", COLLECTOR_PORT)
        self.base = list(self.state.table_entries)
        self.watch()

    def watch(self, *rules: WatchRule, sinks=None, mtu=None, reports: ReportSettings | None = None,
              ports=(HOST_PORT,), raised_ports=frozenset(), raised_flows=()) -> None:
        """Make the switch's INT state this: `rules` on `ports` (HOST_PORT),
        the given sink ports, reports to COLLECTOR_PORT; `raised_ports` and
        `raised_flows` ((flow, port)) sample every packet."""
        sinks = self.sinks if sinks is None else sinks
        int_entries = int_state(self.p4info, node_id=NODE_ID, ports={p: LINK_RATE for p in self.ports},
                                sink_ports=set(sinks), rules=(), report=REPORT,
                                mtu=self.mtu if mtu is None else mtu, reports=reports or self.reports)
        int_entries.table_entries += source_entries(self.p4info, tuple(rules), list(ports), frozenset(raised_ports),
                                                    list(raised_flows))
        self.state = self.empty_state()
        self.state.table_entries = list(self.base) + int_entries.table_entries
        self.state.clone_sessions = list(int_entries.clone_sessions)
        self.apply()

    def send(self, port: int, pkt) -> None:
        tu.send_packet(self, port, bytes(pkt))

    def one(self, port: int, timeout: float = 2.0) -> bytes:
        result = tu.dp_poll(self, device_number=0, port_number=port, timeout=timeout)
        self.assertIsInstance(result, self.dataplane.PollSuccess, f"nothing left port {port}")
        return bytes(result.packet)

    def report_counts(self) -> dict[str, int]:
        return report_counts(self.sw, self.p4info)

    def int_packet(self, names, hops: list[bytes], remaining: int, payload_pkt=None, npt_field: int = 4791,
                   hop_ml: int | None = None, ver: int = 2, shim_words: int | None = None,
                   ds_flags: int = 0) -> bytes:
        """A UDP packet as an upstream switch sends it: INT with `hops` on
        the stack (top first), built from the spec."""
        ins = Instructions.of(names)
        hop_ml = ins.hop_ml if hop_ml is None else hop_ml
        stack = b"".join(hops)
        words = 3 + len(stack) // 4 if shim_words is None else shim_words
        header = bytearray(md_header(hop_ml, remaining, ins.bitmap, ins.ds_id, ins.ds_bits))
        header[10:12] = struct.pack("!H", ds_flags)
        header[0] = (ver << 4) | (header[0] & 0x0F)
        int_bytes = shim(1, words, npt_field) + bytes(header) + stack
        inner = payload_pkt if payload_pkt is not None else udp_packet()
        l4 = inner[UDP]
        pkt = Ether(dst=SWITCH_MAC, src=neighbour_mac(FABRIC_PORT)) / IP(bytes(inner[IP]))
        pkt[UDP].dport = 6000
        pkt[UDP].remove_payload()
        pkt = pkt / Raw(int_bytes + bytes(l4.payload))
        del pkt[IP].len, pkt[IP].chksum, pkt[UDP].len, pkt[UDP].chksum
        return bytes(Ether(bytes(pkt)))


# -- source ---------------------------------------------------------------------

class SourcePushesShimHeaderAndItsHopTest(IntTestBase):
    """Host port in, transit port out: shim (NPT 1, original port), INT-MD
    header, the source's own hop; lengths and both checksums right."""
    sinks: set[int] = set()

    def runTest(self):
        self.watch(WatchRule(instructions=Instructions.of(BASELINE), max_hops=5))
        pkt = udp_packet()
        self.send(HOST_PORT, pkt)
        out = self.one(DST_PORT)
        plain = routed(pkt, DST_PORT)
        hop_words = words_of(BASELINE)
        int_len = 4 + 12 + 4 * hop_words
        self.assertEqual(len(out), len(plain) + int_len)
        self.assertEqual(out[:14], plain[:14])
        ip = Ether(out)[IP]
        self.assertEqual(ip.len, len(plain) - 14 + int_len)
        self.assertEqual(ip.ttl, 63)
        self.assertEqual(struct.unpack("!H", out[36:38])[0], 6000, "UDP dport becomes INT_UDP_PORT")
        self.assertEqual(struct.unpack("!H", out[38:40])[0], 8 + 31 + int_len, "UDP length covers INT")
        self.assertTrue(l4_checksum_ok(out), "UDP checksum recomputed over the INT bytes")
        at = 42
        self.assertEqual(out[at:at + 4], shim(1, 3 + hop_words, 4791))
        self.assertEqual(out[at + 4:at + 16], md_header(hop_words, 4, Instructions.of(BASELINE).bitmap))
        hop = Hop(BASELINE, out[at + 16:at + int_len])
        v = hop.values
        self.assertEqual(v["node_id"], NODE_ID)
        self.assertEqual(v["l1_ports"], (HOST_PORT << 16) | DST_PORT)
        self.assertEqual(v["queue"] >> 24, 0, "queue id 0")
        self.assertLess(v["queue"] & 0xFFFFFF, 64)
        self.assertGreater(v["ingress_ts"], 0)
        self.assertGreaterEqual(v["egress_ts"], v["ingress_ts"])
        self.assertEqual(v["hop_latency"], v["egress_ts"] - v["ingress_ts"])
        self.assertEqual(out[at + int_len:], bytes(pkt[Raw]), "payload untouched, after INT")


class EveryInstructionCombinationGivesItsHopMlTest(IntTestBase):
    """All 2^6 baseline combinations, with and without the DS bits: HopML,
    shim Length and the pushed bytes follow the bitmap."""
    sinks: set[int] = set()

    def runTest(self):
        ds_names = ["tx_bytes", "tx_time", "link_rate"]
        checked = 0
        for combo in range(1, 1 << 6):
            for ds in (False, True):
                names = [n for i, n in enumerate(BASELINE) if combo >> i & 1] + (ds_names if ds else [])
                self.watch(WatchRule(instructions=Instructions.of(names), max_hops=3))
                pkt = udp_packet(sport=1000 + combo)
                self.send(HOST_PORT, pkt)
                out = self.one(DST_PORT)
                words = words_of(names)
                with self.subTest(instructions=names):
                    self.assertEqual(out[43], 3 + words, "shim Length")
                    self.assertEqual(out[48] & 0x1F, words, "HopML")
                    self.assertEqual(len(out), len(routed(pkt, DST_PORT)) + 16 + 4 * words)
                    hop = Hop(names, out[58:58 + 4 * words])
                    if "link_rate" in names:
                        self.assertEqual(hop.values["link_rate"], LINK_RATE)
                    if "tx_bytes" in names:
                        self.assertGreater(hop.values["tx_bytes"], 0)
                    v = hop.values
                    if "node_id" in names:
                        self.assertEqual(v["node_id"], NODE_ID)
                    if "l1_ports" in names:
                        self.assertEqual(v["l1_ports"], (HOST_PORT << 16) | DST_PORT)
                    if {"ingress_ts", "egress_ts"} <= set(names):
                        self.assertGreaterEqual(v["egress_ts"], v["ingress_ts"])
                        if "hop_latency" in names:
                            self.assertEqual(v["hop_latency"], v["egress_ts"] - v["ingress_ts"])
                    if {"egress_ts", "tx_time"} <= set(names):
                        self.assertEqual(v["tx_time"], v["egress_ts"] & 0xFFFFFFFF, "tx time: the egress time's low word")
                checked += 1
        self.assertEqual(checked, 126)


class UnsupportedBitsAreAllOnesTest(IntTestBase):
    """Bits 6-8 (L2 ports, tx utilisation, buffer) and bit 15 (checksum
    complement) cannot be given on BMv2: their words are all-ones, and the
    checksum complement comes last."""
    sinks: set[int] = set()

    def runTest(self):
        names = ["node_id", "l2_ports", "tx_utilization", "buffer", "tx_bytes", "checksum_complement"]
        self.watch(WatchRule(instructions=Instructions.of(names), max_hops=3))
        self.send(HOST_PORT, udp_packet())
        out = self.one(DST_PORT)
        hop = Hop(names, out[58:58 + 4 * words_of(names)])
        self.assertEqual(hop.values["node_id"], NODE_ID)
        for name in ("l2_ports", "tx_utilization", "buffer", "checksum_complement"):
            self.assertEqual(set(hop.raw[name]), {0xFF}, name)
        self.assertNotEqual(hop.raw["tx_bytes"], b"\xff" * 4)
        self.assertTrue(l4_checksum_ok(out))


class TcpSourceUsesDscpAndKeepsOptionsTest(IntTestBase):
    """TCP: DSCP becomes INT_DSCP (ECN kept), the original DSCP goes to the
    shim's upper 6 bits, INT follows the TCP options, TCP checksum valid."""
    sinks: set[int] = set()

    def runTest(self):
        self.watch(WatchRule(instructions=Instructions.of(["node_id"]), max_hops=4))
        pkt = tcp_packet()
        self.send(HOST_PORT, pkt)
        out = self.one(DST_PORT)
        self.assertEqual(out[15], (0x17 << 2) | 1, "DSCP 0x17, ECN ECT(1) kept")
        tcp_len = (out[14 + 20 + 12] >> 4) * 4
        at = 14 + 20 + tcp_len
        sent_tcp = bytes(pkt[TCP])
        self.assertEqual(out[34:50] + out[52:at], sent_tcp[:16] + sent_tcp[18:tcp_len],
                         "TCP header (but its checksum) and options unchanged")
        self.assertEqual(out[at:at + 4], shim(0, 4, (0x28 >> 2) << 2))
        self.assertEqual(struct.unpack("!I", out[at + 16:at + 20])[0], NODE_ID)
        self.assertEqual(out[at + 20:], b"tcp payload bytes")
        self.assertTrue(l4_checksum_ok(out), "TCP checksum covers INT")


class TrafficOutsideTheWatchlistIsUntouchedTest(IntTestBase):
    """A rule for UDP to 10.0.2.0/24 port 4791: another port, another
    protocol, another destination all pass unchanged."""
    sinks: set[int] = set()

    def runTest(self):
        self.watch(WatchRule(dst="10.0.2.0/24", protocol=17, dst_ports=(4791, 4791)))
        cases = {"other port": (udp_packet(dport=4792), DST_PORT),
                 "other protocol": (tcp_packet(), DST_PORT),
                 "other destination": (udp_packet(dst="10.0.9.1"), COLLECTOR_PORT)}
        for what, (pkt, port) in cases.items():
            with self.subTest(case=what):
                self.send(HOST_PORT, pkt)
                self.assertEqual(self.one(port), routed(pkt, port))
        self.send(HOST_PORT, udp_packet())
        self.assertEqual(struct.unpack("!H", self.one(DST_PORT)[36:38])[0], 6000, "the rule itself matches")


class SamplingTestBase(IntTestBase):
    """Sampling: a rule with sample N on two ports (HOST_PORT and
    FABRIC_PORT, each a place packets enter), counts from 0."""
    sinks: set[int] = set()
    N = 4

    def setUp(self):
        super().setUp()
        self.dataplane.set_qlen(10_000)
        self.rule = WatchRule(instructions=Instructions.of(["node_id"]), sample=self.N)
        with Bmv2Thrift(self.thrift_port) as thrift:
            thrift.register_reset("int_port_sample_count")
            thrift.register_reset("int_sample_count")

    BATCH = 100     # packets sent before their frames are received: a burst of 400 lost 5 on a busy machine

    def sampled(self, sends: list[tuple[int, object]]) -> list[bool]:
        """Send the packets in order; which of them left with INT (in order:
        one queue, and one ingress thread)."""
        frames = []
        for start in range(0, len(sends), self.BATCH):
            batch = sends[start:start + self.BATCH]
            for port, pkt in batch:
                self.send(port, pkt)
            got = self.receive_all(DST_PORT, timeout=1.0)
            self.assertEqual(len(got), len(batch), f"every packet forwarded (packets {start}-{start + len(batch) - 1})")
            frames += got
        return [struct.unpack("!H", f[36:38])[0] == 6000 for f in frames]

    def sampled_by_port(self, sends: list[tuple[int, object]]) -> dict[int, list[bool]]:
        """Send the packets; per ingress port, which left with INT, in the order
        sent. Packets of two ports are not judged against each other's order:
        BMv2 reads its ports in turn, and a busy machine let one port's
        packets overtake another's."""
        port_of = {pkt[UDP].sport: port for port, pkt in sends}
        for port, pkt in sends:
            self.send(port, pkt)
        frames = self.receive_all(DST_PORT, timeout=1.0)
        self.assertEqual(len(frames), len(sends), "every packet forwarded")
        got: dict[int, list[bool]] = {port: [] for port, _ in sends}
        for f in frames:
            got[port_of[struct.unpack("!H", f[34:36])[0]]].append(struct.unpack("!H", f[36:38])[0] == 6000)
        return got


class SamplingOneInNIsExactTest(SamplingTestBase):
    """sample: 4 is exactly every 4th packet entering a host port (counted
    in int_source_port, before any lookup): 400 packets from HOST_PORT
    carry INT in the 4th, 8th, ... (100 of them); packets from FABRIC_PORT
    interleaved with them do not move HOST_PORT's count."""

    def runTest(self):
        self.watch(self.rule, ports=(HOST_PORT, FABRIC_PORT))
        n = 400
        got = self.sampled([(HOST_PORT, udp_packet(sport=2000 + i)) for i in range(n)])
        self.assertEqual([i for i, s in enumerate(got) if s], list(range(self.N - 1, n, self.N)))
        # interleaved: host, fabric, fabric, host, ... each port its own count
        order = [HOST_PORT, FABRIC_PORT, FABRIC_PORT, HOST_PORT, FABRIC_PORT, HOST_PORT, FABRIC_PORT, HOST_PORT,
                 HOST_PORT, FABRIC_PORT]
        got = self.sampled_by_port([(port, udp_packet(sport=3000 + i)) for i, port in enumerate(order)])
        expected: dict[int, list[bool]] = {HOST_PORT: [], FABRIC_PORT: []}
        for port in order:
            expected[port].append((len(expected[port]) + 1) % self.N == 0)
        self.assertEqual(got, expected)


class SamplingRaisedPortIsEveryPacketTest(SamplingTestBase):
    """A raised port (every_packet, by a modify) samples every packet while
    the other port stays 1 in 4; lowered again, its count goes on where it
    stopped (raised packets are not counted), so it is exactly 1 in 4 again."""

    def runTest(self):
        self.watch(self.rule, ports=(HOST_PORT, FABRIC_PORT))
        got = self.sampled([(HOST_PORT, udp_packet(sport=2000 + i)) for i in range(6)])
        self.assertEqual(got, [False, False, False, True, False, False])
        self.watch(self.rule, ports=(HOST_PORT, FABRIC_PORT), raised_ports={HOST_PORT})
        got = self.sampled_by_port([(HOST_PORT, udp_packet(sport=2100 + i)) for i in range(8)]
                                   + [(FABRIC_PORT, udp_packet(sport=2200 + i)) for i in range(8)])
        self.assertEqual(got, {HOST_PORT: [True] * 8, FABRIC_PORT: [False, False, False, True] * 2})
        self.watch(self.rule, ports=(HOST_PORT, FABRIC_PORT))
        got = self.sampled([(HOST_PORT, udp_packet(sport=2300 + i)) for i in range(8)])
        self.assertEqual(got, [False, True, False, False, False, True, False, False],
                         "the count where it stopped: two packets since the last sample")


class SamplingRaisedFlowIsEveryPacketTest(SamplingTestBase):
    """A raised flow (int_raised_flow, looked up first at its port) carries
    INT in every packet; the port's other flows stay exactly 1 in 4,
    counted without the raised flow's packets."""

    def runTest(self):
        hot = FlowKey("10.0.1.1", "10.0.2.1", 17, 7777, 4791)
        self.watch(self.rule, ports=(HOST_PORT,), raised_flows=[(hot, HOST_PORT)])
        sends = []
        for i in range(12):
            sends.append((HOST_PORT, udp_packet(sport=7777)))
            sends.append((HOST_PORT, udp_packet(sport=5000 + i)))
        got = self.sampled(sends)
        self.assertEqual(got[0::2], [True] * 12, "the raised flow: every packet")
        self.assertEqual(got[1::2], [False, False, False, True] * 3, "the others: 1 in 4, exactly")
        self.watch(self.rule, ports=(HOST_PORT,))
        got = self.sampled([(HOST_PORT, udp_packet(sport=7777)) for _ in range(8)])
        self.assertEqual(got, [False, False, False, True] * 2, "lowered: the rule's rate again")


class SamplingRulesAtTheirOwnRatesTest(SamplingTestBase):
    """Two rules at different rates on one port (1 in 2 for port 4791, 1 in
    3 for 4792): the port looks every packet up and each rule's entry
    counts its own packets."""

    def runTest(self):
        node = Instructions.of(["node_id"])
        self.watch(WatchRule(instructions=node, dst_ports=(4791, 4791), sample=2),
                   WatchRule(instructions=node, dst_ports=(4792, 4792), sample=3))
        sends = []
        for i in range(6):
            sends += [(HOST_PORT, udp_packet(sport=6000 + i, dport=4791)),
                      (HOST_PORT, udp_packet(sport=6100 + i, dport=4792))]
        got = self.sampled(sends)
        self.assertEqual(got[0::2], [False, True] * 3)
        self.assertEqual(got[1::2], [False, False, True] * 2)


# -- transit --------------------------------------------------------------------

def spec_hop(node: int, occupancy: int) -> bytes:
    return struct.pack("!II", node, occupancy)


class TransitPushesOnTopOfTheStackTest(IntTestBase):
    """The spec's INT-MD-over-UDP example (bits 0 and 3, HopML 2, two hops,
    RemainingHopCnt 6) through a transit hop: a third hop on top, count 5,
    Length 9, the rest byte for byte."""
    sinks: set[int] = set()

    def runTest(self):
        names = ["node_id", "queue"]
        sent = self.int_packet(names, [spec_hop(2, 5), spec_hop(1, 3)], remaining=6)
        self.send(FABRIC_PORT, Ether(sent))
        out = self.one(DST_PORT)
        self.assertEqual(len(out), len(sent) + 8)
        self.assertEqual(out[42:46], shim(1, 9, 4791))
        self.assertEqual(out[46:58], md_header(2, 5, 0x9000))
        self.assertEqual(struct.unpack("!I", out[58:62])[0], NODE_ID)
        self.assertEqual(out[62], 0, "queue id")
        self.assertEqual(out[66:82], spec_hop(2, 5) + spec_hop(1, 3))
        self.assertEqual(out[82:], sent[74:], "payload")
        self.assertTrue(l4_checksum_ok(out))


class ZeroRemainingHopCountSetsETest(IntTestBase):
    sinks: set[int] = set()

    def runTest(self):
        sent = self.int_packet(["node_id", "queue"], [spec_hop(2, 5)], remaining=0)
        self.send(FABRIC_PORT, Ether(sent))
        out = self.one(DST_PORT)
        expected = bytearray(routed(Ether(sent), DST_PORT))
        expected[46] |= 0x04          # E: bit 5 of the first byte (Ver(4) D E M)
        self.assertEqual(len(out), len(sent), "nothing pushed")
        self.assertEqual(out[42:], bytes(expected[42:]))


class MtuWouldBeExceededSetsMTest(IntTestBase):
    sinks: set[int] = set()

    def runTest(self):
        sent = self.int_packet(["node_id", "queue"], [spec_hop(2, 5)], remaining=5)
        ip_len = len(sent) - 14
        self.watch(mtu=ip_len + 7)    # one 8-byte hop more would exceed it
        self.send(FABRIC_PORT, Ether(sent))
        out = self.one(DST_PORT)
        self.assertEqual(len(out), len(sent), "nothing pushed")
        self.assertEqual(out[46] & 0x02, 0x02, "M set")
        self.assertEqual(out[49], 5, "RemainingHopCnt unchanged")
        self.watch(mtu=ip_len + 8)    # exactly fits
        self.send(FABRIC_PORT, Ether(sent))
        self.assertEqual(len(self.one(DST_PORT)), len(sent) + 8)


# -- malformed INT ----------------------------------------------------------------

class MalformedIntIsDroppedWithItsReasonTest(IntTestBase):
    """Bad version, a Length beyond the packet, HopML below what the bitmap
    asks, a stack beyond INT_MAX_STACK_WORDS: dropped as INT_MALFORMED, the
    switch keeps forwarding."""
    sinks: set[int] = set()

    def runTest(self):
        names = ["node_id", "queue"]
        good = self.int_packet(names, [spec_hop(2, 5)], remaining=5)
        cases = {
            "version 1": self.int_packet(names, [spec_hop(2, 5)], remaining=5, ver=1),
            "length beyond the packet": self.int_packet(names, [spec_hop(2, 5)], remaining=5, shim_words=40,
                                                        payload_pkt=udp_packet(payload=b"x")),
            "HopML below the bitmap": self.int_packet(names, [spec_hop(2, 5)], remaining=5, hop_ml=1),
            "stack beyond 64 words": self.int_packet(names, [spec_hop(2, 5)] * 33, remaining=5),
            "shim Length below the header": self.int_packet(names, [], remaining=5, shim_words=2),
        }
        before = self.drops("INT_MALFORMED")
        for i, (what, frame) in enumerate(cases.items(), 1):
            with self.subTest(case=what):
                self.send(FABRIC_PORT, Ether(frame))
                tu.verify_no_other_packets(self, timeout=0.5)
                self.assertEqual(self.drops("INT_MALFORMED"), before + i)
        self.send(FABRIC_PORT, Ether(good))
        self.assertEqual(len(self.one(DST_PORT)), len(good) + 8, "a good INT packet still goes through")


# -- sink and reports ---------------------------------------------------------------

class SinkRestoresThePacketAndReportsTest(IntTestBase):
    """The sink port gets the original packet back byte for byte (port,
    lengths, checksum); the collector port gets a Telemetry Report v2.0
    whose inner packet is the INT packet as received, and sequence numbers
    count up by one."""
    sinks: set[int] = {DST_PORT}

    def runTest(self):
        names = ["node_id", "queue"]
        seqs, tx_bytes, sizes = [], [], []
        for i in range(5):
            original = udp_packet(payload=b"chunk %d" % i)
            sent = self.int_packet(names, [spec_hop(2, 5 + i), spec_hop(1, 3)], remaining=6, payload_pkt=original)
            self.send(FABRIC_PORT, Ether(sent))
            out = self.one(DST_PORT)
            fabric_side = original.copy()
            fabric_side[Ether].src = neighbour_mac(FABRIC_PORT)
            self.assertEqual(out, routed(fabric_side, DST_PORT), "original packet restored byte for byte")
            report = self.one(COLLECTOR_PORT)
            seq, port_bytes = self.check_report(report, sent)
            seqs.append(seq)
            tx_bytes.append(port_bytes)
            sizes.append(len(sent))
        self.assertEqual([(s - seqs[0]) % (1 << 22) for s in seqs], [0, 1, 2, 3, 4])
        # The port's tx bytes grow by each packet's length as it came in: BMv2's
        # packet length, which a validated scratch header would inflate (headers.p4).
        self.assertEqual([b - a for a, b in zip(tx_bytes, tx_bytes[1:])], sizes[1:])

    def check_report(self, frame: bytes, sent: bytes) -> tuple[int, int]:
        """The report's sequence number, and the tx bytes of the sink's port in it."""
        eth = Ether(frame)
        self.assertEqual((eth.src, eth.dst), (REPORT.src_mac, REPORT.dst_mac))
        ip = eth[IP]
        self.assertEqual((ip.src, ip.dst, ip.flags.value, ip.proto), (REPORT.src_ip, REPORT.collector_ip, 2, 17))
        self.assertEqual(ip.len, len(frame) - 14)
        udp = ip[UDP]
        self.assertEqual((udp.dport, udp.len, udp.chksum), (REPORT.collector_port, len(frame) - 34, 0))
        raw = bytes(udp.payload)
        ver_hw_seq, node = struct.unpack("!II", raw[:8])
        self.assertEqual(ver_hw_seq >> 28, 2)
        self.assertEqual((ver_hw_seq >> 22) & 0x3F, 0, "hw_id")
        self.assertEqual(node, NODE_ID)
        rep_in, rep_len, md_len, flags = raw[8], raw[9], raw[10], raw[11]
        self.assertEqual(rep_in, (1 << 4) | 4, "RepType INT, InType IPv4")
        self.assertEqual(md_len, 10)
        self.assertEqual(flags >> 4, 0b0010, "F set; D, Q, I clear")
        md_bits, ds_id, ds_bits, ds_status = struct.unpack("!HHHH", raw[12:20])
        self.assertEqual((md_bits, ds_id, ds_bits, ds_status), (0x7C00, DS_ID, 0xE000, 0))
        md = raw[20:60]
        ports, latency, queue = struct.unpack("!III", md[:12])
        self.assertEqual(ports, (FABRIC_PORT << 16) | DST_PORT)
        its, ets = struct.unpack("!QQ", md[12:28])
        self.assertGreaterEqual(ets, its)
        self.assertEqual(latency, ets - its)
        self.assertEqual(queue >> 24, 0)
        tx_bytes, tx_time, rate = struct.unpack("!III", md[28:40])
        self.assertEqual(tx_time, ets & 0xFFFFFFFF)
        self.assertEqual(rate, LINK_RATE)
        self.assertGreater(tx_bytes, 0)
        inner = raw[60:]
        stack_end = 20 + 8 + 4 * (1 + sent[43])
        self.assertEqual(rep_len, (8 + 40 + len(inner)) // 4)
        self.assertEqual(inner, sent[14:14 + stack_end], "inner: IPv4 .. end of the INT stack, as received")
        group = TelemetryReportGroup(raw)   # the collector's parser agrees
        self.assertEqual(group.node_id, NODE_ID)
        return ver_hw_seq & 0x3FFFFF, tx_bytes



class TxBytesCountEveryPacketTest(SinkRestoresThePacketAndReportsTest):
    """A port's tx bytes count the packets without INT that left it as well,
    from a host's port (which counts them for its 1 in N) and from a fabric
    port: egress counts them without INT's table (IntTxBytes), each by its
    length as it came in. Read from the sink's reports of two INT packets
    sent around them."""

    def runTest(self):
        self.watch(WatchRule(protocol=6, sample=16))      # HOST_PORT counts; a UDP packet never takes INT
        plain = [(HOST_PORT, udp_packet(payload=b"h" * 100)), (FABRIC_PORT, udp_packet(payload=b"f" * 300)),
                 (HOST_PORT, udp_packet(payload=b"h" * 1000))]
        readings = []
        for between in ([], plain):
            for port, pkt in between:
                self.send(port, pkt)
                self.assertEqual(len(self.one(DST_PORT)), len(pkt), "left without INT")
            sent = self.int_packet(["node_id", "queue"], [spec_hop(1, 3)], remaining=6)
            self.send(FABRIC_PORT, Ether(sent))
            self.one(DST_PORT)
            readings.append(self.check_report(self.one(COLLECTOR_PORT), sent)[1])
        self.assertEqual(readings[1] - readings[0], sum(len(pkt) for _, pkt in plain) + len(sent))

class SinkOnTcpRestoresDscpAndChecksumTest(IntTestBase):
    """Source and sink on one switch (host port in, host port out): the TCP
    packet leaves exactly as it came, DSCP and checksum included, and a
    report with an empty stack goes to the collector."""
    sinks: set[int] = {HOST_PORT, DST_PORT}

    def runTest(self):
        self.watch(WatchRule(instructions=Instructions.of(["node_id", "hop_latency"]), max_hops=4))
        pkt = tcp_packet()
        self.send(HOST_PORT, pkt)
        self.assertEqual(self.one(DST_PORT), routed(pkt, DST_PORT))
        report = self.one(COLLECTOR_PORT)
        inner = IP(bytes(Ether(report)[UDP].payload)[60:])
        self.assertEqual(inner.tos >> 2, 0x17)


class SinkOnUdpReportsWithAndWithoutAStackTest(IntTestBase):
    """Reports of packets that arrive with a stack (from the fabric) in turn
    with reports of UDP packets whose source and sink is this switch (no
    stack): each UDP packet leaves as it came, each report's inner packet
    ends where its stack does, and the sequence numbers count up by one.
    (Copying an absent stack into a report once crashed BMv2: the sink
    saves a stack only when the packet has one.)"""
    sinks: set[int] = {HOST_PORT, DST_PORT}

    def runTest(self):
        names = ["node_id", "queue"]
        self.watch(WatchRule(instructions=Instructions.of(names), max_hops=4))
        seqs = []
        for i in range(4):
            with self.subTest(packet=i, stack=True):
                original = udp_packet(payload=b"from the fabric %d" % i)
                sent = self.int_packet(names, [spec_hop(2, 5 + i), spec_hop(1, 3)], remaining=6,
                                       payload_pkt=original)
                self.send(FABRIC_PORT, Ether(sent))
                self.one(DST_PORT)
                inner = self.report_inner(self.one(COLLECTOR_PORT), seqs)
                self.assertEqual(inner, sent[14:14 + 20 + 8 + 4 + 12 + 16], "IPv4 .. the two hops of the stack")
            with self.subTest(packet=i, stack=False):
                pkt = udp_packet(payload=b"source and sink %d" % i, sport=50000 + i)
                self.send(HOST_PORT, pkt)
                self.assertEqual(self.one(DST_PORT), routed(pkt, DST_PORT), "the packet leaves as it came")
                inner = self.report_inner(self.one(COLLECTOR_PORT), seqs)
                self.assertEqual(len(inner), 20 + 8 + 4 + 12, "IPv4, UDP, shim, INT-MD header: no stack")
                ip = IP(inner[:20])
                self.assertEqual((ip.src, ip.dst, ip.len), (pkt[IP].src, pkt[IP].dst, len(pkt) - 14 + 16))
                self.assertEqual(inner[28 + 1], 3, "shim Length: the INT-MD header only")
        self.assertEqual([(s - seqs[0]) % (1 << 22) for s in seqs], list(range(8)))

    def report_inner(self, frame: bytes, seqs: list[int]) -> bytes:
        """The inner packet of a report (its sequence number appended to `seqs`)."""
        raw = bytes(Ether(frame)[UDP].payload)
        seqs.append(struct.unpack("!I", raw[:4])[0] & 0x3FFFFF)
        self.assertEqual(Ether(frame)[UDP].len, len(frame) - 34)
        self.assertEqual(raw[9], (8 + 40 + len(raw[60:])) // 4, "RepLength")
        return raw[60:]


class DiscardBitDropsAfterReportingTest(IntTestBase):
    sinks: set[int] = {DST_PORT}

    def runTest(self):
        sent = bytearray(self.int_packet(["node_id"], [struct.pack("!I", 3)], remaining=4))
        sent[46] |= 0x08                  # D
        self.send(FABRIC_PORT, Ether(bytes(sent)))
        self.one(COLLECTOR_PORT)
        tu.verify_no_packet(self, bytes(sent), (0, DST_PORT), timeout=0.5)


class ToHostSourceSetsTheFlagTest(IntTestBase):
    """A watchlist rule with to_host: the source's INT-MD header carries the
    fabric's DS flag TO_HOST (0x4000)."""
    sinks: set[int] = set()

    def runTest(self):
        self.watch(WatchRule(instructions=Instructions.of(HPCC), max_hops=5, to_host=True))
        self.send(HOST_PORT, udp_packet())
        out = self.one(DST_PORT)
        ds_id, _ins, ds_flags = struct.unpack("!HHH", out[42 + 4 + 6:42 + 4 + 12])
        self.assertEqual((ds_id, ds_flags & TO_HOST), (DS_ID, TO_HOST))   # (and CHANGED: a new flow's first hop)


class ToHostSinkPushesItsHopAndKeepsIntTest(IntTestBase):
    """A packet whose host is its sink (TO_HOST) leaving on a sink port: the
    switch pushes its own hop (HPCC's last hop: the receiver's link), keeps
    the shim, header, stack and INT's UDP port, and sends no report."""
    sinks: set[int] = {DST_PORT}

    def runTest(self):
        upstream = struct.pack("!IIIIII", 1, (5 << 16) | 6, 3, 1000, 2000, 100)
        sent = self.int_packet(HPCC, [upstream], remaining=6, ds_flags=TO_HOST)
        before = self.report_counts()
        self.send(FABRIC_PORT, Ether(sent))
        out = self.one(DST_PORT)
        hop_bytes = 4 * words_of(HPCC)
        self.assertEqual(len(out), len(sent) + hop_bytes, "one hop more")
        self.assertEqual(struct.unpack("!H", out[36:38])[0], 6000, "still INT's UDP port")
        self.assertEqual(out[42 + 1], sent[42 + 1] + hop_bytes // 4, "shim length grew by a hop")
        self.assertEqual(struct.unpack("!H", out[44:46])[0], 4791, "the original port kept in the shim")
        top = Hop(HPCC, out[58:58 + hop_bytes]).values
        self.assertEqual((top["node_id"], top["l1_ports"], top["link_rate"]),
                         (NODE_ID, (FABRIC_PORT << 16) | DST_PORT, LINK_RATE))
        self.assertGreater(top["tx_bytes"], 0)
        self.assertEqual(out[58 + hop_bytes:58 + 2 * hop_bytes], upstream, "the upstream hop below it")
        self.assertTrue(l4_checksum_ok(out))
        tu.verify_no_packet(self, b"", (0, COLLECTOR_PORT), timeout=0.3)
        self.assertEqual(self.report_counts(), before, "the host is the sink: no report")


# -- suppression, congestion and drop reports ------------------------------------

CHANGED = 0x8000   # FABRIC_DS_ID DS flag: some hop saw its flow state change
DS_NAMES = ["node_id", "tx_bytes"]


def report_flags(frame: bytes) -> dict[str, int]:
    raw = bytes(Ether(frame)[UDP].payload)
    return {"D": raw[11] >> 7 & 1, "Q": raw[11] >> 6 & 1, "F": raw[11] >> 5 & 1, "I": raw[11] >> 4 & 1}


class SuppressionReportsOnlyOnChangeTest(IntTestBase):
    """With a 10 s refresh and wide buckets the sink reports a flow's first
    packet, then only a packet whose CHANGED flag an upstream hop set, then,
    with a short refresh, the first packet after it."""
    sinks: set[int] = {DST_PORT}

    def runTest(self):
        wide = dict(latency_bucket_us=1 << 20, queue_bucket=1 << 10)
        self.watch(reports=ReportSettings(refresh_ms=10_000, drop_report_interval_ms=None, **wide))
        plain = self.int_packet(DS_NAMES, [struct.pack("!II", 3, 1000)], remaining=5)
        flagged = self.int_packet(DS_NAMES, [struct.pack("!II", 3, 2000)], remaining=5, ds_flags=CHANGED)
        sequence = [(plain, True)] + [(plain, False)] * 4 + [(flagged, True), (plain, False)]
        for i, (frame, reported) in enumerate(sequence):
            with self.subTest(packet=i, reported=reported):
                self.send(FABRIC_PORT, Ether(frame))
                self.one(DST_PORT)
                if reported:
                    self.one(COLLECTOR_PORT)
                else:
                    self.assertFalse(self.receive_all(COLLECTOR_PORT, timeout=0.3), "suppressed")
        counts = self.report_counts()
        self.assertEqual((counts["flow"], counts["suppressed"]), (2, 5))
        self.watch(reports=ReportSettings(refresh_ms=200, drop_report_interval_ms=None, **wide))
        time.sleep(0.3)
        self.send(FABRIC_PORT, Ether(plain))
        self.one(DST_PORT)
        self.one(COLLECTOR_PORT)


class TransitFlagsAChangeOnceTest(IntTestBase):
    """A transit hop sets CHANGED on a flow's first packet (nothing known
    yet) and not on the next one (same ports, same buckets)."""
    sinks: set[int] = set()

    def runTest(self):
        self.watch(reports=ReportSettings(refresh_ms=0, latency_bucket_us=1 << 20, queue_bucket=1 << 10,
                                          drop_report_interval_ms=None))
        frame = self.int_packet(DS_NAMES, [struct.pack("!II", 3, 1000)], remaining=5, payload_pkt=udp_packet(sport=7))
        flags = []
        for _ in range(2):
            self.send(FABRIC_PORT, Ether(frame))
            flags.append(struct.unpack("!H", self.one(DST_PORT)[56:58])[0])
        self.assertEqual(flags, [CHANGED, 0])


class QueueReportsAboveThresholdTest(IntTestBase):
    """A burst into a slow port: a transit hop sends a congestion report (Q
    and I set) for exactly the INT packets that saw a queue of at least the
    threshold; with a long interval, only one, the rest counted as held back."""
    sinks: set[int] = set()
    THRESHOLD = 5

    def setUp(self):
        super().setUp()
        self.dataplane.set_qlen(10_000)
        self.thrift = Bmv2Thrift(self.thrift_port)

    def tearDown(self):
        try:
            self.thrift.set_queue_rate(DST_PORT, 10_000_000)
            self.thrift.close()
        finally:
            super().tearDown()

    def burst(self, count: int) -> list[bytes]:
        self.thrift.set_queue_rate(DST_PORT, 20)
        for i in range(count):
            self.send(FABRIC_PORT, Ether(self.int_packet(["node_id", "queue"], [spec_hop(2, 1)], remaining=5,
                                                          payload_pkt=udp_packet(sport=3000 + i))))
        out = self.receive_all(DST_PORT, timeout=0.5)
        self.thrift.set_queue_rate(DST_PORT, 10_000_000)
        self.assertEqual(len(out), count)
        return out

    def runTest(self):
        self.watch(reports=ReportSettings(refresh_ms=0, queue_report_threshold=self.THRESHOLD,
                                          queue_report_interval_ms=0, drop_report_interval_ms=None))
        out = self.burst(20)
        deep = [f for f in out if struct.unpack("!I", f[62:66])[0] & 0xFFFFFF >= self.THRESHOLD]
        self.assertGreater(len(deep), 5, "the burst builds a queue")
        reports = self.receive_all(COLLECTOR_PORT, timeout=0.5)
        self.assertEqual(len(reports), len(deep))
        for r in reports:
            self.assertEqual(report_flags(r), {"D": 0, "Q": 1, "F": 1, "I": 1})
            queue = struct.unpack("!I", bytes(Ether(r)[UDP].payload)[28:32])[0]
            self.assertGreaterEqual(queue & 0xFFFFFF, self.THRESHOLD)
        before = self.report_counts()
        self.watch(reports=ReportSettings(refresh_ms=0, queue_report_threshold=self.THRESHOLD,
                                          queue_report_interval_ms=60_000, drop_report_interval_ms=None))
        out = self.burst(20)
        deep = [f for f in out if struct.unpack("!I", f[62:66])[0] & 0xFFFFFF >= self.THRESHOLD]
        self.assertLessEqual(len(self.receive_all(COLLECTOR_PORT, timeout=0.5)), 1)
        after = self.report_counts()
        self.assertEqual(after["queue"] - before["queue"] + after["queue_limited"] - before["queue_limited"],
                         len(deep))


class DropReportsCarryTheReasonTest(IntTestBase):
    """A dropped packet (TTL expired, not IPv4) makes a drop report: D set,
    RepMdBits with the ingress port and the reason; one per reason per
    interval, the rest counted."""
    sinks: set[int] = set()

    def runTest(self):
        self.watch(reports=ReportSettings(refresh_ms=0, drop_report_interval_ms=60_000))
        expired = udp_packet(ttl=1, payload=b"x" * 200)
        self.send(HOST_PORT, expired)
        report = self.one(COLLECTOR_PORT)
        self.assertEqual(report_flags(report), {"D": 1, "Q": 0, "F": 0, "I": 1})
        raw = bytes(Ether(report)[UDP].payload)
        self.assertEqual(Ether(report)[IP].len, len(report) - 14)
        self.assertEqual(raw[8] & 0x0F, 4, "InType IPv4")
        self.assertEqual((raw[9], raw[10]), (0xFF, 4), "Report Length to the end, 4 metadata words")
        self.assertEqual(struct.unpack("!H", raw[12:14])[0], 0x4801)
        self.assertEqual(struct.unpack("!HH", raw[20:24]), (HOST_PORT, 0xFFFF))
        self.assertEqual((raw[32], raw[33]), (0, drop_reasons()["TTL_EXPIRED"]))
        self.assertEqual(raw[36:], bytes(expired[IP])[:64], "the dropped packet from IPv4 on, cut to 64 bytes")
        for _ in range(5):
            self.send(HOST_PORT, expired)
        self.assertFalse(self.receive_all(COLLECTOR_PORT, timeout=0.5), "rate-limited")
        self.assertEqual(self.counter("drop_reports_limited", drop_reasons()["TTL_EXPIRED"])[0], 5)
        arp = Ether(dst="ff:ff:ff:ff:ff:ff", src=HOST_MAC, type=0x0806) / Raw(b"\x00" * 28)
        self.send(HOST_PORT, arp)
        report = Ether(self.one(COLLECTOR_PORT))
        raw = bytes(report[UDP].payload)
        self.assertEqual(raw[8] & 0x0F, 0, "InType none: not an IPv4 packet")
        self.assertEqual(raw[33], drop_reasons()["NOT_IPV4"])
        self.assertEqual(len(raw), 36)
        self.assertEqual((report[IP].len, report[UDP].len), (20 + 8 + 36, 8 + 36), "lengths without an inner packet")


class DropReportOfAnAggregationPacketTest(IntTestBase):
    """A dropped aggregation packet is reported like any other: the report's
    headers first, then the packet from IPv4 on (its aggregation header after
    its UDP header, as it arrived), cut to 64 bytes."""
    sinks: set[int] = set()

    def runTest(self):
        from wire.aggregation import Aggregation, job_port
        self.watch(reports=ReportSettings(refresh_ms=0, drop_report_interval_ms=1))
        time.sleep(0.01)                # past the interval of any earlier TTL_EXPIRED report
        expired = Ether(dst=SWITCH_MAC, src=HOST_MAC) / IP(src="10.0.1.1", dst="10.0.2.1", ttl=1) \
            / UDP(sport=job_port(3), dport=job_port(3)) / Aggregation(job=3, seq=77, slot=5)
        self.send(HOST_PORT, expired)
        report = self.one(COLLECTOR_PORT)
        self.assertEqual(report_flags(report), {"D": 1, "Q": 0, "F": 0, "I": 1})
        raw = bytes(Ether(report)[UDP].payload)
        self.assertEqual((raw[9], raw[10]), (0xFF, 4), "Report Length to the end, 4 metadata words")
        self.assertEqual(raw[33], drop_reasons()["TTL_EXPIRED"])
        self.assertEqual(raw[36:], bytes(expired[IP])[:64], "the dropped packet from IPv4 on, cut to 64 bytes")


class DropReportOfAPfcFrameTest(IntTestBase):
    """A dropped MAC control frame (here a PFC frame on a port without PFC)
    is reported as a packet that is not IPv4: the report is Ethernet, IPv4,
    UDP and the report headers, with nothing between Ethernet and IPv4 (the
    frame's PFC header, parsed again in the clone, is not emitted), so the
    next switch forwards it to the collector instead of dropping it as a
    parser error."""
    sinks: set[int] = set()

    def runTest(self):
        from wire.lossless import encode_pfc
        self.watch(reports=ReportSettings(refresh_ms=0, drop_report_interval_ms=1))
        time.sleep(0.01)                # past the interval of any earlier report for this reason
        self.send(HOST_PORT, Ether(encode_pfc(HOST_MAC, {3: 0xFFFF})))
        report = self.one(COLLECTOR_PORT)
        self.assertEqual(struct.unpack("!H", report[12:14])[0], 0x0800)
        self.assertEqual(report[14] >> 4, 4, "IPv4 right after Ethernet")
        self.assertEqual(Ether(report)[IP].len, len(report) - 14)
        self.assertEqual(report_flags(report), {"D": 1, "Q": 0, "F": 0, "I": 1})
        raw = bytes(Ether(report)[UDP].payload)
        self.assertEqual(raw[8] & 0x0F, 0, "InType none: not an IPv4 packet")
        self.assertEqual(raw[33], drop_reasons()["PFC_PORT_OFF"])
        self.assertEqual(len(raw), 36)
        self.assertEqual(Ether(report)[UDP].len, 8 + 36)


class ConsumedPfcFrameIsNotReportedTest(IntTestBase):
    """A PFC frame on a port with PFC is acted on and consumed (counted as
    PFC_FRAME): not a loss, so no drop report leaves, where the same frame
    on a port without PFC is (DropReportOfAPfcFrameTest)."""
    sinks: set[int] = set()

    def runTest(self):
        from features.lossless import LosslessConfig, PfcThresholds, TrafficClass, lossless_state
        from wire.lossless import encode_pfc
        self.watch(reports=ReportSettings(refresh_ms=0, drop_report_interval_ms=1))
        config = LosslessConfig(queues=8, classes=(TrafficClass("collective", 3, 3, (26,), True),),
                                pfc=PfcThresholds(xoff=24, xon=12, headroom=32))
        pfc = lossless_state(self.p4info, config, {p: (port_mac(p), 10.0) for p in self.ports})
        self.state.table_entries = ([e for e in self.state.table_entries if e.table_id not in pfc.managed_tables]
                                    + pfc.table_entries)
        self.state.clone_sessions += pfc.clone_sessions
        self.apply()
        consumed = self.drops("PFC_FRAME")
        time.sleep(0.01)                # past the interval of any earlier report
        self.send(HOST_PORT, Ether(encode_pfc(HOST_MAC, {3: 0})))    # a resume: leaves no port paused
        tu.verify_no_other_packets(self, timeout=0.5)
        self.assertEqual(self.drops("PFC_FRAME"), consumed + 1, "acted on and consumed")


# -- source-routed probes --------------------------------------------------------

class ProbeFollowsItsPortListTest(IntTestBase):
    """A probe leaves out of its first entry's port with that entry popped
    (and its hop pushed); after the last entry it is plain IPv4 with INT.
    More entries than SOURCE_ROUTE_MAX_HOPS is a parser error."""
    sinks: set[int] = set()

    def runTest(self):
        from hostagent.int_telemetry.probes import ETHERTYPE_SOURCE_ROUTE, probe_frame
        addrs = dict(src_mac=HOST_MAC, dst_mac=SWITCH_MAC, src_ip="10.0.1.1", dst_ip="10.0.2.1")
        two = bytes(probe_frame([COLLECTOR_PORT, DST_PORT], **addrs))
        self.send(FABRIC_PORT, Ether(two))
        out = self.one(COLLECTOR_PORT)
        self.assertEqual(struct.unpack("!H", out[12:14])[0], ETHERTYPE_SOURCE_ROUTE)
        self.assertEqual(out[14:18], bytes([1, 0]) + struct.pack("!H", DST_PORT), "one entry left")
        self.assertEqual(out[18 + 8], two[20 + 8] - 1, "TTL decremented")
        last = bytes(probe_frame([DST_PORT], **addrs))
        self.send(FABRIC_PORT, Ether(last))
        out = self.one(DST_PORT)
        self.assertEqual(struct.unpack("!H", out[12:14])[0], 0x0800, "plain IPv4 after the last entry")
        self.assertEqual(out[42:46], shim(1, 3 + 2, 6100))
        self.assertEqual(struct.unpack("!II", out[58:66]), (NODE_ID, (FABRIC_PORT << 16) | DST_PORT))
        self.assertTrue(l4_checksum_ok(out))
        before = self.drops("PARSER_ERROR")
        empty = two[:14] + bytes([0, 0]) + two[20:]
        too_long = two[:14] + bytes([17, 0]) + struct.pack("!H", DST_PORT) * 17 + two[20:]
        for frame in (empty, too_long):
            self.send(FABRIC_PORT, Ether(frame))
        tu.verify_no_other_packets(self, timeout=0.5)
        self.assertEqual(self.drops("PARSER_ERROR"), before + 2, "an empty or too long list is a parser error")
