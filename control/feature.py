"""The feature contract: how a pipeline feature plugs into the project.

A feature (ECN marking, INT, load balancing, aggregation, failover, ...) is
a P4 control switched on at runtime through P4Runtime tables, plus one
control-plane module in `features/` that defines a `Feature`. The core
never names a feature: it is handed the features (the registry is
`features.FEATURES`) and calls them through this protocol.

Required: the feature's `name` (its stem: the same in every layer, see
`Pieces`), its topology-file `section`, a one-line `summary`, and

    parse_section(raw, topo, fail) -> config
        Validate the section (called by control.topology.load once the
        topology itself is known; `fail(field, what)` raises a
        TopologyError naming the file and the field). The result lands in
        topo.features[section].

    switch_state(p4info, topo, switch, *, forwarding) -> SwitchState
        The entries one switch must hold for the feature, from the parsed
        section (an empty state still naming the tables it manages when the
        file has none: reconciliation then removes stale entries).
        `forwarding` is the routing the controller is about to write.

    bench_states(p4info, port) -> {mode: SwitchState}
        The entries that switch the feature on for all traffic leaving
        `port`, the worst case `fabric bench` measures against "off"; one
        per mode ("" when the feature has one). Optional beside it:
        bench_frames(switch_mac, host_mac), the frames to send then, and
        bench_what, what the row measures.

Optional (FeatureSpec's defaults do nothing):

    queues(topo, switch) -> QueuePlan    BMv2 priority queues per port it needs, and
                                         per-queue rates/depths (set over Thrift at start)
    runtime(controller) -> handle        controller.feature(name): runtime changes
    background(topo, controller, lock, say) -> context managers
                                         what runs beside a network while it is up
    commands: {name: Command}            commands the fabric shell gains (a running network)
    cli: {name: CliCommand}              subcommands the `fabric` command gains
    counters: (CounterMetric, ...)       P4 counters the switch exporter publishes

A feature module declares itself as `FEATURE = FeatureSpec(...)`.
"""
from __future__ import annotations

import argparse
import contextlib
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, ContextManager, Iterable, Iterator, Mapping, NoReturn, Optional, Protocol, \
    Sequence, runtime_checkable

if TYPE_CHECKING:                       # types only: the controller is built on this module, and a host's
                                        # process that reads a topology needs no gRPC (control.sync)
    from control.p4info import P4Info
    from control.sync import SwitchState
    from control.controller import FabricController
    from control.topology import Topology

REPO = Path(__file__).resolve().parent.parent
Fail = Callable[[str, str], NoReturn]      # raises TopologyError naming the field


@dataclass(frozen=True)
class Pieces:
    """Where a feature's pieces are, relative to the repository; one stem
    names them all (tests/unit/features/test_registry.py checks they exist)."""
    p4: tuple[str, ...]
    control: str
    ptf: str
    host: Optional[str]
    experiments: tuple[str, ...]
    doc: str

    @classmethod
    def of(cls, stem: str, *, p4: Sequence[str] = (), host: bool = True, package: bool = False,
           experiments: Sequence[str] = ()) -> "Pieces":
        """The conventional places for `stem`: p4src/include/<stem>.p4 (or the
        files given, each starting with the stem), features/<stem>.py (or a
        package), ptf-tests/tests/<stem>.py, hostagent/<stem>/,
        experiments/<stem>.py (or the names given), docs/features/<stem>.md."""
        return cls(p4=tuple(f"p4src/include/{f}" for f in (p4 or (f"{stem}.p4",))),
                   control=f"features/{stem}/__init__.py" if package else f"features/{stem}.py",
                   ptf=f"ptf-tests/tests/{stem}.py",
                   host=f"hostagent/{stem}/__init__.py" if host else None,
                   experiments=tuple(f"experiments/{e}.py" for e in (experiments or (stem,))),
                   doc=f"docs/features/{stem}.md")

    def paths(self) -> list[str]:
        return [*self.p4, self.control, self.ptf, *([self.host] if self.host else []), *self.experiments, self.doc]


@dataclass(frozen=True)
class Command:
    """A command a feature adds to the fabric shell: run(shell, arg) where
    shell has .net (the Network), .ctl (the FabricController), .lock."""
    run: Callable[[Any, str], None]
    help: str


Cells = Mapping[int, tuple[int, int]]      # a counter read: index -> (packets, bytes)


@dataclass(frozen=True)
class CliCommand:
    """A `fabric NAME` subcommand a feature adds: add_arguments(parser)
    declares its options (--topology is given), run(args, topo) does it
    with the topology loaded with every feature, and returns the exit code."""
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace, "Topology"], int]


@dataclass(frozen=True)
class CounterMetric:
    """A metric the switch exporter publishes from P4 counters it reads on
    every switch (and registers, over Thrift: cells of (value, 0)). With
    label "port": counters[0]'s packets per port (labels switch, port,
    peer). Otherwise labels (switch, label), the values from
    values({counter or register: cells}). `cells`: the counters' cells worth
    reading on a switch (None: every cell; a read of a whole counter goes
    cell by cell, 0.19 s a switch for 4096)."""
    metric: str
    help: str
    counters: tuple[str, ...]
    label: str = "port"
    values: Optional[Callable[[Mapping[str, Cells]], dict[str, float]]] = None
    registers: tuple[str, ...] = ()
    cells: Optional[Callable[[Any], Iterable[int]]] = None


@dataclass(frozen=True)
class QueueSetting:
    """One BMv2 egress queue (port, priority): its rate in packets/s and its
    depth in packets; None leaves BMv2's (the link's rate; 64 packets)."""
    rate_pps: Optional[int] = None
    depth: Optional[int] = None


@dataclass(frozen=True)
class QueuePlan:
    """What a feature needs of a switch's traffic manager: `count` strict-
    priority queues per port (simple_switch's --priority-queues, fixed when the
    switch starts) and settings per (port, queue), applied over Thrift after
    the link-rate queue rates."""
    count: int = 1
    settings: Mapping[tuple[int, int], QueueSetting] = field(default_factory=dict)


def priority_queues(topo: "Topology", switch: str) -> int:
    """Priority queues per port of `switch`: the most any feature asks for (1 if none does)."""
    return max([1, *(f.queues(topo, switch).count for f in topo.known_features)])


Background = Callable[["Topology", "FabricController", threading.Lock, Callable[[str], None]],
                     list[ContextManager[Any]]]


@runtime_checkable
class Feature(Protocol):
    """What the controller, the launcher, the front door and the exporter use of a feature (read-only)."""
    @property
    def name(self) -> str: ...

    @property
    def section(self) -> str: ...

    @property
    def summary(self) -> str: ...

    @property
    def pieces(self) -> Pieces: ...

    @property
    def bench_what(self) -> str: ...                # what its bench rows measure ("": "<section> on for all traffic")

    @property
    def commands(self) -> Mapping[str, Command]: ...        # fabric shell commands

    @property
    def cli(self) -> Mapping[str, CliCommand]: ...          # `fabric` subcommands

    @property
    def counters(self) -> tuple[CounterMetric, ...]: ...    # published by the switch exporter

    def parse_section(self, raw: Any, topo: "Topology", fail: Fail) -> Any: ...

    def switch_state(self, p4info: P4Info, topo: "Topology", switch: str, *,
                     forwarding: Optional[SwitchState] = None) -> SwitchState: ...

    def bench_states(self, p4info: P4Info, port: int) -> dict[str, SwitchState]: ...

    def bench_frames(self, switch_mac: str, host_mac: str) -> Optional[list[bytes]]: ...

    def runtime(self, controller: "FabricController") -> Any: ...

    def queues(self, topo: "Topology", switch: str) -> QueuePlan: ...

    def background(self, topo: "Topology", controller: "FabricController", lock: threading.Lock,
                   say: Callable[[str], None]) -> list[ContextManager[Any]]: ...


def _no_frames(switch_mac: str, host_mac: str) -> Optional[list[bytes]]:
    return None


def _no_runtime(controller: "FabricController") -> Any:
    return None


def _no_queues(topo: "Topology", switch: str) -> QueuePlan:
    return QueuePlan()


def _nothing(topo: "Topology", controller: "FabricController", lock: threading.Lock,
             say: Callable[[str], None]) -> list[ContextManager[Any]]:
    return []


@dataclass(frozen=True)
class FeatureSpec:
    """A feature declared in one place: its module's functions, and the
    optional hooks left at their defaults (no runtime handle, nothing in the
    background, no commands, no counters, plain UDP for the bench).
    A Feature; a feature with state of its own may implement the protocol
    in a class instead."""
    name: str
    section: str
    summary: str
    pieces: Pieces
    parse_section: Callable[[Any, "Topology", Fail], Any]
    switch_state: Callable[..., SwitchState]        # (p4info, topo, switch, *, forwarding=None)
    bench_states: Callable[[P4Info, int], dict[str, SwitchState]]
    bench_what: str = ""
    bench_frames: Callable[[str, str], Optional[list[bytes]]] = _no_frames
    runtime: Callable[["FabricController"], Any] = _no_runtime
    queues: Callable[["Topology", str], QueuePlan] = _no_queues
    background: Background = _nothing
    commands: Mapping[str, Command] = field(default_factory=dict)
    cli: Mapping[str, CliCommand] = field(default_factory=dict)
    counters: tuple[CounterMetric, ...] = ()


@dataclass(frozen=True)
class _OneMode:
    bench_state: Callable[[P4Info, int], SwitchState]

    def __call__(self, p4info: P4Info, port: int) -> dict[str, SwitchState]:
        return {"": self.bench_state(p4info, port)}


def one_mode(bench_state: Callable[[P4Info, int], SwitchState]) -> Callable[[P4Info, int], dict[str, SwitchState]]:
    """bench_states of a feature with a single mode (its row is "fabric+<section>").

    A module-level callable, not a lambda: a topology carries its features and is pickled
    to the processes that run in the background (heartbeats)."""
    return _OneMode(bench_state)


@dataclass(frozen=True)
class HostSection:
    """A topology section that is no pipeline feature's: settings the hosts'
    agents are given (the congestion controls' constants), with nothing for
    the switches. Loaded as a feature's section is: in the topology file or
    an overlay, `parse_section(raw, topo, fail)` validates it (`fail` names
    the field) and its result lands in topo.features[section]."""
    section: str
    summary: str
    parse_section: Callable[[Any, "Topology", Fail], Any]


def check_sections(features: Sequence[Feature], sections: Sequence[HostSection]) -> dict[str, Any]:
    """{section name: its Feature or HostSection}, the features checked
    (check_features) and no two of either sharing a section."""
    out: dict[str, Any] = {f.section: f for f in check_features(features)}
    for s in sections:
        if not isinstance(s, HostSection):
            raise TypeError(f"{s!r} is not a HostSection (control/feature.py)")
        if s.section in out:
            raise TypeError(f"the section {s.section!r} is both a feature's and a host section's")
        out[s.section] = s
    return out


def check_features(features: Sequence[Feature]) -> tuple[Feature, ...]:
    """The features, checked to have the whole interface and distinct names and sections."""
    seen: dict[str, Feature] = {}
    for f in features:
        if not isinstance(f, Feature):
            missing = [m for m in ("name", "section", "summary", "pieces", "parse_section", "switch_state",
                                   "bench_states") if not hasattr(f, m)]
            raise TypeError(f"{f!r} is not a Feature (lacks {', '.join(missing) or 'a hook'}; see control/feature.py)")
        for key in {f.name, f.section}:
            if seen.setdefault(key, f) is not f:
                raise TypeError(f"features {seen[key].name} and {f.name} both use {key!r}")
    return tuple(features)


def check_mapping(raw: Any, where: str, fields: set[str], fail: Fail, *, what: str) -> dict:
    """A section (or an item of one) that must be a mapping of known fields:
    `fail` names the field that is wrong."""
    if not isinstance(raw, dict):
        fail(where, f"expected a mapping {what}, got {raw!r}")
    unknown = sorted(set(map(str, raw)) - fields)
    if unknown:
        fail(f"{where}.{unknown[0]}", f"unknown field (fields: {', '.join(sorted(fields))})")
    return raw


def section_items(raw: Any, section: str, fields: set[str], topo, fail: Fail, *,
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


def in_background(run: Callable[[threading.Event], None]) -> ContextManager[None]:
    """run(stop) in a daemon thread for as long as the block runs."""
    @contextlib.contextmanager
    def running() -> Iterator[None]:
        stop = threading.Event()
        thread = threading.Thread(target=run, args=(stop,), daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()
    return running()

