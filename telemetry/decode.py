"""Fast decoding of telemetry report datagrams (the collector's hot path).

Scapy dissection costs tens of microseconds a layer; the collector reads
the fields it needs at fixed bit positions instead. Those positions are
not written here: `WireOffsets.derive()` reads them from the Scapy layers'
field definitions (wire/int_telemetry.py, scapy's IP/UDP/TCP), and the
metadata is decoded by the same MetadataLayout the layers use, so there is
still one definition. tests/unit/test_decode.py checks both paths agree.

decode_report(udp_payload) returns a ReportPacket or raises MalformedReport
whose `reason` is one short word the collector counts by.
"""
from __future__ import annotations

import socket
from dataclasses import dataclass, field
from typing import Optional

from scapy.fields import ConditionalField
from scapy.layers.inet import IP, TCP, UDP
from scapy.packet import Packet

from wire.int_telemetry import (INT_DSCP, INT_TYPE_MD, INT_UDP_PORT, INT_VERSION, IN_TYPE_IPV4,
                                   NPT_IP_PROTO, NPT_UDP_PORT, REP_TYPE_INNER_ONLY, REP_TYPE_INT,
                                   REPORT_LENGTH_TO_END, REPORT_VERSION, HopMetadata, INTMetadataHeader,
                                   INTReportMain, INTShim, TelemetryReportGroup, TelemetryReportIndividual,
                                   int_layout, report_layout, split_stack)

IP_PROTO_TCP, IP_PROTO_UDP = 6, 17


class MalformedReport(ValueError):
    """A datagram that is not a well-formed Telemetry Report v2.0; `reason`
    is a short label (e.g. "truncated", "bad-version")."""

    def __init__(self, reason: str, detail: str):
        super().__init__(f"{reason}: {detail}")
        self.reason = reason


def bit_positions(pkt: Packet) -> dict[str, tuple[int, int]]:
    """{field: (bit offset, width)} of the fixed-size fields at the start of
    a layer, in order, with its conditional fields evaluated on `pkt`; stops
    at the first variable-size (list) field."""
    out: dict[str, tuple[int, int]] = {}
    pos = 0
    for f in pkt.fields_desc:
        if isinstance(f, ConditionalField):
            if not f._evalcond(pkt):
                continue
            f = f.fld
        if getattr(f, "islist", 0) or getattr(f, "variable_size", False) or f.name == "options":
            break
        width = round(f.sz * 8)
        out[f.name] = (pos, width)
        pos += width
    return out


@dataclass(frozen=True)
class Header:
    """A fixed header read as one big-endian integer: (shift, mask) per field."""
    length: int
    fields: dict[str, tuple[int, int]]

    @classmethod
    def of(cls, pkt: Packet, names: Optional[tuple[str, ...]] = None) -> "Header":
        """The layer's fixed part, or only as far as the last of `names` reaches."""
        pos = bit_positions(pkt)
        wanted = names or tuple(pos)
        total = max(pos[n][0] + pos[n][1] for n in wanted)
        if total % 8:
            raise ValueError(f"{pkt.__class__.__name__}: {wanted} end at bit {total}, not on a byte")
        return cls(total // 8, {n: (total - pos[n][0] - pos[n][1], (1 << pos[n][1]) - 1) for n in wanted})

    def read(self, data: bytes, offset: int = 0) -> int:
        return int.from_bytes(data[offset:offset + self.length], "big")

    def get(self, word: int, name: str) -> int:
        shift, mask = self.fields[name]
        return (word >> shift) & mask


@dataclass(frozen=True)
class WireOffsets:
    group: Header
    individual: Header
    int_main: Header
    shim_udp: Header       # NPT 1
    shim_proto: Header     # NPT 2
    shim_dscp: Header      # NPT 0
    md: Header
    ip: Header
    l4_ports: Header       # first 4 bytes of UDP or TCP
    tcp: Header

    @classmethod
    def derive(cls) -> "WireOffsets":
        return cls(
            group=Header.of(TelemetryReportGroup()),
            individual=Header.of(TelemetryReportIndividual()),
            int_main=Header.of(INTReportMain()),
            shim_udp=Header.of(INTShim(npt=1)),
            shim_proto=Header.of(INTShim(npt=2)),
            shim_dscp=Header.of(INTShim(npt=0)),
            md=Header.of(INTMetadataHeader()),
            ip=Header.of(IP()),
            l4_ports=Header.of(UDP(), ("sport", "dport")),
            tcp=Header.of(TCP()),
        )


OFFSETS = WireOffsets.derive()


# ---------------------------------------------------------------------------
# Decoded structures

@dataclass
class IntStack:
    """An INT-MD header and its metadata stack (hops top first: hops[-1] is the source)."""
    int_type: int
    npt: int
    d: int
    e: int
    m: int
    hop_ml: int
    remaining_hop_cnt: int
    instruction_bitmap: int
    ds_id: int
    ds_instruction: int
    ds_flags: int
    hops: list[HopMetadata]


@dataclass
class InnerPacket:
    """The flow of the reported packet, with what INT changed restored:
    dport is the original UDP port (NPT 1), dscp the original DSCP (NPT 0),
    proto the original IP protocol (NPT 2)."""
    src: str
    dst: str
    proto: int
    sport: Optional[int]
    dport: Optional[int]
    dscp: int
    ip_len: int
    int_stack: Optional[IntStack] = None
    ecn: int = 0                      # the ECN bits as reported (3: CE, marked on the way)

    @property
    def flow(self) -> str:
        name = {IP_PROTO_TCP: "tcp", IP_PROTO_UDP: "udp"}.get(self.proto, str(self.proto))
        if self.sport is None or self.dport is None:
            return f"{self.src}>{self.dst}/{name}"
        return f"{self.src}:{self.sport}>{self.dst}:{self.dport}/{name}"


@dataclass
class IndividualReport:
    rep_type: int
    in_type: int
    d: int
    q: int
    f: int
    i: int
    rep_md_bits: int = 0
    ds_id: int = 0
    ds_md_bits: int = 0
    ds_md_status: int = 0
    metadata: Optional[HopMetadata] = None
    inner: Optional[InnerPacket] = None


@dataclass
class ReportPacket:
    hw_id: int
    seq_no: int
    node_id: int
    reports: list[IndividualReport] = field(default_factory=list)


# ---------------------------------------------------------------------------
# Decoding

def decode_report(data: bytes, o: WireOffsets = OFFSETS) -> ReportPacket:
    """Decode one telemetry report (the UDP payload). Raises MalformedReport."""
    g = o.group
    if len(data) < g.length:
        raise MalformedReport("truncated", f"{len(data)} bytes, shorter than the {g.length}-byte group header")
    word = g.read(data)
    if g.get(word, "version") != REPORT_VERSION:
        raise MalformedReport("bad-version", f"group header version {g.get(word, 'version')}, expected {REPORT_VERSION}")
    pkt = ReportPacket(g.get(word, "hw_id"), g.get(word, "seq_no"), g.get(word, "node_id"))
    pos = g.length
    while pos < len(data):
        report, pos = _decode_individual(data, pos, o)
        pkt.reports.append(report)
    if not pkt.reports:
        raise MalformedReport("empty", "group header without any individual report")
    return pkt


def _decode_individual(data: bytes, pos: int, o: WireOffsets) -> tuple[IndividualReport, int]:
    h = o.individual
    if len(data) - pos < h.length:
        raise MalformedReport("truncated", f"{len(data) - pos} bytes left at offset {pos}, "
                              f"shorter than an individual report header")
    word = h.read(data, pos)
    report = IndividualReport(h.get(word, "rep_type"), h.get(word, "in_type"), h.get(word, "d"),
                              h.get(word, "q"), h.get(word, "f"), h.get(word, "i"))
    length = h.get(word, "report_length")
    md_words = h.get(word, "md_length")
    body = pos + h.length
    end = len(data) if length == REPORT_LENGTH_TO_END else body + 4 * length
    if end > len(data):
        raise MalformedReport("bad-length", f"report at offset {pos} says {length} words, "
                              f"beyond the datagram ({len(data) - body} bytes left)")
    inner_at = body
    if report.rep_type == REP_TYPE_INT:
        m = o.int_main
        if end - body < m.length + 4 * md_words:
            raise MalformedReport("bad-length", f"report at offset {pos}: {end - body} bytes cannot hold "
                                  f"INT main contents with {md_words} metadata words")
        mw = m.read(data, body)
        report.rep_md_bits, report.ds_id = m.get(mw, "rep_md_bits"), m.get(mw, "ds_id")
        report.ds_md_bits, report.ds_md_status = m.get(mw, "ds_md_bits"), m.get(mw, "ds_md_status")
        layout = report_layout(report.rep_md_bits, report.ds_id, report.ds_md_bits)
        md_at = body + m.length
        if 4 * md_words < layout.length:
            raise MalformedReport("bad-md-length", f"MD Length {md_words} words, but RepMdBits/DSMdBits "
                                  f"ask for {layout.length} bytes")
        report.metadata = layout.decode(data[md_at:md_at + 4 * md_words], 4 * md_words)
        inner_at = md_at + 4 * md_words
    elif report.rep_type != REP_TYPE_INNER_ONLY:
        raise MalformedReport("bad-report-type", f"RepType {report.rep_type} is not supported")
    if report.in_type == IN_TYPE_IPV4 and end > inner_at:
        report.inner = _decode_ipv4(data[inner_at:end], o)
    return report, end


def _decode_ipv4(data: bytes, o: WireOffsets) -> InnerPacket:
    ip = o.ip
    if len(data) < ip.length:
        raise MalformedReport("bad-inner", f"inner IPv4 packet of {len(data)} bytes, shorter than its header")
    w = ip.read(data)
    if ip.get(w, "version") != 4 or ip.get(w, "ihl") < 5:
        raise MalformedReport("bad-inner", f"inner packet is not IPv4 (version {ip.get(w, 'version')}, "
                              f"ihl {ip.get(w, 'ihl')})")
    proto = ip.get(w, "proto")
    dscp = ip.get(w, "tos") >> 2
    inner = InnerPacket(socket.inet_ntoa(ip.get(w, "src").to_bytes(4, "big")),
                        socket.inet_ntoa(ip.get(w, "dst").to_bytes(4, "big")),
                        proto, None, None, dscp, ip.get(w, "len"), ecn=ip.get(w, "tos") & 3)
    l4 = 4 * ip.get(w, "ihl")
    if ip.get(w, "frag") or proto not in (IP_PROTO_TCP, IP_PROTO_UDP) or len(data) < l4 + o.l4_ports.length:
        return inner
    ports = o.l4_ports.read(data, l4)
    inner.sport, inner.dport = o.l4_ports.get(ports, "sport"), o.l4_ports.get(ports, "dport")
    shim_at = None
    if proto == IP_PROTO_UDP and inner.dport == INT_UDP_PORT:
        shim_at = l4 + 8
    elif proto == IP_PROTO_TCP and dscp == INT_DSCP:
        if len(data) < l4 + o.tcp.length:
            raise MalformedReport("int-truncated", "inner TCP header cut before the INT shim")
        shim_at = l4 + 4 * o.tcp.get(o.tcp.read(data, l4), "dataofs")
    if shim_at is not None:
        _decode_int(data, shim_at, inner, o)
    return inner


def _decode_int(data: bytes, at: int, inner: InnerPacket, o: WireOffsets) -> None:
    if len(data) < at + o.shim_udp.length:
        raise MalformedReport("int-truncated", "inner packet cut before the INT shim")
    npt = o.shim_udp.get(o.shim_udp.read(data, at), "npt")  # type/npt/length sit alike in every variant
    shim = {NPT_UDP_PORT: o.shim_udp, NPT_IP_PROTO: o.shim_proto}.get(npt, o.shim_dscp)
    sw = shim.read(data, at)
    int_type, words = shim.get(sw, "type"), shim.get(sw, "length")
    if int_type != INT_TYPE_MD:
        raise MalformedReport("int-unsupported", f"INT type {int_type} (only INT-MD is carried in reports)")
    md = o.md
    stack_len = 4 * words - md.length
    md_at = at + shim.length
    if stack_len < 0:
        raise MalformedReport("int-bad-length", f"shim Length {words} words cannot hold the INT-MD header")
    if len(data) < md_at + md.length + stack_len:
        raise MalformedReport("int-truncated", f"INT stack of {stack_len} bytes cut by the report "
                              f"({len(data) - md_at - md.length} bytes left)")
    mw = md.read(data, md_at)
    if md.get(mw, "version") != INT_VERSION:
        raise MalformedReport("int-bad-version", f"INT-MD version {md.get(mw, 'version')}, expected {INT_VERSION}")
    hop_ml = md.get(mw, "hop_ml")
    bitmap, ds_id, ds_ins = md.get(mw, "instruction_bitmap"), md.get(mw, "domain_specific_id"), \
        md.get(mw, "ds_instruction")
    layout = int_layout(bitmap, ds_id, ds_ins)
    if layout.length > 4 * hop_ml or (stack_len and hop_ml == 0):
        raise MalformedReport("int-bad-hop-ml", f"HopML {hop_ml} words, but the instructions ask for "
                              f"{layout.length} bytes")
    stack_at = md_at + md.length
    hops = split_stack(data[stack_at:stack_at + stack_len], 4 * hop_ml, layout)
    inner.int_stack = IntStack(int_type, npt, md.get(mw, "d"), md.get(mw, "e"), md.get(mw, "m"), hop_ml,
                               md.get(mw, "remaining_hop_cnt"), bitmap, ds_id, ds_ins, md.get(mw, "ds_flags"),
                               hops)
    after = stack_at + stack_len
    if npt == NPT_UDP_PORT:
        inner.dport = shim.get(sw, "orig_dport")
    elif npt == NPT_IP_PROTO:
        inner.proto = shim.get(sw, "orig_proto")
        inner.sport = inner.dport = None
        if inner.proto in (IP_PROTO_TCP, IP_PROTO_UDP) and len(data) >= after + o.l4_ports.length:
            ports = o.l4_ports.read(data, after)
            inner.sport, inner.dport = o.l4_ports.get(ports, "sport"), o.l4_ports.get(ports, "dport")
    else:
        inner.dscp = shim.get(sw, "orig_dscp")
