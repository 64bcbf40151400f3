"""INT v2.1 / Telemetry Report v2.0 layers against bytes written by hand
from the specs' figures (p4lang/p4-applications telemetry/specs INT.mdk
section "Examples", telemetry_report.mdk section "Examples of Telemetry
Reports"), and the reference model's source -> transit -> sink -> report."""
import pytest
from scapy.layers.inet import IP, TCP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Packet, Raw, bind_layers
from scapy.fields import ByteField

from wire.int_telemetry import (DS_LINK_RATE, DS_TX_BYTES, DS_TX_TIMESTAMP, FABRIC_DS_ID, INS_CHECKSUM_COMPLEMENT,
                                   INS_EGRESS_TS, INS_HOP_LATENCY, INS_INGRESS_TS, INS_L1_PORTS, INS_NODE_ID,
                                   INS_QUEUE, INT_DSCP, INT_REPORT_MAIN_LENGTH, INT_UDP_PORT, MD_HEADER_LENGTH,
                                   REP_MD_DROP, REPORT_GROUP_LENGTH, REPORT_INDIVIDUAL_LENGTH, REPORT_UDP_PORT,
                                   SHIM_LENGTH, HopMetadata, INTMetadataHeader, INTMetadataStack, INTReportMain,
                                   INTShim, IntModelError, TelemetryReportGroup, TelemetryReportIndividual,
                                   int_layout, int_report, int_sink, int_source, int_transit, md_bits_for,
                                   report_frame, report_layout)


def h(text: str) -> bytes:
    """Hex with spaces and line breaks allowed."""
    return bytes.fromhex("".join(text.split()))


MACS = dict(src="0a:00:01:00:00:01", dst="0a:00:00:00:01:01")

# ---------------------------------------------------------------------------
# INT v2.1, "Example with INT-MD in-between UDP header and UDP payload":
# shim Type=1 NPT=1 Length=7 (original UDP port XYZ), Ver=2, HopML=2,
# RemainingHopCnt=6, bitmap bits 0 and 3 (node id, queue id + occupancy),
# two hops on the stack (hop2 on top), then the UDP payload.
SPEC_UDP_INT = h("""
    14 07 12 b7
    20 00 02 06
    90 00 00 00
    00 00 00 00
    00 00 00 02   00 00 00 05
    00 00 00 01   00 00 00 03
""")


def spec_udp_packet():
    return (IP(src="10.0.1.1", dst="10.0.4.1", id=7, flags="DF") / UDP(sport=49152, dport=INT_UDP_PORT, chksum=0)
            / INTShim(type=1, npt=1, orig_dport=4791)
            / INTMetadataHeader(hop_ml=2, remaining_hop_cnt=6, instruction_bitmap=INS_NODE_ID | INS_QUEUE)
            / INTMetadataStack(hops=[HopMetadata(node_id=2, queue_id=0, queue_occupancy=5),
                                     HopMetadata(node_id=1, queue_id=0, queue_occupancy=3)])
            / Raw(b"payload!"))


def test_spec_example_int_md_over_udp_bytes():
    built = bytes(spec_udp_packet())
    assert built[28:28 + len(SPEC_UDP_INT)] == SPEC_UDP_INT
    assert built[28 + len(SPEC_UDP_INT):] == b"payload!"


def test_spec_example_int_md_over_udp_dissects():
    pkt = IP(bytes(spec_udp_packet()))
    shim, md, stack = pkt[INTShim], pkt[INTMetadataHeader], pkt[INTMetadataStack]
    assert (shim.type, shim.npt, shim.length, shim.orig_dport) == (1, 1, 7, 4791)
    assert (md.version, md.d, md.e, md.m, md.hop_ml, md.remaining_hop_cnt) == (2, 0, 0, 0, 2, 6)
    assert md.instruction_bitmap == 0x9000
    assert [(x.node_id, x.queue_occupancy) for x in stack.hops] == [(2, 5), (1, 3)]
    assert pkt[Raw].load == b"payload!"


# INT v2.1, "Example with INT-MD over TCP": DSCP 0x17 marks INT, shim Type=1
# NPT=0 Length=7, the original DSCP in the upper 6 bits of the last byte.
SPEC_TCP_INT = h("""
    10 07 00 28
    20 00 02 06
    90 00 00 00
    00 00 00 00
    00 00 00 02   00 00 00 05
    00 00 00 01   00 00 00 03
""")


def test_spec_example_int_md_over_tcp_bytes_and_dscp_dissection():
    pkt = (IP(src="10.0.1.1", dst="10.0.4.1", tos=INT_DSCP << 2) / TCP(sport=40000, dport=5001, flags="A")
           / INTShim(type=1, npt=0, orig_dscp=0x0A)
           / INTMetadataHeader(hop_ml=2, remaining_hop_cnt=6, instruction_bitmap=0x9000)
           / INTMetadataStack(hops=[HopMetadata(node_id=2, queue_id=0, queue_occupancy=5),
                                    HopMetadata(node_id=1, queue_id=0, queue_occupancy=3)])
           / Raw(b"tcp data"))
    raw = bytes(pkt)
    assert raw[1] == 0x5C                                   # DSCP 0x17, ECN 0
    assert raw[40:40 + len(SPEC_TCP_INT)] == SPEC_TCP_INT   # right after the 20-byte TCP header
    back = IP(raw)
    assert back[INTShim].orig_dscp == 0x0A and back[INTShim].npt == 0
    assert [x.node_id for x in back[INTMetadataStack].hops] == [2, 1]
    assert back[Raw].load == b"tcp data"


def test_tcp_without_int_dscp_is_left_alone_and_other_tcp_bindings_still_win():
    plain = IP(bytes(IP(tos=0x28) / TCP(dport=5001) / Raw(SPEC_TCP_INT)))
    assert INTShim not in plain and plain[Raw].load == SPEC_TCP_INT

    class Probe(Packet):
        fields_desc = [ByteField("x", 0)]
    bind_layers(TCP, Probe, dport=47999)   # bound after int_headers: must still be chosen
    assert Probe in IP(bytes(IP() / TCP(dport=47999) / Raw(b"\x05")))
    assert INTShim in IP(bytes(IP(tos=INT_DSCP << 2) / TCP(dport=47999) / Raw(SPEC_TCP_INT)))


def test_importing_the_module_binds_the_int_layers():
    assert INTShim in UDP(bytes(UDP(dport=INT_UDP_PORT) / Raw(SPEC_UDP_INT)))
    assert TelemetryReportGroup in UDP(bytes(UDP(dport=REPORT_UDP_PORT) / Raw(b"\x20" + b"\x00" * 7)))


def test_fixed_lengths_match_the_spec():
    assert len(INTShim()) == SHIM_LENGTH == 4
    assert len(INTMetadataHeader(hop_ml=0)) == MD_HEADER_LENGTH == 12
    assert len(TelemetryReportGroup()) == REPORT_GROUP_LENGTH == 8
    assert len(TelemetryReportIndividual(report_length=0, md_length=0, in_type=0)) == REPORT_INDIVIDUAL_LENGTH == 4
    assert len(INTReportMain(rep_md_bits=0)) == INT_REPORT_MAIN_LENGTH == 8


# ---------------------------------------------------------------------------
# Telemetry Report v2.0, "Example with Embedded INT-MD in a TCP Packet":
# RepType=1 InType=4 MD Length=1 (queue occupancy) Report Length=23 = 2 + 1
# + 5 (IPv4) + 2 (inserted UDP) + 1 (shim) + 3 (INT-MD header) + 4 (stack)
# + 5 (TCP), F=1; the inner shim has NPT=2 and IP protocol 6.
SPEC_REPORT = h("""
    20 40 01 23   00 00 00 03
    14 17 01 20
    10 00 00 00   00 00 00 00   00 00 00 09
    45 00 00 b4   00 01 40 00   40 11 be ef   0a 00 01 01   0a 00 04 01
    c0 00 17 70   00 a0 00 00
    18 07 00 06
    20 00 02 06   90 00 00 00   00 00 00 00
    00 00 00 02   00 00 00 04   00 00 00 01   00 00 00 02
    9c 40 13 89   00 00 00 01   00 00 00 00   50 10 20 00   12 34 00 00
""")


def spec_report_inner():
    return (IP(len=180, id=1, flags="DF", ttl=64, proto=17, chksum=0xBEEF, src="10.0.1.1", dst="10.0.4.1")
            / UDP(sport=0xC000, dport=INT_UDP_PORT, len=160, chksum=0)
            / INTShim(type=1, npt=2, orig_proto=6)
            / INTMetadataHeader(hop_ml=2, remaining_hop_cnt=6, instruction_bitmap=INS_NODE_ID | INS_QUEUE)
            / INTMetadataStack(hops=[HopMetadata(node_id=2, queue_id=0, queue_occupancy=4),
                                     HopMetadata(node_id=1, queue_id=0, queue_occupancy=2)])
            / TCP(sport=40000, dport=5001, seq=1, ack=0, flags="A", window=0x2000, chksum=0x1234))


def test_spec_report_example_bytes_with_layers_and_with_builder():
    layered = (TelemetryReportGroup(hw_id=1, seq_no=0x123, node_id=3) / TelemetryReportIndividual(f=1)
               / INTReportMain(metadata=HopMetadata(queue_id=0, queue_occupancy=9)) / spec_report_inner())
    assert bytes(layered) == SPEC_REPORT
    built = int_report(spec_report_inner(), node_id=3, seq_no=0x123, hw_id=1,
                       metadata=HopMetadata(queue_id=0, queue_occupancy=9))
    assert bytes(built) == SPEC_REPORT


def test_spec_report_example_dissects():
    grp = TelemetryReportGroup(SPEC_REPORT)
    assert (grp.version, grp.hw_id, grp.seq_no, grp.node_id) == (2, 1, 0x123, 3)
    (ind,) = grp.reports
    assert (ind.rep_type, ind.in_type, ind.report_length, ind.md_length) == (1, 4, 23, 1)
    assert (ind.d, ind.q, ind.f, ind.i) == (0, 0, 1, 0)
    main = ind[INTReportMain]
    assert main.rep_md_bits == 0x1000 and main.metadata == HopMetadata(queue_id=0, queue_occupancy=9)
    assert ind[INTShim].npt == 2 and ind[INTShim].orig_proto == 6
    assert [x.node_id for x in ind[INTMetadataStack].hops] == [2, 1]
    assert ind[TCP].sport == 40000 and ind[TCP].dport == 5001   # NPT 2: the original TCP header follows


# "Example with Baseline Metadata and Truncated IPv4": MD Length 2 (L1 ports,
# queue), Report Length 14 = 2 + 2 + 5 + 5.
def test_spec_report_example_baseline_metadata_and_truncated_ipv4():
    inner = IP(src="10.0.1.1", dst="10.0.4.1", chksum=0x1111, len=1000) / TCP(chksum=0x2222)
    rep = int_report(inner, node_id=9, seq_no=0, metadata=HopMetadata(ingress_port=1, egress_port=2,
                                                                       queue_id=3, queue_occupancy=4))
    raw = bytes(rep)
    assert raw[8:12] == h("14 0e 02 20")
    assert raw[12:28] == h("50 00 00 00  00 00 00 00  00 01 00 02  03 00 00 04")
    assert len(raw) == 8 + 4 + 14 * 4


def test_drop_report_bit_15_queue_id_and_reason_then_padding():
    rep = int_report(IP() / UDP(), node_id=1, seq_no=2, dropped=True, tracked_flow=False,
                     metadata=HopMetadata(drop_queue_id=7, drop_reason=4))
    raw = bytes(rep)
    assert raw[8:12] == h("14 0a 01 80")          # D set, F clear, MD Length 1; 2 + 1 + 7 (IPv4/UDP) words
    assert raw[12:24] == h("00 01 00 00  00 00 00 00  07 04 00 00")
    main = TelemetryReportGroup(raw).reports[0][INTReportMain]
    assert main.rep_md_bits == REP_MD_DROP
    assert (main.metadata.drop_queue_id, main.metadata.drop_reason) == (7, 4)


def test_coalesced_reports_and_report_length_to_end():
    one = TelemetryReportIndividual(q=1) / INTReportMain(metadata=HopMetadata(queue_id=1, queue_occupancy=50)) \
        / IP(src="10.0.0.1") / UDP()
    two = TelemetryReportIndividual(report_length=0xFF, f=1) / INTReportMain(metadata=HopMetadata(hop_latency=12)) \
        / IP(src="10.0.0.2") / TCP()
    raw = bytes(TelemetryReportGroup(node_id=5)) + bytes(one) + bytes(two)
    grp = TelemetryReportGroup(raw)
    assert len(grp.reports) == 2
    assert grp.reports[0].q == 1 and grp.reports[0][IP].src == "10.0.0.1"
    assert grp.reports[1].report_length == 0xFF and grp.reports[1][IP].src == "10.0.0.2"
    assert grp.reports[1][INTReportMain].metadata.hop_latency == 12


# ---------------------------------------------------------------------------
# Metadata codec

def test_order_widths_and_all_ones():
    bits = INS_NODE_ID | INS_L1_PORTS | INS_HOP_LATENCY | INS_QUEUE | INS_INGRESS_TS | INS_EGRESS_TS \
        | INS_CHECKSUM_COMPLEMENT
    layout = int_layout(bits, FABRIC_DS_ID, DS_TX_BYTES | DS_TX_TIMESTAMP | DS_LINK_RATE)
    assert layout.length == 4 + 4 + 4 + 4 + 8 + 8 + 12 + 4
    meta = HopMetadata(node_id=1, ingress_port=2, egress_port=3, hop_latency=None, queue_id=4, queue_occupancy=5,
                       ingress_ts=0x0102030405060708, egress_ts=9, tx_bytes=10, tx_timestamp=11,
                       link_rate_mbps=100, checksum_complement=0xABCD)
    raw = layout.encode(meta)
    assert raw == h("""00000001 00020003 ffffffff 04000005 0102030405060708 0000000000000009
                       0000000a 0000000b 00000064 0000abcd""")
    assert layout.decode(raw) == meta          # the all-ones hop latency decodes as "not available"


def test_unknown_domain_pads_with_all_ones_into_extra_and_checksum_stays_last():
    layout = int_layout(INS_NODE_ID | INS_CHECKSUM_COMPLEMENT, 0x1234, 0x8000)  # a domain we do not know
    raw = layout.encode(HopMetadata(node_id=7, checksum_complement=1), size=16)
    assert raw == h("00000007 ffffffff ffffffff 00000001")
    assert layout.decode(raw, 16) == HopMetadata(node_id=7, checksum_complement=1, extra=b"\xff" * 8)


def test_reserved_bits_round_trip():
    layout = int_layout(INS_NODE_ID | 0x0040)           # bit 9: reserved in v2.1
    meta = HopMetadata(node_id=1, reserved=((9, 0x55),))
    assert layout.encode(meta) == h("00000001 00000055")
    assert layout.decode(layout.encode(meta)) == meta


def test_md_bits_follow_the_values_given():
    assert md_bits_for(HopMetadata(queue_id=0, queue_occupancy=1), report=True) == (INS_QUEUE, 0)
    assert md_bits_for(HopMetadata(node_id=1, tx_bytes=2), report=False) == (INS_NODE_ID, DS_TX_BYTES)
    assert md_bits_for(HopMetadata(node_id=1), report=True) == (0, 0)   # report bit 0 is reserved
    assert report_layout(INS_EGRESS_TS).length == 8


# ---------------------------------------------------------------------------
# Reference model

def udp_flow(payload=b"x" * 20, chksum=None):
    udp = UDP(sport=49152, dport=4791) if chksum is None else UDP(sport=49152, dport=4791, chksum=chksum)
    return Ether(**MACS) / IP(src="10.0.1.1", dst="10.0.4.1", tos=0x02) / udp / Raw(payload)


INSTR = INS_NODE_ID | INS_L1_PORTS | INS_HOP_LATENCY | INS_QUEUE | INS_INGRESS_TS | INS_EGRESS_TS


def hop(n, ts=1000):
    return HopMetadata(node_id=n, ingress_port=1, egress_port=2, hop_latency=n * 10, queue_id=0,
                       queue_occupancy=n, ingress_ts=ts, egress_ts=ts + n * 10)


def test_source_transit_sink_round_trip_udp():
    original = udp_flow()
    src = int_source(original, hop(1), instructions=INSTR, max_hops=3)
    assert src[UDP].dport == INT_UDP_PORT and src[INTShim].orig_dport == 4791
    assert src[INTMetadataHeader].hop_ml == 8 and src[INTMetadataHeader].remaining_hop_cnt == 2  # 4*4 + 2*8 bytes
    assert src[INTShim].length == 3 + 8
    mid = int_transit(src, hop(2))
    assert [x.node_id for x in mid[INTMetadataStack].hops] == [2, 1]
    assert mid[INTShim].length == 3 + 16 and mid[IP].len == len(original[IP]) + 4 + 12 + 64
    assert UDP(bytes(mid[UDP])).chksum == mid[UDP].chksum       # checksum recomputed, not stale
    out = int_sink(mid)
    assert bytes(out.packet) == bytes(original.__class__(bytes(original)))
    assert [x.node_id for x in out.hops] == [2, 1] and out.received[INTShim].length == 19


def test_zero_udp_checksum_stays_zero():
    src = int_source(udp_flow(chksum=0), hop(1), instructions=INS_NODE_ID)
    assert src[UDP].chksum == 0 and int_transit(src, hop(2))[UDP].chksum == 0


def test_source_transit_sink_round_trip_tcp_restores_dscp_and_keeps_ecn():
    original = Ether(**MACS) / IP(src="10.0.1.1", dst="10.0.4.1", tos=(0x0A << 2) | 3) / TCP(sport=1, dport=2) \
        / Raw(b"data")
    src = int_source(original, hop(1), instructions=INS_NODE_ID | INS_QUEUE)
    assert src[IP].tos == (INT_DSCP << 2) | 3 and src[INTShim].npt == 0 and src[INTShim].orig_dscp == 0x0A
    again = Ether(bytes(int_transit(src, hop(2))))
    assert [x.node_id for x in again[INTMetadataStack].hops] == [2, 1]
    out = int_sink(again)
    assert out.packet[IP].tos == (0x0A << 2) | 3 and out.packet[Raw].load == b"data"
    assert bytes(out.packet) == bytes(Ether(bytes(original)))


def test_remaining_hop_count_zero_sets_e_and_pushes_nothing():
    src = int_source(udp_flow(), hop(1), instructions=INS_NODE_ID, max_hops=2)
    one = int_transit(src, hop(2))
    assert one[INTMetadataHeader].remaining_hop_cnt == 0
    two = int_transit(one, hop(3))
    assert two[INTMetadataHeader].e == 1 and len(two[INTMetadataStack].hops) == 2
    assert bytes(two[INTMetadataStack]) == bytes(one[INTMetadataStack])


def test_mtu_sets_m_and_pushes_nothing():
    src = int_source(udp_flow(), hop(1), instructions=INSTR)
    out = int_transit(src, hop(2), mtu=len(src[IP]) + 10)
    assert out[INTMetadataHeader].m == 1 and len(out[INTMetadataStack].hops) == 1
    assert out[INTMetadataHeader].remaining_hop_cnt == src[INTMetadataHeader].remaining_hop_cnt


def test_model_refuses_what_it_cannot_do():
    with pytest.raises(IntModelError, match="already INT_UDP_PORT"):
        int_source(Ether() / IP() / UDP(dport=INT_UDP_PORT), hop(1), instructions=INS_NODE_ID)
    with pytest.raises(IntModelError, match="TCP or UDP"):
        int_source(Ether() / IP(proto=1) / Raw(b"icmp"), hop(1), instructions=INS_NODE_ID)
    with pytest.raises(IntModelError, match="no INT-MD"):
        int_transit(udp_flow(), hop(1))
    with pytest.raises(IntModelError, match="seq_no"):
        int_report(IP(), node_id=1, seq_no=1 << 22)


def test_report_frame_dissects_end_to_end():
    src = int_source(udp_flow(), hop(1), instructions=INSTR)
    rep = int_report(int_transit(src, hop(2))[IP], node_id=3, seq_no=77,
                     metadata=HopMetadata(ingress_port=1, egress_port=3, egress_ts=5000))
    frame = Ether(bytes(report_frame(rep)))
    grp = frame[TelemetryReportGroup]
    assert frame[UDP].dport == REPORT_UDP_PORT and grp.seq_no == 77 and grp.node_id == 3
    ind = grp.reports[0]
    assert ind[INTReportMain].metadata.egress_ts == 5000
    assert [x.node_id for x in ind[INTMetadataStack].hops] == [2, 1]
    assert ind.report_length * 4 == len(bytes(ind)) - 4
