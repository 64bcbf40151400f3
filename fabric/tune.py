"""`fabric tune`: lossless and congestion parameters derived from a topology
(features/tuning.py, docs/tuning.md), each printed with its formula and
inputs, and written as an overlay that `fabric run --overlay`, `fabric
train --overlay` and the lossless and ECN experiments take.

    fabric tune --topology incast-leaf-spine                      # print every derivation and the overlay
    fabric tune --topology T --out tuned.yaml [--rtt-us 4200]     # write the overlay (a measured RTT)
    fabric run --topology T --overlay tuned.yaml
    fabric tune --topology incast --overlay classes.yaml --out tuned.yaml   # T as an experiment composes it

--overlay applies feature sections before deriving (a topology file without
a `lossless:` section gets no PFC values: give it the section an
experiment or `fabric train` adds, as docs/tuning.md shows).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Optional

import yaml

from control.topology import TopologyError, apply_overlays, resolve
from features import FEATURES, load_topology
from features.tuning import HOP_S, derive, overlay, report


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="fabric tune", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    ap.add_argument("--topology", "-t", required=True, help="topology name in topologies/ or a YAML path")
    ap.add_argument("--overlay", action="append", default=[], metavar="FILE",
                    help="sections applied over the topology before deriving (repeatable)")
    ap.add_argument("--out", "-o", type=Path, help="write the overlay here (default: print only)")
    ap.add_argument("--rtt-us", type=float, help="the round trip to derive from, in us (measured on the live "
                    "fabric); default: the topology's longest host-to-host path, unloaded")
    ap.add_argument("--hop-us", type=float, default=HOP_S * 1e6,
                    help="one BMv2 switch traversal, in us (default %(default)g: docs/tuning.md)")
    ap.add_argument("--flows", type=int, help="HPCC's expected flows N, for W_AI (default: hosts - 1)")
    ap.add_argument("--ecn", choices=("step", "wred"),
                    help="a topology without an ecn section: write profiles of this mode on every switch port")
    return ap


def main(argv: Optional[list[str]] = None) -> int:
    args = parser().parse_args(argv)
    try:
        if args.rtt_us is not None and not args.rtt_us > 0:
            raise ValueError(f"--rtt-us must be > 0, got {args.rtt_us:g}")
        if not args.hop_us >= 0:
            raise ValueError(f"--hop-us must be >= 0, got {args.hop_us:g}")
        if args.flows is not None and args.flows < 1:
            raise ValueError(f"--flows must be >= 1, got {args.flows}")
        path = resolve(args.topology)
        topo = load_topology(path, overlays=args.overlay)
        raw, _ = apply_overlays(yaml.safe_load(path.read_text()), args.overlay, FEATURES)
        tuning = derive(topo, rtt_s=None if args.rtt_us is None else args.rtt_us / 1e6, hop_s=args.hop_us / 1e6,
                        flows=args.flows, ecn_mode=args.ecn)
    except (TopologyError, ValueError, OSError) as exc:
        print(f"fabric tune: {exc}", file=sys.stderr)
        return 2
    print("\n".join(report(tuning)))
    sections = overlay(tuning, raw)
    print()
    if not sections:
        print("overlay: nothing to write (no lossless class, no ECN profile: see the notes above)")
        if args.out:
            print(f"fabric tune: {args.out} not written", file=sys.stderr)
        return 0
    text = render(sections, tuning.source, args)
    if args.out is None:
        print("overlay (--out FILE writes it; fabric run / fabric train --overlay FILE apply it):")
        print(text, end="")
        return 0
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    try:                                    # what was written loads over its topology, as every consumer will
        load_topology(path, overlays=[*args.overlay, args.out])
    except TopologyError as exc:            # a derivation this code cannot stand behind: say so, loudly
        print(f"fabric tune: the overlay written does not load: {exc}", file=sys.stderr)
        return 1
    before = "".join(f" --overlay {o}" for o in args.overlay)
    print(f"overlay written: {args.out} ({', '.join(sections)}); apply it with "
          f"fabric run --topology {args.topology}{before} --overlay {args.out}")
    return 0


def render(sections: dict, source: str, args: argparse.Namespace) -> str:
    """The overlay's YAML, with a header saying what it was derived from."""
    given = [*(f"--overlay {o}" for o in args.overlay), f"--rtt-us {args.rtt_us:g}" if args.rtt_us is not None else "",
             f"--hop-us {args.hop_us:g}" if args.hop_us != HOP_S * 1e6 else "",
             f"--flows {args.flows}" if args.flows is not None else "", f"--ecn {args.ecn}" if args.ecn else ""]
    options = " ".join(g for g in given if g)
    header = (f"# Overlay derived by `fabric tune --topology {args.topology}{' ' + options if options else ''}` "
              f"from {source}\n"
              "# (docs/tuning.md). Apply it with --overlay: each section replaces the topology's whole.\n")
    return header + yaml.safe_dump(sections, sort_keys=False, default_flow_style=None, width=110)


if __name__ == "__main__":
    sys.exit(main())
