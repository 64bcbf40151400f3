#!/usr/bin/env python3
"""What an aggregated element costs BMv2: instructions per aggregation
packet at each block size a job may declare, against forwarding a plain UDP
packet of the same size through the same fabric (every feature off).

    .venv/bin/python -m benchmarks.aggregation_cost [--packets 1000] [--readme docs/benchmark.md]

Per block size n (64, 256 int32): `fabric+aggregation:n` sends
the `make bench` aggregation frames (4 workers, every packet aggregated, the
fourth of a block multicast as 4 results) to a job that declared n
elements; `fabric:udp-<bytes>B` sends plain UDP frames of the same length
to the fabric with every feature off. Counted as instructions_per_packet.py
counts (callgrind, per packet out of port 2). The cost of an element is
(aggregation - plain UDP of that size) / n: what summing adds to moving the
bytes. Writes build/bench/aggregation_cost.csv; with --readme, rewrites the
table between the `aggregation:start` / `aggregation:end` markers.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from emulator import toolchain
from benchmarks.cases import DST_IP, HOST_MAC, MAIN, OUT_PORT, SRC_IP, SWITCH_MAC, Case, fabric_state
from benchmarks.instructions_per_packet import OUT_DIR, measure_each, write_results
from control.p4info import P4Info
from control.sync import SwitchState
from features import aggregation
from wire import aggregation as ah

README_START, README_END = "<!-- aggregation:start -->", "<!-- aggregation:end -->"
ETHERNET_IPV4 = 14 + 20


def frame_bytes(block_elements: int) -> int:
    return ETHERNET_IPV4 + ah.udp_length(block_elements)


def udp_frames(length: int) -> list[bytes]:
    """Plain UDP frames of `length` bytes, 8 flows, to the bench route."""
    pad = length - ETHERNET_IPV4 - 8
    return [bytes(Ether(dst=SWITCH_MAC, src=HOST_MAC) / IP(src=SRC_IP, dst=DST_IP) / UDP(sport=5000 + i, dport=4791)
                  / (b"\0" * pad)) for i in range(8)]


def _aggregating(n: int):
    def state(p4info: P4Info) -> SwitchState:
        return fabric_state(p4info).merge(aggregation.bench_state(p4info, OUT_PORT, n))
    return state


def size_cases(sizes: tuple[int, ...] = ah.BLOCK_SIZES, fabric: Path = MAIN) -> list[tuple[int, Case, Case]]:
    """(n, the aggregation case, the plain UDP case of the same frame length) per block size."""
    out = []
    for n in sizes:
        length = frame_bytes(n)
        agg = Case(f"fabric+aggregation:{n}", fabric, f"aggregation, {n} elements ({length} B frames)",
                   _aggregating(n), frames=aggregation.bench_frames(SWITCH_MAC, HOST_MAC, n))
        udp = Case(f"fabric:udp-{length}B", fabric, f"every feature off, plain UDP of {length} B", fabric_state,
                   frames=udp_frames(length))
        out.append((n, agg, udp))
    return out


def rows(counts: dict[str, float], sizes: list[tuple[int, Case, Case]]) -> list[dict[str, Any]]:
    out = []
    for n, agg, udp in sizes:
        a, u = counts[agg.name], counts[udp.name]
        out.append({"block_elements": n, "frame_bytes": frame_bytes(n), "aggregation": round(a), "plain_udp": round(u),
                    "vs_plain_udp": round(a / u, 2), "per_element": round((a - u) / n),
                    "per_element_all_in": round(a / n)})
    return out


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| block (int32) | frame | aggregation packet | plain UDP, same size | ratio | summing, per element "
             "| whole packet, per element |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['block_elements']} | {r['frame_bytes']} B | {r['aggregation'] / 1000:.1f}k "
                     f"| {r['plain_udp'] / 1000:.1f}k | {r['vs_plain_udp']}x | {r['per_element']} "
                     f"| {r['per_element_all_in']} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Instructions per aggregation packet and per element, by block size "
                                             "(callgrind), against plain UDP of the same size.")
    ap.add_argument("--packets", type=int, default=1000, help="packets counted per program (default 1000)")
    ap.add_argument("--sizes", type=int, nargs="*", default=list(ah.BLOCK_SIZES),
                    help=f"block sizes to measure (default {' '.join(map(str, ah.BLOCK_SIZES))})")
    ap.add_argument("--readme", type=Path, help="rewrite the aggregation table (between its markers) in this file")
    args = ap.parse_args(argv)
    toolchain.use_fast_bmv2()      # the build the experiments run on, as `fabric bench` (unless $P4_TOOLCHAIN_BIN)
    for n in args.sizes:
        try:
            ah.check_block_elements(n)
        except ValueError as exc:
            ap.error(f"--sizes: {exc}")
    sizes = size_cases(tuple(args.sizes))
    counts = measure_each([c for _, agg, udp in sizes for c in (agg, udp)], args.packets)
    result = rows(counts, sizes)
    write_results(result, OUT_DIR / "aggregation_cost.csv", table(result), args.readme, (README_START, README_END))
    return 0


if __name__ == "__main__":
    sys.exit(main())
