"""wire/rdma.py: the struct codecs give the bytes Scapy's layers give, Scapy
dissects what they encode, and a malformed ACK extension or unknown terms
are refused by name."""
import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from wire.rdma import (ACKNOWLEDGE, AETH, ANY_CC, BTH, BTH_BYTES, CONGESTION_CONTROLS, EXT_INT, EXT_SACK, GO_BACK_N,
                       ICRC_BYTES, MODES, RETH, SELECTIVE_REPEAT, SEND_ONLY, SYNDROME_ACK, SYNDROME_NAK_INVALID_REQUEST,
                       SYNDROME_NAK_PSN_SEQUENCE_ERROR, TERMS_STATED, WRITE_ONLY, AckExtension, HopRecord, IntHop,
                       MalformedAck, MalformedTerms, Terms, decode_ack_extension, decode_aeth, decode_bth, decode_terms,
                       encode_ack_extension, encode_aeth, encode_bth, terms_bits, terms_of)

def test_the_opcodes_are_infinibands_as_scapy_names_them():
    from scapy.contrib.roce import opcode
    import wire.rdma as rdma
    for ours, name in (("SEND_FIRST", "SEND_FIRST"), ("SEND_MIDDLE", "SEND_MIDDLE"), ("SEND_LAST", "SEND_LAST"),
                       ("SEND_ONLY", "SEND_ONLY"), ("WRITE_FIRST", "RDMA_WRITE_FIRST"),
                       ("WRITE_MIDDLE", "RDMA_WRITE_MIDDLE"), ("WRITE_LAST", "RDMA_WRITE_LAST"),
                       ("WRITE_ONLY", "RDMA_WRITE_ONLY"), ("ACKNOWLEDGE", "ACKNOWLEDGE")):
        assert getattr(rdma, ours) == opcode("RC", name)[0], ours


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


TERMS = [Terms(mode, cc) for mode in MODES for cc in (*CONGESTION_CONTROLS, None)]


@pytest.mark.parametrize("terms", TERMS, ids=str)
def test_terms_ride_in_the_bths_reserved_bits_as_scapy_encodes_them(terms):
    ours = encode_bth(SEND_ONLY, 3, 77, ackreq=True, terms=terms)
    assert ours == bytes(BTH(opcode=SEND_ONLY, dqpn=3, psn=77, ackreq=1, resv7=terms_bits(terms), icrc=0))[:BTH_BYTES]
    assert decode_bth(ours) == (SEND_ONLY, 3, 77, True), "the other fields are untouched"
    assert decode_terms(ours) == terms_of(BTH(ours + b"\x00" * ICRC_BYTES).resv7) == terms
    assert len(ours) == BTH_BYTES, "no byte added"


def test_terms_codes_are_indices_and_none_stated_is_zero():
    assert terms_bits(Terms(SELECTIVE_REPEAT, "hpcc")) == TERMS_STATED | 1 << 3 | 3
    assert terms_bits(Terms(GO_BACK_N, None)) == TERMS_STATED | ANY_CC
    assert encode_bth(SEND_ONLY, 3, 77) == encode_bth(SEND_ONLY, 3, 77, terms=None)
    assert decode_terms(encode_bth(SEND_ONLY, 3, 77)) is None, "a BTH as InfiniBand has it states nothing"


@pytest.mark.parametrize("bits,what", [(0x01, "without the terms flag"),
                                       (TERMS_STATED | 2 << 3, "unknown retransmission mode code 2"),
                                       (TERMS_STATED | 5, "unknown congestion control code 5"),
                                       (TERMS_STATED | 0x20, "a reserved bit set")])
def test_unknown_terms_are_refused_by_name(bits, what):
    with pytest.raises(MalformedTerms, match=what):
        terms_of(bits)


def test_terms_the_wire_cannot_name_are_refused_by_name():
    with pytest.raises(ValueError, match="congestion control 'cubic' has no code on the wire"):
        terms_bits(Terms(GO_BACK_N, "cubic"))
    with pytest.raises(ValueError, match="retransmission mode 'sack' has no code"):
        terms_bits(Terms("sack", "dcqcn"))


def test_a_refusal_dissects_with_its_syndrome_and_terms():
    refusal = encode_bth(ACKNOWLEDGE, 3, 8, terms=Terms(GO_BACK_N, None)) + encode_aeth(SYNDROME_NAK_INVALID_REQUEST, 2)
    pkt = Ether(bytes(Ether() / IP() / UDP(sport=49152, dport=4791) / Raw(refusal + b"\x00" * ICRC_BYTES)))
    assert pkt[AETH].syndrome == SYNDROME_NAK_INVALID_REQUEST == 0x61, "IBA's NAK code 1: invalid request"
    assert terms_of(pkt[BTH].resv7) == Terms(GO_BACK_N, None)
