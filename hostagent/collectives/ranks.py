"""DDP ranks forked from one process that imported PyTorch once.

A rank (hostagent/collectives/ddp.py) imports PyTorch, and
DistributedDataParallel's constructor then imports torch._dynamo: about 7 s
of one core each. Four ranks started as four `ip netns exec` commands spent
20-30 s importing on the 2-core machine, beside switches that needed those
cores (measured 2026-12-03: 21 s from start to the ranks' first line, 10 s
more in DDP's constructor). Here a fork server (multiprocessing's
"forkserver") imports them once, when `RankLauncher.warm()` is called (beside
the fabric's bring-up) or at the first rank; every rank is a fork of it
that enters its host's namespace as `ip netns exec` would
(emulator.netns.enter_netns), lowers its priority, writes its output to its
log and runs ddp.main with its own arguments. The fork server lasts as long
as the process that started it: a run of several cases imports once, and
its ranks (daemonic) end with it.

A RankProcess answers as subprocess.Popen does (pid, poll, wait,
terminate, returncode), so a caller follows ranks as it follows any agent.
"""
from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
from pathlib import Path
from typing import Protocol, Sequence

# what the fork server imports before any rank: PyTorch, what DDP's constructor imports, the rank itself and
# what a path-aware rank imports
PRELOAD = ("torch", "torch._dynamo", "hostagent.collectives.ddp", "hostagent.collectives.paths",
           "hostagent.collectives.ranks")
# set before the fork server starts (a BLAS/OpenMP pool reads it when PyTorch loads): one thread a rank, as
# the ranks' command lines had it
RANK_ENVIRONMENT = {"OMP_NUM_THREADS": "1"}


def run_rank(argv: Sequence[str], netns: str, log: str, nice: int) -> None:
    """The rank, in the forked child: its output to `log`, into `netns`,
    `nice`d, then ddp.main(argv); exits with its status."""
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    from emulator.netns import enter_netns
    from hostagent.collectives import ddp
    enter_netns(netns)
    os.nice(nice)
    sys.exit(ddp.main(list(argv)))


class Process(Protocol):
    """What a caller follows of a rank or an agent: a subprocess.Popen, or a RankProcess."""

    @property
    def pid(self) -> int: ...

    @property
    def returncode(self) -> int | None: ...

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int: ...

    def terminate(self) -> None: ...


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
    """Starts ranks as forks of one fork server (see the module's text)."""

    def __init__(self) -> None:
        self._context = multiprocessing.get_context("forkserver")
        self._context.set_forkserver_preload(list(PRELOAD))
        self._started = False

    def warm(self) -> None:
        """Start the fork server now (its imports run in the background)."""
        if not self._started:
            for name, value in RANK_ENVIRONMENT.items():
                os.environ.setdefault(name, value)
            from multiprocessing import forkserver
            forkserver.ensure_running()
            self._started = True

    def start(self, argv: Sequence[str], netns: str, log: Path, nice: int = 0) -> RankProcess:
        """`python -m hostagent.collectives.ddp ARGV`, in namespace `netns`, as a fork."""
        self.warm()
        process = self._context.Process(target=run_rank, args=(list(argv), netns, str(log), nice),
                                        name=f"rank in {netns}", daemon=True)
        process.start()
        return RankProcess(process)
