"""Control-plane side of p4src/include/forwarding.p4: IPv4 routes and ECMP
groups from the topology's shortest paths.

A route with one next hop is a `route` action in ipv4_lpm. Each distinct set
of several next hops on a switch is an ECMP group with a next_id: the route
says set_next_id, and the group is ECMP_SLOTS entries (next_id, slot) ->
route in next_hop, each slot routing to one next hop. The data plane picks
the slot from the flow's hash, so a flow keeps its slot for as long as the
group lives. When a next hop goes away only its slots are handed to the
others (and a new next hop takes slots from the most loaded), so only the
flows of the changed next hop move: resilient hashing.
"""
from __future__ import annotations

from collections import Counter
from typing import Mapping, Sequence

from control.p4constants import constants
from control.p4info import P4Info
from control.sync import SwitchState
from control.topology import NextHop, Route

LPM_TABLE = "ipv4_lpm"
NEXT_HOP_TABLE = "next_hop"
SEED_TABLE = "ecmp_hash"
ECMP_SLOTS = 1 << constants()["ECMP_SLOT_BITS"]  # the slot is a P4 field of that width (defines.p4)


def ecmp_seed(device_id: int) -> int:
    """A per-switch hash seed (odd, spread over 16 bits) against hash polarization."""
    return (device_id * 0x9E37 + 0x3C6F) & 0xFFFF | 1


def _crc16_table() -> list[int]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0xA001 if crc & 1 else crc >> 1
        table.append(crc)
    return table


_CRC16_TABLE = _crc16_table()


def crc16(data: bytes) -> int:
    """BMv2's HashAlgorithm.crc16 (CRC-16/ARC: polynomial 0x8005, reflected, init 0)."""
    crc = 0
    for byte in data:
        crc = (crc >> 8) ^ _CRC16_TABLE[(crc ^ byte) & 0xFF]
    return crc


def slot_of(flow_hash: int, seed: int) -> int:
    """The slot p4src/include/forwarding.p4 (hash_flow) picks for a 16-bit
    flow hash on a switch with `seed`: the low bits of the CRC16 of the
    32-bit product hash x (seed | 1). A model of the data plane, for tests
    and analysis."""
    mixed = (flow_hash * (seed | 1)) & 0xFFFFFFFF
    return crc16(mixed.to_bytes(4, "big")) & (ECMP_SLOTS - 1)


def assign_slots(next_hops: Sequence[NextHop], previous: Sequence[NextHop] | None = None,
                 slots: int = ECMP_SLOTS) -> list[NextHop]:
    """Which next hop each of `slots` slots routes to, moving as few slots
    as possible away from `previous` (the assignment the switch holds now)."""
    if not next_hops:
        raise ValueError("an ECMP group needs at least one next hop")
    if not 0 < slots <= ECMP_SLOTS:
        raise ValueError(f"slots must be within 1..{ECMP_SLOTS}, got {slots}")
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


def route_entry(p4info: P4Info, prefix: str, hop: NextHop):
    """ipv4_lpm: `prefix` straight to one next hop."""
    return p4info.table_entry(LPM_TABLE, {"hdr.ipv4.dst_addr": prefix}, action="route", params=route_params(hop))


def group_entries(p4info: P4Info, next_id: int, assignment: Sequence[NextHop]) -> list:
    """next_hop: one entry per slot of ECMP group `next_id`."""
    return [p4info.table_entry(NEXT_HOP_TABLE, {"meta.next_id": next_id, "meta.ecmp_slot": slot},
                               action="route", params=route_params(hop))
            for slot, hop in enumerate(assignment)]


def forwarding_state(p4info: P4Info, routes: Sequence[Route],
                     current_slots: Mapping[int, Sequence[NextHop]] | None = None,
                     slots: int = ECMP_SLOTS, seed: int | None = None) -> SwitchState:
    """The entities one switch needs for `routes`. `current_slots` (next_id ->
    slot assignment read from the switch) keeps ECMP groups resilient; `seed`
    is the switch's ECMP hash seed (see ecmp_seed())."""
    current_slots = current_slots or {}
    state = SwitchState(managed_tables={p4info.table(t).preamble.id for t in (LPM_TABLE, NEXT_HOP_TABLE, SEED_TABLE)})
    if seed is not None:
        state.table_entries.append(p4info.default_entry(SEED_TABLE, "hash_flow", {"seed": seed}))
    key = lambda h: (h.port, h.dst_mac)  # noqa: E731
    hop_sets = sorted({tuple(sorted(set(r.next_hops), key=key)) for r in routes if len(set(r.next_hops)) > 1},
                      key=lambda hs: [key(h) for h in hs])
    next_ids = {hs: i + 1 for i, hs in enumerate(hop_sets)}
    for hops, next_id in next_ids.items():
        state.table_entries += group_entries(p4info, next_id, assign_slots(hops, current_slots.get(next_id), slots))
    for route in routes:
        hops = tuple(sorted(set(route.next_hops), key=key))
        if len(hops) == 1:
            state.table_entries.append(route_entry(p4info, route.prefix, hops[0]))
        else:
            state.table_entries.append(p4info.table_entry(
                LPM_TABLE, {"hdr.ipv4.dst_addr": route.prefix}, action="set_next_id",
                params={"next_id": next_ids[hops]}))
    return state


def slots_on_switch(p4info: P4Info, existing: SwitchState) -> dict[int, list[NextHop]]:
    """Current slot assignment of each ECMP group, from a read_state() result
    (a group missing a slot is left out: it is rewritten whole)."""
    table_id = p4info.table(NEXT_HOP_TABLE).preamble.id
    fields = {f.id: f.name for f in p4info.table(NEXT_HOP_TABLE).match_fields}
    groups: dict[int, dict[int, NextHop]] = {}
    for e in existing.table_entries:
        if e.table_id != table_id or e.is_default_action:
            continue
        match = {fields[m.field_id]: int.from_bytes(m.exact.value, "big") for m in e.match}
        groups.setdefault(match["meta.next_id"], {})[match["meta.ecmp_slot"]] = next_hop_of(p4info, e.action.action)
    return {next_id: [slots[i] for i in range(len(slots))]
            for next_id, slots in groups.items() if sorted(slots) == list(range(len(slots)))}
