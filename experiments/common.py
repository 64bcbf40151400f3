"""Shared by the experiments: writing results, and the faults they inject
(each fault returns the function that undoes it)."""
from __future__ import annotations

import contextlib
import csv
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Sequence

from core.bmv2_thrift import Bmv2Thrift
from features.ecn import QDEPTH_REGISTER

REPO = Path(__file__).resolve().parent.parent


def write_csv(path: Path, rows: list[dict]) -> Path:
    """Rows (dicts) as a CSV with a header of every key, in order of first
    appearance (a key a row lacks is left empty); return the path."""
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(dict.fromkeys(k for r in rows for k in r)))
        w.writeheader()
        w.writerows(rows)
    return path


def agent_python() -> str:
    """The Python the host agents run with: the project's virtualenv's if there is one."""
    venv = REPO / ".venv" / "bin" / "python"
    return str(venv) if venv.exists() else sys.executable


def _agent(module: str, host, role: str, start_at: float, out_dir: Path, extra: Sequence[str],
           stem: str | None = None) -> subprocess.Popen:
    cmd = ["ip", "netns", "exec", host.name, agent_python(), "-m", module, role,
           "--iface", host.iface, "--src-ip", host.ip, "--src-mac", host.mac, "--gw-mac", host.gateway_mac,
           "--start-at", str(start_at), "--out", str(out_dir / (stem or f"{role}-{host.name}")), *extra]
    return subprocess.Popen(cmd, cwd=REPO)


def roce_agent(host, role: str, *, start_at: float, out_dir: Path, extra: Sequence[str] = ()) -> subprocess.Popen:
    """hostagent.ecn.roce `role` ("send" or "receive") in `host`'s namespace,
    starting at wall-clock `start_at` (agents start together), writing
    out_dir/<role>-<host>.json and .csv."""
    return _agent("hostagent.ecn.roce", host, role, start_at, out_dir, extra)


def rdma_agent(host, role: str, *, start_at: float, out_dir: Path, extra: Sequence[str] = (),
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


def sample_queue(thrift: Bmv2Thrift, port: int, stop: threading.Event, t0: float, out: list) -> None:
    """Until `stop`: every 5 ms, (seconds since t0, the depth the last packet
    leaving `port` met: the ECN feature's egress_qdepth register)."""
    while not stop.is_set():
        out.append((time.time() - t0, thrift.register_read(QDEPTH_REGISTER, port)))
        time.sleep(0.005)


def print_table(rows: list[dict], width: int = 13) -> None:
    """Rows (dicts with the same keys) as right-aligned columns on stdout."""
    cols = list(rows[0])
    print("\n" + " ".join(f"{c:>{width}s}" for c in cols))
    for r in rows:
        print(" ".join(f"{r[c]!s:>{width}s}" for c in cols))
