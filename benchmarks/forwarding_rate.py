#!/usr/bin/env python3
"""What the fabric pipeline costs on BMv2, and what each feature adds.

Measured in one run, on the same BMv2 build, logging off:
  port_forward   p4src/baseline/port_forward.p4: no parsing, port 1 -> 2 (the I/O limit)
  basic_router   p4src/baseline/basic_router.p4: one LPM table, TTL, checksum
                 update (the work of p4lang/tutorials' basic exercise)
  forwarding_only  p4src/main.p4 with every feature compiled out (-DWITHOUT_<FEATURE>)
  fabric         p4src/main.p4 with every feature off: LPM, 16-slot ECMP
                 group, counters, checksum verification
  fabric-<f>     the same with feature <f> compiled out: its cost while off
  fabric+<f>     the same with feature <f> switched on for all the traffic
                 (each feature module's bench_state(), control/feature.py)
and the host agent's sender loop (hostagent.ecn.roce, unpaced) on the same veth,
so experiments can check the traffic source is not what limits them.

Method. Two veth pairs; simple_switch_grpc between them; a paced sender
process sends prebuilt 64-byte UDP frames (8 flows, ECT(0)) into port 1;
the forwarded rate is what leaves port 2, read from the receiving veth's
kernel counters over the window (after a 1 s warm-up). The machine's cores
are shared by BMv2 and the sender, so the offered load is not "as fast as
possible": each program is first probed for a short while, then offered
OVERLOAD x the probed rate, raised by OVERLOAD again for as long as BMv2
still forwards nearly all of it (calibrate()). That keeps BMv2's input
queue non-empty (so it is measured saturated) while the sender spends no
more CPU than needed. A row whose runs forwarded more than SATURATED of
what was offered is marked "not saturated" in the table. A feature that
brings its own frames (aggregation: four workers' contributions, results
multicast) loses nearly all its output when overloaded (a result needs every
contribution of its block), so it is measured at the highest rate it keeps
up with instead (_highest_kept_up()).
Programs are measured in turn, round after round, and the median of the
rounds is reported, with the offered rate next to it.

Writes build/bench/forwarding_rate.csv (every run), summary.csv and
forwarding_rate.png; with --readme, rewrites the table between the bench
markers of README.md. Numbers, not assertions.
"""
from __future__ import annotations

import argparse
import csv
import json
import multiprocessing as mp
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path


from benchmarks.cases import (DST_IP, HOST_MAC, IN_PORT, MAIN, OUT_PORT, PAIRS, REPO, SRC_IP, SWITCH_MAC,
                   Case, cases, compile_case, frames, make_veths, remove_veths, running_switch, rx_packets, select)
from control.switch import Pipeline
from emulator.fidelity import CpuSampler, summarise_cpu
from emulator import toolchain
from hostagent.sender import RawSender

OVERLOAD = 1.25           # offered = OVERLOAD x probed capacity
PROBE_PPS = 150_000       # the probe's offered load: above what BMv2 forwards here
SATURATED = 0.97          # forwarding more than this share of the offered load: not saturated
RAISES = 8                # calibration raises the offered load by OVERLOAD at most this often (1.25^8: 6x)
KEPT_UP_START_PPS = 1000  # cases with their own frames: the first rate tried
WARMUP_S = 1.0


# -- one measurement -----------------------------------------------------------

def _blast(iface: str, offered: list[bytes], duration: float, rate_pps: float, out) -> None:
    with RawSender(iface) as s:
        out.put(s.blast(offered, duration, rate_pps))


def measure(case: Case, pipeline: Pipeline, duration: float, offered_pps: float) -> tuple[float, float]:
    """(forwarded pps, offered pps actually sent) for one run of `case`."""
    with running_switch(case, pipeline):
        queue: mp.Queue = mp.Queue()
        total = WARMUP_S + duration + 0.5
        sender = mp.Process(target=_blast, args=(PAIRS[IN_PORT][1], frames(case), total, offered_pps, queue))
        sender.start()
        time.sleep(WARMUP_S)
        before, t0 = rx_packets(PAIRS[OUT_PORT][1]), time.perf_counter()
        time.sleep(duration)
        after, t1 = rx_packets(PAIRS[OUT_PORT][1]), time.perf_counter()
        sender.join()
    return (after - before) / (t1 - t0), queue.get() / total


def calibrate(case: Case, pipeline: Pipeline) -> float:
    """The offered load for `case`: OVERLOAD x what a probe forwarded, raised
    while BMv2 keeps up with it (the sender shares the CPU, so a probe at
    PROBE_PPS can under-estimate what BMv2 forwards when offered less)."""
    if case.frames is not None:
        return _highest_kept_up(case, pipeline)
    probe, _ = measure(case, pipeline, 2.0, PROBE_PPS)
    offered = OVERLOAD * probe
    for _ in range(RAISES):   # a probe that starved BMv2 can be a quarter of its rate
        forwarded, sent = measure(case, pipeline, 2.0, offered)
        if forwarded < SATURATED * sent:
            break
        offered *= OVERLOAD
    print(f"calibrated {case.name:22s} probe {probe:8.0f} pps -> offering {offered:.0f} pps", flush=True)
    return offered


def _highest_kept_up(case: Case, pipeline: Pipeline) -> float:
    """For a feature's own frames whose output is not one packet per packet
    (aggregation: a result leaves only when every contribution of a block
    arrived, so overload loses nearly everything): the highest offered rate,
    from KEPT_UP_START_PPS up by OVERLOAD, that BMv2 still keeps up with."""
    offered: float = KEPT_UP_START_PPS
    kept: float = KEPT_UP_START_PPS
    for _ in range(16):
        forwarded, sent = measure(case, pipeline, 2.0, offered)
        if forwarded < SATURATED * sent:
            break
        kept = offered
        offered *= OVERLOAD
    print(f"calibrated {case.name:22s} kept up with {kept:.0f} pps (its own frames)", flush=True)
    return kept


def measure_agent(duration: float) -> float:
    """Packets per second the DCQCN sender loop reaches with no pacing limit."""
    out = REPO / "build" / "bench" / "agent-sender"
    subprocess.run([sys.executable, "-m", "hostagent.ecn.roce", "send", "--iface", PAIRS[IN_PORT][1],
                    "--src-ip", SRC_IP, "--src-mac", HOST_MAC, "--gw-mac", SWITCH_MAC,
                    "--dst-ip", DST_IP, "--qp", "1", "--duration", str(duration),
                    "--line-rate-pps", "10000000", "--min-rate-pps", "1", "--out", str(out)],
                   cwd=REPO, check=True, capture_output=True)
    return json.loads(out.with_suffix(".json").read_text())["sent"] / duration


# -- reporting -----------------------------------------------------------------

def summarise(rows: list[dict], names: list[str]) -> list[dict]:
    med = {n: statistics.median(r["forwarded_pps"] for r in rows if r["program"] == n) for n in names}
    offered = {n: statistics.median(r["offered_pps"] for r in rows if r["program"] == n) for n in names}
    fabric = med.get("fabric")
    out = []
    for n in names:
        saturated = med[n] < SATURATED * offered[n]
        out.append({"program": n, "forwarded_pps": round(med[n]), "offered_pps": round(offered[n]),
                    "saturated": saturated,
                    "vs_port_forward": round(med[n] / med["port_forward"], 3),
                    "vs_basic_router": round(med[n] / med["basic_router"], 3),
                    "feature_cost": _feature_cost(n, med[n], fabric)})
    return out


def _feature_cost(name: str, pps: float, fabric: float | None) -> str:
    """Packets/s a feature costs: on (fabric+<f>), what the fabric loses with
    it on; off (fabric-<f>, the feature compiled out), what the shipped fabric
    forwards less than the fabric without it."""
    if not fabric:
        return ""
    if name.startswith("fabric+"):
        return f"on: {1 - pps / fabric:.1%}"
    if name.startswith("fabric-"):
        return f"off: {1 - fabric / pps:.1%}"
    return ""


def plot(summary: list[dict], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [s["program"] for s in summary]
    fig, ax = plt.subplots(figsize=(1.4 * len(names) + 2, 3.6))
    colors = ["#999" if not n.startswith("fabric") else "#37a" if n == "fabric" else "#3a7" for n in names]
    bars = ax.bar(names, [s["forwarded_pps"] for s in summary], color=colors)
    for bar, s in zip(bars, summary):
        ax.annotate(f"{s['forwarded_pps'] / 1000:.1f}k\n{s['vs_basic_router']:.2f}x router",
                    (bar.get_x() + bar.get_width() / 2, bar.get_height()), ha="center", va="bottom", fontsize=8)
    ax.set_ylabel("forwarded packets/s (median)")
    ax.set_title("BMv2 saturation rate, logging off, same run", fontsize=10)
    ax.margins(y=0.25)
    ax.tick_params(axis="x", labelsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


README_START, README_END = "<!-- bench:start -->", "<!-- bench:end -->"


def readme_table(summary: list[dict], agent_pps: float, descr: dict[str, str]) -> str:
    lines = ["| program | what | offered pps | forwarded pps | vs port_forward | vs basic_router | feature cost |",
             "|---|---|---|---|---|---|---|"]
    for s in summary:
        note = "" if s["saturated"] else " (not saturated)"
        lines.append(f"| `{s['program']}` | {descr[s['program']]} | {s['offered_pps']} | {s['forwarded_pps']}{note} "
                     f"| {s['vs_port_forward']:.2f} | {s['vs_basic_router']:.2f} | {s['feature_cost']} |")
    lines.append(f"| host agent sender | DCQCN loop, unpaced | | {round(agent_pps)} | | | |")
    return "\n".join(lines)


def update_readme(readme: Path, table: str, start: str = README_START, end: str = README_END) -> None:
    """Replace what is between the `start` and `end` markers of `readme` with
    `table` and a line naming the toolchain and date it was measured with."""
    text = readme.read_text()
    pattern = re.compile(re.escape(start) + r".*?" + re.escape(end), re.S)
    if not pattern.search(text):
        raise SystemExit(f"{readme}: no {start} ... {end} markers to put the table between")
    measured = f"Measured {time.strftime('%Y-%m-%d')} with {toolchain.described()}."
    readme.write_text(pattern.sub(lambda _: f"{start}\n{table}\n\n{measured}\n{end}", text))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="fabric bench",
                                 description="BMv2 saturation rate of the fabric pipeline, its features and references.")
    ap.add_argument("--duration", type=float, default=4.0, help="seconds measured per run (default 4)")
    ap.add_argument("--repeats", type=int, default=5, help="rounds; the median is reported (default 5)")
    ap.add_argument("--only", nargs="*", help="measure only these programs (names as printed)")
    ap.add_argument("--fabric", type=Path, default=MAIN,
                    help="measure this P4 program as the fabric (to compare a change; default p4src/main.p4)")
    ap.add_argument("--readme", type=Path, help="rewrite the bench table in this README")
    args = ap.parse_args(argv)
    out_dir = REPO / "build" / "bench"
    chosen = select(cases(args.fabric), args.only)
    pipelines = {c.name: compile_case(c) for c in chosen}
    versions = toolchain.versions()
    print(f"BMv2 {versions['bmv2']}, logging off; p4c {versions['p4c']}; "
          f"{args.repeats} rounds of {args.duration:g} s", flush=True)
    make_veths()
    rows: list[dict] = []
    agent = 0.0
    machine = CpuSampler().start()     # the bench saturates the machine on purpose: recorded, not judged
    try:
        offered = {}
        for c in chosen:
            offered[c.name] = calibrate(c, pipelines[c.name])
        for run in range(1, args.repeats + 1):
            for c in chosen:
                pps, sent = measure(c, pipelines[c.name], args.duration, offered[c.name])
                rows.append({"run": run, "program": c.name, "forwarded_pps": round(pps), "offered_pps": round(sent)})
                print(f"run {run}/{args.repeats} {c.name:22s} forwarded {pps:8.0f} pps (offered {sent:.0f})",
                      flush=True)
        agent = measure_agent(args.duration)
        print(f"host agent sender loop {agent:8.0f} pps", flush=True)
    finally:
        remove_veths()
        cpu = summarise_cpu(machine.stop())
    print(f"the machine during the bench: {cpu}", flush=True)
    for row in rows:
        row.update(versions, steal=f"{cpu.steal:.3f}" if cpu else "")

    with open(out_dir / "forwarding_rate.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    names = [c.name for c in chosen]
    if "port_forward" not in names or "basic_router" not in names:
        print(f"raw runs: {out_dir / 'forwarding_rate.csv'} (no ratios without both references)")
        return 0
    summary = [{**s, **versions} for s in summarise(rows, names)]
    with open(out_dir / "summary.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(summary[0]))
        w.writeheader()
        w.writerows(summary)
    plot(summary, out_dir / "forwarding_rate.png")
    toolchain.record(out_dir)
    table = readme_table(summary, agent, {c.name: c.what for c in chosen})
    print("\n" + table)
    if "fabric" in names:
        print(f"\nagent sender / fabric: {agent / next(s['forwarded_pps'] for s in summary if s['program'] == 'fabric'):.1f}"
              " (above 1: the switch, not the agent, limits experiments)")
    if args.readme:
        update_readme(args.readme, table)
        img = args.readme.parent / "results" / "img" / "forwarding_rate.png"
        img.parent.mkdir(parents=True, exist_ok=True)
        plot(summary, img)
        print(f"README table updated: {args.readme}; chart: {img}")
    print(f"outputs: {out_dir}/forwarding_rate.csv (runs), summary.csv, forwarding_rate.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
