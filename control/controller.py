"""The multi-switch P4Runtime controller.

For every switch of a topology: connect (arbitration as primary), push the
pipeline if the switch does not already run it, then reconcile the
forwarding state computed from the topology. All entries of all switches are
built and validated against the P4Info before anything is written, so a bad
entry fails the run with nothing half-applied.

    python -m control.controller --topology topologies/leaf-spine.yaml

programs a network that `python -m control.run --no-cli` (or another
launcher) has brought up; running it twice writes nothing the second time.
"""
from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from . import aggregation, ecn, features, forwarding, load_balancing
from .p4info import EntryError, P4Info
from .switch import Pipeline, SwitchConnection, SwitchError
from .sync import SwitchState, SyncReport, read_managed, reconcile
from .topology import Failures, Topology, TopologyError, load

REPO = Path(__file__).resolve().parent.parent
DEFAULT_PIPELINE = Pipeline(REPO / "build" / "main.json", REPO / "build" / "main.p4info.txtpb")


@dataclass
class SwitchResult:
    name: str
    pipeline_pushed: bool
    report: SyncReport


class FabricController:
    """election_id: this controller's P4Runtime election id (high, low). Of
    the controllers connected to a switch the highest is primary and alone
    may write; a backup (lower id) takes over when the primary goes
    (wait_until_primary, then program: it writes only what is missing)."""

    def __init__(self, topo: Topology, pipeline: Pipeline = DEFAULT_PIPELINE,
                 election_id: tuple[int, int] = (0, 1)):
        for path in (pipeline.bmv2_json, pipeline.p4info_txt):
            if not path.exists():
                raise FileNotFoundError(f"{path} not found: run `make build` first")
        self.topo = topo
        self.pipeline = pipeline
        self.p4info = P4Info(pipeline.p4info())
        self.routes = topo.routes()
        self.connections: dict[str, SwitchConnection] = {}
        self.election_id = election_id
        self.failed = Failures()              # what routes currently avoid (reroute)

    def connect(self, timeout: float = 15.0) -> None:
        for sw in self.topo.switches.values():
            if sw.name not in self.connections:
                self.connections[sw.name] = SwitchConnection(sw.name, sw.grpc_addr, sw.device_id,
                                                             election_id=self.election_id,
                                                             connect_timeout=timeout)

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
        feature's entries (control/features.py)."""
        slots = forwarding.slots_on_switch(self.p4info, current) if current else None
        seed = forwarding.ecmp_seed(self.topo.switches[name].device_id)
        state = forwarding.forwarding_state(self.p4info, self.routes[name], slots, seed=seed)
        routing = SwitchState(table_entries=list(state.table_entries))
        for feature in features.features():
            state.merge(feature.switch_state(self.p4info, self.topo, name, forwarding=routing))
        return state

    def set_load_balancing(self, switch: str, mode: "load_balancing.LbMode", prefix: str | None = None) -> SyncReport:
        """Change at runtime the load-balancing mode of every ECMP group of
        `switch`, or (with `prefix`) of the group that prefix routes to."""
        if switch not in self.topo.switches:
            raise EntryError(f"no switch {switch!r}")
        modes = self.topo.features.setdefault(load_balancing.SECTION, {}).setdefault(
            switch, load_balancing.SwitchModes())
        if prefix is None:
            modes.default = mode
            modes.prefixes.clear()
        else:
            problem = load_balancing.check_prefix(self.topo, switch, prefix, mode, modes.prefixes)
            if problem:
                raise EntryError(problem)
            modes.prefixes[prefix] = mode
        return self.program_switch(switch)

    def program(self, dry_run: bool = False) -> list[SwitchResult]:
        self.connect()
        # Build and validate every switch's state before writing anything, the
        # pipeline included: a bad entry leaves every switch as it was.
        skeletons = {name: self.desired_state(name) for name in self.connections}
        pushed = {name: False if dry_run else conn.push_pipeline(self.pipeline)
                  for name, conn in self.connections.items()}
        return [SwitchResult(name, pushed[name], self._sync(name, skeletons[name], dry_run))
                for name in self.connections]

    def primary_of(self) -> dict[str, bool]:
        """Switch -> whether this controller is its primary now."""
        self.connect()
        return {name: conn.is_primary() for name, conn in self.connections.items()}

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
                self.connections[sw.name] = SwitchConnection(sw.name, sw.grpc_addr, sw.device_id,
                                                             election_id=self.election_id, connect_timeout=timeout)
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
        conn = self.connections[name] = SwitchConnection(name, sw.grpc_addr, sw.device_id,
                                                         election_id=self.election_id, connect_timeout=timeout)
        pushed = conn.push_pipeline(self.pipeline)
        return SwitchResult(name, pushed, self._sync(name, self.desired_state(name)))

    def program_switch(self, name: str) -> SyncReport:
        """Reconcile one switch (pipeline assumed in place), e.g. after a runtime change."""
        self.connect()
        return self._sync(name, self.desired_state(name))

    def _sync(self, name: str, skeleton: SwitchState, dry_run: bool = False) -> SyncReport:
        """Read the switch once; plan with what it holds (ECMP slots stay put); write the difference."""
        conn = self.connections[name]
        current = read_managed(conn, skeleton)
        return reconcile(conn, self.desired_state(name, current), dry_run, existing=current)

    def set_aggregation_jobs(self, jobs: "list[aggregation.Job]", *, shared_slots: int | None = None,
                             steal_after_ms: int | None = None) -> dict[str, SyncReport]:
        """Replace the aggregation jobs at runtime (add, change, remove a job):
        validated as the topology file's section is, slots placed again, and
        every switch reconciled (only the servers' switches hold entries).
        Nothing is written when the jobs are invalid."""
        old = self.topo.features.get(aggregation.SECTION) or aggregation.AggregationConfig()
        raw = {"shared_slots": old.shared_slots if shared_slots is None else shared_slots,
               "steal_after_ms": old.steal_after_ms if steal_after_ms is None else steal_after_ms,
               "jobs": [{"job": j.job, "workers": list(j.workers), "server": j.server,
                         **({"shared": True} if j.shared else {"slots": j.slots})} for j in jobs]}

        def fail(where: str, what: str):
            raise EntryError(f"{where}: {what}")

        cfg = aggregation.parse_section(raw, self.topo, fail)
        self.topo.features[aggregation.SECTION] = cfg
        self.connect()
        return {name: self._sync(name, self.desired_state(name)) for name in self.topo.switches}

    def set_ecn_profile(self, switch: str, port: int, profile: "ecn.EcnProfile | None") -> SyncReport:
        """Change (or remove, with None) the ECN profile of one egress port at runtime."""
        if port not in self.topo.switches[switch].ports:
            raise EntryError(f"{switch} has no port {port}")
        profiles = self.topo.features.setdefault(ecn.SECTION, {})
        if profile is None:
            profiles.pop((switch, port), None)
        else:
            profiles[(switch, port)] = profile
        return self.program_switch(switch)

    def counter(self, switch: str, counter: str, index: int | None = None) -> dict[int, tuple[int, int]]:
        self.connect()
        return self.connections[switch].counter(self.p4info.counter_entry(counter, index))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--topology", "-t", required=True, help="topology YAML (see topologies/README.md)")
    ap.add_argument("--dry-run", action="store_true", help="compute and show the writes, change nothing")
    args = ap.parse_args(argv)
    try:
        topo = load(args.topology)
        with FabricController(topo) as ctl:
            for r in ctl.program(dry_run=args.dry_run):
                pushed = "pipeline pushed, " if r.pipeline_pushed else ""
                print(f"{r.name:10s} {pushed}{r.report}")
    except (TopologyError, EntryError, SwitchError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
