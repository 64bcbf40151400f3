"""Was a run faithful? The invariants an emulated run must keep for its
numbers to be about the network and not about this machine's CPU, sampled
while it runs and judged at its end (docs/fidelity.md).

| invariant     | what is measured                                          | violated when                       |
|---------------|-----------------------------------------------------------|-------------------------------------|
| `cpu`         | the cores' mean idle share over the run (/proc/stat); the  | below `Limits.idle_min` (30%)       |
|               | PSI wait and the switches' wait a wakeup are reported      |                                     |
| `input_path`  | frames a switch's interfaces received that its P4 ingress | above `Limits.input_path_frames`    |
|               | never counted, plus the kernel's own drops (rx_dropped,   |                                     |
|               | softnet backlog): lost before any P4 counter sees them    |                                     |
| `agents`      | how late host agents were against their schedule, and the | above `Limits.agent_late_s`; any    |
|               | frames an agent's socket dropped (its buffer full: the    |   frame a socket dropped            |
|               | agent did not keep up)                                    |                                     |
| `departures`  | a rate-limited queue's departures while it was backlogged | more than `Limits.departures_off`   |
|               | (switches' own egress timestamps, e.g. INT's): BMv2 sends |   of them off its 1/R grid          |
|               | a queued packet 1/R after the one ahead of it             |                                     |

A run that breaks one still has results; each row carries its verdict
(`fidelity: ok` or `violated: <invariant> <by how much>`), and a violated
run says so on its last lines (`report`).

The monitor reads the machine (/proc) and the switches' counters through
callables the caller hands it, so it knows no controller: `ingress_frames`
is {switch: frames its pipeline's ingress counted} (experiments pass the
controller's counter reads), `rx_frames` the kernel's count for the same
interfaces.
"""
from __future__ import annotations

import contextlib
import os
import statistics
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Iterable, Mapping, Sequence

PROC_STAT = Path("/proc/stat")
INPUT_PATH_REREADS = 3        # the input path read again while it shows a loss (FidelityMonitor._settled_input_path)
INPUT_PATH_REREAD_S = 0.05
PSI_CPU = Path("/proc/pressure/cpu")
SAMPLE_SLACK_S = 0.05         # a sample that began this little before the traffic still counts as after it
SOFTNET = Path("/proc/net/softnet_stat")


@dataclass(frozen=True)
class Limits:
    """What a faithful run may not exceed (one table: docs/fidelity.md)."""
    # the cores' mean idle share, at least: the budget plans a run for half the cores, and below this the
    # machine, not the network, set the pace. Not PSI's "some" wait, which counts any wait however short: with
    # 20 switches at 41-51% idle per core it read 36-49% while each wakeup of a switch's thread waited 46-99 us
    # (1.4-3% of a packet time), and beside a busy process (one core taken) 14-24% while the lossless class lost
    # 12 and 734 packets (docs/fidelity.md, 2026-11-30)
    idle_min: float = 0.30
    input_path_frames: int = 0       # frames lost before the pipeline: none
    agent_late_s: float = 0.050      # an agent this late for its schedule
    # of a queue's backlogged departures (`departure_spacing`), the share off the 1/R grid by more than
    # `departure_tolerance` of a packet time; judged on at least `departures_min` of them
    departures_off: float = 0.05
    departure_tolerance: float = 0.25
    departures_min: int = 50


# -- the machine's CPU ----------------------------------------------------------

def cpu_times(text: str | None = None) -> list[tuple[int, int, int]]:
    """Per core, (idle, steal, total) jiffies from /proc/stat (idle counts iowait)."""
    out = []
    for line in (text if text is not None else PROC_STAT.read_text()).splitlines():
        name, *values = line.split()
        if not (name.startswith("cpu") and name[3:].isdigit()):
            continue
        v = [int(x) for x in values] + [0] * 8
        out.append((v[3] + v[4], v[7], sum(v[:8])))
    return out


def psi_some_us(text: str | None = None) -> int | None:
    """Microseconds some runnable thread has waited for a core since boot (PSI), None without PSI."""
    try:
        text = text if text is not None else PSI_CPU.read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("some "):
            return int(dict(kv.split("=") for kv in line.split()[1:])["total"])
    return None


@dataclass
class CpuSample:
    """One interval: each core's idle and stolen share, and the PSI wait (s)
    in it; `end` is when it ended (time.monotonic()); `groups`: the cores
    each watched group of processes used in it (FidelityMonitor.watch)."""
    seconds: float
    idle: list[float]
    steal: list[float]
    waited_s: float | None
    end: float = 0.0
    groups: dict[str, float] = field(default_factory=dict)


CLK_TCK = os.sysconf("SC_CLK_TCK")


def process_cpu_s(pid: int, proc: Path = Path("/proc")) -> float:
    """CPU seconds (user and system) process `pid` has used, all its threads
    (ProcessLookupError: gone)."""
    try:
        fields = (proc / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        raise ProcessLookupError(f"no process {pid}") from None
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def groups_cpu_s(groups: Mapping[str, Iterable[int]]) -> dict[int, float]:
    """{pid: CPU seconds} of every process of `groups` still there."""
    out = {}
    for pids in groups.values():
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                out[pid] = process_cpu_s(pid)
    return out


def groups_cores(groups: Mapping[str, Iterable[int]], before: Mapping[int, float], after: Mapping[int, float],
                 seconds: float) -> dict[str, float]:
    """The cores each group used between two groups_cpu_s() reads `seconds`
    apart (a process first seen in `after` counts from then; one gone by
    `after` is left out of the interval)."""
    return {name: sum(after[p] - before.get(p, after[p]) for p in pids if p in after) / seconds
            for name, pids in groups.items()} if seconds > 0 else {}


def cpu_sample(before: list[tuple[int, int, int]], after: list[tuple[int, int, int]], seconds: float,
               waited_us: int | None, end: float = 0.0) -> CpuSample:
    idle, steal = [], []
    for (i0, s0, t0), (i1, s1, t1) in zip(before, after):
        span = max(t1 - t0, 1)
        idle.append((i1 - i0) / span)
        steal.append((s1 - s0) / span)
    return CpuSample(seconds, idle, steal, None if waited_us is None else waited_us / 1e6, end)


class CpuSampler:
    """Samples the machine's CPU every `period_s` in a thread, from start() to
    stop(), and the CPU of each group of processes in `groups` ({name:
    pids}; a caller may add to it while it runs)."""

    def __init__(self, period_s: float = 0.5, groups: dict[str, list[int]] | None = None):
        self.period_s = period_s
        self.groups: dict[str, list[int]] = groups if groups is not None else {}
        self.samples: list[CpuSample] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> "CpuSampler":
        self._thread = threading.Thread(target=self._run, name="fidelity-cpu", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> list[CpuSample]:
        self._stop.set()
        if self._thread:
            self._thread.join()
        return self.samples

    def _run(self) -> None:
        times, psi, t = cpu_times(), psi_some_us(), time.monotonic()
        used = groups_cpu_s(self._groups_now())
        while True:
            stopping = self._stop.wait(self.period_s)
            groups = self._groups_now()
            times2, psi2, t2, used2 = cpu_times(), psi_some_us(), time.monotonic(), groups_cpu_s(groups)
            waited = None if psi is None or psi2 is None else psi2 - psi
            sample = cpu_sample(times, times2, t2 - t, waited, t2)
            sample.groups = groups_cores(groups, used, used2, t2 - t)
            self.samples.append(sample)
            times, psi, t, used = times2, psi2, t2, used2
            if stopping:
                return


    def _groups_now(self) -> dict[str, list[int]]:
        """A copy of `groups` (list() of a dict's items is one step under the
        GIL: a watch() meanwhile does not break it)."""
        return {name: list(pids) for name, pids in list(self.groups.items())}


def traffic_samples(samples: Sequence[CpuSample], since: float) -> list[CpuSample]:
    """The samples that judge a run whose traffic started at `since`
    (time.monotonic()): those that began then or later; when none did (a
    run shorter than a sampling period), those that ended after it. A
    sample that began before the traffic measured the agents' start-up
    too (16 ranks importing PyTorch): 2 s of it outweighed a 1.5 s run."""
    whole = [s for s in samples if s.end - s.seconds >= since - SAMPLE_SLACK_S]
    return whole or [s for s in samples if s.end > since]


@dataclass
class CpuSummary:
    seconds: float
    idle_per_core: list[float]        # mean share of each core left idle
    steal: float                      # mean share stolen by the hypervisor (all cores)
    wait_share: float | None          # PSI: share of the time some thread waited for a core (reported)
    switch_wait_us: float | None = None     # the switches' threads: mean wait for a core a wakeup (reported)
    groups: dict[str, float] = field(default_factory=dict)     # the cores each watched group used (reported)

    @property
    def idle(self) -> float:
        """The cores' mean idle share."""
        return statistics.fmean(self.idle_per_core)

    def __str__(self) -> str:
        idle = "/".join(f"{x:.0%}" for x in self.idle_per_core)
        wait = "n/a" if self.wait_share is None else f"{self.wait_share:.0%}"
        woken = ("" if self.switch_wait_us is None
                 else f", switches' threads waited {self.switch_wait_us:.0f} us a wakeup")
        used = "".join(f", {name} {cores:.2f} cores" for name, cores in self.groups.items())
        return (f"idle per core {idle}, CPU wait {wait}{woken}{used}, steal {self.steal:.0%} "
                f"over {self.seconds:.1f} s")


def summarise_cpu(samples: Sequence[CpuSample]) -> CpuSummary | None:
    if not samples:
        return None
    seconds = sum(s.seconds for s in samples)
    cores = len(samples[0].idle)
    idle = [sum(s.idle[c] * s.seconds for s in samples) / seconds for c in range(cores)]
    steal = sum(statistics.fmean(s.steal) * s.seconds for s in samples) / seconds
    waits = [s.waited_s for s in samples]
    wait_share = None if any(w is None for w in waits) else sum(waits) / seconds  # type: ignore[arg-type]
    names = dict.fromkeys(name for s in samples for name in s.groups)
    groups = {name: sum(s.groups.get(name, 0.0) * s.seconds for s in samples) / seconds for name in names}
    return CpuSummary(seconds, idle, steal, wait_share, groups=groups)


def thread_waits(pids: Iterable[int], proc: Path = Path("/proc")) -> dict[tuple[int, int], tuple[int, int]]:
    """(pid, thread id) -> (nanoseconds it waited on a run queue, times it
    ran) of every thread of `pids` (/proc/PID/task/TID/schedstat); a
    process or thread gone while read is left out."""
    out = {}
    for pid in pids:
        with contextlib.suppress(OSError):
            for tid in (proc / str(pid) / "task").iterdir():
                with contextlib.suppress(OSError, ValueError):
                    _run, wait, slices = map(int, (tid / "schedstat").read_text().split())
                    out[(pid, int(tid.name))] = (wait, slices)
    return out


def wait_per_wakeup_us(before: Mapping[tuple[int, int], tuple[int, int]],
                       after: Mapping[tuple[int, int], tuple[int, int]]) -> float | None:
    """The mean wait for a core a thread's wakeup took between two
    thread_waits() reads (threads that began between them count from 0);
    None when nothing ran."""
    waited = woken = 0
    for key, (wait, slices) in after.items():
        wait0, slices0 = before.get(key, (0, 0))
        waited += wait - wait0
        woken += slices - slices0
    return waited / woken / 1e3 if woken > 0 else None


# -- departures from a rate-limited queue --------------------------------------

@dataclass(frozen=True)
class Spacing:
    """How a queue limited to `rate_pps` released its backlogged packets
    (`departure_spacing`): of `backlogged` gaps, `early` came sooner than a
    packet time (BMv2 catching up after its egress thread ran late) and
    `off_grid` later by other than whole packet times (a stall); `median`
    is the median gap in packet times."""
    queue: str
    rate_pps: float
    backlogged: int
    early: int
    off_grid: int
    median: float | None

    @property
    def off(self) -> int:
        return self.early + self.off_grid

    def __str__(self) -> str:
        if not self.backlogged:
            return f"{self.queue}: no backlogged departures"
        return (f"{self.queue}: {self.off} of {self.backlogged} backlogged departures off the 1/R grid "
                f"({self.early} early, {self.off_grid} late; median gap {self.median:.2f}/R at "
                f"R = {self.rate_pps:g} packets/s)")


def departures_from_us(records: Iterable[Sequence[int]]) -> list[tuple[float, int]]:
    """(seconds, depth) from (egress time in microseconds mod 2^32, depth)
    records in the order the packets left (INT's 32-bit tx time, as a host
    that is its flows' sink records it): the time unwrapped across 2^32,
    from the first record on."""
    out: list[tuple[float, int]] = []
    wraps, previous = 0, None
    for us, depth in records:
        if previous is not None and us < previous - (1 << 31):
            wraps += 1
        previous = us
        out.append(((us + (wraps << 32)) / 1e6, depth))
    return out


def departure_spacing(departures: Iterable[tuple[float, int]], rate_pps: float, queue: str,
                      limits: Limits = Limits()) -> Spacing:
    """BMv2 gives a packet its departure time when it joins a rate-limited
    queue: 1/R after the packet ahead of it, or now if the queue is empty
    (bm_sim/queueing.h, get_next_tp). So a packet that joined behind
    another (its enqueue depth >= 1) leaves exactly 1/R after it, unless
    the egress thread ran late: then it leaves at once on its catching up
    (early) or after a stall (late). `departures`: (egress timestamp in
    seconds, depth the packet saw at enqueue) of every packet through the
    queue, as the switch's own timestamps give them (INT's egress_ts).
    Where some packets went unrecorded (a report lost) a gap spans whole
    packet times: counted as on the grid."""
    ordered = sorted(departures)
    period = 1.0 / rate_pps
    tol = limits.departure_tolerance
    gaps = [(t1 - t0) / period for (t0, _), (t1, depth) in zip(ordered, ordered[1:]) if depth >= 1]
    early = sum(1 for g in gaps if g < 1 - tol)
    off_grid = sum(1 for g in gaps if g > 1 + tol and abs(g - round(g)) > tol)
    return Spacing(queue, rate_pps, len(gaps), early, off_grid, statistics.median(gaps) if gaps else None)


# -- the verdict ----------------------------------------------------------------

@dataclass
class Verdict:
    """A run's fidelity: ok, or the invariants it broke and by how much."""
    violations: list[str] = field(default_factory=list)
    cpu: CpuSummary | None = None
    input_path: dict[str, int] = field(default_factory=dict)   # where -> frames lost before the pipeline
    agent_late_s: float | None = None
    departures: list[Spacing] = field(default_factory=list)
    socket_drops: dict[str, int] = field(default_factory=dict)  # host -> frames its agents' sockets dropped

    @property
    def ok(self) -> bool:
        return not self.violations

    def __str__(self) -> str:
        return "ok" if self.ok else "violated: " + "; ".join(self.violations)


def judge(cpu: CpuSummary | None, input_path: Mapping[str, int], agent_late_s: Iterable[float] = (),
          limits: Limits = Limits(), departures: Iterable[Spacing] = (),
          socket_drops: Mapping[str, int] | None = None) -> Verdict:
    """The verdict on what a run measured (see the module's table)."""
    v = Verdict(cpu=cpu, input_path={k: n for k, n in input_path.items() if n > 0}, departures=list(departures),
                socket_drops={k: n for k, n in (socket_drops or {}).items() if n > 0})
    if cpu is not None and cpu.idle < limits.idle_min:
        v.violations.append(f"cpu: the cores were idle {cpu.idle:.0%} of the run (at least {limits.idle_min:.0%}; "
                            f"{cpu})")
    lost = sum(v.input_path.values())
    if lost > limits.input_path_frames:
        where = " ".join(f"{k}:{n}" for k, n in sorted(v.input_path.items()))
        v.violations.append(f"input_path: {lost} frames lost before the pipeline, seen by no P4 counter ({where})")
    late = list(agent_late_s)
    if late:
        v.agent_late_s = max(late)
        if v.agent_late_s > limits.agent_late_s:
            v.violations.append(f"agents: up to {v.agent_late_s * 1000:.0f} ms late for their schedule "
                                f"(at most {limits.agent_late_s * 1000:.0f} ms)")
    for host, n in sorted(v.socket_drops.items()):
        v.violations.append(f"agents: {host}'s socket dropped {n} frames (its agent did not keep up)")
    off = [s for s in v.departures
           if s.backlogged >= limits.departures_min and s.off > limits.departures_off * s.backlogged]
    if off:
        v.violations.append("departures: " + "; ".join(map(str, off))
                            + f" (at most {limits.departures_off:.0%})")
    return v


# -- the monitor ----------------------------------------------------------------

def kernel_drops(ifaces_by_switch: Mapping[str, Iterable[str]]) -> dict[str, int]:
    """{where: frames the kernel dropped}: "kernel:<switch>" (rx_dropped of
    its interfaces) and "kernel:softnet" (a CPU's backlog full). Counters
    that only grow; read before and after."""
    out = {}
    for switch, ifaces in ifaces_by_switch.items():
        out[f"kernel:{switch}"] = 0
        for iface in ifaces:
            with contextlib.suppress(OSError, ValueError):
                out[f"kernel:{switch}"] += int(Path(f"/sys/class/net/{iface}/statistics/rx_dropped").read_text())
    with contextlib.suppress(OSError):
        out["kernel:softnet"] = sum(int(line.split()[1], 16) for line in SOFTNET.read_text().splitlines())
    return out


class FidelityMonitor:
    """Beside a run (a context manager): samples the CPU, and reads the
    input-path counters at its start and when verdict() is called (after the
    traffic stopped).

    `input_path()` returns {switch: frames its interfaces received minus
    frames its ingress counted}; `ifaces` names each switch's interfaces
    (for the kernel's drops). Either may be omitted (no switch to read: a
    benchmark that judges only the CPU). `pids`: the switches' processes,
    whose threads' wait for a core a wakeup the verdict reports."""

    def __init__(self, input_path: Callable[[], Mapping[str, int]] | None = None,
                 ifaces: Mapping[str, Iterable[str]] | None = None, limits: Limits = Limits(),
                 period_s: float = 0.5, pids: Iterable[int] = ()):
        self._input_path, self._ifaces = input_path, {k: list(v) for k, v in (ifaces or {}).items()}
        self.limits = limits
        self._pids = list(pids)
        self.sampler = CpuSampler(period_s, {"switches": list(self._pids)} if self._pids else {})
        self._before: dict[str, int] = {}
        self._cpu_from = 0.0                    # time.monotonic() from which the CPU is judged
        self._waits: dict[tuple[int, int], tuple[int, int]] = {}

    def watch(self, name: str, pids: Iterable[int]) -> None:
        """Report the cores these processes use (the host agents, say) as
        `name`, from the next sample on, beside the switches'."""
        self.sampler.groups[name] = list(pids)

    def traffic_starts(self, at_wall: float | None = None) -> None:
        """Judge the CPU from now (or from wall-clock `at_wall`) on: what the
        machine did before the traffic (agents importing their modules) is
        not the run. The input path still counts from start()."""
        self._cpu_from = time.monotonic() + (0.0 if at_wall is None else at_wall - time.time())
        self._waits = thread_waits(self._pids)

    def _counts(self) -> dict[str, int]:
        """The input path's counts and the kernel's drops; with an input
        path, the kernel's only for the switches it still reads (a switch
        a case killed drops what reaches its interfaces: the failure, not
        the machine)."""
        counts = dict(self._input_path()) if self._input_path else {}
        ifaces = {sw: names for sw, names in self._ifaces.items() if not self._input_path or sw in counts}
        counts.update(kernel_drops(ifaces) if ifaces else {})
        return counts

    def start(self) -> "FidelityMonitor":
        self._before = self._counts()
        self._waits = thread_waits(self._pids)
        self.sampler.start()
        return self

    def __enter__(self) -> "FidelityMonitor":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.sampler.stop()

    def _settled_input_path(self, grown: Mapping[str, int]) -> dict[str, int]:
        """The input path's growth read again, at most INPUT_PATH_REREADS
        times INPUT_PATH_REREAD_S apart while some switch still shows a loss,
        each switch's least kept. A read is an upper bound (the pipeline's
        counter read before the kernel's: what arrived in between, and
        what BMv2 still holds, looks lost); the heartbeats that run after
        the traffic keep a frame or two in flight at a switch, which a
        single read may call lost (likely the 2-4 frames at a spine in 3 of
        35 runs of an ablation, 2026-12-01). A frame really lost stays in
        every read."""
        assert self._input_path is not None
        least = {k: n for k, n in grown.items() if not k.startswith("kernel:")}
        for _ in range(INPUT_PATH_REREADS):
            if not any(n > self.limits.input_path_frames for n in least.values()):
                break
            time.sleep(INPUT_PATH_REREAD_S)
            for k, n in self._input_path().items():
                if k in least:
                    least[k] = min(least[k], n - self._before.get(k, 0))
        return least

    def verdict(self, agent_late_s: Iterable[float] = (), departures: Iterable[Spacing] = (),
                socket_drops: Mapping[str, int] | None = None) -> Verdict:
        """Judge the run so far (stops the CPU sampling); `departures`: the
        spacing of queues whose departures the run recorded; `socket_drops`:
        {host: frames its agents' sockets dropped}."""
        self.sampler.stop()
        after = self._counts()
        grown = {k: after[k] - self._before.get(k, 0) for k in after}
        if self._input_path:
            grown.update(self._settled_input_path(grown))
        cpu = summarise_cpu(traffic_samples(self.sampler.samples, self._cpu_from))
        if cpu is not None and self._pids:
            cpu = replace(cpu, switch_wait_us=wait_per_wakeup_us(self._waits, thread_waits(self._pids)))
        return judge(cpu, grown, agent_late_s, self.limits, departures, socket_drops)


def report(verdicts: Mapping[str, Verdict | str], what: str = "run") -> str:
    """The last lines of a run: how many cases were faithful, and loudly,
    each that was not (a verdict or its text, as a result row holds it)."""
    bad = {case: v for case, v in verdicts.items() if str(v) != "ok"}
    if not verdicts:
        return f"fidelity: no {what} judged"
    if not bad:
        return f"fidelity: every {what} faithful ({len(verdicts)} of {len(verdicts)})"
    lines = [f"!!! fidelity: {len(bad)} of {len(verdicts)} {what}s violated an invariant: "
             f"their numbers measure this machine, not the network"]
    lines += [f"!!!   {case}: {v}" for case, v in bad.items()]
    return "\n".join(lines)
