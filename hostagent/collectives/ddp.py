"""PyTorch DistributedDataParallel with its gradients all-reduced through the
fabric: a DDP communication hook that hands each gradient bucket to a
Communicator (the RC transport, any all-reduce algorithm of schedule.py),
and a small training run that uses it.

In your own training script (one process per host, inside its namespace):

    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from hostagent.collectives.communicator import open_communicator
    from hostagent.collectives.ddp import FabricHook, fabric_allreduce_hook

    dist.init_process_group("gloo", init_method=f"tcp://{addresses[0]}:29500", rank=rank,
                            world_size=len(addresses))         # DDP's set-up (parameter broadcast)
    comm = open_communicator(rank, addresses, iface, src_ip, src_mac, gw_mac)
    model = DDP(model)
    model.register_comm_hook(FabricHook(comm, "ring"), fabric_allreduce_hook)
    ... train as usual ...
    comm.close()

Through the switch instead (the aggregation feature: the ranks are the
workers of the topology's aggregation job `job`, `server_ip` its parameter
server), give the communicator the job, a first sequence number the ranks
agree on and the job's block size, and the hook the algorithm "in-network":

    comm = open_communicator(rank, addresses, iface, src_ip, src_mac, gw_mac,
                             aggregation=(job, server_ip, seq_base, block_elements))
    model.register_comm_hook(FabricHook(comm, "in-network"), fabric_allreduce_hook)

The hook replaces only the gradient all-reduce; torch.distributed's own
process group (gloo, over TCP on the same hosts) still does what DDP needs
besides: broadcasting the initial parameters and buffers.

The training run (`python -m hostagent.collectives.ddp`): an MLP (64 -> 32
tanh -> 10) on scikit-learn's digits (1797 8x8 images; 1347 to train, 450
to test, split with random_state=0), SGD with lr 0.5 and global batches of
64 rows in an order drawn from (seed, epoch); rank r of n trains on part r of
each global batch (equal parts: the batch is a multiple of n; a last partial
batch is dropped), so its mean loss averaged over ranks is the global
batch's mean loss and the run equals the single-process one (`--reference`)
up to float32 rounding (in-network: up to the switch's int32 quantisation,
docs/protocols/aggregation.md). It writes PREFIX.csv (epoch, train loss, test loss,
test accuracy, seconds) and PREFIX.json.

`--steps N` stops after N global batches (an epoch that stops early is not
evaluated), and `--steps-out FILE` writes one JSON line per step as it
ends: the step's wall-clock start and end, its phases (forward, backward
with each bucket's all-reduce inside it, optimizer), the rank's loss on its
part of the batch (`--reference`: the batch's loss), and the transport's
packets resent and timeouts so far, and the PFC pauses its NIC received
and the seconds it was paused so far. `fabric train` (experiments/train.py)
reads these lines while the ranks run.

In a lossless class give `--dscp` (the class's DSCP), `--tclass` (the
class it maps to at the switches) and `--link-mbps` (the host link's rate):
the rank's NIC then honours the switches' PFC pauses of that class
(hostagent/rdma/endpoint.py), as a RoCE NIC does.
"""
# (No `from __future__ import annotations`: DDP checks the hook's annotations as objects.)
import argparse
import csv
import json
import os
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from hostagent.aggregation.allreduce import seq_base_at
from hostagent.aggregation.training import load_data
from wire import aggregation_codec as ah
from hostagent.collectives import schedule as sc
from control.topology import TopologyError
from features import load_topology
from hostagent.collectives.communicator import ALL_REDUCE_ALGORITHMS, CHANNEL_CHOICES, FIXED, IN_NETWORK, \
    TRANSPORT_MODES, CollectiveError, Communicator, default_sport, open_communicator
from hostagent.collectives.paths import PathModel, path_aware_entropies, path_aware_sports
from hostagent.rdma.uet_agent import UET
from hostagent.rdma.agent import add_cc_param_argument, cc_param_values, uet_congestion_controls
from hostagent.rdma.transport import MODES
from hostagent.sender import add_host_arguments

BATCH = 64
LEARNING_RATE = 0.5
HIDDEN = 32


@dataclass
class FabricHook:
    """The hook's state: the communicator and the all-reduce algorithm; each
    bucket's all-reduce as (wall-clock start, end, bytes) since the last
    take_buckets()."""
    comm: Communicator
    algorithm: str = sc.RING
    buckets: int = 0
    seconds: float = 0.0
    recent: list[tuple[float, float, int]] = field(default_factory=list)

    def take_buckets(self) -> list[tuple[float, float, int]]:
        taken, self.recent = self.recent, []
        return taken


def fabric_allreduce_hook(state: FabricHook, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """DDP's default semantics (the mean of the ranks' gradients), the sum
    done by the fabric. Runs synchronously: the future is complete when
    returned."""
    tensor = bucket.buffer()
    start, wall = time.monotonic(), time.time()
    summed = state.comm.all_reduce(tensor.detach().cpu().numpy(), state.algorithm)
    tensor.copy_(torch.from_numpy(summed)).div_(state.comm.size)
    state.buckets += 1
    state.seconds += time.monotonic() - start
    state.recent.append((wall, time.time(), tensor.numel() * tensor.element_size()))
    fut: torch.futures.Future[torch.Tensor] = torch.futures.Future()
    fut.set_result(tensor)
    return fut


# -- the training run -------------------------------------------------------------

def digits() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """x_train, y_train, x_test, y_test: the aggregation workload's split of the digits."""
    d = load_data()
    return (torch.tensor(d.x_train, dtype=torch.float32), torch.tensor(d.y_train),
            torch.tensor(d.x_test, dtype=torch.float32), torch.tensor(d.y_test))


def model(seed: int, hidden: int = HIDDEN) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(64, hidden), nn.Tanh(), nn.Linear(hidden, 10))


@dataclass
class StepRecord:
    """One global batch as one rank ran it (times: wall clock, seconds)."""
    step: int
    epoch: int
    start: float
    forward_s: float
    backward_s: float
    optimizer_s: float
    end: float
    loss: float                   # this rank's mean loss on its part of the batch
    buckets: list[tuple[float, float, int]]     # each all-reduce inside the backward: start, end, bytes
    retransmitted: int = 0        # the transport's packets resent so far
    timeouts: int = 0
    channel_bytes: list[int] = field(default_factory=list)     # bytes sent on each channel so far (all peers)
    pauses_received: int = 0      # PFC pauses of the rank's class its NIC received so far
    paused_s: float = 0.0         # seconds the rank's NIC was paused so far

    def line(self) -> str:
        return json.dumps(asdict(self))


def train(net: nn.Module, rank: int, ranks: int, epochs: int, seed: int, log=print, *, steps: int | None = None,
          on_step: Callable[[StepRecord], None] | None = None,
          hook: FabricHook | None = None) -> list[dict]:
    """SGD on this rank's part of every global batch; returns per-epoch
    rows (an epoch cut short by `steps` is not evaluated). on_step gets each
    step's record as it ends."""
    x_train, y_train, x_test, y_test = digits()
    if BATCH % ranks:
        raise ValueError(f"the global batch ({BATCH}) must be a multiple of the ranks ({ranks})")
    part = BATCH // ranks
    opt = torch.optim.SGD(net.parameters(), lr=LEARNING_RATE)
    loss_fn = nn.CrossEntropyLoss()
    rows: list[dict] = []
    start = time.monotonic()
    step = 0
    for epoch in range(epochs):
        order = torch.tensor(np.random.default_rng([seed, epoch]).permutation(len(x_train)))
        for b in range(len(order) // BATCH):
            if steps is not None and step >= steps:
                return rows
            rows_of_rank = order[b * BATCH + rank * part:b * BATCH + (rank + 1) * part]
            t0 = time.time()
            opt.zero_grad()
            loss = loss_fn(net(x_train[rows_of_rank]), y_train[rows_of_rank])
            t1 = time.time()
            loss.backward()
            t2 = time.time()
            opt.step()
            t3 = time.time()
            if on_step is not None:
                stats = hook.comm.transport_stats() if hook is not None else {}
                on_step(StepRecord(step, epoch, t0, t1 - t0, t2 - t1, t3 - t2, t3, loss.item(),
                                   hook.take_buckets() if hook is not None else [],
                                   stats.get("retransmitted", 0), stats.get("timeouts", 0),
                                   list(stats.get("channel_bytes", [])), stats.get("pauses_received", 0),
                                   stats.get("paused_s", 0.0)))
            step += 1
        with torch.no_grad():
            train_loss = loss_fn(net(x_train), y_train).item()
            test_out = net(x_test)
            test_loss = loss_fn(test_out, y_test).item()
            accuracy = (test_out.argmax(1) == y_test).float().mean().item()
        rows.append({"epoch": epoch + 1, "train_loss": train_loss, "test_loss": test_loss,
                     "test_accuracy": accuracy, "seconds": round(time.monotonic() - start, 3)})
        log(f"epoch {epoch + 1}: train loss {train_loss:.6f}, test loss {test_loss:.6f}, "
            f"test accuracy {accuracy:.4f}")
    return rows


def steps_per_epoch() -> int:
    """Global batches in an epoch (the training split's rows // BATCH)."""
    return len(digits()[0]) // BATCH


def step_writer(path: Path | None) -> Callable[[StepRecord], None] | None:
    """on_step for train(): each record as a JSON line, flushed (a reader
    follows the file while the run goes on)."""
    if path is None:
        return None
    path.parent.mkdir(parents=True, exist_ok=True)
    f = open(path, "w")

    def write_step(record: StepRecord) -> None:
        f.write(record.line() + "\n")
        f.flush()
    return write_step


def write(out: Path | None, rows: list[dict], summary: dict) -> None:
    if out is None:
        print(json.dumps(summary, indent=2))
        return
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.with_suffix(".csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["epoch", "train_loss", "test_loss", "test_accuracy", "seconds"])
        w.writeheader()
        w.writerows(rows)
    out.with_suffix(".json").write_text(json.dumps(summary, indent=2))
    print(f"wrote {out.with_suffix('.csv')} and {out.with_suffix('.json')}")


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m hostagent.collectives.ddp", description=__doc__.split("\n\n")[0])
    ap.add_argument("--reference", action="store_true", help="one process, no DDP: the run to compare with")
    ap.add_argument("--rank", type=int)
    ap.add_argument("--addresses", help="every rank's IPv4 address, in rank order, comma-separated")
    ap.add_argument("--master-port", type=int, default=29500, help="torch.distributed's TCP store on rank 0")
    ap.add_argument("--algorithm", choices=ALL_REDUCE_ALGORITHMS, default=sc.RING,
                    help=f"{IN_NETWORK}: through the switch (with --aggregation-job and --aggregation-server)")
    ap.add_argument("--aggregation-job", type=int, help=f"{IN_NETWORK}: the topology's aggregation job of these ranks")
    ap.add_argument("--aggregation-server", metavar="IP", help=f"{IN_NETWORK}: the job's parameter server")
    ap.add_argument("--aggregation-block-elements", type=int, default=ah.DEFAULT_BLOCK_ELEMENTS,
                    help=f"{IN_NETWORK}: the job's block_elements (default {ah.DEFAULT_BLOCK_ELEMENTS})")
    ap.add_argument("--cc", choices=sorted(uet_congestion_controls()), default="dcqcn",
                    help="congestion control (rccc: --mode uet only)")
    ap.add_argument("--mode", choices=TRANSPORT_MODES, default=MODES[0],
                    help="the transport: RC with go-back-N or selective repeat, or UET's unordered delivery")
    ap.add_argument("--line-rate-pps", type=float, default=1000.0)
    ap.add_argument("--channels", type=int, default=1, help="connections per peer pair (distinct source ports)")
    ap.add_argument("--channel-choice", choices=CHANNEL_CHOICES, default=FIXED,
                    help="fixed: a transfer cut evenly over the channels; least-loaded: each piece on the channel "
                         "with the fewest bytes outstanding (docs/collectives.md)")
    ap.add_argument("--paths", metavar="TOPOLOGY", help="path-aware source ports for the channels "
                    "(hostagent/collectives/paths.py; the topology file the fabric runs)")
    ap.add_argument("--dscp", type=int, default=0, help="DSCP of the collective's packets (its traffic class)")
    ap.add_argument("--control-dscp", type=int, default=None, choices=range(64), metavar="D",
                    help="--mode uet: the DSCP of ACKs, NACKs and credits (UE's control class; default: --dscp)")
    ap.add_argument("--tclass", type=int, default=None,
                    help="honour the switches' PFC pauses of this class (the lossless class --dscp maps to); "
                         "default: honour none")
    ap.add_argument("--link-mbps", type=float, default=100.0,
                    help="the host link's rate, Mbit/s: the length of a pause quantum (default %(default)s)")
    ap.add_argument("--timeout-s", type=float, default=60.0, help="a rank silent this long is an error")
    add_cc_param_argument(ap)
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--steps", type=int, help="stop after this many global batches (default: every epoch's)")
    ap.add_argument("--steps-out", type=Path, help="one JSON line per step, as it ends (StepRecord)")
    ap.add_argument("--hidden", type=int, default=HIDDEN, help="the MLP's hidden units (default %(default)s)")
    ap.add_argument("--bucket-cap-kb", type=float, default=None,
                    help="DDP's gradient bucket size (default DDP's: one bucket for this model)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", help="output prefix (PREFIX.csv, PREFIX.json); default: stdout")
    group = ap.add_argument_group("the host (not with --reference)")
    add_host_arguments(group)           # type: ignore[arg-type]
    for action in group._group_actions:    # needed only without --reference: checked in main()
        action.required = False
    return ap


def main(argv: list[str] | None = None) -> int:
    ap = parser()
    a = ap.parse_args(argv)
    try:
        cc_params = cc_param_values(a.cc, a.cc_param, "send", a.line_rate_pps)
    except ValueError as e:
        ap.error(f"--cc-param {e}")
    out = Path(a.out) if a.out else None
    if a.steps is not None:
        if a.steps < 1:
            print(f"hostagent.collectives.ddp: --steps must be at least 1, got {a.steps}", file=sys.stderr)
            return 2
        a.epochs = -(-a.steps // steps_per_epoch())
    if a.reference:
        rows = train(model(a.seed, a.hidden), 0, 1, a.epochs, a.seed, steps=a.steps, on_step=step_writer(a.steps_out))
        write(out, rows, {"ranks": 1, "epochs": rows})
        return 0
    missing = [f"--{n.replace('_', '-')}" for n in ("rank", "addresses", "iface", "src_ip", "src_mac", "gw_mac")
               if getattr(a, n) is None]
    if missing:
        print(f"hostagent.collectives.ddp: without --reference, give {', '.join(missing)}", file=sys.stderr)
        return 2
    in_network = a.algorithm == IN_NETWORK
    if in_network and (a.aggregation_job is None or a.aggregation_server is None):
        print(f"hostagent.collectives.ddp: --algorithm {IN_NETWORK} needs --aggregation-job and "
              f"--aggregation-server", file=sys.stderr)
        return 2
    addresses = [x.strip() for x in a.addresses.split(",") if x.strip()]
    os.environ.setdefault("GLOO_SOCKET_IFNAME", a.iface)
    dist.init_process_group("gloo", init_method=f"tcp://{addresses[0]}:{a.master_port}", rank=a.rank,
                            world_size=len(addresses))
    try:
        aggregation = None
        if in_network:      # the ranks number the job's packets from one time, rank 0's
            agreed = [seq_base_at(time.time())]
            dist.broadcast_object_list(agreed, src=0)
            aggregation = (a.aggregation_job, a.aggregation_server, agreed[0], a.aggregation_block_elements)
        try:
            sport_of, entropies_of = default_sport, None
            if a.paths:
                path_model = PathModel(load_topology(a.paths))
                sport_of = path_aware_sports(path_model, addresses, a.channels)
                entropies_of = path_aware_entropies(path_model, a.src_ip) if a.mode == UET else None
            comm = open_communicator(a.rank, addresses, a.iface, a.src_ip, a.src_mac, a.gw_mac, cc=a.cc,
                                     mode=a.mode, line_rate_pps=a.line_rate_pps, channels=a.channels,
                                     timeout_s=a.timeout_s, dscp=a.dscp, sport_of=sport_of,
                                     aggregation=aggregation, channel_choice=a.channel_choice, tclass=a.tclass,
                                     link_mbps=a.link_mbps, entropies_of=entropies_of, cc_params=cc_params,
                                     control_dscp=a.control_dscp)
        except (ValueError, TopologyError) as e:
            print(f"hostagent.collectives.ddp: {e}", file=sys.stderr)
            return 2
        bucket = {} if a.bucket_cap_kb is None else {"bucket_cap_mb": a.bucket_cap_kb / 1024}
        net = nn.parallel.DistributedDataParallel(model(a.seed, a.hidden), **bucket)
        hook = FabricHook(comm, a.algorithm)
        net.register_comm_hook(hook, fabric_allreduce_hook)
        try:
            rows = train(net, a.rank, len(addresses), a.epochs, a.seed,
                         log=(print if a.rank == 0 else (lambda *_: None)), steps=a.steps,
                         on_step=step_writer(a.steps_out), hook=hook)
        except CollectiveError as e:
            print(f"hostagent.collectives.ddp: rank {a.rank}: {e}", file=sys.stderr)
            comm.close()
            return 1
        comm.close()
    finally:
        dist.destroy_process_group()
    stats = comm.transport_stats()
    write(out, rows, {"rank": a.rank, "ranks": len(addresses), "algorithm": a.algorithm, "cc": a.cc,
                      "buckets_all_reduced": hook.buckets, "all_reduce_seconds": round(hook.seconds, 3),
                      "retransmitted": stats["retransmitted"], "tclass": a.tclass,
                      "pauses_received": stats["pauses_received"], "paused_s": stats["paused_s"],
                      "epochs": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
