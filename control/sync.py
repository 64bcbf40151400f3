"""Idempotent programming: make a switch hold exactly a desired set of
entities, writing only the difference.

Default actions (TableEntry.is_default_action) are modified, never inserted
or deleted, and only for the tables whose default the desired state sets.

The controller describes what a switch should hold (SwitchState). reconcile()
reads what the switch holds in the same tables and action profiles, compares
by identity (table + match + priority, profile + member/group id) and value,
and writes inserts, modifications and deletions in an order that never
references a missing member or group. Running it twice writes nothing the
second time.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from collections.abc import Set
from typing import Callable, Hashable

from p4.v1 import p4runtime_pb2

from control.switch import SwitchConnection, update

INSERT, MODIFY, DELETE = (p4runtime_pb2.Update.INSERT, p4runtime_pb2.Update.MODIFY,
                          p4runtime_pb2.Update.DELETE)


@dataclass
class SwitchState:
    """What one switch should hold, in the tables/profiles listed as managed
    (a managed table with no desired entries is emptied)."""
    table_entries: list[p4runtime_pb2.TableEntry] = field(default_factory=list)
    members: list[p4runtime_pb2.ActionProfileMember] = field(default_factory=list)
    groups: list[p4runtime_pb2.ActionProfileGroup] = field(default_factory=list)
    managed_tables: set[int] = field(default_factory=set)
    managed_profiles: set[int] = field(default_factory=set)
    # Clone sessions (the replication engine's, e.g. telemetry reports): the
    # ones a feature owns, by session id.
    clone_sessions: list[p4runtime_pb2.CloneSessionEntry] = field(default_factory=list)
    managed_clone_sessions: set[int] = field(default_factory=set)
    # Multicast groups (e.g. aggregation results), by group id, likewise.
    multicast_groups: list[p4runtime_pb2.MulticastGroupEntry] = field(default_factory=list)
    managed_multicast_groups: set[int] = field(default_factory=set)

    def merge(self, other: "SwitchState") -> "SwitchState":
        """Add another feature's entities (its tables and profiles must be its own)."""
        overlap = (self.managed_tables & other.managed_tables) | (self.managed_profiles & other.managed_profiles)
        if overlap:
            raise ValueError(f"two features manage the same tables/profiles: {sorted(overlap)}")
        sessions = self.managed_clone_sessions & other.managed_clone_sessions
        if sessions:
            raise ValueError(f"two features manage the same clone sessions: {sorted(sessions)}")
        groups = self.managed_multicast_groups & other.managed_multicast_groups
        if groups:
            raise ValueError(f"two features manage the same multicast groups: {sorted(groups)}")
        self.table_entries += other.table_entries
        self.members += other.members
        self.groups += other.groups
        self.clone_sessions += other.clone_sessions
        self.multicast_groups += other.multicast_groups
        self.managed_multicast_groups |= other.managed_multicast_groups
        self.managed_tables |= other.managed_tables
        self.managed_profiles |= other.managed_profiles
        self.managed_clone_sessions |= other.managed_clone_sessions
        return self


@dataclass
class SyncReport:
    inserted: int = 0
    modified: int = 0
    deleted: int = 0

    @property
    def writes(self) -> int:
        return self.inserted + self.modified + self.deleted

    def __str__(self) -> str:
        return f"{self.inserted} inserted, {self.modified} modified, {self.deleted} deleted"


def _int(b: bytes) -> int:
    return int.from_bytes(b, "big")


def _match_key(fm: p4runtime_pb2.FieldMatch) -> tuple:
    kind = fm.WhichOneof("field_match_type")
    m = getattr(fm, kind)
    if kind == "exact":
        return fm.field_id, kind, _int(m.value)
    if kind == "lpm":
        return fm.field_id, kind, _int(m.value), m.prefix_len
    if kind == "ternary":
        return fm.field_id, kind, _int(m.value), _int(m.mask)
    if kind == "range":
        return fm.field_id, kind, _int(m.low), _int(m.high)
    return fm.field_id, kind, _int(m.value)


def _action_value(a: p4runtime_pb2.Action) -> tuple:
    return a.action_id, tuple(sorted((p.param_id, _int(p.value)) for p in a.params))


def table_key(e: p4runtime_pb2.TableEntry) -> tuple:
    if e.is_default_action:
        return e.table_id, "default"
    return e.table_id, tuple(sorted(_match_key(m) for m in e.match)), e.priority


def table_value(e: p4runtime_pb2.TableEntry) -> tuple:
    kind = e.action.WhichOneof("type")
    if kind == "action":
        return kind, _action_value(e.action.action)
    return kind, getattr(e.action, kind)


def member_key(m: p4runtime_pb2.ActionProfileMember) -> tuple:
    return m.action_profile_id, m.member_id


def member_value(m: p4runtime_pb2.ActionProfileMember) -> tuple:
    return _action_value(m.action)


def group_key(g: p4runtime_pb2.ActionProfileGroup) -> tuple:
    return g.action_profile_id, g.group_id


def group_value(g: p4runtime_pb2.ActionProfileGroup) -> frozenset:
    return frozenset((m.member_id, m.weight or 1) for m in g.members)


def clone_session_key(c: p4runtime_pb2.CloneSessionEntry) -> int:
    return c.session_id


def clone_session_value(c: p4runtime_pb2.CloneSessionEntry) -> tuple:
    return (frozenset((r.egress_port, r.instance) for r in c.replicas), c.class_of_service, c.packet_length_bytes)


def multicast_group_key(g: p4runtime_pb2.MulticastGroupEntry) -> int:
    return g.multicast_group_id


def multicast_group_value(g: p4runtime_pb2.MulticastGroupEntry) -> frozenset:
    return frozenset((r.egress_port, r.instance) for r in g.replicas)


@dataclass
class _Diff:
    insert: list = field(default_factory=list)
    modify: list = field(default_factory=list)
    delete: list = field(default_factory=list)


def _diff(desired: list, existing: list, key: Callable[..., Hashable], value: Callable) -> _Diff:
    have = {key(e): e for e in existing}
    want: dict = {}
    for e in desired:
        k = key(e)
        if k in want:
            raise ValueError(f"desired state lists the same entity twice: {k}")
        want[k] = e
    d = _Diff()
    for k, e in want.items():
        if k not in have:
            d.insert.append(e)
        elif value(have[k]) != value(e):
            d.modify.append(e)
    d.delete = [e for k, e in have.items() if k not in want]
    return d


def read_state(conn: SwitchConnection, tables: set[int], profiles: set[int],
               default_tables: Set[int] = frozenset(), clone_sessions: Set[int] = frozenset(),
               multicast_groups: Set[int] = frozenset()) -> SwitchState:
    queries = [p4runtime_pb2.Entity(table_entry=p4runtime_pb2.TableEntry(table_id=t)) for t in sorted(tables)]
    queries += [p4runtime_pb2.Entity(table_entry=p4runtime_pb2.TableEntry(table_id=t, is_default_action=True))
                for t in sorted(default_tables)]
    for p in sorted(profiles):
        queries.append(p4runtime_pb2.Entity(action_profile_member=p4runtime_pb2.ActionProfileMember(action_profile_id=p)))
        queries.append(p4runtime_pb2.Entity(action_profile_group=p4runtime_pb2.ActionProfileGroup(action_profile_id=p)))
    if clone_sessions:  # session id 0: every session (filtered below)
        queries.append(p4runtime_pb2.Entity(packet_replication_engine_entry=p4runtime_pb2.PacketReplicationEngineEntry(
            clone_session_entry=p4runtime_pb2.CloneSessionEntry(session_id=0))))
    if multicast_groups:  # group id 0: every group (filtered below)
        queries.append(p4runtime_pb2.Entity(packet_replication_engine_entry=p4runtime_pb2.PacketReplicationEngineEntry(
            multicast_group_entry=p4runtime_pb2.MulticastGroupEntry(multicast_group_id=0))))
    state = SwitchState(managed_tables=set(tables), managed_profiles=set(profiles),
                        managed_clone_sessions=set(clone_sessions),
                        managed_multicast_groups=set(multicast_groups))
    if not queries:
        return state
    for ent in conn.read(queries):
        kind = ent.WhichOneof("entity")
        if kind == "table_entry" and (not ent.table_entry.is_default_action
                                      or ent.table_entry.table_id in default_tables):
            state.table_entries.append(ent.table_entry)
        elif kind == "action_profile_member":
            state.members.append(ent.action_profile_member)
        elif kind == "action_profile_group":
            state.groups.append(ent.action_profile_group)
        elif (kind == "packet_replication_engine_entry"
              and ent.packet_replication_engine_entry.WhichOneof("type") == "clone_session_entry"
              and ent.packet_replication_engine_entry.clone_session_entry.session_id in clone_sessions):
            state.clone_sessions.append(ent.packet_replication_engine_entry.clone_session_entry)
        elif (kind == "packet_replication_engine_entry"
              and ent.packet_replication_engine_entry.WhichOneof("type") == "multicast_group_entry"
              and ent.packet_replication_engine_entry.multicast_group_entry.multicast_group_id in multicast_groups):
            state.multicast_groups.append(ent.packet_replication_engine_entry.multicast_group_entry)
    return state


def default_tables(state: SwitchState) -> set[int]:
    """Tables whose default action `state` sets."""
    return {e.table_id for e in state.table_entries if e.is_default_action}


def read_managed(conn: SwitchConnection, state: SwitchState) -> SwitchState:
    """What the switch holds in the tables, profiles and defaults `state` manages."""
    return read_state(conn, state.managed_tables, state.managed_profiles, default_tables(state),
                      state.managed_clone_sessions, state.managed_multicast_groups)


def reconcile(conn: SwitchConnection, desired: SwitchState, dry_run: bool = False,
              existing: SwitchState | None = None) -> SyncReport:
    """Write the difference; `existing` is a read_managed() result the caller
    already has for the same managed sets (saves reading the switch again)."""
    if existing is None:
        existing = read_managed(conn, desired)
    tables = _diff(desired.table_entries, existing.table_entries, table_key, table_value)
    # A default action always exists: "insert" means modify, and it is never deleted.
    tables.modify += [e for e in tables.insert if e.is_default_action]
    tables.insert = [e for e in tables.insert if not e.is_default_action]
    tables.delete = [e for e in tables.delete if not e.is_default_action]
    members = _diff(desired.members, existing.members, member_key, member_value)
    groups = _diff(desired.groups, existing.groups, group_key, group_value)
    sessions = _diff(desired.clone_sessions, existing.clone_sessions, clone_session_key, clone_session_value)
    mcast = _diff(desired.multicast_groups, existing.multicast_groups, multicast_group_key, multicast_group_value)

    # Order matters: a member exists before a group lists it, a group before
    # an entry points at it; deletions go the other way.
    def pre(kind, **entry):
        return update(kind, packet_replication_engine_entry=p4runtime_pb2.PacketReplicationEngineEntry(**entry))

    batches = [
        # Multicast groups exist before an entry can send packets to them.
        [pre(kind, multicast_group_entry=g) for kind, batch in ((INSERT, mcast.insert), (MODIFY, mcast.modify))
         for g in batch],
        [update(INSERT, action_profile_member=m) for m in members.insert]
        + [update(MODIFY, action_profile_member=m) for m in members.modify],
        [update(INSERT, action_profile_group=g) for g in groups.insert]
        + [update(MODIFY, action_profile_group=g) for g in groups.modify],
        [update(INSERT, table_entry=e) for e in tables.insert]
        + [update(MODIFY, table_entry=e) for e in tables.modify],
        [update(DELETE, table_entry=_identity(e)) for e in tables.delete],
        [update(DELETE, action_profile_group=g) for g in groups.delete],
        [update(DELETE, action_profile_member=m) for m in members.delete],
        [update(kind, packet_replication_engine_entry=p4runtime_pb2.PacketReplicationEngineEntry(
            clone_session_entry=c)) for kind, batch in ((INSERT, sessions.insert), (MODIFY, sessions.modify),
                                                        (DELETE, sessions.delete)) for c in batch],
        [pre(DELETE, multicast_group_entry=g) for g in mcast.delete],
    ]
    report = SyncReport(
        inserted=len(tables.insert) + len(members.insert) + len(groups.insert) + len(sessions.insert)
        + len(mcast.insert),
        modified=len(tables.modify) + len(members.modify) + len(groups.modify) + len(sessions.modify)
        + len(mcast.modify),
        deleted=len(tables.delete) + len(members.delete) + len(groups.delete) + len(sessions.delete)
        + len(mcast.delete))
    if not dry_run:
        for batch in batches:
            conn.write(batch)
    return report


def _identity(e: p4runtime_pb2.TableEntry) -> p4runtime_pb2.TableEntry:
    return p4runtime_pb2.TableEntry(table_id=e.table_id, match=e.match, priority=e.priority)
