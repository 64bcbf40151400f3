"""The host agent's fast-path offsets agree with the Scapy layers, and the
classifier names every kind of frame it must ignore."""
import pytest
from scapy.contrib.roce import BTH
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import ARP, Ether

from wire.ecn import CE, ECT0
from wire.roce import CNP, OFFSETS, RC_SEND_ONLY, RoceOffsets, encode_roce_cnp, encode_roce_data, roce_cnp, roce_data
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


def test_the_fixed_offsets_are_the_ones_the_scapy_layers_give():
    assert OFFSETS == RoceOffsets.derive()


@pytest.mark.parametrize("kw", [
    {},
    {"psn": 0xABCDEF, "payload": 64, "ecn": CE, "dscp": 26},
    {"qp": 0x123456, "payload": 0, "sport": 49153},
    {"pcp": 3, "dscp": 26, "payload": 1000},           # priority-tagged (802.1Q, VLAN 0)
])
def test_the_struct_codec_gives_scapys_bytes_icrc_included(kw):
    args = {"qp": 7, **kw}
    assert encode_roce_data(*MACS, "10.0.1.1", "10.0.5.1", **args) == \
        bytes(roce_data(*MACS, "10.0.1.1", "10.0.5.1", **args))
    for qp in (3, 0xFFFFFF):
        assert encode_roce_cnp(*MACS, "10.0.5.1", "10.0.1.1", qp) == bytes(roce_cnp(*MACS, "10.0.5.1", "10.0.1.1", qp))


def test_the_opcodes_are_scapys():
    from scapy.contrib.roce import CNP_OPCODE, opcode
    assert RC_SEND_ONLY == opcode("RC", "SEND_ONLY")[0] and CNP == CNP_OPCODE
