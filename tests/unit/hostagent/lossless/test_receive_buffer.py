"""A slow receiver's NIC (hostagent.lossless.ReceiveBuffer): its buffer
drains at the host's rate; it pauses its uplink at XOFF, refreshes the pause
while it stays there, resumes at XON, and drops what finds it full."""
import pytest

from hostagent.lossless import ReceiveBuffer
from wire.lossless import decode_pfc

SRC = "0a:00:00:00:01:01"


def test_pause_at_xoff_and_resume_at_xon():
    b = ReceiveBuffer(SRC, 3, drain_pps=100, link_mbps=10, xoff=4, xon=2, capacity=8)
    frames = [b.on_packet(0.0)[1] for _ in range(3)]
    assert frames == [None, None, None]
    kept, frame = b.on_packet(0.0)                   # the 4th: XOFF
    assert kept and decode_pfc(frame) == {3: 0xFFFF}
    assert b.tick(0.001) is None, "paused already; the refresh is not due"
    assert b.tick(0.015) is None, "2.5 buffered: above XON"
    assert decode_pfc(b.tick(0.021)) == {3: 0}, "drained to 2 at 100 packets/s: resume"
    assert b.tick(0.03) is None
    assert b.summary() == {"drain_pps": 100, "pauses_sent": 1, "resumes_sent": 1, "dropped": 0}


def test_pause_refreshed_at_half_its_time_while_above_xoff():
    b = ReceiveBuffer(SRC, 3, drain_pps=1, link_mbps=10, xoff=2, xon=1, capacity=64, quanta=1000)
    b.on_packet(0.0)
    assert b.on_packet(0.0)[1] is not None           # pause of 1000 quanta = 51.2 ms on 10 Mbit/s
    for _ in range(10):
        b.on_packet(0.01)
    assert b.tick(0.0255) is None
    assert decode_pfc(b.tick(0.0257)) == {3: 1000}, "again at half the pause"


def test_pause_refreshed_between_xon_and_xoff():
    """The XOFF state lasts until XON: drained to just below XOFF, the
    buffer still pauses its uplink, or the pause would lapse and the sender
    refill it."""
    b = ReceiveBuffer(SRC, 3, drain_pps=10, link_mbps=10, xoff=8, xon=2, capacity=64, quanta=1000)
    for _ in range(8):
        b.on_packet(0.0)
    assert b.paused_at == 0.0
    assert decode_pfc(b.tick(0.0257)) == {3: 1000}, "7.7 buffered, below XOFF, above XON: refreshed"
    assert decode_pfc(b.tick(0.6)) == {3: 0}, "drained to 2: resume"


def test_a_full_buffer_drops():
    b = ReceiveBuffer(SRC, 3, drain_pps=10, link_mbps=10, xoff=2, xon=1, capacity=3)
    kept = [b.on_packet(0.0)[0] for _ in range(5)]
    assert kept == [True, True, True, False, False]
    assert b.summary()["dropped"] == 2


@pytest.mark.parametrize("kwargs,what", [
    ({"tclass": 8}, "class 8"),
    ({"drain_pps": 0}, "drain rate"),
    ({"xoff": 4, "xon": 4}, "xon < xoff"),
    ({"xoff": 100}, "capacity"),
])
def test_bad_settings_are_named(kwargs, what):
    args = {"src_mac": SRC, "tclass": 3, "drain_pps": 10, "link_mbps": 10} | kwargs
    extra = {k: args.pop(k) for k in ("xoff", "xon") if k in args}
    with pytest.raises(ValueError) as err:
        ReceiveBuffer(**args, **extra)
    assert what in str(err.value)
