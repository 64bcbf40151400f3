"""Training steps as sequences of collectives and compute: the yardstick a
user of a fabric technique asks about (how long is a step with it?).

A workload gives each rank, per step, a list of operations: `Compute(ms)`
(the accelerator's work, emulated by sleeping: the host CPU is not the
accelerator), `Collective(name, bytes, algorithm)`, and point-to-point
`Send`/`Recv` between pipeline stages. Built in:

  data-parallel  forward, then backward in buckets, each followed by the all-reduce of its
                 gradients (DDP without overlap: the bucket's all-reduce waits for its compute)
  moe            per layer: attention compute, all-to-all of the tokens to their experts,
                 expert compute, all-to-all back
  pipeline       GPipe: every microbatch forward through the stages (receive the
                 activations, compute, send them on), then backward the other way (twice the
                 compute); each rank is one stage

Sizes and times are scaled to what the emulated fabric carries (a BMv2
link forwards thousands of packets a second, not millions): a "model" of
hundreds of kilobytes, compute of tens of milliseconds.

`run_steps` runs the steps on a Communicator, a barrier (an all-reduce of
one element) before each so that every rank starts it together, and
returns per step its time and per collective its time and bandwidths.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Union

import numpy as np

from hostagent.collectives import schedule as sc
from hostagent.collectives.communicator import Communicator

ITEMSIZE = 4            # float32 gradients, activations and tokens


@dataclass(frozen=True)
class Compute:
    ms: float


@dataclass(frozen=True)
class Collective:
    collective: str
    nbytes: int
    algorithm: str


@dataclass(frozen=True)
class Send:
    peer: int
    nbytes: int


@dataclass(frozen=True)
class Recv:
    peer: int
    nbytes: int


Op = Union[Compute, Collective, Send, Recv]


@dataclass(frozen=True)
class DataParallel:
    model_bytes: int = 256 * 1024
    buckets: int = 4
    forward_ms: float = 20.0
    backward_ms: float = 40.0
    algorithm: str = sc.RING

    def ops(self, rank: int, ranks: int) -> list[Op]:
        cut = sc.bounds(self.model_bytes // ITEMSIZE, self.buckets)
        ops: list[Op] = [Compute(self.forward_ms)]
        for b in range(self.buckets):
            ops += [Compute(self.backward_ms / self.buckets),
                    Collective(sc.ALL_REDUCE, (cut[b + 1] - cut[b]) * ITEMSIZE, self.algorithm)]
        return ops


@dataclass(frozen=True)
class MixtureOfExperts:
    tokens_bytes: int = 64 * 1024      # what a rank sends in one all-to-all (all peers together)
    layers: int = 2
    attention_ms: float = 10.0
    expert_ms: float = 10.0

    def ops(self, rank: int, ranks: int) -> list[Op]:
        nbytes = self.tokens_bytes // (ranks * ITEMSIZE) * ranks * ITEMSIZE      # whole blocks per peer
        ops: list[Op] = []
        for _ in range(self.layers):
            ops += [Compute(self.attention_ms), Collective(sc.ALL_TO_ALL, nbytes, sc.PAIRWISE),
                    Compute(self.expert_ms), Collective(sc.ALL_TO_ALL, nbytes, sc.PAIRWISE)]
        return ops


@dataclass(frozen=True)
class Pipeline:
    activation_bytes: int = 32 * 1024
    microbatches: int = 4
    stage_ms: float = 10.0

    def ops(self, rank: int, ranks: int) -> list[Op]:
        first, last = rank == 0, rank == ranks - 1
        ops: list[Op] = []
        for _ in range(self.microbatches):                       # forward
            if not first:
                ops.append(Recv(rank - 1, self.activation_bytes))
            ops.append(Compute(self.stage_ms))
            if not last:
                ops.append(Send(rank + 1, self.activation_bytes))
        for _ in range(self.microbatches):                       # backward
            if not last:
                ops.append(Recv(rank + 1, self.activation_bytes))
            ops.append(Compute(2 * self.stage_ms))
            if not first:
                ops.append(Send(rank - 1, self.activation_bytes))
        return ops


WORKLOADS: dict[str, Callable[..., Union[DataParallel, MixtureOfExperts, Pipeline]]] = {
    "data-parallel": DataParallel, "moe": MixtureOfExperts, "pipeline": Pipeline}


@dataclass
class CollectiveTiming:
    step: int
    index: int                 # the operation's position in the step
    collective: str
    algorithm: str
    nbytes: int
    seconds: float
    algbw: float
    busbw: float


@dataclass
class StepResult:
    step: int
    seconds: float
    compute_seconds: float
    collectives: list[CollectiveTiming] = field(default_factory=list)


def run_steps(comm: Communicator, workload, steps: int, seed: int = 1,
              on_step: Callable[[StepResult], None] = lambda r: None) -> list[StepResult]:
    ops = workload.ops(comm.rank, comm.size)
    rng = np.random.default_rng([seed, comm.rank])
    results = []
    for step in range(steps):
        comm.all_reduce(np.zeros(1, dtype=np.float32))               # barrier: every rank starts the step together
        result = StepResult(step, 0.0, 0.0)
        start = time.monotonic()
        for i, op in enumerate(ops):
            if isinstance(op, Compute):
                time.sleep(op.ms / 1000)
                result.compute_seconds += op.ms / 1000
            elif isinstance(op, Collective):
                x = rng.standard_normal(op.nbytes // ITEMSIZE).astype(np.float32)
                comm.run(op.collective, op.algorithm, x)
                rec = comm.records[-1]
                algbw, busbw = rec.bandwidths
                result.collectives.append(CollectiveTiming(step, i, op.collective, op.algorithm, op.nbytes,
                                                           rec.seconds, algbw, busbw))
            elif isinstance(op, Send):
                comm.send(rng.standard_normal(op.nbytes // ITEMSIZE).astype(np.float32), op.peer)
            else:
                comm.recv(op.peer, op.nbytes // ITEMSIZE, np.float32)
        result.seconds = time.monotonic() - start
        results.append(result)
        on_step(result)
    return results
