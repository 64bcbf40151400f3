"""Frames of the RC transport on the wire: built from a header template
(wire/ipv4.py's, made once a peer) plus wire/rdma_codec.py's struct
codecs, and parsed back without Scapy (tens of microseconds a packet would
halve what an agent can send). tests/unit/hostagent/rdma/test_frames.py checks both against Scapy.

A frame that is not the transport's, or is malformed, is refused with a
reason (`NotOurs`, `Malformed`) that the agent counts; nothing raises past
the agent's loop.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Optional

from wire.ecn import CE, ECT0
from wire.ipv4 import ETHERNET_BYTES, IPV4_BYTES, UDP_BYTES, encode_udp_header, ipv4_checksum
from wire.int_telemetry_codec import INT_UDP_PORT, NPT_UDP_PORT, int_layout, split_stack
from wire.lossless import dscp_tos
from wire.rdma_codec import (ACKNOWLEDGE, AETH_BYTES, BTH_BYTES, DATA_OPCODES, ICRC_BYTES, RETH_BYTES,
                             RETH_OPCODES, HopRecord, MalformedAck, MalformedTerms, Terms, decode_ack_extension,
                             decode_aeth, decode_bth, decode_terms, encode_ack_extension, encode_aeth, encode_bth)
from wire.roce import CNP, ROCEV2_UDP_PORT
from wire.trimming import TRIMMED_DSCP

ETH, IP_BYTES = ETHERNET_BYTES, IPV4_BYTES
L4 = ETH + IP_BYTES                 # UDP header
BTH_AT = L4 + UDP_BYTES
ICRC = b"\x00" * ICRC_BYTES         # the agents neither compute nor check the ICRC (no NIC here does)
_RETH = struct.Struct("!QII")


class NotOurs(ValueError):
    """Not a RoCEv2 frame of this transport (another protocol, IP options, ...)."""


class Malformed(ValueError):
    """A RoCEv2 frame whose transport headers are wrong."""


def set_lengths(head: bytearray, tos: int, udp_payload_bytes: int) -> None:
    """An Ethernet/IPv4/UDP header template made ready for a UDP payload of
    that many bytes: the TOS byte, the IPv4 total length and checksum, the
    UDP length (its checksum stays 0)."""
    head[ETH + 1] = tos
    ip_len = IP_BYTES + UDP_BYTES + udp_payload_bytes
    head[ETH + 2:ETH + 4] = ip_len.to_bytes(2, "big")
    head[ETH + 10:ETH + 12] = b"\x00\x00"
    head[ETH + 10:ETH + 12] = ipv4_checksum(bytes(head[ETH:L4])).to_bytes(2, "big")
    head[L4 + 4:L4 + 6] = (ip_len - IP_BYTES).to_bytes(2, "big")


@dataclass(frozen=True)
class Parsed:
    """A frame of the transport: data, ACK/NAK or CNP."""
    kind: str                        # "data", "ack", "cnp", "trimmed" (a data packet a switch cut: its BTH only)
    src_ip: str
    qp: int
    psn: int
    opcode: int
    ce: bool = False
    ackreq: bool = False
    payload: bytes = b""
    syndrome: int = 0
    msn: int = 0
    sack: Optional[tuple[int, int]] = None
    hops: tuple[HopRecord, ...] = ()
    terms: Optional[Terms] = None    # data: the sender's; a refusal: the receiver's


class FrameBuilder:
    """Frames from one host to one peer: Ethernet (to the gateway), IPv4
    (DF, the class's DSCP, ECT(0) for data), UDP to 4791 (checksum 0, as
    RoCEv2 allows)."""

    def __init__(self, src_mac: str, dst_mac: str, src_ip: str, dst_ip: str, sport: int, dscp: int = 0):
        self._head = bytearray(encode_udp_header(src_mac, dst_mac, src_ip, dst_ip, sport, ROCEV2_UDP_PORT,
                                                 tos=dscp_tos(dscp, ECT0)))
        self._tos_data = dscp_tos(dscp, ECT0)
        self._tos_ctrl = dscp_tos(dscp, 0)       # ACKs and CNPs are not ECN-capable
        self.sport = sport

    def _frame(self, tos: int, transport: bytes) -> bytes:
        set_lengths(self._head, tos, len(transport) + ICRC_BYTES)
        return bytes(self._head) + transport + ICRC

    def data(self, qp: int, psn: int, opcode: int, payload: bytes, ackreq: bool = False,
             reth: tuple[int, int, int] | None = None, terms: Terms | None = None) -> bytes:
        """A data packet; `reth` (va, rkey, length) for a WRITE's first packet;
        `terms`: the sender's, stated in the BTH."""
        body = encode_bth(opcode, qp, psn, ackreq=ackreq, terms=terms)
        if opcode in RETH_OPCODES:
            body += _RETH.pack(*(reth or (0, 0, len(payload))))
        return self._frame(self._tos_data, body + payload)

    def ack(self, qp: int, psn: int, syndrome: int, msn: int, sack: tuple[int, int] | None = None,
            hops: tuple[HopRecord, ...] = (), terms: Terms | None = None) -> bytes:
        """An ACK or NAK; `terms`: the receiver's, when it refuses the sender's."""
        return self._frame(self._tos_ctrl, encode_bth(ACKNOWLEDGE, qp, psn, terms=terms)
                           + encode_aeth(syndrome, msn) + encode_ack_extension(sack, hops))

    def cnp(self, qp: int) -> bytes:
        return self._frame(self._tos_ctrl, encode_bth(CNP, qp, 0, becn=True) + b"\x00" * 16)


def _ip(b: bytes, at: int) -> str:
    return ".".join(str(x) for x in b[at:at + 4])


INT_MD_BYTES = 12


def _int_hops(frame: bytes, end: int) -> tuple[int, tuple[HopRecord, ...]]:
    """(where the BTH starts, the INT stack's hops first hop first) of a
    RoCEv2 packet whose INT reached the host (UDP port INT_UDP_PORT, the
    original 4791 in the shim). Hops without HPCC's values give none."""
    shim = BTH_AT
    if end - shim < 4 + INT_MD_BYTES:
        raise Malformed("INT shim and header cut short")
    npt, words, original = frame[shim] >> 2 & 3, frame[shim + 1], int.from_bytes(frame[shim + 2:shim + 4], "big")
    if frame[shim] >> 4 != 1 or npt != NPT_UDP_PORT or original != ROCEV2_UDP_PORT:
        raise NotOurs("INT over UDP, but not around RoCEv2")
    bth = shim + 4 + 4 * words
    if words < 3 or bth + BTH_BYTES > end:
        raise Malformed(f"INT shim length {words} words leaves no BTH")
    md = shim + 4
    hop_ml = frame[md + 2] & 0x1F
    bitmap, ds_id, ds_ins = struct.unpack_from("!HHH", frame, md + 4)
    stack = frame[md + INT_MD_BYTES:bth]
    hops = []
    for h in reversed(split_stack(bytes(stack), 4 * hop_ml, int_layout(bitmap, ds_id, ds_ins))):
        if h.tx_bytes is None or h.tx_timestamp is None or h.queue_occupancy is None or h.link_rate_mbps is None:
            return bth, ()
        hops.append(HopRecord(h.tx_bytes, h.tx_timestamp, h.queue_occupancy, h.link_rate_mbps))
    return bth, tuple(hops)


def check_dscp(dscp: int, trimmed_dscp: Optional[int]) -> None:
    """The transport's packets may not wear the DSCP that marks trimmed ones."""
    if trimmed_dscp is not None and dscp == trimmed_dscp:
        raise ValueError(f"DSCP {dscp} marks trimmed packets (wire/trimming.py): the transport's need another")


def parse(frame: bytes, trimmed_dscp: Optional[int] = TRIMMED_DSCP) -> Parsed:
    """The transport's view of a frame, or NotOurs / Malformed naming why. A
    data packet marked `trimmed_dscp` is a trimmed one (packet trimming:
    wire/trimming.py), whatever its length says is left: kind "trimmed"."""
    if len(frame) < BTH_AT:
        raise NotOurs("shorter than Ethernet/IPv4/UDP")
    if frame[12:14] != b"\x08\x00" or frame[ETH] >> 4 != 4:
        raise NotOurs("not IPv4")
    if frame[ETH] & 0x0F != 5:
        raise NotOurs("IPv4 options")
    if frame[ETH + 9] != 17:
        raise NotOurs("not RoCEv2 (UDP 4791)")
    dport = int.from_bytes(frame[L4 + 2:L4 + 4], "big")
    if dport != ROCEV2_UDP_PORT and dport != INT_UDP_PORT:
        raise NotOurs("not RoCEv2 (UDP 4791)")
    if trimmed_dscp is not None and frame[ETH + 1] >> 2 == trimmed_dscp:
        return _trimmed(frame, dport)
    end = ETH + int.from_bytes(frame[ETH + 2:ETH + 4], "big") - ICRC_BYTES   # Ethernet may pad short frames
    if end + ICRC_BYTES > len(frame) or end < BTH_AT + BTH_BYTES:
        raise Malformed(f"IPv4 length {end + ICRC_BYTES - ETH} leaves no BTH and ICRC in a {len(frame)}-byte frame")
    bth = BTH_AT
    hops: tuple[HopRecord, ...] = ()
    if dport == INT_UDP_PORT:                   # INT to the host (HPCC): the fabric's stack before the BTH
        bth, hops = _int_hops(frame, end)
    op, qp, psn, ackreq = decode_bth(frame, bth)
    try:
        terms = decode_terms(frame, bth)
    except MalformedTerms as e:
        raise Malformed(str(e)) from None
    src = _ip(frame, ETH + 12)
    ce = frame[ETH + 1] & 3 == CE
    at = bth + BTH_BYTES
    if op in DATA_OPCODES:
        if op in RETH_OPCODES:
            if end - at < RETH_BYTES:
                raise Malformed(f"opcode 0x{op:02x} needs a RETH, {end - at} bytes after the BTH")
            at += RETH_BYTES
        return Parsed("data", src, qp, psn, op, ce=ce, ackreq=ackreq, payload=bytes(frame[at:end]), hops=hops,
                      terms=terms)
    if op == ACKNOWLEDGE:
        if end - at < AETH_BYTES:
            raise Malformed(f"ACK without its AETH ({end - at} bytes after the BTH)")
        syndrome, msn = decode_aeth(frame, at)
        try:
            sack, hops = decode_ack_extension(frame, at + AETH_BYTES, end)
        except MalformedAck as e:
            raise Malformed(str(e)) from None
        return Parsed("ack", src, qp, psn, op, syndrome=syndrome, msn=msn, sack=sack, hops=hops, terms=terms)
    if op == CNP:
        return Parsed("cnp", src, qp, psn, op)
    raise Malformed(f"opcode 0x{op:02x} is not one this transport uses")


def _trimmed(frame: bytes, dport: int) -> Parsed:
    """A trimmed data packet: what is left of it up to its BTH (no payload, no ICRC)."""
    if dport != ROCEV2_UDP_PORT:
        raise Malformed("a trimmed packet with INT before its BTH (the trim may have cut it)")
    if len(frame) < BTH_AT + BTH_BYTES:
        raise Malformed(f"a trimmed packet of {len(frame)} bytes, shorter than its BTH")
    op, qp, psn, _ = decode_bth(frame, BTH_AT)
    if op not in DATA_OPCODES:
        raise Malformed(f"a trimmed packet of opcode 0x{op:02x}: only data is trimmed")
    return Parsed("trimmed", _ip(frame, ETH + 12), qp, psn, op)
