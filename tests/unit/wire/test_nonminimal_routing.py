"""The Valiant tag's Scapy layer: its bytes, its binding under Ethernet and
over IPv4, and the EtherType the P4 program uses."""
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from control.p4constants import constants
from wire.nonminimal_routing import ETHERTYPE_VALIANT, ValiantTag


def test_constants_match_the_p4_program():
    assert constants()["ETHERTYPE_VALIANT"] == ETHERTYPE_VALIANT


def test_the_tag_sits_between_ethernet_and_ipv4():
    frame = bytes(Ether(dst="0a:00:00:00:01:01", src="0a:00:01:00:00:01") / ValiantTag(target=0x0102)
                  / IP(src="10.0.1.1", dst="10.0.3.1") / UDP(sport=1, dport=2))
    assert frame[12:18] == bytes.fromhex("88b6" "0102" "0800")
    back = Ether(frame)
    assert back[ValiantTag].target == 0x0102 and back[IP].dst == "10.0.3.1" and back[UDP].dport == 2
