#!/usr/bin/env python3
"""What mutual TLS and the authorizing proxy cost on P4Runtime: at start-up
and per write.

    python -m benchmarks.p4runtime_tls [--rounds 5] [--writes 300] [--batch 1000] [--switches 20]

One simple_switch_grpc (no ports, logging off) at a time, started with plain
gRPC, with the project's TLS (control/tls.py), or behind the authorizing
proxy (emulator/p4runtime_proxy.py: TLS to the proxy, BMv2 on a unix socket
behind it), the three alternating round by round so a machine that gets
busier loads them alike. Per round:
- start: the process spawned until a SwitchConnection has a channel and
  the arbitration answer (what the launcher waits for per switch);
- connect: a second connection to the running switch (channel, handshake,
  arbitration), the cost a tool such as the exporter pays per switch;
- push: the pipeline pushed (the largest message the controller sends);
- write: `--writes` Write RPCs of one route each (insert, then delete: the
  shape of a reroute), per RPC;
- batch: one Write of `--batch` routes, then one deleting them.
Prints the medians over the rounds and the ratios TLS / plain and proxy /
TLS; writes build/bench/p4runtime_tls.csv.

Then a fleet, once per mode TLS and proxy: `--switches` switches (one proxy
process serving them all), the controller's connections opened one after the
other (spawned until the last has its arbitration answer), one single-route
Write to each switch in turn (per RPC), and the proxy's CPU time and
resident memory. Numbers, not assertions.
"""
from __future__ import annotations

import argparse
import csv
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Iterator

from p4.v1 import p4runtime_pb2

from benchmarks.cases import DEVICE_ID, GRPC_ADDR, SWITCH_NAME, THRIFT_PORT
from emulator import toolchain
from emulator.bmv2 import switch_command
from emulator.build import compile_p4
from emulator.p4runtime_proxy import ProxiedSwitch, ProxyConfig, backend_address, proxy_command
from emulator.toolchain import require
from control.p4info import P4Info
from control.switch import CONTROLLER_CREDENTIALS, Pipeline, SwitchConnection, update
from control.tls import Pki

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "build" / "bench"
MODES = ("plain", "tls", "proxy")
MEASURES = ("start", "connect", "push", "write", "batch")
FLEET_MODES = ("tls", "proxy")
FLEET_GRPC_PORT, FLEET_THRIFT_PORT = 9420, 9320   # switch i of the fleet: apart from the launcher's and PTF's


@contextmanager
def switches(mode: str, plan: list[tuple[str, int, str, int]]) -> Iterator[subprocess.Popen | None]:
    """simple_switch_grpc per (name, device id, P4Runtime address, Thrift
    port) of `plan`, no ports, logging off, in `mode`: plain gRPC, TLS, or
    behind one proxy process (yielded; None in the other modes). Stopped on exit."""
    pki = Pki() if mode != "plain" else None
    creds = pki.ensure({name: [addr.rsplit(":", 1)[0]] for name, _, addr, _ in plan}) if pki else {}
    sockets = Path(tempfile.mkdtemp(prefix="bench-p4rt-")) if mode == "proxy" else None
    procs: list[subprocess.Popen] = []
    proxy = None
    try:
        for name, device_id, addr, thrift in plan:
            grpc_addr = backend_address(sockets, name) if sockets else addr
            cmd = switch_command(require("simple_switch_grpc"), device_id=device_id, thrift_port=thrift,
                                 grpc_addr=grpc_addr, ports={}, log_level="off", tls=creds[name] if mode == "tls" else None)
            procs.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT))
        if sockets and pki is not None:          # (mode "proxy": TLS, so there is a PKI)
            config = ProxyConfig(str(pki.ca_cert_path), tuple(
                ProxiedSwitch(name, addr, backend_address(sockets, name), str(creds[name].cert), str(creds[name].key))
                for name, _, addr, _ in plan)).write(sockets / "proxy.json")
            proxy = subprocess.Popen(proxy_command(config), stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, cwd=REPO)
            procs.append(proxy)
        yield proxy
    finally:
        for proc in reversed(procs):
            proc.terminate()
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if sockets:
            shutil.rmtree(sockets, ignore_errors=True)


def process_cost(pid: int) -> tuple[float, float]:
    """(CPU seconds, resident MB) of a running process."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    rss = int(fields[21]) * os.sysconf("SC_PAGE_SIZE") / 2 ** 20
    return cpu, rss


def routes(p4info: P4Info, count: int, offset: int = 0) -> list[p4runtime_pb2.TableEntry]:
    return [p4info.table_entry("ipv4_lpm", {"hdr.ipv4.dst_addr": f"10.{100 + (i >> 16) % 100}.{(i >> 8) & 255}.{i & 255}/32"},
                               action="set_next_id", params={"next_id": 1 + i % 8})
            for i in range(offset, offset + count)]


def one_round(mode: str, pipeline: Pipeline, p4info: P4Info, writes: int, batch: int) -> dict[str, float]:
    creds = CONTROLLER_CREDENTIALS if mode != "plain" else None
    out: dict[str, float] = {}
    t0 = time.perf_counter()
    with switches(mode, [(SWITCH_NAME, DEVICE_ID, GRPC_ADDR, THRIFT_PORT)]):
        with SwitchConnection(SWITCH_NAME, GRPC_ADDR, DEVICE_ID, connect_timeout=30, credentials=creds) as conn:
            out["start"] = time.perf_counter() - t0
            t = time.perf_counter()
            SwitchConnection(SWITCH_NAME, GRPC_ADDR, DEVICE_ID, connect_timeout=10, credentials=creds,
                             election_id=(1, 0)).close()
            out["connect"] = time.perf_counter() - t
            t = time.perf_counter()
            conn.push_pipeline(pipeline, force=True)
            out["push"] = time.perf_counter() - t
            entries = routes(p4info, writes)
            t = time.perf_counter()
            for e in entries:
                conn.write([update(p4runtime_pb2.Update.INSERT, table_entry=e)])
            for e in entries:
                conn.write([update(p4runtime_pb2.Update.DELETE, table_entry=e)])
            out["write"] = (time.perf_counter() - t) / (2 * writes)
            many = routes(p4info, batch, offset=writes)
            t = time.perf_counter()
            conn.write([update(p4runtime_pb2.Update.INSERT, table_entry=e) for e in many])
            conn.write([update(p4runtime_pb2.Update.DELETE, table_entry=e) for e in many])
            out["batch"] = (time.perf_counter() - t) / 2
    return out


def fleet(mode: str, count: int, pipeline: Pipeline, p4info: P4Info, writes: int) -> dict[str, float]:
    """`count` switches in `mode`: connected one after the other, then
    `writes` single-route Writes spread over them (insert, then delete)."""
    plan = [(f"{SWITCH_NAME}-{i}", i + 1, f"127.0.0.1:{FLEET_GRPC_PORT + i}", FLEET_THRIFT_PORT + i)
            for i in range(count)]
    out: dict[str, float] = {}
    t0 = time.perf_counter()
    with switches(mode, plan) as proxy, ExitStack() as stack:
        conns = [stack.enter_context(SwitchConnection(name, addr, device_id, connect_timeout=60,
                                                      credentials=CONTROLLER_CREDENTIALS))
                 for name, device_id, addr, _ in plan]
        out["start"] = time.perf_counter() - t0
        for conn in conns:
            conn.push_pipeline(pipeline, force=True)
        cpu0 = process_cost(proxy.pid)[0] if proxy else 0.0
        entries = routes(p4info, writes)
        t = time.perf_counter()
        for kind in (p4runtime_pb2.Update.INSERT, p4runtime_pb2.Update.DELETE):
            for i, e in enumerate(entries):
                conns[i % count].write([update(kind, table_entry=e)])
        out["write"] = (time.perf_counter() - t) / (2 * writes)
        if proxy:
            cpu, out["proxy_rss_mb"] = process_cost(proxy.pid)
            out["proxy_cpu_per_write"] = (cpu - cpu0) / (2 * writes)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.p4runtime_tls", description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5, help="rounds per mode (default: %(default)s)")
    ap.add_argument("--writes", type=int, default=300, help="single-route writes per round (default: %(default)s)")
    ap.add_argument("--batch", type=int, default=1000, help="routes in the batched write (default: %(default)s)")
    ap.add_argument("--switches", type=int, default=20, help="switches in the fleet, 0: none (default: %(default)s)")
    args = ap.parse_args(argv)
    pipeline = compile_p4()
    p4info = P4Info(pipeline.p4info())
    results: dict[str, list[dict[str, float]]] = {m: [] for m in MODES}
    print(f"P4Runtime, plain gRPC, mutual TLS and TLS through the authorizing proxy: {args.rounds} rounds each, "
          f"alternating; {args.writes} single writes, batches of {args.batch}", flush=True)
    for r in range(args.rounds):
        for mode in MODES:
            results[mode].append(one_round(mode, pipeline, p4info, args.writes, args.batch))
        print(f"  round {r + 1}/{args.rounds}: one-route write " +
              ", ".join(f"{m} {results[m][-1]['write'] * 1e6:.0f} us" for m in MODES), flush=True)
    med = {m: {k: statistics.median(row[k] for row in results[m]) for k in MEASURES} for m in MODES}
    unit = {"start": ("ms", 1e3), "connect": ("ms", 1e3), "push": ("ms", 1e3), "write": ("us", 1e6),
            "batch": ("ms", 1e3)}
    what = {"start": "switch spawned -> channel + arbitration", "connect": "another connection to it",
            "push": "pipeline push", "write": "one-route Write RPC", "batch": f"Write of {args.batch} routes"}
    print(f"{'':46s} {'plain':>10s} {'TLS':>10s} {'proxy':>10s} {'TLS/plain':>10s} {'proxy/TLS':>10s}")
    for k in MEASURES:
        name, scale = unit[k]
        print(f"{what[k] + ' (' + name + ')':46s} {med['plain'][k] * scale:10.1f} {med['tls'][k] * scale:10.1f} "
              f"{med['proxy'][k] * scale:10.1f} {med['tls'][k] / med['plain'][k]:10.2f} "
              f"{med['proxy'][k] / med['tls'][k]:10.2f}")
    fleets = {mode: fleet(mode, args.switches, pipeline, p4info, args.writes) for mode in FLEET_MODES} \
        if args.switches else {}
    if fleets:
        tls, proxy = fleets["tls"], fleets["proxy"]
        print(f"{args.switches} switches, one proxy process:")
        print(f"  spawned -> every connection arbitrated (ms)    {tls['start'] * 1e3:10.1f} {proxy['start'] * 1e3:10.1f}")
        print(f"  one-route Write, switches in turn (us)          {tls['write'] * 1e6:10.1f} {proxy['write'] * 1e6:10.1f}")
        print(f"  the proxy: {proxy['proxy_cpu_per_write'] * 1e6:.0f} us of CPU a write, "
              f"{proxy['proxy_rss_mb']:.0f} MB resident")
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / "p4runtime_tls.csv"
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["round", "mode", *(f"{k}_s" for k in MEASURES)])
        for mode in MODES:
            for i, row in enumerate(results[mode]):
                w.writerow([i + 1, mode, *(f"{row[k]:.6f}" for k in MEASURES)])
        for mode, row in fleets.items():
            w.writerow([f"fleet of {args.switches}", mode, f"{row['start']:.6f}", "", "", f"{row['write']:.6f}", ""])
    print(f"per-round numbers: {path} (toolchain: {toolchain.record(OUT)})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
