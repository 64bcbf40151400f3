"""PFC frames: the byte codec the host agent uses gives and reads exactly
what Scapy's 802.1Qbb layer does, and the constants are the P4 program's."""
import pytest
from scapy.contrib.mac_control import MACControlClassBasedFlowControl
from scapy.layers.l2 import Ether

from control.p4constants import constants
from wire.lossless import (ETHERTYPE_MAC_CONTROL, PFC_DST_MAC, PFC_FRAME_BYTES, PFC_OPCODE, decode_pfc, dscp_tos,
                           encode_pfc, pause_us, pfc_frame, quantum_us)

SRC = "0a:00:00:00:01:02"


def test_constants_match_the_p4_program():
    c = constants()
    assert c["ETHERTYPE_MAC_CONTROL"] == ETHERTYPE_MAC_CONTROL
    assert c["PFC_OPCODE"] == PFC_OPCODE
    assert c["PFC_FRAME_BYTES"] == PFC_FRAME_BYTES
    assert c["PFC_DST_MAC"] == int(PFC_DST_MAC.replace(":", ""), 16)


@pytest.mark.parametrize("times", [{3: 0xFFFF}, {0: 1, 7: 0}, {1: 500, 2: 0, 5: 65535}, {}])
def test_codec_and_scapy_give_the_same_bytes(times):
    frame = encode_pfc(SRC, times)
    assert frame == bytes(pfc_frame(SRC, times))
    assert len(frame) == PFC_FRAME_BYTES
    layer = Ether(frame)[MACControlClassBasedFlowControl]
    for c in range(8):
        assert getattr(layer, f"c{c}_enabled") == (c in times)
        assert getattr(layer, f"c{c}_pause_time") == times.get(c, 0)
    assert decode_pfc(frame) == times


def test_decode_refuses_what_is_not_a_whole_pfc_frame():
    good = encode_pfc(SRC, {3: 10})
    assert decode_pfc(good[:59]) is None                                     # a runt
    assert decode_pfc(good[:14] + b"\x00\x01" + good[16:]) is None          # 802.3x PAUSE, not PFC
    assert decode_pfc(good[:12] + b"\x08\x00" + good[14:]) is None          # IPv4


@pytest.mark.parametrize("times", [{8: 1}, {-1: 1}, {0: 65536}, {0: -1}])
def test_bad_classes_and_times_are_named(times):
    with pytest.raises(ValueError, match="class|pause time"):
        encode_pfc(SRC, times)


def test_quantum_is_512_bit_times_of_the_link():
    assert quantum_us(100) == pytest.approx(5.12)
    assert pause_us(0xFFFF, 100) == pytest.approx(335_539.2)
    with pytest.raises(ValueError, match="bandwidth"):
        quantum_us(0)


def test_dscp_tos():
    assert dscp_tos(26, 2) == 26 << 2 | 2
    with pytest.raises(ValueError, match="DSCP"):
        dscp_tos(64)
