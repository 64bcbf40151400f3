"""Report sequence accounting: exact counts of lost, reordered, duplicate
reports and resets, across the 22-bit wrap."""
import random

import pytest

from wire.int_telemetry import SEQ_MODULUS
from telemetry.sequence import SequenceTracker, StreamTable

M = SEQ_MODULUS


def run(seqs, window=1 << 16):
    t = SequenceTracker(window=window)
    verdicts = [t.observe(s % M) for s in seqs]
    return t.stats.as_dict(), verdicts


def counts(received=0, lost=0, reordered=0, duplicates=0, resets=0):
    return dict(received=received, lost=lost, reordered=reordered, duplicates=duplicates, resets=resets)


@pytest.mark.parametrize("seqs,expected", [
    ([0, 1, 2, 3], counts(received=4)),
    ([0, 1, 3, 4], counts(received=4, lost=1)),
    ([0, 5], counts(received=2, lost=4)),
    ([0, 2, 1, 3], counts(received=4, reordered=1)),
    ([0, 3, 2, 1, 4], counts(received=5, reordered=2)),
    ([0, 1, 1, 2, 2, 2], counts(received=3, duplicates=3)),
    ([0, 2, 1, 1], counts(received=3, reordered=1, duplicates=1)),   # a late report, then its duplicate
    ([5, 4, 6], counts(received=3, reordered=1)),                    # late report from before the first
    ([5, 3, 6], counts(received=3, lost=1, reordered=1)),            # ... which also opens a gap (4)
    ([10, 12, 11, 14, 13, 16], counts(received=6, lost=1, reordered=2)),  # 15 never came
    # the 22-bit wrap: 4194303 is followed by 0
    ([M - 2, M - 1, 0, 1], counts(received=4)),
    ([M - 1, 1], counts(received=2, lost=1)),
    ([M - 2, 0, M - 1, 1], counts(received=4, reordered=1)),
    ([M - 1, 0, M - 1, 0], counts(received=2, duplicates=2)),
    ([1, M - 1, 0, 2], counts(received=4, reordered=2)),             # two reports from before the wrap, late
    ([M - 3, 2], counts(received=2, lost=4)),                        # M-2, M-1, 0, 1 lost across the wrap
])
def test_exact_counts(seqs, expected):
    assert run(seqs)[0] == expected


def test_verdicts_name_each_report():
    assert run([0, 1, 3, 2, 2, 100000])[1] == ["first", "in-order", "gap", "reordered", "duplicate", "reset"]


def test_jumps_beyond_the_window_are_resets_not_loss():
    stats, verdicts = run([100, 101, 103, 1_000_000, 1_000_001, 5, 6], window=1000)
    assert stats == counts(received=7, lost=1, resets=2)     # 102 stays lost; the jumps are new epochs
    assert verdicts[3] == "reset" and verdicts[5] == "reset"


def test_gap_older_than_the_window_is_final():
    t = SequenceTracker(window=8)
    for s in [0, 2, *range(3, 12)]:   # 1 missing, then the window moves past it
        t.observe(s)
    assert t.stats.lost == 1
    assert t.observe(1) == "reset"    # 11 behind: too old to be a late arrival
    assert t.stats.lost == 1 and t.stats.reordered == 0


def test_window_must_fit_half_the_sequence_space():
    with pytest.raises(ValueError, match="window"):
        SequenceTracker(window=M)
    with pytest.raises(ValueError, match="outside"):
        SequenceTracker().observe(M)


def brute_force(seqs_unbounded):
    """The definitions, computed directly on unbounded numbers (no resets)."""
    seen, highest, reordered, dup = set(), None, 0, 0
    for s in seqs_unbounded:
        if s in seen:
            dup += 1
            continue
        if highest is not None and s < highest:
            reordered += 1
        seen.add(s)
        highest = s if highest is None else max(highest, s)
    lost = max(seen) - min(seen) + 1 - len(seen)
    return counts(received=len(seen), lost=lost, reordered=reordered, duplicates=dup)


@pytest.mark.parametrize("seed", range(40))
def test_random_streams_match_the_definitions(seed):
    rng = random.Random(seed)
    start = rng.choice([0, M - 50, rng.randrange(M)])
    n = rng.randrange(1, 400)
    seqs = [start + i for i in range(n) if rng.random() > 0.1]              # 10 % lost
    for _ in range(len(seqs) // 5):                                          # local reordering
        i = rng.randrange(len(seqs))
        j = min(len(seqs) - 1, i + rng.randrange(1, 6))
        seqs[i], seqs[j] = seqs[j], seqs[i]
    for _ in range(len(seqs) // 10):                                         # duplicates
        i = rng.randrange(len(seqs))
        seqs.insert(rng.randrange(i, len(seqs) + 1), seqs[i])
    stats, _ = run(seqs)
    assert stats == brute_force(seqs)


def test_streams_are_per_node_and_hw_id():
    table = StreamTable()
    for node, hw, seq in [(1, 0, 0), (1, 0, 2), (1, 1, 0), (1, 1, 1), (2, 0, 7), (2, 0, 7)]:
        table.observe(node, hw, seq)
    stats = {k: v.as_dict() for k, v in table.stats().items()}
    assert stats == {(1, 0): counts(received=2, lost=1), (1, 1): counts(received=2),
                     (2, 0): counts(received=1, duplicates=1)}
