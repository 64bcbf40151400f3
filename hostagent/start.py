"""Agents that start together.

A launcher starts several agents, each a process of its own, and their
traffic must begin together. Starting takes time: an RDMA or collectives
agent imports Scapy and more (0.35-0.9 s of CPU; the RoCEv2 agent, 0.07 s,
imports no Scapy), so a dozen agents need seconds of two cores. With
a fixed start time a few seconds ahead (`--start-at`), the first agents
ready send into a machine still busy starting the rest, and a BMv2 switch
starved of CPU in that moment loses frames before its pipeline, seen by no
counter (docs/features/lossless.md).

`--start-file F`: the agent, once set up, creates F.<pid>.ready and waits
for F, which holds the wall-clock start time; the launcher (StartGate,
below: the experiments' and hostagent/aggregation/runs.py's) writes F once
every agent is ready.
`--start-at T` is the plain form: a fixed time. `--start-after S` delays
one agent S seconds past the common start (flows that join later).
"""
from __future__ import annotations

import argparse
import os
import subprocess
import time
from pathlib import Path
from typing import Protocol, Sequence

POLL_S = 0.01
READY_TIMEOUT_S = 120.0      # an agent waits this long for the launcher's start time


def add_start_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--start-at", type=float, default=0.0, help="wall-clock start time (to start agents together)")
    p.add_argument("--start-file", help="once ready, create <file>.<pid>.ready and start at the wall-clock "
                                        "time the launcher writes to this file")
    p.add_argument("--start-after", type=float, default=0.0, metavar="S",
                   help="start S seconds after the start time (a flow that joins later)")


def ready_marker(start_file: Path, pid: int) -> Path:
    return start_file.with_name(f"{start_file.name}.{pid}.ready")


def ready_markers(start_file: Path) -> list[Path]:
    return sorted(start_file.parent.glob(f"{start_file.name}.*.ready"))


def start_time(a: argparse.Namespace) -> float:
    """The start time: --start-at's, or the one the launcher writes to
    --start-file once every agent said it is ready (this agent says so here,
    and waits for it); 0.0 with neither. Not --start-after."""
    start_at = getattr(a, "start_at", 0.0)
    start_file = getattr(a, "start_file", None)    # (callers that build their own Namespace may leave both out)
    if start_file:
        path = Path(start_file)
        ready_marker(path, os.getpid()).touch()
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not path.exists():
            if time.monotonic() > deadline:
                raise SystemExit(f"no start time in {path} after {READY_TIMEOUT_S:.0f} s: the launcher gave up")
            time.sleep(POLL_S)
        start_at = float(path.read_text())
    return start_at


def wait_for_start(a: argparse.Namespace) -> float:
    """Return at the start time: --start-at's, or the one the launcher
    writes to --start-file once every agent said it is ready (plus
    --start-after). Return how late the agent was for it (s; 0 on time or
    with no start time)."""
    start_at = start_time(a)
    if not start_at:
        return 0.0
    start_at += getattr(a, "start_after", 0.0)
    late_s = time.time() - start_at
    time.sleep(max(0.0, -late_s))
    return max(0.0, late_s)


class Process(Protocol):
    """What a launcher follows of an agent: a subprocess.Popen, or a rank
    forked from a process that imported its program
    (hostagent/collectives/ranks.py)."""

    @property
    def pid(self) -> int: ...

    @property
    def returncode(self) -> int | None: ...

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int: ...

    def terminate(self) -> None: ...

    def kill(self) -> None: ...


class StartGate:
    """The launcher's side: starts a case's agents together once every one
    of them is ready. Give each agent its args() (--start-file), then open()
    it with the agents started. A fixed start a few seconds ahead is not
    enough on two cores: eleven agents take more than 4 s to import, and
    the first ones would send into a machine still starting the rest."""

    def __init__(self, directory: Path, lead_s: float = 0.5, timeout_s: float = 60.0):
        self.path, self.lead_s, self.timeout_s = directory / "start", lead_s, timeout_s
        for stale in (self.path, *ready_markers(self.path)):
            stale.unlink(missing_ok=True)

    def args(self) -> list[str]:
        return ["--start-file", str(self.path)]

    def open(self, procs: Sequence[Process]) -> float:
        """Wait until each of `procs` is ready, then give them a start time
        lead_s ahead; return it. When one exits first or they are not ready
        in time, the others are stopped before the error is raised: no agent
        waits on for a start (and a network torn down under it)."""
        deadline = time.monotonic() + self.timeout_s
        while (ready := len(ready_markers(self.path))) < len(procs):
            failure = None
            if any(p.poll() is not None for p in procs):
                failure = (f"an agent exited before the start (exit codes "
                           f"{[p.poll() for p in procs]}; {ready} of {len(procs)} ready)")
            elif time.monotonic() > deadline:
                failure = f"{ready} of {len(procs)} agents ready after {self.timeout_s:.0f} s"
            if failure is not None:
                stop_all(procs)
                raise RuntimeError(failure)
            time.sleep(0.02)
        start_at = time.time() + self.lead_s
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(repr(start_at))
        os.replace(tmp, self.path)          # the agents never read half a time
        for marker in ready_markers(self.path):     # read once: not left among the case's results
            marker.unlink(missing_ok=True)
        return start_at


def stop_all(procs: Sequence[Process], timeout_s: float = 15.0) -> None:
    """Terminate every one of `procs` still running and reap them (killed if
    SIGTERM was not enough within timeout_s)."""
    for p in procs:
        if p.poll() is None:
            p.terminate()
    for p in procs:
        try:
            p.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
