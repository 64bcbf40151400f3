"""wire/ipv4.py: the Ethernet/IPv4/UDP header the agents build without
Scapy is the one Scapy builds, and its checksum is IPv4's."""
import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from wire.ipv4 import ETHERNET_BYTES, IPV4_BYTES, UDP_BYTES, encode_udp_header, ipv4_checksum

MACS = ("0a:00:01:00:00:01", "0a:00:00:00:01:01")


@pytest.mark.parametrize("tos,sport,dport,payload", [(0, 0xC000, 4791, 0), (0x0E, 49153, 4793, 1036),
                                                     (0xFF, 1, 65535, 7)])
def test_the_header_is_scapys(tos, sport, dport, payload):
    ours = encode_udp_header(*MACS, "10.0.1.1", "10.0.5.1", sport, dport, tos=tos, payload_bytes=payload)
    theirs = bytes(Ether(src=MACS[0], dst=MACS[1]) / IP(src="10.0.1.1", dst="10.0.5.1", tos=tos, flags="DF")
                   / UDP(sport=sport, dport=dport, chksum=0) / Raw(bytes(payload)))
    assert len(ours) == ETHERNET_BYTES + IPV4_BYTES + UDP_BYTES
    assert ours == theirs[:len(ours)]


def test_a_right_checksum_sums_to_zero():
    ip = encode_udp_header(*MACS, "192.168.255.254", "10.0.0.1", 5, 6)[ETHERNET_BYTES:ETHERNET_BYTES + IPV4_BYTES]
    assert ipv4_checksum(ip) == 0
    assert ipv4_checksum(ip[:10] + b"\x00\x00" + ip[12:]) == int.from_bytes(ip[10:12], "big")
