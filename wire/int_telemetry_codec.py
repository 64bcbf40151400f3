"""INT v2.1's and Telemetry Report v2.0's numbers, and the per-hop
metadata codec, without Scapy: what wire/int_telemetry.py's layers, the
collector's fast path (telemetry/decode.py) and the RDMA agents (HPCC's
INT to the host, hostagent/rdma/frames.py) decode INT with. A process
that imports only this pays no Scapy import (about 0.2 s of CPU).

Per-hop metadata: the metadata stack is split into hops of HopML*4 bytes,
top of the stack (most recent hop) first, and each hop is decoded from the
instruction bitmap into a HopMetadata. The same MetadataLayout encodes and
decodes the stack (INT instruction bitmap) and a report's metadata
(RepMdBits). wire/int_telemetry.py re-exports every name here.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from functools import lru_cache
from typing import Iterable, Optional

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
