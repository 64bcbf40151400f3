#!/usr/bin/env python3
"""How fast the RDMA transport's sender runs, per congestion control, and
UET's (--mode uet) with NSCC.

    python -m benchmarks.rdma_agent [--duration 5] [--ccs dcqcn timely swift hpcc nscc] [--uet-ccs nscc]

A veth pair between two namespaces, no switch: the receiver agent
(python -m hostagent.rdma receive) in one, the sender in the other with no
rate limit (NIC rate 10^7 packets/s), 1024-byte packets, 64 KB messages,
go-back-N, nothing lost. The sender's rate is what its loop (pacing, the
congestion control, ACK processing, framing) sustains on one core while the
receiver runs on another; the fabric on BMv2 forwards far less (make bench:
docs/benchmark.md), so a sender is not what limits an experiment if this is
well above it. Prints packets/s per algorithm and the ratio to the fabric's
forwarding rate when given (--fabric-pps); numbers, not assertions.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from hostagent.rdma.agent import congestion_controls

REPO = Path(__file__).resolve().parent.parent
NS = ("bench-rdma-tx", "bench-rdma-rx")
MACS = ("0a:00:00:00:0c:01", "0a:00:00:00:0c:02")
IPS = ("10.78.0.1", "10.78.0.2")


def _sh(*cmd: str, ns: str | None = None) -> None:
    subprocess.run((["ip", "netns", "exec", ns] if ns else []) + list(cmd), check=True, capture_output=True)


def veth_pair() -> None:
    for ns in NS:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        _sh("ip", "netns", "add", ns)
    _sh("ip", "link", "add", "bench-tx0", "type", "veth", "peer", "name", "bench-rx0")
    for ns, dev in zip(NS, ("bench-tx0", "bench-rx0")):
        _sh("ip", "link", "set", dev, "netns", ns)
        _sh("ip", "link", "set", dev, "up", ns=ns)


def measure(cc: str, duration: float, out: Path, mode: str = "go-back-n") -> dict:
    common = ["--duration", str(duration + 2), "--mtu", "1024", "--mode", mode]
    name = cc if mode != "uet" else f"uet-{cc}"
    rx = subprocess.Popen(["ip", "netns", "exec", NS[1], sys.executable, "-m", "hostagent.rdma", "receive",
                           "--iface", "bench-rx0", "--src-ip", IPS[1], "--src-mac", MACS[1], "--gw-mac", MACS[0],
                           *common, "--out", str(out / f"rx-{name}")], cwd=REPO)
    time.sleep(0.5)
    subprocess.run(["ip", "netns", "exec", NS[0], sys.executable, "-m", "hostagent.rdma", "send",
                    "--iface", "bench-tx0", "--src-ip", IPS[0], "--src-mac", MACS[0], "--gw-mac", MACS[1],
                    "--dst-ip", IPS[1], "--qp", "1", "--cc", cc, "--duration", str(duration), "--drain-s", "0",
                    "--line-rate-pps", "10000000", "--mtu", "1024", "--mode", mode, "--out", str(out / f"tx-{name}")],
                   cwd=REPO, check=True, capture_output=True)
    rx.terminate()
    rx.wait(timeout=10)
    s = json.loads((out / f"tx-{name}.json").read_text())
    return {"cc": name, "sent_pps": round(s["sent"] / duration), "retransmitted": s["retransmitted"],
            "messages": s["messages_completed"]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--duration", type=float, default=5.0)
    ap.add_argument("--ccs", nargs="*", default=sorted(congestion_controls()), choices=sorted(congestion_controls()))
    ap.add_argument("--uet-ccs", nargs="*", default=["nscc"], choices=["nscc"],
                    help="--mode uet's congestion controls (RCCC paces by the receiver's credit: not a sender's speed)")
    ap.add_argument("--fabric-pps", type=float, default=None, help="the fabric's forwarding rate, for the ratio")
    args = ap.parse_args(argv)
    out = REPO / "build" / "bench" / "rdma_agent"
    out.mkdir(parents=True, exist_ok=True)
    veth_pair()
    rows: list[dict] = []
    try:
        cases = [(cc, "go-back-n") for cc in args.ccs] + [(cc, "uet") for cc in args.uet_ccs]
        for cc, mode in cases:
            print(f"[{len(rows) + 1}/{len(cases)}] {cc if mode != 'uet' else 'uet-' + cc:8s} ...", end=" ", flush=True)
            rows.append(measure(cc, args.duration, out, mode))
            ratio = f"  ({rows[-1]['sent_pps'] / args.fabric_pps:.1f}x the fabric)" if args.fabric_pps else ""
            print(f"{rows[-1]['sent_pps']} packets/s{ratio}", flush=True)
    finally:
        for ns in NS:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
    (out / "summary.json").write_text(json.dumps(rows, indent=2))
    print(f"outputs: {out}/summary.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
