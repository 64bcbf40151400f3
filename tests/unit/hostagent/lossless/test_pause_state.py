"""A NIC honouring PFC (hostagent.lossless.PauseState): pauses per class,
timed in quanta of its link, resumed by time 0; other frames left alone."""
import pytest

from hostagent.lossless import PauseState
from wire.lossless import encode_pfc

SRC = "0a:00:00:00:01:01"


def test_a_pause_holds_its_class_only_for_its_time():
    s = PauseState(link_mbps=100)                      # quantum 5.12 us
    assert s.on_frame(encode_pfc(SRC, {3: 1000}), now=10.0)
    assert s.paused(3, 10.0) and not s.paused(2, 10.0)
    assert s.paused(3, 10.0 + 0.00511) and not s.paused(3, 10.0 + 0.00513)
    assert s.summary()["pauses"][3] == 1


def test_time_zero_resumes_and_a_new_pause_extends():
    s = PauseState(link_mbps=10)
    s.on_frame(encode_pfc(SRC, {1: 0xFFFF, 5: 0xFFFF}), now=0.0)
    s.on_frame(encode_pfc(SRC, {1: 0}), now=0.1)
    assert not s.paused(1, 0.1) and s.paused(5, 0.1)
    s.on_frame(encode_pfc(SRC, {5: 0xFFFF}), now=3.0)
    assert s.paused(5, 6.0)
    assert s.summary()["resumes"][1] == 1 and s.summary()["pauses"][5] == 2


def test_seconds_paused_count_overlapping_refreshes_once_and_stop_at_a_resume():
    s = PauseState(link_mbps=100)                      # 0xFFFF quanta: 0.33554 s
    full = 0xFFFF * 512 / 100e6
    s.on_frame(encode_pfc(SRC, {3: 0xFFFF}), now=1.0)
    assert s.paused_s(3, 1.1) == pytest.approx(0.1) and s.paused_s(2, 1.1) == 0.0
    s.on_frame(encode_pfc(SRC, {3: 0xFFFF}), now=1.2)  # refreshed before it ran out: one pause, longer
    assert s.paused_s(3, 1.3) == pytest.approx(0.3)
    assert s.paused_s(3, 5.0) == pytest.approx(0.2 + full), "it ran out by itself"
    s.on_frame(encode_pfc(SRC, {3: 0xFFFF}), now=6.0)  # a new pause after the last ran out
    s.on_frame(encode_pfc(SRC, {3: 0}), now=6.05)      # ... resumed early
    assert s.paused_s(3, 7.0) == pytest.approx(0.2 + full + 0.05)
    s.on_frame(encode_pfc(SRC, {3: 0}), now=8.0)       # a resume while not paused adds nothing
    assert s.paused_s(3, 9.0) == pytest.approx(0.2 + full + 0.05)


def test_other_frames_are_left_alone_and_broken_ones_counted():
    s = PauseState(link_mbps=100)
    assert not s.on_frame(b"\x00" * 60, now=0.0)
    good = encode_pfc(SRC, {3: 10})
    assert s.on_frame(good[:40], now=0.0)              # a runt MAC control frame: ours, but not acted on
    assert s.summary()["malformed"] == 1 and not s.paused(3, 0.0)


@pytest.mark.parametrize("argv", [["pause", "--iface", "x", "--src-mac", SRC, "--tclass", "8"],
                                  ["pause", "--iface", "x", "--src-mac", SRC, "--tclass", "1", "--quanta", "70000"]])
def test_pauser_refuses_bad_input_before_sending(argv, capsys):
    from hostagent.lossless import main
    assert main(argv) == 2
    assert "error:" in capsys.readouterr().err
