"""The RoCEv2 reliable connection's headers (hostagent/rdma/transport.py):
data packets, ACKs and NAKs, and two extensions after the AETH.

InfiniBand's own headers come from Scapy (scapy.contrib.roce: BTH, AETH);
this module adds RETH, binds them by opcode, and defines:

  AckExtension  after the AETH of an ACK/NAK from a receiver that has
                more to say: for selective repeat (IRN, SIGCOMM'18) the
                first PSN the receiver misses and a bitmap of the 64 PSNs
                after it that it holds, so the sender resends only the
                holes; for HPCC (SIGCOMM'19) IntHop records.
  IntHop        one switch's INT data the receiver echoes from the data
                packet to the sender: tx bytes, tx time, queue occupancy and
                link rate of the egress port.

Data packet: Ether / IP / UDP(4791) / BTH(opcode, psn) [/ RETH] / payload.
ACK:         ... / BTH(RC_ACKNOWLEDGE, psn = the last PSN received in order)
                 / AETH(syndrome = ACK, msn = messages completed)
                 [/ AckExtension (SACK, IntHop * hops)]
NAK:         the same with AETH.syndrome = NAK_PSN_SEQUENCE_ERROR and BTH.psn
             = the PSN the receiver expects (it resends from there: go-back-N).
Refusal:     ... / BTH(RC_ACKNOWLEDGE, resv7 = the receiver's terms)
                 / AETH(syndrome = NAK_INVALID_REQUEST): the ends disagree.

Terms (this project's use of the BTH, not InfiniBand's): every data packet
states its sender's retransmission mode and congestion control in the
BTH's 7 reserved bits after AckReq (`resv7`), which InfiniBand has senders
set to zero: TERMS_STATED | mode code << 3 | congestion control code (the
codes: indices in MODES and CONGESTION_CONTROLS; ANY_CC: a receiver that
takes any). A receiver that does not agree refuses with a NAK invalid
request stating its own terms the same way. No byte is added.

Every layer has a struct codec for the agent's hot path (encode_* /
decode_*), tested to give the same bytes as Scapy (tests/unit/wire/test_rdma.py).
The numbers and the codecs are wire/rdma_codec.py's, which needs no Scapy
(the agents import it alone); every name there is re-exported here.
"""
from __future__ import annotations

from scapy.contrib.roce import AETH, BTH, opcode  # noqa: F401  (re-exported)
from scapy.fields import BitField, ByteField, ConditionalField, FieldLenField, IntField, LongField, \
    PacketListField, XByteField
from scapy.packet import Packet, bind_layers

from wire.rdma_codec import *  # noqa: F401,F403  (the numbers and the struct codecs, re-exported)


class RETH(Packet):
    """RDMA extended transport header: where a WRITE goes in the responder's memory."""
    name = "RETH"
    fields_desc = [LongField("va", 0), IntField("rkey", 0), IntField("dma_len", 0)]


class IntHop(Packet):
    """One switch's HPCC data, as the fabric's INT carries it (FABRIC_DS:
    tx bytes mod 2^32, tx time in us mod 2^32, link rate; baseline: queue
    occupancy, packets on BMv2), echoed by the receiver."""
    name = "IntHop"
    fields_desc = [IntField("tx_bytes", 0), IntField("tx_time_us", 0), IntField("queue_packets", 0),
                   IntField("link_rate_mbps", 0)]

    def extract_padding(self, s):
        return b"", s


class AckExtension(Packet):
    """After an ACK's or NAK's AETH: a selective acknowledgement (IRN) when
    `flags` has EXT_SACK (PSN `sack_base` is missing; bit i of
    `sack_bitmap`, least significant first, says PSN sack_base + 1 + i
    arrived), then `hops` IntHop records (HPCC) when it has EXT_INT."""
    name = "AckExtension"
    fields_desc = [XByteField("flags", 0), ByteField("reserved", 0),
                   FieldLenField("hops", None, count_of="int_hops", fmt="!H"),
                   ConditionalField(ByteField("sack_reserved", 0), lambda p: p.flags & EXT_SACK),
                   ConditionalField(BitField("sack_base", 0, 24), lambda p: p.flags & EXT_SACK),
                   ConditionalField(LongField("sack_bitmap", 0), lambda p: p.flags & EXT_SACK),
                   PacketListField("int_hops", [], IntHop, count_from=lambda p: p.hops)]


bind_layers(BTH, RETH, opcode=WRITE_FIRST)
bind_layers(BTH, RETH, opcode=WRITE_ONLY)
bind_layers(BTH, AETH, opcode=ACKNOWLEDGE)
bind_layers(AETH, AckExtension)
