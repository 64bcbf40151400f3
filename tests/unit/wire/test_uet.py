"""wire/uet.py: the struct codecs give the bytes Scapy's layers give, Scapy
dissects a UDP datagram to port 4793 by its PDS type, a trimmed request
still names its PSN, and malformed headers are refused by name."""
import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from wire.trimming import trimmed
from wire.uet import (ACK_CC, CC_CREDIT, CC_NSCC, NACK_TRIMMED, NEXT_HEADER_MESSAGE, RUD_CC_REQ, RUD_REQ, UET_PORT,
                      AckCc, Credit, MalformedPds, Nack, PdsAck, PdsControl, PdsNack, PdsRequest, Request, UetMessage,
                      decode_ack, decode_credit, decode_nack, decode_request, encode_ack, encode_credit, encode_nack,
                      encode_request, request_payload_at)

REQUESTS = [Request(psn=7, spdcid=3, dpdcid=9, msg_id=1, offset=0, length=5000, ackreq=True),
            Request(psn=0xFFFFFFFF, spdcid=0xFFFF, dpdcid=0, msg_id=2**32 - 1, offset=4096, length=8192, retrans=True,
                    syn=True, syn_offset=0xFFF, clear_psn_offset=12),
            Request(psn=100, spdcid=1, dpdcid=2, msg_id=5, offset=1024, length=2048, credit_target=0xFFFFFF, ccc_id=4)]


def scapy_request(r: Request):
    fields = dict(type=RUD_CC_REQ if r.credit_target is not None else RUD_REQ, next_hdr=NEXT_HEADER_MESSAGE,
                  retrans=int(r.retrans), ackreq=int(r.ackreq), syn=int(r.syn), clear_psn_offset=r.clear_psn_offset,
                  psn=r.psn, spdcid=r.spdcid)
    if r.syn:
        fields["psn_offset"] = r.syn_offset
    else:
        fields["dpdcid"] = r.dpdcid
    if r.credit_target is not None:
        fields.update(ccc_id=r.ccc_id, credit_target=r.credit_target)
    return PdsRequest(**fields) / UetMessage(msg_id=r.msg_id, offset=r.offset, length=r.length)


@pytest.mark.parametrize("r", REQUESTS)
def test_request_codec_is_scapys_and_decodes_back(r):
    ours = encode_request(r)
    assert ours == bytes(scapy_request(r))
    assert decode_request(ours + b"payload") == r
    assert request_payload_at(ours + b"payload") == len(ours)


ACKS = [AckCc(cack_psn=99, ack_psn=103, spdcid=4, dpdcid=3, ecn_marked=True, sack_base=100, sack_bitmap=0b1011,
              rcvd_bytes=0xABCDEF, ooo_count=3),
        AckCc(cack_psn=0xFFFFFFFF, ack_psn=5, spdcid=1, dpdcid=2, retrans=True, sack_base=0, sack_bitmap=2**64 - 1,
              cc_type=CC_CREDIT, credit=0x123456, ooo_count=0xFFFF)]


@pytest.mark.parametrize("a", ACKS)
def test_ack_codec_is_scapys_and_decodes_back(a):
    ours = encode_ack(a)
    state = (dict(rcvd_bytes=a.rcvd_bytes) if a.cc_type == CC_NSCC else dict(credit=a.credit))
    theirs = PdsAck(type=ACK_CC, ecn_marked=int(a.ecn_marked), retrans=int(a.retrans),
                    ack_psn_offset=(a.ack_psn - a.cack_psn) % 2**32, cack_psn=a.cack_psn, spdcid=a.spdcid,
                    dpdcid=a.dpdcid, cc_type=a.cc_type, sack_psn_offset=(a.sack_base - a.cack_psn) % 2**32,
                    sack_bitmap=a.sack_bitmap, ooo_count=a.ooo_count, **state)
    assert ours == bytes(theirs)
    assert decode_ack(ours) == a


def test_nack_and_credit_codecs_are_scapys():
    n = Nack(code=NACK_TRIMMED, psn=0x01020304, spdcid=7, dpdcid=8, ecn_marked=True)
    assert encode_nack(n) == bytes(PdsNack(ecn_marked=1, nack_code=NACK_TRIMMED, nack_psn=n.psn, spdcid=7, dpdcid=8))
    assert decode_nack(encode_nack(n)) == n
    c = Credit(credit=65536, spdcid=2, dpdcid=1)
    assert encode_credit(c) == bytes(PdsControl(spdcid=2, dpdcid=1, credit=65536))
    assert decode_credit(encode_credit(c)) == c


def frame(pds: bytes, sport: int = 0xC123) -> bytes:
    return bytes(Ether() / IP(src="10.0.0.1", dst="10.0.0.2") / UDP(sport=sport, dport=UET_PORT) / Raw(pds))


def test_scapy_dissects_each_pds_type_from_udp_port_4793():
    got = Ether(frame(encode_request(REQUESTS[0]) + bytes(50)))
    assert got[PdsRequest].psn == 7 and got[UetMessage].length == 5000 and len(got[Raw].load) == 50
    assert Ether(frame(encode_ack(ACKS[0])))[PdsAck].cack_psn == 99
    assert Ether(frame(encode_nack(Nack(NACK_TRIMMED, 5, 1, 2))))[PdsNack].nack_psn == 5
    assert Ether(frame(encode_credit(Credit(10, 1, 2))))[PdsControl].credit == 10


def test_a_trimmed_request_keeps_its_psn_within_the_switchs_64_bytes():
    r = REQUESTS[0]
    cut = trimmed(frame(encode_request(r) + bytes(1000)))
    assert len(cut) == 64
    got = decode_request(cut, 42, headers_only=True)
    assert (got.psn, got.spdcid, got.dpdcid, got.ackreq) == (r.psn, r.spdcid, r.dpdcid, r.ackreq)
    with pytest.raises(MalformedPds, match="message header needs 12 bytes"):
        decode_request(cut, 42)


@pytest.mark.parametrize("data, decode, words", [
    (b"\x10", decode_request, "2-byte prologue"),
    (encode_ack(ACKS[0]), decode_request, "not a RUD request"),
    (encode_request(REQUESTS[0])[:10], decode_request, "has 12 bytes, 10 there"),
    (encode_ack(ACKS[0])[:20], decode_ack, "has 32 bytes, 20 there"),
    (encode_request(REQUESTS[0]), decode_ack, "is not an ACK_CC"),
    (encode_nack(Nack(1, 2, 3, 4))[:15], decode_nack, "has 16 bytes, 15 there"),
    (bytes([ACK_CC << 3, 0]) + bytes(10) + bytes([0x30]) + bytes(19), decode_ack, "unknown congestion control type 3"),
])
def test_malformed_headers_are_refused_naming_what_is_wrong(data, decode, words):
    with pytest.raises(MalformedPds, match=words):
        decode(data)


def test_bad_values_are_refused_when_encoding():
    with pytest.raises(ValueError, match="offset from the start PSN is 0..4095"):
        encode_request(Request(psn=1, spdcid=1, dpdcid=0, msg_id=0, offset=0, length=1, syn=True, syn_offset=4096))
    with pytest.raises(ValueError, match="ack_psn .* 16 bits"):
        encode_ack(AckCc(cack_psn=0, ack_psn=70000, spdcid=0, dpdcid=0))
