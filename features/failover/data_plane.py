"""Control-plane side of p4src/include/failover.p4: data-plane failover of
ECMP members whose neighbour stopped sending heartbeats.

In a topology file (validated with the rest of it, before anything starts):

    failover:
      heartbeat_ms: 20        # how often features/failover/heartbeat.py sends along every link
      timeout_ms: 100         # a port silent this long after a heartbeat is dead
      paths: true             # also watch the paths to every other edge switch (default)

Every switch then watches the ports of its ECMP groups (failover_config's
default action: watch(timeout)), and each slot of a group gets a backup in
next_hop_backup: the member of the nearest following slot that leaves
through another port. A packet whose member's port is dead takes the backup;
with the backup dead too, it is dropped as DROP_NO_LIVE_MEMBER. The backups
follow the slots the controller is about to write (`forwarding=`), so they
stay right after the controller re-homes slots.

With `paths`, heartbeats also make round trips from every edge switch (a
switch with hosts) A to every other one B, through each neighbour N of A on
a shortest path, carrying B's index; A, hearing one come back from N,
records that the round trip to B through N works (path_heard).
failover_destination maps each remote host subnet to the index of its edge
switch (edge_switches(): the sorted names of the switches with hosts), so
a member whose path to the packet's edge switch went silent is dead too: a
link failing behind a neighbour (spine1's link down to leaf2, seen from
leaf1), in either direction, fails over in the data plane as well. The
cost: edges x (edges - 1) x uplinks more heartbeats a period (4 on
leaf-spine, 112 on fat-tree-k4; raise heartbeat_ms there, or set
paths: false).

Detection bound: a port is declared dead at most timeout_ms + heartbeat_ms
after its last heartbeat arrived (and no earlier than timeout_ms), so
timeout_ms must exceed heartbeat_ms: twice at least, against one lost
heartbeat.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Optional

from control.feature import Fail, check_mapping
from control.forwarding import ecmp_seed, forwarding_state, slots_on_switch
from control.p4constants import constants
from control.p4info import P4Info
from control.sync import SwitchState
from control.topology import NextHop
from control.forwarding import ECMP_SLOTS

SECTION = "failover"
CONFIG_TABLE = "failover_config"
BACKUP_TABLE = "next_hop_backup"
DESTINATION_TABLE = "failover_destination"
BACKUP_COUNTER = "backup_packets"
HEARD_REGISTER = "port_heard"
FIELDS = {"heartbeat_ms", "timeout_ms", "paths"}
FAILOVER_ORIGINS = 1 << constants()["FAILOVER_ORIGIN_BITS"]   # edge switches whose paths are watched
BENCH_NEXT_ID = 1


@dataclass(frozen=True)
class FailoverConfig:
    heartbeat_ms: float = 20.0
    timeout_ms: float = 100.0
    paths: bool = True

    @property
    def detection_bound_ms(self) -> float:
        return self.timeout_ms + self.heartbeat_ms


def _ms(value: Any) -> Optional[float]:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 3_600_000:
        return None
    return float(value)


def parse_section(raw: Any, topo, fail: Fail) -> FailoverConfig:
    check_mapping(raw, SECTION, FIELDS, fail, what="{heartbeat_ms, timeout_ms, paths}")
    values = {}
    for key, default in (("heartbeat_ms", FailoverConfig.heartbeat_ms), ("timeout_ms", FailoverConfig.timeout_ms)):
        v = _ms(raw.get(key, default))
        if v is None:
            fail(f"{SECTION}.{key}", f"expected milliseconds above 0, got {raw.get(key)!r}")
        values[key] = v
    if values["timeout_ms"] < 2 * values["heartbeat_ms"]:
        fail(f"{SECTION}.timeout_ms", f"{values['timeout_ms']:g} ms is less than two heartbeats "
                                      f"({values['heartbeat_ms']:g} ms each): one lost heartbeat would kill a port")
    paths = raw.get("paths", True)
    if not isinstance(paths, bool):
        fail(f"{SECTION}.paths", f"expected true or false, got {paths!r}")
    edges = edge_switches(topo)
    if paths and len(edges) > FAILOVER_ORIGINS:
        fail(f"{SECTION}.paths", f"{len(edges)} switches have hosts; paths can be watched for at most "
                                 f"{FAILOVER_ORIGINS} (set paths: false)")
    return FailoverConfig(**values, paths=paths)


def edge_switches(topo) -> list[str]:
    """The switches with hosts, sorted: a path heartbeat carries the index of
    its far edge switch in this list (HEARTBEAT_ORIGIN_PORT_BASE + index)."""
    return sorted({nic.switch for nic in topo.nics})


def destinations(topo, switch: str) -> dict[str, int]:
    """Remote host subnet -> the index of the edge switch it sits behind."""
    index = {s: i for i, s in enumerate(edge_switches(topo))}
    return {route.prefix: index[topo.hosts[route.host].nics[route.nic].switch]
            for route in topo.routes()[switch]
            if topo.hosts[route.host].nics[route.nic].switch != switch}


def backups(slots: list[NextHop]) -> dict[int, NextHop]:
    """Slot -> its backup: the member of the nearest following slot (wrapping)
    on another port; none when every slot leaves through one port."""
    out = {}
    n = len(slots)
    for s, hop in enumerate(slots):
        for k in range(1, n):
            other = slots[(s + k) % n]
            if other.port != hop.port:
                out[s] = other
                break
    return out


def empty_state(p4info: P4Info) -> SwitchState:
    """Failover off: no backups, failover_config back to NoAction."""
    return SwitchState(managed_tables={p4info.table(t).preamble.id
                                       for t in (CONFIG_TABLE, BACKUP_TABLE, DESTINATION_TABLE)},
                       table_entries=[p4info.default_entry(CONFIG_TABLE, "NoAction")])


def failover_state(p4info: P4Info, groups: Mapping[int, list[NextHop]], timeout_ms: float,
                   edges: Mapping[str, int] | None = None) -> SwitchState:
    """Failover on with `timeout_ms`, backups for every slot of `groups`,
    and the edge switch index of each remote prefix in `edges` (paths watched)."""
    state = empty_state(p4info)
    state.table_entries = [p4info.default_entry(CONFIG_TABLE, "watch",
                                                {"timeout_us": int(round(timeout_ms * 1000))})]
    for next_id, slots in sorted(groups.items()):
        for slot, hop in sorted(backups(slots).items()):
            state.table_entries.append(p4info.table_entry(
                BACKUP_TABLE, {"meta.next_id": next_id, "meta.ecmp_slot": slot}, action="backup",
                params={"port": hop.port, "src_mac": hop.src_mac, "dst_mac": hop.dst_mac}))
    for prefix, origin in sorted((edges or {}).items()):
        state.table_entries.append(p4info.table_entry(DESTINATION_TABLE, {"hdr.ipv4.dst_addr": prefix},
                                                      action="toward", params={"origin": origin}))
    return state


def switch_state(p4info: P4Info, topo, switch: str, *, forwarding: Optional[SwitchState] = None) -> SwitchState:
    """The failover entries the topology file gives `switch` (feature interface)."""
    cfg: Optional[FailoverConfig] = topo.features.get(SECTION)
    if cfg is None:
        return empty_state(p4info)
    if forwarding is None:
        forwarding = forwarding_state(p4info, topo.routes()[switch], seed=ecmp_seed(topo.switches[switch].device_id))
    return failover_state(p4info, slots_on_switch(p4info, forwarding), cfg.timeout_ms,
                          destinations(topo, switch) if cfg.paths else None)


def bench_state(p4info: P4Info, port: int) -> SwitchState:
    """Failover on for the bench's group (every packet checks its port's
    liveness and its path's, to edge 0; the bench's heartbeat-less ports
    are never declared dead)."""
    slots = [NextHop(port, "0a:00:00:00:02:01", "0a:00:02:00:00:01")] * ECMP_SLOTS
    return failover_state(p4info, {BENCH_NEXT_ID: slots}, FailoverConfig.timeout_ms, {"0.0.0.0/0": 0})


def backup_packets(conn, p4info: P4Info) -> dict[tuple[int, int], int]:
    """Packets sent to each (group, slot)'s backup (backup_packets)."""
    table = p4info.table(BACKUP_TABLE)
    fields = {f.id: f.name for f in table.match_fields}
    out = {}
    for entry, packets in conn.direct_counters(table.preamble.id):
        match = {fields[m.field_id]: int.from_bytes(m.exact.value, "big") for m in entry.match}
        out[(match["meta.next_id"], match["meta.ecmp_slot"])] = packets
    return out
