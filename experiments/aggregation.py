#!/usr/bin/env python3
"""In-network aggregation on BMv2 (docs/protocols/aggregation.md), on
topologies/aggregation-rack.yaml: one switch, eight workers, a parameter server.

    make experiment-aggregation [ARGS="--elements 262144 --phases goodput,loss,jobs,training"]

Phases (each writes a CSV and a PNG under --out, default
experiments/results/aggregation/):

  goodput   all-reduce of the same float32 data by n = 2, 4, 8 workers,
            through the switch (jobs 3, 2, 1) and with the ring all-reduce
            over UDP between the same hosts through the same switch:
            elements/s, and UDP payload bytes per worker against the bound
            (in-network: a worker sends S and receives S; ring: 2(n-1)/n S
            each way; S = 4 bytes x elements).
  window    n = 4 (job 2, 128 slots): all-reduce rate and the workers'
            smoothed round trip by window (packets in flight a worker,
            --windows): the rate grows with the window until the switch's
            aggregation rate bounds it (contributions/s, against the
            `make bench` row), and then the round trip grows instead.
  loss      n = 4 (job 2) under 0, 1, 2, 5% loss on both directions of every
            worker's link: completion time, retransmissions, blocks the
            parameter server completed.
  jobs      1 to 4 jobs of 4 workers at once (jobs 4-7) sharing a slot pool
            smaller than their windows together: completion time per job,
            share of blocks falling back to the parameter server, Jain's
            fairness index of the jobs' rates.
  training  data-parallel training of an MLP on scikit-learn's digits with 4
            workers whose gradients are all-reduced through the switch (job
            2), next to the single-process reference and the ring: loss and
            accuracy per epoch.

Over trees of switches (docs/protocols/aggregation.md, "Trees"), each phase
on its own network, the jobs changed at runtime between cases:

  levels    all-reduce of --tree-elements float32 on leaf-spine (3 workers
            on two leaves) and fat-tree-k4 (4 workers, one per pod; 8, two
            per pod), summed at the server's switch (one level), over one
            tree, and over one tree per top switch: completion time, and
            packets on the busiest switch-to-switch link and on all of them
            (the switches' port counters) against the bound: each link of a
            tree carries each block once up and once down.
  tree_loss leaf-spine, two trees, 0, 1, 5% loss on both directions of every
            worker's link (1% duplication, 5% reordering): completion time,
            retransmissions, partials and results sent again.
  tree_ecn  leaf-spine at 20 Mbit/s (queues of 1666 packets/s), two trees,
            ECN marking at every switch port (step, K = ECN_K): the
            all-reduce alone, then next to an elephant from h4 to h1 that
            starts at ELEPHANT_PPS (above a link's rate: its spine's queue to
            leaf1 fills) and either keeps that rate or slows down with DCQCN
            (h1 receives it and sends CNPs), with workers that ignore
            congestion and with workers that send ECT and halve their window
            on CONGESTED results.

Every number comes from the workers' own JSON (hostagent.aggregation.allreduce,
hostagent.aggregation.ring_allreduce, hostagent.aggregation.training), written per phase in the
same directory. Times are BMv2's on this machine: compare within a run.
Every case's row carries its fidelity verdict (frames lost before a
pipeline, threads waiting for a core; docs/fidelity.md: training's rows
one for each method), and the last lines say which cases were not faithful.
"""
from __future__ import annotations

import contextlib
import csv
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterator

REPO = Path(__file__).resolve().parent.parent

import matplotlib
import yaml

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from emulator.bmv2 import DEFAULT_EXPERIMENT_LOG_LEVEL, LOG_LEVELS
from emulator.build import compile_p4
from control.controller import FabricController
from emulator.network import Network
from features import load_topology, topology_from_dict
from features.aggregation import Job, switch_events
from hostagent.aggregation.runs import (PY, RING_PORT, impaired, run_ina, run_jobs, run_ring,
                                         start_server, stop_server)
from experiments.common import case_fidelity, experiment_parser, lost_before_pipeline, print_fidelity, save_figure, \
    traffic_agent, write_csv

RACK_PHASES = ("goodput", "window", "loss", "jobs", "training")
TREE_PHASES = ("levels", "tree_loss", "tree_ecn")
PHASES = RACK_PHASES + TREE_PHASES
# levels: (topology, workers, server, trees when one per top switch)
TREE_CASES = (("leaf-spine", ("h1", "h2", "h3"), "h4", 2),
              ("fat-tree-k4", ("h1", "h5", "h9", "h13"), "h2", 4),
              ("fat-tree-k4", ("h1", "h3", "h5", "h7", "h9", "h11", "h13", "h15"), "h2", 4))
TREE_SLOTS = 32
ECN_BANDWIDTH_MBPS = 20        # tree_ecn: slow links, so one elephant fills a queue without using up BMv2
ECN_K = 10                     # tree_ecn: step marking above this queue depth (packets)
ELEPHANT_PPS = 1800            # tree_ecn: above the 1666 packets/s of a 20 Mbit/s link
JOB_OF_N = {2: 3, 4: 2, 8: 1}          # aggregation-rack.yaml's dedicated jobs
SHARED_JOBS = (4, 5, 6, 7)
WINDOW_SLOTS = 128                     # job 2's slots in aggregation-rack.yaml: the largest window


def mean(xs) -> float:
    xs = list(xs)
    return sum(xs) / len(xs)


VERDICTS: dict[str, str] = {}         # every case judged in this run, for its last lines


@contextlib.contextmanager
def judged(case: str, net, ctl) -> Iterator[dict[str, str]]:
    """A case's fidelity on the network it runs on (docs/fidelity.md):
    yields the columns lost_before_pipeline and fidelity for its row,
    filled in when the block (the case's traffic) ends."""
    monitor = case_fidelity(net, ctl)
    columns: dict[str, str] = {}
    try:
        yield columns
    except BaseException:
        monitor.sampler.stop()
        raise
    verdict = monitor.verdict()
    columns.update(lost_before_pipeline=lost_before_pipeline(case, verdict), fidelity=str(verdict))
    VERDICTS[case] = str(verdict)


def goodput(topo, args, out: Path, net, ctl) -> list[dict]:
    rows = []
    S = 4 * args.elements
    for n in args.workers:
        job = JOB_OF_N[n]
        hosts = list(topo.features["aggregation"].job(job).workers)
        print(f"==> goodput, n = {n}: in-network (job {job}), then ring", flush=True)
        with judged(f"goodput in-network n={n}", net, ctl) as ina_fidelity:
            ina = run_ina(topo, job, elements=args.elements, dtype="float32", out=out / f"ina-n{n}",
                          repeat=args.repeat)
        with judged(f"goodput ring n={n}", net, ctl) as ring_fidelity:
            ring = run_ring(topo, hosts, elements=args.elements, dtype="float32", out=out / f"ring-n{n}",
                            repeat=args.repeat)
        for method, results, judgement in (("in-network", ina, ina_fidelity), ("ring", ring, ring_fidelity)):
            if method == "in-network":
                elapsed = max(mean(r["elapsed_s"] for r in w["runs"]) for w in results)
                sent = mean(w["stats"]["bytes_sent"] for w in results) / args.repeat
                received = mean(w["stats"]["bytes_received"] for w in results) / args.repeat
                retx = sum(w["stats"]["retransmissions"] for w in results)
                bound = S
            else:
                elapsed = max(w["mean_elapsed_s"] for w in results)
                sent = mean(w["stats"]["bytes_sent"] for w in results) / args.repeat
                received = mean(w["stats"]["bytes_received"] for w in results) / args.repeat
                retx = sum(w["stats"]["retransmissions"] for w in results)
                bound = 2 * (n - 1) / n * S
            rows.append({"method": method, "workers": n, "elements": args.elements,
                         "elapsed_s": round(elapsed, 3), "elements_per_s": round(args.elements / elapsed),
                         "bytes_sent_per_worker": round(sent), "bytes_received_per_worker": round(received),
                         "bound_bytes_each_way": round(bound), "sent_over_bound": round(sent / bound, 3),
                         "retransmissions": retx, **judgement})
            print(f"    {method:10s} n={n}: {elapsed:.2f} s, {args.elements / elapsed:,.0f} elements/s, "
                  f"{sent / 1e6:.2f} MB sent per worker ({sent / bound:.2f} x the bound)", flush=True)
    path = write_csv(out / "goodput.csv", rows)
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4))
    for k, method in enumerate(("in-network", "ring")):
        rs = [r for r in rows if r["method"] == method]
        xs = [i + (k - 0.5) * 0.38 for i in range(len(rs))]
        a1.bar(xs, [r["elements_per_s"] for r in rs], 0.38, label=method)
        a2.bar(xs, [r["bytes_sent_per_worker"] / 1e6 for r in rs], 0.38, label=f"{method} sent")
        a2.scatter(xs, [r["bound_bytes_each_way"] / 1e6 for r in rs], marker="_", s=400, color="k", zorder=3,
                   label="bound" if k == 0 else None)
    for a in (a1, a2):
        a.set_xticks(range(len(args.workers)), [f"n = {n}" for n in args.workers])
        a.legend()
    a1.set_ylabel("elements / s")
    a1.set_title(f"All-reduce rate ({args.elements} float32)")
    a2.set_ylabel("MB sent per worker")
    a2.set_title("Traffic per worker vs bound")
    print(f"goodput: {path}, {save_figure(fig, out / 'goodput.png')}")
    return rows


def window(topo, args, out: Path, net, ctl) -> list[dict]:
    """Job 2's all-reduce (4 workers) by window: rate, round trip, and the
    contributions per second the switch summed."""
    rows = []
    job = 2
    n = len(topo.features["aggregation"].job(job).workers)
    for w in args.windows:
        print(f"==> window {w}: {args.elements} float32, {n} workers (job {job})", flush=True)
        with judged(f"window {w}", net, ctl) as judgement:
            results = run_ina(topo, job, elements=args.elements, dtype="float32", out=out / f"window-{w}", window=w)
        elapsed = max(mean(r["elapsed_s"] for r in x["runs"]) for x in results)
        packets = mean(x["stats"]["packets_sent"] for x in results)
        rows.append({"window": w, "workers": n, "elements": args.elements, "elapsed_s": round(elapsed, 3),
                     "elements_per_s": round(args.elements / elapsed),
                     "contributions_per_s": round(n * packets / elapsed),
                     "srtt_ms": round(mean(x["stats"]["srtt_ms"] for x in results), 2),
                     "retransmissions": sum(x["stats"]["retransmissions"] for x in results),
                     "all_within_bound": all(x["ok"] for x in results), **judgement})
        print(f"    window {w}: {elapsed:.2f} s, {args.elements / elapsed:,.0f} elements/s, "
              f"{rows[-1]['contributions_per_s']} contributions/s at the switch, srtt {rows[-1]['srtt_ms']} ms",
              flush=True)
    path = write_csv(out / "window.csv", rows)
    print(f"window: {path}, {plot_window(rows, out)}")
    return rows


def plot_window(rows: list[dict], out: Path) -> Path:
    n = rows[0]["workers"]
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4))
    ws = [int(r["window"]) for r in rows]
    a1.plot(ws, [float(r["contributions_per_s"]) for r in rows], "o-")
    a1.set_ylim(bottom=0)
    a1.set_xscale("log", base=2)
    a1.set_xlabel("window (packets in flight a worker)")
    a1.set_ylabel("contributions / s summed by the switch")
    a1.set_title(f"Aggregation rate by window ({n} workers)")
    a2.plot(ws, [float(r["srtt_ms"]) for r in rows], "o-")
    a2.set_ylim(bottom=0)
    a2.set_xscale("log", base=2)
    a2.set_xlabel("window (packets in flight a worker)")
    a2.set_ylabel("smoothed round trip (ms)")
    a2.set_title("Round trip by window")
    return save_figure(fig, out / "window.png")


def loss(topo, args, out: Path, net, ctl) -> list[dict]:
    rows = []
    job = 2
    hosts = list(topo.features["aggregation"].job(job).workers)
    for pct in args.loss:
        print(f"==> loss {pct}% on every worker's link (job {job}, 4 workers)", flush=True)
        with judged(f"loss {pct}%", net, ctl) as judgement, \
                impaired(topo, hosts, loss_pct=pct) if pct else _nothing() as how:
            if how:
                print(f"    {how}", flush=True)
            results = run_ina(topo, job, elements=args.elements, dtype="float32", out=out / f"loss{pct}")
        packets = results[0]["stats"]["results"]
        rows.append({"loss_pct": pct, "elapsed_s": round(max(w["runs"][0]["elapsed_s"] for w in results), 3),
                     "retransmissions_per_worker": round(mean(w["stats"]["retransmissions"] for w in results)),
                     "packets_per_worker": packets,
                     "server_blocks": results[0]["server"].get("blocks_completed", 0),
                     "all_within_bound": all(w["ok"] for w in results), **judgement})
        print(f"    {rows[-1]['elapsed_s']} s, {rows[-1]['retransmissions_per_worker']} retransmissions per worker "
              f"for {packets} packets", flush=True)
    path = write_csv(out / "loss.csv", rows)
    fig, a1 = plt.subplots(figsize=(6, 4))
    a1.plot([r["loss_pct"] for r in rows], [r["elapsed_s"] for r in rows], "o-", label="completion time")
    a1.set_xlabel("loss on each direction of every worker's link (%)")
    a1.set_ylabel("completion time (s)")
    a2 = a1.twinx()
    a2.plot([r["loss_pct"] for r in rows], [r["retransmissions_per_worker"] for r in rows], "s--", color="C1",
            label="retransmissions per worker")
    a2.set_ylabel("retransmissions per worker")
    a1.set_title(f"All-reduce of {args.elements} float32, 4 workers, under loss")
    fig.legend(loc="upper left", bbox_to_anchor=(0.12, 0.88))
    print(f"loss: {path}, {save_figure(fig, out / 'loss.png')}")
    return rows


class _nothing:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def jobs(topo, args, out: Path, net, ctl) -> list[dict]:
    rows = []
    for k in args.jobs:
        chosen = list(SHARED_JOBS[:k])
        print(f"==> {k} job(s) at once sharing the pool: jobs {chosen}", flush=True)
        with judged(f"{k} jobs", net, ctl) as judgement:
            results = run_jobs(topo, chosen, elements=args.elements, dtype="float32", out=out / f"jobs{k}")
        rates = []
        for job, rs in results.items():
            elapsed = max(w["runs"][0]["elapsed_s"] for w in rs)
            packets = rs[0]["stats"]["results"]
            server = rs[0]["stats"]["fallback_blocks"]
            rates.append(args.elements / elapsed)
            rows.append({"jobs": k, "job": job, "elapsed_s": round(elapsed, 3),
                         "elements_per_s": round(args.elements / elapsed), "packets": packets,
                         "server_share": round(server / packets, 4),
                         "collisions_at_server": rs[0]["server"].get("collisions", 0),
                         "exact_or_within_bound": all(w["ok"] for w in rs), **judgement})
        jain = sum(rates) ** 2 / (len(rates) * sum(r * r for r in rates))
        for r in rows[-k:]:
            r["jain_fairness"] = round(jain, 4)
        print(f"    per job: {', '.join(f'{r:,.0f}' for r in rates)} elements/s; fairness {jain:.3f}; server share "
              f"{mean(r['server_share'] for r in rows[-k:]):.1%}", flush=True)
    path = write_csv(out / "jobs.csv", rows)
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4))
    ks = sorted({r["jobs"] for r in rows})
    a1.plot(ks, [mean(r["elapsed_s"] for r in rows if r["jobs"] == k) for k in ks], "o-", label="mean")
    a1.plot(ks, [max(r["elapsed_s"] for r in rows if r["jobs"] == k) for k in ks], "s--", label="slowest job")
    a1.set_xticks(ks)
    a1.set_xlabel("jobs sharing the pool")
    a1.set_ylabel("completion time (s)")
    a1.legend()
    a2.bar(ks, [100 * mean(r["server_share"] for r in rows if r["jobs"] == k) for k in ks])
    a2.set_xticks(ks)
    a2.set_xlabel("jobs sharing the pool")
    a2.set_ylabel("blocks completed by the parameter server (%)")
    a1.set_title("Multi-job completion time")
    a2.set_title("Fallback to the parameter server")
    print(f"jobs: {path}, {save_figure(fig, out / 'jobs.png')}")
    return rows


def training(topo, args, out: Path, net, ctl) -> list[dict]:
    job = 2
    j = topo.features["aggregation"].job(job)
    server_ip = topo.hosts[j.server].ip
    epochs = str(args.epochs)
    print(f"==> training: digits MLP, {args.epochs} epochs; reference, 4 workers in-network (job {job}), "
          f"4 workers ring", flush=True)
    subprocess.run([PY, "-m", "hostagent.aggregation.training", "--epochs", epochs,
                    "--out", str(out / "train-reference")], cwd=REPO, check=True, stdout=subprocess.DEVNULL)
    server = start_server(topo, job, out)
    start_at = str(time.time() + 3.0)
    with judged("training in-network", net, ctl) as ina_fidelity:
        try:
            procs = [subprocess.Popen(["ip", "netns", "exec", w, PY, "-m", "hostagent.aggregation.training",
                                       "--epochs", epochs, "--job", str(job), "--server", server_ip, "--rank", str(r),
                                       "--start-at", start_at, "--workers-total", str(len(j.workers)),
                                       "--block-elements", str(j.block_elements), "--out", str(out / f"train-ina{r}")],
                                      cwd=REPO, stdout=subprocess.DEVNULL if r else None)
                     for r, w in enumerate(j.workers)]
            codes = [p.wait(timeout=1800) for p in procs]
        finally:
            stop_server(server, out, job)
    addresses = ",".join(topo.hosts[w].ip for w in j.workers)
    with judged("training ring", net, ctl) as ring_fidelity:
        ring = [subprocess.Popen(["ip", "netns", "exec", w, PY, "-m", "hostagent.aggregation.training",
                                  "--epochs", epochs, "--rank", str(r), "--addresses", addresses,
                                  "--port", str(RING_PORT), "--out", str(out / f"train-ring{r}")],
                                 cwd=REPO, stdout=subprocess.DEVNULL)
                for r, w in enumerate(j.workers)]
        codes += [p.wait(timeout=1800) for p in ring]
    if any(codes):
        raise SystemExit(f"training: a worker failed (exit codes {codes})")

    def read(name):
        with open(out / f"{name}.csv") as f:
            return list(csv.DictReader(f))

    ref, ina, rng = read("train-reference"), read("train-ina0"), read("train-ring0")
    rows: list[dict[str, Any]] = []      # one per epoch (training.csv)
    for a, b, c in zip(ref, ina, rng):
        rows.append({"epoch": int(a["epoch"]),
                     "reference_train_loss": float(a["train_loss"]), "ina_train_loss": float(b["train_loss"]),
                     "ring_train_loss": float(c["train_loss"]),
                     "reference_test_accuracy": float(a["test_accuracy"]),
                     "ina_test_accuracy": float(b["test_accuracy"]), "ring_test_accuracy": float(c["test_accuracy"]),
                     "ina_loss_rel_diff": abs(float(b["train_loss"]) - float(a["train_loss"])) / float(a["train_loss"]),
                     "ina_wall_s": float(b["wall_s"]) if "wall_s" in b else None,
                     "ring_wall_s": float(c["wall_s"]) if "wall_s" in c else None,
                     "ina_fidelity": ina_fidelity["fidelity"], "ring_fidelity": ring_fidelity["fidelity"]})
    path = write_csv(out / "training.csv", rows)
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4))
    ep = [r["epoch"] for r in rows]
    for key, label, style in (("reference", "single process", "k-"), ("ina", "4 workers, in-network", "C0--"),
                              ("ring", "4 workers, ring", "C1:")):
        a1.plot(ep, [r[f"{key}_train_loss"] for r in rows], style, label=label)
        a2.plot(ep, [100 * r[f"{key}_test_accuracy"] for r in rows], style, label=label)
    a1.set_yscale("log")
    a1.set_xlabel("epoch")
    a1.set_ylabel("training loss")
    a2.set_xlabel("epoch")
    a2.set_ylabel("test accuracy (%)")
    a1.legend()
    a1.set_title("Digits MLP: loss")
    a2.set_title("Digits MLP: test accuracy")
    last = rows[-1]
    print(f"    final test accuracy: reference {last['reference_test_accuracy']:.4f}, in-network "
          f"{last['ina_test_accuracy']:.4f}, ring {last['ring_test_accuracy']:.4f}; largest relative loss "
          f"difference in-network vs reference {max(r['ina_loss_rel_diff'] for r in rows):.2e}", flush=True)
    print(f"training: {path}, {save_figure(fig, out / 'training.png')}")
    return rows


def fabric_link_packets(topo, ctl) -> dict[tuple[str, int], int]:
    """Packets sent out of every switch port that leads to another switch."""
    out = {}
    for name, sw in topo.switches.items():
        cells = ctl.counter(name, "egress_port_counter")
        for port in sw.ports.values():
            if port.peer in topo.switches:
                out[(name, port.number)] = cells.get(port.number, (0, 0))[0]
    return out


def tree_network(name: str, args, run: str, **sections):
    """A network of topologies/<name>.yaml with an aggregation section the
    phases replace at runtime (and `sections` replacing the file's)."""
    raw = yaml.safe_load((REPO / "topologies" / f"{name}.yaml").read_text())
    case = next(c for c in TREE_CASES if c[0] == name)
    raw["aggregation"] = {"jobs": [{"job": 1, "workers": list(case[1]), "server": case[2], "slots": TREE_SLOTS}]}
    raw.update(sections)
    topo = topology_from_dict(raw, f"{name} with an aggregation job")
    net = Network(topo, REPO / "build" / "experiments" / "aggregation" / run, log_level=args.log_level)
    return topo, net


def levels(args, out: Path) -> list[dict]:
    rows = []
    for name in dict.fromkeys(c[0] for c in TREE_CASES if c[0] in args.tree_topologies):
        topo, net = tree_network(name, args, f"levels-{name}")
        with net, FabricController(topo) as ctl:
            ctl.program()
            net.apply_queue_rates()
            for _, workers, server, top in (c for c in TREE_CASES if c[0] == name):
                n = len(workers)
                for mode, trees in (("one level", 0), ("one tree", 1), (f"{top} trees", top)):
                    ctl.feature("aggregation").set_jobs([Job(1, workers, server, slots=TREE_SLOTS, trees=trees)])
                    print(f"==> {name}, {n} workers: {mode}", flush=True)
                    before = fabric_link_packets(topo, ctl)
                    with judged(f"levels {name} n={n} {mode}", net, ctl) as judgement:
                        results = run_ina(topo, 1, elements=args.tree_elements, dtype="float32",
                                          out=out / f"levels-{name}-n{n}-trees{trees}")
                    after = fabric_link_packets(topo, ctl)
                    sent = {k: after[k] - before[k] for k in after}
                    blocks = results[0]["stats"]["results"]          # packets of the call, each a block
                    busiest = max(sent, key=lambda k: sent[k])
                    rows.append({"topology": name, "workers": n, "mode": mode, "trees": trees,
                                 "elements": args.tree_elements,
                                 "elapsed_s": round(max(w["runs"][0]["elapsed_s"] for w in results), 3),
                                 "blocks": blocks, "busiest_link": f"{busiest[0]}:{busiest[1]}",
                                 "busiest_link_packets": sent[busiest],
                                 "busiest_over_bound": round(sent[busiest] / blocks, 2),
                                 "fabric_packets": sum(sent.values()),
                                 "links_used": sum(1 for v in sent.values() if v >= blocks / 8),
                                 "retransmissions": sum(w["stats"]["retransmissions"] for w in results),
                                 "all_within_bound": all(w["ok"] for w in results), **judgement})
                    r = rows[-1]
                    print(f"    {r['elapsed_s']} s; busiest link {r['busiest_link']} {r['busiest_link_packets']} "
                          f"packets ({r['busiest_over_bound']} x the bound), {r['fabric_packets']} on "
                          f"{r['links_used']} links", flush=True)
            net.check_alive()
    path = write_csv(out / "levels.csv", rows)
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4))
    cases = list(dict.fromkeys((r["topology"], r["workers"]) for r in rows))
    modes = list(dict.fromkeys(r["mode"].split(" ", 1)[1] if r["trees"] > 1 else r["mode"] for r in rows))
    for k, mode in enumerate(modes):
        rs = [r for r in rows if (r["mode"].split(" ", 1)[1] if r["trees"] > 1 else r["mode"]) == mode]
        xs = [cases.index((r["topology"], r["workers"])) + (k - 1) * 0.27 for r in rs]
        a1.bar(xs, [r["elapsed_s"] for r in rs], 0.27, label=mode)
        a2.bar(xs, [r["busiest_over_bound"] for r in rs], 0.27, label=mode)
    for a in (a1, a2):
        a.set_xticks(range(len(cases)), [f"{t}\n{n} workers" for t, n in cases])
        a.legend()
    a2.axhline(1.0, color="k", lw=1, ls="--")
    a1.set_ylabel("completion time (s)")
    a1.set_title(f"All-reduce of {args.tree_elements} float32")
    a2.set_ylabel("busiest fabric link: packets / blocks")
    a2.set_title("Busiest link against the bound (1: each block once a way)")
    print(f"levels: {path}, {save_figure(fig, out / 'levels.png')}")
    return rows


def tree_loss(args, out: Path) -> list[dict]:
    rows = []
    name, workers, server, top = TREE_CASES[0]
    topo, net = tree_network(name, args, "tree-loss")
    with net, FabricController(topo) as ctl:
        ctl.program()
        net.apply_queue_rates()
        ctl.feature("aggregation").set_jobs([Job(1, workers, server, slots=TREE_SLOTS, trees=top)])
        for pct in args.loss:
            print(f"==> {name}, {top} trees, loss {pct}% on every worker's link", flush=True)
            before = {sw: switch_events(ctl, sw) for sw in topo.switches}
            with judged(f"tree_loss {pct}%", net, ctl) as judgement, \
                    impaired(topo, list(workers), loss_pct=pct, duplicate_pct=1, reorder_pct=5) if pct \
                    else _nothing() as how:
                if how:
                    print(f"    {how}", flush=True)
                results = run_ina(topo, 1, elements=args.tree_elements, dtype="float32",
                                  out=out / f"tree-loss{pct}")
            ev = {sw: {k: v - before[sw][k] for k, v in switch_events(ctl, sw).items()} for sw in topo.switches}
            rows.append({"loss_pct": pct, "elapsed_s": round(max(w["runs"][0]["elapsed_s"] for w in results), 3),
                         "retransmissions_per_worker": round(mean(w["stats"]["retransmissions"] for w in results)),
                         "packets_per_worker": results[0]["stats"]["results"],
                         "partials_again": sum(e["partial_again"] for e in ev.values()),
                         "results_again": sum(e["result_again"] for e in ev.values()),
                         "server_blocks": results[0]["server"].get("blocks_completed", 0),
                         "all_within_bound": all(w["ok"] for w in results), **judgement})
            r = rows[-1]
            print(f"    {r['elapsed_s']} s, {r['retransmissions_per_worker']} retransmissions per worker; "
                  f"{r['partials_again']} partials and {r['results_again']} results sent again", flush=True)
        net.check_alive()
    path = write_csv(out / "tree_loss.csv", rows)
    fig, a1 = plt.subplots(figsize=(6, 4))
    a1.plot([r["loss_pct"] for r in rows], [r["elapsed_s"] for r in rows], "o-")
    a1.set_xlabel("loss on each direction of every worker's link (%)")
    a1.set_ylabel("completion time (s)")
    a1.set_title(f"Two-level all-reduce of {args.tree_elements} float32 under loss")
    print(f"tree_loss: {path}, {save_figure(fig, out / 'tree_loss.png')}")
    return rows


def tree_ecn(args, out: Path) -> list[dict]:
    rows = []
    name, workers, server, top = TREE_CASES[0]
    ecn = [{"switch": sw, "port": "all", "mode": "step", "k": ECN_K} for sw in ("leaf1", "leaf2", "spine1", "spine2")]
    topo, net = tree_network(name, args, "tree-ecn", defaults={"link": {"bandwidth_mbps": ECN_BANDWIDTH_MBPS}},
                             ecn=ecn)
    with net, FabricController(topo) as ctl:
        ctl.program()
        net.apply_queue_rates()
        ctl.feature("aggregation").set_jobs([Job(1, workers, server, slots=TREE_SLOTS, trees=top)])
        src, dst = topo.hosts[server], topo.hosts["h1"]
        for case, elephant, ecn_on in (("alone", None, False),
                                       ("fixed-rate elephant, no ECN", "fixed", False),
                                       ("fixed-rate elephant, ECN on aggregation", "fixed", True),
                                       ("DCQCN elephant, no ECN", "dcqcn", False),
                                       ("DCQCN elephant, ECN on aggregation", "dcqcn", True)):
            print(f"==> {name}, {top} trees, {case}", flush=True)
            run = out / f"tree-ecn-{case.replace(' ', '-').replace(',', '')}"
            run.mkdir(parents=True, exist_ok=True)
            with judged(f"tree_ecn {case}", net, ctl) as judgement:   # until the elephant stopped
                procs = []
                if elephant:
                    if elephant == "dcqcn":
                        procs.append(traffic_agent(dst, "receive", start_at=time.time(), out_dir=run,
                                                   extra=["--duration", "600", "--progress-s", "0"],
                                                   stem="elephant-receiver"))
                    procs.append(traffic_agent(src, "elephant", start_at=time.time(), out_dir=run, stem="elephant",
                                               extra=["--dst-ip", dst.ip, "--qp", "7", "--duration", "600",
                                                      "--line-rate-pps", str(ELEPHANT_PPS), "--progress-s", "0",
                                                      *(["--fixed-rate"] if elephant == "fixed" else [])]))
                    time.sleep(2.0)                                 # its queue builds first
                try:
                    results = run_ina(topo, 1, elements=args.tree_elements, dtype="float32", out=run, ecn=ecn_on)
                finally:
                    for proc in procs:
                        proc.terminate()
                        proc.wait(timeout=10)
            st = [w["stats"] for w in results]
            rows.append({"case": case, "elapsed_s": round(max(w["runs"][0]["elapsed_s"] for w in results), 3),
                         "retransmissions_per_worker": round(mean(x["retransmissions"] for x in st)),
                         "congested_results_per_worker": round(mean(x["congested_results"] for x in st)),
                         "window_halvings_per_worker": round(mean(x["window_decreases"] for x in st), 1),
                         "smallest_window": round(min(x["min_window"] for x in st), 2),
                         "server_blocks": results[0]["server"].get("blocks_completed", 0),
                         "all_within_bound": all(w["ok"] for w in results), **judgement})
            r = rows[-1]
            print(f"    {r['elapsed_s']} s, {r['retransmissions_per_worker']} retransmissions and "
                  f"{r['congested_results_per_worker']} congested results per worker, window halved "
                  f"{r['window_halvings_per_worker']} times (down to {r['smallest_window']})", flush=True)
        net.check_alive()
    path = write_csv(out / "tree_ecn.csv", rows)
    fig, a1 = plt.subplots(figsize=(10, 4))
    xs = range(len(rows))
    a1.bar([x - 0.2 for x in xs], [r["elapsed_s"] for r in rows], 0.4, label="completion time (s)")
    a2 = a1.twinx()
    a2.bar([x + 0.2 for x in xs], [r["retransmissions_per_worker"] for r in rows], 0.4, color="C1",
           label="retransmissions per worker")
    a1.set_xticks(list(xs), [r["case"].replace(", ", ",\n").replace(" elephant", "\nelephant") for r in rows],
                  fontsize=8)
    a1.set_ylabel("completion time (s)")
    a2.set_ylabel("retransmissions per worker")
    a1.set_title(f"Two trees next to an elephant, {args.tree_elements} float32")
    fig.legend(loc="upper left", bbox_to_anchor=(0.12, 0.88))
    print(f"tree_ecn: {path}, {save_figure(fig, out / 'tree_ecn.png')}")
    return rows


def main(argv=None) -> int:
    ap = experiment_parser("aggregation", __doc__)
    ap.add_argument("--phases", default=",".join(PHASES), help=f"comma-separated, of {', '.join(PHASES)}")
    ap.add_argument("--elements", type=int, default=1 << 18, help="float32 elements per all-reduce")
    ap.add_argument("--repeat", type=int, default=1, help="goodput: all-reduces per run")
    ap.add_argument("--workers", default="2,4,8", help="goodput: worker counts (of 2, 4, 8)")
    ap.add_argument("--loss", default="0,1,2,5", help="loss sweep, percent")
    ap.add_argument("--windows", default="8,16,32,64,128", help="window: packets in flight a worker (at most 128)")
    ap.add_argument("--jobs", default=",".join(str(k) for k in range(1, len(SHARED_JOBS) + 1)),
                    help=f"jobs: how many jobs share the pool at once, each run (of 1..{len(SHARED_JOBS)})")
    ap.add_argument("--epochs", type=int, default=30)
    ap.add_argument("--tree-elements", type=int, default=1 << 18, help="levels, tree_loss: float32 elements")
    ap.add_argument("--tree-topologies", default="leaf-spine,fat-tree-k4", help="levels: of leaf-spine, fat-tree-k4")
    ap.add_argument("--out", default=str(REPO / "experiments" / "results" / "aggregation"),
                    help="results directory (default %(default)s)")
    ap.add_argument("--log-level", default=DEFAULT_EXPERIMENT_LOG_LEVEL, choices=LOG_LEVELS)
    args = ap.parse_args(argv)
    phases = [p.strip() for p in args.phases.split(",") if p.strip()]
    unknown = sorted(set(phases) - set(PHASES))
    if unknown:
        ap.error(f"unknown phase {unknown[0]!r} (phases: {', '.join(PHASES)})")
    args.workers = [int(n) for n in args.workers.split(",")]
    if any(n not in JOB_OF_N for n in args.workers):
        ap.error(f"--workers: each of {', '.join(map(str, JOB_OF_N))}")
    args.jobs = [int(k) for k in args.jobs.split(",")]
    if any(not 1 <= k <= len(SHARED_JOBS) for k in args.jobs):
        ap.error(f"--jobs: each of 1..{len(SHARED_JOBS)} (jobs {', '.join(map(str, SHARED_JOBS))} share the pool)")
    args.loss = [float(x) if "." in x else int(x) for x in args.loss.split(",")]
    args.windows = [int(w) for w in args.windows.split(",")]
    if any(not 1 <= w <= WINDOW_SLOTS for w in args.windows):
        ap.error(f"--windows: each of 1..{WINDOW_SLOTS} (job 2's slots)")
    args.tree_topologies = [t.strip() for t in args.tree_topologies.split(",") if t.strip()]
    known = {c[0] for c in TREE_CASES}
    if not args.tree_topologies or set(args.tree_topologies) - known:
        ap.error(f"--tree-topologies: of {', '.join(sorted(known))}")
    out = Path(args.out).resolve()        # the workers write there from the repository's root
    out.mkdir(parents=True, exist_ok=True)
    compile_p4()
    start = time.monotonic()
    rack_phases = [p for p in phases if p in RACK_PHASES]
    if rack_phases:
        topo = load_topology(REPO / "topologies" / "aggregation-rack.yaml")
        with Network(topo, REPO / "build" / "experiments" / "aggregation", log_level=args.log_level) as net, \
                FabricController(topo) as ctl:
            ctl.program()
            net.apply_queue_rates()
            for phase in rack_phases:
                globals()[phase](topo, args, out, net, ctl)
                net.check_alive()
    for phase in (p for p in phases if p in TREE_PHASES):
        globals()[phase](args, out)
    print(f"\naggregation experiment done in {time.monotonic() - start:.0f} s; results in {out}")
    print_fidelity([{"case": case, "fidelity": verdict} for case, verdict in VERDICTS.items()])
    return 0


if __name__ == "__main__":
    sys.exit(main())
