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
"""
# (No `from __future__ import annotations`: DDP checks the hook's annotations as objects.)
import argparse
import csv
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from hostagent.aggregation.allreduce import seq_base_at
from wire import aggregation as ah
from hostagent.collectives import schedule as sc
from hostagent.collectives.communicator import ALL_REDUCE_ALGORITHMS, IN_NETWORK, Communicator, open_communicator
from hostagent.rdma.agent import congestion_controls
from hostagent.sender import add_host_arguments

BATCH = 64
LEARNING_RATE = 0.5
HIDDEN = 32


@dataclass
class FabricHook:
    """The hook's state: the communicator and the all-reduce algorithm."""
    comm: Communicator
    algorithm: str = sc.RING
    buckets: int = 0
    seconds: float = 0.0


def fabric_allreduce_hook(state: FabricHook, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """DDP's default semantics (the mean of the ranks' gradients), the sum
    done by the fabric. Runs synchronously: the future is complete when
    returned."""
    tensor = bucket.buffer()
    start = time.monotonic()
    summed = state.comm.all_reduce(tensor.detach().cpu().numpy(), state.algorithm)
    tensor.copy_(torch.from_numpy(summed)).div_(state.comm.size)
    state.buckets += 1
    state.seconds += time.monotonic() - start
    fut: torch.futures.Future[torch.Tensor] = torch.futures.Future()
    fut.set_result(tensor)
    return fut


# -- the training run -------------------------------------------------------------

def digits() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split
    x, y = load_digits(return_X_y=True)
    x_train, x_test, y_train, y_test = train_test_split(x / 16.0, y, test_size=0.25, random_state=0, stratify=y)
    return (torch.tensor(x_train, dtype=torch.float32), torch.tensor(y_train),
            torch.tensor(x_test, dtype=torch.float32), torch.tensor(y_test))


def model(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(64, HIDDEN), nn.Tanh(), nn.Linear(HIDDEN, 10))


def train(net: nn.Module, rank: int, ranks: int, epochs: int, seed: int, log=print) -> list[dict]:
    """SGD on this rank's part of every global batch; returns per-epoch rows."""
    x_train, y_train, x_test, y_test = digits()
    if BATCH % ranks:
        raise ValueError(f"the global batch ({BATCH}) must be a multiple of the ranks ({ranks})")
    part = BATCH // ranks
    opt = torch.optim.SGD(net.parameters(), lr=LEARNING_RATE)
    loss_fn = nn.CrossEntropyLoss()
    rows = []
    start = time.monotonic()
    for epoch in range(epochs):
        order = torch.tensor(np.random.default_rng([seed, epoch]).permutation(len(x_train)))
        for b in range(len(order) // BATCH):
            rows_of_rank = order[b * BATCH + rank * part:b * BATCH + (rank + 1) * part]
            opt.zero_grad()
            loss_fn(net(x_train[rows_of_rank]), y_train[rows_of_rank]).backward()
            opt.step()
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


def write(out: Path | None, rows: list[dict], summary: dict) -> None:
    if out is None:
        print(json.dumps(summary, indent=2))
        return
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.with_suffix(".csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
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
    ap.add_argument("--cc", choices=sorted(congestion_controls()), default="dcqcn")
    ap.add_argument("--line-rate-pps", type=float, default=1000.0)
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", help="output prefix (PREFIX.csv, PREFIX.json); default: stdout")
    group = ap.add_argument_group("the host (not with --reference)")
    add_host_arguments(group)           # type: ignore[arg-type]
    for action in group._group_actions:    # needed only without --reference: checked in main()
        action.required = False
    return ap


def main(argv: list[str] | None = None) -> int:
    a = parser().parse_args(argv)
    out = Path(a.out) if a.out else None
    if a.reference:
        rows = train(model(a.seed), 0, 1, a.epochs, a.seed)
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
            comm = open_communicator(a.rank, addresses, a.iface, a.src_ip, a.src_mac, a.gw_mac, cc=a.cc,
                                     line_rate_pps=a.line_rate_pps, aggregation=aggregation)
        except ValueError as e:
            print(f"hostagent.collectives.ddp: {e}", file=sys.stderr)
            return 2
        net = nn.parallel.DistributedDataParallel(model(a.seed))
        hook = FabricHook(comm, a.algorithm)
        net.register_comm_hook(hook, fabric_allreduce_hook)
        rows = train(net, a.rank, len(addresses), a.epochs, a.seed,
                     log=(print if a.rank == 0 else (lambda *_: None)))
        comm.close()
    finally:
        dist.destroy_process_group()
    write(out, rows, {"rank": a.rank, "ranks": len(addresses), "algorithm": a.algorithm, "cc": a.cc,
                      "buckets_all_reduced": hook.buckets, "all_reduce_seconds": round(hook.seconds, 3),
                      "retransmitted": comm.transport_stats()["retransmitted"],
                      "epochs": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
