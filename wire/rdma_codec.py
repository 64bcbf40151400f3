"""The RoCEv2 reliable connection's numbers and struct codecs, without Scapy:
what the RDMA agents and the collective ranks build and parse their frames
with (hostagent/rdma/frames.py). A process that imports only this pays no
Scapy import (about 0.2 s of CPU). The headers, their layouts and the
project's terms in the BTH are described in wire/rdma.py, whose Scapy
layers these codecs are tested against (tests/unit/wire/test_rdma.py);
wire/rdma.py re-exports every name here. The opcodes are InfiniBand's
numbers (the same test checks them against Scapy's table).
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Optional

PSN_BITS = 24
PSN_MOD = 1 << PSN_BITS
MSN_MOD = 1 << 24

# RC opcodes (InfiniBand Architecture Specification, 9.2.1; scapy.contrib.roce's opcode("RC", name))
SEND_FIRST, SEND_MIDDLE, SEND_LAST, SEND_ONLY = 0x00, 0x01, 0x02, 0x04
WRITE_FIRST, WRITE_MIDDLE, WRITE_LAST, WRITE_ONLY = 0x06, 0x07, 0x08, 0x0A     # RDMA_WRITE_*
ACKNOWLEDGE = 0x11
DATA_OPCODES = {SEND_FIRST, SEND_MIDDLE, SEND_LAST, SEND_ONLY, WRITE_FIRST, WRITE_MIDDLE, WRITE_LAST, WRITE_ONLY}
FIRST_OPCODES = {SEND_FIRST, SEND_ONLY, WRITE_FIRST, WRITE_ONLY}      # a message starts
LAST_OPCODES = {SEND_LAST, SEND_ONLY, WRITE_LAST, WRITE_ONLY}         # a message ends
RETH_OPCODES = {WRITE_FIRST, WRITE_ONLY}                              # the RETH follows the BTH

# AETH syndrome (InfiniBand Architecture Specification, 9.7.5.1.6): bits 7:5
# say ACK (000, bits 4:0 a credit count; 11111: credits not used), RNR NAK
# (001) or NAK (011, bits 4:0 the reason).
SYNDROME_ACK = 0x1F
SYNDROME_NAK_PSN_SEQUENCE_ERROR = 0x60
SYNDROME_NAK_INVALID_REQUEST = 0x61     # here: the receiver refuses the sender's terms
SYNDROME_NAK_TRIMMED = 0x6F             # here (IBA reserves NAK code 15): the packet of this PSN reached the
                                        # receiver trimmed (packet trimming): resend it now; the SACK as a NAK's
SYNDROME_KIND_MASK = 0xE0
SYNDROME_KIND_ACK, SYNDROME_KIND_NAK = 0x00, 0x60

EXT_SACK = 0x01
EXT_INT = 0x02
SACK_BITS = 64
BTH_BYTES, AETH_BYTES, RETH_BYTES, EXT_BYTES, SACK_BYTES, INT_HOP_BYTES = 12, 4, 16, 4, 12, 16
ICRC_BYTES = 4          # Scapy's BTH ends every packet with the ICRC (an FCS field)

# The terms in BTH.resv7: a code is the name's index.
GO_BACK_N = "go-back-n"
SELECTIVE_REPEAT = "selective-repeat"
MODES = (GO_BACK_N, SELECTIVE_REPEAT)
CONGESTION_CONTROLS = ("dcqcn", "timely", "swift", "hpcc", "nscc")
TERMS_STATED = 0x40                 # the other six bits mean something
TERMS_MODE_SHIFT, TERMS_MODE_MASK = 3, 0x3
TERMS_CC_MASK = 0x7
ANY_CC = TERMS_CC_MASK              # a receiver's terms: any congestion control
TERMS_KNOWN_BITS = TERMS_STATED | TERMS_MODE_MASK << TERMS_MODE_SHIFT | TERMS_CC_MASK


@dataclass(frozen=True)
class Terms:
    """What the two ends of a queue pair must agree on: the retransmission
    mode and the congestion control (None: any, a receiver's terms only)."""
    mode: str
    cc: Optional[str]

    def __str__(self) -> str:
        return f"{self.mode} with {self.cc or 'any congestion control'}"


class MalformedTerms(ValueError):
    pass


def terms_bits(terms: Optional[Terms]) -> int:
    """BTH.resv7 stating `terms` (None: 0, nothing stated)."""
    if terms is None:
        return 0
    if terms.mode not in MODES:
        raise ValueError(f"retransmission mode {terms.mode!r} has no code on the wire (known: {', '.join(MODES)})")
    if terms.cc is not None and terms.cc not in CONGESTION_CONTROLS:
        raise ValueError(f"congestion control {terms.cc!r} has no code on the wire "
                         f"(known: {', '.join(CONGESTION_CONTROLS)})")
    cc = ANY_CC if terms.cc is None else CONGESTION_CONTROLS.index(terms.cc)
    return TERMS_STATED | MODES.index(terms.mode) << TERMS_MODE_SHIFT | cc


def terms_of(bits: int) -> Optional[Terms]:
    """The terms BTH.resv7 states (None: none stated), or MalformedTerms naming the unknown code."""
    if not bits & TERMS_STATED:
        if bits:
            raise MalformedTerms(f"BTH reserved bits 0x{bits:02x} without the terms flag")
        return None
    mode, cc = bits >> TERMS_MODE_SHIFT & TERMS_MODE_MASK, bits & TERMS_CC_MASK
    if bits & ~TERMS_KNOWN_BITS:
        raise MalformedTerms(f"BTH terms 0x{bits:02x}: a reserved bit set")
    if mode >= len(MODES):
        raise MalformedTerms(f"BTH terms 0x{bits:02x}: unknown retransmission mode code {mode}")
    if cc >= len(CONGESTION_CONTROLS) and cc != ANY_CC:
        raise MalformedTerms(f"BTH terms 0x{bits:02x}: unknown congestion control code {cc}")
    return Terms(MODES[mode], None if cc == ANY_CC else CONGESTION_CONTROLS[cc])


# ---- struct codecs (the agent's hot path) ----------------------------------

_BTH = struct.Struct("!BBHII")          # opcode, flags, pkey, resv8 ++ dqpn, ackreq ++ resv7 ++ psn
_AETH = struct.Struct("!I")
_EXT = struct.Struct("!BBH")
_SACK = struct.Struct("!IQ")
_HOP = struct.Struct("!IIII")


def encode_bth(op: int, dqpn: int, psn: int, ackreq: bool = False, becn: bool = False,
               terms: Optional[Terms] = None) -> bytes:
    """A BTH as Scapy's (pkey 0xFFFF, no solicited/migreq/pad, version 0;
    resv7 = terms_bits(terms))."""
    return _BTH.pack(op, 0, 0xFFFF, (int(becn) << 30) | (dqpn & 0xFFFFFF),
                     (int(ackreq) << 31) | terms_bits(terms) << 24 | (psn & 0xFFFFFF))


def decode_bth(b: bytes, at: int = 0) -> tuple[int, int, int, bool]:
    """(opcode, dqpn, psn, ackreq) of the BTH at `at`."""
    op, _flags, _pkey, qp, psn = _BTH.unpack_from(b, at)
    return op, qp & 0xFFFFFF, psn & 0xFFFFFF, bool(psn >> 31)


def decode_terms(b: bytes, at: int = 0) -> Optional[Terms]:
    """The terms the BTH at `at` states (None: none), or MalformedTerms."""
    return terms_of(b[at + 8] & 0x7F)


def encode_aeth(syndrome: int, msn: int) -> bytes:
    return _AETH.pack((syndrome & 0xFF) << 24 | (msn % MSN_MOD))


def decode_aeth(b: bytes, at: int) -> tuple[int, int]:
    (v,) = _AETH.unpack_from(b, at)
    return v >> 24, v & 0xFFFFFF


@dataclass(frozen=True)
class HopRecord:
    tx_bytes: int
    tx_time_us: int
    queue_packets: int
    link_rate_mbps: int


def encode_ack_extension(sack: tuple[int, int] | None = None, hops: tuple[HopRecord, ...] = ()) -> bytes:
    """AckExtension with a SACK (base, bitmap) and/or hops; b"" when there is neither."""
    if sack is None and not hops:
        return b""
    flags = (EXT_SACK if sack is not None else 0) | (EXT_INT if hops else 0)
    out = _EXT.pack(flags, 0, len(hops))
    if sack is not None:
        out += _SACK.pack(sack[0] & 0xFFFFFF, sack[1] & 0xFFFFFFFFFFFFFFFF)
    for h in hops:
        out += _HOP.pack(h.tx_bytes & 0xFFFFFFFF, h.tx_time_us & 0xFFFFFFFF, h.queue_packets & 0xFFFFFFFF,
                         h.link_rate_mbps & 0xFFFFFFFF)
    return out


class MalformedAck(ValueError):
    pass


def decode_ack_extension(b: bytes, at: int, end: int) -> tuple[tuple[int, int] | None, tuple[HopRecord, ...]]:
    """(sack, hops) of the extension in b[at:end] (nothing there: (None, ()))."""
    if end - at <= 0:
        return None, ()
    if end - at < EXT_BYTES:
        raise MalformedAck(f"ACK extension of {end - at} bytes, shorter than its {EXT_BYTES}-byte header")
    flags, _r, n = _EXT.unpack_from(b, at)
    if flags & ~(EXT_SACK | EXT_INT):
        raise MalformedAck(f"ACK extension flags 0x{flags:02x}: unknown bits")
    need = EXT_BYTES + (SACK_BYTES if flags & EXT_SACK else 0) + n * INT_HOP_BYTES
    if end - at < need:
        raise MalformedAck(f"ACK extension says {n} hops{' and a SACK' if flags & EXT_SACK else ''} "
                           f"({need} bytes), {end - at} bytes there")
    if bool(n) != bool(flags & EXT_INT):
        raise MalformedAck(f"ACK extension: {n} hops but INT flag {'set' if flags & EXT_INT else 'clear'}")
    at += EXT_BYTES
    sack = None
    if flags & EXT_SACK:
        base, bitmap = _SACK.unpack_from(b, at)
        sack = (base & 0xFFFFFF, bitmap)
        at += SACK_BYTES
    hops = tuple(HopRecord(*_HOP.unpack_from(b, at + i * INT_HOP_BYTES)) for i in range(n))
    return sack, hops
