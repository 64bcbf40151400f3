"""RoCEv2 packets as the host agent sends them: data (RC SEND_ONLY) and CNP.

RoCEv2 uses Scapy's own InfiniBand layers (scapy.contrib.roce: BTH, with
UDP/4791 -> BTH and BTH(opcode=CNP) -> CNPPadding already bound there):
`roce_data` and `roce_cnp` build them. The RoCEv2 agent (hostagent/ecn/roce.py)
does not import Scapy (about 0.4 s of CPU a process, a case of many agents
starting at once pays it many times over): `encode_roce_data` and
`encode_roce_cnp` give the same bytes with struct, ICRC included, and
`OFFSETS` are the fixed offsets its hot paths read and patch.
tests/unit/wire/test_roce.py checks both against the Scapy layers, so
there is still one definition. Scapy is imported here only when a Scapy
packet (or a re-exported layer) is asked for.
"""
from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional

from wire.ecn import ECT0, NOT_ECT
from wire.lossless import dscp_tos
from wire.ipv4 import ETHERNET_BYTES, ETHERTYPE_IPV4, IPV4_BYTES, encode_udp_header

if TYPE_CHECKING:
    from scapy.layers.l2 import Ether

ROCEV2_UDP_PORT = 4791
RC_SEND_ONLY = 0x04                           # opcode("RC", "SEND_ONLY"): a data packet
CNP = 0x81                                    # scapy.contrib.roce CNP_OPCODE: congestion notification packet
CNP_PADDING_BYTES = 16                        # CNPPadding: two reserved 64-bit words
ICRC_BYTES = 4

_DOT1Q = struct.Struct("!HH")                 # TCI (PCP, DEI, VLAN id), the EtherType after it
_BTH = struct.Struct("!BBHII")                # opcode, SE/M/pad/version, P_Key, FECN/BECN/resv6 ++ dest QP,
#                                               AckReq/resv7 ++ PSN
ETHERTYPE_VLAN = 0x8100


def default_sport(qp: int) -> int:
    """The UDP source port of queue pair `qp` when none is given (0xC000 | qp's low 14 bits)."""
    return 0xC000 | (qp & 0x3FFF)


def roce_data(src_mac: str, dst_mac: str, src_ip: str, dst_ip: str, qp: int, psn: int = 0,
              payload: int = 1024, ecn: int = ECT0, sport: int | None = None, dscp: int = 0,
              pcp: int | None = None) -> Ether:
    """A RoCEv2 RC SEND_ONLY packet of `payload` bytes to queue pair `qp`,
    marked `dscp` (the traffic class the switches give it); with `pcp`,
    priority-tagged (802.1Q, VLAN 0) with that priority, as a NIC does for
    PCP-based PFC (the first switch then classifies it by its PCP)."""
    from scapy.contrib.roce import BTH
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Dot1Q, Ether
    from scapy.packet import Raw
    eth = Ether(src=src_mac, dst=dst_mac)
    if pcp is not None:
        eth = eth / Dot1Q(prio=pcp, vlan=0)
    return (eth
            / IP(src=src_ip, dst=dst_ip, tos=dscp_tos(dscp, ecn), flags="DF")
            / UDP(sport=sport if sport is not None else default_sport(qp), dport=ROCEV2_UDP_PORT, chksum=0)
            / BTH(opcode=RC_SEND_ONLY, dqpn=qp, psn=psn, ackreq=0)
            / Raw(b"\x00" * payload))


def roce_cnp(src_mac: str, dst_mac: str, src_ip: str, dst_ip: str, qp: int) -> Ether:
    """A RoCEv2 CNP to queue pair `qp` (the sender of the marked flow).
    CNPs are not ECN-capable: they must not be marked or delayed by marking."""
    from scapy.contrib.roce import BTH, CNPPadding
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether
    return (Ether(src=src_mac, dst=dst_mac)
            / IP(src=src_ip, dst=dst_ip, tos=NOT_ECT, flags="DF")
            / UDP(sport=default_sport(qp), dport=ROCEV2_UDP_PORT, chksum=0)
            / BTH(opcode=CNP, dqpn=qp, becn=1)
            / CNPPadding())


def encode_roce_data(src_mac: str, dst_mac: str, src_ip: str, dst_ip: str, qp: int, psn: int = 0,
                     payload: int = 1024, ecn: int = ECT0, sport: int | None = None, dscp: int = 0,
                     pcp: int | None = None) -> bytes:
    """bytes(roce_data(...)), without Scapy."""
    return _frame(src_mac, dst_mac, src_ip, dst_ip, dscp_tos(dscp, ecn),
                  sport if sport is not None else default_sport(qp), RC_SEND_ONLY, qp, psn, False,
                  bytes(payload), pcp)


def encode_roce_cnp(src_mac: str, dst_mac: str, src_ip: str, dst_ip: str, qp: int) -> bytes:
    """bytes(roce_cnp(...)), without Scapy."""
    return _frame(src_mac, dst_mac, src_ip, dst_ip, NOT_ECT, default_sport(qp), CNP, qp, 0, True,
                  bytes(CNP_PADDING_BYTES), None)


def _frame(src_mac: str, dst_mac: str, src_ip: str, dst_ip: str, tos: int, sport: int, opcode: int, qp: int,
           psn: int, becn: bool, body: bytes, pcp: Optional[int]) -> bytes:
    head = encode_udp_header(src_mac, dst_mac, src_ip, dst_ip, sport, ROCEV2_UDP_PORT, tos,
                             payload_bytes=_BTH.size + len(body) + ICRC_BYTES)
    eth, ip_udp = head[:ETHERNET_BYTES], head[ETHERNET_BYTES:]
    bth = _BTH.pack(opcode, 0, 0xFFFF, becn << 30 | qp & 0xFFFFFF, psn & 0xFFFFFF)
    # The ICRC (IBA's, as Scapy's BTH computes it): a CRC-32 over 8 bytes of ones standing for the LRH, then
    # IPv4, UDP, BTH and the payload with their variant fields set to ones (TOS, TTL, checksums, FECN, BECN,
    # resv6), sent least significant byte first.
    masked = bytearray(ip_udp)
    masked[1] = masked[8] = 0xFF                                                  # IPv4 TOS, TTL
    masked[10:12] = masked[IPV4_BYTES + 6:IPV4_BYTES + 8] = b"\xff\xff"          # IPv4 and UDP checksums
    masked_bth = _BTH.pack(opcode, 0, 0xFFFF, 0xFF << 24 | qp & 0xFFFFFF, psn & 0xFFFFFF)
    icrc = struct.pack("<I", zlib.crc32(b"\xff" * 8 + masked + masked_bth + body) & 0xFFFFFFFF)
    if pcp is not None:                           # priority-tagged: 802.1Q (VLAN 0) between Ethernet and IPv4
        eth = eth[:12] + struct.pack("!H", ETHERTYPE_VLAN) + _DOT1Q.pack(pcp << 13, ETHERTYPE_IPV4)
    return eth + ip_udp + bth + body + icrc


@dataclass(frozen=True)
class RoceOffsets:
    """Byte offsets of the fields the agent reads and patches, for IPv4 without options."""
    ip_tos: int
    ip_proto: int
    ip_src: int
    udp_dport: int
    bth: int
    bth_opcode: int
    bth_dqpn: int
    bth_psn: int
    min_len: int

    @classmethod
    def derive(cls) -> "RoceOffsets":
        """The offsets, read off a packet Scapy's layers build (what OFFSETS must equal)."""
        from scapy.contrib.roce import BTH
        from scapy.layers.inet import IP, UDP
        from scapy.layers.l2 import Ether
        pkt = Ether(bytes(roce_data("00:00:00:00:00:01", "00:00:00:00:00:02", "10.0.0.1", "10.0.0.2", 1, payload=0)))
        ip = len(pkt) - len(pkt[IP])
        udp = len(pkt) - len(pkt[UDP])
        bth = len(pkt) - len(pkt[BTH])
        bth_fixed = len(BTH(icrc=0)) - 4  # BTH without the trailing ICRC
        return cls(ip_tos=ip + 1, ip_proto=ip + 9, ip_src=ip + 12, udp_dport=udp + 2, bth=bth,
                   bth_opcode=bth, bth_dqpn=bth + 5, bth_psn=bth + 9, min_len=bth + bth_fixed)


# Ethernet 14, IPv4 20, UDP 8, BTH 12 (tests/unit/wire/test_roce.py: RoceOffsets.derive() gives these)
OFFSETS = RoceOffsets(ip_tos=15, ip_proto=23, ip_src=26, udp_dport=36, bth=42, bth_opcode=42, bth_dqpn=47,
                      bth_psn=51, min_len=54)


def __getattr__(name: str) -> Any:
    """Scapy's RoCE layers and opcode table, re-exported, imported when first asked for."""
    if name in ("BTH", "CNPPadding", "opcode", "CNP_OPCODE"):
        from scapy.contrib import roce
        return getattr(roce, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
