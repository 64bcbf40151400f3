#!/usr/bin/env python3
"""How well `fault diagnose` (control/diagnose.py) names injected faults, on
leaf-spine under traffic between every pair of hosts.

    make experiment-fault_diagnosis [ARGS="--faults 24 --seed 1 --interval 1.5"]

Random faults, one at a time, each undone before the next:

  lossy link    a rate limit with a 2-packet queue (tc tbf) on one direction
                of a random switch-to-switch link (this kernel has no netem):
                most of what that direction carries is lost;
  dead switch   a random switch's process killed (restarted and reprogrammed
                afterwards);
  blackhole     a random switch loses its route to a random remote host
                subnet (the controller deletes the entry): that traffic is
                dropped as NO_ROUTE.

For each: the diagnosis (two counter readings --interval apart), whether its
first finding names the fault (top-1), and the time it took. Writes
faults.csv and accuracy.png under --out (default
experiments/results/fault_diagnosis/).
"""
from __future__ import annotations

import argparse
import csv
import random
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from p4.v1 import p4runtime_pb2  # noqa: E402

from control import diagnose  # noqa: E402
from control.bmv2 import DEFAULT_EXPERIMENT_LOG_LEVEL, LOG_LEVELS  # noqa: E402
from control.build import compile_p4  # noqa: E402
from control.controller import FabricController  # noqa: E402
from control.forwarding import LPM_TABLE  # noqa: E402
from control.network import Network, sh  # noqa: E402
from control.switch import update  # noqa: E402
from control.topology import load  # noqa: E402
from experiments._plots import save_figure  # noqa: E402
from telemetry.netns import socket_in_netns  # noqa: E402

KINDS = ("lossy link", "dead switch", "blackhole")


def traffic(topo, stop: threading.Event) -> list[threading.Thread]:
    """Every ordered host pair, 64 UDP flows each, ~250 packets/s per pair."""
    def run(src, dst):
        s = socket_in_netns(src)
        i = 0
        try:
            while not stop.is_set():
                try:
                    s.sendto(b"x" * 32, (topo.hosts[dst].ip, 5400 + i % 64))
                except OSError:
                    pass
                i += 1
                time.sleep(0.004)
        finally:
            s.close()
    threads = [threading.Thread(target=run, args=(a, b), daemon=True)
               for a in topo.hosts for b in topo.hosts if a != b]
    for t in threads:
        t.start()
    return threads


def inject(kind: str, rng: random.Random, topo, net, ctl):
    """Make the fault; return (what diagnose should name, how to undo it)."""
    if kind == "lossy link":
        links = diagnose.switch_links(topo)
        a, pa, b, pb = rng.choice(links)
        iface = topo.switches[a].ports[pa].iface
        sh("tc", "qdisc", "add", "dev", iface, "root", "tbf", "rate", "64kbit", "burst", "1600", "limit", "200")
        return ("link", f"{a}:{pa}->{b}:{pb}"), lambda: sh("tc", "qdisc", "del", "dev", iface, "root")
    if kind == "dead switch":
        name = rng.choice(sorted(topo.switches))
        net.switches[name].proc.kill()
        net.switches[name].proc.wait()
        conn = ctl.connections.pop(name, None)
        if conn is not None:
            try:
                conn.close()
            except Exception:
                pass

        def undo():
            net.restart_switch(name)
            ctl.recover_switch(name)
        return ("switch", name), undo
    name = rng.choice(sorted(topo.switches))
    remote = [r for r in ctl.routes[name] if topo.hosts[r.host].switch != name]
    route = rng.choice(remote)
    entry = ctl.p4info.table_entry(LPM_TABLE, {"hdr.ipv4.dst_addr": route.prefix}, action="set_next_id",
                                   params={"next_id": 1})
    identity = p4runtime_pb2.TableEntry(table_id=entry.table_id, match=entry.match)
    ctl.connections[name].write([update(p4runtime_pb2.Update.DELETE, table_entry=identity)])
    return ("switch", name), lambda: ctl.program_switch(name)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--faults", type=int, default=24, help="faults injected, kinds in turn")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--interval", type=float, default=1.5, help="seconds between the two counter readings")
    ap.add_argument("--out", default=str(REPO / "experiments" / "results" / "fault_diagnosis"))
    ap.add_argument("--log-level", default=DEFAULT_EXPERIMENT_LOG_LEVEL, choices=LOG_LEVELS)
    args = ap.parse_args(argv)
    if args.faults < 1:
        ap.error("--faults must be at least 1")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(args.seed)
    topo = load(REPO / "topologies" / "leaf-spine.yaml")
    compile_p4()
    rows = []
    with Network(topo, REPO / "build" / "experiments" / "fault_diagnosis", log_level=args.log_level) as net, \
            FabricController(topo) as ctl:
        ctl.program()
        stop = threading.Event()
        threads = traffic(topo, stop)
        time.sleep(1.0)
        try:
            for i in range(args.faults):
                kind = KINDS[i % len(KINDS)]
                (want_kind, want_name), undo = inject(kind, rng, topo, net, ctl)
                findings, took = diagnose.run(ctl, args.interval)
                top = findings[0] if findings else None
                right = top is not None and (top.kind, top.name) == (want_kind, want_name)
                rows.append({"fault": i + 1, "kind": kind, "injected": f"{want_kind} {want_name}",
                             "named": f"{top.kind} {top.name}" if top else "nothing", "top1": right,
                             "seconds": round(took, 2), "evidence": "; ".join(top.evidence) if top else ""})
                print(f"[{i + 1}/{args.faults}] {kind:11s} {want_name:22s} -> "
                      f"{rows[-1]['named']:28s} {'right' if right else 'WRONG'} ({took:.1f} s)", flush=True)
                undo()
                time.sleep(1.0)                 # counters settle before the next fault
        finally:
            stop.set()
            for t in threads:
                t.join()
    with open(out / "faults.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(9, 3.6))
    acc = [100 * sum(r["top1"] for r in rows if r["kind"] == k) / max(1, sum(r["kind"] == k for r in rows))
           for k in KINDS]
    a1.bar(KINDS, acc)
    a1.set_ylabel("top-1 accuracy (%)")
    a1.set_ylim(0, 105)
    a1.set_title("fault diagnose: the right fault first")
    a2.boxplot([[r["seconds"] for r in rows if r["kind"] == k] for k in KINDS])
    a2.set_xticks(range(1, len(KINDS) + 1), KINDS)
    a2.set_ylabel("seconds to a diagnosis")
    a2.set_title(f"time (readings {args.interval:g} s apart)")
    png = save_figure(fig, out / "accuracy.png")
    total = sum(r["top1"] for r in rows)
    print(f"\ntop-1: {total}/{len(rows)} "
          + ", ".join(f"{k} {a:.0f}%" for k, a in zip(KINDS, acc))
          + f"; median time {sorted(r['seconds'] for r in rows)[len(rows) // 2]} s")
    print(f"results: {out / 'faults.csv'}, {png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
