"""In-band Network Telemetry (INT v2.1, INT-MD over TCP/UDP) and Telemetry
Report v2.0 as Scapy layers, with the metadata codec the collector's fast
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

Per-hop metadata: the metadata stack is split into hops of HopML*4 bytes,
top of the stack (most recent hop) first, and each hop is decoded from the
instruction bitmap into a HopMetadata. The same MetadataLayout encodes and
decodes the stack (INT instruction bitmap) and a report's metadata
(RepMdBits); the collector's fast path (telemetry/decode.py) uses it too.

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

from dataclasses import dataclass, field, fields, replace
from functools import lru_cache
from typing import Iterable, Optional

from scapy.config import conf
from scapy.fields import (BitEnumField, BitField, ByteField, ConditionalField, Field, IntField,
                          PacketListField, XShortField)
from scapy.layers.inet import IP, TCP, UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Ether
from scapy.packet import NoPayload, Packet, bind_layers

# ---------------------------------------------------------------------------
# Constants (the P4 program mirrors these in p4src/include/defines.p4)

INT_UDP_PORT = 6000          # UDP destination port announcing INT after the UDP header
INT_DSCP = 0x17              # IPv4 DSCP announcing INT after the TCP header
REPORT_UDP_PORT = 32766      # UDP destination port of telemetry reports (the collector's)
INT_VERSION = 2              # INT-MD metadata header Ver (INT v2.x)
REPORT_VERSION = 2           # Telemetry Report group header Ver (v2.0)
TIMESTAMP_UNIT_NS = 1000     # BMv2 timestamps and hop latency are in microseconds

# Shim Type (INT header type following the shim)
INT_TYPE_MD, INT_TYPE_DESTINATION, INT_TYPE_MX = 1, 2, 3
# Shim NPT (next protocol type)
NPT_DSCP = 0                 # INT detected by DSCP (TCP here); shim may carry the original DSCP
NPT_UDP_PORT = 1             # original UDP payload follows; shim carries the original UDP dport
NPT_IP_PROTO = 2             # original L4 header follows; shim carries the original IP protocol

SHIM_LENGTH = 4              # bytes; not counted in the shim's Length field (since INT v2.0)
MD_HEADER_LENGTH = 12        # bytes of the INT-MD metadata header
MAX_HOP_ML = 31              # HopML is 5 bits
MAX_SHIM_WORDS = 255         # shim Length is 8 bits

REPORT_GROUP_LENGTH = 8
REPORT_INDIVIDUAL_LENGTH = 4
INT_REPORT_MAIN_LENGTH = 8   # RepMdBits, DS ID, DSMdBits, DSMdStatus (fixed part)
SEQ_BITS = 22
SEQ_MODULUS = 1 << SEQ_BITS  # report sequence numbers wrap at 4,194,304
HW_ID_BITS = 6
REPORT_LENGTH_TO_END = 0xFF  # Report Length: extends to the end of the UDP payload

# Individual report RepType / InType
REP_TYPE_INNER_ONLY, REP_TYPE_INT, REP_TYPE_IOAM = 0, 1, 2
IN_TYPE_NONE, IN_TYPE_TLV, IN_TYPE_DS_EXTENSION, IN_TYPE_ETHERNET, IN_TYPE_IPV4, IN_TYPE_IPV6 = range(6)


def bitmap_bit(n: int) -> int:
    """Mask of bit n of a 16-bit bitmap, numbered as in the specs (bit 0 = MSB)."""
    if not 0 <= n <= 15:
        raise ValueError(f"bitmap bit {n} outside 0..15")
    return 0x8000 >> n


# Instruction bitmap (INT-MD header) and RepMdBits (report); bit 0 = MSB.
INS_NODE_ID = bitmap_bit(0)            # report: reserved
INS_L1_PORTS = bitmap_bit(1)           # level 1 ingress + egress interface id, 16 bits each
INS_HOP_LATENCY = bitmap_bit(2)
INS_QUEUE = bitmap_bit(3)              # queue id (8) + queue occupancy (24)
INS_INGRESS_TS = bitmap_bit(4)         # 8 bytes
INS_EGRESS_TS = bitmap_bit(5)          # 8 bytes
INS_L2_PORTS = bitmap_bit(6)           # level 2 ingress + egress interface id, 32 bits each
INS_TX_UTILIZATION = bitmap_bit(7)
INS_BUFFER = bitmap_bit(8)             # buffer id (8) + buffer occupancy (24)
INS_CHECKSUM_COMPLEMENT = bitmap_bit(15)  # INT only; always the last metadata of a hop
REP_MD_DROP = bitmap_bit(15)           # report only: queue id (8) + drop reason (8) + padding (16)

# This project's INT domain and its DS instruction bits (HPCC's per-hop data).
FABRIC_DS_ID = 0xAF01
DS_TX_BYTES = bitmap_bit(0)
DS_TX_TIMESTAMP = bitmap_bit(1)
DS_LINK_RATE = bitmap_bit(2)
# ... and its DS flags (INT-MD header)
DS_FLAG_CHANGED = 0x8000     # a hop saw its flow state change (the sink reports)
DS_FLAG_TO_HOST = 0x4000     # the receiving host is the sink: INT reaches it (HPCC)

INT_TYPES = {INT_TYPE_MD: "INT-MD", INT_TYPE_DESTINATION: "destination", INT_TYPE_MX: "INT-MX"}
NPT_NAMES = {NPT_DSCP: "dscp", NPT_UDP_PORT: "udp-port", NPT_IP_PROTO: "ip-proto"}
REP_TYPES = {REP_TYPE_INNER_ONLY: "inner-only", REP_TYPE_INT: "INT", REP_TYPE_IOAM: "IOAM"}
IN_TYPES = {IN_TYPE_NONE: "none", IN_TYPE_TLV: "TLV", IN_TYPE_DS_EXTENSION: "DS-extension",
            IN_TYPE_ETHERNET: "Ethernet", IN_TYPE_IPV4: "IPv4", IN_TYPE_IPV6: "IPv6"}


# ---------------------------------------------------------------------------
# Metadata: one hop's (or one report's) values, and the codec from bitmaps

@dataclass(frozen=True)
class HopMetadata:
    """The metadata one node contributes. None = not requested, or the node
    could not give it (the wire carries all-ones for that: INT v2.1 5.7)."""
    node_id: Optional[int] = None
    ingress_port: Optional[int] = None       # level 1, 16 bits
    egress_port: Optional[int] = None        # level 1, 16 bits
    hop_latency: Optional[int] = None        # TIMESTAMP_UNIT_NS units
    queue_id: Optional[int] = None
    queue_occupancy: Optional[int] = None    # 24 bits; packets on BMv2
    ingress_ts: Optional[int] = None         # 64 bits, TIMESTAMP_UNIT_NS units
    egress_ts: Optional[int] = None
    l2_ingress_port: Optional[int] = None    # level 2, 32 bits
    l2_egress_port: Optional[int] = None
    tx_utilization: Optional[int] = None
    buffer_id: Optional[int] = None
    buffer_occupancy: Optional[int] = None
    tx_bytes: Optional[int] = None           # DS (FABRIC_DS_ID) bit 0
    tx_timestamp: Optional[int] = None       # DS bit 1, mod 2^32
    link_rate_mbps: Optional[int] = None     # DS bit 2
    drop_queue_id: Optional[int] = None      # report RepMdBits bit 15
    drop_reason: Optional[int] = None        # report RepMdBits bit 15
    checksum_complement: Optional[int] = None  # INT bit 15
    reserved: tuple[tuple[int, int], ...] = ()  # (bit, 32-bit value) of reserved bitmap bits
    extra: bytes = b""                       # bytes the bitmaps do not explain (unknown DS, source-only)

    def __repr__(self) -> str:
        parts = [f"{f.name}={getattr(self, f.name)!r}" for f in fields(self)
                 if getattr(self, f.name) not in (None, (), b"")]
        return f"HopMetadata({', '.join(parts)})"


@dataclass(frozen=True)
class MetadataItem:
    """One bitmap bit's metadata: 4 or 8 bytes, made of named sub-fields
    (name None = padding, sent as zero). `size` (bytes), `all_ones` and
    `unpack` ((name, shift, mask) of each named part) are precomputed for
    the decoders' hot path."""
    bit: int
    parts: tuple[tuple[Optional[str], int], ...]
    size: int = field(init=False)
    all_ones: int = field(init=False)
    unpack: tuple[tuple[str, int, int], ...] = field(init=False)

    def __post_init__(self) -> None:
        bits = sum(width for _, width in self.parts)
        unpack, shift = [], bits
        for name, width in self.parts:
            shift -= width
            if name is not None:
                unpack.append((name, shift, (1 << width) - 1))
        object.__setattr__(self, "size", bits // 8)
        object.__setattr__(self, "all_ones", (1 << bits) - 1)
        object.__setattr__(self, "unpack", tuple(unpack))


def _item(bit: int, *parts: tuple[Optional[str], int]) -> MetadataItem:
    return MetadataItem(bit, tuple(parts))


_SHARED_BASELINE = {
    1: _item(1, ("ingress_port", 16), ("egress_port", 16)),
    2: _item(2, ("hop_latency", 32)),
    3: _item(3, ("queue_id", 8), ("queue_occupancy", 24)),
    4: _item(4, ("ingress_ts", 64)),
    5: _item(5, ("egress_ts", 64)),
    6: _item(6, ("l2_ingress_port", 32), ("l2_egress_port", 32)),
    7: _item(7, ("tx_utilization", 32)),
    8: _item(8, ("buffer_id", 8), ("buffer_occupancy", 24)),
}
INT_BASELINE_ITEMS = {0: _item(0, ("node_id", 32)), **_SHARED_BASELINE}
INT_CHECKSUM_ITEM = _item(15, ("checksum_complement", 32))
REPORT_BASELINE_ITEMS = {**_SHARED_BASELINE, 15: _item(15, ("drop_queue_id", 8), ("drop_reason", 8), (None, 16))}
FABRIC_DS_ITEMS = {
    0: _item(0, ("tx_bytes", 32)),
    1: _item(1, ("tx_timestamp", 32)),
    2: _item(2, ("link_rate_mbps", 32)),
}
_RESERVED = "reserved"  # marker name: a reserved bit's 4 bytes go to HopMetadata.reserved
_RESERVED_INT_BITS = range(9, 15)
_RESERVED_REPORT_BITS = (0, *range(9, 15))


@dataclass(frozen=True)
class MetadataLayout:
    """Where each requested metadata sits in one hop (INT) or one report's
    metadata (Telemetry Report), derived from the bitmaps in spec order:
    baseline bits, then domain-specific bits, then (INT only) the checksum
    complement last. `length` is what the bitmaps ask for, in bytes."""
    head: tuple[tuple[int, MetadataItem], ...]   # (offset, item) from the start
    tail: Optional[MetadataItem]                  # checksum complement: the last 4 bytes
    length: int
    ds_known: bool

    def decode(self, data: bytes, size: Optional[int] = None) -> HopMetadata:
        """Decode `size` bytes (default: the layout's length). Bytes beyond
        the layout go to `extra`; items that do not fit stay None."""
        size = self.length if size is None else size
        data = bytes(data[:size])
        size = len(data)
        values: dict[str, object] = {}
        reserved: list[tuple[int, int]] = []
        head_end = size - (self.tail.size if self.tail is not None and size >= self.length else 0)
        end = 0
        for offset, item in self.head:
            if offset + item.size > head_end:
                break
            _decode_item(item, data[offset:offset + item.size], values, reserved)
            end = offset + item.size
        if self.tail is not None and size >= self.length:
            _decode_item(self.tail, data[head_end:], values, reserved)
        if head_end > end:
            values["extra"] = data[end:head_end]
        if reserved:
            values["reserved"] = tuple(reserved)
        return HopMetadata(**values)  # type: ignore[arg-type]

    def encode(self, meta: Optional[HopMetadata], size: Optional[int] = None) -> bytes:
        """Encode to exactly `size` bytes when given (the hop's HopML*4):
        the gap between the known items and the checksum complement is
        meta.extra, padded with all-ones (what a node that cannot provide a
        value inserts)."""
        meta = meta or HopMetadata()
        reserved = dict(meta.reserved)
        head = b"".join(_encode_item(item, meta, reserved) for _, item in self.head)
        tail = _encode_item(self.tail, meta, reserved) if self.tail is not None else b""
        gap = meta.extra
        if size is not None:
            want = size - len(head) - len(tail)
            if want < 0:
                raise ValueError(f"metadata needs {len(head) + len(tail)} bytes, more than the {size} allowed")
            if len(gap) < want:
                gap += b"\xff" * (want - len(gap))
        return head + gap + tail


def _decode_item(item: MetadataItem, raw: bytes, values: dict, reserved: list) -> None:
    word = int.from_bytes(raw, "big")
    if word == item.all_ones:
        return  # all-ones: the node could not provide this metadata
    for name, shift, mask in item.unpack:
        if name == _RESERVED:
            reserved.append((item.bit, (word >> shift) & mask))
        else:
            values[name] = (word >> shift) & mask


def _encode_item(item: MetadataItem, meta: HopMetadata, reserved: dict[int, int]) -> bytes:
    word = 0
    for name, width in item.parts:
        if name == _RESERVED:
            value = reserved.get(item.bit)
        else:
            value = getattr(meta, name) if name is not None else 0
        if value is None:
            value = (1 << width) - 1
        if not 0 <= value < (1 << width):
            raise ValueError(f"{name}={value} does not fit in {width} bits")
        word = (word << width) | value
    return word.to_bytes(item.size, "big")


def _reserved_item(bit: int) -> MetadataItem:
    return _item(bit, (_RESERVED, 32))


def _build_layout(baseline: dict[int, MetadataItem], reserved_bits: Iterable[int], bitmap: int,
                  ds_id: int, ds_bits: int, tail: Optional[MetadataItem]) -> MetadataLayout:
    reserved_bits = set(reserved_bits)
    head: list[tuple[int, MetadataItem]] = []
    offset = 0
    for bit in range(16):
        if not bitmap & bitmap_bit(bit) or (tail is not None and bit == tail.bit):
            continue
        item = baseline.get(bit) or (_reserved_item(bit) if bit in reserved_bits else None)
        if item is None:
            continue
        head.append((offset, item))
        offset += item.size
    ds_known = ds_id == FABRIC_DS_ID
    if ds_known:
        for bit in range(16):
            if ds_bits & bitmap_bit(bit) and bit in FABRIC_DS_ITEMS:
                head.append((offset, FABRIC_DS_ITEMS[bit]))
                offset += FABRIC_DS_ITEMS[bit].size
    use_tail = tail if tail is not None and bitmap & bitmap_bit(tail.bit) else None
    return MetadataLayout(tuple(head), use_tail, offset + (use_tail.size if use_tail else 0), ds_known)


@lru_cache(maxsize=1024)
def int_layout(instruction_bitmap: int, ds_id: int = 0, ds_instruction: int = 0) -> MetadataLayout:
    """Layout of one hop of an INT-MD metadata stack."""
    return _build_layout(INT_BASELINE_ITEMS, _RESERVED_INT_BITS, instruction_bitmap, ds_id,
                         ds_instruction, INT_CHECKSUM_ITEM)


@lru_cache(maxsize=1024)
def report_layout(rep_md_bits: int, ds_id: int = 0, ds_md_bits: int = 0) -> MetadataLayout:
    """Layout of the metadata in an INT individual report (RepMdBits, DSMdBits)."""
    return _build_layout(REPORT_BASELINE_ITEMS, _RESERVED_REPORT_BITS, rep_md_bits, ds_id, ds_md_bits, None)


def md_bits_for(meta: HopMetadata, *, report: bool) -> tuple[int, int]:
    """(bitmap, DS bitmap of FABRIC_DS_ID) covering every value set in `meta`:
    what a report's RepMdBits/DSMdBits must be (unavailable values are not
    reported), or an instruction bitmap asking for exactly these values."""
    baseline = dict(REPORT_BASELINE_ITEMS if report else INT_BASELINE_ITEMS)
    if not report:
        baseline[15] = INT_CHECKSUM_ITEM
    bits = 0
    for bit, item in baseline.items():
        if any(name and getattr(meta, name) is not None for name, _ in item.parts):
            bits |= bitmap_bit(bit)
    for bit, _ in meta.reserved:
        bits |= bitmap_bit(bit)
    ds = 0
    for bit, item in FABRIC_DS_ITEMS.items():
        if any(getattr(meta, name) is not None for name, _ in item.parts if name):
            ds |= bitmap_bit(bit)
    return bits, ds


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


def split_stack(data: bytes, hop_size: int, layout: MetadataLayout) -> list[HopMetadata]:
    """Split a metadata stack into hops, top of the stack first. Every hop is
    hop_size bytes except the last (the source's), which also holds any
    bytes left over (source-only metadata), in its `extra`."""
    if hop_size <= 0 or not data:
        return [layout.decode(data, len(data))] if data else []
    n_full = max(1, len(data) // hop_size)
    hops = []
    for i in range(n_full):
        start = i * hop_size
        end = start + hop_size if i < n_full - 1 else len(data)
        hops.append(layout.decode(data[start:end], end - start))
    return hops


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
