#!/usr/bin/env python3
"""`fabric calibrate`: measure what this machine can emulate, for the
budget every run is sized by (emulator/calibration.py, docs/fidelity.md).

Measured on the bench's veth pairs (benchmarks/cases.py), BMv2's logging off:
  switch_pps_per_core  for each composition, the fabric pipeline's packets
                       forwarded per CPU-second of the BMv2 process (all its
                       threads, /proc/<pid>/stat), its idle CPU subtracted,
                       at OFFERED_PPS: a moderate load, as the experiments
                       offer, not a saturated one (BMv2 spends more per packet
                       when its threads wake for each than when they batch)
  switch_idle_cores    the BMv2 process's CPU with the pipeline in and no
                       traffic
  agent_pps_per_core   the host agent's unpaced sender loop (one process: one core)
  rdma_agent_pps_per_core
                       the RDMA transport's sender and receiver (hostagent.rdma)
                       joined by a veth pair, no switch: packets they handle
                       (data and ACKs, each sent and received) per CPU-second
                       of the two, at RDMA_OFFERED_PPS: its per-packet work is
                       many times the sender loop's
  uet_agent_pps_per_core
                       the same for its UET mode (--mode uet, NSCC): unordered
                       delivery, per-packet entropies, SACK bitmaps

Compositions: `fabric` (every feature off) and `training` (lossless class,
INT as HPCC needs it, failover heartbeat state: each feature's bench state).
Stored in build/calibration/, a file a BMv2 build; `fabric calibrate
--if-stale` measures only when the stored one does not hold (another CPU,
pipeline, or older than a week), as `fabric train`, `fabric experiment` and
`make bench` do before they start.
"""
from __future__ import annotations

import argparse
import datetime as dt
import multiprocessing as mp
import subprocess
import sys
import time

from benchmarks.cases import DST_IP, HOST_MAC, IN_PORT, MAIN, OUT_PORT, PAIRS, REPO, SRC_IP, SWITCH_MAC, Case, \
    compile_case, fabric_state, frames, make_veths, remove_veths, running_switch, rx_packets
from benchmarks.forwarding_rate import _blast, measure_agent
from control.p4info import P4Info
from control.sync import SwitchState
from emulator.calibration import Calibration, calibration_file, current, store, this_machine
from emulator.fidelity import process_cpu_s
from features import FEATURES

OFFERED_PPS = 2000.0      # the load the per-packet CPU is measured at: below what the training composition forwards
RDMA_OFFERED_PPS = 1000.0  # the RDMA sender's line rate when its cost is measured (the experiments' NICs: 833)
IDLE_S = 2.0
WARMUP_S = 1.0
MEASURE_S = 3.0
TRAINING = ("lossless", "int", "failover")      # the features `fabric train` composes (their topology sections)

def training_state(p4info: P4Info) -> SwitchState:
    """The fabric's entries with the training composition's features on for all traffic."""
    state = fabric_state(p4info)
    for feature in FEATURES:
        if feature.section in TRAINING:
            modes = feature.bench_states(p4info, OUT_PORT)
            state = state.merge(next(iter(modes.values())))
    return state


def compositions() -> dict[str, Case]:
    return {"fabric": Case("fabric", MAIN, "every feature off", fabric_state),
            "training": Case("training", MAIN, "lossless, INT and failover on", training_state)}


def switch_cost(case: Case, offered_pps: float = OFFERED_PPS) -> tuple[float, float, float]:
    """(packets forwarded per core-second above idle, idle cores, forwarded pps) for `case`."""
    pipeline = compile_case(case)
    with running_switch(case, pipeline) as switch:
        time.sleep(0.5)
        c0, t0 = process_cpu_s(switch.pid), time.monotonic()
        time.sleep(IDLE_S)
        idle = (process_cpu_s(switch.pid) - c0) / (time.monotonic() - t0)
        queue: mp.Queue = mp.Queue()
        total = WARMUP_S + MEASURE_S + 0.5
        sender = mp.Process(target=_blast, args=(PAIRS[IN_PORT][1], frames(case), total, offered_pps, queue))
        sender.start()
        time.sleep(WARMUP_S)
        rx0, c0, t0 = rx_packets(PAIRS[OUT_PORT][1]), process_cpu_s(switch.pid), time.monotonic()
        time.sleep(MEASURE_S)
        rx1, c1, t1 = rx_packets(PAIRS[OUT_PORT][1]), process_cpu_s(switch.pid), time.monotonic()
        sender.join()
        queue.get()
    forwarded = (rx1 - rx0) / (t1 - t0)
    busy = (c1 - c0) / (t1 - t0) - idle
    if forwarded <= 0 or busy <= 0:
        raise RuntimeError(f"calibration of {case.name}: forwarded {forwarded:.0f} pps using {busy:.3f} cores "
                           f"above idle: nothing to measure")
    return forwarded / busy, idle, forwarded


def rdma_agent_cost(offered_pps: float = RDMA_OFFERED_PPS, mode: str = "go-back-n", cc: str = "dcqcn") -> float:
    """Packets the RDMA sender and receiver handle per CPU-second of the
    two (each data packet and ACK counted where it is sent and where it is
    received), measured over MEASURE_S after WARMUP_S, on a veth pair of
    the bench (no switch: each agent's gateway is the other); `mode` and
    `cc` the transport's (go-back-n and DCQCN: the RC agents; uet and
    NSCC: the UET agents)."""
    start_at = time.time() + 2.0                    # both imported and bound before either sends
    total = WARMUP_S + MEASURE_S + 0.5
    common = ["--duration", f"{total:g}", "--start-at", f"{start_at:.3f}", "--mode", mode]
    receiver = subprocess.Popen(
        [sys.executable, "-m", "hostagent.rdma", "receive", "--iface", PAIRS[IN_PORT][0], "--src-ip", DST_IP,
         "--src-mac", SWITCH_MAC, "--gw-mac", HOST_MAC, *common],
        cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    sender = subprocess.Popen(
        [sys.executable, "-m", "hostagent.rdma", "send", "--iface", PAIRS[IN_PORT][1], "--src-ip", SRC_IP,
         "--src-mac", HOST_MAC, "--gw-mac", SWITCH_MAC, "--dst-ip", DST_IP, "--qp", "1", "--cc", cc,
         "--line-rate-pps", f"{offered_pps:g}", *common, "--drain-s", "0.5"],
        cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    procs = (sender, receiver)
    ends = PAIRS[IN_PORT]                   # frames each end's kernel delivered: data, and ACKs back

    def frames() -> int:
        return sum(rx_packets(end) for end in ends)
    try:
        time.sleep(max(0.0, start_at + WARMUP_S - time.time()))
        f0, c0, t0 = frames(), sum(process_cpu_s(p.pid) for p in procs), time.monotonic()
        time.sleep(MEASURE_S)
        f1, c1, t1 = frames(), sum(process_cpu_s(p.pid) for p in procs), time.monotonic()
    finally:
        for p in procs:
            p.terminate()
        errors = [p.communicate(timeout=30)[1] for p in procs]
    handled = 2 * (f1 - f0) / (t1 - t0)     # each frame sent by one agent and received by the other
    busy = (c1 - c0) / (t1 - t0)
    if handled <= 0 or busy <= 0:
        raise RuntimeError(f"calibration of the RDMA agents ({mode}, {cc}): {handled:.0f} packets handled using {busy:.3f} cores: "
                           f"nothing to measure ({'; '.join(e.strip()[-300:] for e in errors if e.strip())})")
    return handled / busy


def calibrate(say=print) -> Calibration:
    """Measure this machine (needs root: veths) and store the result."""
    ident = this_machine()
    make_veths()
    try:
        rates, idle = {}, []
        for name, case in compositions().items():
            per_core, idle_cores, forwarded = switch_cost(case)
            rates[name] = round(per_core, 1)
            idle.append(idle_cores)
            say(f"calibrate: {name:9s} {forwarded:7.0f} pps forwarded at {OFFERED_PPS:g} offered: "
                f"{per_core:7.0f} pps per core above idle ({idle_cores:.3f} cores idle)")
        agent = measure_agent(MEASURE_S)
        say(f"calibrate: host agent {agent:7.0f} pps on one core")
        rdma = rdma_agent_cost()
        say(f"calibrate: RDMA agents {rdma:7.0f} packets handled per core (sender and receiver, data and ACKs)")
        uet = rdma_agent_cost(mode="uet", cc="nscc")
        say(f"calibrate: UET agents  {uet:7.0f} packets handled per core (the same, --mode uet, NSCC)")
    finally:
        remove_veths()
    cal = Calibration(ident, dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), rates,
                      round(max(idle), 4), round(agent, 1), round(rdma, 1), round(uet, 1),
                      {"offered_pps": f"{OFFERED_PPS:g}", "method": "benchmarks/calibration.py"})
    return cal


def ensure(say=print) -> Calibration:
    """The current calibration, measured first when none holds."""
    cal, why = current(this_machine())
    if cal is not None:
        return cal
    say(f"calibrate: {why}: measuring this machine (about 30 s)")
    cal = calibrate(say)
    say(f"calibrate: written to {store(cal)}")
    return cal


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="fabric calibrate", description=__doc__.split("\n\n")[0])
    ap.add_argument("--if-stale", action="store_true", help="measure only when the stored calibration does not hold")
    args = ap.parse_args(argv)
    if args.if_stale:
        cal = ensure()
    else:
        cal = calibrate()
        print(f"calibrate: written to {store(cal)}")
    print(f"calibration ({calibration_file(cal.identity)}): switch pps per core "
          + ", ".join(f"{k} {v:.0f}" for k, v in cal.switch_pps_per_core.items())
          + f"; idle switch {cal.switch_idle_cores:.3f} cores; host agent {cal.agent_pps_per_core:.0f} pps per core, "
          f"RDMA agents {cal.rdma_agent_pps_per_core:.0f}, UET agents {cal.uet_agent_pps_per_core:.0f}; "
          f"{cal.identity.cores} cores ({cal.identity.cpu_model}), BMv2 {cal.identity.bmv2}, measured {cal.measured_at}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
