"""PLB repathing: Linux tcp_plb.c's transitions, the pause rules, CNP slots into
rounds, and the sender glue. A scripted RNG makes every port and pause exact."""
import argparse
import random

import pytest

from hostagent.load_balancing.plb import (ROCE_SPORT_MAX, ROCE_SPORT_MIN, CnpRounds, PlbParams, PlbSender, PlbState,
                           add_plb_arguments, plb_from_args)


class ScriptedRng:
    """randrange(lo, hi) returns lo + the next scripted offset; random() the next uniform."""

    def __init__(self, offsets=(), uniforms=()):
        self.offsets, self.uniforms = list(offsets), list(uniforms)
        self.ranges = []

    def randrange(self, lo, hi):
        self.ranges.append((lo, hi))
        offset = self.offsets.pop(0)
        assert 0 <= offset < hi - lo
        return lo + offset

    def random(self):
        return self.uniforms.pop(0)


LINUX = PlbParams(pause_s=0.0)      # no hold-down after congestion repaths, as Linux


def run_rounds(st, fractions, t0=0.0):
    """Feed one round per second from t0+1; returns (time, repath) of each repath."""
    out = []
    for i, f in enumerate(fractions, start=1):
        r = st.on_round(t0 + i, f)
        if r is not None:
            out.append((t0 + i, r))
    return out


def test_repath_after_exactly_rehash_rounds_congested_rounds():
    st = PlbState(LINUX, sport=60000, rng=ScriptedRng(offsets=[50000 - ROCE_SPORT_MIN]))
    assert run_rounds(st, [0.5] * 11) == []              # >= threshold counts
    assert st.consec_cong_rounds == 11
    r = st.on_round(12.0, 1.0)
    assert (r.t_s, r.old_sport, r.new_sport, r.reason, r.round) == (12.0, 60000, 50000, "congestion", 12)
    assert st.sport == 50000 and st.consec_cong_rounds == 0 and st.pause_until is None
    assert st.rng.ranges == [(ROCE_SPORT_MIN, ROCE_SPORT_MAX)]


def test_an_uncongested_round_resets_and_no_information_keeps_the_count():
    st = PlbState(LINUX, sport=50000, rng=ScriptedRng(offsets=[49999 - ROCE_SPORT_MIN]))
    run_rounds(st, [1.0] * 11 + [0.49])
    assert st.consec_cong_rounds == 0 and st.repaths == []
    run_rounds(st, [1.0] * 5 + [None] * 3 + [1.0] * 6, t0=12)
    assert st.consec_cong_rounds == 11 and st.repaths == []
    assert st.on_round(27.0, 0.75).new_sport == 49999
    assert st.rounds == 27 and st.congested_rounds == 11 + 5 + 7


def test_linux_pace_repaths_every_rehash_rounds_when_congestion_persists():
    st = PlbState(LINUX, sport=50000, rng=ScriptedRng(offsets=[1000, 2000]))
    assert [t for t, _ in run_rounds(st, [1.0] * 24)] == [12, 24]


def test_new_port_is_never_the_current_one():
    p = PlbParams(pause_s=0.0, sport_min=100, sport_max=103)
    st = PlbState(p, sport=101, rng=ScriptedRng(offsets=[0, 0, 1]))
    for _ in range(3):
        run_rounds(st, [1.0] * 12)
    # randrange(100, 103) draws among 3 ports; a draw >= the current port shifts up by one
    assert [(r.old_sport, r.new_sport) for r in st.repaths] == [(101, 100), (100, 101), (101, 102)]
    st = PlbState(p, sport=101, rng=random.Random(7))
    ports = []
    for _ in range(50):
        run_rounds(st, [1.0] * 12)
        ports.append(st.sport)
    assert all(100 <= q <= 103 for q in ports) and all(r.new_sport != r.old_sport for r in st.repaths)


def test_pause_after_a_repath_then_repath_as_soon_as_it_ends():
    p = PlbParams(pause_s=2.0, pause_jitter=1.0)
    st = PlbState(p, sport=50000, rng=ScriptedRng(offsets=[1, 0], uniforms=[0.25, 0.0]))
    run_rounds(st, [1.0] * 12)
    assert st.pause_until == 12.0 + 2.0 * 1.25             # drawn from [pause_s, 2 pause_s): 2.5 s here
    # the counter keeps counting during the pause, saturating at rehash_rounds
    for i in range(1, 16):
        assert st.on_round(12.0 + i / 8, 1.0) is None      # rounds at 12.125 .. 13.875
    assert st.on_round(14.25, 1.0) is None and st.paused(14.49)
    assert st.consec_cong_rounds == 12
    r = st.on_round(14.5, 1.0)                              # the pause has ended
    assert (r.t_s, r.old_sport, r.new_sport) == (14.5, ROCE_SPORT_MIN + 1, ROCE_SPORT_MIN)
    assert st.pause_until == 16.5 and st.consec_cong_rounds == 0


def test_the_first_round_after_a_pause_must_still_be_congested():
    p = PlbParams(pause_s=1.0, pause_jitter=0.0)
    st = PlbState(p, sport=50000, rng=ScriptedRng(offsets=[1], uniforms=[0.5]))
    run_rounds(st, [1.0] * 12)
    assert st.pause_until == 13.0                           # no jitter: exactly pause_s
    for i in range(1, 13):
        assert st.on_round(12.0 + i / 16, 1.0) is None     # congested, but paused
    assert st.consec_cong_rounds == 12
    assert st.on_round(13.0, 0.0) is None                   # uncongested: reset, no repath
    assert st.consec_cong_rounds == 0 and len(st.repaths) == 1


def test_idle_rehash_needs_fewer_rounds():
    st = PlbState(PlbParams(pause_s=0.0), sport=50000, rng=ScriptedRng(offsets=[5]))
    run_rounds(st, [1.0] * 3)
    r = st.on_round(4.0, None, idle=True)
    assert r.reason == "idle" and st.consec_cong_rounds == 0
    st = PlbState(PlbParams(pause_s=0.0, idle_rehash_rounds=0), sport=50000, rng=ScriptedRng())
    run_rounds(st, [1.0] * 3)
    assert st.on_round(4.0, None, idle=True) is None          # 0 disables the idle rule


def test_rto_repaths_resets_and_pauses_60_to_120_s():
    st = PlbState(PlbParams(), sport=50000, rng=ScriptedRng(offsets=[7], uniforms=[0.25]))
    run_rounds(st, [1.0] * 5)
    r = st.on_rto(5.5)
    assert (r.reason, r.new_sport) == ("rto", ROCE_SPORT_MIN + 7)
    assert st.consec_cong_rounds == 0 and st.pause_until == 5.5 + 60 + 15
    run_rounds(st, [1.0] * 30, t0=5.5)                        # congested, but paused
    assert len(st.repaths) == 1


def test_cnp_slots_become_rounds():
    m = CnpRounds(slot_s=0.25, round_slots=4, min_packets=0)  # fixed rounds of 1 s
    for i in range(8):
        m.on_sent(i / 8)                                      # 8 packets: every slot could be marked
    m.on_cnp(0.1)
    m.on_cnp(0.2)                                             # same slot 0
    m.on_cnp(0.5)                                             # slot 2
    assert m.advance(0.99) == []
    (r,) = m.advance(1.0)
    assert (r.index, r.end_s, r.marked_slots, r.slots, r.sent, r.fraction) == (0, 1.0, 2, 4, 8, 0.5)
    m.on_cnp(1.0)                                             # at the boundary: the next round
    rounds = m.advance(3.5)                                   # rounds 1 and 2 close together
    assert [(x.index, x.marked_slots, x.sent, x.fraction) for x in rounds] == [(1, 1, 0, 1.0), (2, 0, 0, None)]


@pytest.mark.parametrize("sent,marked,fraction", [
    (8, 2, 0.5),      # many packets per slot: marked slots / slots
    (4, 1, 0.25),
    (2, 1, 0.5),      # fewer packets than slots: marked slots / packets
    (1, 1, 1.0),
    (1, 2, 1.0),      # CNPs answering the previous round's packets: capped at 1
    (0, 1, 1.0),      # a CNP but nothing sent: the path marks
    (0, 0, None),     # no information
    (3, 0, 0.0),
])
def test_round_fraction_counts_the_slots_that_could_be_marked(sent, marked, fraction):
    m = CnpRounds(slot_s=0.25, round_slots=4, min_packets=0)
    for i in range(sent):
        m.on_sent(i / 8)
    for slot in range(marked):
        m.on_cnp(slot * 0.25 + 0.125)
    (r,) = m.advance(1.0)
    assert (r.sent, r.marked_slots, r.fraction) == (sent, marked, fraction)


def test_a_round_lasts_until_it_holds_min_packets():
    m = CnpRounds(slot_s=0.25, round_slots=4, min_packets=3)
    m.on_sent(0.0)
    m.on_sent(0.6)
    assert m.advance(1.5) == []                               # 4 slots passed, only 2 packets
    m.on_cnp(1.6)
    m.on_sent(1.6)                                            # the 3rd, in slot 6: the round ends at 1.75
    assert m.advance(1.7) == []
    (r,) = m.advance(1.75)
    assert (r.index, r.end_s, r.slots, r.sent, r.marked_slots, r.fraction) == (0, 1.75, 7, 3, 1, 1 / 3)
    for i in range(5):
        m.on_sent(1.8 + i / 100)                              # plenty, early: the 4 slots bound it
    assert m.advance(2.7) == []
    (r,) = m.advance(2.75)
    assert (r.index, r.end_s, r.slots, r.sent) == (1, 2.75, 4, 5)


def test_a_flow_at_dcqcn_floor_on_a_marking_path_still_repaths():
    # 10 packets/s, 20 ms slots: one packet every 5 slots, each answered by a CNP 30 ms later
    p = PlbParams(slot_s=0.02, round_slots=4, pause_s=0.0)
    s = PlbSender(p, sport=0xFFFF, rng=ScriptedRng(offsets=[0]))
    events = sorted([(k / 10, "sent") for k in range(80)] + [(k / 10 + 0.03, "cnp") for k in range(80)])
    repath_at = None
    for t, kind in events:
        if s.advance(t) is not None and repath_at is None:
            repath_at = t
        s.on_sent(t) if kind == "sent" else s.on_cnp(t)
    st = s.state
    assert repath_at is not None and st.repaths[0].reason == "congestion"
    assert st.repaths[0].round == 12 and st.congested_rounds >= 12
    assert 4.5 <= st.repaths[0].t_s <= 5.0                    # 12 rounds of 4 packets at 10 packets/s


def test_sender_repaths_after_twelve_rounds_of_cnp_every_slot():
    p = PlbParams(slot_s=0.25, round_slots=4, pause_s=0.0)    # round = 1 s
    s = PlbSender(p, sport=0xFFFF, rng=ScriptedRng(offsets=[100]))
    new_ports = []
    t = 0.0
    while t < 12.0:
        s.on_sent(t)
        if t % 0.25 == 0.125:                                 # one CNP in the middle of every slot
            s.on_cnp(t)
        got = s.advance(t + 0.0625)
        if got is not None:
            new_ports.append((t + 0.0625, got))
        t += 0.0625
    assert new_ports == [(12.0, ROCE_SPORT_MIN + 100)]
    out = s.summary()
    assert out["rounds"] == 12 and out["congested_rounds"] == 12 and out["cnps"] == 48
    assert out["repaths"] == [{"t_s": 12.0, "old_sport": 0xFFFF, "new_sport": ROCE_SPORT_MIN + 100,
                               "reason": "congestion", "round": 12}]
    assert out["params"]["slot_s"] == 0.25


def test_sender_with_cnps_in_one_slot_of_four_never_repaths():
    s = PlbSender(PlbParams(slot_s=0.25, round_slots=4), sport=0xC001, rng=ScriptedRng())
    for i in range(200):
        t = i * 0.25
        s.on_sent(t)
        if i % 4 == 0:
            s.on_cnp(t)
        assert s.advance(t) is None
    assert s.state.rounds == 49 and s.state.congested_rounds == 0


def test_cli_flags_build_a_plb_sender():
    ap = argparse.ArgumentParser()
    add_plb_arguments(ap)
    assert plb_from_args(ap.parse_args([]), sport=0xC001) is None
    a = ap.parse_args(["--plb", "--plb-threshold", "0.25", "--plb-rehash-rounds", "6", "--plb-round-slots", "2",
                       "--plb-round-packets", "0", "--plb-slot-s", "0.01", "--plb-pause-s", "0", "--plb-seed", "3"])
    s = plb_from_args(a, sport=0xC001)
    assert (s.params.cong_thresh, s.params.rehash_rounds, s.params.round_slots, s.params.round_min_packets,
            s.params.slot_s, s.params.pause_s) == (0.25, 6, 2, 0, 0.01, 0.0)
    assert s.sport == 0xC001


@pytest.mark.parametrize("kwargs,message", [
    ({"cong_thresh": 1.5}, "cong_thresh must be within"),
    ({"rehash_rounds": 0}, "rehash_rounds must be an integer >= 1"),
    ({"idle_rehash_rounds": -1}, "idle_rehash_rounds"),
    ({"pause_s": -1.0}, "pause_s must be finite"),
    ({"slot_s": 0.0}, "slot_s must be finite and > 0"),
    ({"round_slots": 0}, "round_slots must be an integer >= 1"),
    ({"round_min_packets": -1}, "round_min_packets must be an integer >= 0"),
    ({"sport_min": 70000}, "sport_min < sport_max"),
])
def test_invalid_parameters_are_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        PlbParams(**kwargs)


def test_bad_inputs_are_named():
    with pytest.raises(ValueError, match="outside"):
        PlbState(PlbParams(), sport=80)
    with pytest.raises(ValueError, match="fraction must be within"):
        PlbState(PlbParams(), sport=50000).on_round(1.0, 1.5)
