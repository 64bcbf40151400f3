"""The fabric's source route (p4src/include/source_routing.p4): a count and
one 16-bit egress port per switch, popped per hop. Carried by INT probes
(hostagent/int_telemetry/probes.py) and heartbeats
(features/failover/heartbeat.py): Ether(type=ETHERTYPE_SOURCE_ROUTE) /
SourceRoute / IPv4.
"""
from __future__ import annotations

from scapy.fields import ByteField, FieldLenField, FieldListField, ShortField
from scapy.layers.inet import IP
from scapy.layers.l2 import Ether
from scapy.packet import Packet, bind_layers

ETHERTYPE_SOURCE_ROUTE = 0x88B5    # p4src/include/defines.p4 (tests check they agree)
SOURCE_ROUTE_MAX_HOPS = 16


class SourceRouteError(ValueError):
    """A source route the fabric cannot carry (no hop, or too many)."""


class SourceRoute(Packet):
    """The port list: hops_left entries of 16 bits, this switch's first."""
    name = "SourceRoute"
    fields_desc = [FieldLenField("hops_left", None, fmt="B", count_of="ports"),
                   ByteField("rsvd", 0),
                   FieldListField("ports", [], ShortField("port", 0), count_from=lambda p: p.hops_left)]

    def mysummary(self) -> str:
        return "route " + " ".join(str(p) for p in self.ports)


bind_layers(Ether, SourceRoute, type=ETHERTYPE_SOURCE_ROUTE)
bind_layers(SourceRoute, IP)
