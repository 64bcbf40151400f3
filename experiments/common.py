"""Shared by the experiments: writing results, and the faults they inject
(each fault returns the function that undoes it)."""
from __future__ import annotations

import argparse
import contextlib
import csv
import functools
import math
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Iterator, Sequence

from emulator.bmv2_thrift import Bmv2Thrift
from control.controller import FabricController
from emulator import run_costs
from emulator.calibration import Calibration, CalibrationError, Flow, Identity, demand, plan, this_machine
from emulator.calibration import stored as stored_calibration
from emulator.fidelity import CpuSummary, FidelityMonitor, Limits, Verdict, report
from emulator.impairments import blackhole
from emulator import queue_depth
from emulator.network import QUEUE_RATE_PACKET_BYTES, Network, interface_rx_packets
from emulator.toolchain import record as record_toolchain
from features.congestion_control import SECTION as CONGESTION_CONTROL
from features.lossless import OCCUPANCY_REGISTER, cell
from hostagent.rdma.agent import cc_param_values
from hostagent.rdma.transport import TransportParams
from hostagent.start import StartGate, stop_all  # noqa: F401  (the experiments' launcher side, re-exported)

REPO = Path(__file__).resolve().parent.parent


def stop_on_sigterm(signum, frame) -> None:
    """SIGTERM ends an experiment as Ctrl-C does: its networks, processes and
    rules torn down on the way out (the `with` blocks' exits), none left running."""
    raise SystemExit(128 + signum)


def exit_on_sigterm() -> None:
    """From here on, SIGTERM ends this process by stop_on_sigterm (only the
    main thread may set a handler; elsewhere nothing changes)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, stop_on_sigterm)


def experiment_parser(name: str, doc: str) -> argparse.ArgumentParser:
    """An experiment's command line, as `fabric experiment NAME` runs it:
    its docstring's first paragraph for a description."""
    return argparse.ArgumentParser(prog=f"fabric experiment {name}", description=doc.split("\n\n")[0])


def write_csv(path: Path, rows: list[dict], on_bmv2: bool = True) -> Path:
    """Rows (dicts) as a CSV with a header of every key, in order of first
    appearance (a key a row lacks is left empty); return the path. Beside
    results `on_bmv2`, toolchain.json says which p4c and BMv2 they came from
    (a model's results, run on no switch, have none)."""
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(dict.fromkeys(k for r in rows for k in r)))
        w.writeheader()
        w.writerows(rows)
    if on_bmv2:
        record_toolchain(Path(path).parent)
    return path


def agent_python() -> str:
    """The Python the host agents run with: the project's virtualenv's if there is one."""
    venv = REPO / ".venv" / "bin" / "python"
    return str(venv) if venv.exists() else sys.executable


def _agent(module: str, host, role: str, start_at: float | StartGate, out_dir: Path, extra: Sequence[str],
           stem: str | None = None) -> subprocess.Popen:
    start = start_at.args() if isinstance(start_at, StartGate) else ["--start-at", str(start_at)]
    cmd = ["ip", "netns", "exec", host.name, agent_python(), "-m", module, role,
           "--iface", host.iface, "--src-ip", host.ip, "--src-mac", host.mac, "--gw-mac", host.gateway_mac,
           *start, "--out", str(out_dir / (stem or f"{role}-{host.name}")), *extra]
    return subprocess.Popen(cmd, cwd=REPO)


def roce_agent(host, role: str, *, start_at: float | StartGate, out_dir: Path,
               extra: Sequence[str] = ()) -> subprocess.Popen:
    """hostagent.ecn.roce `role` ("send" or "receive") in `host`'s namespace,
    starting at wall-clock `start_at`, or when a StartGate opens (agents
    start together), writing out_dir/<role>-<host>.json and .csv."""
    return _agent("hostagent.ecn.roce", host, role, start_at, out_dir, extra)


def rdma_agent(host, role: str, *, start_at: float | StartGate, out_dir: Path, extra: Sequence[str] = (),
               stem: str | None = None) -> subprocess.Popen:
    """hostagent.rdma (the RC transport) `role` in `host`'s namespace, as
    roce_agent: out_dir/<stem>.json (and the sender's .csv), stem
    <role>-<host> unless given (a host with several queue pairs)."""
    return _agent("hostagent.rdma", host, role, start_at, out_dir, extra, stem)


def traffic_agent(host, role: str, *, start_at: float, out_dir: Path, extra: Sequence[str] = (),
                  stem: str | None = None) -> subprocess.Popen:
    """hostagent.traffic `role` ("elephant", "transfer", "receive") in
    `host`'s namespace, as roce_agent."""
    return _agent("hostagent.traffic", host, role, start_at, out_dir, extra, stem)


def save_figure(fig, path: Path) -> Path:
    """Lay out, write as PNG (110 dpi, every experiment's), close; return the path."""
    import matplotlib.pyplot as plt   # only when a figure is written: slow to import
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


@contextlib.contextmanager
def busy_processes(n: int) -> Iterator[list[subprocess.Popen]]:
    """`n` processes spinning on the CPU for as long as the block runs: the
    machine made busy on purpose, to check that what it then fails to
    emulate is judged violated, not measured silently (docs/fidelity.md)."""
    if n < 0:
        raise ValueError(f"busy processes: expected 0 or more, got {n}")
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
    if n:
        print(f"busy: {n} process{'es' if n > 1 else ''} spinning on the CPU beside every case (--busy)", flush=True)
    try:
        yield procs
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


def kill_switch(net, ctl, name: str, lock: threading.Lock | None = None):
    """Kill switch `name`'s process and drop the controller's connection to
    it; undo: restart it and let the controller recover it (under `lock`)."""
    net.switches[name].proc.kill()
    net.switches[name].proc.wait()
    conn = ctl.connections.pop(name, None)
    if conn is not None:
        with contextlib.suppress(Exception):        # its channel is already gone
            conn.close()

    def undo():
        with lock or contextlib.nullcontext():
            net.restart_switch(name)
            ctl.recover_switch(name)
    return undo


def fail_link(topo, a: str, b: str):
    """Black-hole both directions of link a-b (the ports stay up: nothing
    reroutes on a port event); return the undo."""
    undos = [blackhole(p.iface) for x, y in ((a, b), (b, a)) for p in topo.switches[x].ports.values() if p.peer == y]
    return lambda: [undo() for undo in undos]


def sample_queue(thrift: Bmv2Thrift, port: int, stop: threading.Event, t0: float, out: list,
                 queue: int = 0) -> None:
    """Until `stop`: every 5 ms, (seconds since t0, the depth the last packet
    leaving `port`'s priority queue `queue` met: emulator/queue_depth.py).
    Clears the queue's sample first; until a packet leaves it, nothing is
    appended (a queue not measured is not an empty one)."""
    queue_depth.clear(thrift, port, queue)
    while not stop.is_set():
        sample = queue_depth.read(thrift, port, queue)
        if sample is not None:
            out.append((time.time() - t0, sample.depth))
        time.sleep(0.005)


def wait_sampling_queue(thrift_port: int, port: int, start_at: float, procs: Sequence[subprocess.Popen],
                        timeout: float) -> list[tuple[float, int]]:
    """Wait for the agents `procs` (started for wall-clock `start_at`) while
    sampling `port`'s queue 0 from start_at (sample_queue); the samples."""
    samples: list[tuple[float, int]] = []
    stop = threading.Event()
    with Bmv2Thrift(thrift_port) as thrift:
        time.sleep(max(0.0, start_at - time.time()))
        sampler = threading.Thread(target=sample_queue, args=(thrift, port, stop, start_at, samples))
        sampler.start()
        for p in procs:
            p.wait(timeout=timeout)
        stop.set()
        sampler.join()
    return samples


PING_TIME = re.compile(r"time=([0-9.]+) ms")


def ping_round_trips(namespace: str, address: str, count: int, interval_s: float) -> list[float]:
    """The round trips, in seconds, of `count` pings from the host in
    `namespace` to `address`, `interval_s` apart (those answered within a
    second)."""
    proc = subprocess.run(["ip", "netns", "exec", namespace, "ping", "-n", "-c", str(count), "-i", str(interval_s),
                           "-W", "1", address], capture_output=True, text=True, timeout=30 + count * (interval_s + 1))
    return [float(m) / 1000 for m in PING_TIME.findall(proc.stdout)]


def percentile(values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile (p in 0..1) of `values`; 0.0 for none."""
    if not values:
        return 0.0
    v = sorted(values)
    return float(v[min(len(v) - 1, int(p * len(v)))])


def median_ratio_interval(numerator: Sequence[float], denominator: Sequence[float], confidence: float = 0.95,
                          resamples: int = 2000, seed: int = 0) -> tuple[float, float, float]:
    """median(numerator) / median(denominator), and its `confidence`
    percentile bootstrap interval: each side's runs resampled with
    replacement `resamples` times (seeded, so a table is reproduced from its
    runs). For two sets of independent runs, e.g. a case's step times
    against the composition's."""
    if not numerator or not denominator:
        raise ValueError("a ratio of medians needs at least one value on each side")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    rng = random.Random(seed)
    ratios = sorted(statistics.median(rng.choices(numerator, k=len(numerator)))
                    / statistics.median(rng.choices(denominator, k=len(denominator))) for _ in range(resamples))
    tail = (1 - confidence) / 2
    lo = ratios[int(tail * resamples)]
    hi = ratios[min(resamples - 1, int((1 - tail) * resamples))]
    return statistics.median(numerator) / statistics.median(denominator), lo, hi


def print_table(rows: list[dict], width: int = 13) -> None:
    """Rows (dicts with the same keys) as right-aligned columns on stdout."""
    cols = list(rows[0])
    print("\n" + " ".join(f"{c:>{width}s}" for c in cols))
    for r in rows:
        print(" ".join(f"{r[c]!s:>{width}s}" for c in cols))


def input_path_counts(ctl: FabricController, switches) -> dict[str, int]:
    """{switch: frames its interfaces received (the kernel's count) minus
    frames its pipeline's ingress counted}. Once traffic has stopped, what
    grew is what BMv2 lost between its packet socket and ingress: seen by
    no P4 counter. Each switch must have a connection (ctl.connections)."""
    out = {}
    for sw in switches:       # through each switch's connection: ctl.counter() would reconnect to every switch
        ports = list(interface_rx_packets(sw))
        # the ports' cells only: a whole counter is read cell by cell (512 of them, 20 ms a switch); read
        # before the kernel's, so that the difference is never less than what was lost: a frame that arrived
        # in between counts as lost in this read, not as ingress with no arrival
        ingress = ctl.connections[sw.name].counter(*(ctl.p4info.counter_entry("ingress_port_counter", p)
                                                     for p in ports)) if ports else {}
        rx = interface_rx_packets(sw)
        out[sw.name] = sum(rx.get(p, 0) for p in ports) - sum(ingress.get(p, (0, 0))[0] for p in ports)
    return out


@contextlib.contextmanager
def programmed_fabric(topo, name: str, log_level: str) -> Iterator[tuple[Network, FabricController]]:
    """`topo` started on BMv2 (build/experiments/<name>), programmed, its
    queue rates applied; torn down after."""
    with Network(topo, REPO / "build" / "experiments" / name, log_level=log_level) as net, \
            FabricController(topo) as ctl:
        ctl.program()
        net.apply_queue_rates()
        yield net, ctl


def cc_constants(topo, cc: str, line_rate_pps: float, mtu: int = 1024, dilation: float = 1.0
                 ) -> tuple[dict[str, float], str]:
    """What the topology's `congestion_control:` section (an overlay's)
    gives an RDMA sender running `cc` at `line_rate_pps` on a network
    dilated `dilation` times, checked as the agent will take it (ValueError
    naming the field), and a note when its per-line-rate fields have no
    entry at that rate ("" when they have, or without the section)."""
    section = topo.features.get(CONGESTION_CONTROL)
    if section is None:
        return {}, ""
    given = section.params(cc, line_rate_pps, dilation)
    try:
        values = cc_param_values(cc, given, "send", line_rate_pps, mtu, dilation) if given else {}
    except ValueError as exc:
        raise ValueError(f"{CONGESTION_CONTROL}.{cc}: {exc}") from None
    return values, section.unmatched(cc, line_rate_pps, dilation)


def cc_constants_line(cc: str, values: dict[str, float], unmatched: str) -> str:
    """What `cc`'s agents are given from the overlay, in a line."""
    return (f"{cc} from the overlay's {CONGESTION_CONTROL}: "
            + (", ".join(f"{k} = {v:g}" for k, v in values.items()) or "nothing")
            + (f"; {unmatched}" if unmatched else ""))


def dcqcn_constants(topo, line_rate_pps: float, overrides: Sequence[tuple[str, float]] = ()) -> dict[str, float]:
    """The DCQCN constants the RoCEv2 agents (hostagent.ecn.roce) of a DCQCN
    case are given: the topology's congestion_control section's (an
    overlay's) at the senders' line rate, each (name, value) of `overrides`
    (an experiment's --dcqcn NAME=VALUE, hostagent.rdma.agent.parse_cc_param)
    over them; checked as the agents take them (ValueError naming the
    constant). Prints what came from where."""
    given, unmatched = cc_constants(topo, "dcqcn", line_rate_pps)
    if given or unmatched:
        print(cc_constants_line("dcqcn", given, unmatched), flush=True)
    for name, _ in overrides:
        if name == "line_rate_pps":
            raise ValueError("--dcqcn line_rate_pps: the senders' line rate is the experiment's --sender-rate")
    chosen = cc_param_values("dcqcn", list(overrides), "send", line_rate_pps)
    if chosen:
        print("dcqcn from --dcqcn: " + ", ".join(f"{k} = {v:g}" for k, v in chosen.items()), flush=True)
    return {**given, **chosen}


def roce_dcqcn_args(constants: dict[str, float]) -> tuple[list[str], list[str]]:
    """dcqcn_constants() as the RoCEv2 agent's flags: (the receiver's, its
    CNP interval; the senders')."""
    given = dict(constants)
    receiver = ["--cnp-interval-s", str(given.pop("cnp_interval_s"))] if "cnp_interval_s" in given else []
    return receiver, [a for k, v in given.items() for a in ("--" + k.replace("_", "-"), str(v))]


def case_fidelity(net, ctl: FabricController, limits: Limits = Limits(),
                  lock: threading.Lock | None = None, period_s: float = 2.0) -> FidelityMonitor:
    """A fidelity monitor started for one case (emulator/fidelity.py): the
    CPU sampled from now, the input path read now and at its verdict(),
    taken once the case's traffic stopped (the counters read under `lock`
    where other threads share the controller). A switch restarted during
    the case (a new process: its counters start again) or down at the end
    is left out of the input path."""
    pids = {name: sp.proc.pid for name, sp in net.switches.items()}

    def input_path() -> dict[str, int]:
        with lock or contextlib.nullcontext():
            same = [sw for sw in net.topo.switches.values()
                    if net.switches[sw.name].proc.pid == pids[sw.name] and net.switches[sw.name].proc.poll() is None
                    and sw.name in ctl.connections]
            return input_path_counts(ctl, same)

    ifaces = {sw.name: [p.iface for p in sw.ports.values()] for sw in net.topo.switches.values()}
    # Sampled every 2 s by default: at every 0.5 s the lossless spreading case (pfc-8) lost more than 1% of its
    # packets before the pipeline in 2 of 2 runs, at 2 s (and with no sampling) in none of 2, as on main before
    return FidelityMonitor(input_path, ifaces, limits, period_s=period_s, pids=pids.values()).start()


# A receiver of a lossless class runs until no packet arrived for this long after its --duration
# (hostagent.ecn.roce receive --until-quiet): what the paused class still held drains at its link's rate. A
# fixed second after the senders was too short at XOFF 31 + headroom 30 on fat-tree-k4 (x13.5, 617 packets/s):
# two flows' last packets arrived 5.985 and 5.988 s into a 6 s receive, and CI's run of 2026-11-30 counted 7
# such packets missing (fabric tune's checks, experiments/tuning.py).
RECEIVE_QUIET_S = 0.5


def socket_drops(summaries: Sequence[tuple[str, dict]]) -> dict[str, int]:
    """{host: frames its agents' sockets dropped} from (host, agent summary)
    pairs, for a verdict's socket_drops: what the kernel dropped on receive
    (an agent's "socket_drops"; None where the kernel did not say) and the
    frames it refused to send (its "tx-error"s: ENOBUFS), both the machine's."""
    out: dict[str, int] = {}
    for host, summary in summaries:
        out[host] = (out.get(host, 0) + (summary.get("socket_drops") or 0)
                     + (summary.get("ignored") or {}).get("tx-error", 0))
    return out


def held_in_switches(topo, classes: Sequence[int]) -> int:
    """Lossless packets of `classes` the switches hold: admitted, not yet
    sent (each cell's buffer model, pfc_occupancy, over every port)."""
    n = 0
    for sw in topo.switches.values():
        with Bmv2Thrift(sw.thrift_port, sw.thrift_host, name=sw.name) as thrift:
            n += sum(int(thrift.register_read(OCCUPANCY_REGISTER, cell(p, c))) for p in sw.ports for c in classes)
    return n


def calibration_or_why() -> tuple[Calibration | None, str]:
    """The stored calibration for this machine and the experiments' BMv2,
    or None and why there is none (never measured, or unreadable)."""
    try:
        cal = stored_calibration()
    except CalibrationError as exc:
        return None, str(exc)
    return cal, "" if cal is not None else "no calibration (fabric calibrate)"


def announce_budget(topo, flows: Sequence[Flow], composition: str = "fabric", ack_share: float = 0.0,
                    agents: str = "roce") -> str:
    """Before a run starts: what its rates cost this machine by the stored
    calibration (emulator/calibration.py), said loudly when over budget.
    Returns the row's `budget` text ("within", "over x1.73", or "unknown"
    without a calibration)."""
    cal, why = calibration_or_why()
    if cal is None:
        print(f"budget: {why}: what this run costs the machine is unknown", flush=True)
        return "unknown"
    p = plan(demand(topo, flows, ack_share), cal, composition, agents=agents)
    if p.within_budget:
        print(f"budget: this run {p}", flush=True)
        return "within"
    print(f"!!! budget: this run {p}; it runs as asked, and its results may measure this machine", flush=True)
    return f"over x{p.dilation:.2f}"


# -- a run's rates, sized to this machine (docs/fidelity.md) --------------------------------------------------

RANK_ACK_SHARE = 1 / TransportParams().ack_every   # the RC transport's ACKs a data packet (ranks, RDMA agents)
MIN_LINE_RATE_PPS = 20.0        # a derived rate is never below this: a step must still end in minutes
MAX_STEAL_RECORDED = 0.05       # a run the hypervisor took more of than this is not recorded as what runs cost


@functools.cache
def machine_identity() -> Identity:
    """This machine, its BMv2 build and the pipeline, looked up once a run:
    identifying them hashes the BMv2 binary."""
    return this_machine()


def ring_pairs(hosts: Sequence[str], channels: int = 1) -> list[tuple[str, str]]:
    """A ring's connections: each host to the next, on every channel."""
    n = len(hosts)
    return [(hosts[i], hosts[(i + 1) % n]) for i in range(n)] * channels


def whole_rate(rate: float) -> float:
    """`rate` rounded down to tens of packets/s, and at least MIN_LINE_RATE_PPS."""
    return max(MIN_LINE_RATE_PPS, 10 * math.floor(rate / 10))


LINK_RATES = ("file", "nic")    # --link-rate: the topology file's bandwidths, or every link at a rank NIC's rate


def nic_link_pps(channels: int, line_rate_pps: float) -> float:
    """`--link-rate nic`: a link's rate, in packets/s, that a rank's NIC
    fills: its channels to the next rank, each at the connection's top rate,
    and the ACKs that come back the same way (a BMv2 queue's rate counts
    packets, an ACK as one)."""
    return channels * line_rate_pps * (1 + RANK_ACK_SHARE)


def set_link_rates(raw: dict, link_pps: float) -> None:
    """Every link of the topology mapping `raw` at `link_pps` packets/s (its
    defaults and every link that gives its own bandwidth)."""
    mbps = round(link_pps * 8 * QUEUE_RATE_PACKET_BYTES / 1e6, 6)
    raw.setdefault("defaults", {}).setdefault("link", {})["bandwidth_mbps"] = mbps
    for link in raw["links"]:
        if isinstance(link, dict) and "bandwidth_mbps" in link:
            link["bandwidth_mbps"] = mbps


def fitting_scale(dilation: float, step: float = 0.05) -> float:
    """The largest share of a run's rates, a multiple of `step` and at most
    1 (never below `step`), that a plan's `dilation` says fits the budget."""
    return round(max(step, math.floor(min(1.0, 1 / dilation) / step + 1e-9) * step), 2)


def budget_scale(given: float | None, topo, flows: Sequence[Flow], composition: str = "fabric",
                 agents: str = "roce", step: float = 0.05, option: str = "--scale") -> tuple[float, str]:
    """The share of a run's rates (its links' and its senders' together:
    their ratios are the scenario) to run at, and how it was chosen:
    `given` (`option`); else the largest multiple of `step`, at most 1, at
    which `flows` over `topo` (the run at scale 1) fit the calibration's
    budget; else 1, said."""
    if given:
        return given, f"as given ({option})"
    cal, why = calibration_or_why()
    if cal is None:
        return 1.0, f"{why}: the rates as written"
    p = plan(demand(topo, flows, RANK_ACK_SHARE if agents == "rdma" else 0.0), cal, composition, agents=agents)
    return fitting_scale(p.dilation, step), f"the budget: at scale 1 this run {p}"


def rate_by_fit(fitted: run_costs.CostFit, cores: int) -> tuple[float, str]:
    """The rate whose cost by `fitted` (earlier runs of a composition here:
    emulator/run_costs.py) leaves the cores idle by the fidelity limit and
    its margin, and how it was chosen."""
    rate = whole_rate(fitted.rate_for(run_costs.target_busy_cores(cores)))
    return rate, (f"what this composition's earlier runs cost here: {fitted}; this rate leaves the cores "
                  f"{1 - fitted.busy(rate) / cores:.0%} idle by the fit")


def record_run_cost(identity: Identity, key: str, rate: float, cpu: CpuSummary | None) -> None:
    """What a run of composition `key` at `rate` cost (the cores busy over
    it), for the next run of it to size itself by; not when the hypervisor
    stole a share of the cores (the machine was not all the run's)."""
    if cpu is None or cpu.steal > MAX_STEAL_RECORDED:
        return
    busy = len(cpu.idle_per_core) * (1 - cpu.idle)
    if busy > 0:
        run_costs.record(identity, key, run_costs.RunCost(rate, round(busy, 3), run_costs.now_iso()))


def print_fidelity(rows: Sequence[dict], key: str = "case") -> None:
    """An experiment's last lines: its cases' fidelity (each row's
    `fidelity`), loudly where a case broke an invariant."""
    verdicts = {f"{r[key]}" + (f" (run {r['run']})" if "run" in r else ""): r["fidelity"]
                for r in rows if "fidelity" in r}
    print("\n" + report(verdicts, what="case"), flush=True)


def lost_before_pipeline(case: str, verdict: Verdict) -> str:
    """"leaf3:25 spine2:4 kernel:softnet:1": frames lost before a pipeline
    during a case (its interfaces received them, its ingress never counted
    them) and the kernel's own drops; printed loudly when there are any."""
    lost = " ".join(f"{where}:{n}" for where, n in verdict.input_path.items())
    if lost:
        print(f"!!! {case}: frames lost before the pipeline, seen by no P4 counter ({lost}): "
              f"the machine did not keep up with the offered load", flush=True)
    return lost
