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
The numbers and the codecs are wire/uet_codec.py's, which needs no Scapy
(the agents import it alone); every name there is re-exported here.
"""
from __future__ import annotations

from scapy.fields import BitField, ByteField, ConditionalField, IntField, LongField, ShortField, XByteField
from scapy.layers.inet import UDP
from scapy.packet import Packet, bind_layers

from wire.uet_codec import *  # noqa: F401,F403  (the numbers and the struct codecs, re-exported)


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
