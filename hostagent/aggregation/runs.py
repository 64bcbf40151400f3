"""Running all-reduces on a live network: one process per worker (and the
job's parameter server) in the hosts' namespaces, as a user would run them,
for the aggregation experiments and the end-to-end tests.

    runs = run_ina(topo, job=2, elements=1 << 20, dtype="float32", out=Path("results/x"))
    runs = run_ring(topo, hosts=["h1", "h2"], elements=..., out=...)
    with impaired(topo, ["h1", "h2"], loss_pct=1, duplicate_pct=1, reorder_pct=5):
        ...

Each returns the workers' JSON summaries (hostagent.aggregation.allreduce /
hostagent.aggregation.ring_allreduce --out), in rank order; a worker that failed raises
RunFailed with the tail of its output.
"""
from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator, Optional

from emulator.impairments import netem_available
from hostagent.start import StartGate

REPO = Path(__file__).resolve().parents[2]
PY = str(REPO / ".venv" / "bin" / "python") if (REPO / ".venv").exists() else sys.executable
RING_PORT = 47000


class RunFailed(RuntimeError):
    pass


def _in_netns(host: str, args: list[str], log: Path) -> subprocess.Popen:
    log.parent.mkdir(parents=True, exist_ok=True)
    f = open(log, "w")
    return subprocess.Popen(["ip", "netns", "exec", host, PY, *args], cwd=REPO, stdout=f, stderr=subprocess.STDOUT)


def _collect(procs: list[tuple[str, subprocess.Popen, Path, Path]], timeout_s: float) -> list[dict]:
    deadline = time.monotonic() + timeout_s
    results, failures = [], []
    for name, proc, log, prefix in procs:
        rc: int | str
        try:
            rc = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            rc = "timeout"
        if rc != 0:
            failures.append(f"{name} (exit {rc}):\n" + "".join(log.read_text().splitlines(True)[-8:]))
            continue
        results.append(json.loads(prefix.with_suffix(".json").read_text()))
    if failures:
        raise RunFailed("\n".join(failures))
    return results


def start_server(topo, job: int, out: Path) -> subprocess.Popen:
    j = topo.features["aggregation"].job(job)
    ips = [topo.hosts[w].ip for w in j.workers]
    return _in_netns(j.server, ["-m", "hostagent.aggregation.parameter_server", "--job", str(job), "--workers", ",".join(ips),
                                "--out", str(out / f"server-job{job}")], out / f"server-job{job}.log")


def wait_listening(proc: subprocess.Popen, out: Path, job: int, timeout_s: float = 60.0) -> None:
    """Return once the job's parameter server (start_server) says it is
    listening: a worker must not send a block it falls back to before."""
    log = out / f"server-job{job}.log"
    deadline = time.monotonic() + timeout_s
    while "parameter server job" not in (log.read_text() if log.exists() else ""):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RunFailed(f"job {job}'s parameter server is not listening (exit {proc.poll()}):\n"
                            + (log.read_text()[-2000:] if log.exists() else "(no log)"))
        time.sleep(0.02)


def stop_server(proc: subprocess.Popen, out: Path, job: int) -> dict:
    proc.terminate()
    proc.wait(timeout=10)
    path = out / f"server-job{job}.json"
    return json.loads(path.read_text()) if path.exists() else {}


def ina_workers(topo, job: int, *, elements: int, dtype: str, out: Path, seed: int = 1, repeat: int = 1,
                window: int = 32, gate: StartGate, timeout_s: float, ecn: bool = False) -> list[tuple]:
    """Start the job's workers (not waiting; they start when `gate` opens):
    [(name, proc, log, prefix)]."""
    j = topo.features["aggregation"].job(job)
    server_ip = topo.hosts[j.server].ip
    procs = []
    for rank, w in enumerate(j.workers):
        prefix = out / f"job{job}-worker{rank}"
        args = ["-m", "hostagent.aggregation.allreduce", "--job", str(job), "--server", server_ip, "--rank", str(rank),
                "--workers", str(len(j.workers)), "--elements", str(elements), "--dtype", dtype,
                "--seed", str(seed), "--repeat", str(repeat), "--window", str(window),
                "--timeout-s", str(timeout_s), *gate.args(), "--out", str(prefix),
                "--block-elements", str(j.block_elements), *(["--ecn"] if ecn else [])]
        procs.append((f"job {job} worker {rank} ({w})", _in_netns(w, args, prefix.with_suffix(".log")),
                      prefix.with_suffix(".log"), prefix))
    return procs


def run_ina(topo, job: int, *, elements: int, dtype: str, out: Path, seed: int = 1, repeat: int = 1,
            window: int = 32, timeout_s: float = 300.0, ecn: bool = False) -> list[dict]:
    """One job's all-reduce through the switch(es), with its parameter server."""
    out.mkdir(parents=True, exist_ok=True)
    server = start_server(topo, job, out)
    try:
        gate = StartGate(out)
        procs = ina_workers(topo, job, elements=elements, dtype=dtype, out=out, seed=seed, repeat=repeat,
                            window=window, gate=gate, timeout_s=timeout_s, ecn=ecn)
        wait_listening(server, out, job)
        gate.open([p for _, p, _, _ in procs])
        results = _collect(procs, timeout_s + 30)
    finally:
        server_stats = stop_server(server, out, job)
    for r in results:
        r["server"] = server_stats
    return results


def run_jobs(topo, jobs: list[int], *, elements: int, dtype: str, out: Path, seed: int = 1,
             window: int = 32, timeout_s: float = 300.0) -> dict[int, list[dict]]:
    """Several jobs at once (each with its server), started together."""
    out.mkdir(parents=True, exist_ok=True)
    servers = {job: start_server(topo, job, out) for job in jobs}
    try:
        gate = StartGate(out)                       # every job's workers start together
        procs = {job: ina_workers(topo, job, elements=elements, dtype=dtype, out=out, seed=seed + job,
                                  window=window, gate=gate, timeout_s=timeout_s) for job in jobs}
        for job, server in servers.items():
            wait_listening(server, out, job)
        gate.open([p for ps in procs.values() for _, p, _, _ in ps])
        results = {job: _collect(p, timeout_s + 30) for job, p in procs.items()}
    finally:
        stats = {job: stop_server(s, out, job) for job, s in servers.items()}
    for job, rs in results.items():
        for r in rs:
            r["server"] = stats[job]
    return results


def run_ring(topo, hosts: list[str], *, elements: int, dtype: str, out: Path, seed: int = 1, repeat: int = 1,
             timeout_s: float = 300.0) -> list[dict]:
    """The baseline: ring all-reduce over UDP between `hosts`, through the same switches."""
    out.mkdir(parents=True, exist_ok=True)
    addresses = ",".join(topo.hosts[h].ip for h in hosts)
    procs = []
    for rank, h in enumerate(hosts):
        prefix = out / f"ring-worker{rank}"
        args = ["-m", "hostagent.aggregation.ring_allreduce", "--rank", str(rank), "--addresses", addresses,
                "--port", str(RING_PORT), "--elements", str(elements), "--dtype", dtype, "--seed", str(seed),
                "--repeat", str(repeat), "--out", str(prefix)]
        procs.append((f"ring worker {rank} ({h})", _in_netns(h, args, prefix.with_suffix(".log")),
                      prefix.with_suffix(".log"), prefix))
    return _collect(procs, timeout_s)


def _run(ns: Optional[str], *cmd: str) -> None:
    subprocess.run((["ip", "netns", "exec", ns] if ns else []) + list(cmd), check=True, capture_output=True,
                   text=True)


@contextlib.contextmanager
def impaired(topo, hosts: list[str], *, loss_pct: float, duplicate_pct: float = 0.0,
             reorder_pct: float = 0.0) -> Iterator[str]:
    """Loss on both directions of each host's link, duplication and
    reordering of what the host sends; undone afterwards. Yields how.

    With netem: `netem loss L% duplicate D% delay 1ms reorder R%` on both
    ends of the link. Without it (the qdisc is missing from some kernels),
    the same from netfilter and HTB in the host's namespace: packets sent
    and received are dropped at random (iptables statistic), sent ones are
    duplicated (TEE to the gateway), and R% of sent ones go through an HTB
    class of 1 Mbit/s, which holds them while later packets pass (reordering)."""
    if netem_available():
        spec = ["loss", f"{loss_pct}%", "duplicate", f"{duplicate_pct}%", "delay", "1ms",
                "reorder", f"{100 - reorder_pct}%"]
        ends = []
        for h in hosts:
            host = topo.hosts[h]
            port = next(p for p in topo.switches[host.switch].ports.values() if p.number == host.switch_port)
            ends += [(h, host.iface), (None, port.iface)]
        try:
            for ns, dev in ends:
                _run(ns, "tc", "qdisc", "replace", "dev", dev, "root", "netem", *spec)
            yield "tc netem " + " ".join(spec)
        finally:
            for ns, dev in ends:
                with contextlib.suppress(subprocess.CalledProcessError):
                    _run(ns, "tc", "qdisc", "del", "dev", dev, "root")
        return
    rules = [("raw", "PREROUTING", ["-m", "statistic", "--mode", "random", "--probability",
                                    f"{loss_pct / 100:.4f}", "-j", "DROP"]),
             ("mangle", "POSTROUTING", ["-m", "statistic", "--mode", "random", "--probability",
                                        f"{loss_pct / 100:.4f}", "-j", "DROP"])]
    try:
        for h in hosts:
            host = topo.hosts[h]
            for table, chain, rule in rules:
                _run(h, "iptables", "-t", table, "-A", chain, *rule)
            if duplicate_pct:
                _run(h, "iptables", "-t", "mangle", "-A", "POSTROUTING", "-m", "statistic", "--mode", "random",
                     "--probability", f"{duplicate_pct / 100:.4f}", "-j", "TEE", "--gateway", host.gateway_ip)
            if reorder_pct:
                dev = host.iface
                _run(h, "tc", "qdisc", "replace", "dev", dev, "root", "handle", "1:", "htb", "default", "10")
                _run(h, "tc", "class", "add", "dev", dev, "parent", "1:", "classid", "1:10", "htb",
                     "rate", "10gbit")
                _run(h, "tc", "class", "add", "dev", dev, "parent", "1:", "classid", "1:20", "htb",
                     "rate", "1mbit", "ceil", "1mbit")
                _run(h, "iptables", "-t", "mangle", "-A", "POSTROUTING", "-m", "statistic", "--mode", "random",
                     "--probability", f"{reorder_pct / 100:.4f}", "-j", "CLASSIFY", "--set-class", "1:20")
        yield (f"iptables: {loss_pct}% loss each way, {duplicate_pct}% duplicated, {reorder_pct}% reordered "
               f"(HTB 1 Mbit/s class); this kernel has no netem")
    finally:
        for h in hosts:
            for table in ("raw", "mangle"):
                with contextlib.suppress(subprocess.CalledProcessError):
                    _run(h, "iptables", "-t", table, "-F")
            with contextlib.suppress(subprocess.CalledProcessError):
                _run(h, "tc", "qdisc", "del", "dev", topo.hosts[h].iface, "root")
