#!/usr/bin/env python3
"""Saturation packet rate of BMv2 running this project's pipeline vs a
minimal port-forwarding program (p4src/baseline/port_forward.p4), on the same
BMv2 build in the same run. Prints pps for each and their ratio, and writes
build/bench/forwarding_rate.csv. Numbers, not assertions: track the ratio.

It also measures the host agent's packet path (hostagent.roce sender, with
its DCQCN bookkeeping, unpaced) on the same veth, so experiments can check
that the traffic source is not what limits them.

Method: two veth pairs; simple_switch_grpc (logging off) between them; a
sender process blasts prebuilt 64-byte UDP frames (8 flows) into port 1 far
above what BMv2 can forward; the rate is what leaves port 2, read from the
receiving veth's kernel counters over the measurement window. Programs are
measured alternately, `--repeats` times each, and the median is reported.
"""
from __future__ import annotations

import argparse
import csv
import json
import multiprocessing as mp
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from scapy.layers.inet import IP, UDP  # noqa: E402
from scapy.layers.l2 import Ether  # noqa: E402

from control.build import compile_p4  # noqa: E402
from control.forwarding import ECMP_PROFILE, LPM_TABLE, NEXT_HOP_TABLE, member_id  # noqa: E402
from control.network import make_veth_pair, sh  # noqa: E402
from control.p4info import P4Info  # noqa: E402
from control.switch import SwitchConnection  # noqa: E402
from control.sync import SwitchState, reconcile  # noqa: E402
from control.toolchain import require  # noqa: E402
from hostagent.sender import RawSender  # noqa: E402

GRPC_ADDR, THRIFT_PORT, DEVICE_ID = "127.0.0.1:9458", 9088, 1  # apart from the launcher and PTF
PAIRS = {1: ("benchsw1", "benchdp1"), 2: ("benchsw2", "benchdp2")}


def frames() -> list[bytes]:
    return [bytes(Ether(dst="0a:00:00:00:01:01", src="0a:00:01:00:00:01")
                  / IP(src="10.0.1.1", dst="10.0.2.1") / UDP(sport=5000 + i, dport=4791) / (b"\0" * 18))
            for i in range(8)]


def rx_packets(iface: str) -> int:
    return int(Path(f"/sys/class/net/{iface}/statistics/rx_packets").read_text())


def _blast(iface: str, duration: float, rate_pps: float, out) -> None:
    with RawSender(iface) as s:
        out.put(s.blast(frames(), duration, rate_pps or None))


def program_fabric(conn: SwitchConnection, p4info: P4Info) -> None:
    state = SwitchState(managed_tables={p4info.table(LPM_TABLE).preamble.id, p4info.table(NEXT_HOP_TABLE).preamble.id},
                        managed_profiles={p4info.action_profile(ECMP_PROFILE).preamble.id})
    state.members.append(p4info.member(ECMP_PROFILE, member_id(1, 0), "route",
                                       {"port": 2, "src_mac": "0a:00:00:00:01:02", "dst_mac": "0a:00:01:00:00:02"}))
    state.table_entries.append(p4info.table_entry(NEXT_HOP_TABLE, {"meta.next_id": 1}, member_id=member_id(1, 0)))
    state.table_entries.append(p4info.table_entry(LPM_TABLE, {"hdr.ipv4.dst_addr": "10.0.2.0/24"},
                                                  action="set_next_id", params={"next_id": 1}))
    reconcile(conn, state)


def measure(name: str, pipeline, duration: float, offered_pps: float) -> tuple[float, int]:
    cmd = [require("simple_switch_grpc"), "--device-id", str(DEVICE_ID), "--thrift-port", str(THRIFT_PORT),
           "-i", f"1@{PAIRS[1][0]}", "-i", f"2@{PAIRS[2][0]}", "--no-p4", "--", "--grpc-server-addr", GRPC_ADDR]
    switch = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    try:
        with SwitchConnection(name, GRPC_ADDR, DEVICE_ID, connect_timeout=20) as conn:
            conn.push_pipeline(pipeline, force=True)
            if name == "fabric":
                program_fabric(conn, P4Info(pipeline.p4info()))
        queue: mp.Queue = mp.Queue()
        sender = mp.Process(target=_blast, args=(PAIRS[1][1], duration + 1.5, offered_pps, queue))
        sender.start()
        time.sleep(1.0)  # warm-up: BMv2 queues fill, rate settles
        before, t0 = rx_packets(PAIRS[2][1]), time.perf_counter()
        time.sleep(duration)
        after, t1 = rx_packets(PAIRS[2][1]), time.perf_counter()
        sender.join()
        offered = queue.get() / (duration + 1.5)
        if switch.poll() is not None:
            raise RuntimeError(f"simple_switch_grpc died while measuring {name}")
        return (after - before) / (t1 - t0), int(offered)
    finally:
        switch.terminate()
        switch.wait(timeout=10)


def measure_agent(duration: float) -> float:
    """Packets per second the DCQCN sender loop reaches with no pacing limit."""
    out = REPO / "build" / "bench" / "agent-sender"
    subprocess.run([sys.executable, "-m", "hostagent.roce", "send", "--iface", PAIRS[1][1],
                    "--src-ip", "10.0.1.1", "--src-mac", "0a:00:01:00:00:01", "--gw-mac", "0a:00:00:00:01:01",
                    "--dst-ip", "10.0.2.1", "--qp", "1", "--duration", str(duration),
                    "--line-rate-pps", "10000000", "--min-rate-pps", "1", "--out", str(out)],
                   cwd=REPO, check=True, capture_output=True)
    return json.loads(out.with_suffix(".json").read_text())["sent"] / duration


def main() -> int:
    ap = argparse.ArgumentParser(description="BMv2 saturation rate: this pipeline vs port forwarding.")
    ap.add_argument("--duration", type=float, default=5.0, help="seconds measured per run (default 5)")
    ap.add_argument("--repeats", type=int, default=3, help="runs per program (default 3)")
    ap.add_argument("--offered-pps", type=float, default=50000,
                    help="offered load, above BMv2's capacity (0: as fast as the sender can)")
    args = ap.parse_args()
    out_dir = REPO / "build" / "bench"
    programs = {
        "baseline": compile_p4(REPO / "p4src" / "baseline" / "port_forward.p4", out_dir),
        "fabric": compile_p4(REPO / "p4src" / "main.p4", out_dir),
    }
    for sw, dp in PAIRS.values():
        make_veth_pair(sw, dp)
    rows = []
    try:
        for run in range(1, args.repeats + 1):
            for name, pipeline in programs.items():
                pps, offered = measure(name, pipeline, args.duration, args.offered_pps)
                rows.append({"run": run, "program": name, "forwarded_pps": round(pps), "offered_pps": offered})
                print(f"run {run}/{args.repeats} {name:9s} forwarded {pps:9.0f} pps (offered {offered} pps)", flush=True)
            agent = measure_agent(args.duration)
            rows.append({"run": run, "program": "agent-sender", "forwarded_pps": round(agent), "offered_pps": round(agent)})
            print(f"run {run}/{args.repeats} agent sender loop {agent:9.0f} pps", flush=True)
    finally:
        for sw, _ in PAIRS.values():
            sh("ip", "link", "del", sw, check=False)
    median = {n: statistics.median(r["forwarded_pps"] for r in rows if r["program"] == n)
              for n in [*programs, "agent-sender"]}
    csv_path = out_dir / "forwarding_rate.csv"
    with open(csv_path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    print(f"\n{'program':32s} {'median pps':>10s}")
    print(f"{'baseline (port_forward.p4)':28s} {median['baseline']:10.0f}")
    print(f"{'fabric (main.p4)':28s} {median['fabric']:10.0f}")
    print(f"{'host agent sender (DCQCN loop)':28s} {median['agent-sender']:10.0f}")
    print(f"ratio fabric/baseline: {median['fabric'] / median['baseline']:.3f}")
    print(f"ratio agent sender/fabric: {median['agent-sender'] / median['fabric']:.1f}"
          " (above 1: the switch, not the agent, limits experiments)")
    print(f"raw runs: {csv_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
