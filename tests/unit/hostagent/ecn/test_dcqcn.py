"""DCQCN rate control, step by step against the paper's rules."""
import pytest

from hostagent.ecn.dcqcn import DcqcnParams, NotificationPoint, ReactionPoint

P = DcqcnParams(line_rate_pps=1000, g=1 / 16, alpha_timer_s=0.01, rate_timer_s=0.01,
                byte_counter_bytes=10_000, fast_recovery_steps=5, r_ai_pps=5, r_hai_pps=50)


def test_cnp_cuts_rate_by_half_alpha_and_raises_alpha():
    rp = ReactionPoint(P)
    rp.on_cnp(0.001)
    assert rp.rate == pytest.approx(500)        # alpha starts at 1: Rc (1 - 1/2)
    assert rp.target == pytest.approx(1000)
    assert rp.alpha == pytest.approx(1.0)       # (1-g) 1 + g
    rp.on_cnp(0.002)
    assert rp.rate == pytest.approx(250) and rp.target == pytest.approx(500)


def test_alpha_decays_only_in_periods_without_cnp():
    rp = ReactionPoint(P)
    rp.advance(0.0101)                          # one period, no CNP
    assert rp.alpha == pytest.approx(15 / 16)
    rp.on_cnp(0.015)
    a = rp.alpha
    rp.advance(0.0201)                          # the period had a CNP: no decay
    assert rp.alpha == pytest.approx(a)
    rp.advance(0.0301)
    assert rp.alpha == pytest.approx(a * 15 / 16)


def test_fast_recovery_then_additive_then_hyper_increase():
    rp = ReactionPoint(P)
    rp.on_cnp(0.0)                              # Rc 500, Rt 1000
    rp.advance(0.0101)                          # timer event 1: fast recovery
    assert (rp.rate, rp.target) == (pytest.approx(750), pytest.approx(1000))
    rp = ReactionPoint(P)
    rp.on_cnp(0.0)
    rp.on_cnp(0.0)                              # Rc 250, Rt 500
    rp.advance(0.0501)                          # t = 5, bc = 0: additive
    assert rp.timer_events == 5
    assert rp.target == pytest.approx(505)
    for _ in range(6 * 10):                     # bc = 6 and t >= 6: hyper
        rp.on_sent(1000, 0.0501)
    rp.advance(0.0601)
    assert rp.byte_events == 6 and rp.timer_events == 6
    assert rp.target > 505 + 50
    assert rp.rate <= P.line_rate_pps


def test_rate_never_exceeds_line_rate_nor_falls_below_minimum():
    rp = ReactionPoint(P)
    for i in range(200):
        rp.on_cnp(i * 0.0001)
    assert rp.rate == pytest.approx(P.min_rate_pps)
    rp.advance(10.0)
    assert rp.rate == pytest.approx(P.line_rate_pps)


def test_np_sends_at_most_one_cnp_per_flow_per_interval():
    np_ = NotificationPoint(DcqcnParams(cnp_interval_s=0.005))
    assert np_.should_send_cnp("a", 0.0)
    assert not np_.should_send_cnp("a", 0.004)
    assert np_.should_send_cnp("b", 0.004)
    assert np_.should_send_cnp("a", 0.0051)


@pytest.mark.parametrize("field,value,message", [
    ("g", 0, "g must be within"), ("line_rate_pps", -1, "line_rate_pps must be > 0"),
    ("min_rate_pps", 5000, "min_rate_pps"), ("cnp_interval_s", 0, "cnp_interval_s must be > 0")])
def test_invalid_parameters_are_named(field, value, message):
    with pytest.raises(ValueError, match=message):
        DcqcnParams(**{field: value})
