"""In-band Network Telemetry (INT v2.1, INT-MD over TCP/UDP) and Telemetry
Report v2.0 as Scapy layers, on the metadata codec the collector's fast
path shares, and a reference model of the INT source, transit and sink.

Specifications: p4lang/p4-applications telemetry/specs/INT.mdk (v2.1) and
telemetry_report.mdk (v2.0). Field layouts below follow their figures.

How INT is detected (this project's choices; the P4 side mirrors the
constants in p4src/include/defines.p4):

- UDP: the source replaces the UDP destination port with INT_UDP_PORT and
  keeps the original port in the shim (NPT=1). Scapy dissects
  UDP(dport=INT_UDP_PORT) -> INTShim by bind_layers.
- TCP: the source sets the IPv4 DSCP to INT_DSCP and keeps the original DSCP
  in the shim (NPT=0, upper 6 bits of the shim's last byte, as the spec's
  figure shows). Scapy binds on the fields of the layer below only, and the
  DSCP is two layers down, so TCP payloads go through a small dispatcher
  that picks INTShim when the IPv4 DSCP is INT_DSCP and otherwise returns
  exactly what TCP would have chosen without it (see _TcpPayloadDispatch).
- The shim follows the L4 header directly (after TCP options). The spec's
  NPT=2 (a UDP header inserted in front of the original L4 header, original
  IP protocol in the shim) is dissected and stripped too, as the report
  example of the spec uses it.

Per-hop metadata: the numbers and the metadata codec (HopMetadata,
MetadataLayout, split_stack) are wire/int_telemetry_codec.py's, which needs
no Scapy (the collector's fast path and the RDMA agents use it alone);
every name there is re-exported here.

HPCC's per-hop needs (tx bytes and the time they were counted, link rate)
have no baseline instruction bit, so they are Domain Specific metadata of
this project's INT domain FABRIC_DS_ID: DS instruction bit 0 = DS_TX_BYTES
(egress port's transmitted byte count, mod 2^32), bit 1 = DS_TX_TIMESTAMP
(egress time the count was read at, TIMESTAMP_UNIT_NS units, mod 2^32), bit 2
= DS_LINK_RATE (egress link rate in Mbit/s). Each is 4 bytes, appended after
the baseline metadata, before the checksum complement. A node that does not
know FABRIC_DS_ID pads its hop with all-ones up to HopML*4 bytes, which
decodes into HopMetadata.extra.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Optional

from scapy.config import conf
from scapy.fields import (BitEnumField, BitField, ByteField, ConditionalField, Field, IntField,
                          PacketListField, XShortField)
from scapy.layers.inet import IP, TCP, UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Ether
from scapy.packet import NoPayload, Packet, bind_layers

from wire.int_telemetry_codec import *  # noqa: F401,F403  (the numbers and the metadata codec, re-exported)


# ---------------------------------------------------------------------------
# INT layers

class INTShim(Packet):
    """INT shim header for TCP/UDP (4 bytes). Length counts 4-byte words of
    the INT-MD header and metadata stack, the shim excluded. The last 16 bits
    depend on NPT: 0 -> reserved(8) + original DSCP(6) + reserved(2);
    1 -> original UDP destination port; 2 -> reserved(8) + original IP protocol."""
    name = "INT shim"
    fields_desc = [
        BitEnumField("type", INT_TYPE_MD, 4, INT_TYPES),
        BitEnumField("npt", NPT_UDP_PORT, 2, NPT_NAMES),
        BitField("rsvd", 0, 2),
        ByteField("length", None),
        ConditionalField(XShortField("orig_dport", 0), lambda p: p.npt == NPT_UDP_PORT),
        ConditionalField(ByteField("rsvd2", 0), lambda p: p.npt != NPT_UDP_PORT),
        ConditionalField(ByteField("orig_proto", 0), lambda p: p.npt == NPT_IP_PROTO),
        ConditionalField(BitField("orig_dscp", 0, 6), lambda p: p.npt not in (NPT_UDP_PORT, NPT_IP_PROTO)),
        ConditionalField(BitField("rsvd3", 0, 2), lambda p: p.npt not in (NPT_UDP_PORT, NPT_IP_PROTO)),
    ]

    def int_words(self) -> int:
        """Words of INT header + stack that follow, from the layers built on top."""
        md = self.payload
        if not isinstance(md, INTMetadataHeader):
            return 0
        n = len(md.self_build())
        if isinstance(md.payload, INTMetadataStack):
            n += len(md.payload.self_build())
        if n % 4:
            raise ValueError(f"INT header + stack is {n} bytes, not a multiple of 4")
        return n // 4

    def post_build(self, pkt: bytes, pay: bytes) -> bytes:
        if self.length is None:
            words = self.int_words()
            if words > MAX_SHIM_WORDS:
                raise ValueError(f"INT header + stack is {words} words, more than the shim's {MAX_SHIM_WORDS}")
            pkt = pkt[:1] + bytes([words]) + pkt[2:]
        return pkt + pay

    def mysummary(self) -> str:
        return self.sprintf("INT shim type=%type% npt=%npt% len=%length%")


class INTMetadataHeader(Packet):
    """INT-MD metadata header (12 bytes). hop_ml None = derived from the
    instruction bitmap and DS instruction (this project's domain only)."""
    name = "INT-MD metadata header"
    fields_desc = [
        BitField("version", INT_VERSION, 4),
        BitField("d", 0, 1),
        BitField("e", 0, 1),
        BitField("m", 0, 1),
        BitField("rsvd", 0, 12),
        BitField("hop_ml", None, 5),
        ByteField("remaining_hop_cnt", 0),
        XShortField("instruction_bitmap", 0),
        XShortField("domain_specific_id", 0),
        XShortField("ds_instruction", 0),
        XShortField("ds_flags", 0),
    ]

    def layout(self) -> MetadataLayout:
        return int_layout(self.instruction_bitmap, self.domain_specific_id, self.ds_instruction)

    def effective_hop_ml(self) -> int:
        if self.hop_ml is not None:
            return self.hop_ml
        words = self.layout().length // 4
        if words > MAX_HOP_ML:
            raise ValueError(f"instructions ask for {words} words a hop, more than HopML's {MAX_HOP_ML}")
        return words

    def post_build(self, pkt: bytes, pay: bytes) -> bytes:
        if self.hop_ml is None:
            pkt = pkt[:2] + bytes([(pkt[2] & 0xE0) | self.effective_hop_ml()]) + pkt[3:]
        return pkt + pay

    def mysummary(self) -> str:
        return self.sprintf("INT-MD hop_ml=%hop_ml% remaining=%remaining_hop_cnt% bitmap=%instruction_bitmap%")


@dataclass(frozen=True)
class _StackContext:
    layout: MetadataLayout
    hop_size: int
    stack_len: Optional[int]   # None: unknown (building, or no shim below)


def _stack_context(pkt: Packet) -> Optional[_StackContext]:
    md = pkt.underlayer
    if not isinstance(md, INTMetadataHeader):
        return None
    shim = md.underlayer
    stack_len = None
    if isinstance(shim, INTShim) and shim.length is not None:
        stack_len = max(0, shim.length * 4 - MD_HEADER_LENGTH)
    return _StackContext(md.layout(), md.effective_hop_ml() * 4, stack_len)


class _HopStackField(Field):
    """The metadata stack as a list of HopMetadata (top of the stack first),
    decoded with the instruction bitmap of the INT-MD header below it."""
    islist = 1
    variable_size = True

    def __init__(self, name: str):
        super().__init__(name, None)

    def getfield(self, pkt: Packet, s: bytes):
        ctx = _stack_context(pkt)
        if ctx is None:
            return s, []
        n = len(s) if ctx.stack_len is None else min(ctx.stack_len, len(s))
        return s[n:], split_stack(s[:n], ctx.hop_size, ctx.layout)

    def addfield(self, pkt: Packet, s: bytes, val) -> bytes:
        hops = val or []
        if not hops:
            return s
        ctx = _stack_context(pkt)
        if ctx is None:
            raise ValueError("INTMetadataStack must be built on top of an INTMetadataHeader")
        # each hop is exactly HopML*4 bytes, except one carrying more `extra` (source-only metadata)
        return s + b"".join(ctx.layout.encode(h, ctx.hop_size) for h in hops)

    def i2repr(self, pkt, x) -> str:
        return "[" + ", ".join(repr(h) for h in (x or [])) + "]"

    def any2i(self, pkt, x):
        return list(x) if x is not None else []


class INTMetadataStack(Packet):
    """The INT-MD metadata stack: `hops`, top of the stack (the most recent
    hop) first. Its length comes from the shim below (Length*4 - 12)."""
    name = "INT-MD metadata stack"
    fields_desc = [_HopStackField("hops")]

    def guess_payload_class(self, payload: bytes):
        shim = self.underlayer.underlayer if isinstance(self.underlayer, INTMetadataHeader) else None
        if isinstance(shim, INTShim) and shim.npt == NPT_IP_PROTO:
            return {6: TCP, 17: UDP}.get(shim.orig_proto, conf.raw_layer)
        return conf.raw_layer

    def mysummary(self) -> str:
        return f"INT stack ({len(self.hops)} hops)"


class _TcpPayloadDispatch(Packet):
    """Never built: placed first in TCP's payload guesses, it returns INTShim
    for the payload of a TCP segment whose IPv4 DSCP is INT_DSCP, and
    otherwise exactly the class TCP would have picked without it."""
    name = "TCP payload dispatch"

    @classmethod
    def dispatch_hook(cls, _pkt: Optional[bytes] = None, *args, **kargs):
        tcp = kargs.get("_underlayer")
        ip = getattr(tcp, "underlayer", None)
        if isinstance(ip, IP) and ip.tos >> 2 == INT_DSCP and _pkt and len(_pkt) >= SHIM_LENGTH:
            return INTShim
        if tcp is None:
            return conf.raw_layer
        for layer in tcp.aliastypes:
            for fval, klass in layer.payload_guess:
                if klass is cls:
                    continue
                try:
                    if all(v == tcp.getfieldval(k) for k, v in fval.items()):
                        return klass
                except AttributeError:
                    pass
        return tcp.default_payload_class(_pkt)


# ---------------------------------------------------------------------------
# Telemetry Report v2.0 layers

def _inner_class(in_type: int):
    return {IN_TYPE_ETHERNET: Ether, IN_TYPE_IPV4: IP, IN_TYPE_IPV6: IPv6}.get(in_type, conf.raw_layer)


class TelemetryReportIndividual(Packet):
    """Individual report header (4 bytes) and, as payload, its main contents
    (INTReportMain for RepType 1) and inner contents (the truncated packet).
    report_length/md_length/in_type None = computed when built."""
    name = "Telemetry report (individual)"
    fields_desc = [
        BitEnumField("rep_type", REP_TYPE_INT, 4, REP_TYPES),
        BitEnumField("in_type", None, 4, IN_TYPES),
        ByteField("report_length", None),
        ByteField("md_length", None),
        BitField("d", 0, 1),
        BitField("q", 0, 1),
        BitField("f", 0, 1),
        BitField("i", 0, 1),
        BitField("rsvd", 0, 4),
    ]

    def _inner(self) -> Packet:
        inner = self.payload
        return inner.payload if isinstance(inner, INTReportMain) else inner

    def post_build(self, pkt: bytes, pay: bytes) -> bytes:
        if len(pay) % 4:
            pay += b"\x00" * (4 - len(pay) % 4)  # the truncated packet ends on a word boundary
        if self.in_type is None:
            inner = self._inner()
            in_type = next((t for t, c in ((IN_TYPE_ETHERNET, Ether), (IN_TYPE_IPV4, IP), (IN_TYPE_IPV6, IPv6))
                            if isinstance(inner, c)), IN_TYPE_NONE)
            pkt = bytes([(pkt[0] & 0xF0) | in_type]) + pkt[1:]
        if self.report_length is None:
            pkt = pkt[:1] + bytes([min(len(pay) // 4, REPORT_LENGTH_TO_END)]) + pkt[2:]
        if self.md_length is None:
            main = self.payload
            words = main.metadata_words() if isinstance(main, INTReportMain) else 0
            pkt = pkt[:2] + bytes([words]) + pkt[3:]
        return pkt + pay

    def extract_padding(self, s: bytes):
        if self.report_length is None or self.report_length == REPORT_LENGTH_TO_END:
            return s, b""
        n = self.report_length * 4
        return s[:n], s[n:]

    def guess_payload_class(self, payload: bytes):
        if self.rep_type == REP_TYPE_INT:
            return INTReportMain
        if self.rep_type == REP_TYPE_INNER_ONLY:
            return _inner_class(self.in_type)
        return conf.raw_layer

    def mysummary(self) -> str:
        return self.sprintf("report %rep_type%/%in_type% len=%report_length% md=%md_length%")


class _ReportMetadataField(Field):
    """The variable optional metadata of an INT report, decoded with
    RepMdBits/DSMdBits; its length is the individual header's MD Length."""
    variable_size = True

    def __init__(self, name: str):
        super().__init__(name, None)

    def getfield(self, pkt: Packet, s: bytes):
        layout = report_layout(pkt.rep_md_bits or 0, pkt.ds_id, pkt.ds_md_bits)
        hdr = pkt.underlayer
        size = hdr.md_length * 4 if isinstance(hdr, TelemetryReportIndividual) and hdr.md_length is not None \
            else layout.length
        size = min(size, len(s))
        return s[size:], layout.decode(s[:size], size)

    def addfield(self, pkt: Packet, s: bytes, val) -> bytes:
        layout = report_layout(pkt.effective_md_bits(), pkt.ds_id, pkt.ds_md_bits)
        hdr = pkt.underlayer
        size = hdr.md_length * 4 if isinstance(hdr, TelemetryReportIndividual) and hdr.md_length is not None else None
        return s + layout.encode(val, size)

    def i2repr(self, pkt, x) -> str:
        return repr(x)


class INTReportMain(Packet):
    """Individual report main contents for RepType 1 (INT): 8 fixed bytes,
    then the metadata chosen by RepMdBits and DSMdBits (`metadata`, a
    HopMetadata). rep_md_bits None = the bits of the values set in metadata."""
    name = "INT report main contents"
    fields_desc = [
        XShortField("rep_md_bits", None),
        XShortField("ds_id", 0),
        XShortField("ds_md_bits", 0),
        XShortField("ds_md_status", 0),
        _ReportMetadataField("metadata"),
    ]

    def effective_md_bits(self) -> int:
        if self.rep_md_bits is not None:
            return self.rep_md_bits
        return md_bits_for(self.metadata, report=True)[0] if self.metadata is not None else 0

    def metadata_words(self) -> int:
        return (len(self.self_build()) - INT_REPORT_MAIN_LENGTH) // 4

    def post_build(self, pkt: bytes, pay: bytes) -> bytes:
        if self.rep_md_bits is None:
            pkt = self.effective_md_bits().to_bytes(2, "big") + pkt[2:]
        return pkt + pay

    def guess_payload_class(self, payload: bytes):
        hdr = self.underlayer
        return _inner_class(hdr.in_type) if isinstance(hdr, TelemetryReportIndividual) else conf.raw_layer


class _ReportListField(PacketListField):
    """The individual reports of a group, each delimited by its own Report
    Length (0xFF: to the end), so padding inside one report's truncated
    packet never spills into the next report."""

    def getfield(self, pkt: Packet, s: bytes):
        reports = []
        while s:
            header = TelemetryReportIndividual(s[:REPORT_INDIVIDUAL_LENGTH])
            words = header.report_length if len(s) >= REPORT_INDIVIDUAL_LENGTH else REPORT_LENGTH_TO_END
            n = len(s) if words == REPORT_LENGTH_TO_END else REPORT_INDIVIDUAL_LENGTH + 4 * words
            reports.append(self.m2i(pkt, s[:n]))
            s = s[n:]
        return b"", reports


class TelemetryReportGroup(Packet):
    """Telemetry Report group header (8 bytes), then the individual reports.
    Dissected reports land in `reports`; building with `/` works too
    (group / individual / main / inner), with the same bytes."""
    name = "Telemetry report group"
    fields_desc = [
        BitField("version", REPORT_VERSION, 4),
        BitField("hw_id", 0, HW_ID_BITS),
        BitField("seq_no", 0, SEQ_BITS),
        IntField("node_id", 0),
        _ReportListField("reports", [], TelemetryReportIndividual),
    ]

    def mysummary(self) -> str:
        return self.sprintf("report group node=%node_id% hw=%hw_id% seq=%seq_no%")


# ---------------------------------------------------------------------------
# Bindings

bind_layers(UDP, INTShim, dport=INT_UDP_PORT)
bind_layers(UDP, TelemetryReportGroup, dport=REPORT_UDP_PORT)
bind_layers(INTShim, INTMetadataHeader, type=INT_TYPE_MD)
bind_layers(INTMetadataHeader, INTMetadataStack)
bind_layers(TelemetryReportIndividual, INTReportMain, rep_type=REP_TYPE_INT)
if not any(klass is _TcpPayloadDispatch for _, klass in TCP.payload_guess):
    TCP.payload_guess = [({}, _TcpPayloadDispatch)] + TCP.payload_guess


# ---------------------------------------------------------------------------
# Reference model: source, transit, sink, report (tests and experiments)

class IntModelError(ValueError):
    """A packet cannot take the INT operation asked (names what is wrong)."""


def _l4(pkt: Packet) -> Packet:
    ip = pkt.getlayer(IP)
    if ip is None:
        raise IntModelError(f"not an IPv4 packet: {pkt.summary()}")
    l4 = ip.payload
    if not isinstance(l4, (UDP, TCP)):
        raise IntModelError(f"INT over TCP/UDP needs a TCP or UDP packet, got {l4.__class__.__name__}")
    return l4


def _redissect(pkt: Packet) -> Packet:
    ip = pkt[IP]
    del ip.len, ip.chksum
    l4 = ip.payload
    if isinstance(l4, UDP):
        del l4.len
        if l4.chksum != 0:      # a zero UDP checksum stays zero (RFC 768; INT v2.1 "Checksum Update")
            del l4.chksum
    elif isinstance(l4, TCP):
        del l4.chksum
    return pkt.__class__(bytes(pkt))


def int_source(pkt: Packet, source: HopMetadata, *, instructions: int, max_hops: int = 8,
               ds_id: int = 0, ds_instruction: int = 0, discard: bool = False) -> Packet:
    """What the INT source does: insert shim + INT-MD header + its own
    metadata after the TCP/UDP header. UDP: dport -> INT_UDP_PORT, original
    in the shim (NPT 1). TCP: DSCP -> INT_DSCP, original in the shim (NPT 0).
    `max_hops` is the Remaining Hop Count before the source's own push."""
    if max_hops < 1:
        raise IntModelError(f"max_hops must be >= 1 (the source pushes its own metadata), got {max_hops}")
    p = pkt.copy()
    l4 = _l4(p)
    ip = p[IP]
    if isinstance(l4, UDP):
        if l4.dport == INT_UDP_PORT:
            raise IntModelError(f"UDP destination port is already INT_UDP_PORT ({INT_UDP_PORT})")
        shim = INTShim(type=INT_TYPE_MD, npt=NPT_UDP_PORT, orig_dport=l4.dport)
        l4.dport = INT_UDP_PORT
    else:
        if ip.tos >> 2 == INT_DSCP:
            raise IntModelError(f"IPv4 DSCP is already INT_DSCP (0x{INT_DSCP:02x})")
        shim = INTShim(type=INT_TYPE_MD, npt=NPT_DSCP, orig_dscp=ip.tos >> 2)
        ip.tos = (INT_DSCP << 2) | (ip.tos & 3)
    md = INTMetadataHeader(d=int(discard), remaining_hop_cnt=max_hops - 1, instruction_bitmap=instructions,
                           domain_specific_id=ds_id, ds_instruction=ds_instruction)
    md.hop_ml = md.effective_hop_ml()
    payload = l4.payload
    l4.remove_payload()
    l4.add_payload(shim / md / INTMetadataStack(hops=[source]) / payload)
    return _redissect(p)


def int_transit(pkt: Packet, hop: HopMetadata, *, mtu: Optional[int] = None) -> Packet:
    """What an INT transit hop does: push `hop` on top of the stack and
    decrement Remaining Hop Count; or, pushing nothing, set E when the count
    is 0, or M when the IPv4 packet would exceed `mtu` bytes."""
    p = pkt.copy()
    md = p.getlayer(INTMetadataHeader)
    if md is None:
        raise IntModelError(f"no INT-MD header in {p.summary()}")
    if md.remaining_hop_cnt == 0:
        md.e = 1
        return p.__class__(bytes(p))
    if mtu is not None and len(p[IP]) + md.hop_ml * 4 > mtu:
        md.m = 1
        return p.__class__(bytes(p))
    stack = p[INTMetadataStack]
    stack.hops = [hop] + list(stack.hops)
    md.remaining_hop_cnt -= 1
    p[INTShim].length = None
    return _redissect(p)


@dataclass(frozen=True)
class SinkResult:
    """What the sink forwards (`packet`, INT removed, original port/DSCP or
    protocol restored), what it received (`received`, for the report's
    inner packet) and the decoded stack (`hops`, top first)."""
    packet: Packet
    received: Packet
    shim: Packet                 # INTShim
    header: Packet               # INTMetadataHeader
    hops: list[HopMetadata]


def int_sink(pkt: Packet) -> SinkResult:
    """What the INT sink does to the data packet: strip shim, INT-MD header
    and stack; restore the UDP port (NPT 1), the DSCP (NPT 0, ECN kept) or
    the IP protocol with the inserted UDP header removed (NPT 2)."""
    p = pkt.copy()
    shim = p.getlayer(INTShim)
    md = p.getlayer(INTMetadataHeader)
    stack = p.getlayer(INTMetadataStack)
    if shim is None or md is None or stack is None:
        raise IntModelError(f"no INT-MD shim/header/stack in {p.summary()}")
    ip = p[IP]
    l4 = shim.underlayer
    if l4 is None:
        raise IntModelError(f"an INT shim with nothing under it in {p.summary()}")
    original_payload = stack.payload.copy()
    hops = list(stack.hops)
    if shim.npt == NPT_IP_PROTO:
        ip.remove_payload()
        ip.proto = shim.orig_proto
        if not isinstance(original_payload, NoPayload):
            ip.add_payload(original_payload)
    else:
        l4.remove_payload()
        if not isinstance(original_payload, NoPayload):
            l4.add_payload(original_payload)
        if shim.npt == NPT_UDP_PORT:
            l4.dport = shim.orig_dport
        else:
            ip.tos = (shim.orig_dscp << 2) | (ip.tos & 3)
    return SinkResult(_redissect(p), pkt.copy(), shim.copy(), md.copy(), hops)


def int_report(inner: Packet | bytes, *, node_id: int, seq_no: int, hw_id: int = 0,
               metadata: Optional[HopMetadata] = None, dropped: bool = False, congested: bool = False,
               tracked_flow: bool = True, intermediate: bool = False, ds_id: int = 0,
               truncate: Optional[int] = None) -> TelemetryReportGroup:
    """A Telemetry Report v2.0 with one INT individual report (RepType 1,
    InType 4): `metadata` is the reporting node's own (RepMdBits/DSMdBits
    follow the values set in it; drop_reason -> bit 15), `inner` the IPv4
    packet as the node received it (with its INT stack), cut to `truncate`
    bytes if given. Flags: D=dropped, Q=congested, F=tracked_flow, I=intermediate."""
    if not 0 <= seq_no < SEQ_MODULUS:
        raise IntModelError(f"seq_no {seq_no} outside 0..{SEQ_MODULUS - 1}")
    if not 0 <= hw_id < (1 << HW_ID_BITS):
        raise IntModelError(f"hw_id {hw_id} outside 0..{(1 << HW_ID_BITS) - 1}")
    raw = bytes(inner)
    if truncate is not None:
        raw = raw[:truncate]
    meta = metadata or HopMetadata()
    bits, ds_bits = md_bits_for(meta, report=True)
    if ds_bits and ds_id != FABRIC_DS_ID:
        ds_id = FABRIC_DS_ID
    main = INTReportMain(rep_md_bits=bits, ds_id=ds_id, ds_md_bits=ds_bits if ds_id == FABRIC_DS_ID else 0,
                         metadata=replace(meta, node_id=None))
    ind = TelemetryReportIndividual(rep_type=REP_TYPE_INT, in_type=IN_TYPE_IPV4, d=int(dropped),
                                    q=int(congested), f=int(tracked_flow), i=int(intermediate))
    group = TelemetryReportGroup(hw_id=hw_id, seq_no=seq_no, node_id=node_id)
    return TelemetryReportGroup(bytes(group / ind / main / conf.raw_layer(raw)))


def report_frame(report: Packet, *, src_mac: str = "0a:00:00:00:00:fe", dst_mac: str = "0a:00:00:00:00:ff",
                 src_ip: str = "10.0.255.1", dst_ip: str = "10.0.255.2", sport: int = 50000,
                 dport: int = REPORT_UDP_PORT) -> Ether:
    """Ether/IPv4/UDP(dport=REPORT_UDP_PORT)/report, as a switch sends it
    (DF set, per the report spec's outer IPv4 rule)."""
    return Ether(src=src_mac, dst=dst_mac) / IP(src=src_ip, dst=dst_ip, flags="DF") / \
        UDP(sport=sport, dport=dport) / report
