#!/usr/bin/env python3
"""How well `fault diagnose` (features/failover/diagnose.py) names injected faults, on
leaf-spine under traffic between every pair of hosts.

    fabric experiment failover_diagnosis [ARGS="--per-kind 4 --loss-rates 1 2 5 10 20 --seed 1 --interval 1.5"]

Random faults, one at a time in a random order, each undone before the next,
--per-kind of each:

  lossy link    one direction of a random switch-to-switch link loses each
                --loss-rates percentage of what it carries, at random
                (emulator/impairments.py: netem, or nftables where the kernel
                has no netem);
  dead switch   a random switch's process killed (restarted and reprogrammed
                afterwards);
  blackhole     a random switch loses its route to a random remote host
                subnet (the controller deletes the entry): that traffic is
                dropped as NO_ROUTE.

For each: the diagnosis (two counter readings --interval apart), whether its
first finding names the fault (top-1), the time it took, and its fidelity
(docs/fidelity.md): threads waiting for a core while it was diagnosed. The
traffic never stops between faults, so frames lost before a pipeline are
judged once, for the whole run (a switch a fault restarted left out): a
diagnosis reads counters, and the machine's losses look like a lossy link
to it. Top-1 is printed over every fault and over the faithful ones. Writes
faults.csv and accuracy.png (per kind, and per loss rate) under --out
(default experiments/results/failover_diagnosis/).
"""
from __future__ import annotations

import random
import sys
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from p4.v1 import p4runtime_pb2

from features.failover import diagnose
from emulator.bmv2 import DEFAULT_EXPERIMENT_LOG_LEVEL, LOG_LEVELS
from emulator.build import compile_p4
from control.controller import FabricController
from control.forwarding import LPM_TABLE
from emulator.impairments import drop_fraction
from emulator.network import Network
from control.switch import update
from features import load_topology
from emulator.fidelity import FidelityMonitor
from emulator.calibration import Flow
from experiments.common import announce_budget, case_fidelity, experiment_parser, kill_switch, lost_before_pipeline, \
    print_fidelity
from experiments.common import save_figure, write_csv
from emulator.netns import socket_in_netns

KINDS = ("lossy link", "dead switch", "blackhole")
LOSS_RATES_PCT = (1, 2, 5, 10, 20)


PAIR_PPS = 250.0      # each ordered host pair's packets/s at most (a send every 4 ms)


def offered(topo) -> list[Flow]:
    """What the traffic asks of the machine (the budget's flows): every ordered host pair at PAIR_PPS."""
    return [Flow(a, b, PAIR_PPS) for a in topo.hosts for b in topo.hosts if a != b]


def traffic(topo, stop: threading.Event) -> list[threading.Thread]:
    """Every ordered host pair, 64 UDP flows each, at most PAIR_PPS each."""
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
                time.sleep(1 / PAIR_PPS)
        finally:
            s.close()
    threads = [threading.Thread(target=run, args=(a, b), daemon=True)
               for a in topo.hosts for b in topo.hosts if a != b]
    for t in threads:
        t.start()
    return threads


def inject(kind: str, loss_pct, rng: random.Random, topo, net, ctl):
    """Make the fault; return (what diagnose should name, how to undo it)."""
    if kind == "lossy link":
        links = diagnose.switch_links(topo)
        a, pa, b, pb = rng.choice(links)
        undo = drop_fraction(topo.switches[a].ports[pa].iface, loss_pct / 100)
        return ("link", {f"{a}:{pa}->{b}:{pb}"}), undo
    if kind == "dead switch":
        name = rng.choice(sorted(topo.switches))
        return ("switch", {name}), kill_switch(net, ctl, name)
    name = rng.choice(sorted(topo.switches))
    remote = [r for r in ctl.routes[name] if topo.hosts[r.host].switch != name]
    route = rng.choice(remote)
    entry = ctl.p4info.table_entry(LPM_TABLE, {"hdr.ipv4.dst_addr": route.prefix}, action="set_next_id",
                                   params={"next_id": 1})
    identity = p4runtime_pb2.TableEntry(table_id=entry.table_id, match=entry.match)
    ctl.connections[name].write([update(p4runtime_pb2.Update.DELETE, table_entry=identity)])
    return ("switch", {name}), lambda: ctl.program_switch(name)


def main(argv=None) -> int:
    ap = experiment_parser("failover_diagnosis", __doc__)
    ap.add_argument("--per-kind", type=int, default=4,
                    help="faults of each kind (lossy links: of each loss rate)")
    ap.add_argument("--loss-rates", type=float, nargs="+", default=list(LOSS_RATES_PCT),
                    help="percent lost by a lossy link")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--interval", type=float, default=1.5, help="seconds between the two counter readings")
    ap.add_argument("--out", default=str(REPO / "experiments" / "results" / "failover_diagnosis"),
                    help="results directory (default %(default)s)")
    ap.add_argument("--log-level", default=DEFAULT_EXPERIMENT_LOG_LEVEL, choices=LOG_LEVELS)
    args = ap.parse_args(argv)
    if args.per_kind < 1:
        ap.error("--per-kind must be at least 1")
    bad = [r for r in args.loss_rates if not 0 < r <= 100]
    if bad:
        ap.error(f"--loss-rates are percentages in (0, 100], got {bad}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(args.seed)
    plan = [("lossy link", r) for r in args.loss_rates for _ in range(args.per_kind)]
    plan += [(k, None) for k in KINDS[1:] for _ in range(args.per_kind)]
    rng.shuffle(plan)
    topo = load_topology(REPO / "topologies" / "leaf-spine.yaml")
    compile_p4()
    rows: list[dict[str, Any]] = []      # one per fault (faults.csv)
    with Network(topo, REPO / "build" / "experiments" / "failover_diagnosis", log_level=args.log_level) as net, \
            FabricController(topo) as ctl:
        ctl.program()
        budget = announce_budget(topo, offered(topo))
        whole_run = case_fidelity(net, ctl)
        stop = threading.Event()
        threads = traffic(topo, stop)
        time.sleep(1.0)
        try:
            for i, (kind, loss_pct) in enumerate(plan):
                fidelity = FidelityMonitor().start()        # the CPU while this fault is made and diagnosed
                (want_kind, want_names), undo = inject(kind, loss_pct, rng, topo, net, ctl)
                want_name = " or ".join(sorted(want_names))
                findings, took = diagnose.run(ctl, args.interval)
                verdict = fidelity.verdict()
                top = findings[0] if findings else None
                right = top is not None and top.kind == want_kind and top.name in want_names
                rows.append({"fault": i + 1, "kind": kind, "loss_pct": loss_pct if loss_pct is not None else "",
                             "injected": f"{want_kind} {want_name}",
                             "named": f"{top.kind} {top.name}" if top else "nothing", "top1": right,
                             "seconds": round(took, 2), "evidence": "; ".join(top.evidence) if top else "",
                             "fidelity": str(verdict), "budget": budget})
                what = f"{kind} {loss_pct:g}%" if loss_pct is not None else kind
                print(f"[{i + 1}/{len(plan)}] {what:16s} {want_name:22s} -> "
                      f"{rows[-1]['named']:28s} {'right' if right else 'WRONG'} ({took:.1f} s"
                      f"{'' if verdict.ok else ', not faithful'})", flush=True)
                undo()
                time.sleep(1.0)                 # counters settle before the next fault
        finally:
            stop.set()
            for t in threads:
                t.join()
        time.sleep(0.5)                         # the last frames reach their pipelines
        run_verdict = whole_run.verdict()
    lost = lost_before_pipeline("the whole run", run_verdict)
    for row in rows:
        row["run_lost_before_pipeline"] = lost
    write_csv(out / "faults.csv", rows)
    groups = [(f"{r:g}% loss", [x for x in rows if x["kind"] == "lossy link" and x["loss_pct"] == r])
              for r in args.loss_rates]
    groups += [(k, [x for x in rows if x["kind"] == k]) for k in KINDS[1:]]
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 3.8))
    labels = [g for g, _ in groups]
    acc = [100 * sum(x["top1"] for x in rs) / len(rs) for _, rs in groups]
    a1.bar(labels, acc)
    a1.set_ylabel("top-1 accuracy (%)")
    a1.set_ylim(0, 105)
    a1.set_title("fault diagnose: the right fault first")
    a1.tick_params(axis="x", labelrotation=30)
    a2.boxplot([[x["seconds"] for x in rs] for _, rs in groups])
    a2.set_xticks(range(1, len(groups) + 1), labels, rotation=30)
    a2.set_ylabel("seconds to a diagnosis")
    a2.set_title(f"time (readings {args.interval:g} s apart)")
    png = save_figure(fig, out / "accuracy.png")
    total = sum(r["top1"] for r in rows)
    faithful = [r for r in rows if r["fidelity"] == "ok"]
    print(f"\ntop-1: {total}/{len(rows)} (of the faithful faults: {sum(r['top1'] for r in faithful)}/"
          f"{len(faithful)}); " + ", ".join(f"{g} {a:.0f}%" for g, a in zip(labels, acc))
          + f"; median time {sorted(r['seconds'] for r in rows)[len(rows) // 2]} s")
    print(f"results: {out / 'faults.csv'}, {png}")
    print_fidelity([*({"case": f"fault {r['fault']} ({r['kind']})", "fidelity": r["fidelity"]} for r in rows),
                    {"case": "the whole run (frames lost before a pipeline)", "fidelity": str(run_verdict)}])
    return 0


if __name__ == "__main__":
    sys.exit(main())
