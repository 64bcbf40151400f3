"""The Valiant tag (p4src/include/nonminimal_routing.p4): the intermediate a
packet is routed to first, a Dragonfly group or a switch as the controller
numbers them (features/nonminimal_routing.py), and the EtherType of what
follows: Ether(type=ETHERTYPE_VALIANT) / ValiantTag / IPv4. The source
router pushes it; the first switch of the intermediate removes it.
"""
from __future__ import annotations

from scapy.fields import ShortField, XShortField
from scapy.layers.inet import IP
from scapy.layers.l2 import Ether
from scapy.packet import Packet, bind_layers

ETHERTYPE_VALIANT = 0x88B6          # p4src/include/defines.p4 (tests check they agree)
ETHERTYPE_IPV4 = 0x0800


class ValiantTag(Packet):
    """target: the intermediate's number; type: the EtherType inside."""
    name = "ValiantTag"
    fields_desc = [ShortField("target", 0),
                   XShortField("type", ETHERTYPE_IPV4)]

    def mysummary(self) -> str:
        return f"via intermediate {self.target}"


bind_layers(Ether, ValiantTag, type=ETHERTYPE_VALIANT)
bind_layers(ValiantTag, IP, type=ETHERTYPE_IPV4)
