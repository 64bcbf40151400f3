#!/usr/bin/env python3
"""CPU instructions BMv2 spends per packet on each benchmark program,
counted by valgrind's callgrind: a deterministic cost, the same from run to
run whatever else the machine is doing (forwarding_rate.py's packets per
second move with the load of a shared 2-core box). Use it to attribute a
change to the pipeline; use forwarding_rate.py for the rate users get.

    .venv/bin/python benchmarks/instructions_per_packet.py [--packets 2000] [--only fabric basic_router]

Method: simple_switch_grpc (logging off) runs under callgrind with
instrumentation off (so it starts at full speed); once the program and its
entries are in and a warm-up burst has filled BMv2's pool of packet header
vectors, instrumentation counts an idle interval (BMv2's and gRPC's
polling threads), then the same interval with N packets sent at a rate BMv2
keeps up with even under valgrind, at least 95% must come out of port 2 (a few are lost to the
kernel's socket buffer while valgrind is slow), instrumentation is switched off
and the counters dumped. Instructions per packet = (instructions with
traffic - instructions idle) / packets forwarded. Needs valgrind (Debian package `valgrind`).

Writes build/bench/instructions_per_packet.csv.
"""
from __future__ import annotations

import argparse
import csv
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any


from benchmarks.cases import IN_PORT, MAIN, OUT_PORT, PAIRS, REPO, cases, frames, make_veths, remove_veths, \
    running_switch, rx_packets, select
from core.build import compile_p4
from hostagent.sender import RawSender

SEND_PPS = 60           # well below what BMv2 forwards under callgrind (INT on: ~150)
WARMUP_PACKETS = 200
OUT_DIR = REPO / "build" / "bench"


def callgrind_control(*args: str) -> None:
    subprocess.run(["callgrind_control", *args], check=True, capture_output=True, timeout=60)


def total_instructions(dump: Path) -> int:
    for line in dump.read_text(errors="replace").splitlines():
        if line.startswith("totals:"):
            return int(line.split()[1])
    raise RuntimeError(f"{dump}: no totals line")


def measure(case, pipeline, packets: int) -> float:
    out_prefix = OUT_DIR / f"callgrind.{case.name}"
    for old in [out_prefix, *OUT_DIR.glob(f"{out_prefix.name}.*")]:
        old.unlink(missing_ok=True)
    wrapper = ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out_prefix}"]
    with running_switch(case, pipeline, wrapper, timeout=180) as switch:
        pid = str(switch.pid)
        # Warm-up: BMv2 allocates packet header vectors on demand, as many as
        # packets in flight, and keeps them in a pool; allocating one costs
        # about as much as the PHV is large. Fill the pool first, so the count
        # is the steady-state cost of a packet.
        with RawSender(PAIRS[IN_PORT][1]) as sender:
            sender.blast(frames(case), WARMUP_PACKETS / SEND_PPS, SEND_PPS)
        time.sleep(1.0)
        duration = packets / SEND_PPS
        # Idle: the same time without traffic. BMv2's and gRPC's threads poll
        # while idle; that work grows with time, not with packets, and is
        # subtracted, so the result does not depend on the send rate.
        callgrind_control("-i", "on", pid)
        time.sleep(duration)
        callgrind_control("-i", "off", pid)
        callgrind_control("-d", pid)
        idle = _latest_dump(case)
        callgrind_control("-i", "on", pid)
        before = rx_packets(PAIRS[OUT_PORT][1])
        with RawSender(PAIRS[IN_PORT][1]) as sender:
            sent = sender.blast(frames(case), duration, SEND_PPS)
        deadline = time.monotonic() + 60
        while rx_packets(PAIRS[OUT_PORT][1]) - before < sent and time.monotonic() < deadline:
            time.sleep(0.2)
        forwarded = rx_packets(PAIRS[OUT_PORT][1]) - before
        callgrind_control("-i", "off", pid)
        callgrind_control("-d", pid)
        if forwarded < 0.95 * sent:
            raise RuntimeError(f"{case.name}: sent {sent} packets, only {forwarded} came out")
        busy = _latest_dump(case)
        if busy == idle:
            raise RuntimeError(f"{case.name}: callgrind wrote no second dump under {OUT_DIR}")
        return (total_instructions(busy) - total_instructions(idle)) / forwarded


def _latest_dump(case) -> Path:
    dumps = sorted(OUT_DIR.glob(f"callgrind.{case.name}.*"), key=lambda p: int(p.suffix[1:]))
    if not dumps:
        raise RuntimeError(f"{case.name}: callgrind wrote no dump under {OUT_DIR}")
    return dumps[-1]


def main() -> int:
    ap = argparse.ArgumentParser(description="Instructions per packet of each benchmark program (callgrind).")
    ap.add_argument("--packets", type=int, default=2000, help="packets counted per program (default 2000)")
    ap.add_argument("--only", nargs="*", help="only these programs")
    ap.add_argument("--fabric", type=Path, default=MAIN, help="measure this P4 program as the fabric")
    args = ap.parse_args()
    if not shutil.which("valgrind") or not shutil.which("callgrind_control"):
        raise SystemExit("needs valgrind (apt-get install valgrind)")
    chosen = select(cases(args.fabric), args.only)
    pipelines = {c.name: compile_p4(c.source, OUT_DIR / f"{c.source.parent.name}-{c.source.stem}") for c in chosen}
    make_veths()
    rows: list[dict[str, Any]] = []      # CSV rows: program name, counts, ratios
    try:
        for c in chosen:
            print(f"{c.name:22s} ...", end="", flush=True)
            ipp = measure(c, pipelines[c.name], args.packets)
            rows.append({"program": c.name, "instructions_per_packet": round(ipp)})
            print(f" {ipp:10.0f} instructions/packet", flush=True)
    finally:
        remove_veths()
    ref = {r["program"]: r["instructions_per_packet"] for r in rows}
    if "basic_router" in ref:
        for r in rows:
            r["vs_basic_router"] = round(r["instructions_per_packet"] / ref["basic_router"], 3)
    path = OUT_DIR / "instructions_per_packet.csv"
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[-1]))
        w.writeheader()
        w.writerows(rows)
    print(f"outputs: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
