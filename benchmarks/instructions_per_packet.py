#!/usr/bin/env python3
"""CPU instructions BMv2 spends per packet on each benchmark program,
counted by valgrind's callgrind: a deterministic cost, the same from run to
run whatever else the machine is doing (forwarding_rate.py's packets per
second move with the load of a shared 2-core box). Use it to attribute a
change to the pipeline; use forwarding_rate.py for the rate users get.

    .venv/bin/python benchmarks/instructions_per_packet.py [--packets 2000] [--only fabric basic_router]

Method: simple_switch_grpc (logging off) runs under callgrind with
instrumentation off (so it starts at full speed); once the program and its
entries are in and a warm-up burst (sent far faster than BMv2 forwards under
valgrind, so that many packets are in flight) has filled BMv2's pool of
packet header vectors, instrumentation counts an idle interval (BMv2's and gRPC's
polling threads), then the same interval with N packets sent at a rate BMv2
keeps up with even under valgrind, at least 95% must come out of port 2 (a few are lost to the
kernel's socket buffer while valgrind is slow), instrumentation is switched off
and the counters dumped. Instructions per packet = (instructions with
traffic - instructions idle) / packets forwarded; a header vector BMv2 had
to create during the count anyway (more packets in flight than ever before:
~2M instructions once, not per packet) is not counted. Needs valgrind (Debian package `valgrind`).

A drop:<reason> case (benchmarks/cases.py drop_cases) offers frames the
switch drops: nothing comes out, so one forwarded frame is sent behind them
(BMv2's ingress takes packets in order) and the count is divided by what
the switch's drop_counter took for the reason.

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


from benchmarks.cases import IN_PORT, MAIN, OUT_PORT, PAIRS, REPO, Case, cases, compile_case, \
    connect, frames, make_veths, remove_veths, running_switch, rx_packets, select
from benchmarks.forwarding_rate import update_readme
from control.p4constants import drop_reasons
from control.p4info import P4Info
from emulator import toolchain
from emulator.toolchain import require
from hostagent.sender import RawSender

SEND_PPS = 60           # well below what BMv2 forwards under callgrind (INT on: ~150)
WARMUP_PACKETS = 300
WARMUP_PPS = 3000       # far above what BMv2 forwards under callgrind: many packets in flight at once
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
    with running_switch(case, pipeline, wrapper, timeout=180, tls=False) as switch:
        pid = str(switch.pid)
        # Warm-up: BMv2 allocates packet header vectors on demand, as many as
        # packets in flight, and keeps them in a pool; allocating one costs
        # about as much as the PHV is large. Fill the pool first, so the count
        # is the steady-state cost of a packet.
        offer(case, WARMUP_PACKETS / WARMUP_PPS, WARMUP_PPS, every_one=False)
        _wait_drained(PAIRS[OUT_PORT][1])
        dropped_before = dropped(case, pipeline) if case.drop_reason else 0
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
        sent, forwarded = offer(case, duration, SEND_PPS)
        callgrind_control("-i", "off", pid)
        callgrind_control("-d", pid)
        counted = forwarded
        if case.drop_reason:
            counted = dropped(case, pipeline) - dropped_before
            if forwarded < 1 or counted < 0.95 * sent:
                raise RuntimeError(f"{case.name}: sent {sent} packets, {counted} dropped as "
                                   f"DROP_{case.drop_reason}" + ("" if forwarded else ", the marker never came out"))
        elif forwarded < 0.95 * sent:
            raise RuntimeError(f"{case.name}: sent {sent} packets, only {forwarded} came out")
        busy = _latest_dump(case)
        if busy == idle:
            raise RuntimeError(f"{case.name}: callgrind wrote no second dump under {OUT_DIR}")
        grown = phv_creation(busy)
        if grown:
            print(f" (PHV pool grew during the count: {grown} instructions not counted)", end="", flush=True)
        return (total_instructions(busy) - grown - total_instructions(idle)) / counted


def dropped(case, pipeline) -> int:
    """Packets the switch counted as dropped for `case`'s reason (P4Runtime, drop_counter)."""
    index = drop_reasons()[case.drop_reason]
    with connect(case, tls=False) as conn:
        return conn.counter(P4Info(pipeline.p4info()).counter_entry("drop_counter", index)).get(index, (0, 0))[0]


def offer(case, duration: float, pps: float, every_one: bool = True, timeout: float = 60) -> tuple[int, int]:
    """(sent, came out): `case`'s frames at `pps` for `duration` s, then (with
    `every_one`) until they are out or `timeout` s passed. A drop case's frames never come out:
    one forwarded frame behind them (BMv2's ingress takes packets in order)
    says when ingress has had them all; its cost, one packet's in `sent`, is
    counted with them (0.1% at 1000)."""
    out = PAIRS[OUT_PORT][1]
    before = rx_packets(out)
    with RawSender(PAIRS[IN_PORT][1]) as sender:
        sent = sender.blast(frames(case), duration, pps)
        if case.drop_reason:
            sender.send(frames()[0])
    expected = 1 if case.drop_reason else sent if every_one else 0
    deadline = time.monotonic() + timeout
    while rx_packets(out) - before < expected and time.monotonic() < deadline:
        time.sleep(0.2)
    return sent, rx_packets(out) - before


def _wait_drained(iface: str, timeout: float = 60) -> None:
    """Until nothing more comes out of `iface` for a second (BMv2 under
    valgrind works through a burst slowly)."""
    deadline, last = time.monotonic() + timeout, -1
    while time.monotonic() < deadline:
        now = rx_packets(iface)
        if now == last:
            return
        last = now
        time.sleep(1.0)


def phv_creation(dump: Path) -> int:
    """Instructions spent creating packet header vectors in `dump`: BMv2
    creates one when more packets are in flight than ever before (a
    one-time cost of ~2M instructions each, not a per-packet one; the warm-up
    burst makes it rare)."""
    out = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--threshold=100", str(dump)],
                         capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        if "bm::PHVFactory::create()" in line:
            return int(line.split()[0].replace(",", ""))
    return 0


def _latest_dump(case) -> Path:
    dumps = sorted(OUT_DIR.glob(f"callgrind.{case.name}.*"), key=lambda p: int(p.suffix[1:]))
    if not dumps:
        raise RuntimeError(f"{case.name}: callgrind wrote no dump under {OUT_DIR}")
    return dumps[-1]


def summarise(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Ratios to the references, and each feature's cost: while off, the
    fabric's count minus the count with the feature compiled out
    (`fabric-<feature>`); while on, the count with it on minus the fabric's."""
    ipp = {r["program"]: r["instructions_per_packet"] for r in rows}
    router, fabric = ipp.get("basic_router"), ipp.get("fabric")
    out = []
    for r in rows:
        n, count = r["program"], r["instructions_per_packet"]
        cost = ""
        if fabric and n.startswith("fabric-"):
            cost = f"off: {fabric - count:+d} ({(fabric - count) / fabric:+.1%} of fabric)"
        elif fabric and n.startswith("fabric+"):
            cost = f"on: {count - fabric:+d} ({(count - fabric) / fabric:+.1%})"
        out.append({**r, "vs_basic_router": round(count / router, 3) if router else "",
                    "vs_fabric": round(count / fabric, 3) if fabric else "", "feature_cost": cost})
    return out


README_START, README_END = "<!-- instructions:start -->", "<!-- instructions:end -->"


def table(summary: list[dict[str, Any]], descr: dict[str, str]) -> str:
    lines = ["| program | what | instructions/packet | vs basic_router | vs fabric | feature cost |",
             "|---|---|---|---|---|---|"]
    for s in summary:
        lines.append(f"| `{s['program']}` | {descr[s['program']]} | {s['instructions_per_packet'] / 1000:.1f}k "
                     f"| {s['vs_basic_router']} | {s['vs_fabric']} | {s['feature_cost']} |")
    return "\n".join(lines)


def measure_each(chosen: list[Case], packets: int, what: str = "programs") -> dict[str, float]:
    """Compiles `chosen`, then counts each one's instructions per packet in
    turn, with progress (the bench veths exist only meanwhile)."""
    if not shutil.which("valgrind") or not shutil.which("callgrind_control"):
        raise SystemExit("needs valgrind (apt-get install valgrind)")
    pipelines = {c.name: compile_case(c) for c in chosen}
    print(f"BMv2: {require('simple_switch_grpc')} under callgrind; {packets} packets each, {len(chosen)} {what} "
          f"(about {len(chosen) * (2 * packets / SEND_PPS + 20) / 60:.0f} min)", flush=True)
    counts: dict[str, float] = {}
    make_veths()
    try:
        for i, c in enumerate(chosen, 1):
            print(f"[{i}/{len(chosen)}] {c.name:30s} ...", end="", flush=True)
            counts[c.name] = measure(c, pipelines[c.name], packets)
            print(f" {counts[c.name]:10.0f} instructions/packet", flush=True)
    finally:
        remove_veths()
    return counts


def write_results(rows: list[dict[str, Any]], path: Path, text: str, readme: Path | None,
                  markers: tuple[str, str]) -> None:
    """`rows` as CSV at `path`; `text` printed, and put between `markers` in `readme` if given."""
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[-1]))
        w.writeheader()
        w.writerows(rows)
    toolchain.record(path.parent)
    print("\n" + text)
    if readme:
        update_readme(readme, text, *markers)
        print(f"table updated: {readme}")
    print(f"outputs: {path}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Instructions per packet of each benchmark program (callgrind).")
    ap.add_argument("--packets", type=int, default=2000, help="packets counted per program (default 2000)")
    ap.add_argument("--only", nargs="*", help="only these programs")
    ap.add_argument("--fabric", type=Path, default=MAIN, help="measure this P4 program as the fabric")
    ap.add_argument("--readme", type=Path, help="rewrite the instructions table (between its markers) in this file")
    args = ap.parse_args(argv)
    toolchain.use_fast_bmv2()      # the build the experiments run on, as `fabric bench` (unless $P4_TOOLCHAIN_BIN)
    chosen = select(cases(args.fabric), args.only)
    counts = measure_each(chosen, args.packets)
    summary = summarise([{"program": name, "instructions_per_packet": round(n)} for name, n in counts.items()])
    write_results(summary, OUT_DIR / "instructions_per_packet.csv", table(summary, {c.name: c.what for c in chosen}),
                  args.readme, (README_START, README_END))
    return 0


if __name__ == "__main__":
    sys.exit(main())
