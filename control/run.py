"""The main job: build, bring a topology up on BMv2, program every switch,
prove all-pairs host connectivity, print a summary, then open the CLI.

    python -m control.run                      # leaf-spine, then the CLI
    python -m control.run --no-cli             # same, non-interactive; exit 0 on success
    python -m control.run --topology fat-tree-k4 --pcap
"""
from __future__ import annotations

import argparse
import signal
import sys
import time
from pathlib import Path

from .bmv2 import DEFAULT_INTERACTIVE_LOG_LEVEL, LOG_LEVELS
from .build import CompileError, compile_p4
from .cli import FabricCLI
from .controller import FabricController
from .network import Network, NetworkError, queue_rate_pps
from .p4info import EntryError
from .switch import SwitchError
from .toolchain import ToolchainMissing
from .topology import Topology, TopologyError, load

REPO = Path(__file__).resolve().parent.parent


def resolve_topology(arg: str) -> Path:
    """A topology name (file in topologies/) or a path."""
    path = Path(arg)
    if path.suffix in (".yaml", ".yml") or path.exists():
        return path
    candidate = REPO / "topologies" / f"{arg}.yaml"
    if not candidate.exists():
        names = sorted(p.stem for p in (REPO / "topologies").glob("*.yaml"))
        raise TopologyError(f"no topology named {arg!r} (available: {', '.join(names)}; or give a path)")
    return candidate


def step(msg: str) -> float:
    print(f"==> {msg}", flush=True)
    return time.monotonic()


def summary(topo: Topology, net: Network, ctl: FabricController, results, reach: dict, took: float) -> bool:
    ok = all(reach.values())
    print("\n" + "=" * 72)
    print(f"Topology {topo.name}: {len(topo.switches)} switches, {len(topo.hosts)} hosts, {len(topo.links)} links")
    print(f"{'switch':10s} {'device':>6s} {'P4Runtime':>16s} {'thrift':>6s} {'ports':>5s}  programming")
    for r in results:
        sw = topo.switches[r.name]
        print(f"{sw.name:10s} {sw.device_id:6d} {sw.grpc_addr:>16s} {sw.thrift_port:6d} {len(sw.ports):5d}  {r.report}")
    bw = sorted({link.bandwidth_mbps for link in topo.links})
    print("Queue rates: " + ", ".join(f"{b:g} Mbit/s -> {queue_rate_pps(b)} pps" for b in bw))
    # ECMP at work: how much of the test traffic each switch's upward ports carried.
    spread = []
    for sw in topo.switches.values():
        uplinks = [p for p in sw.ports.values() if p.peer in topo.switches]
        if sw.role in ("spine", "core"):
            rx = ctl.counter(sw.name, "ingress_port_counter")
            spread.append(f"{sw.name} {sum(rx.get(p.number, (0, 0))[0] for p in uplinks)} pkts")
    if spread:
        print("Traffic through the top tier: " + ", ".join(spread))
    print(f"All-pairs connectivity: {sum(reach.values())}/{len(reach)} host pairs "
          f"{'OK' if ok else 'FAILED'}  ({took:.1f}s from start)")
    for (a, b), good in sorted(reach.items()):
        if not good:
            print(f"  no reply: {a} -> {b} ({topo.hosts[b].ip})")
    print(f"Logs: {net.run_dir}/<switch>.log")
    print("=" * 72)
    return ok


def run(args) -> int:
    t0 = time.monotonic()
    topo = load(resolve_topology(args.topology))  # validated before anything starts
    step("compiling p4src/main.p4")
    pipeline = compile_p4()
    run_dir = Path(args.run_dir)
    step(f"starting {topo.name}: {len(topo.switches)} BMv2 switches, {len(topo.hosts)} hosts (logs in {run_dir})")
    with Network(topo, run_dir, log_level=args.log_level, pcap=args.pcap) as net, \
            FabricController(topo, pipeline) as ctl:
        step("connecting P4Runtime, pushing the pipeline, writing routes and ECMP groups")
        try:
            ctl.connect()
        except SwitchError:
            net.check_alive()  # a switch that died explains it better
            raise
        results = ctl.program()
        step("setting BMv2 egress queue rates from link bandwidth (Thrift)")
        net.apply_queue_rates()
        step(f"pinging all {len(topo.hosts) * (len(topo.hosts) - 1)} host pairs")
        reach = net.ping_all()
        if not all(reach.values()):  # a first ping can race the last writes: retry the failed pairs once
            retry = net.ping_all()
            reach = {pair: ok or retry[pair] for pair, ok in reach.items()}
        net.check_alive()
        ok = summary(topo, net, ctl, results, reach, time.monotonic() - t0)
        if args.no_cli:
            return 0 if ok else 1
        FabricCLI(net, ctl).cmdloop()
        return 0 if ok else 1


def _terminate(signum, _frame):
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--topology", "-t", default="leaf-spine", help="topology name in topologies/ or a YAML path")
    ap.add_argument("--no-cli", action="store_true", help="do not open the CLI: exit after the summary")
    ap.add_argument("--pcap", action="store_true", help="write per-port pcaps under <run-dir>/pcap")
    ap.add_argument("--log-level", default=DEFAULT_INTERACTIVE_LOG_LEVEL, choices=LOG_LEVELS,
                    help="BMv2 log level (default info; trace logs every table lookup and slows BMv2 "
                         "several times; off for measurements)")
    ap.add_argument("--run-dir", default=str(REPO / "build" / "run"), help="where logs and state go")
    args = ap.parse_args(argv)
    signal.signal(signal.SIGTERM, _terminate)
    try:
        return run(args)
    except (TopologyError, CompileError, ToolchainMissing, EntryError, SwitchError, NetworkError,
            FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("\ninterrupted: network torn down", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
