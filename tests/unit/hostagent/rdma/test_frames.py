"""hostagent/rdma/frames.py: frames built from the template and the struct
codecs are the bytes Scapy builds; parse() reads them back, and refuses
what is not the transport's or is malformed, naming why."""
import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from hostagent.rdma.agent import congestion_controls
from hostagent.rdma.frames import FrameBuilder, Malformed, NotOurs, check_dscp, parse
from wire.ecn import CE, ECT0
from wire.rdma import (ACKNOWLEDGE, AETH, BTH, CONGESTION_CONTROLS, GO_BACK_N, RETH, SELECTIVE_REPEAT, SEND_LAST,
                       SEND_ONLY, SYNDROME_NAK_INVALID_REQUEST, SYNDROME_NAK_PSN_SEQUENCE_ERROR, WRITE_ONLY,
                       AckExtension, HopRecord, IntHop, Terms, terms_bits)
from wire.roce import CNP, CNPPadding

MACS = ("0a:00:00:00:00:01", "0a:00:00:00:00:02")
IPS = ("10.0.1.1", "10.0.2.1")
B = FrameBuilder(*MACS, *IPS, sport=49153, dscp=26)


def scapy_frame(tos, transport):
    return bytes(Ether(src=MACS[0], dst=MACS[1]) / IP(src=IPS[0], dst=IPS[1], tos=tos, flags="DF")
                 / UDP(sport=49153, dport=4791, chksum=0) / transport)


def test_data_frames_are_scapys():
    assert B.data(7, 100, SEND_LAST, b"x" * 300, ackreq=True) == scapy_frame(
        26 << 2 | ECT0, BTH(opcode=SEND_LAST, dqpn=7, psn=100, ackreq=1, icrc=0) / Raw(b"x" * 300))
    assert B.data(7, 5, WRITE_ONLY, b"y" * 10, reth=(1 << 33, 9, 10)) == scapy_frame(
        26 << 2 | ECT0, BTH(opcode=WRITE_ONLY, dqpn=7, psn=5, icrc=0) / RETH(va=1 << 33, rkey=9, dma_len=10)
        / Raw(b"y" * 10))


def test_ack_and_cnp_frames_are_scapys():
    hop = HopRecord(10, 20, 3, 100)
    assert B.ack(7, 9, SYNDROME_NAK_PSN_SEQUENCE_ERROR, 4, sack=(9, 0b110), hops=(hop,)) == scapy_frame(
        26 << 2, BTH(opcode=ACKNOWLEDGE, dqpn=7, psn=9, icrc=0)
        / Raw(bytes(AETH(syndrome=SYNDROME_NAK_PSN_SEQUENCE_ERROR, msn=4)) + bytes(AckExtension(flags=3, sack_base=9, sack_bitmap=0b110,
                                                    int_hops=[IntHop(tx_bytes=10, tx_time_us=20, queue_packets=3,
                                                                     link_rate_mbps=100)]))))
    assert B.cnp(7) == scapy_frame(26 << 2, BTH(opcode=CNP, dqpn=7, becn=1, icrc=0) / CNPPadding())


def test_parse_reads_back_what_was_built():
    d = parse(B.data(7, 0xFFFFFF, SEND_ONLY, b"abc", ackreq=True))
    assert (d.kind, d.src_ip, d.qp, d.psn, d.opcode, d.ackreq, d.payload, d.ce) == \
        ("data", IPS[0], 7, 0xFFFFFF, SEND_ONLY, True, b"abc", False)
    w = parse(B.data(7, 1, WRITE_ONLY, b"q" * 64))
    assert w.payload == b"q" * 64, "the RETH is not payload"
    a = parse(B.ack(7, 9, SYNDROME_NAK_PSN_SEQUENCE_ERROR, 4, sack=(9, 5), hops=(HopRecord(1, 2, 3, 4),)))
    assert (a.kind, a.psn, a.syndrome, a.msn, a.sack, a.hops) == \
        ("ack", 9, SYNDROME_NAK_PSN_SEQUENCE_ERROR, 4, (9, 5), (HopRecord(1, 2, 3, 4),))
    assert parse(B.cnp(7)).kind == "cnp"


def test_ce_and_ethernet_padding():
    frame = bytearray(B.data(7, 1, SEND_ONLY, b"z"))
    frame[15] = frame[15] & ~3 | CE            # a switch marked it (the checksum does not matter here)
    p = parse(bytes(frame) + b"\x00" * 12)     # padded to the minimum frame
    assert p.ce and p.payload == b"z"


@pytest.mark.parametrize("frame,error,what", [
    (b"\x00" * 20, NotOurs, "shorter"),
    (bytes(Ether() / IP() / UDP(dport=53) / Raw(b"x" * 20)), NotOurs, "not RoCEv2"),
    (bytes(Ether(type=0x86DD) / Raw(b"x" * 60)), NotOurs, "not IPv4"),
    (B.data(7, 1, SEND_ONLY, b"")[:-10], Malformed, "IPv4 length"),
    (B.ack(7, 1, 0x1F, 0)[:-8], Malformed, "IPv4 length"),
    (scapy_frame(0, BTH(opcode=ACKNOWLEDGE, icrc=0) / Raw(b"\x1f")), Malformed, "without its AETH"),
    (scapy_frame(0, BTH(opcode=ACKNOWLEDGE, icrc=0) / Raw(b"\x1f\x00\x00\x01\x09\x00\x00\x00")), Malformed,
     "unknown bits"),
    (scapy_frame(0, BTH(opcode=WRITE_ONLY, icrc=0) / Raw(b"\x00" * 8)), Malformed, "needs a RETH"),
    (scapy_frame(0, BTH(opcode=0x0C, icrc=0) / Raw(b"\x00" * 16)), Malformed, "opcode 0x0c"),
])
def test_what_is_not_ours_or_malformed_is_refused_by_name(frame, error, what):
    with pytest.raises(error, match=what):
        parse(frame)


def int_to_host_frame(hops, npt_field=4791, psn=42):
    """A data packet as the fabric delivers it to an HPCC receiver: INT over
    UDP (port 6000, the original in the shim), the stack last hop first."""
    import struct

    from features.int_telemetry import Instructions
    from wire.int_telemetry import HopMetadata, int_layout
    ins = Instructions.of(["node_id", "l1_ports", "queue", "tx_bytes", "tx_time", "link_rate"])
    layout = int_layout(ins.bitmap, ins.ds_id, ins.ds_bits)
    stack = b"".join(layout.encode(HopMetadata(node_id=n, ingress_port=1, egress_port=2, queue_id=0,
                                               queue_occupancy=q, tx_bytes=b, tx_timestamp=t, link_rate_mbps=r))
                     for n, q, b, t, r in reversed(hops))
    md = struct.pack("!IHHHH", (2 << 28) | (ins.hop_ml << 8) | 5, ins.bitmap, ins.ds_id, ins.ds_bits, 0x4000)
    shim = struct.pack("!BBH", (1 << 4) | (1 << 2), 3 + len(stack) // 4, npt_field)
    return _with_int(B.data(7, psn, SEND_ONLY, b"payload"), shim + md + stack)


def _with_int(data: bytes, int_bytes: bytes) -> bytes:
    """`data` with `int_bytes` after its UDP header and INT's UDP port."""
    pkt = Ether(data)
    udp = pkt[UDP]
    rest = bytes(udp.payload)
    udp.remove_payload()
    udp.dport = 6000
    pkt = pkt / Raw(int_bytes + rest)
    del pkt[IP].len, pkt[IP].chksum, pkt[UDP].len
    return bytes(pkt)


def test_int_delivered_to_the_host_gives_the_hops_first_hop_first():
    hops = [(1, 3, 1000, 50, 10), (2, 9, 2_000_000, 60, 100)]
    p = parse(int_to_host_frame(hops))
    assert (p.kind, p.psn, p.payload) == ("data", 42, b"payload")
    assert p.hops == (HopRecord(1000, 50, 3, 10), HopRecord(2_000_000, 60, 9, 100))
    with pytest.raises(NotOurs, match="not around RoCEv2"):
        parse(int_to_host_frame(hops, npt_field=53))


def test_terms_on_data_and_on_a_refusal_are_scapys_and_read_back():
    mine, theirs = Terms(SELECTIVE_REPEAT, "swift"), Terms(GO_BACK_N, None)
    data = B.data(7, 100, SEND_ONLY, b"x" * 10, terms=mine)
    assert data == scapy_frame(26 << 2 | ECT0, BTH(opcode=SEND_ONLY, dqpn=7, psn=100, resv7=terms_bits(mine), icrc=0)
                               / Raw(b"x" * 10))
    assert parse(data).terms == mine
    refusal = B.ack(7, 100, SYNDROME_NAK_INVALID_REQUEST, 0, terms=theirs)
    assert refusal == scapy_frame(26 << 2, BTH(opcode=ACKNOWLEDGE, dqpn=7, psn=100, resv7=terms_bits(theirs), icrc=0)
                                  / AETH(syndrome=SYNDROME_NAK_INVALID_REQUEST, msn=0))
    a = parse(refusal)
    assert (a.kind, a.syndrome, a.terms) == ("ack", SYNDROME_NAK_INVALID_REQUEST, theirs)
    assert parse(B.data(7, 1, SEND_ONLY, b"z")).terms is None, "a frame that states no terms"


def test_unknown_terms_are_malformed():
    frame = bytearray(B.data(7, 1, SEND_ONLY, b"z"))
    frame[14 + 20 + 8 + 8] |= 0x40 | 6             # BTH resv7: congestion control code 6
    with pytest.raises(Malformed, match="unknown congestion control code 6"):
        parse(bytes(frame))


def test_every_congestion_control_of_the_agent_has_a_code_on_the_wire():
    assert sorted(congestion_controls()) == sorted(CONGESTION_CONTROLS)


def test_a_trimmed_data_packet_is_read_as_trimmed_whatever_is_left():
    """A switch's trim (wire/trimming.py's model) of a data packet: its BTH
    is read (PSN, queue pair), its cut payload is not taken for data."""
    from wire.trimming import TRIMMED_DSCP, trimmed
    frame = B.data(7, 100, SEND_ONLY, b"x" * 300)
    for keep in (54, 64, 200):
        p = parse(trimmed(frame, keep=keep))
        assert (p.kind, p.qp, p.psn, p.opcode, p.payload, p.src_ip) == ("trimmed", 7, 100, SEND_ONLY, b"", IPS[0])
    with pytest.raises(Malformed, match="shorter than its BTH"):
        parse(trimmed(frame, keep=50))
    with pytest.raises(Malformed, match="only data is trimmed"):
        parse(trimmed(B.ack(7, 9, SYNDROME_NAK_PSN_SEQUENCE_ERROR, 4, sack=(9, 0b110)), keep=54))
    assert parse(trimmed(frame), trimmed_dscp=None).kind == "data", "no DSCP for trims: read as data"
    assert parse(trimmed(frame, trimmed_dscp=9), trimmed_dscp=9).kind == "trimmed", "the DSCP the fabric uses"
    with pytest.raises(ValueError, match=f"DSCP {TRIMMED_DSCP} marks trimmed packets"):
        check_dscp(TRIMMED_DSCP, TRIMMED_DSCP)
    check_dscp(TRIMMED_DSCP, None)
    check_dscp(TRIMMED_DSCP, 9)
