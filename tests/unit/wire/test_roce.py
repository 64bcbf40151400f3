"""The host agent's fast-path offsets agree with the Scapy layers, and the
classifier names every kind of frame it must ignore."""
import pytest
from scapy.contrib.roce import BTH
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import ARP, Ether

from wire.ecn import CE, ECT0
from wire.roce import CNP, OFFSETS, RC_SEND_ONLY, roce_cnp, roce_data
from hostagent.ecn.roce import classify

MACS = ("0a:00:01:00:00:01", "0a:00:00:00:01:01")


def test_offsets_read_what_scapy_wrote():
    frame = bytes(roce_data(*MACS, "10.0.1.1", "10.0.5.1", qp=0x123456, psn=0xABCDEF, payload=64, ecn=ECT0))
    pkt = Ether(frame)
    assert pkt[BTH].opcode == RC_SEND_ONLY and frame[OFFSETS.bth_opcode] == RC_SEND_ONLY
    assert int.from_bytes(frame[OFFSETS.bth_psn:OFFSETS.bth_psn + 3], "big") == pkt[BTH].psn == 0xABCDEF
    assert int.from_bytes(frame[OFFSETS.bth_dqpn:OFFSETS.bth_dqpn + 3], "big") == pkt[BTH].dqpn == 0x123456
    assert frame[OFFSETS.ip_tos] & 3 == pkt[IP].tos & 3 == ECT0
    assert pkt[UDP].dport == 4791


def test_patching_psn_keeps_a_valid_packet():
    frame = bytearray(bytes(roce_data(*MACS, "10.0.1.1", "10.0.5.1", qp=1, payload=16)))
    frame[OFFSETS.bth_psn:OFFSETS.bth_psn + 3] = (77).to_bytes(3, "big")
    pkt = Ether(bytes(frame))
    assert pkt[BTH].psn == 77 and pkt[IP].chksum == IP(bytes(pkt[IP])).chksum


def test_cnp_is_not_ect_and_classified():
    cnp = bytes(roce_cnp(*MACS, "10.0.5.1", "10.0.1.1", qp=3))
    assert classify(cnp) == "cnp" and cnp[OFFSETS.bth_opcode] == CNP
    assert cnp[OFFSETS.ip_tos] & 3 == 0


@pytest.mark.parametrize("frame,kind", [
    (b"\x00" * 10, "short"),
    (bytes(Ether() / ARP()) + b"\x00" * 40, "not-ipv4"),
    (bytes(Ether() / IP(ihl=6, options=[]) / UDP(dport=4791) / (b"\x00" * 40)), "ip-options"),
    (bytes(Ether() / IP() / UDP(dport=53) / (b"\x00" * 40)), "not-rocev2"),
    (bytes(Ether() / IP(proto=6) / (b"\x00" * 60)), "not-rocev2"),
    (bytes(Ether() / IP() / UDP(dport=4791) / BTH(opcode=0x11) / (b"\x00" * 8)), "unknown-opcode"),
    (bytes(roce_data(*MACS, "10.0.1.1", "10.0.5.1", qp=1, payload=0, ecn=CE)), "data"),
])
def test_classify_malformed_and_unexpected(frame, kind):
    assert classify(frame) == kind
