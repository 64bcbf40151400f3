"""Resilient ECMP slot assignment: a next hop that goes away moves only its own slots."""
from collections import Counter

import pytest

from control.forwarding import assign_slots
from control.topology import NextHop

HOPS = [NextHop(p, "0a:00:00:00:01:%02x" % p, "0a:00:00:00:02:%02x" % p) for p in range(1, 5)]


def test_fresh_assignment_is_balanced():
    slots = assign_slots(HOPS, None, 16)
    assert Counter(slots) == {h: 4 for h in HOPS}


def test_removing_a_next_hop_moves_only_its_slots():
    before = assign_slots(HOPS, None, 16)
    after = assign_slots(HOPS[:2] + HOPS[3:], before, 16)
    moved = [i for i, (b, a) in enumerate(zip(before, after)) if b != a]
    assert moved and all(before[i] == HOPS[2] for i in moved)
    assert HOPS[2] not in after
    counts = Counter(after)
    assert max(counts.values()) - min(counts.values()) <= 1


def test_adding_a_next_hop_takes_slots_only_for_itself():
    before = assign_slots(HOPS[:3], None, 12)
    after = assign_slots(HOPS, before, 12)
    moved = [i for i, (b, a) in enumerate(zip(before, after)) if b != a]
    assert all(after[i] == HOPS[3] for i in moved)
    assert Counter(after) == {h: 3 for h in HOPS}


def test_single_next_hop_and_bad_input():
    assert assign_slots(HOPS[:1], None, 16) == [HOPS[0]] * 16
    with pytest.raises(ValueError, match="at least one next hop"):
        assign_slots([], None, 16)
    with pytest.raises(ValueError, match="slots"):
        assign_slots(HOPS, None, 0)
