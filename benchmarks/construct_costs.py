#!/usr/bin/env python3
"""What one P4 construct costs BMv2 per packet: the price list a feature's
design is judged by (a feature that is off pays for every header instance and
metadata field it declares, whether a packet uses them or not).

    .venv/bin/python -m benchmarks.construct_costs [--packets 1000] [--copies 16] [--readme docs/benchmark.md]

Method: p4src/baseline/basic_router.p4 is the base; each variant adds
`--copies` copies of one construct to it (generated under
build/bench/constructs/, nothing else changed), and instructions_per_packet.py
counts the instructions per forwarded packet of each under callgrind. A
construct's cost is (variant - its reference) / copies, where the reference
is the base, or the variant holding the fields the construct works on (an
assignment's cost excludes its field's own). Every variant forwards the
bench's UDP frames as the base does; the constructs never change a packet.

Writes build/bench/construct_costs.csv; with --readme, rewrites the table
between the `constructs:start` / `constructs:end` markers.
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.cases import REPO, Case, router_state
from benchmarks.instructions_per_packet import OUT_DIR, measure_each, write_results

BASE = REPO / "p4src" / "baseline" / "basic_router.p4"
GENERATED = OUT_DIR / "constructs"
README_START, README_END = "<!-- constructs:start -->", "<!-- constructs:end -->"

# Where basic_router.p4 takes each kind of addition (each anchor occurs once).
ANCHORS = {
    "header_types": "struct headers_t {",
    "headers": "    ipv4_t     ipv4;\n",
    "metadata": "struct metadata_t { }",
    "ingress_decls": "    table ipv4_lpm {",
    "ingress_apply": "            ipv4_lpm.apply();\n",
    "emit": "        packet.emit(hdr.ipv4);\n",
}


@dataclass(frozen=True)
class Construct:
    name: str
    what: str
    reference: str            # the variant (or "base") its cost is measured against
    fields: bool = False      # declares metadata fields f0..fN-1
    headers: bool = False     # declares header instances x0..xN-1 (emitted, never valid)
    scratch: bool = False     # declares metadata-struct header instances s0..sN-1
    decls: str = ""           # per copy {i}: ingress declarations
    apply: str = ""           # per copy {i}: ingress statements, after the route lookup
    action_body: str = ""     # per copy {i}: statements of one action called once per packet


CONSTRUCTS = [
    Construct("header", "a header instance, never valid (emitted by the deparser)", "base", headers=True),
    Construct("metadata_field", "a bit<32> metadata field, never used", "base", fields=True),
    Construct("assignment", "meta.f = hdr.ipv4.src_addr in an action", "metadata_field", fields=True,
              action_body="meta.f{i} = hdr.ipv4.src_addr;"),
    Construct("condition", "if (meta.f == 1), never true", "metadata_field", fields=True,
              apply="if (meta.f{i} == 1) {{ mark_to_drop(std_meta); }}"),
    Construct("set_valid", "setValid() then setInvalid() of a one-field scratch header", "header", scratch=True,
              action_body="meta.s{i}.setValid(); meta.s{i}.setInvalid();"),
    Construct("keyless_table", "a keyless table applied (default action NoAction)", "base",
              decls="table keyless{i} {{ key = {{ }} actions = {{ NoAction; }} default_action = NoAction(); }}",
              apply="keyless{i}.apply();"),
    Construct("table_miss", "an exact table on the IPv4 destination applied, empty (a miss)", "base",
              decls="table exact{i} {{ key = {{ hdr.ipv4.dst_addr: exact; }} actions = {{ NoAction; }} "
                    "default_action = NoAction(); size = 64; }}",
              apply="exact{i}.apply();"),
]


def variant_source(c: Construct, copies: int) -> str:
    """basic_router.p4 with `copies` copies of `c` added at its anchors."""
    text = BASE.read_text()
    for anchor in ANCHORS.values():
        if text.count(anchor) != 1:
            raise RuntimeError(f"{BASE}: anchor {anchor!r} is not there exactly once; update {__file__}")
    n = range(copies)

    def insert(anchor: str, lines: list[str], before: bool = False) -> None:
        nonlocal text
        block = "".join(lines)
        text = text.replace(ANCHORS[anchor], block + ANCHORS[anchor] if before else ANCHORS[anchor] + block)

    if c.headers or c.scratch:
        insert("header_types", ["header extra_t { bit<32> v; }\n"], before=True)
    if c.headers:
        insert("headers", [f"    extra_t x{i};\n" for i in n])
        insert("emit", [f"        packet.emit(hdr.x{i});\n" for i in n])
    members = [f" bit<32> f{i};" for i in n] if c.fields else []
    members += [f" extra_t s{i};" for i in n] if c.scratch else []
    if members:
        text = text.replace(ANCHORS["metadata"], "struct metadata_t {" + "".join(members) + " }")
    decls = [f"    {c.decls.format(i=i)}\n" for i in n] if c.decls else []
    if c.action_body:
        decls.append("    action constructs() {\n" + "".join(f"        {c.action_body.format(i=i)}\n" for i in n)
                     + "    }\n")
    insert("ingress_decls", decls, before=True)
    statements = [f"            {c.apply.format(i=i)}\n" for i in n] if c.apply else []
    if c.action_body:
        statements.append("            constructs();\n")
    insert("ingress_apply", statements)
    return text


def cases(copies: int, directory: Path = GENERATED) -> list[Case]:
    """The base and one variant per construct, written to `directory`."""
    directory.mkdir(parents=True, exist_ok=True)
    out = [Case("constructs-base", BASE, "basic_router", router_state)]
    for c in CONSTRUCTS:
        path = directory / f"{c.name}.p4"
        source = variant_source(c, copies)
        if not path.exists() or path.read_text() != source:     # compile_case keeps builds of unchanged sources
            path.write_text(source)
        out.append(Case(f"constructs-{c.name}", path, f"basic_router + {copies} x {c.what}", router_state))
    return out


def costs(counts: dict[str, float], copies: int) -> list[dict[str, Any]]:
    rows = []
    for c in CONSTRUCTS:
        ref = counts[f"constructs-{c.reference}"]        # "base" too: the base case is constructs-base
        rows.append({"construct": c.name, "what": c.what, "measured_against": c.reference,
                     "instructions_per_packet": round(counts[f"constructs-{c.name}"]),
                     "each": round((counts[f"constructs-{c.name}"] - ref) / copies)})
    return rows


def table(rows: list[dict[str, Any]], base: float, copies: int) -> str:
    lines = [f"basic_router: {base / 1000:.1f}k instructions/packet; each variant adds {copies} copies of one construct.",
             "", "| construct | what | instructions/packet | each, per packet | against |", "|---|---|---|---|---|"]
    lines += [f"| `{r['construct']}` | {r['what']} | {r['instructions_per_packet'] / 1000:.1f}k "
              f"| {r['each']} | {r['measured_against']} |" for r in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Instructions per packet one P4 construct costs on BMv2 (callgrind).")
    ap.add_argument("--packets", type=int, default=1000, help="packets counted per variant (default 1000)")
    ap.add_argument("--copies", type=int, default=16, help="copies of the construct in its variant (default 16)")
    ap.add_argument("--readme", type=Path, help="rewrite the constructs table (between its markers) in this file")
    args = ap.parse_args(argv)
    if args.copies < 1:
        raise SystemExit("--copies must be at least 1")
    counts = measure_each(cases(args.copies), args.packets, "variants of basic_router")
    rows = costs(counts, args.copies)
    write_results(rows, OUT_DIR / "construct_costs.csv", table(rows, counts["constructs-base"], args.copies),
                  args.readme, (README_START, README_END))
    return 0


if __name__ == "__main__":
    sys.exit(main())
