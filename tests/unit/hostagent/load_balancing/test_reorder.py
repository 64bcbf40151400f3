"""The receiver's reorder buffer: in-order delivery, holding, gap timeout, capacity,
duplicates and late packets, 24-bit PSN wrap, and the exact metrics. Times are
binary fractions so that every comparison is exact."""
import math
import random

import pytest

from hostagent.load_balancing.reorder import (PSN_HALF, PSN_MOD, ReorderBank, ReorderBuffer, ReorderParams, psn_diff)

FOREVER = ReorderParams(gap_timeout_s=math.inf, capacity=100_000)


def psns(released):
    return [d.psn for d in released.delivered]


def test_psn_diff_is_serial_arithmetic_mod_2_24():
    assert psn_diff(5, 3) == 2 and psn_diff(3, 5) == -2
    assert psn_diff(0, PSN_MOD - 1) == 1
    assert psn_diff(PSN_MOD - 1, 0) == -1
    assert psn_diff(PSN_HALF - 1, 0) == PSN_HALF - 1
    assert psn_diff(PSN_HALF, 0) == -PSN_HALF          # the far half counts as behind


def test_in_order_packets_are_delivered_at_once():
    rb = ReorderBuffer(ReorderParams(gap_timeout_s=1.0))
    for i in range(10):
        rel = rb.push(i, float(i))
        assert psns(rel) == [i] and rel.lost == 0
        assert rel.delivered[0].delay_s == 0.0
    s = rb.summary()
    assert s["delivered"] == s["in_order"] == 10 and s["held"] == 0
    assert s["depth_hist"] == {"0": 10} and s["depth_max"] == 0 and s["reordered"] == 0
    assert s["occupancy_max"] == 0 and s["occupancy_mean"] == 0.0 and s["delay_max_s"] == 0.0
    assert s["losses_declared"] == 0 and s["missing"] == 0
    assert s["next_psn"] == 10 and s["delivered_through"] == 9 and s["last_delivery_s"] == 9.0


def test_swap_holds_one_packet_and_metrics_are_exact():
    rb = ReorderBuffer(FOREVER)
    assert psns(rb.push(0, 0.0)) == [0]
    assert psns(rb.push(2, 1.0)) == []                 # 1 missing: 2 held, depth 2 - 1 = 1
    assert rb.occupancy == 1 and rb.holes == 1 and rb.missing == 1
    rel = rb.push(1, 2.0)                              # fills the hole: 1 then 2
    assert psns(rel) == [1, 2]
    assert [d.delay_s for d in rel.delivered] == [0.0, 1.0]
    assert psns(rb.push(3, 3.0)) == [3]
    s = rb.summary()
    assert s["depth_hist"] == {"0": 3, "1": 1} and s["depth_max"] == 1 and s["depth_mean"] == 0.25
    assert s["reordered"] == 1                         # PSN 1 arrived after PSN 2
    assert s["held"] == 1 and s["in_order"] == 3 and s["delivered"] == 4
    assert s["occupancy_max"] == 1
    assert s["occupancy_mean"] == pytest.approx(1 / 3)  # 1 packet held for 1 s of 3 s
    assert s["delay_mean_s"] == 0.25 and s["delay_mean_held_s"] == 1.0 and s["delay_max_s"] == 1.0
    assert s["losses_declared"] == 0 and s["timeout_releases"] == 0 and s["missing"] == 0


def test_reverse_order_is_delivered_when_the_first_arrives():
    rb = ReorderBuffer(FOREVER)
    for t, p in enumerate([4, 3, 2, 1]):
        assert psns(rb.push(p, float(t))) == []
    rel = rb.push(0, 4.0)
    assert psns(rel) == [0, 1, 2, 3, 4]
    assert [d.delay_s for d in rel.delivered] == [0.0, 1.0, 2.0, 3.0, 4.0]
    s = rb.summary()
    assert s["depth_hist"] == {"0": 1, "1": 1, "2": 1, "3": 1, "4": 1}
    assert s["reordered"] == 4 and s["occupancy_max"] == 4
    assert s["occupancy_mean"] == 10 / 4                 # 1+2+3+4 packet-seconds over 4 s


@pytest.mark.parametrize("seed", range(20))
def test_any_permutation_is_delivered_in_order_without_loss(seed):
    order = list(range(200))
    random.Random(seed).shuffle(order)
    rb = ReorderBuffer(FOREVER)
    out = []
    for t, p in enumerate(order):
        out += psns(rb.push(p, t / 8))
    assert out == list(range(200))
    s = rb.summary()
    assert s["delivered"] == 200 and s["losses_declared"] == s["duplicates"] == s["late"] == 0
    assert s["occupancy_now"] == 0 and sum(s["depth_hist"].values()) == 200


def test_gap_timeout_declares_the_hole_lost_and_releases_what_follows():
    rb = ReorderBuffer(ReorderParams(gap_timeout_s=1.0))
    rb.push(0, 0.0)
    rb.push(2, 1.0)                                    # PSN 1 missing from t=1
    rb.push(3, 1.5)
    assert rb.next_deadline == 2.0
    assert not rb.advance(1.75)
    rel = rb.advance(2.0)                              # exactly gap_timeout_s after PSN 2 arrived
    assert psns(rel) == [2, 3] and rel.lost == 1
    assert [d.delay_s for d in rel.delivered] == [1.0, 0.5]
    assert rb.next_deadline is None
    assert psns(rb.push(4, 3.0)) == [4]
    s = rb.summary()
    assert s["losses_declared"] == s["lost_by_timeout"] == 1 and s["missing"] == 1
    assert s["timeout_releases"] == 1 and s["released_by_timeout"] == 2
    assert s["delay_max_s"] == 1.0 and s["delay_mean_s"] == 1.5 / 4


def test_each_hole_times_out_from_the_first_packet_beyond_it():
    rb = ReorderBuffer(ReorderParams(gap_timeout_s=4.0))
    rb.push(0, 0.0)
    rb.push(2, 1.0)                                    # exposes hole {1} at t=1
    rb.push(5, 2.0)                                    # exposes hole {3, 4} at t=2
    rel = rb.advance(5.0)
    assert psns(rel) == [2] and rel.lost == 1 and rb.next_psn == 3
    assert rb.next_deadline == 6.0
    rel = rb.advance(6.0)
    assert psns(rel) == [5] and rel.lost == 2
    assert rb.stats.timeout_releases == 2 and rb.stats.lost_by_timeout == 3


def test_a_timeout_also_delivers_lower_packets_that_arrived_later():
    rb = ReorderBuffer(ReorderParams(gap_timeout_s=4.0))
    rb.push(0, 0.0)
    rb.push(3, 1.0)
    rb.push(2, 2.0)
    rel = rb.advance(5.0)                              # PSN 3 waited 4 s: 1 lost, 2 and 3 go
    assert psns(rel) == [2, 3] and rel.lost == 1
    assert [d.delay_s for d in rel.delivered] == [3.0, 4.0]


def test_timeouts_due_are_resolved_before_the_new_packet():
    rb = ReorderBuffer(ReorderParams(gap_timeout_s=1.0))
    rb.push(0, 0.0)
    rb.push(2, 1.0)
    rel = rb.push(1, 2.0)                              # arrives at the deadline: already lost
    assert psns(rel) == [2] and rel.lost == 1
    assert rb.stats.late == 1


def test_duplicates_of_delivered_and_held_packets_are_dropped_and_counted():
    rb = ReorderBuffer(FOREVER)
    rb.push(0, 0.0)
    assert not rb.push(0, 0.5)                         # already delivered
    rb.push(2, 1.0)
    assert not rb.push(2, 1.5)                         # already held
    assert psns(rb.push(1, 2.0)) == [1, 2]
    s = rb.summary()
    assert s["received"] == 5 and s["duplicates"] == 2 and s["delivered"] == 3
    assert sum(s["depth_hist"].values()) == 3          # duplicates are not in the depth histogram


def test_late_arrival_after_a_timeout_is_counted_late_then_duplicate():
    rb = ReorderBuffer(ReorderParams(gap_timeout_s=1.0))
    rb.push(0, 0.0)
    rb.push(3, 1.0)
    assert rb.advance(2.0).lost == 2                   # PSNs 1 and 2 declared lost
    assert not rb.push(2, 3.0)                         # it was only late
    assert not rb.push(2, 3.5)                         # a second copy: a duplicate
    assert not rb.push(1, 4.0)
    s = rb.summary()
    assert s["late"] == 2 and s["duplicates"] == 1 and s["losses_declared"] == 2
    assert s["missing"] == 0                           # everything did arrive in the end


def test_psn_wraps_at_2_24():
    top = PSN_MOD - 1
    rb = ReorderBuffer(FOREVER, start_psn=top - 1)
    out = psns(rb.push(top - 1, 0.0))
    out += psns(rb.push(0, 1.0))                       # one ahead of `top`, across the wrap
    assert rb.summary()["depth_hist"] == {"0": 1, "1": 1}
    rel = rb.push(top, 2.0)
    out += psns(rel)
    out += psns(rb.push(1, 3.0))
    assert out == [top - 1, top, 0, 1]
    assert [d.seq for d in rel.delivered] == [PSN_MOD - 1, PSN_MOD]
    assert not rb.push(top, 4.0)                       # behind, across the wrap: duplicate
    assert rb.stats.duplicates == 1 and rb.next_psn == 2 and rb.delivered_through == PSN_MOD + 1


def test_loss_timeout_across_the_wrap():
    rb = ReorderBuffer(ReorderParams(gap_timeout_s=1.0), start_psn=PSN_MOD - 1)
    rb.push(PSN_MOD - 1, 0.0)
    rb.push(1, 0.5)                                    # PSN 0 missing
    rel = rb.advance(1.5)
    assert psns(rel) == [1] and rel.lost == 1
    assert not rb.push(0, 2.0) and rb.stats.late == 1


def test_capacity_overflow_releases_up_to_the_first_hole():
    rb = ReorderBuffer(ReorderParams(gap_timeout_s=math.inf, capacity=2))
    rb.push(0, 0.0)
    rb.push(2, 1.0)
    rb.push(3, 1.0)
    rel = rb.push(5, 2.0)                              # a third held packet: release the first hole
    assert psns(rel) == [2, 3] and rel.lost == 1
    assert rb.occupancy == 1 and rb.next_psn == 4
    s = rb.summary()
    assert s["overflow_releases"] == 1 and s["released_by_overflow"] == 2
    assert s["lost_by_overflow"] == s["losses_declared"] == 1 and s["occupancy_max"] == 2


def test_overflow_when_the_new_packet_is_the_lowest():
    rb = ReorderBuffer(ReorderParams(gap_timeout_s=math.inf, capacity=2))
    rb.push(0, 0.0)
    rb.push(5, 1.0)
    rb.push(6, 1.0)
    rel = rb.push(3, 2.0)                              # 3 is the lowest of {3, 5, 6}: 1, 2 lost, 3 goes
    assert psns(rel) == [3] and rel.lost == 2 and rel.delivered[0].delay_s == 0.0
    assert rb.occupancy == 2 and rb.holes == 1         # 5, 6 held; 4 missing


def test_capacity_zero_means_no_buffering():
    rb = ReorderBuffer(ReorderParams(capacity=0))
    rb.push(0, 0.0)
    rel = rb.push(2, 1.0)
    assert psns(rel) == [2] and rel.lost == 1
    assert not rb.push(1, 1.5) and rb.stats.late == 1
    assert rb.stats.occupancy_max == 0


def test_psn_far_ahead_is_dropped_as_out_of_window():
    rb = ReorderBuffer(ReorderParams(max_ahead=10))
    rb.push(0, 0.0)
    assert not rb.push(11, 0.0) and rb.occupancy == 1
    assert not rb.push(12, 0.0) and rb.stats.out_of_window == 1


def test_start_psn_none_takes_the_first_packet():
    rb = ReorderBuffer(FOREVER, start_psn=None)
    assert rb.next_psn is None
    assert psns(rb.push(1000, 0.0)) == [1000]
    assert psns(rb.push(1001, 1.0)) == [1001]


def test_flush_declares_holes_lost_and_delivers_the_rest():
    rb = ReorderBuffer(FOREVER)
    rb.push(0, 0.0)
    rb.push(2, 1.0)
    rb.push(4, 1.0)
    rel = rb.flush(3.0)
    assert psns(rel) == [2, 4] and rel.lost == 2
    s = rb.summary()
    assert s["lost_at_flush"] == 2 and s["released_at_flush"] == 2 and s["occupancy_now"] == 0


def test_occupancy_mean_is_time_weighted_until_the_last_call():
    rb = ReorderBuffer(FOREVER)
    rb.push(0, 0.0)
    rb.push(2, 0.0)
    rb.push(3, 1.0)                                    # 1 held on [0, 1), 2 held on [1, 3)
    rb.advance(3.0)
    assert rb.stats.occupancy_area == 5.0
    assert rb.summary()["occupancy_mean"] == 5.0 / 3.0
    rb.push(1, 4.0)                                    # 2 more held on [3, 4): 7 over 4 s
    assert rb.summary()["occupancy_mean"] == 7.0 / 4.0


def test_idle_time_after_the_flow_ended_does_not_dilute_the_mean():
    rb = ReorderBuffer(FOREVER)
    rb.push(0, 0.0)
    rb.push(2, 1.0)
    rb.push(1, 2.0)                                    # 1 held on [1, 2); last event at t=2
    assert not rb.advance(100.0)
    assert rb.summary()["occupancy_mean"] == 0.5
    assert rb.stats.last_s == 100.0 and rb.stats.last_event_s == 2.0


def test_the_clock_never_goes_back():
    rb = ReorderBuffer(ReorderParams(gap_timeout_s=1.0))
    rb.push(0, 5.0)
    rb.push(2, 4.0)                                    # taken as t=5
    assert rb.next_deadline == 6.0


def test_items_travel_with_their_packets():
    rb = ReorderBuffer(FOREVER)
    rb.push(1, 0.0, item="b")
    rel = rb.push(0, 1.0, item="a")
    assert [d.item for d in rel.delivered] == ["a", "b"]


def test_bank_keeps_flows_apart():
    bank = ReorderBank(ReorderParams(gap_timeout_s=1.0))
    bank.push("a", 0, 0.0)
    bank.push("a", 2, 0.0)
    bank.push("b", 0, 0.0)
    bank.push("b", 1, 0.5)
    assert set(bank) == {"a", "b"} and len(bank) == 2
    assert bank.advance(0.5) == {}
    rel = bank.advance(1.0)
    assert list(rel) == ["a"] and psns(rel["a"]) == [2] and rel["a"].lost == 1
    s = bank.summary()
    assert s["a"]["losses_declared"] == 1 and s["b"]["delivered"] == 2 and s["b"]["losses_declared"] == 0


@pytest.mark.parametrize("kwargs,message", [
    ({"gap_timeout_s": 0}, "gap_timeout_s must be > 0"),
    ({"gap_timeout_s": -1.0}, "gap_timeout_s must be > 0"),
    ({"capacity": -1}, "capacity must be an integer >= 0"),
    ({"capacity": 1.5}, "capacity must be an integer >= 0"),
    ({"max_ahead": 0}, "max_ahead must be an integer within"),
    ({"max_ahead": PSN_HALF}, "max_ahead must be an integer within"),
    ({"lost_memory": -1}, "lost_memory"),
])
def test_invalid_parameters_are_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ReorderParams(**kwargs)


@pytest.mark.parametrize("psn", [-1, PSN_MOD, 1.5, "3", True])
def test_invalid_psn_is_rejected(psn):
    with pytest.raises(ValueError, match="PSN must be an integer"):
        ReorderBuffer().push(psn, 0.0)
    with pytest.raises(ValueError, match="PSN must be an integer"):
        ReorderBank(start_psn=psn)
