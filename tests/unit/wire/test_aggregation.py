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

from control.p4constants import constants
from wire import aggregation as ah
REPO = Path(__file__).resolve().parents[3]


def test_constants_match_the_p4_program():
    c = constants()
    assert ah.AGG_UDP_PORT_BASE == c["AGG_UDP_PORT_BASE"]
    assert ah.CHUNK_ELEMENTS == c["AGG_CHUNK_ELEMENTS"] and ah.MAX_CHUNKS == c["AGG_CHUNKS"]
    assert [ah.udp_length(n) for n in ah.BLOCK_SIZES] == [c["AGG_UDP_LENGTH_HEAD"], c["AGG_UDP_LENGTH_FULL"]]
    assert c["AGG_UDP_LENGTH_HEAD"] == 8 + ah.HEADER_BYTES + 4 * c["AGG_CHUNK_ELEMENTS"]
    assert c["AGG_UDP_LENGTH_FULL"] == 8 + ah.HEADER_BYTES + 4 * c["AGG_CHUNK_ELEMENTS"] * c["AGG_CHUNKS"]
    assert ah.DEFAULT_BLOCK_ELEMENTS in ah.BLOCK_SIZES
    assert ah.SLOT_SET == c["AGG_SLOT_SET"]
    assert ah.MAX_WORKERS == c["AGG_MAX_WORKERS"]
    for flag in ("RESULT", "RETRANSMIT", "COLLISION", "OVERFLOW", "FALLBACK", "WIDE", "SERVER", "CONGESTED"):
        assert getattr(ah, f"FLAG_{flag}") == c[f"AGG_FLAG_{flag}"], flag
    assert c["AGG_CELLS"] == 2 * c["AGG_SLOTS"]


@pytest.mark.parametrize("n", ah.BLOCK_SIZES)
def test_scapy_layer_and_codec_agree_both_ways(n):
    elements = np.array([(-1) ** i * (i * 33_554_467 % 2**31) for i in range(n)], np.int64)
    raw = ah.pack(ah.FLAG_RETRANSMIT, 3, 0xDEADBEEF, elements, slot=5 | ah.SLOT_SET, exponent=131, worker=2)
    layer = ah.Aggregation(flags="RETRANSMIT", job=3, worker=2, exponent=131, slot=5 | ah.SLOT_SET,
                           seq=0xDEADBEEF, elements=[int(x) for x in elements])
    assert bytes(layer) == raw and len(raw) == ah.udp_length(n) - 8
    pkt = ah.unpack(raw)
    assert (pkt.flags, pkt.job, pkt.worker, pkt.exponent, pkt.slot, pkt.seq) == (2, 3, 2, 131, 0x8005, 0xDEADBEEF)
    assert pkt.elements.tolist() == elements.tolist()


def test_udp_to_a_job_port_dissects_as_aggregation():
    raw = ah.pack(ah.FLAG_RESULT, 7, 9, np.arange(256))
    frame = IP(bytes(IP(dst="10.0.9.1") / UDP(sport=ah.job_port(7), dport=ah.job_port(7)) / raw))
    agg = frame[ah.Aggregation]
    assert agg.job == 7 and agg.seq == 9 and agg.flags.RESULT and len(agg.elements) == 256 and agg.elements[255] == 255
    other = IP(bytes(IP() / UDP(sport=1234, dport=4791) / raw))
    assert ah.Aggregation not in other


def test_wide_results_carry_int64_in_parts_under_the_mtu():
    assert ah.wide_parts(64) == [(0, 64)] and ah.wide_parts(256) == [(0, 128), (128, 128)]
    big = np.full(256, 3 * 2**31, np.int64) + np.arange(256)
    parts = [ah.pack(ah.FLAG_SERVER | ah.FLAG_RESULT | ah.FLAG_WIDE, 1, 4, big[o:o + n], offset=o)
             for o, n in ah.wide_parts(256)]
    assert all(8 + len(raw) + 20 <= 1500 for raw in parts)
    got = [ah.unpack(raw) for raw in parts]
    assert [g.offset for g in got] == [0, 128]
    assert np.concatenate([g.elements for g in got]).tolist() == big.tolist()
    wide = ah.AggregationWide(parts[1])
    assert wide.offset == 128 and wide.elements[0] == big[128]
    with pytest.raises(ValueError, match="1..128 int64"):
        ah.pack(ah.FLAG_WIDE, 1, 1, big)


@pytest.mark.parametrize("payload, reason", [
    (b"\x01\x02", "shorter than the 12-byte header"),
    (ah.pack(0, 1, 1, count=64)[:-4], "a block is 64 or 256 int32"),
    (ah.pack(0, 1, 1, count=64) + b"\0", "a block is 64 or 256 int32"),
    (ah.pack(0, 1, 1, count=64) + bytes(256), "a block is 64 or 256 int32"),
    (ah.pack(0, 1, 1, count=256) + bytes(256), "a block is 64 or 256 int32"),
    (ah.pack(ah.FLAG_WIDE, 1, 1, count=128)[:-4], "int64"),
    (ah.pack(ah.FLAG_WIDE, 1, 1, count=128) + bytes(8), "int64"),
], ids=["no-header", "short", "long", "two-chunks", "beyond-four-chunks", "short-wide", "long-wide"])
def test_malformed_payloads_are_refused_with_the_reason(payload, reason):
    with pytest.raises(ah.MalformedPacket, match=reason):
        ah.unpack(payload)


def test_job_port_range():
    assert ah.job_port(1) == 0xBEE1 and ah.job_port(15) == 0xBEEF
    for bad in (0, 16):
        with pytest.raises(ValueError, match="job must be 1..15"):
            ah.job_port(bad)


@pytest.mark.parametrize("n", [0, 10, 63, 65, 128, 192, 320, True])
def test_a_block_is_one_chunk_or_four(n):
    with pytest.raises(ValueError, match="a block is 64 or 256 elements"):
        ah.udp_length(n)
    if not isinstance(n, bool):
        with pytest.raises(ValueError, match="a block is 64 or 256 elements"):
            ah.pack(0, 1, 1, np.zeros(n))
