"""The main job: build, bring a topology up on BMv2, program every switch,
prove all-pairs host connectivity (every NIC pair that shares a plane, from
each NIC, on multi-homed topologies), print a summary, then open the CLI.

    fabric run                      # leaf-spine, then the CLI
    fabric run --no-cli             # same, non-interactive; exit 0 on success
    fabric run --topology fat-tree-k4 --pcap
    fabric run --topology T --overlay tuned.yaml   # T with the sections `fabric tune --out` wrote (docs/tuning.md)
"""
from __future__ import annotations

import argparse
import contextlib
import threading
import signal
import sys
import time
from pathlib import Path

from emulator.bmv2 import DEFAULT_INTERACTIVE_LOG_LEVEL, LOG_LEVELS
from emulator.build import CompileError, compile_p4
from fabric.shell import FabricCLI
from control.controller import FabricController
from emulator.network import PROXY_LOG, Network, NetworkError, queue_rate_pps
from control.authorization import ACCESS, DEFAULT_OPERATOR_ACCESS
from control.p4info import EntryError
from control.switch import CONTROLLER_CREDENTIALS, CONTROLLER_ELECTION_ID, SwitchError, parse_election_id
from control.tls import Pki, PkiError
from emulator.toolchain import ToolchainMissing
from control.feature import in_background
from emulator.supervisor import Supervisor
from control.topology import Topology, TopologyError
from features import load_topology
from telemetry import adaptive_sampling

REPO = Path(__file__).resolve().parent.parent


def step(msg: str) -> float:
    print(f"==> {msg}", flush=True)
    return time.monotonic()


def connectivity(topo: Topology, reach: dict[tuple[str, str], bool]) -> tuple[bool, list[str]]:
    """Judge ping results keyed by NIC label (host names on one-NIC
    topologies): every pair the fabric connects must answer and, across
    planes, none may. Returns (ok, summary lines)."""
    nics = {n.label: n for n in topo.nics}
    dist = topo.hops_between_switches()
    expect = {pair: nics[pair[1]].switch in dist[nics[pair[0]].switch] for pair in reach}
    should = [pair for pair, e in expect.items() if e]
    good = sum(reach[pair] for pair in should)
    leaks = sorted(pair for pair, e in expect.items() if not e and reach[pair])
    ok = good == len(should) and not leaks
    unit = "NIC" if topo.multi_homed else "host"
    lines = [f"All-pairs connectivity: {good}/{len(should)} {unit} pairs {'OK' if good == len(should) else 'FAILED'}"]

    def tally(pairs, what: str) -> str:
        n = sum(reach[p] for p in pairs)
        return f"{n}/{len(pairs)} {what} {'OK' if n == len(pairs) else 'FAILED'}"

    for plane in topo.planes:
        same = [p for p in should if nics[p[0]].plane == plane and nics[p[1]].plane == plane]
        lines.append(f"  plane {plane}: {tally(same, 'NIC pairs')}")
    across = [p for p, e in expect.items() if not e]
    if topo.planes and across:
        lines.append(f"  across planes: {sum(reach[p] for p in across)}/{len(across)} NIC pairs answered "
                     f"({'FAILED: planes must be disjoint' if leaks else 'OK: the planes are disjoint'})")
    for rail in topo.rails:
        same = [p for p in should if nics[p[0]].rail == rail and nics[p[1]].rail == rail]
        other = [p for p in should if nics[p[0]].rail == rail and nics[p[1]].rail not in (rail, None)]
        lines.append(f"  rail {rail}: {tally(same, 'NIC pairs within the rail')}, "
                     f"{tally(other, 'to other rails')} (through the spines)")
    for a, b in sorted(p for p in should if not reach[p]):
        lines.append(f"  no reply: {a} -> {b} ({nics[b].ip})")
    for a, b in leaks:
        lines.append(f"  unexpected reply across planes: {a} -> {b} ({nics[b].ip})")
    return ok, lines


def summary(topo: Topology, net: Network, ctl: FabricController, results, reach: dict, took: float) -> bool:
    ok, lines = connectivity(topo, reach)
    print("\n" + "=" * 72)
    shape = f"{len(topo.switches)} switches, {len(topo.hosts)} hosts, {len(topo.links)} links"
    if topo.multi_homed:
        shape += f", {len(topo.nics)} NICs"
    if topo.planes:
        shape += f", planes {', '.join(topo.planes)}"
    if topo.rails:
        shape += f", rails {', '.join(map(str, topo.rails))}"
    print(f"Topology {topo.name}: {shape}")
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
    print(f"{lines[0]}  ({took:.1f}s from start)")
    for line in lines[1:]:
        print(line)
    proxy = f", {PROXY_LOG} (the P4Runtime proxy)" if net.proxy is not None else ""
    print(f"Logs: {net.run_dir}/<switch>.txt (BMv2, level {net.log_level}) and <switch>.stdout{proxy}")
    print("=" * 72)
    return ok


def ping_everything(topo: Topology, net: Network) -> dict[tuple[str, str], bool]:
    """Ping every ordered NIC pair on different hosts (host pairs on one-NIC
    topologies), pairs across planes included (they must not answer)."""
    pairs = [(a, b) for a, b, _ in topo.nic_pairs()]
    reach = net.ping_nics(pairs)
    expect = {(a.label, b.label): e for a, b, e in topo.nic_pairs()}
    failed = [(a, b) for a, b in pairs if expect[(a.label, b.label)] and not reach[(a.label, b.label)]]
    if failed:  # a first ping can race the last writes: retry the failed pairs once
        reach.update({pair: True for pair, good in net.ping_nics(failed).items() if good})
    return reach


def run(args) -> int:
    t0 = time.monotonic()
    topo = load_topology(args.topology, overlays=args.overlay)  # validated before anything starts
    if topo.overlays:
        step(f"overlays over {topo.source}: {', '.join(topo.overlays)} (their sections replace the file's)")
    step("compiling p4src/main.p4")
    pipeline = compile_p4()
    run_dir = Path(args.run_dir)
    step(f"starting {topo.name}: {len(topo.switches)} BMv2 switches, {len(topo.hosts)} hosts (logs in {run_dir})")
    proxy = not (args.no_tls or args.no_proxy)       # roles come from client certificates: no proxy without TLS
    tls = "plain gRPC (--no-tls)" if args.no_tls else f"mutual TLS, certificates in {Pki().dir}"
    roles = (f", behind the authorizing proxy (controller full, operator {args.operator_access}, monitor read-only)"
             if proxy else ", straight to BMv2 (no roles: any client certificate may write)")
    step(f"P4Runtime: {tls}{roles}")
    with Network(topo, run_dir, log_level=args.log_level, pcap=args.pcap, pki=None if args.no_tls else Pki(),
                 p4runtime_proxy=proxy, operator_access=args.operator_access) as net, \
            FabricController(topo, pipeline, election_id=args.election_id,
                             credentials=None if args.no_tls else CONTROLLER_CREDENTIALS) as ctl:
        step("connecting P4Runtime, pushing the pipeline, writing routes and ECMP groups")
        try:
            ctl.connect()
        except SwitchError:
            net.check_alive()  # a switch that died explains it better
            raise
        results = ctl.program()
        step("setting BMv2 egress queue rates from link bandwidth (Thrift)")
        net.apply_queue_rates()
        lock = threading.Lock()
        with contextlib.ExitStack() as running:
            running.enter_context(_supervised(net, ctl, lock))
            for feature in topo.known_features:        # what each feature runs beside the network
                for background in feature.background(topo, ctl, lock, _say):
                    running.enter_context(background)
            running.enter_context(adaptive_sampling.serving(topo, ctl, lock, _say))   # int.adaptive only
            return _checked_and_cli(args, topo, net, ctl, results, t0, lock)


def _supervised(net, ctl, lock):
    """A switch process that dies is restarted and reprogrammed (emulator/supervisor.py)."""
    return in_background(Supervisor(net, ctl, lock, on_recovery=lambda r: print(f"\n[recovery] {r}",
                                                                                flush=True)).run)


def _say(msg: str) -> None:
    print(msg, flush=True)


def _checked_and_cli(args, topo, net, ctl, results, t0, lock) -> int:
    """Ping every pair, print the summary, then the CLI (unless --no-cli)."""
    pairs = topo.nic_pairs()
    connected = sum(e for _, _, e in pairs)
    unit, how = ("NIC", ", each from its source NIC") if topo.multi_homed else ("host", "")
    across = len(pairs) - connected
    isolated = f", and {across} across planes that must not answer" if across else ""
    step(f"pinging all {connected} {unit} pairs{how}{isolated}")
    reach = ping_everything(topo, net)
    net.check_alive()
    ok = summary(topo, net, ctl, results, reach, time.monotonic() - t0)
    if args.no_cli:
        return 0 if ok else 1
    FabricCLI(net, ctl, lock).cmdloop()
    return 0 if ok else 1


def _terminate(signum, _frame):
    raise KeyboardInterrupt(f"signal {signum}")


def election_id_arg(text: str) -> tuple[int, int]:
    try:
        return parse_election_id(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="fabric run", description=__doc__.split("\n\n")[0])
    ap.add_argument("--topology", "-t", default="leaf-spine", help="topology name in topologies/ or a YAML path")
    ap.add_argument("--overlay", action="append", default=[], metavar="FILE",
                    help="feature sections applied over the topology's, section by section (repeatable; "
                         "`fabric tune --out` writes one: docs/tuning.md)")
    ap.add_argument("--no-cli", action="store_true", help="do not open the CLI: exit after the summary")
    ap.add_argument("--pcap", action="store_true", help="write per-port pcaps under <run-dir>/pcap")
    ap.add_argument("--log-level", default=DEFAULT_INTERACTIVE_LOG_LEVEL, choices=LOG_LEVELS,
                    help="BMv2 log level (default info; trace logs every table lookup and slows BMv2 "
                         "several times; off for measurements)")
    ap.add_argument("--run-dir", default=str(REPO / "build" / "run"), help="where logs and state go")
    ap.add_argument("--election-id", type=election_id_arg, default=CONTROLLER_ELECTION_ID,
                    help="the controller's P4Runtime election id HIGH,LOW (default %s,%s; the highest "
                         "connected client is primary and alone may write)" % CONTROLLER_ELECTION_ID)
    ap.add_argument("--no-tls", action="store_true", help="P4Runtime over plain gRPC (default: mutual TLS with the "
                    "project's certificates in build/pki, made at start); implies --no-proxy")
    ap.add_argument("--no-proxy", action="store_true", help="clients reach BMv2's P4Runtime directly, without the "
                    "authorizing proxy (default: the proxy enforces each client certificate's role)")
    ap.add_argument("--operator-access", default=DEFAULT_OPERATOR_ACCESS, choices=tuple(ACCESS),
                    help="what the operator's certificate may do through the proxy (default %(default)s; "
                         "read-only: reads and a backup's stream, as the monitor)")
    args = ap.parse_args(argv)
    signal.signal(signal.SIGTERM, _terminate)
    try:
        return run(args)
    except (TopologyError, CompileError, ToolchainMissing, EntryError, SwitchError, NetworkError,
            FileNotFoundError, PkiError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("\ninterrupted: network torn down", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
