"""The collector's fast decoder agrees with Scapy dissection of the same
reports, and names what is wrong with malformed ones without ever raising
anything else."""
import random

import pytest
from scapy.layers.inet import IP, TCP, UDP
from scapy.packet import Raw

from wire.int_telemetry import (FABRIC_DS_ID, INS_CHECKSUM_COMPLEMENT, INT_DSCP, INT_UDP_PORT, HopMetadata,
                                   INTMetadataHeader, INTMetadataStack, INTReportMain, INTShim, TelemetryReportGroup,
                                   bitmap_bit, int_report, int_source, int_transit)
from telemetry.decode import (OFFSETS, IndividualReport, InnerPacket, IntStack, MalformedReport, ReportPacket,
                              bit_positions, decode_report)


def test_offsets_come_from_the_layers():
    assert bit_positions(TelemetryReportGroup())["seq_no"] == (10, 22)
    assert OFFSETS.group.length == 8 and OFFSETS.individual.length == 4 and OFFSETS.md.length == 12
    assert bit_positions(INTShim(npt=0))["orig_dscp"] == (24, 6)
    assert bit_positions(INTShim(npt=1))["orig_dport"] == (16, 16)
    assert OFFSETS.ip.length == 20 and OFFSETS.tcp.length == 20


# ---------------------------------------------------------------------------
# Reference: the same structures, from Scapy's dissection

def scapy_reference(data: bytes) -> ReportPacket:
    grp = TelemetryReportGroup(data)
    out = ReportPacket(grp.hw_id, grp.seq_no, grp.node_id)
    for ind in grp.reports:
        rep = IndividualReport(ind.rep_type, ind.in_type, ind.d, ind.q, ind.f, ind.i)
        if INTReportMain in ind:
            main = ind[INTReportMain]
            rep.rep_md_bits, rep.ds_id, rep.ds_md_bits, rep.ds_md_status = \
                main.rep_md_bits, main.ds_id, main.ds_md_bits, main.ds_md_status
            rep.metadata = main.metadata
        if IP in ind:
            ip = ind[IP]
            l4 = ip.payload
            inner = InnerPacket(ip.src, ip.dst, ip.proto, getattr(l4, "sport", None), getattr(l4, "dport", None),
                                ip.tos >> 2, ip.len)
            if INTShim in ind:
                shim, md = ind[INTShim], ind[INTMetadataHeader]
                inner.int_stack = IntStack(shim.type, shim.npt, md.d, md.e, md.m, md.hop_ml, md.remaining_hop_cnt,
                                           md.instruction_bitmap, md.domain_specific_id, md.ds_instruction,
                                           md.ds_flags, list(ind[INTMetadataStack].hops))
                if shim.npt == 1:
                    inner.dport = shim.orig_dport
                elif shim.npt == 0:
                    inner.dscp = shim.orig_dscp
            rep.inner = inner
        out.reports.append(rep)
    return out


BASELINE_BITS = [bitmap_bit(b) for b in range(9)]
FIELDS = {
    0: dict(node_id=32), 1: dict(ingress_port=16, egress_port=16), 2: dict(hop_latency=32),
    3: dict(queue_id=8, queue_occupancy=24), 4: dict(ingress_ts=64), 5: dict(egress_ts=64),
    6: dict(l2_ingress_port=32, l2_egress_port=32), 7: dict(tx_utilization=32), 8: dict(buffer_id=8, buffer_occupancy=24),
}
DS_FIELDS = {0: dict(tx_bytes=32), 1: dict(tx_timestamp=32), 2: dict(link_rate_mbps=32)}


def random_meta(rng: random.Random, bits: int, ds_bits: int, report: bool) -> HopMetadata:
    values = {}
    for b, fields in FIELDS.items():
        if bits & bitmap_bit(b) and not (report and b == 0):
            for name, width in fields.items():
                values[name] = rng.randrange(0, (1 << width) - 1)   # never all-ones
    for b, fields in DS_FIELDS.items():
        if ds_bits & bitmap_bit(b):
            for name, width in fields.items():
                values[name] = rng.randrange(0, (1 << width) - 1)
    if report and rng.random() < 0.3:
        values.update(drop_queue_id=rng.randrange(255), drop_reason=rng.randrange(255))
    if not report and bits & INS_CHECKSUM_COMPLEMENT:
        values["checksum_complement"] = rng.randrange(0, 0xFFFFFFFF)
    return HopMetadata(**values)


def random_report(rng: random.Random) -> bytes:
    bits = sum(b for b in BASELINE_BITS if rng.random() < 0.5) | INS_CHECKSUM_COMPLEMENT * (rng.random() < 0.2)
    bits = bits or bitmap_bit(0)
    ds_bits = sum(bitmap_bit(b) for b in DS_FIELDS if rng.random() < 0.5)
    ds_id = FABRIC_DS_ID if ds_bits else 0
    use_tcp = rng.random() < 0.4
    l4 = TCP(sport=rng.randrange(1, 65535), dport=5001) if use_tcp else UDP(sport=rng.randrange(1, 65535), dport=4791)
    flow = IP(src=f"10.0.{rng.randrange(1, 9)}.1", dst="10.0.9.1", tos=rng.randrange(0, 64) << 2 if not use_tcp
              else 0x28) / l4 / Raw(b"p" * rng.randrange(0, 40))
    pkt = int_source(flow, random_meta(rng, bits, ds_bits, False), instructions=bits, ds_id=ds_id,
                     ds_instruction=ds_bits, max_hops=8)
    for _ in range(rng.randrange(0, 4)):
        pkt = int_transit(pkt, random_meta(rng, bits, ds_bits, False))
    reports = []
    for _ in range(rng.randrange(1, 4)):
        rep_bits = sum(b for b in BASELINE_BITS[1:] if rng.random() < 0.4)
        rep_ds = sum(bitmap_bit(b) for b in DS_FIELDS if rng.random() < 0.3)
        meta = random_meta(rng, rep_bits, rep_ds, True)
        grp = int_report(pkt, node_id=0, seq_no=0, metadata=meta, dropped=rng.random() < 0.2,
                         congested=rng.random() < 0.2, truncate=None if rng.random() < 0.5 else
                         len(pkt) - len(pkt[Raw]) if Raw in pkt else None)
        reports.append(bytes(grp)[8:])
    head = TelemetryReportGroup(hw_id=rng.randrange(64), seq_no=rng.randrange(1 << 22), node_id=rng.randrange(1 << 32))
    return bytes(head) + b"".join(reports)


def test_fast_decoder_agrees_with_scapy_on_random_reports():
    rng = random.Random(7)
    for _ in range(300):
        data = random_report(rng)
        assert decode_report(data) == scapy_reference(data)


def test_spec_example_report_decodes_with_original_ports_behind_inserted_udp():
    from unit.wire.test_int_telemetry import SPEC_REPORT
    pkt = decode_report(SPEC_REPORT)
    (rep,) = pkt.reports
    assert (pkt.node_id, pkt.hw_id, pkt.seq_no) == (3, 1, 0x123)
    assert rep.metadata == HopMetadata(queue_id=0, queue_occupancy=9)
    inner = rep.inner
    assert (inner.proto, inner.sport, inner.dport) == (6, 40000, 5001)       # NPT 2: TCP behind the inserted UDP
    assert [h.node_id for h in inner.int_stack.hops] == [2, 1]
    assert inner.flow == "10.0.1.1:40000>10.0.4.1:5001/tcp"


def test_tcp_int_restores_dscp_and_udp_int_restores_port():
    tcp = int_source(IP(tos=0x0A << 2) / TCP(sport=1, dport=2), HopMetadata(node_id=1), instructions=bitmap_bit(0))
    assert tcp[IP].tos >> 2 == INT_DSCP
    inner = decode_report(bytes(int_report(tcp, node_id=2, seq_no=1))).reports[0].inner
    assert inner.dscp == 0x0A and inner.dport == 2 and inner.int_stack.npt == 0
    udp = int_source(IP() / UDP(sport=1, dport=4791), HopMetadata(node_id=1), instructions=bitmap_bit(0))
    assert udp[UDP].dport == INT_UDP_PORT
    inner = decode_report(bytes(int_report(udp, node_id=2, seq_no=1))).reports[0].inner
    assert inner.dport == 4791 and inner.int_stack.npt == 1


# ---------------------------------------------------------------------------
# Malformed datagrams

def good_report() -> bytes:
    pkt = int_source(IP() / UDP(sport=1, dport=4791) / Raw(b"x" * 8), HopMetadata(node_id=1, queue_id=0,
                     queue_occupancy=1), instructions=bitmap_bit(0) | bitmap_bit(3))
    return bytes(int_report(pkt, node_id=2, seq_no=1, metadata=HopMetadata(hop_latency=3)))


def patch(data: bytes, offset: int, value: bytes) -> bytes:
    return data[:offset] + value + data[offset + len(value):]


GOOD = good_report()
INNER = 8 + 4 + 8 + 4           # group, individual header, INT main fixed, 1 word of metadata
SHIM = INNER + 20 + 8


@pytest.mark.parametrize("data,reason", [
    (b"", "truncated"),
    (GOOD[:7], "truncated"),
    (patch(GOOD, 0, b"\x10"), "bad-version"),
    (GOOD[:8], "empty"),
    (GOOD[:10], "truncated"),
    (patch(GOOD, 9, b"\x40"), "bad-length"),                      # Report Length 64 words: beyond the datagram
    (GOOD[:-4], "bad-length"),                                    # datagram shorter than Report Length says
    (patch(GOOD, 10, b"\x00"), "bad-md-length"),                  # MD Length 0 but RepMdBits asks for a word
    (patch(GOOD, 8, b"\x54"), "bad-report-type"),                 # RepType 5
    (patch(GOOD, INNER, b"\x65"), "bad-inner"),                   # inner "IPv4" with version 6
    (patch(GOOD, SHIM + 1, b"\x01"), "int-bad-length"),           # shim Length 1 word < INT-MD header
    (patch(GOOD, SHIM + 1, b"\x20"), "int-truncated"),            # stack longer than the packet
    (patch(GOOD, SHIM + 4, b"\x10"), "int-bad-version"),
    (patch(GOOD, SHIM + 6, b"\x00"), "int-bad-hop-ml"),           # HopML 0 with a non-empty stack
    (patch(GOOD, SHIM, b"\x34"), "int-unsupported"),              # INT-MX in a report's inner packet
])
def test_malformed_reports_are_named(data, reason):
    with pytest.raises(MalformedReport) as exc:
        decode_report(data)
    assert exc.value.reason == reason


def test_good_report_is_good():
    pkt = decode_report(GOOD)
    assert pkt.reports[0].metadata.hop_latency == 3
    assert pkt.reports[0].inner.int_stack.hops[0].queue_occupancy == 1


def test_random_corruption_never_raises_anything_but_malformed():
    rng = random.Random(11)
    samples = [GOOD] + [random_report(rng) for _ in range(20)]
    for _ in range(3000):
        data = bytearray(rng.choice(samples))
        for _ in range(rng.randrange(1, 4)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        if rng.random() < 0.3:
            data = data[:rng.randrange(len(data))]
        try:
            decode_report(bytes(data))
        except MalformedReport:
            pass
