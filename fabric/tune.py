"""`fabric tune`: lossless and congestion parameters derived from a topology
(features/tuning.py, docs/tuning.md), each printed with its formula and
inputs, and written as an overlay that `fabric run --overlay`, `fabric
train --overlay` and the lossless, ECN and rdma experiments take (its
`congestion_control:` section: the constants `fabric train` and the rdma
experiment give the RDMA agents).

    fabric tune --topology incast-leaf-spine                      # print every derivation and the overlay
    fabric tune --topology T --out tuned.yaml [--rtt-us 4200]     # write the overlay (a measured RTT)
    fabric run --topology T --overlay tuned.yaml
    fabric tune --topology incast --overlay classes.yaml --out tuned.yaml   # T as an experiment composes it
    fabric tune --topology leaf-spine --validate --out tuned.yaml     # derive from a probed RTT, validate live
    fabric tune --topology leaf-spine --validate tuned.yaml           # validate a given overlay's values

--overlay applies feature sections before deriving (a topology file without
a `lossless:` section gets no PFC values: give it the section an
experiment or `fabric train` adds, as docs/tuning.md shows).

--validate starts the fabric (dilated so that this machine keeps up with
the checks' traffic: --dilation auto asks the calibration), probes its
round trip, derives from it (or takes FILE's values), writes the values on
the live switches and checks them: an incast into the lossless class, a
congested port, a watchdog storm (experiments/tuning.py). A derived
headroom or XON the incast judges wrong is derived again with t_hop
doubled and judged again, at most twice (REFINE_ROUNDS). A topology
without a lossless class is validated with `fabric train`'s (class 3,
DSCP 26). Exit 0 when every check passes, 1 naming the parameter a check
judged wrong, 2 on bad input.
"""
from __future__ import annotations

import argparse
import copy
import sys
import time
from pathlib import Path
from typing import Any, Optional

import yaml

import benchmarks.calibration
from control.topology import Topology, TopologyError, apply_overlays, resolve
from emulator import toolchain
from emulator.build import compile_p4
from emulator.calibration import Flow, demand, plan
from emulator.dilation import Dilation, DilationError, section_dilation
from emulator.network import queue_rate_pps
from experiments.train import LOSSLESS_SECTION
from experiments.common import percentile
from experiments.tuning import (CHECKS, INCAST_AGENTS, INCAST_LOAD, REFINE_ROUNDS, REFINED, RESPONSE_MARGIN_PACKETS,
                                RESPONSE_PROBE_PFC, RESPONSE_PROBE_S, Check, Validation, Values, longest_pair_hosts,
                                with_watchdog)
from features import FEATURES, SECTIONS, load_topology, topology_from_dict
from features.lossless import SECTION as LOSSLESS
from features.tuning import HOP_S, Paths, Tuning, derive, overlay, report

REPO = Path(__file__).resolve().parent.parent


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
                    help="a topology without an ecn section: write profiles of this mode on every switch port "
                    "(--validate: step unless given)")
    ap.add_argument("--validate", nargs="?", const="derived", metavar="FILE",
                    help="validate on the live fabric: the derived values, or FILE's (an overlay) (see below)")
    ap.add_argument("--dilation", default="auto", metavar="{auto,D}",
                    help="--validate: run the fabric D times slower (emulator/dilation.py); auto: what the "
                    "calibration says the checks' traffic needs (default)")
    ap.add_argument("--checks", nargs="+", choices=CHECKS, default=list(CHECKS),
                    help="--validate: the checks to run (default: all)")
    return ap


def main(argv: Optional[list[str]] = None) -> int:
    args = parser().parse_args(argv)
    if args.validate is not None:
        return validate(args)
    try:
        if args.rtt_us is not None and not args.rtt_us > 0:
            raise ValueError(f"--rtt-us must be > 0, got {args.rtt_us:g}")
        if not args.hop_us >= 0:
            raise ValueError(f"--hop-us must be >= 0, got {args.hop_us:g}")
        if args.flows is not None and args.flows < 1:
            raise ValueError(f"--flows must be >= 1, got {args.flows}")
        path = resolve(args.topology)
        topo = load_topology(path, overlays=args.overlay)
        raw, _ = apply_overlays(yaml.safe_load(path.read_text()), args.overlay, FEATURES, SECTIONS)
        tuning = derive(topo, rtt_s=None if args.rtt_us is None else args.rtt_us / 1e6, hop_s=args.hop_us / 1e6,
                        flows=args.flows, ecn_mode=args.ecn)
    except (TopologyError, ValueError, OSError) as exc:
        print(f"fabric tune: {exc}", file=sys.stderr)
        return 2
    print("\n".join(report(tuning)))
    sections = overlay(tuning, raw)         # the congestion controls' constants at least: derived for every topology
    print()
    text = render(sections, tuning.source, args)
    if args.out is None:
        print("overlay (--out FILE writes it; fabric run / fabric train / fabric experiment rdma --overlay FILE "
              "apply it):")
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


def lossless_class(raw: dict) -> tuple[dict, str]:
    """`raw` with a lossless class: its own, or `fabric train`'s section
    added (a note saying so)."""
    section = raw.get(LOSSLESS)
    if isinstance(section, dict) and any(isinstance(c, dict) and c.get("lossless")
                                         for c in section.get("classes") or []):
        return raw, ""
    return ({**raw, LOSSLESS: copy.deepcopy(LOSSLESS_SECTION)},
            "the topology has no lossless class: validating with fabric train's (class 3 'collective', DSCP 26)")


def choose_dilation(topo: Topology, asked: str, pair: tuple[str, str]) -> tuple[Dilation, str]:
    """The dilation the checks run at: given, or what the calibration says
    the incast (the heaviest check) needs on this machine."""
    if asked != "auto":
        return Dilation(float(asked)), "given"
    cal = benchmarks.calibration.ensure()
    receiver, senders = longest_pair_hosts(topo, pair)
    cap = queue_rate_pps(topo.access_link(topo.hosts[receiver]).bandwidth_mbps)
    flows = [Flow(h, receiver, INCAST_LOAD * cap / len(senders)) for h in senders]
    p = plan(demand(topo, flows), cal, "training", agents=INCAST_AGENTS)
    return Dilation.rounded_up(p.dilation), f"the calibration: the incast {p}"


def validate(args: argparse.Namespace) -> int:
    """--validate: derive from a probed round trip (or read FILE), write the
    values on the live fabric, run the checks; 0 when all pass."""
    try:
        if args.flows is not None and args.flows < 1:
            raise ValueError(f"--flows must be >= 1, got {args.flows}")
        path = resolve(args.topology)
        raw, _ = apply_overlays(yaml.safe_load(path.read_text()), args.overlay, FEATURES, SECTIONS)
        raw, note = lossless_class(raw)
        topo = topology_from_dict(raw, str(path))
        given: Optional[dict[str, Any]] = None
        if args.validate != "derived":
            given, _ = apply_overlays({}, [args.validate], FEATURES, SECTIONS)
        fast = toolchain.use_fast_bmv2()
        if fast:
            print(f"fabric tune: on the fast BMv2 in {fast}", flush=True)
        compile_p4()                        # the pipeline the switches start with, rebuilt if its sources changed
        paths = Paths.of(topo, HOP_S)
        dilation, why = choose_dilation(topo, args.dilation, paths.pair)
        raw_d = dilation.topology(raw)
        topo_d = topology_from_dict(raw_d, f"{path}" + (f", dilated {dilation}" if dilation.factor > 1 else ""))
    except (TopologyError, ValueError, OSError, DilationError) as exc:
        print(f"fabric tune: {exc}", file=sys.stderr)
        return 2
    if note:
        print(f"fabric tune: {note}")
    print(f"fabric tune: dilation {dilation} ({why})" + (
        f": links at 1/{dilation.factor:g} of their rates, delays x{dilation.factor:g}; the values derived and "
        f"validated are this dilated fabric's" if dilation.factor > 1 else ""), flush=True)
    config = topo_d.features[LOSSLESS]
    klass = next(c for c in config.lossless)
    paths_d = Paths.of(topo_d, HOP_S)
    validation = Validation(topo_d, REPO / "build" / "tune" / topo.name, klass.tclass, klass.dscp[0], paths_d.pair)
    started = time.monotonic()
    try:
        with validation.fabric():
            checks = on_the_live_fabric(args, validation, paths_d, raw_d, given, str(path), dilation)
    except RuntimeError as exc:             # the network, a probe or an agent failed: no verdict
        print(f"fabric tune: {exc}", file=sys.stderr)
        return 2
    except TopologyError as exc:
        print(f"fabric tune: the values under test do not load: {exc}", file=sys.stderr)
        return 2
    failed = [c for c in checks if not c.passed]
    unfaithful = [c.name for c in checks if c.passed and c.fidelity != "ok"]
    print(f"\nvalidation: {len(checks) - len(failed)} of {len(checks)} checks passed in "
          f"{time.monotonic() - started:.0f} s" + ("" if not failed else
                                                    f"; wrong: {'; '.join(c.why.split(':')[0] for c in failed)}")
          + ("" if not unfaithful else f"; passed on a run that was not faithful: {', '.join(unfaithful)} "
                                       f"(it proves less; see above)"))
    return 1 if failed else 0


def on_the_live_fabric(args: argparse.Namespace, validation: Validation, paths_d: Paths, raw_d: dict,
                       given: Optional[dict[str, Any]], path: str, dilation: Dilation) -> list[Check]:
    """On the started fabric: probe, derive (or take `given`), write the
    values, run the checks; TopologyError when the values under test do not load."""
    rtts = validation.probe_rtt()
    p50, p90 = percentile(rtts, 0.5), percentile(rtts, 0.9)
    idle_hop = max(0.0, (p90 - 2 * paths_d.delay_max_s) / (2 * paths_d.switches_max))
    print(f"round trip {paths_d.pair[0]} -> {paths_d.pair[1]} ({paths_d.switches_max} switches), {len(rtts)} "
          f"pings: p50 {p50 * 1000:.2f} ms, p90 {p90 * 1000:.2f} ms; t_hop idle = (p90 - 2 x cable delays "
          f"{paths_d.delay_max_s * 1000:g} ms) / (2 x {paths_d.switches_max}) = {idle_hop * 1000:.3f} ms", flush=True)
    response = validation.pause_response(Values(validation.topo.features[LOSSLESS]))
    hop = max(idle_hop, response.hop_s())
    print(f"pause response under the incast ({RESPONSE_PROBE_S:g} s, xoff {RESPONSE_PROBE_PFC.xoff}, headroom "
          f"{RESPONSE_PROBE_PFC.headroom}; each cell's peak, pfc_occupancy_peak): at most {response.beyond_xoff} "
          f"packets arrived after a pause (at {response.where}, r = {response.rate_pps:g} packets/s), so t_hop "
          f"under load = (beyond + margin {RESPONSE_MARGIN_PACKETS} - 2 - 2 d r) / 2 r = {response.hop_s() * 1000:.3f} ms; derived with t_hop = "
          f"{hop * 1000:.3f} ms", flush=True)
    ecn_mode = args.ecn or (None if validation.topo.features.get("ecn") else "step")

    def derived(hop_s: float) -> tuple[Tuning, dict[str, Any]]:
        t = derive(validation.topo, rtt_s=p90, hop_s=hop_s, flows=args.flows, ecn_mode=ecn_mode,
                   rtt_source=f"probed: p90 of {len(rtts)} pings {paths_d.pair[0]} -> {paths_d.pair[1]}",
                   dilation=dilation.factor)
        return t, overlay(t, raw_d, dilation.factor)

    def applied(tuning: Tuning, sections: dict[str, Any]) -> tuple[Topology, Values]:
        """The values under test (`sections`, or `given`'s) written on the live switches."""
        if given is None:
            values_raw = {**raw_d, **sections}
        else:       # the given file's sections are the undilated network's, as a topology's: dilated as it is
            given_d = {k: v for k, v in dilation.topology(given).items() if k in given}
            values_raw = {**raw_d, **{k: v for k, v in sections.items() if k not in given}, **given_d}
        under_test = topology_from_dict(values_raw, f"{path} with the values under test")
        values = Values(with_watchdog(under_test.features[LOSSLESS], *derived_watchdog(tuning)),
                        dcqcn_values(tuning, validation))
        validation.apply(values, under_test.features.get("ecn"))
        return under_test, values

    def show(check: Check, since: float) -> None:
        print("\n".join(check.lines()) + f"  [{time.monotonic() - since:.0f} s]", flush=True)

    tuning, sections = derived(hop)
    if given is None:
        print("\n".join(report(tuning)), flush=True)
    else:
        print(f"validating {args.validate}'s sections ({', '.join(given) or 'none'}); the others derived")
    under_test, values = applied(tuning, sections)
    pfc = values.lossless.pfc
    print(f"\nvalidating on the live fabric: pfc xoff {pfc.xoff}, xon {pfc.xon}, headroom {pfc.headroom}; "
          f"watchdog detect {values.watchdog.detect_ms:g} ms; {marking_text(under_test, validation)}", flush=True)

    def run(name: str) -> Check:
        if name == "incast":
            return validation.incast(values, response)
        if name == "congestion":
            return validation.congestion(values, marking_text(under_test, validation), tuning.rtt_s)
        return validation.storm(values)

    checks: list[Check] = []
    pending, rounds = list(args.checks), 0
    while pending:
        t0 = time.monotonic()
        check = run(pending.pop(0))
        show(check, t0)
        if check.passed or given is not None or check.wrong not in REFINED or rounds == REFINE_ROUNDS:
            checks.append(check)
            continue
        # a derived value the check judged wrong: derived again, and every check run again on it
        rounds += 1
        hop = 2 * hop if hop > 0 else 1 / response.rate_pps
        tuning, sections = derived(hop)
        under_test, values = applied(tuning, sections)
        pfc = values.lossless.pfc
        print(f"refined: {check.wrong} judged wrong, derived again with t_hop doubled to {hop * 1000:.3f} ms "
              f"(REFINE_ROUNDS: the probe's figure is one sample of a tail): pfc xoff {pfc.xoff}, xon "
              f"{pfc.xon}, headroom {pfc.headroom}"
              + (f" ({len(tuning.pfc_ports)} cells their own)" if tuning.pfc_ports else "")
              + f"; watchdog detect {values.watchdog.detect_ms:g} ms; the checks again "
                f"({', '.join(args.checks)})", flush=True)
        checks, pending = [], list(args.checks)
    if given is None and args.out:          # the values the checks judged: refined, where a check refined them
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(render(written(sections, dilation), tuning.source, args, dilation))
        print(f"overlay written: {args.out} ({', '.join(sections)})")
    return checks


def derived_watchdog(tuning: Tuning) -> tuple[float, float]:
    """(detect_ms, restore_ms) as derived (the watchdog section's values)."""
    found = {d.name: float(d.value) for d in tuning.sections.get("watchdog", [])}
    return found["lossless.watchdog.detect_ms"], found["lossless.watchdog.restore_ms"]


def dcqcn_values(tuning: Tuning, validation: Validation) -> dict[str, float]:
    """The derived DCQCN constants the senders take (DcqcnParams' fields),
    those per line rate at the congestion check's senders' rate."""
    rate = validation.sender_line_rate()
    out: dict[str, float] = {}
    for d in tuning.sections.get("dcqcn", []):
        field = d.name.split(".", 1)[1]
        if field == "time_scale":
            continue
        if d.where and d.where != f"NIC line rate {rate} packets/s":
            continue
        out[field] = float(d.value)
    return out


def marking_text(topo: Topology, validation: Validation) -> str:
    """The receiver's port's marking, as the congestion check judges it."""
    r = topo.hosts[validation.receiver]
    ecn = topo.features.get("ecn") or {}
    klass = next(c for c in topo.features[LOSSLESS].classes if c.tclass == validation.tclass)
    profile = ecn.get((r.switch, r.switch_port, klass.queue)) or ecn.get((r.switch, r.switch_port, None))
    if profile is None:
        return f"no ECN profile at {r.switch}:{r.switch_port}"
    if profile.mode == "step":
        return f"ecn.k = {profile.k} at {r.switch}:{r.switch_port}"
    return f"ecn.kmin..kmax = {profile.kmin}..{profile.kmax} (pmax {profile.pmax:g}) at {r.switch}:{r.switch_port}"


def written(sections: dict, dilation: Dilation) -> dict:
    """The sections as the overlay file states them: those that say their
    dilation (congestion_control) as they are, the others (lossless: the
    hold rate, the watchdog's timers) in the undilated network's units, as
    a topology file's, so that a run at any dilation dilates them once."""
    return {k: v if section_dilation(v) is not None else dilation.undilated(v) for k, v in sections.items()}


def render(sections: dict, source: str, args: argparse.Namespace, dilation: Dilation = Dilation()) -> str:
    """The overlay's YAML, with a header saying what it was derived from."""
    given = [*(f"--overlay {o}" for o in args.overlay), f"--rtt-us {args.rtt_us:g}" if args.rtt_us is not None else "",
             f"--hop-us {args.hop_us:g}" if args.hop_us != HOP_S * 1e6 else "",
             f"--flows {args.flows}" if args.flows is not None else "", f"--ecn {args.ecn}" if args.ecn else ""]
    options = " ".join(g for g in given if g)
    validated = f" --validate --dilation {dilation.factor:g}" if getattr(args, "validate", None) else ""
    header = (f"# Overlay derived by `fabric tune --topology {args.topology}{' ' + options if options else ''}"
              f"{validated}` from {source}\n"
              "# (docs/tuning.md). Apply it with --overlay: each section replaces the topology's whole.\n"
              f"# congestion_control's values are the fabric's at dilation {dilation.factor:g} (its `dilation:`; "
              "1: undilated):\n# a run at another dilation rescales them."
              + (f" The other sections' times and rates, derived at x{dilation.factor:g}, are\n# the undilated "
                 f"network's (times / {dilation.factor:g}, rates x {dilation.factor:g}), as a topology file's."
                 if dilation.factor > 1 else "") + "\n")
    return header + yaml.safe_dump(sections, sort_keys=False, default_flow_style=None, width=110)


if __name__ == "__main__":
    sys.exit(main())
