#!/usr/bin/env python3
"""What mutual TLS costs on P4Runtime: at start-up and per write.

    python -m benchmarks.p4runtime_tls [--rounds 5] [--writes 300] [--batch 1000]

One simple_switch_grpc (no ports, logging off) at a time, started with plain
gRPC or with the project's TLS (control/tls.py), the two alternating round by
round so a machine that gets busier loads both alike. Per round:
- start: the process spawned until a SwitchConnection has a channel and
  the arbitration answer (what the launcher waits for per switch);
- connect: a second connection to the running switch (channel, handshake,
  arbitration), the cost a tool such as the exporter pays per switch;
- push: the pipeline pushed (the largest message the controller sends);
- write: `--writes` Write RPCs of one route each (insert, then delete: the
  shape of a reroute), per RPC;
- batch: one Write of `--batch` routes, then one deleting them.
Prints the medians over the rounds and the ratio TLS / plain; writes
build/bench/p4runtime_tls.csv. Numbers, not assertions.
"""
from __future__ import annotations

import argparse
import csv
import statistics
import time
from pathlib import Path

from p4.v1 import p4runtime_pb2

from benchmarks.cases import DEVICE_ID, GRPC_ADDR, SWITCH_NAME, switch_process
from emulator import toolchain
from emulator.build import compile_p4
from control.p4info import P4Info
from control.switch import CONTROLLER_CREDENTIALS, Pipeline, SwitchConnection, update

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "build" / "bench"
MODES = ("plain", "tls")
MEASURES = ("start", "connect", "push", "write", "batch")


def routes(p4info: P4Info, count: int, offset: int = 0) -> list[p4runtime_pb2.TableEntry]:
    return [p4info.table_entry("ipv4_lpm", {"hdr.ipv4.dst_addr": f"10.{100 + (i >> 16) % 100}.{(i >> 8) & 255}.{i & 255}/32"},
                               action="set_next_id", params={"next_id": 1 + i % 8})
            for i in range(offset, offset + count)]


def one_round(mode: str, pipeline: Pipeline, p4info: P4Info, writes: int, batch: int) -> dict[str, float]:
    creds = CONTROLLER_CREDENTIALS if mode == "tls" else None
    out: dict[str, float] = {}
    t0 = time.perf_counter()
    with switch_process({}, tls=mode == "tls"):
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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.p4runtime_tls", description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5, help="rounds per mode (default: %(default)s)")
    ap.add_argument("--writes", type=int, default=300, help="single-route writes per round (default: %(default)s)")
    ap.add_argument("--batch", type=int, default=1000, help="routes in the batched write (default: %(default)s)")
    args = ap.parse_args(argv)
    pipeline = compile_p4()
    p4info = P4Info(pipeline.p4info())
    results: dict[str, list[dict[str, float]]] = {m: [] for m in MODES}
    print(f"P4Runtime, plain gRPC against mutual TLS: {args.rounds} rounds each, alternating; "
          f"{args.writes} single writes, batches of {args.batch}", flush=True)
    for r in range(args.rounds):
        for mode in MODES:
            results[mode].append(one_round(mode, pipeline, p4info, args.writes, args.batch))
        print(f"  round {r + 1}/{args.rounds}: start plain {results['plain'][-1]['start'] * 1e3:.0f} ms, "
              f"tls {results['tls'][-1]['start'] * 1e3:.0f} ms", flush=True)
    med = {m: {k: statistics.median(row[k] for row in results[m]) for k in MEASURES} for m in MODES}
    unit = {"start": ("ms", 1e3), "connect": ("ms", 1e3), "push": ("ms", 1e3), "write": ("us", 1e6),
            "batch": ("ms", 1e3)}
    what = {"start": "switch spawned -> channel + arbitration", "connect": "another connection to it",
            "push": "pipeline push", "write": "one-route Write RPC", "batch": f"Write of {args.batch} routes"}
    print(f"{'':46s} {'plain':>10s} {'TLS':>10s} {'TLS/plain':>10s}")
    for k in MEASURES:
        name, scale = unit[k]
        print(f"{what[k] + ' (' + name + ')':46s} {med['plain'][k] * scale:10.1f} {med['tls'][k] * scale:10.1f} "
              f"{med['tls'][k] / med['plain'][k]:10.2f}")
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / "p4runtime_tls.csv"
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["round", "mode", *(f"{k}_s" for k in MEASURES)])
        for mode in MODES:
            for i, row in enumerate(results[mode]):
                w.writerow([i + 1, mode, *(f"{row[k]:.6f}" for k in MEASURES)])
    print(f"per-round numbers: {path} (toolchain: {toolchain.record(OUT)})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
