"""RoCEv2 packets as the host agent sends them: data (RC SEND_ONLY) and CNP.

RoCEv2 uses Scapy's own InfiniBand layers (scapy.contrib.roce: BTH, with
UDP/4791 -> BTH and BTH(opcode=CNP) -> CNPPadding already bound). The agent's
hot paths do not dissect with Scapy (tens of microseconds a packet): they read
fixed offsets, and `RoceOffsets` derives those offsets from the layers here,
so there is still one definition (tests/unit/wire/test_roce.py checks both
agree).
"""
from __future__ import annotations

from dataclasses import dataclass

from scapy.contrib.roce import BTH, CNP_OPCODE, CNPPadding, opcode  # noqa: F401  (re-exported)
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Dot1Q, Ether
from scapy.packet import Raw, bind_layers

from wire.ecn import ECT0, NOT_ECT
from wire.lossless import dscp_tos

ROCEV2_UDP_PORT = 4791
RC_SEND_ONLY = opcode("RC", "SEND_ONLY")[0]   # 0x04: a data packet
CNP = CNP_OPCODE                              # 0x81: congestion notification packet


def roce_data(src_mac: str, dst_mac: str, src_ip: str, dst_ip: str, qp: int, psn: int = 0,
              payload: int = 1024, ecn: int = ECT0, sport: int | None = None, dscp: int = 0,
              pcp: int | None = None) -> Ether:
    """A RoCEv2 RC SEND_ONLY packet of `payload` bytes to queue pair `qp`,
    marked `dscp` (the traffic class the switches give it); with `pcp`,
    priority-tagged (802.1Q, VLAN 0) with that priority, as a NIC does for
    PCP-based PFC (the first switch then classifies it by its PCP)."""
    eth = Ether(src=src_mac, dst=dst_mac)
    if pcp is not None:
        eth = eth / Dot1Q(prio=pcp, vlan=0)
    return (eth
            / IP(src=src_ip, dst=dst_ip, tos=dscp_tos(dscp, ecn), flags="DF")
            / UDP(sport=sport if sport is not None else 0xC000 | (qp & 0x3FFF), dport=ROCEV2_UDP_PORT, chksum=0)
            / BTH(opcode=RC_SEND_ONLY, dqpn=qp, psn=psn, ackreq=0)
            / Raw(b"\x00" * payload))


def roce_cnp(src_mac: str, dst_mac: str, src_ip: str, dst_ip: str, qp: int) -> Ether:
    """A RoCEv2 CNP to queue pair `qp` (the sender of the marked flow).
    CNPs are not ECN-capable: they must not be marked or delayed by marking."""
    return (Ether(src=src_mac, dst=dst_mac)
            / IP(src=src_ip, dst=dst_ip, tos=NOT_ECT, flags="DF")
            / UDP(sport=0xC000 | (qp & 0x3FFF), dport=ROCEV2_UDP_PORT, chksum=0)
            / BTH(opcode=CNP, dqpn=qp, becn=1)
            / CNPPadding())


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
        pkt = Ether(bytes(roce_data("00:00:00:00:00:01", "00:00:00:00:00:02", "10.0.0.1", "10.0.0.2", 1, payload=0)))
        ip = len(pkt) - len(pkt[IP])
        udp = len(pkt) - len(pkt[UDP])
        bth = len(pkt) - len(pkt[BTH])
        bth_fixed = len(BTH(icrc=0)) - 4  # BTH without the trailing ICRC
        return cls(ip_tos=ip + 1, ip_proto=ip + 9, ip_src=ip + 12, udp_dport=udp + 2, bth=bth,
                   bth_opcode=bth, bth_dqpn=bth + 5, bth_psn=bth + 9, min_len=bth + bth_fixed)


OFFSETS = RoceOffsets.derive()

bind_layers(UDP, BTH, dport=ROCEV2_UDP_PORT)  # also bound by scapy.contrib.roce; explicit here
