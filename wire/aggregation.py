"""The in-network aggregation protocol's header as a Scapy layer, and the
byte codec the worker, the parameter server and the experiments share.

One packet is a UDP datagram from a worker's port AGG_UDP_PORT_BASE + job to
the same port of the job's parameter server (PS), carrying:

    0      flags      AGG_FLAG_* (RESULT, RETRANSMIT, COLLISION, OVERFLOW,
                      FALLBACK, WIDE, SERVER, CONGESTED)
    1      job        1..15
    2      worker     written by the aggregating switch from its agg_worker
                      table (what a sender puts here is overwritten)
    3      exponent   the block's exponent + EXPONENT_BIAS; results carry the
                      largest of the workers'
    4-5    slot       SLOT_SET (shadow set) | slot in the job's range
    6-7    offset     WIDE: the index in the block of the first element
                      carried (a result in parts); else 0
    8-11   seq        the job's packet sequence number
    12-    elements   the block: its job's block_elements int32 (one chunk
                      of CHUNK_ELEMENTS, or MAX_CHUNKS), big-endian two's
                      complement (WIDE: up to WIDE_PART_ELEMENTS int64, part
                      of a PS result)

The P4 side (p4src/include/aggregation.p4) mirrors the constants in
p4src/include/defines.p4; tests/unit/test_agg_headers.py checks they agree.
The protocol itself is docs/protocols/aggregation.md.

Scapy dissects UDP to any of the 16 job ports as Aggregation
(bind_layers); the fast paths (the worker's and the PS's sockets) use
pack()/unpack(), which produce the same bytes. The numbers and the codec
are wire/aggregation_codec.py's, which needs no Scapy (the agents import
it alone); every name there is re-exported here.
"""
from __future__ import annotations

from scapy.fields import ByteField, FieldListField, FlagsField, IntField, ShortField, SignedIntField, \
    SignedLongField
from scapy.layers.inet import UDP
from scapy.packet import Packet, bind_layers

from wire.aggregation_codec import *  # noqa: F401,F403  (the numbers and the struct codecs, re-exported)


class Aggregation(Packet):
    name = "Aggregation"
    fields_desc = [
        FlagsField("flags", 0, 8, FLAG_NAMES),
        ByteField("job", 1),
        ByteField("worker", 0),
        ByteField("exponent", EXPONENT_BIAS),
        ShortField("slot", 0),
        ShortField("offset", 0),
        IntField("seq", 0),
        # the rest of the datagram: a whole block
        FieldListField("elements", [0] * DEFAULT_BLOCK_ELEMENTS, SignedIntField("", 0),  # type: ignore[list-item]  # scapy stubs: default is values, not fields
                       max_count=CHUNK_ELEMENTS * MAX_CHUNKS),
    ]

    def extract_padding(self, s: bytes):
        return b"", s

    def mysummary(self) -> str:
        return self.sprintf("Aggregation job=%job% seq=%seq% slot=%slot% flags=%flags%")


class AggregationWide(Packet):
    """A parameter server's result, or a part of it: int64 sums from element
    `offset` of the block (flag WIDE)."""
    name = "AggregationWide"
    fields_desc = Aggregation.fields_desc[:7] + [
        FieldListField("elements", [0] * WIDE_PART_ELEMENTS, SignedLongField("", 0),  # type: ignore[list-item]  # as above
                       max_count=WIDE_PART_ELEMENTS),
    ]

    def extract_padding(self, s: bytes):
        return b"", s


for _job in range(1, MAX_JOBS + 1):
    bind_layers(UDP, Aggregation, dport=AGG_UDP_PORT_BASE + _job)
