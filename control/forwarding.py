"""Control-plane side of p4src/include/forwarding.p4: IPv4 routes and ECMP
groups from the topology's shortest paths.

Each distinct set of next hops on a switch gets a next_id. A single next hop
is one action profile member; an ECMP set is a group of ECMP_SLOTS members
("slots"), each slot routing to one next hop. BMv2's selector picks slot
hash % group size, so with a fixed group size a flow keeps its slot for as
long as the group lives. When a next hop goes away only its slots are
handed to the others (and a new next hop takes slots from the most loaded),
so only the flows of the changed next hop move: resilient hashing on top of
a plain action selector.
"""
from __future__ import annotations

from collections import Counter
from typing import Mapping, Sequence

from .p4info import P4Info
from .sync import SwitchState
from .topology import NextHop, Route

LPM_TABLE = "ipv4_lpm"
NEXT_HOP_TABLE = "next_hop"
SEED_TABLE = "ecmp_seed_config"
ECMP_PROFILE = "ecmp_selector"
ECMP_SLOTS = 16
MAX_SLOTS = 256  # member ids are next_id << 8 | slot


def ecmp_seed(device_id: int) -> int:
    """A per-switch hash seed (odd, spread over 16 bits) against hash polarization."""
    return (device_id * 0x9E37 + 0x3C6F) & 0xFFFF | 1


def member_id(next_id: int, slot: int) -> int:
    return next_id << 8 | slot


def assign_slots(next_hops: Sequence[NextHop], previous: Sequence[NextHop] | None = None,
                 slots: int = ECMP_SLOTS) -> list[NextHop]:
    """Which next hop each of `slots` slots routes to, moving as few slots
    as possible away from `previous` (the assignment the switch holds now)."""
    if not next_hops:
        raise ValueError("an ECMP group needs at least one next hop")
    if not 0 < slots <= MAX_SLOTS:
        raise ValueError(f"slots must be within 1..{MAX_SLOTS}, got {slots}")
    hops = list(dict.fromkeys(next_hops))
    if previous is None or len(previous) != slots:
        return [hops[i % len(hops)] for i in range(slots)]
    alive = set(hops)
    assigned: list[NextHop | None] = [p if p in alive else None for p in previous]
    load = Counter({h: 0 for h in hops})
    load.update(a for a in assigned if a is not None)
    for i, a in enumerate(assigned):  # orphaned slots go to the least loaded
        if a is None:
            target = min(hops, key=lambda h: load[h])
            assigned[i] = target
            load[target] += 1
    while True:  # a new next hop takes slots from the most loaded ones
        most = max(hops, key=lambda h: load[h])
        least = min(hops, key=lambda h: load[h])
        if load[most] - load[least] <= 1:
            break
        i = max(i for i, a in enumerate(assigned) if a == most)
        assigned[i] = least
        load[most] -= 1
        load[least] += 1
    return assigned  # type: ignore[return-value]


def route_params(hop: NextHop) -> dict:
    return {"port": hop.port, "src_mac": hop.src_mac, "dst_mac": hop.dst_mac}


def next_hop_of(p4info: P4Info, action) -> NextHop:
    """The NextHop a route() action (as read from a switch) stands for."""
    names = {p.id: p.name for p in p4info.action("route").params}
    values = {names[p.param_id]: int.from_bytes(p.value, "big") for p in action.params}
    mac = lambda v: ":".join(f"{b:02x}" for b in v.to_bytes(6, "big"))  # noqa: E731
    return NextHop(values["port"], mac(values["src_mac"]), mac(values["dst_mac"]))


def forwarding_state(p4info: P4Info, routes: Sequence[Route],
                     current_slots: Mapping[int, Sequence[NextHop]] | None = None,
                     slots: int = ECMP_SLOTS, seed: int | None = None) -> SwitchState:
    """The entities one switch needs for `routes`. `current_slots` (next_id ->
    slot assignment read from the switch) keeps ECMP groups resilient; `seed`
    is the switch's ECMP hash seed (see ecmp_seed())."""
    current_slots = current_slots or {}
    state = SwitchState(
        managed_tables={p4info.table(t).preamble.id for t in (LPM_TABLE, NEXT_HOP_TABLE, SEED_TABLE)},
        managed_profiles={p4info.action_profile(ECMP_PROFILE).preamble.id})
    if seed is not None:
        state.table_entries.append(p4info.default_entry(SEED_TABLE, "set_ecmp_seed", {"seed": seed}))
    hop_sets = sorted({tuple(sorted(set(r.next_hops), key=lambda h: (h.port, h.dst_mac))) for r in routes},
                      key=lambda hs: [(h.port, h.dst_mac) for h in hs])
    next_ids = {hs: i + 1 for i, hs in enumerate(hop_sets)}
    for hops, next_id in next_ids.items():
        if len(hops) == 1:
            mid = member_id(next_id, 0)
            state.members.append(p4info.member(ECMP_PROFILE, mid, "route", route_params(hops[0])))
            state.table_entries.append(p4info.table_entry(NEXT_HOP_TABLE, {"meta.next_id": next_id}, member_id=mid))
            continue
        assignment = assign_slots(hops, current_slots.get(next_id), slots)
        mids = []
        for slot, hop in enumerate(assignment):
            mids.append(member_id(next_id, slot))
            state.members.append(p4info.member(ECMP_PROFILE, mids[-1], "route", route_params(hop)))
        state.groups.append(p4info.group(ECMP_PROFILE, next_id, mids))
        state.table_entries.append(p4info.table_entry(NEXT_HOP_TABLE, {"meta.next_id": next_id}, group_id=next_id))
    for route in routes:
        hops = tuple(sorted(set(route.next_hops), key=lambda h: (h.port, h.dst_mac)))
        state.table_entries.append(p4info.table_entry(
            LPM_TABLE, {"hdr.ipv4.dst_addr": route.prefix}, action="set_next_id",
            params={"next_id": next_ids[hops]}))
    return state


def slots_on_switch(p4info: P4Info, existing: SwitchState) -> dict[int, list[NextHop]]:
    """Current slot assignment of each ECMP group, from a read_state() result."""
    members = {m.member_id: m for m in existing.members}
    out = {}
    for g in existing.groups:
        ids = sorted(m.member_id for m in g.members)
        if all(i in members for i in ids):
            out[g.group_id] = [next_hop_of(p4info, members[i].action) for i in ids]
    return out
