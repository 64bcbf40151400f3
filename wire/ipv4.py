"""Ethernet, IPv4 and UDP as the host agents write them, without Scapy.

Scapy's own layers (Ether, IP, UDP) define these headers; the agents build
their frames from a header made here once per peer and patch its lengths
per packet (hostagent/rdma/frames.py `set_lengths`), so that a process
starting an agent pays no Scapy import (about 0.2 s of CPU). The bytes are
what `Ether(src, dst) / IP(src, dst, tos, flags="DF") / UDP(sport, dport,
chksum=0)` gives: tests/unit/wire/test_ipv4.py checks them against Scapy.
"""
from __future__ import annotations

import struct

ETHERNET_BYTES, IPV4_BYTES, UDP_BYTES = 14, 20, 8
ETHERTYPE_IPV4 = 0x0800
IP_ID, IP_DF, IP_TTL, IP_PROTO_UDP = 1, 0x4000, 64, 17     # what Scapy's IP() writes (DF asked for)

_ETHER = struct.Struct("!6s6sH")
_IPV4 = struct.Struct("!BBHHHBBH4s4s")
_UDP = struct.Struct("!HHHH")


def ipv4_checksum(header: bytes) -> int:
    """The IPv4 header checksum of `header` (its checksum field zero, or the sum comes out 0 when it is right)."""
    total = sum(struct.unpack(f"!{len(header) // 2}H", header))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def mac_bytes(mac: str) -> bytes:
    return bytes.fromhex(mac.replace(":", ""))


def ipv4_bytes(address: str) -> bytes:
    return bytes(int(x) for x in address.split("."))


def encode_udp_header(src_mac: str, dst_mac: str, src_ip: str, dst_ip: str, sport: int, dport: int, tos: int = 0,
                      payload_bytes: int = 0) -> bytes:
    """Ethernet / IPv4 (DF, no options) / UDP (checksum 0) headers for a UDP
    payload of `payload_bytes`, lengths and IPv4 checksum filled in."""
    udp_len = UDP_BYTES + payload_bytes
    ip = _IPV4.pack(0x45, tos, IPV4_BYTES + udp_len, IP_ID, IP_DF, IP_TTL, IP_PROTO_UDP, 0, ipv4_bytes(src_ip),
                    ipv4_bytes(dst_ip))
    ip = ip[:10] + ipv4_checksum(ip).to_bytes(2, "big") + ip[12:]
    eth = _ETHER.pack(mac_bytes(dst_mac), mac_bytes(src_mac), ETHERTYPE_IPV4)
    return eth + ip + _UDP.pack(sport, dport, udp_len, 0)
