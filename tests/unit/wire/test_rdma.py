"""wire/rdma.py: the struct codecs give the bytes Scapy's layers give, Scapy
dissects what they encode, and a malformed ACK extension is refused by
name."""
import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from wire.rdma import (ACKNOWLEDGE, AETH, BTH, BTH_BYTES, EXT_INT, EXT_SACK, RETH, SYNDROME_ACK,
                       SYNDROME_NAK_PSN_SEQUENCE_ERROR, WRITE_ONLY, AckExtension, HopRecord, IntHop, MalformedAck,
                       decode_ack_extension, decode_aeth, decode_bth, encode_ack_extension, encode_aeth, encode_bth)

HOPS = (HopRecord(1_000_000, 4_000_000_000, 7, 10), HopRecord(2**32 - 1, 5, 0, 100))


def scapy_hops():
    return [IntHop(tx_bytes=h.tx_bytes, tx_time_us=h.tx_time_us, queue_packets=h.queue_packets,
                   link_rate_mbps=h.link_rate_mbps) for h in HOPS]


@pytest.mark.parametrize("op,qp,psn,ackreq,becn", [(4, 7, 0, False, False), (0x11, 0xFFFFFF, 0xFFFFFF, True, True),
                                                   (10, 1, 123456, True, False)])
def test_bth_codec_is_scapys(op, qp, psn, ackreq, becn):
    ours = encode_bth(op, qp, psn, ackreq=ackreq, becn=becn)
    assert ours == bytes(BTH(opcode=op, dqpn=qp, psn=psn, ackreq=int(ackreq), becn=int(becn), icrc=0))[:BTH_BYTES]
    assert decode_bth(ours) == (op, qp, psn, ackreq)


def test_aeth_codec_is_scapys():
    for syndrome, msn in ((SYNDROME_ACK, 0), (SYNDROME_NAK_PSN_SEQUENCE_ERROR, 0xFFFFFF)):
        assert encode_aeth(syndrome, msn) == bytes(AETH(syndrome=syndrome, msn=msn))
        assert decode_aeth(encode_aeth(syndrome, msn), 0) == (syndrome, msn)


@pytest.mark.parametrize("sack,hops", [((5, 0b1011), ()), (None, HOPS), ((0xFFFFFF, 2**64 - 1), HOPS)])
def test_ack_extension_codec_is_scapys(sack, hops):
    ours = encode_ack_extension(sack, hops)
    fields = {"flags": (EXT_SACK if sack else 0) | (EXT_INT if hops else 0)}
    if sack:
        fields.update(sack_base=sack[0], sack_bitmap=sack[1])
    layer = AckExtension(**fields, int_hops=scapy_hops() if hops else [])
    assert ours == bytes(layer)
    assert decode_ack_extension(ours, 0, len(ours)) == (sack, hops)


def test_an_ack_dissects_through_every_layer():
    ext = encode_ack_extension((9, 0b1), HOPS)
    frame = bytes(Ether() / IP() / UDP(sport=49152, dport=4791) / BTH(opcode=ACKNOWLEDGE, dqpn=3, psn=8, icrc=0)
                  / Raw(encode_aeth(SYNDROME_NAK_PSN_SEQUENCE_ERROR, 2) + ext))    # the ICRC goes last
    pkt = Ether(frame)
    assert pkt[BTH].psn == 8 and pkt[AETH].syndrome == SYNDROME_NAK_PSN_SEQUENCE_ERROR and pkt[AETH].msn == 2
    assert pkt[AckExtension].sack_base == 9 and [h.tx_bytes for h in pkt[AckExtension].int_hops] == [1_000_000,
                                                                                                     2**32 - 1]
    assert encode_ack_extension() == b"", "a plain ACK has no extension"


def test_reth_follows_a_write():
    pkt = Ether(bytes(Ether() / IP() / UDP(dport=4791) / BTH(opcode=WRITE_ONLY) / RETH(va=1 << 40, rkey=7, dma_len=64)
                      / Raw(b"x" * 64)))
    assert pkt[RETH].va == 1 << 40 and pkt[RETH].dma_len == 64


@pytest.mark.parametrize("raw,what", [(b"\x01\x00", "shorter than"), (b"\x04\x00\x00\x00", "unknown bits"),
                                      (b"\x02\x00\x00\x02" + b"\x00" * 16, "2 hops"),
                                      (b"\x01\x00\x00\x01" + b"\x00" * 28, "1 hops but INT flag clear")])
def test_malformed_ack_extensions_are_refused_by_name(raw, what):
    with pytest.raises(MalformedAck, match=what):
        decode_ack_extension(raw, 0, len(raw))
