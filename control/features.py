"""The registry of pipeline features: how a feature plugs into the project.

A feature (ECN marking, INT, load balancing, aggregation, ...) is a P4
control in p4src/include/, switched on at runtime through P4Runtime tables,
and one control-plane module here that the rest of the project finds through
this registry instead of being wired in by hand:

    SECTION = "ecn"                    # its section in a topology file

    def parse_section(raw, topo, fail) -> Any
        Validate the section (called by control.topology.load, after the
        topology itself is known; `fail(field, what)` raises a TopologyError
        naming the file and field). The result lands in topo.features[SECTION].

    def switch_state(p4info, topo, switch, *, forwarding=None) -> SwitchState
        The entries one switch must hold for the feature, from the parsed
        section (an empty state, still naming the tables it manages, when the
        file has none: reconciliation then removes stale entries).
        FabricController.desired_state merges every feature's state;
        `forwarding` is the routing it is about to write (routes, ECMP slot
        assignments), for features that act on groups.

    def bench_state(p4info, port) -> SwitchState
        The entries that switch the feature on for all traffic leaving
        `port`, the worst case `make bench` measures against "feature off".

    BENCH_MODES = ("a", "b")  and  def bench_states(p4info, port) -> dict   (optional)
        When a feature has several modes: one state per mode name, and
        `make bench` measures each ("fabric+SECTION:mode") instead of bench_state.

Adding a feature is adding its module name to FEATURE_MODULES.
"""
from __future__ import annotations

import importlib
from functools import cache
from types import ModuleType
from typing import Any, Callable, Iterator

FEATURE_MODULES = ("control.ecn", "control.int_telemetry", "control.load_balancing", "control.aggregation",
                   "control.failover")

_REQUIRED = ("SECTION", "parse_section", "switch_state", "bench_state")


@cache
def features() -> tuple[ModuleType, ...]:
    """The feature modules, imported and checked to have the whole interface."""
    mods = []
    for name in FEATURE_MODULES:
        mod = importlib.import_module(name)
        missing = [attr for attr in _REQUIRED if not hasattr(mod, attr)]
        if missing:
            raise TypeError(f"feature module {name} lacks {', '.join(missing)} (see control/features.py)")
        mods.append(mod)
    return tuple(mods)


def sections() -> dict[str, ModuleType]:
    """Topology-file section name -> feature module."""
    return {mod.SECTION: mod for mod in features()}


def by_name(section: str) -> ModuleType:
    try:
        return sections()[section]
    except KeyError:
        raise KeyError(f"no feature {section!r} (features: {', '.join(sections())})") from None


def check_mapping(raw: Any, where: str, fields: set[str], fail: Callable[[str, str], None], *, what: str) -> dict:
    """A section (or an item of one) that must be a mapping of known fields:
    `fail` names the field that is wrong."""
    if not isinstance(raw, dict):
        fail(where, f"expected a mapping {what}, got {raw!r}")
    unknown = sorted(set(map(str, raw)) - fields)
    if unknown:
        fail(f"{where}.{unknown[0]}", f"unknown field (fields: {', '.join(sorted(fields))})")
    return raw


def section_items(raw: Any, section: str, fields: set[str], topo, fail: Callable[[str, str], None], *,
                  what: str, allow_all: bool = False) -> Iterator[tuple[str, dict, str]]:
    """The items of a feature section that is a list of per-switch mappings:
    checks the list, each item's type, its fields and its `switch` (a name,
    or "all" when `allow_all`), and yields (where, item, switch name) with
    `where` the item's location for `fail` ("ecn[2]")."""
    if not isinstance(raw, list):
        fail(section, f"expected a list of {what}")
    for i, item in enumerate(raw):
        where = f"{section}[{i}]"
        check_mapping(item, where, fields, fail, what=what)
        name = item.get("switch")
        if not (allow_all and name == "all") and name not in topo.switches:
            fail(f"{where}.switch", f"unknown switch {name!r} (switches: {', '.join(topo.switches)}"
                                    + (", or all)" if allow_all else ")"))
        yield where, item, name
