"""Host plane failover's wire format: sequenced flow data and per-flow acks
(hostagent/failover/plane_failover.py sends and answers them).

Data: UDP to FLOW_UDP_PORT; acks: UDP from it, back to the flow's source port.

    FlowData  kind=1, plane, sender, flow, seq             12 bytes, padded
    FlowAck   kind=2, plane, sender, count, count x (flow u16, seq u32)

`sender` is the sending host's index in the topology, `plane` the index of
the NIC the packet was sent to. Scapy dissects both (bind_layers); the
sockets use the struct codec, which gives the same bytes
(tests/unit/wire/test_plane_failover.py).
"""
from __future__ import annotations

import struct

from scapy.fields import ByteField, FieldLenField, IntField, PacketListField, ShortField
from scapy.layers.inet import UDP
from scapy.packet import Packet, bind_layers

FLOW_UDP_PORT = 6300
KIND_DATA = 1
KIND_ACK = 2
DATA_BYTES = 64                    # a data packet's UDP payload (header + padding)

_HEAD = struct.Struct("!BBHH")     # kind, plane, sender, flow | count
_SEQ = struct.Struct("!I")
_ENTRY = struct.Struct("!HI")


class FlowData(Packet):
    name = "FlowData"
    fields_desc = [ByteField("kind", KIND_DATA), ByteField("plane", 0), ShortField("sender", 0),
                   ShortField("flow", 0), IntField("seq", 0)]


class FlowAckEntry(Packet):
    name = "FlowAckEntry"
    fields_desc = [ShortField("flow", 0), IntField("seq", 0)]

    def extract_padding(self, s):
        return b"", s


class FlowAck(Packet):
    name = "FlowAck"
    fields_desc = [ByteField("kind", KIND_ACK), ByteField("plane", 0), ShortField("sender", 0),
                   FieldLenField("count", None, count_of="flows", fmt="H"),
                   PacketListField("flows", [], FlowAckEntry, count_from=lambda p: p.count)]




class FlowFormatError(ValueError):
    """A datagram on the flow ports that is not a well-formed FlowData/FlowAck."""


def pack_data(plane: int, sender: int, flow: int, seq: int) -> bytes:
    head = _HEAD.pack(KIND_DATA, plane, sender, flow) + _SEQ.pack(seq)
    return head + bytes(DATA_BYTES - len(head))


def unpack_data(data: bytes) -> tuple[int, int, int, int]:
    """(plane, sender, flow, seq); FlowFormatError when it is not FlowData."""
    if len(data) < _HEAD.size + _SEQ.size:
        raise FlowFormatError(f"{len(data)} bytes: shorter than a FlowData header")
    kind, plane, sender, flow = _HEAD.unpack_from(data)
    if kind != KIND_DATA:
        raise FlowFormatError(f"kind {kind}, expected {KIND_DATA} (data)")
    return plane, sender, flow, _SEQ.unpack_from(data, _HEAD.size)[0]


def pack_ack(plane: int, sender: int, flows: dict[int, int]) -> bytes:
    return _HEAD.pack(KIND_ACK, plane, sender, len(flows)) + b"".join(
        _ENTRY.pack(f, s) for f, s in sorted(flows.items()))


def unpack_ack(data: bytes) -> tuple[int, int, dict[int, int]]:
    """(plane, sender, {flow: highest seq}); FlowFormatError when malformed."""
    if len(data) < _HEAD.size:
        raise FlowFormatError(f"{len(data)} bytes: shorter than a FlowAck header")
    kind, plane, sender, count = _HEAD.unpack_from(data)
    if kind != KIND_ACK:
        raise FlowFormatError(f"kind {kind}, expected {KIND_ACK} (ack)")
    if len(data) != _HEAD.size + count * _ENTRY.size:
        raise FlowFormatError(f"{count} entries need {_HEAD.size + count * _ENTRY.size} bytes, got {len(data)}")
    return plane, sender, dict(_ENTRY.iter_unpack(data[_HEAD.size:]))


# -- sending ------------------------------------------------------------------


bind_layers(UDP, FlowData, dport=FLOW_UDP_PORT)
bind_layers(UDP, FlowAck, sport=FLOW_UDP_PORT)
