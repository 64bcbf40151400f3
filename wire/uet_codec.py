"""Ultra Ethernet's packet delivery headers' numbers and struct codecs,
without Scapy: what the UET agents and the collective ranks build and parse
their frames with (hostagent/rdma/uet_agent.py). A process that imports
only this pays no Scapy import (about 0.2 s of CPU). The headers and what
the project chose are described in wire/uet.py, whose Scapy layers these
codecs are tested against (tests/unit/wire/test_uet.py); wire/uet.py
re-exports every name here.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Optional

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
