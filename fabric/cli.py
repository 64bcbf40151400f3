"""`fabric`: the project's one front door (the make targets call it).

    fabric run [--topology leaf-spine] [--no-cli]   build, start, program, ping all pairs, the shell
    fabric program --topology T [--dry-run]         program a running network (idempotent)
    fabric monitor --topology T                     INT collector, switch exporter, Prometheus
    fabric doctor | build                           the toolchain found; compile p4src/main.p4
    fabric bench [...]                              packets/s of the pipeline and each feature
    fabric calibrate [--if-stale]                   what this machine emulates faithfully (docs/fidelity.md)
    fabric train [--topology fat-tree-k4] [...]     PyTorch DDP across the fabric, techniques composed (--ablate)
    fabric tune --topology T [--out FILE]           PFC, ECN and congestion-control values derived (docs/tuning.md)
    fabric experiment NAME [...] | experiments      one experiment (CSV + PNG), or all
    fabric features [--markdown]                    the feature index
    fabric generate [--check]                       rewrite (or check) every generated file
    fabric probe-plan [topology ...]                INT probe plans of topologies
    fabric export kathara --topology T DIR          the topology as a Kathara lab (docs/operations.md)
    fabric topology dragonfly|slimfly|torus [...]   write a topology beyond Clos (topologies/README.md)
    fabric diagnose | heartbeats ...                commands the features add

Options after a command are that command's own (`fabric run --help`).
"""
from __future__ import annotations

import argparse
import ast
import importlib
import pkgutil
import sys
import textwrap
from pathlib import Path
from typing import Callable, Optional

import benchmarks.calibration
import benchmarks.forwarding_rate
import experiments
import experiments.train
from experiments.common import exit_on_sigterm
from control import probe_planner
from emulator import build, toolchain
from control.generators import dragonfly, slim_fly, torus
from control.controller import FabricController
from control.p4info import EntryError
from control.switch import CONTROLLER_CREDENTIALS, CONTROLLER_ELECTION_ID, SwitchError
from control.tls import PkiError
from control.topology import TopologyError
from fabric import generate, kathara, run, tune
from features import FEATURES, load_topology
from telemetry import monitor

REPO = Path(__file__).resolve().parent.parent


def on_fast_bmv2() -> None:
    """Run on the fast BMv2 where there is one (toolchain.use_fast_bmv2), saying so."""
    fast = toolchain.use_fast_bmv2()
    if fast:
        print(f"fabric: on the fast BMv2 in {fast} (${toolchain.ENV_VAR} chooses another)", flush=True)


def on_the_experiments_bmv2(command: Callable[[list[str]], int]) -> Callable[[list[str]], int]:
    """`command` on the BMv2 build the experiments run on (`fabric
    calibrate`: the calibration they will find is of their own build)."""
    def run(rest: list[str]) -> int:
        if not {"-h", "--help"} & set(rest):
            on_fast_bmv2()
        return command(rest)
    return run


def calibrated(command: Callable[[list[str]], int]) -> Callable[[list[str]], int]:
    """`command`, run on the fast BMv2 where there is one, once a current
    calibration of that build exists (measured first if none holds:
    benchmarks/calibration.py), so the run can size itself and say whether
    its rates fit this machine."""
    def run_calibrated(rest: list[str]) -> int:
        if not {"-h", "--help"} & set(rest):
            on_fast_bmv2()
            try:
                benchmarks.calibration.ensure()
            except toolchain.ToolchainMissing as exc:       # the command says so in its own words
                print(f"fabric: no calibration: {exc}", file=sys.stderr)
        return command(rest)
    return run_calibrated


# Modules of experiments/ that are not experiments: every experiment's helpers, and `fabric tune
# --validate`'s live checks (they run agents as experiments do).
NOT_EXPERIMENTS = frozenset({"common", "tuning"})


def experiment_names() -> list[str]:
    return sorted(m.name for m in pkgutil.iter_modules(experiments.__path__) if m.name not in NOT_EXPERIMENTS)


def experiment_index() -> str:
    """Each experiment with the first sentence of its module's docstring
    (read from the source: importing them all would load PyTorch)."""
    lines = ["usage: fabric experiment NAME [options]   (`fabric experiment NAME --help`: its options)", "",
             "experiments:"]
    for name in experiment_names():
        doc = ast.get_docstring(ast.parse((Path(experiments.__path__[0]) / f"{name}.py").read_text())) or ""
        paragraph = " ".join(doc.split("\n\n")[0].split())
        sentence = paragraph.split(". ")[0].rstrip(".")
        lines.append(f"  {name:<20} {textwrap.shorten(sentence, 100, placeholder=' ...')}")
    return "\n".join(lines)


def run_experiment(name: str, argv: list[str]) -> int:
    if name not in experiment_names():
        print(f"fabric: no experiment {name!r} (experiments: {', '.join(experiment_names())})", file=sys.stderr)
        return 2
    module = importlib.import_module(f"experiments.{name}")
    exit_on_sigterm()       # a killed experiment tears its network down, as on Ctrl-C
    return calibrated(module.main)(argv) or 0


def feature_index(markdown: bool) -> str:
    """The feature index the README shows (tests/unit/fabric/test_cli.py keeps it current)."""
    if markdown:
        rows = ["| feature | what | P4 | control | PTF | host | experiments | doc |",
                "|---|---|---|---|---|---|---|---|"]
        for f in FEATURES:
            p = f.pieces
            rows.append(f"| `{f.name}` | {f.summary} | {', '.join(f'`{x}`' for x in p.p4)} | `{p.control}` | "
                        f"`{p.ptf}` | {f'`{p.host}`' if p.host else '-'} | "
                        f"{', '.join(f'`{x}`' for x in p.experiments)} | [{p.doc}]({p.doc}) |")
        return "\n".join(rows)
    lines = []
    for f in FEATURES:
        lines.append(f"{f.name:15s} {f.summary}")
        lines.append(f"{'':15s} section `{f.section}:`, pieces: {', '.join(f.pieces.paths())}")
    return "\n".join(lines)


Command = Callable[[list[str]], int]


def by_kind(command: str, kinds: dict[str, Command], usage: str) -> Command:
    """`fabric COMMAND KIND ...`: the rest of the line to KIND's own main;
    a missing or unknown kind gets the usage (exit 2)."""
    def main(rest: list[str]) -> int:
        if not rest or rest[0] not in kinds:
            first = next(iter(kinds))
            print(f"usage: fabric {command} {{{','.join(kinds)}}} {usage} (`fabric {command} {first} --help`)",
                  file=sys.stderr)
            return 2
        return kinds[rest[0]](rest[1:])
    return main


# fabric export FORMAT ...: the topology written for another emulator
export = by_kind("export", {"kathara": kathara.main}, "--topology T DIR")
# fabric topology KIND ...: write a topology file of that kind
topology = by_kind("topology", {"dragonfly": dragonfly.main, "slimfly": slim_fly.main, "torus": torus.main},
                   "[...] [-o FILE]")


def _program(args: argparse.Namespace) -> int:
    topo = load_topology(args.topology)
    with FabricController(topo, election_id=args.election_id,
                          credentials=None if args.no_tls else CONTROLLER_CREDENTIALS) as ctl:
        for r in ctl.program(dry_run=args.dry_run):
            pushed = "pipeline pushed, " if r.pipeline_pushed else ""
            print(f"{r.name:10s} {pushed}{r.report}")
    return 0


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="fabric", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    sub = ap.add_subparsers(dest="command", required=True, metavar="COMMAND")
    # Commands whose own main parses the rest of the line.
    passthrough: dict[str, Callable[[list[str]], int]] = {
        "run": run.main, "monitor": monitor.main, "build": build.main, "doctor": lambda rest: toolchain.doctor(),
        "bench": calibrated(benchmarks.forwarding_rate.main),
        "calibrate": on_the_experiments_bmv2(benchmarks.calibration.main),
        "generate": generate.main,
        "probe-plan": lambda rest: probe_planner.main(rest, FEATURES),
        "export": export,
        "topology": topology,
        "train": calibrated(experiments.train.main),
        "tune": tune.main,
    }
    helps = {"run": "build, start a topology on BMv2, program it, ping all pairs, open the shell",
             "monitor": "INT collector, switch exporter and Prometheus next to a running network",
             "build": "compile p4src/main.p4", "doctor": "what toolchain was found, and how to get what is missing",
             "bench": "packets/s of the pipeline, of each feature, and two references",
             "calibrate": "measure what this machine emulates faithfully (--if-stale: only if none holds)",
             "generate": "rewrite every generated file (--check: fail if one is stale)",
             "probe-plan": "the INT probe plans of topologies",
             "export": "the topology for another emulator: `export kathara --topology T DIR`",
             "topology": "write a topology beyond Clos: `topology {dragonfly,slimfly,torus} --help`",
             "train": "PyTorch DDP across the fabric with the techniques composed; --ablate prices each",
             "tune": "PFC headroom/XON/XOFF, ECN thresholds, watchdog and congestion-control constants derived "
                     "from a topology; --out writes an overlay"}
    for name in passthrough:
        sub.add_parser(name, help=helps[name], add_help=False).add_argument("rest", nargs=argparse.REMAINDER)
    p = sub.add_parser("program", help="program a running network (idempotent)")
    p.add_argument("--topology", "-t", required=True, help="topology name in topologies/ or a YAML path")
    p.add_argument("--dry-run", action="store_true", help="compute and show the writes, change nothing")
    p.add_argument("--election-id", type=run.election_id_arg, default=CONTROLLER_ELECTION_ID,
                   help="the controller's P4Runtime election id HIGH,LOW (default %s,%s)" % CONTROLLER_ELECTION_ID)
    p.add_argument("--no-tls", action="store_true", help="plain gRPC (a network started with --no-tls); by default "
                   "the controller presents build/pki/clients/controller.pem")
    p = sub.add_parser("experiment", help="run one experiment", add_help=False)
    p.add_argument("name", metavar="NAME", help=f"one of: {', '.join(experiment_names())}")
    p.add_argument("rest", nargs=argparse.REMAINDER)
    p = sub.add_parser("experiments", help="run every experiment")
    p.add_argument("rest", nargs=argparse.REMAINDER)
    p = sub.add_parser("features", help="the feature index")
    p.add_argument("--markdown", action="store_true", help="as the README's table")
    feature_commands = {}
    for f in FEATURES:
        for name, command in f.cli.items():
            p = sub.add_parser(name, help=f"{command.help} ({f.name})")
            p.add_argument("--topology", "-t", required=True, help="topology name in topologies/ or a YAML path")
            command.add_arguments(p)
            feature_commands[name] = command

    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] in passthrough:           # the command's own parser gets the rest, untouched
        return passthrough[argv[0]](argv[1:]) or 0
    if len(argv) >= 2 and argv[0] == "experiment" and not argv[1].startswith("-"):
        return run_experiment(argv[1], argv[2:])
    if argv and argv[0] == "experiment":          # no name (or --help): what there is to run
        print(experiment_index())
        return 0 if argv[1:2] in (["-h"], ["--help"]) else 2
    args, extra = ap.parse_known_args(argv)
    rest = list(getattr(args, "rest", []) or []) + extra
    try:
        if args.command in passthrough:
            return passthrough[args.command](rest) or 0
        if extra:
            ap.error(f"unrecognized arguments: {' '.join(extra)}")
        if args.command == "program":
            return _program(args)
        if args.command == "experiment":
            return run_experiment(args.name, rest)
        if args.command == "experiments":
            for name in experiment_names():
                print(f"==> experiment {name}", flush=True)
                code = run_experiment(name, rest)
                if code:
                    return code
            return 0
        if args.command == "features":
            print(feature_index(args.markdown))
            return 0
        command = feature_commands[args.command]
        return command.run(args, load_topology(args.topology))
    except (TopologyError, EntryError, SwitchError, FileNotFoundError, PkiError) as exc:
        print(f"fabric {args.command}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
