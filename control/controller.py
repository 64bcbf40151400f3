"""The multi-switch P4Runtime controller.

For every switch of a topology: connect (arbitration as primary), push the
pipeline if the switch does not already run it, then reconcile the
forwarding state computed from the topology. All entries of all switches are
built and validated against the P4Info before anything is written, so a bad
entry fails the run with nothing half-applied.

    fabric program --topology leaf-spine

programs a network that `fabric run --no-cli` (or another launcher) has
brought up; running it twice writes nothing the second time. Features are
programmed through the contract in control/feature.py, from the features the
topology was loaded with; runtime changes go through controller.feature(name).
"""
from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence, TypeVar

from control import forwarding
from control.p4info import EntryError, P4Info
from control.switch import CONTROLLER_CREDENTIALS, CONTROLLER_ELECTION_ID, ElectionId, Pipeline, SwitchConnection, SwitchError
from control.tls import ClientCredentials
from control.sync import SwitchState, SyncReport, read_managed, reconcile
from control.topology import Failures, Topology

T = TypeVar("T")
R = TypeVar("R")

REPO = Path(__file__).resolve().parent.parent
DEFAULT_PIPELINE = Pipeline(REPO / "build" / "main.json", REPO / "build" / "main.p4info.txtpb")


@dataclass
class SwitchResult:
    name: str
    pipeline_pushed: bool
    report: SyncReport


def each_switch(work: Callable[[T], R], items: Sequence[T], workers: int = 8) -> list[R | BaseException]:
    """work(item) for every item on a few threads (gRPC calls that wait on
    a switch), in order: each its result, or the exception it raised. Every
    call runs to its end whatever the others did."""
    def attempt(item: T) -> R | BaseException:
        try:
            return work(item)
        except Exception as exc:        # handed back: the caller keeps what succeeded
            return exc
    if len(items) <= 1:
        return [attempt(item) for item in items]
    with ThreadPoolExecutor(max_workers=min(workers, len(items)), thread_name_prefix="switch") as pool:
        return list(pool.map(attempt, items))


def first_error(results: Sequence[R | BaseException]) -> list[R]:
    """The results, or the first exception among them raised."""
    for r in results:
        if isinstance(r, BaseException):
            raise r
    return list(results)        # type: ignore[arg-type]


class FabricController:
    """election_id: this controller's P4Runtime election id (high, low). Of
    the controllers connected to a switch the highest is primary and alone
    may write; a backup (lower id) takes over when the primary goes
    (wait_until_primary, then program: it writes only what is missing).
    credentials: the client certificate it presents to every switch (mutual
    TLS, control/tls.py); None for switches that run plain gRPC."""

    def __init__(self, topo: Topology, pipeline: Pipeline = DEFAULT_PIPELINE,
                 election_id: ElectionId = CONTROLLER_ELECTION_ID,
                 credentials: ClientCredentials | None = CONTROLLER_CREDENTIALS):
        for path in (pipeline.bmv2_json, pipeline.p4info_txt):
            if not path.exists():
                raise FileNotFoundError(f"{path} not found: run `make build` first")
        self.topo = topo
        self.pipeline = pipeline
        self.p4info = P4Info(pipeline.p4info())
        self.routes = topo.routes()
        self.connections: dict[str, SwitchConnection] = {}
        self.election_id = election_id
        self.credentials = credentials
        self.failed = Failures()              # what routes currently avoid (reroute)

    def connect(self, timeout: float = 15.0) -> None:
        """Connect to every switch not connected yet, all at once (each waits
        on its channel and its arbitration: 0.23 s a switch, one after the
        other 4.6 s for fat-tree-k4). What connected is kept when one fails."""
        todo = [sw for sw in self.topo.switches.values() if sw.name not in self.connections]
        results = each_switch(lambda sw: self._connection(sw, timeout), todo)
        self.connections.update((sw.name, c) for sw, c in zip(todo, results) if isinstance(c, SwitchConnection))
        first_error(results)

    def _connection(self, sw, timeout: float) -> SwitchConnection:
        return SwitchConnection(sw.name, sw.grpc_addr, sw.device_id, election_id=self.election_id,
                                connect_timeout=timeout, credentials=self.credentials)

    def close(self) -> None:
        for conn in self.connections.values():
            conn.close()
        self.connections.clear()

    def __enter__(self) -> "FabricController":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def desired_state(self, name: str, current: SwitchState | None = None) -> SwitchState:
        """Everything switch `name` should hold: forwarding, then every
        feature's entries (the features the topology was loaded with,
        control/feature.py)."""
        slots = forwarding.slots_on_switch(self.p4info, current) if current else None
        seed = forwarding.ecmp_seed(self.topo.switches[name].device_id)
        state = forwarding.forwarding_state(self.p4info, self.routes[name], slots, seed=seed)
        routing = SwitchState(table_entries=list(state.table_entries))
        for feature in self.topo.known_features:
            state.merge(feature.switch_state(self.p4info, self.topo, name, forwarding=routing))
        return state

    def feature(self, name: str) -> Any:
        """The runtime handle of feature `name` (its runtime hook, control/feature.py):
        e.g. controller.feature("load_balancing").set_mode("leaf1", mode)."""
        for f in self.topo.known_features:
            if f.name == name:
                handle = f.runtime(self)
                if handle is None:
                    raise EntryError(f"feature {name} has no runtime changes")
                return handle
        raise EntryError(f"no feature {name!r} (features: {', '.join(f.name for f in self.topo.known_features)})")

    def program(self, dry_run: bool = False) -> list[SwitchResult]:
        self.connect()
        # Build and validate every switch's state before writing anything, the
        # pipeline included: a bad entry leaves every switch as it was.
        skeletons = {name: self.desired_state(name) for name in self.connections}
        names = list(self.connections)
        # at once: BMv2 loads a pipeline in its own process (0.39 s a switch, one after the other)
        pushed = dict(zip(names, [False] * len(names) if dry_run else first_error(
            each_switch(lambda name: self.connections[name].push_pipeline(self.pipeline), names))))
        # each switch read and written on its own thread: one switch's writes wait on its BMv2 process while
        # the next one's entries are compared
        reports = first_error(each_switch(lambda name: self._sync(name, skeletons[name], dry_run), names))
        return [SwitchResult(name, pushed[name], report) for name, report in zip(names, reports)]

    def primary_of(self) -> dict[str, bool]:
        """Switch -> whether this controller is its primary now."""
        self.connect()
        return {name: conn.is_primary() for name, conn in self.connections.items()}

    def primacy(self) -> dict[str, tuple[bool, ElectionId | None]]:
        """Switch -> (this controller is primary, the primary's election id as the
        switch last announced it), of the switches connected; no new connection."""
        return {name: (conn.is_primary(), conn.primary_election_id) for name, conn in self.connections.items()}

    def wait_until_primary(self, timeout: float = 30.0, poll: float = 0.1) -> float:
        """Block until this controller is primary on every switch (a backup
        after the primary left); returns the seconds it took."""
        start = time.monotonic()
        while not all(self.primary_of().values()):
            if time.monotonic() - start > timeout:
                backup = sorted(n for n, p in self.primary_of().items() if not p)
                raise SwitchError(f"still a backup controller of {', '.join(backup)} after {timeout:.0f} s")
            time.sleep(poll)
        return time.monotonic() - start

    def reroute(self, failed: Failures) -> dict[str, SyncReport]:
        """Routes that avoid `failed` links and switches on every switch that
        answers (Failures() restores the topology's own). ECMP groups keep
        their slots where they can (resilient), so only the flows of what
        failed move."""
        for s in failed.switches:
            if s not in self.topo.switches:
                raise EntryError(f"no switch {s!r}")
        for link in failed.links:
            a, b = sorted(link)
            if a not in self.topo.switches or not any(p.peer == b for p in self.topo.switches[a].ports.values()):
                raise EntryError(f"no link {a}-{b}")
        self.failed = failed
        self.routes = self.topo.routes(failed if failed else None)
        self.connect_what_answers(skip=failed.switches)
        return {name: self._sync(name, self.desired_state(name))
                for name in sorted(self.connections) if name not in failed.switches}

    def connect_what_answers(self, timeout: float = 3.0, skip=frozenset()) -> list[str]:
        """Connect to every switch that answers (but those in `skip`); the
        names of those that do not."""
        silent = []
        for sw in self.topo.switches.values():
            if sw.name in self.connections or sw.name in skip:
                continue
            try:
                self.connections[sw.name] = self._connection(sw, timeout)
            except SwitchError:
                silent.append(sw.name)
        return silent

    def recover_switch(self, name: str, timeout: float = 15.0) -> SwitchResult:
        """A switch came back empty (restarted): reconnect, push the pipeline,
        write its whole state in one reconciliation."""
        old = self.connections.pop(name, None)
        if old is not None:
            try:
                old.close()
            except Exception:        # the old stream died with the old process
                pass
        sw = self.topo.switches[name]
        conn = self.connections[name] = self._connection(sw, timeout)
        pushed = conn.push_pipeline(self.pipeline)
        return SwitchResult(name, pushed, self._sync(name, self.desired_state(name)))

    def program_switch(self, name: str) -> SyncReport:
        """Reconcile one switch (pipeline assumed in place), e.g. after a runtime change."""
        self.connect()
        return self._sync(name, self.desired_state(name))

    def program_tables(self, name: str, tables: Iterable[str]) -> SyncReport:
        """Reconcile only these tables of one switch (their entries, not
        their default actions): a runtime change that leaves everything
        else as the switch holds it, drift included (a feature raising
        telemetry must not also put back a route someone deleted)."""
        self.connect()
        ids = {self.p4info.table(t).preamble.id for t in tables}
        desired = self.desired_state(name)
        only = SwitchState(table_entries=[e for e in desired.table_entries
                                          if e.table_id in ids and not e.is_default_action],
                           managed_tables=ids)
        return reconcile(self.connections[name], only)

    def _sync(self, name: str, skeleton: SwitchState, dry_run: bool = False) -> SyncReport:
        """Read the switch once; plan with what it holds (ECMP slots stay put); write the difference."""
        conn = self.connections[name]
        current = read_managed(conn, skeleton)
        # Planned again only where the switch holds ECMP slots to keep: without any (a switch programmed
        # for the first time) the plan is the skeleton itself (torus-4x4: 0.8 s of CPU a programming)
        desired = self.desired_state(name, current) if forwarding.slots_on_switch(self.p4info, current) else skeleton
        return reconcile(conn, desired, dry_run, existing=current)

    def program_all(self) -> dict[str, SyncReport]:
        """Reconcile every switch (pipelines assumed in place), e.g. after a
        runtime change that touches several."""
        self.connect()
        return {name: self._sync(name, self.desired_state(name)) for name in self.topo.switches}

    def counter(self, switch: str, counter: str, index: int | None = None) -> dict[int, tuple[int, int]]:
        self.connect()
        return self.connections[switch].counter(self.p4info.counter_entry(counter, index))

    def counter_cells(self, switch: str, counter: str, indexes: Iterable[int]) -> dict[int, tuple[int, int]]:
        """Cells `indexes` of `counter` on `switch`, in one read. A whole
        counter is read cell by cell: on fat-tree-k4, trim_counter's 4096
        cells took 0.19 s a switch, four of them 1.5 ms. No index: no read, {}."""
        entries = [self.p4info.counter_entry(counter, i) for i in indexes]
        if not entries:
            return {}
        self.connect()
        return self.connections[switch].counter(*entries)
