"""Resilient ECMP slot assignment: a next hop that goes away moves only its own
slots; per-switch seeds keep one tier's choice from fixing the next one's."""
import functools
from collections import Counter
from pathlib import Path

import pytest

from control.forwarding import assign_slots, crc16, ecmp_seed, slot_of
from control.topology import NextHop
from features import load_topology

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


@functools.cache
def _slots(seed: int) -> list[int]:
    return [slot_of(h, seed) for h in range(0, 1 << 16, 2)]


def _joint(seed_a: int, seed_b: int, ways: int = 2) -> Counter:
    """(choice at tier A, choice at tier B) over 32768 flow hashes, each tier
    splitting its 16 slots over `ways` next hops as assign_slots does."""
    return Counter((a % ways, b % ways) for a, b in zip(_slots(seed_a), _slots(seed_b)))


def test_bmv2_crc16_model():
    assert crc16(b"123456789") == 0xBB3D  # CRC-16/ARC check value


@pytest.mark.parametrize("ways", [2, 4])
def test_per_switch_seeds_decorrelate_tiers(ways):
    """Flows that took one uplink at one tier spread evenly over the next
    tier's uplinks (polarization made them all take the same one): for every
    pair of switch seeds of fat-tree-k4, each (first, second) choice holds
    1/ways of the first choice's flows, within 10%."""
    topo = load_topology(Path(__file__).resolve().parents[3] / "topologies" / "fat-tree-k4.yaml")
    seeds = [ecmp_seed(sw.device_id) for sw in topo.switches.values()][:8]
    for a in seeds:
        for b in seeds:
            if a == b:
                continue
            joint = _joint(a, b, ways)
            for first in range(ways):
                share = [joint[(first, second)] for second in range(ways)]
                even = sum(share) / ways
                assert max(abs(n - even) for n in share) / even < 0.1, f"seeds {a:#x}/{b:#x}: {share}"


def test_one_seed_everywhere_would_polarize():
    joint = _joint(0x9E37, 0x9E37)
    assert joint[(0, 1)] == joint[(1, 0)] == 0  # the second tier repeats the first choice
