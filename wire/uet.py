"""Ultra Ethernet Transport's packet delivery headers (UE 1.0's PDS), as the
UET mode of the host agent's transport uses them (hostagent/rdma/uet.py).

UET runs over UDP, destination port UET_PORT (4793); the UDP source port is
the packet's entropy value, which the switches hash to choose a path, so a
sender sprays by changing it per packet. Every PDS header starts with a
16-bit prologue: type (5 bits), next header (4 bits), flags (7 bits).

Data:  Ether / IP / UDP(sport = entropy, dport 4793)
           / PdsRequest(RUD_REQ or RUD_CC_REQ) / UetMessage / payload
ACK:   ... / PdsAck(ACK_CC: cumulative PSN, the PSN acknowledged, SACK,
           NSCC's or the credit congestion control's state)
NACK:  ... / PdsNack(code: TRIMMED for a packet the switch cut to its
           headers, ... ; nack_psn: that packet's PSN)
Credit: ... / PdsControl(CONTROL, ctl_type CREDIT, payload = bytes granted):
           RCCC's credit when the receiver has no ACK to carry it

The layouts (bit positions, types, NACK codes) follow UE 1.0 as public
implementations of it define them (UET 1.0's own text is not public
here); what the project chose where it had to (docs/rdma.md, "UET"):

  UetMessage   a semantic header of the project's own, not UE's SES (whose
               request formats are not reproduced): message id, the
               packet's byte offset in the message, the message's length.
               The PDS next-header code that announces it is
               NEXT_HEADER_MESSAGE (0xF; UE 1.0 defines 0x0-0x6).
  cack_psn     the highest PSN up to which every packet arrived (the next
               expected is cack_psn + 1); ack_psn_offset: the PSN whose
               arrival this ACK answers, as an offset from cack_psn.
  SACK         base = cack_psn + sack_psn_offset; bit i (least significant
               first) says PSN base + i arrived.
  SYN          set on a PDC's packets until the sender has an ACK: the
               DPDCID field then carries the packet's offset from the PDC's
               start PSN (12 bits), so the receiver learns the start from
               any of them, in any order.

Every layer has a struct codec for the agent's hot path (encode_* /
decode_*), tested to give the same bytes as Scapy (tests/unit/wire/test_uet.py).
The agents use the codecs alone: the Scapy layers are made, and bound, when
one is first asked for (as in wire/rdma.py).
"""
from __future__ import annotations

import functools
import struct
from dataclasses import dataclass
from typing import Any, Optional

UET_PORT = 4793

# PDS packet types (the prologue's 5-bit type)
RUD_REQ = 2
ACK = 7
ACK_CC = 8
NACK = 10
CONTROL = 11
RUD_CC_REQ = 13
REQUEST_TYPES = (RUD_REQ, RUD_CC_REQ)

NEXT_HEADER_NONE = 0x0
NEXT_HEADER_MESSAGE = 0xF           # the project's UetMessage (UE 1.0 defines 0x0-0x6)

# ACK_CC: which congestion control's state the ACK carries
CC_NSCC = 0
CC_CREDIT = 1

# NACK codes (UE 1.0)
NACK_TRIMMED = 0x01                 # the packet arrived trimmed: resend it
NACK_PSN_OUT_OF_WINDOW = 0x0B       # beyond what the receiver tracks
NACK_INVALID_DPDCID = 0x0E          # no SYN, and the receiver has no PDC of that id
NACK_MODE_MISMATCH = 0x16           # the ends disagree (the project: on the congestion control)

# CONTROL packet types (the prologue's next-header bits)
CONTROL_CREDIT = 7

PSN_MOD = 1 << 32
SYN_OFFSET_MAX = (1 << 12) - 1      # a SYN packet's offset from the start PSN
SACK_BITS = 64
CREDIT_MAX = (1 << 24) - 1


LAYERS = ("PdsRequest", "UetMessage", "PdsAck", "PdsNack", "PdsControl")


def __getattr__(name: str) -> Any:
    """The Scapy layers, made (and bound) when one is first asked for."""
    if name in LAYERS:
        return _layers()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@functools.cache
def _layers() -> dict[str, Any]:
    from scapy.fields import BitField, ByteField, ConditionalField, IntField, LongField, ShortField, XByteField
    from scapy.layers.inet import UDP
    from scapy.packet import Packet, bind_layers

    class PdsRequest(Packet):
        """RUD_REQ, or RUD_CC_REQ with the sender's congestion control id and
        credit target (RCCC: bytes it has to send). With `syn`, the field after
        SPDCID is use_rsv_pdc, 3 reserved bits and the PSN's offset from the
        PDC's start; without, the destination PDC id."""
        name = "PdsRequest"
        fields_desc = [BitField("type", RUD_REQ, 5), BitField("next_hdr", NEXT_HEADER_MESSAGE, 4),
                       BitField("rsvd1", 0, 2), BitField("retrans", 0, 1), BitField("ackreq", 0, 1),
                       BitField("syn", 0, 1), BitField("rsvd2", 0, 2),
                       ShortField("clear_psn_offset", 0), IntField("psn", 0), ShortField("spdcid", 0),
                       ConditionalField(ShortField("dpdcid", 0), lambda p: not p.syn),
                       ConditionalField(BitField("use_rsv_pdc", 0, 1), lambda p: p.syn),
                       ConditionalField(BitField("rsvd3", 0, 3), lambda p: p.syn),
                       ConditionalField(BitField("psn_offset", 0, 12), lambda p: p.syn),
                       ConditionalField(ByteField("ccc_id", 0), lambda p: p.type == RUD_CC_REQ),
                       ConditionalField(BitField("credit_target", 0, 24), lambda p: p.type == RUD_CC_REQ)]

        @classmethod
        def dispatch_hook(cls, _pkt=None, *args, **kargs):
            if _pkt and len(_pkt) >= 1:
                return _BY_TYPE.get(_pkt[0] >> 3, cls)
            return cls

    class UetMessage(Packet):
        """The project's semantic header: which message a packet is part of,
        where its payload goes in it, and the message's length."""
        name = "UetMessage"
        fields_desc = [IntField("msg_id", 0), IntField("offset", 0), IntField("length", 0)]

    class PdsAck(Packet):
        """ACK or ACK_CC. ACK_CC adds the congestion control's type, the SACK
        and 8 bytes of its state: NSCC's (service time, restore_cwnd, pending
        window, bytes received, packets out of order) or the credit one's
        (credit granted in bytes, packets out of order)."""
        name = "PdsAck"
        fields_desc = [BitField("type", ACK_CC, 5), BitField("next_hdr", NEXT_HEADER_NONE, 4),
                       BitField("rsvd1", 0, 1), BitField("ecn_marked", 0, 1), BitField("retrans", 0, 1),
                       BitField("probe", 0, 1), BitField("request", 0, 2), BitField("rsvd2", 0, 1),
                       ShortField("ack_psn_offset", 0), IntField("cack_psn", 0), ShortField("spdcid", 0),
                       ShortField("dpdcid", 0),
                       ConditionalField(BitField("cc_type", CC_NSCC, 4), lambda p: p.type == ACK_CC),
                       ConditionalField(BitField("cc_flags", 0, 4), lambda p: p.type == ACK_CC),
                       ConditionalField(XByteField("mpr", 0), lambda p: p.type == ACK_CC),
                       ConditionalField(ShortField("sack_psn_offset", 0), lambda p: p.type == ACK_CC),
                       ConditionalField(LongField("sack_bitmap", 0), lambda p: p.type == ACK_CC),
                       ConditionalField(ShortField("service_time", 0),
                                        lambda p: p.type == ACK_CC and p.cc_type == CC_NSCC),
                       ConditionalField(BitField("restore_cwnd", 0, 1),
                                        lambda p: p.type == ACK_CC and p.cc_type == CC_NSCC),
                       ConditionalField(BitField("rcv_cwnd_pend", 0, 7),
                                        lambda p: p.type == ACK_CC and p.cc_type == CC_NSCC),
                       ConditionalField(BitField("rcvd_bytes", 0, 24),
                                        lambda p: p.type == ACK_CC and p.cc_type == CC_NSCC),
                       ConditionalField(BitField("credit", 0, 24),
                                        lambda p: p.type == ACK_CC and p.cc_type == CC_CREDIT),
                       ConditionalField(ByteField("credit_rsvd1", 0),
                                        lambda p: p.type == ACK_CC and p.cc_type == CC_CREDIT),
                       ConditionalField(ShortField("credit_rsvd2", 0),
                                        lambda p: p.type == ACK_CC and p.cc_type == CC_CREDIT),
                       ConditionalField(ShortField("ooo_count", 0), lambda p: p.type == ACK_CC)]

    class PdsNack(Packet):
        """NACK: `nack_code` says why (NACK_TRIMMED: resend that packet now),
        `nack_psn` which packet."""
        name = "PdsNack"
        fields_desc = [BitField("type", NACK, 5), BitField("next_hdr", NEXT_HEADER_NONE, 4),
                       BitField("rsvd1", 0, 1), BitField("ecn_marked", 0, 1), BitField("retrans", 0, 1),
                       BitField("nack_type", 0, 1), BitField("rsvd2", 0, 3),
                       XByteField("nack_code", 0), XByteField("vendor_code", 0), IntField("nack_psn", 0),
                       ShortField("spdcid", 0), ShortField("dpdcid", 0), IntField("nack_payload", 0)]

    class PdsControl(Packet):
        """CONTROL: `ctl_type` CONTROL_CREDIT carries RCCC's credit (bytes) in
        its payload word (`credit`) when the receiver has no ACK to carry it."""
        name = "PdsControl"
        fields_desc = [BitField("type", CONTROL, 5), BitField("ctl_type", CONTROL_CREDIT, 4),
                       BitField("rsvd1", 0, 1), BitField("rsvd_isrod", 0, 1), BitField("retrans", 0, 1),
                       BitField("ackreq", 0, 1), BitField("syn", 0, 1), BitField("rsvd2", 0, 2),
                       ShortField("probe_opaque", 0), IntField("psn", 0), ShortField("spdcid", 0),
                       ShortField("dpdcid", 0), IntField("credit", 0)]

    _BY_TYPE: dict[int, type[Packet]] = {RUD_REQ: PdsRequest, RUD_CC_REQ: PdsRequest, ACK: PdsAck,
                                         ACK_CC: PdsAck, NACK: PdsNack, CONTROL: PdsControl}

    bind_layers(UDP, PdsRequest, dport=UET_PORT)
    bind_layers(PdsRequest, UetMessage, next_hdr=NEXT_HEADER_MESSAGE)

    return {"PdsRequest": PdsRequest, "UetMessage": UetMessage, "PdsAck": PdsAck, "PdsNack": PdsNack,
            "PdsControl": PdsControl}


# ---- struct codecs (the agent's hot path) ----------------------------------

class MalformedPds(ValueError):
    """A PDS header the transport cannot use, and why."""


_PROLOGUE = struct.Struct("!H")
_REQUEST = struct.Struct("!HHIHH")            # prologue, clear_psn_offset, psn, spdcid, dpdcid | syn word
_CC_STATE = struct.Struct("!I")               # ccc_id (8) ++ credit_target (24)
_MESSAGE = struct.Struct("!III")
_ACK = struct.Struct("!HHIHH")                # prologue, ack_psn_offset, cack_psn, spdcid, dpdcid
_ACK_CC = struct.Struct("!BBHQHHHH")          # cc_type|flags, mpr, sack offset, bitmap, 8 bytes of state
_NACK = struct.Struct("!HBBIHHI")
_CONTROL = struct.Struct("!HHIHHI")

REQUEST_BYTES = _REQUEST.size
CC_REQUEST_BYTES = _REQUEST.size + _CC_STATE.size
MESSAGE_BYTES = _MESSAGE.size
ACK_BYTES = _ACK.size
ACK_CC_BYTES = _ACK.size + _ACK_CC.size
NACK_BYTES = _NACK.size
CONTROL_BYTES = _CONTROL.size


def prologue(pds_type: int, next_hdr: int, flags: int) -> int:
    return (pds_type & 0x1F) << 11 | (next_hdr & 0xF) << 7 | (flags & 0x7F)


def pds_type(b: bytes, at: int = 0) -> int:
    """The PDS type of the header at `at`."""
    if len(b) - at < 2:
        raise MalformedPds(f"a PDS header needs its 2-byte prologue, {max(0, len(b) - at)} bytes there")
    return b[at] >> 3


def _fixed(b: bytes, at: int, kind: int, size: int, name: str) -> None:
    """The header at `at` is a `name` (PDS type `kind`) of `size` bytes, all there."""
    found = pds_type(b, at)
    if found != kind:
        raise MalformedPds(f"PDS type {found} is not {name} ({kind})")
    if len(b) - at < size:
        raise MalformedPds(f"{name} has {size} bytes, {len(b) - at} there")


@dataclass(frozen=True)
class Request:
    """A data packet's PDS request and message header, decoded."""
    psn: int
    spdcid: int
    dpdcid: int                         # 0 with syn: not known yet
    msg_id: int
    offset: int
    length: int
    ackreq: bool = False
    retrans: bool = False
    syn: bool = False
    syn_offset: int = 0                 # with syn: psn - the PDC's start PSN
    clear_psn_offset: int = 0
    credit_target: Optional[int] = None     # RUD_CC_REQ (RCCC): bytes the sender has left to send
    ccc_id: int = 0


def encode_request(r: Request) -> bytes:
    """PdsRequest + UetMessage, as Scapy's layers give them."""
    flags = int(r.retrans) << 4 | int(r.ackreq) << 3 | int(r.syn) << 2
    kind = RUD_REQ if r.credit_target is None else RUD_CC_REQ
    if r.syn and not 0 <= r.syn_offset <= SYN_OFFSET_MAX:
        raise ValueError(f"a SYN packet's offset from the start PSN is 0..{SYN_OFFSET_MAX}, got {r.syn_offset}")
    last = r.syn_offset & 0xFFF if r.syn else r.dpdcid & 0xFFFF
    out = _REQUEST.pack(prologue(kind, NEXT_HEADER_MESSAGE, flags), min(r.clear_psn_offset, 0xFFFF),
                        r.psn % PSN_MOD, r.spdcid & 0xFFFF, last)
    if r.credit_target is not None:
        out += _CC_STATE.pack((r.ccc_id & 0xFF) << 24 | min(r.credit_target, CREDIT_MAX))
    return out + _MESSAGE.pack(r.msg_id & 0xFFFFFFFF, r.offset & 0xFFFFFFFF, r.length & 0xFFFFFFFF)


def decode_request(b: bytes, at: int = 0, headers_only: bool = False) -> Request:
    """The Request at `at`. headers_only: a trimmed packet, whose message
    header may be cut; its PDS header is what counts (message fields 0)."""
    kind = pds_type(b, at)
    if kind not in REQUEST_TYPES:
        raise MalformedPds(f"PDS type {kind} is not a RUD request")
    size = REQUEST_BYTES + (_CC_STATE.size if kind == RUD_CC_REQ else 0)
    if len(b) - at < size:
        raise MalformedPds(f"a PDS request of type {kind} has {size} bytes, {len(b) - at} there")
    pro, clear, psn, spdcid, last = _REQUEST.unpack_from(b, at)
    next_hdr, flags = pro >> 7 & 0xF, pro & 0x7F
    syn = bool(flags & 0x04)
    credit_target, ccc_id = None, 0
    if kind == RUD_CC_REQ:
        (cc,) = _CC_STATE.unpack_from(b, at + REQUEST_BYTES)
        ccc_id, credit_target = cc >> 24, cc & 0xFFFFFF
    msg = (0, 0, 0)
    if not headers_only:
        if next_hdr != NEXT_HEADER_MESSAGE:
            raise MalformedPds(f"PDS request announces next header 0x{next_hdr:x}, not the message header "
                               f"(0x{NEXT_HEADER_MESSAGE:x})")
        if len(b) - at < size + MESSAGE_BYTES:
            raise MalformedPds(f"the message header needs {MESSAGE_BYTES} bytes after the PDS request, "
                               f"{len(b) - at - size} there")
        msg = _MESSAGE.unpack_from(b, at + size)
    return Request(psn=psn, spdcid=spdcid, dpdcid=0 if syn else last, msg_id=msg[0], offset=msg[1], length=msg[2],
                   ackreq=bool(flags & 0x08), retrans=bool(flags & 0x10), syn=syn,
                   syn_offset=last & 0xFFF if syn else 0, clear_psn_offset=clear, credit_target=credit_target,
                   ccc_id=ccc_id)


def request_payload_at(b: bytes, at: int = 0) -> int:
    """Where a request's payload starts, given where its PDS header does."""
    return at + (CC_REQUEST_BYTES if pds_type(b, at) == RUD_CC_REQ else REQUEST_BYTES) + MESSAGE_BYTES


@dataclass(frozen=True)
class AckCc:
    """An ACK_CC, decoded: cumulative PSN, the PSN answered, the SACK
    (base, bitmap), and the congestion control's state."""
    cack_psn: int
    ack_psn: int
    spdcid: int
    dpdcid: int
    ecn_marked: bool = False
    retrans: bool = False
    sack_base: int = 0
    sack_bitmap: int = 0
    cc_type: int = CC_NSCC
    rcvd_bytes: int = 0                 # NSCC: payload bytes received since the previous ACK (mod 2^24)
    credit: int = 0                     # credit: bytes granted by this ACK
    ooo_count: int = 0                  # packets held out of order


def encode_ack(a: AckCc) -> bytes:
    flags = int(a.ecn_marked) << 5 | int(a.retrans) << 4
    ack_off = (a.ack_psn - a.cack_psn) % PSN_MOD
    sack_off = (a.sack_base - a.cack_psn) % PSN_MOD
    for name, v in (("ack_psn", ack_off), ("sack_base", sack_off)):
        if v > 0xFFFF:
            raise ValueError(f"{name} {v} beyond cack_psn {a.cack_psn}: the offset has 16 bits")
    if a.cc_type == CC_NSCC:
        state = (0, (a.rcvd_bytes & 0xFFFFFF) >> 16, a.rcvd_bytes & 0xFFFF)
    elif a.cc_type == CC_CREDIT:
        c = min(a.credit, CREDIT_MAX)
        state = (c >> 8, (c & 0xFF) << 8, 0)
    else:
        raise ValueError(f"unknown congestion control type {a.cc_type}")
    return (_ACK.pack(prologue(ACK_CC, NEXT_HEADER_NONE, flags), ack_off, a.cack_psn % PSN_MOD, a.spdcid & 0xFFFF,
                      a.dpdcid & 0xFFFF)
            + _ACK_CC.pack(a.cc_type << 4, 0, sack_off, a.sack_bitmap & 0xFFFFFFFFFFFFFFFF, *state,
                           a.ooo_count & 0xFFFF))


def decode_ack(b: bytes, at: int = 0) -> AckCc:
    _fixed(b, at, ACK_CC, ACK_CC_BYTES, "an ACK_CC")
    pro, ack_off, cack, spdcid, dpdcid = _ACK.unpack_from(b, at)
    cc_byte, _mpr, sack_off, bitmap, s0, s1, s2, ooo = _ACK_CC.unpack_from(b, at + ACK_BYTES)
    cc_type = cc_byte >> 4
    if cc_type not in (CC_NSCC, CC_CREDIT):
        raise MalformedPds(f"ACK_CC of unknown congestion control type {cc_type}")
    rcvd = (s1 & 0xFF) << 16 | s2 if cc_type == CC_NSCC else 0
    credit = s0 << 8 | s1 >> 8 if cc_type == CC_CREDIT else 0
    return AckCc(cack_psn=cack, ack_psn=(cack + ack_off) % PSN_MOD, spdcid=spdcid, dpdcid=dpdcid,
                 ecn_marked=bool(pro & 0x20), retrans=bool(pro & 0x10), sack_base=(cack + sack_off) % PSN_MOD,
                 sack_bitmap=bitmap, cc_type=cc_type, rcvd_bytes=rcvd, credit=credit, ooo_count=ooo)


@dataclass(frozen=True)
class Nack:
    code: int
    psn: int
    spdcid: int
    dpdcid: int
    ecn_marked: bool = False
    payload: int = 0


def encode_nack(n: Nack) -> bytes:
    return _NACK.pack(prologue(NACK, NEXT_HEADER_NONE, int(n.ecn_marked) << 5), n.code & 0xFF, 0, n.psn % PSN_MOD,
                      n.spdcid & 0xFFFF, n.dpdcid & 0xFFFF, n.payload & 0xFFFFFFFF)


def decode_nack(b: bytes, at: int = 0) -> Nack:
    _fixed(b, at, NACK, NACK_BYTES, "a NACK")
    pro, code, _vendor, psn, spdcid, dpdcid, payload = _NACK.unpack_from(b, at)
    return Nack(code=code, psn=psn, spdcid=spdcid, dpdcid=dpdcid, ecn_marked=bool(pro & 0x20), payload=payload)


@dataclass(frozen=True)
class Credit:
    """A CONTROL packet of type CREDIT: `credit` bytes granted to the PDC."""
    credit: int
    spdcid: int
    dpdcid: int


def encode_credit(c: Credit) -> bytes:
    return _CONTROL.pack(prologue(CONTROL, CONTROL_CREDIT, 0), 0, 0, c.spdcid & 0xFFFF, c.dpdcid & 0xFFFF,
                         c.credit & 0xFFFFFFFF)


def decode_credit(b: bytes, at: int = 0) -> Credit:
    _fixed(b, at, CONTROL, CONTROL_BYTES, "a CONTROL packet")
    pro, _opaque, _psn, spdcid, dpdcid, payload = _CONTROL.unpack_from(b, at)
    if pro >> 7 & 0xF != CONTROL_CREDIT:
        raise MalformedPds(f"CONTROL packet of type {pro >> 7 & 0xF}, not CREDIT ({CONTROL_CREDIT})")
    return Credit(credit=payload, spdcid=spdcid, dpdcid=dpdcid)
