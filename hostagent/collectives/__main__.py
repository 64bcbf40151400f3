"""One rank of a collective group on a host (run inside its namespace; the
same command on every host, each with its --rank):

    python -m hostagent.collectives sweep --rank R --addresses 10.0.1.1,10.0.2.1,... \\
        --iface h1-eth0 --src-ip 10.0.1.1 --src-mac .. --gw-mac .. \\
        [--collective all-reduce] [--algorithm ring] [--dtype float32] \\
        [--min-bytes 1024] [--max-bytes 262144] [--iterations 3] [--channels 1] \\
        [--channel-choice fixed|least-loaded] [--paths TOPOLOGY] [--cc dcqcn] [--mode go-back-n] \\
        [--line-rate-pps 1000] [--out PREFIX] \\
        [--aggregation-job J --aggregation-server IP]

`sweep` runs the collective at sizes from --min-bytes to --max-bytes
(doubling), --iterations times each after one warm-up, as nccl-tests does;
every rank's input is drawn from (seed, rank, size), so each rank checks its
result against numpy's over all ranks' inputs. It prints nccl-tests' table
(size, count, type, time, algorithm and bus bandwidth; the time is the mean
over iterations) and writes PREFIX.csv (one row per call) and PREFIX.json;
exit status 1 if a result was wrong.

    python -m hostagent.collectives step --workload data-parallel|moe|pipeline [--steps 5] \
        [--algorithm ring] [--model-bytes ..] [--buckets ..] [--tokens-bytes ..] [--layers ..] \
        [--activation-bytes ..] [--microbatches ..] [--compute-ms ..] [--job 0] <the same group options>

`step` runs training steps (hostagent/collectives/workload.py) and prints
each step's time; PREFIX.csv has one row per step, PREFIX.collectives.csv
one per collective (time, algorithm and bus bandwidth), PREFIX.json the
summary. Several jobs can share hosts: each runs its own command with its
own --job (queue pairs 0x100 + 0x40 x job).

`--channel-choice` (every rank the same): `fixed` cuts a transfer into
--channels equal pieces, piece c on channel c; `least-loaded` (Alibaba
HPN) cuts it into pieces of one ACK's worth of packets (4 x --mtu bytes
with the 12-byte header) and posts each on the peer's connection with the
fewest bytes outstanding (posted, not yet acknowledged), at most 4 pieces'
worth outstanding a connection: a channel on a congested path carries less
(docs/collectives.md). The summaries count each channel's bytes
(channel_bytes) and retransmissions (channel_retransmitted).

`--algorithm in-network` all-reduces through the switch (the aggregation
feature): the ranks are the workers of the topology's aggregation job
--aggregation-job, whose parameter server (--aggregation-server) runs
hostagent.aggregation.parameter_server for the blocks the switch passes on.
"""
from __future__ import annotations

import argparse
import csv
import json
import sys
import time
from pathlib import Path
from typing import Callable

import numpy as np

from features import load_topology
from hostagent.aggregation.allreduce import seq_base_at
from wire import aggregation_codec as ah
from hostagent.collectives import schedule as sc
from hostagent.collectives.communicator import ALL_REDUCE_ALGORITHMS, CHANNEL_CHOICES, FIXED, IN_NETWORK, \
    IN_NETWORK_DTYPES, MAX_JOBS, CallRecord, CollectiveError, Communicator, default_sport, nccl_tests_table, \
    TRANSPORT_MODES, open_communicator
from hostagent.collectives.paths import PathModel, path_aware_entropies, path_aware_sports
from hostagent.rdma.uet_agent import UET
from hostagent.collectives.workload import DataParallel, MixtureOfExperts, Pipeline, StepResult, run_steps
from hostagent.rdma.agent import add_cc_param_argument, cc_param_values, uet_congestion_controls
from hostagent.rdma.transport import MODES
from hostagent.sender import add_host_arguments
from hostagent.start import start_time

DTYPES = {"float32": np.float32, "int32": np.int32, "int64": np.int64, "float64": np.float64}
ABORT_DELIVERY_S = 2.0     # how long a rank that gave up keeps its transport going, to deliver its abort


def rank_input(collective: str, ranks: int, elements: int, dtype, seed: int, rank: int) -> np.ndarray:
    """Rank `rank`'s input: integers (exact in every dtype, so any summation
    order gives numpy's answer) drawn from (seed, rank, elements)."""
    rng = np.random.default_rng([seed, rank, elements])
    return rng.integers(-64, 64, elements).astype(dtype)


def sizes(min_bytes: int, max_bytes: int) -> list[int]:
    out, s = [], min_bytes
    while s <= max_bytes:
        out.append(s)
        s *= 2
    return out


def sweep(a: argparse.Namespace, comm: Communicator) -> int:
    dtype = np.dtype(DTYPES[a.dtype])
    n = comm.size
    wrong = 0
    rows, table = [], []
    for size in sizes(a.min_bytes, a.max_bytes):
        # elements per rank's input for a table size: all-gather's size is the gathered output
        elements = size // dtype.itemsize // (n if a.collective == sc.ALL_GATHER else 1)
        if a.collective in (sc.REDUCE_SCATTER, sc.ALL_TO_ALL):
            elements -= elements % n
        if elements < 1:
            continue
        inputs = [rank_input(a.collective, n, elements, dtype, a.seed, r) for r in range(n)]
        want = sc.reference_result(a.collective, inputs, comm.rank)
        options = {"root": 0} if a.collective == sc.BROADCAST else {}
        comm.run(a.collective, a.algorithm, inputs[comm.rank], **options)          # warm-up
        records: list[CallRecord] = []
        for _ in range(a.iterations):
            got = comm.run(a.collective, a.algorithm, inputs[comm.rank], **options)
            records.append(comm.records[-1])
            if not np.array_equal(got, want):
                wrong += 1
                print(f"rank {comm.rank}: {a.collective} of {elements} elements: wrong result", file=sys.stderr)
        mean_s = sum(r.seconds for r in records) / len(records)
        table.append(CallRecord(records[0].call, a.collective, a.algorithm, n, elements, dtype.name,
                                dtype.itemsize, mean_s))
        rows.extend(records)
        print(nccl_tests_table(table[-1:]).splitlines()[-1], flush=True)
    comm.close()
    out = Path(a.out) if a.out else None
    summary = {"rank": comm.rank, "ranks": n, "collective": a.collective, "algorithm": a.algorithm,
               "channels": comm.channels, "cc": a.cc, "mode": a.mode, "wrong_results": wrong,
               "table": [{"size_bytes": sc.size_bytes(r.collective, n, r.elements, r.itemsize),
                          "elements": r.elements, "time_s": round(r.seconds, 6),
                          "algbw_bytes_per_s": round(r.bandwidths[0], 1), "busbw_bytes_per_s": round(r.bandwidths[1], 1)}
                         for r in table],
               **comm.transport_stats()}
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.with_suffix(".json").write_text(json.dumps(summary, indent=2))
        with open(out.with_suffix(".csv"), "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(("call", "collective", "algorithm", "ranks", "elements", "dtype", "seconds",
                        "algbw_bytes_per_s", "busbw_bytes_per_s"))
            w.writerows((r.call, r.collective, r.algorithm, r.ranks, r.elements, r.dtype, round(r.seconds, 6),
                         round(r.bandwidths[0], 1), round(r.bandwidths[1], 1)) for r in rows)
    else:
        print(json.dumps(summary, indent=2))
    return 1 if wrong else 0


def add_group_arguments(p: argparse.ArgumentParser) -> None:
    add_host_arguments(p)
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--addresses", required=True, help="every rank's IPv4 address, in rank order, comma-separated")
    p.add_argument("--channels", type=int, default=1, help="connections per peer pair (distinct source ports)")
    p.add_argument("--channel-choice", choices=CHANNEL_CHOICES, default=FIXED,
                   help="fixed: a transfer in --channels equal pieces, piece c on channel c; least-loaded (HPN): "
                        "pieces of 4 packets, each on the connection with the fewest bytes outstanding (every "
                        "rank the same)")
    p.add_argument("--paths", metavar="TOPOLOGY", help="path-aware: choose the channels' source ports so that a "
                                                       "peer pair's channels take disjoint paths in this topology "
                                                       "(the file the fabric runs; ECMP mode)")
    p.add_argument("--cc", choices=sorted(uet_congestion_controls()), default="dcqcn",
                   help="congestion control (rccc: --mode uet only)")
    p.add_argument("--mode", choices=TRANSPORT_MODES, default=MODES[0],
                   help="the transport: RC with go-back-N or selective repeat, or UET's unordered delivery")
    p.add_argument("--mtu", type=int, default=1024, help="payload bytes per packet")
    p.add_argument("--line-rate-pps", type=float, default=1000.0, help="each connection's top rate, packets/s")
    p.add_argument("--dscp", type=int, default=0, help="DSCP of the packets (the switches' traffic class)")
    p.add_argument("--control-dscp", type=int, default=None, choices=range(64), metavar="D",
                   help="--mode uet: the DSCP of ACKs, NACKs and credits (UE's control class; default: --dscp)")
    p.add_argument("--tclass", type=int, default=None,
                   help="honour the switches' PFC pauses of this class (the lossless class --dscp maps to); "
                        "default: honour none")
    p.add_argument("--dilation", type=float, default=1.0,
                   help="the network runs D times slower (emulator/dilation.py): the transport's and congestion "
                        "control's default time constants x D; --line-rate-pps and --timeout-s as given")
    p.add_argument("--link-mbps", type=float, default=100.0,
                   help="the host link's rate, Mbit/s: the length of a pause quantum (default %(default)s)")
    p.add_argument("--timeout-s", type=float, default=60.0, help="a step waiting longer for a peer fails")
    add_cc_param_argument(p)
    p.add_argument("--start-at", type=float, default=0.0, help="wall-clock start time (ranks start together)")
    p.add_argument("--start-file", help="once ready (its channels planned), create <file>.<pid>.ready, wait for "
                                        "the launcher to write the wall-clock start time to this file, then open "
                                        "the rank's sockets and start then (hostagent/start.py): no rank's sockets "
                                        "busy while the others still start")
    p.add_argument("--job", type=int, default=0, help=f"the job (0..{MAX_JOBS - 1}): its own queue pairs, so jobs share hosts")
    p.add_argument("--out", help="output prefix (PREFIX.json, PREFIX.csv); default: stdout")
    p.add_argument("--aggregation-job", type=int, help="in-network: the topology's aggregation job (its workers "
                                                       "are the ranks)")
    p.add_argument("--aggregation-server", metavar="IP", help="in-network: the job's parameter server")
    p.add_argument("--aggregation-block-elements", type=int, default=ah.DEFAULT_BLOCK_ELEMENTS,
                   help=f"in-network: the job's block_elements (default {ah.DEFAULT_BLOCK_ELEMENTS})")


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m hostagent.collectives", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    s = sub.add_parser("sweep", help="one collective over a range of sizes (nccl-tests' table)")
    add_group_arguments(s)
    s.add_argument("--collective", choices=sc.COLLECTIVES, default=sc.ALL_REDUCE)
    s.add_argument("--algorithm", default=None, help="default: the collective's first "
                                                      f"(all-reduce: {', '.join(ALL_REDUCE_ALGORITHMS)})")
    s.add_argument("--dtype", choices=sorted(DTYPES), default="float32")
    s.add_argument("--min-bytes", type=int, default=1024)
    s.add_argument("--max-bytes", type=int, default=256 * 1024)
    s.add_argument("--iterations", type=int, default=3)
    s.add_argument("--seed", type=int, default=1)
    w = sub.add_parser("step", help="training steps: collectives and compute (a workload)")
    add_group_arguments(w)
    w.add_argument("--workload", choices=("data-parallel", "moe", "pipeline"), default="data-parallel")
    w.add_argument("--steps", type=int, default=5)
    w.add_argument("--algorithm", choices=ALL_REDUCE_ALGORITHMS, default=sc.RING,
                   help="data-parallel: the all-reduce's")
    w.add_argument("--model-bytes", type=int, default=DataParallel.model_bytes, help="data-parallel: gradients")
    w.add_argument("--buckets", type=int, default=DataParallel.buckets, help="data-parallel")
    w.add_argument("--tokens-bytes", type=int, default=MixtureOfExperts.tokens_bytes, help="moe: per all-to-all")
    w.add_argument("--layers", type=int, default=MixtureOfExperts.layers, help="moe")
    w.add_argument("--activation-bytes", type=int, default=Pipeline.activation_bytes, help="pipeline")
    w.add_argument("--microbatches", type=int, default=Pipeline.microbatches, help="pipeline")
    w.add_argument("--compute-ms", type=float, default=None,
                   help="scale: data-parallel backward (forward half of it), moe each compute, pipeline a "
                        "stage's forward (default: the workload's own)")
    w.add_argument("--seed", type=int, default=1)
    return ap


def workload_of(a: argparse.Namespace):
    ms = a.compute_ms
    if a.workload == "data-parallel":
        times = {} if ms is None else {"forward_ms": ms / 2, "backward_ms": ms}
        return DataParallel(a.model_bytes, a.buckets, algorithm=a.algorithm, **times)
    if a.workload == "moe":
        return MixtureOfExperts(a.tokens_bytes, a.layers, **({} if ms is None else {"attention_ms": ms,
                                                                                     "expert_ms": ms}))
    return Pipeline(a.activation_bytes, a.microbatches, **({} if ms is None else {"stage_ms": ms}))


def steps(a: argparse.Namespace, comm: Communicator) -> int:
    workload = workload_of(a)

    def show(r: StepResult) -> None:
        print(f"step {r.step}: {1000 * r.seconds:.1f} ms ({1000 * r.compute_seconds:.1f} ms compute, "
              f"{len(r.collectives)} collectives), ended at {time.time():.3f}", flush=True)
    results = run_steps(comm, workload, a.steps, a.seed, show if comm.rank == 0 else (lambda r: None))
    comm.close()
    times = sorted(r.seconds for r in results)
    summary = {"rank": comm.rank, "ranks": comm.size, "job": a.job, "workload": a.workload,
               "parameters": vars(workload), "channels": comm.channels, "cc": a.cc, "mode": a.mode,
               "paths": a.paths, "steps": len(results), "step_s": {"median": round(times[len(times) // 2], 6),
                                                                   "mean": round(sum(times) / len(times), 6),
                                                                   "max": round(times[-1], 6)},
               **comm.transport_stats()}
    if a.out is None:
        print(json.dumps(summary, indent=2))
        return 0
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(summary, indent=2))
    with open(out.with_suffix(".csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(("step", "seconds", "compute_seconds", "collectives"))
        w.writerows((r.step, round(r.seconds, 6), round(r.compute_seconds, 6), len(r.collectives)) for r in results)
    with open(out.with_suffix(".collectives.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(("step", "index", "collective", "algorithm", "bytes", "seconds", "algbw_bytes_per_s",
                    "busbw_bytes_per_s"))
        w.writerows((c.step, c.index, c.collective, c.algorithm, c.nbytes, round(c.seconds, 6), round(c.algbw, 1),
                     round(c.busbw, 1)) for r in results for c in r.collectives)
    return 0


SportOf = Callable[[int, int, int], int]


def channel_sports(a: argparse.Namespace) -> SportOf:
    """Each channel's source port: path-aware with --paths (the topology's
    paths planned here, before the rank says it is ready), else the
    library's default."""
    addresses = [x.strip() for x in a.addresses.split(",") if x.strip()]
    if not a.paths:
        return default_sport
    sport_of = path_aware_sports(PathModel(load_topology(a.paths)), addresses, a.channels)
    for peer in range(len(addresses)):      # unknown addresses fail here, before anything is sent
        if peer != a.rank:
            sport_of(a.rank, peer, 0)
    return sport_of


def check_aggregation(a: argparse.Namespace) -> bool:
    """Whether the rank is a worker of an in-network all-reduce (its options checked)."""
    if not (a.algorithm == IN_NETWORK or a.aggregation_job is not None or a.aggregation_server is not None):
        return False
    if a.aggregation_job is None or a.aggregation_server is None:
        raise ValueError(f"--algorithm {IN_NETWORK} needs --aggregation-job and --aggregation-server "
                         "(the topology's aggregation job of these ranks, and its parameter server)")
    if not (a.start_at or getattr(a, "start_file", None)):
        raise ValueError(f"--algorithm {IN_NETWORK} needs --start-at or --start-file: the ranks number the job's "
                         "packets from the start time, so a run never repeats an earlier run's numbers the switch "
                         "still holds")
    if getattr(a, "dtype", "float32") not in IN_NETWORK_DTYPES:
        raise ValueError(f"--algorithm {IN_NETWORK} carries {' or '.join(IN_NETWORK_DTYPES)}, "
                         f"got --dtype {a.dtype}")
    return True


def communicator(a: argparse.Namespace, sport_of: SportOf | None = None) -> Communicator:
    """The rank's communicator (its sockets open); a.start_at set when in-network."""
    addresses = [x.strip() for x in a.addresses.split(",") if x.strip()]
    if sport_of is None:
        sport_of = channel_sports(a)
    entropies_of = (path_aware_entropies(PathModel(load_topology(a.paths)), a.src_ip) if a.paths and a.mode == UET
                    else None)     # UET: each connection's entropy values, as many on each path
    aggregation = None
    if check_aggregation(a):
        aggregation = (a.aggregation_job, a.aggregation_server, seq_base_at(a.start_at), a.aggregation_block_elements)
    return open_communicator(a.rank, addresses, a.iface, a.src_ip, a.src_mac, a.gw_mac, cc=a.cc, mode=a.mode,
                             line_rate_pps=a.line_rate_pps, mtu=a.mtu, channels=a.channels, timeout_s=a.timeout_s,
                             dscp=a.dscp, job=a.job, sport_of=sport_of, aggregation=aggregation,
                             channel_choice=a.channel_choice, tclass=a.tclass, link_mbps=a.link_mbps,
                             entropies_of=entropies_of, dilation=a.dilation, control_dscp=a.control_dscp,
                             cc_params=a.cc_params)


def main(argv: list[str] | None = None) -> int:
    ap = parser()
    a = ap.parse_args(argv)
    try:
        a.cc_params = cc_param_values(a.cc, a.cc_param, "send", a.line_rate_pps, a.mtu, a.dilation)
    except ValueError as e:
        ap.error(f"--cc-param {e}")
    try:
        if a.command == "sweep":
            if a.algorithm is None:
                a.algorithm = sc.algorithms_of(a.collective)[0]
            if a.algorithm == IN_NETWORK:
                if a.collective != sc.ALL_REDUCE:
                    raise ValueError(f"{IN_NETWORK} is an all-reduce algorithm, not one of {a.collective}")
            else:
                sc.schedule(a.collective, a.algorithm, 2, 2)       # names an unknown algorithm
            if not 1 <= a.min_bytes <= a.max_bytes:
                raise ValueError(f"need 1 <= --min-bytes <= --max-bytes, got {a.min_bytes}, {a.max_bytes}")
            if a.iterations < 1:
                raise ValueError(f"--iterations must be >= 1, got {a.iterations}")
        else:
            for name in ("steps", "model_bytes", "buckets", "tokens_bytes", "layers", "activation_bytes",
                         "microbatches"):
                if getattr(a, name) < 1:
                    raise ValueError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(a, name)}")
            if a.compute_ms is not None and a.compute_ms < 0:
                raise ValueError(f"--compute-ms must be >= 0, got {a.compute_ms}")
        sport_of = channel_sports(a)
        check_aggregation(a)
        if a.start_file:        # ready: the start time once every rank is (the sockets open after it)
            a.start_at = start_time(a)
        comm = communicator(a, sport_of)
    except ValueError as e:          # (a TopologyError is one)
        print(f"hostagent.collectives: {e}", file=sys.stderr)
        return 2
    if a.start_at:
        time.sleep(max(0.0, a.start_at - time.time()))
    try:
        return sweep(a, comm) if a.command == "sweep" else steps(a, comm)
    except CollectiveError as e:
        print(f"hostagent.collectives: rank {a.rank}: {e}; transport: {json.dumps(comm.transport_stats())}",
              file=sys.stderr)
        comm.close(timeout_s=ABORT_DELIVERY_S)      # the abort out to the other ranks
        return 1


if __name__ == "__main__":
    sys.exit(main())
