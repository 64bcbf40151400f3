"""Ranks forked from one process that imported their program once.

A DDP rank (hostagent/collectives/ddp.py) imports PyTorch, and
DistributedDataParallel's constructor then imports torch._dynamo: about 7 s
of one core each. Four ranks started as four `ip netns exec` commands spent
20-30 s importing on the 2-core machine, beside switches that needed those
cores (measured 2026-12-03: 21 s from start to the ranks' first line, 10 s
more in DDP's constructor). A collective rank (python -m
hostagent.collectives) imports the features' modules for its path model,
0.55 s of a core: 9 s for the 16 ranks of torus-4x4. Here a fork server
(multiprocessing's "forkserver") imports a program's modules once, when
`RankLauncher.warm()` is called (beside the fabric's bring-up) or at the
first rank; every rank is a fork of it that enters its host's namespace as
`ip netns exec` would (emulator.netns.enter_netns), lowers its priority,
writes its output to its log and runs the program as `python -m PROGRAM
ARGS` would (runpy). The fork server lasts as long as the process that
started it: a run of several cases imports once, and its ranks (daemonic)
end with it. A process has one: the first launcher to start it sets what
it imports (`fabric experiments` runs the collectives experiment before
`fabric train`'s: train's ranks then import PyTorch each, as before).

A RankProcess answers as subprocess.Popen does (pid, poll, wait,
terminate, returncode), so a caller follows ranks as it follows any agent.
"""
from __future__ import annotations

import multiprocessing
import os
import runpy
import subprocess
import sys
import warnings
from multiprocessing import forkserver
from pathlib import Path
from typing import Sequence

from emulator.netns import enter_netns

# what the fork server imports for fabric train's ranks: PyTorch, what DDP's constructor imports, the rank
DDP_PROGRAM = "hostagent.collectives.ddp"
DDP_PRELOAD = ("torch", "torch._dynamo", "hostagent.collectives.ddp", "hostagent.collectives.paths")
# ... and for the collectives experiment's: the rank's command line (python -m hostagent.collectives)
COLLECTIVE_PROGRAM = "hostagent.collectives"
COLLECTIVE_PRELOAD = ("hostagent.collectives.__main__",)
# set before the fork server starts (a BLAS/OpenMP pool reads it when PyTorch loads): one thread a rank, as
# the ranks' command lines had it
RANK_ENVIRONMENT = {"OMP_NUM_THREADS": "1"}


def run_rank(program: str, argv: Sequence[str], netns: str, log: str, errors: str | None, nice: int) -> None:
    """The rank, in the forked child: its output to `log` (its standard
    error to `errors` if given), into `netns`, `nice`d, then `python -m
    PROGRAM ARGV`; exits with its status."""
    out = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(out, 1)
    err = out if errors is None else os.open(errors, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(err, 2)
    for fd in {out, err}:
        os.close(fd)
    enter_netns(netns)
    os.nice(nice)
    sys.argv = [program, *argv]
    # the fork server imported PROGRAM's __main__ on purpose (its imports are the preload): runpy's warning that
    # it finds it imported would open every rank's standard error, ahead of what the rank itself says
    warnings.filterwarnings("ignore", message=r".* found in sys\.modules after import of package .*",
                            category=RuntimeWarning)
    runpy.run_module(program, run_name="__main__", alter_sys=True)


class RankProcess:
    """A forked rank, with subprocess.Popen's answers (returncode: the exit
    status, or minus the signal that ended it)."""

    def __init__(self, process: multiprocessing.process.BaseProcess):
        self._process = process

    @property
    def pid(self) -> int:
        assert self._process.pid is not None
        return self._process.pid

    @property
    def returncode(self) -> int | None:
        return self._process.exitcode

    def poll(self) -> int | None:
        return self._process.exitcode

    def wait(self, timeout: float | None = None) -> int:
        self._process.join(timeout)
        if self._process.exitcode is None:
            raise subprocess.TimeoutExpired(f"rank pid {self.pid}", timeout or 0.0)
        return self._process.exitcode

    def terminate(self) -> None:
        if self._process.exitcode is None:
            self._process.terminate()

    def kill(self) -> None:
        if self._process.exitcode is None:
            self._process.kill()


class RankLauncher:
    """Starts `program`'s ranks as forks of one fork server (see the module's text)."""

    def __init__(self, program: str = DDP_PROGRAM, preload: Sequence[str] = DDP_PRELOAD) -> None:
        self.program, self.preload = program, (*preload, __name__)
        self._context = multiprocessing.get_context("forkserver")
        self._started = False

    def warm(self) -> None:
        """Start the fork server now, if this process has none yet (its
        imports run in the background)."""
        if not self._started:
            for name, value in RANK_ENVIRONMENT.items():
                os.environ.setdefault(name, value)
            self._context.set_forkserver_preload(list(self.preload))    # (no effect on a server already running)
            forkserver.ensure_running()
            self._started = True

    def start(self, argv: Sequence[str], netns: str, log: Path, nice: int = 0,
              errors: Path | None = None) -> RankProcess:
        """`python -m PROGRAM ARGV` in namespace `netns`, as a fork: its
        output to `log`, its standard error there too or to `errors`."""
        self.warm()
        process = self._context.Process(target=run_rank, args=(self.program, list(argv), netns, str(log),
                                                              None if errors is None else str(errors), nice),
                                        name=f"{self.program} in {netns}", daemon=True)
        process.start()
        return RankProcess(process)
