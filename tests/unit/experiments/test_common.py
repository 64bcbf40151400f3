"""What the experiments share that needs no network: the ratio of two
sets of runs' medians and its bootstrap interval."""
import pytest

from experiments.common import median_ratio_interval


def test_a_clear_shift_has_an_interval_that_excludes_one_and_contains_the_ratio():
    ratio, lo, hi = median_ratio_interval([130, 128, 133, 131, 129], [100, 99, 102, 101, 98])
    assert ratio == pytest.approx(130 / 100)
    assert 1 < lo <= ratio <= hi


def test_overlapping_runs_give_an_interval_that_spans_one():
    _, lo, hi = median_ratio_interval([100, 108, 95, 103, 99], [101, 97, 106, 100, 104])
    assert lo < 1 < hi


def test_the_interval_is_reproduced_from_its_runs_and_narrows_with_confidence():
    runs = ([130, 110, 125, 140, 118], [100, 120, 95, 105, 112])
    assert median_ratio_interval(*runs) == median_ratio_interval(*runs)
    _, lo95, hi95 = median_ratio_interval(*runs)
    _, lo50, hi50 = median_ratio_interval(*runs, confidence=0.5)
    assert lo95 <= lo50 <= hi50 <= hi95


@pytest.mark.parametrize("args,message", [(([], [1.0]), "at least one value"),
                                          (([1.0], [1.0], 1.0), "confidence must be in")])
def test_bad_input_is_named(args, message):
    with pytest.raises(ValueError, match=message):
        median_ratio_interval(*args)
