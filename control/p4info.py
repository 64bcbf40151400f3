"""P4Info lookups and validated construction of P4Runtime entities.

Everything is checked against the P4Info before a message is built: names of
tables, fields, actions and parameters, match kinds, and that each value fits
its bit width. A bad entry raises EntryError naming what is wrong, so a
caller can validate a whole batch before writing any of it.
"""
from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Union

from google.protobuf import text_format
from p4.config.v1 import p4info_pb2
from p4.v1 import p4runtime_pb2

MatchValue = Union[int, str, bytes, tuple, list]

_MATCH_KIND = {
    p4info_pb2.MatchField.EXACT: "exact",
    p4info_pb2.MatchField.LPM: "lpm",
    p4info_pb2.MatchField.TERNARY: "ternary",
    p4info_pb2.MatchField.RANGE: "range",
    p4info_pb2.MatchField.OPTIONAL: "optional",
}


class EntryError(ValueError):
    """An entity does not agree with the P4Info; nothing was written."""


def encode(value: Any, bitwidth: int, what: str) -> bytes:
    """Encode an int, IPv4 string, MAC string or bytes as a P4Runtime
    canonical bytestring (no leading zero bytes), checking it fits."""
    number = to_int(value, what)
    if number < 0 or number.bit_length() > bitwidth:
        raise EntryError(f"{what}: value {value!r} does not fit in {bitwidth} bits")
    return number.to_bytes(max(1, (number.bit_length() + 7) // 8), "big")


def to_int(value: Any, what: str) -> int:
    if isinstance(value, bool):
        raise EntryError(f"{what}: expected a number, address or bytes, got {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, bytes):
        return int.from_bytes(value, "big")
    if isinstance(value, str):
        text = value.strip()
        try:
            if text.count(":") == 5:
                return int(text.replace(":", ""), 16)
            if text.count(".") == 3:
                return int(ipaddress.IPv4Address(text))
            return int(text, 0)
        except ValueError:
            pass
    raise EntryError(f"{what}: cannot read {value!r} as a number, IPv4 address or MAC address")


@dataclass(frozen=True)
class Named:
    id: int
    name: str


@dataclass(frozen=True)
class _TableShape:
    """A table as building its entries reads it: match fields by name and,
    in order, with their kinds; whether it needs a priority; the scope of
    each action it lists."""
    fields: dict[str, Any]
    kinds: tuple[tuple[Any, str], ...]
    needs_priority: bool
    refs: dict[int, int]


@dataclass(frozen=True)
class _ActionShape:
    """An action as building a call reads it: its parameters (name, id, bit width) in order."""
    id: int
    name: str
    declared: tuple[str, ...]
    params: tuple[tuple[str, int, int], ...]


class P4Info:
    """Name -> object lookups over one P4Info, accepting a full name
    ("FabricIngress.forwarding.ipv4_lpm") or any unique dotted suffix
    ("forwarding.ipv4_lpm", "ipv4_lpm")."""

    def __init__(self, info: p4info_pb2.P4Info):
        self.proto = info
        self._by_kind: dict[str, dict[str, Any]] = {}
        for kind in ("tables", "actions", "action_profiles", "counters", "direct_counters",
                     "meters", "registers", "digests"):
            index: dict[str, Any] = {}
            for obj in getattr(info, kind):
                parts = obj.preamble.name.split(".")
                for i in range(len(parts)):
                    suffix = ".".join(parts[i:])
                    index.setdefault(suffix, []).append(obj)
                if obj.preamble.alias:
                    index.setdefault(obj.preamble.alias, []).append(obj)
            self._by_kind[kind] = index
        self._by_id = {obj.preamble.id: obj for kind in self._by_kind.values()
                       for objs in kind.values() for obj in objs}
        # What building an entity looks up, read from the P4Info once (pure-Python protobuf: reading a
        # table's fields and action refs again for each of torus-4x4's 3,216 entries was a third of its plan)
        self._resolved: dict[tuple[str, str], Any] = {}
        self._tables: dict[int, _TableShape] = {}
        self._actions: dict[int, _ActionShape] = {}

    @classmethod
    def from_file(cls, path: str | Path) -> "P4Info":
        info = p4info_pb2.P4Info()
        text_format.Parse(Path(path).read_text(), info)
        return cls(info)

    def get(self, kind: str, name: str):
        found = self._resolved.get((kind, name))
        if found is not None:
            return found
        matches = {o.preamble.id: o for o in self._by_kind[kind].get(name, [])}
        singular = kind.rstrip("s").replace("_", " ")
        if not matches:
            known = sorted({o.preamble.name for objs in self._by_kind[kind].values() for o in objs})
            raise EntryError(f"unknown {singular} {name!r} (known: {', '.join(known) or 'none'})")
        if len(matches) > 1:
            names = sorted(o.preamble.name for o in matches.values())
            raise EntryError(f"{singular} name {name!r} is ambiguous: {', '.join(names)}")
        found = self._resolved[(kind, name)] = next(iter(matches.values()))
        return found

    def by_id(self, object_id: int):
        return self._by_id[object_id]

    def table(self, name: str) -> p4info_pb2.Table:
        return self.get("tables", name)

    def action(self, name: str) -> p4info_pb2.Action:
        return self.get("actions", name)

    def counter(self, name: str) -> p4info_pb2.Counter:
        return self.get("counters", name)

    # ----------------------------------------------------------------------
    # Entity builders

    def action_call(self, action_name: str, params: Mapping[str, Any] | None,
                    table: p4info_pb2.Table | None = None, default: bool = False) -> p4runtime_pb2.Action:
        """An action with its parameters; with `table`, one the table accepts
        for an entry (or, with `default`, as its default action)."""
        msg = p4runtime_pb2.Action()
        self._fill_action(msg, action_name, params, table, default)
        return msg

    def _fill_action(self, msg: p4runtime_pb2.Action, action_name: str, params: Mapping[str, Any] | None,
                     table: p4info_pb2.Table | None, default: bool = False) -> None:
        """action_call, written into `msg` (an entry's own action: no copy)."""
        action = self.action(action_name)
        shape = self._action_shape(action)
        where = shape.name
        if table is not None:
            refs = self._table_shape(table).refs
            scope = p4info_pb2.ActionRef.TABLE_ONLY if default else p4info_pb2.ActionRef.DEFAULT_ONLY  # forbidden here
            if shape.id not in refs or refs[shape.id] == scope:
                usable = [r for r in table.action_refs if r.scope != scope]
                allowed = ", ".join(self.by_id(r.id).preamble.name for r in usable)
                what = "a default action" if default else "an entry's action"
                raise EntryError(f"table {table.preamble.name}: action {where!r} is not allowed as {what} "
                                 f"(allowed: {allowed})")
        params = dict(params or {})
        msg.action_id = shape.id
        unknown = sorted(set(params) - set(shape.declared))
        if unknown:
            raise EntryError(f"action {where}: unknown parameter {unknown[0]!r} "
                             f"(parameters: {', '.join(shape.declared) or 'none'})")
        for name, param_id, bitwidth in shape.params:
            if name not in params:
                raise EntryError(f"action {where}: missing parameter {name!r}")
            msg.params.add(param_id=param_id, value=encode(params[name], bitwidth, f"action {where} parameter {name}"))

    def _table_shape(self, table: p4info_pb2.Table) -> "_TableShape":
        shape = self._tables.get(table.preamble.id)
        if shape is None:
            kinds = tuple((f, _MATCH_KIND.get(f.match_type, "other")) for f in table.match_fields)
            shape = self._tables[table.preamble.id] = _TableShape(
                fields={f.name: f for f in table.match_fields}, kinds=kinds,
                needs_priority=any(kind in ("ternary", "range", "optional") for _f, kind in kinds),
                refs={r.id: r.scope for r in table.action_refs})
        return shape

    def _action_shape(self, action: p4info_pb2.Action) -> "_ActionShape":
        shape = self._actions.get(action.preamble.id)
        if shape is None:
            shape = self._actions[action.preamble.id] = _ActionShape(
                id=action.preamble.id, name=action.preamble.name, declared=tuple(p.name for p in action.params),
                params=tuple((p.name, p.id, p.bitwidth) for p in action.params))
        return shape

    def table_entry(self, table_name: str, match: Mapping[str, MatchValue] | None = None, *,
                    action: str | None = None, params: Mapping[str, Any] | None = None,
                    member_id: int | None = None, group_id: int | None = None,
                    priority: int | None = None) -> p4runtime_pb2.TableEntry:
        table = self.table(table_name)
        shape = self._table_shape(table)
        tname = table.preamble.name
        entry = p4runtime_pb2.TableEntry(table_id=table.preamble.id)
        fields = shape.fields
        match = dict(match or {})
        unknown = sorted(set(match) - set(fields))
        if unknown:
            raise EntryError(f"table {tname}: unknown match field {unknown[0]!r} (fields: {', '.join(fields)})")
        needs_priority = shape.needs_priority
        for f, kind in shape.kinds:
            if f.name not in match:
                if kind == "exact":
                    raise EntryError(f"table {tname}: missing exact match field {f.name!r}")
                continue  # wildcard
            fm = self._field_match(tname, f, kind, match[f.name])
            if fm is not None:
                entry.match.append(fm)
        if needs_priority:
            if priority is None or not 0 < priority < 2**31:
                raise EntryError(f"table {tname}: needs a priority in 1..2^31-1, got {priority!r}")
            entry.priority = priority
        elif priority is not None:
            raise EntryError(f"table {tname}: takes no priority (exact/LPM keys only)")

        chosen = [x for x in (action, member_id, group_id) if x is not None]
        if len(chosen) != 1:
            raise EntryError(f"table {tname}: give exactly one of action, member_id, group_id")
        if table.implementation_id:
            if action is not None:
                raise EntryError(f"table {tname}: is indirect (action profile); give member_id or group_id, not an action")
            if member_id is not None:
                entry.action.action_profile_member_id = member_id
            else:
                entry.action.action_profile_group_id = group_id
        else:
            if action is None:
                raise EntryError(f"table {tname}: is direct; give an action, not a member/group id")
            self._fill_action(entry.action.action, action, params, table)
        return entry

    def default_entry(self, table_name: str, action: str,
                      params: Mapping[str, Any] | None = None) -> p4runtime_pb2.TableEntry:
        """The default action of a (direct) table, e.g. a keyless config table."""
        table = self.table(table_name)
        if table.implementation_id:
            raise EntryError(f"table {table.preamble.name}: an indirect table has no settable default action on BMv2")
        if table.const_default_action_id:
            raise EntryError(f"table {table.preamble.name}: its default action is const")
        entry = p4runtime_pb2.TableEntry(table_id=table.preamble.id, is_default_action=True)
        self._fill_action(entry.action.action, action, params, table, default=True)
        return entry

    def _field_match(self, tname: str, f, kind: str, value: MatchValue):
        what = f"table {tname} field {f.name}"
        fm = p4runtime_pb2.FieldMatch(field_id=f.id)
        full = (1 << f.bitwidth) - 1
        if kind == "exact":
            fm.exact.value = encode(value, f.bitwidth, what)
        elif kind == "lpm":
            if isinstance(value, str) and "/" in value:
                addr, _, plen_text = value.partition("/")
                try:
                    plen = int(plen_text)
                except ValueError:
                    raise EntryError(f"{what}: bad prefix length in {value!r}") from None
            elif isinstance(value, (tuple, list)) and len(value) == 2:
                addr, plen = value
            else:
                raise EntryError(f"{what}: LPM value must be 'addr/len' or (value, len), got {value!r}")
            if not 0 <= plen <= f.bitwidth:
                raise EntryError(f"{what}: prefix length {plen} outside 0..{f.bitwidth}")
            number = to_int(addr, what)
            mask = full ^ ((1 << (f.bitwidth - plen)) - 1)
            if number & ~mask & full:
                raise EntryError(f"{what}: {value!r} has bits set beyond the /{plen} prefix")
            if plen == 0:
                return None  # a /0 is a wildcard: omitted, as P4Runtime requires
            fm.lpm.value = encode(number, f.bitwidth, what)
            fm.lpm.prefix_len = plen
        elif kind == "ternary":
            if not (isinstance(value, (tuple, list)) and len(value) == 2):
                raise EntryError(f"{what}: ternary value must be (value, mask), got {value!r}")
            number, mask = to_int(value[0], what), to_int(value[1], what)
            if number & ~mask:
                raise EntryError(f"{what}: value {value[0]!r} has bits outside mask {value[1]!r}")
            if mask == 0:
                return None
            fm.ternary.value = encode(number, f.bitwidth, what)
            fm.ternary.mask = encode(mask, f.bitwidth, what)
        elif kind == "range":
            if not (isinstance(value, (tuple, list)) and len(value) == 2):
                raise EntryError(f"{what}: range value must be (low, high), got {value!r}")
            low, high = to_int(value[0], what), to_int(value[1], what)
            if low > high:
                raise EntryError(f"{what}: range low {low} > high {high}")
            fm.range.low = encode(low, f.bitwidth, what)
            fm.range.high = encode(high, f.bitwidth, what)
        elif kind == "optional":
            fm.optional.value = encode(value, f.bitwidth, what)
        else:
            raise EntryError(f"{what}: unsupported match kind {f.match_type}")
        return fm

    def counter_entry(self, counter_name: str, index: int | None = None) -> p4runtime_pb2.CounterEntry:
        counter = self.counter(counter_name)
        entry = p4runtime_pb2.CounterEntry(counter_id=counter.preamble.id)
        if index is not None:
            if not 0 <= index < counter.size:
                raise EntryError(f"counter {counter.preamble.name}: index {index} outside 0..{counter.size - 1}")
            entry.index.index = index
        return entry


# ----------------------------------------------------------------------
# The pipeline's interface, as the control plane uses it

def interface(info: p4info_pb2.P4Info) -> dict[str, dict[str, Any]]:
    """What the control plane relies on in a P4Info, compiler-neutral: per
    kind, each object's name with its ID and shape (match fields, actions
    and their scopes, parameters, sizes, bit widths). Fields a compiler
    may add or omit without changing the interface (annotations,
    documentation, P4Runtime 1.4's `initial_default_action`, type_info)
    are left out, so two compilers' P4Infos of one program compare equal
    and a change to the program does not."""
    names = {o.preamble.id: o.preamble.name for kind in ("actions", "action_profiles", "direct_counters",
                                                         "direct_meters", "tables")
             for o in getattr(info, kind)}

    def params(fields) -> list[tuple]:
        return [(f.id, f.name, f.bitwidth) for f in fields]

    def ident(obj) -> dict[str, Any]:
        return {"id": obj.preamble.id}

    def width(type_spec) -> str:
        return text_format.MessageToString(type_spec, as_one_line=True)

    return {
        "architecture": {info.pkg_info.arch: {}},
        "tables": {t.preamble.name: {
            **ident(t),
            "match_fields": [(f.id, f.name, f.bitwidth, _MATCH_KIND.get(f.match_type, f.match_type))
                             for f in t.match_fields],
            "actions": sorted((names.get(a.id, a.id), p4info_pb2.ActionRef.Scope.Name(a.scope))
                              for a in t.action_refs),
            "const_default_action": names.get(t.const_default_action_id, t.const_default_action_id or None),
            "implementation": names.get(t.implementation_id, t.implementation_id or None),
            "direct_resources": sorted(names.get(r, r) for r in t.direct_resource_ids),
            "size": t.size, "is_const_table": t.is_const_table,
        } for t in info.tables},
        "actions": {a.preamble.name: {**ident(a), "params": params(a.params)} for a in info.actions},
        "action_profiles": {p.preamble.name: {**ident(p), "tables": sorted(names.get(t, t) for t in p.table_ids),
                                              "with_selector": p.with_selector, "size": p.size}
                            for p in info.action_profiles},
        "counters": {c.preamble.name: {**ident(c), "unit": c.spec.unit, "size": c.size} for c in info.counters},
        "direct_counters": {c.preamble.name: {**ident(c), "unit": c.spec.unit,
                                              "table": names.get(c.direct_table_id, c.direct_table_id)}
                            for c in info.direct_counters},
        "meters": {m.preamble.name: {**ident(m), "unit": m.spec.unit, "size": m.size} for m in info.meters},
        "direct_meters": {m.preamble.name: {**ident(m), "unit": m.spec.unit,
                                            "table": names.get(m.direct_table_id, m.direct_table_id)}
                          for m in info.direct_meters},
        "registers": {r.preamble.name: {**ident(r), "size": r.size, "type": width(r.type_spec)}
                      for r in info.registers},
        "digests": {d.preamble.name: {**ident(d), "type": width(d.type_spec)} for d in info.digests},
        "controller_packet_metadata": {m.preamble.name: {**ident(m), "metadata": params(m.metadata)}
                                       for m in info.controller_packet_metadata},
        "value_sets": {v.preamble.name: {**ident(v), "size": v.size,
                                         "match": [(f.id, f.name, f.bitwidth) for f in v.match]}
                       for v in info.value_sets},
    }


def interface_changes(old: Mapping[str, Mapping[str, Any]], new: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Where two interfaces (from `interface`) differ, one line each:
    objects added, removed or changed, by kind and name."""
    lines = []
    for kind in dict.fromkeys([*old, *new]):
        before, after = old.get(kind, {}), new.get(kind, {})
        for name in sorted(set(before) | set(after)):
            if name not in after:
                lines.append(f"{kind}: {name} removed")
            elif name not in before:
                lines.append(f"{kind}: {name} added")
            elif before[name] != after[name]:
                what = ", ".join(k for k in dict.fromkeys([*before[name], *after[name]])
                                 if before[name].get(k) != after[name].get(k))
                lines.append(f"{kind}: {name} changed ({what})")
    return lines
