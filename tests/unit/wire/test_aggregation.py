"""The aggregation wire format (wire/aggregation.py): the Scapy layer
and the fast codec give the same bytes, the constants agree with the P4
program's (defines.p4), the generated element lanes are up to date, and
malformed payloads are refused with the reason."""
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scapy.layers.inet import IP, UDP

from core.p4constants import constants
from wire import aggregation as ah
REPO = Path(__file__).resolve().parents[3]


def test_constants_match_the_p4_program():
    c = constants()
    assert ah.AGG_UDP_PORT_BASE == c["AGG_UDP_PORT_BASE"]
    assert ah.ELEMENTS == c["AGG_ELEMENTS"]
    assert ah.UDP_LENGTH == c["AGG_UDP_LENGTH"] == 8 + ah.HEADER_BYTES + 4 * c["AGG_ELEMENTS"]
    assert ah.SLOT_SET == c["AGG_SLOT_SET"]
    assert ah.MAX_WORKERS == c["AGG_MAX_WORKERS"]
    for flag in ("RESULT", "RETRANSMIT", "COLLISION", "OVERFLOW", "FALLBACK", "WIDE", "SERVER", "CONGESTED"):
        assert getattr(ah, f"FLAG_{flag}") == c[f"AGG_FLAG_{flag}"], flag
    assert c["AGG_CELLS"] == 2 * c["AGG_SLOTS"]


def test_scapy_layer_and_codec_agree_both_ways():
    elements = np.array([(-1) ** i * (i * 33_554_467) for i in range(ah.ELEMENTS)], np.int64)
    raw = ah.pack(ah.FLAG_RETRANSMIT, 3, 0xDEADBEEF, elements, slot=5 | ah.SLOT_SET, exponent=131, worker=2)
    layer = ah.Aggregation(flags="RETRANSMIT", job=3, worker=2, exponent=131, slot=5 | ah.SLOT_SET,
                           seq=0xDEADBEEF, elements=[int(x) for x in elements])
    assert bytes(layer) == raw and len(raw) == ah.UDP_LENGTH - 8
    pkt = ah.unpack(raw)
    assert (pkt.flags, pkt.job, pkt.worker, pkt.exponent, pkt.slot, pkt.seq) == (2, 3, 2, 131, 0x8005, 0xDEADBEEF)
    assert pkt.elements.tolist() == elements.tolist()


def test_udp_to_a_job_port_dissects_as_aggregation():
    raw = ah.pack(ah.FLAG_RESULT, 7, 9, np.arange(ah.ELEMENTS))
    frame = IP(bytes(IP(dst="10.0.9.1") / UDP(sport=ah.job_port(7), dport=ah.job_port(7)) / raw))
    agg = frame[ah.Aggregation]
    assert agg.job == 7 and agg.seq == 9 and agg.flags.RESULT and agg.elements[63] == 63
    other = IP(bytes(IP() / UDP(sport=1234, dport=4791) / raw))
    assert ah.Aggregation not in other


def test_wide_results_carry_int64():
    big = np.full(ah.ELEMENTS, 3 * 2**31, np.int64)
    raw = ah.pack(ah.FLAG_SERVER | ah.FLAG_RESULT | ah.FLAG_WIDE, 1, 4, big)
    assert len(raw) == ah.HEADER_BYTES + 8 * ah.ELEMENTS
    assert ah.unpack(raw).elements.tolist() == big.tolist()


@pytest.mark.parametrize("payload, reason", [
    (b"\x01\x02", "shorter than the 12-byte header"),
    (ah.pack(0, 1, 1)[:-4], "expected 268"),
    (ah.pack(0, 1, 1) + b"\0", "expected 268"),
    (ah.pack(ah.FLAG_WIDE, 1, 1)[:-8], "int64"),
], ids=["no-header", "short", "long", "short-wide"])
def test_malformed_payloads_are_refused_with_the_reason(payload, reason):
    with pytest.raises(ah.MalformedPacket, match=reason):
        ah.unpack(payload)


def test_job_port_range():
    assert ah.job_port(1) == 0xBEE1 and ah.job_port(15) == 0xBEEF
    for bad in (0, 16):
        with pytest.raises(ValueError, match="job must be 1..15"):
            ah.job_port(bad)
    with pytest.raises(ValueError, match="carries 64 elements"):
        ah.pack(0, 1, 1, np.zeros(10))
