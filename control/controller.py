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
from dataclasses import dataclass
from pathlib import Path

from . import aggregation, ecn, features, forwarding, load_balancing
from .p4info import EntryError, P4Info
from .switch import Pipeline, SwitchConnection, SwitchError
from .sync import SwitchState, SyncReport, read_managed, reconcile
from .topology import Topology, TopologyError, load

REPO = Path(__file__).resolve().parent.parent
DEFAULT_PIPELINE = Pipeline(REPO / "build" / "main.json", REPO / "build" / "main.p4info.txtpb")


@dataclass
class SwitchResult:
    name: str
    pipeline_pushed: bool
    report: SyncReport


class FabricController:
    def __init__(self, topo: Topology, pipeline: Pipeline = DEFAULT_PIPELINE):
        for path in (pipeline.bmv2_json, pipeline.p4info_txt):
            if not path.exists():
                raise FileNotFoundError(f"{path} not found: run `make build` first")
        self.topo = topo
        self.pipeline = pipeline
        self.p4info = P4Info(pipeline.p4info())
        self.routes = topo.routes()
        self.connections: dict[str, SwitchConnection] = {}

    def connect(self, timeout: float = 15.0) -> None:
        for sw in self.topo.switches.values():
            if sw.name not in self.connections:
                self.connections[sw.name] = SwitchConnection(sw.name, sw.grpc_addr, sw.device_id,
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
