"""Helpers of the feature tests: a shipped topology with a section set, and
a SwitchState's entries as plain values."""
from __future__ import annotations

import yaml

from control.feature import REPO
from features import topology_from_dict


def shipped(name: str, section_key: str, section=None):
    """topologies/<name>.yaml, its `section_key` section replaced by `section` (None: as shipped)."""
    data = yaml.safe_load((REPO / "topologies" / f"{name}.yaml").read_text())
    if section is not None:
        data[section_key] = section
    return topology_from_dict(data, f"{name}.yaml")


def entries(p4info, state, table: str) -> list[tuple[dict, str, dict]]:
    """(match, action, params) of `state`'s entries in `table`, as plain values
    (an LPM field as (value, prefix length))."""
    t = p4info.table(table)
    fields = {f.id: f.name for f in t.match_fields}
    out = []
    for e in state.table_entries:
        if e.table_id != t.preamble.id or e.is_default_action:
            continue
        match = {}
        for m in e.match:
            if m.HasField("exact"):
                match[fields[m.field_id]] = int.from_bytes(m.exact.value, "big")
            else:
                match[fields[m.field_id]] = (int.from_bytes(m.lpm.value, "big"), m.lpm.prefix_len)
        action = p4info.by_id(e.action.action.action_id)
        names = {p.id: p.name for p in action.params}
        params = {names[p.param_id]: int.from_bytes(p.value, "big") for p in e.action.action.params}
        out.append((match, action.preamble.name.split(".")[-1], params))
    return out


def default_action(p4info, state, table: str) -> str:
    """The action `state` sets as `table`'s default (a keyless gate's on or off)."""
    t = p4info.table(table).preamble.id
    e = next(e for e in state.table_entries if e.table_id == t and e.is_default_action)
    return p4info.by_id(e.action.action.action_id).preamble.name.split(".")[-1]
