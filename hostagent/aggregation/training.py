"""Data-parallel training of a small MLP on scikit-learn's digits, with the
gradient sum done by an injected all-reduce: the workload that compares the
in-network aggregation with the ring all-reduce (hostagent/aggregation/ring_allreduce.py).

    python -m hostagent.aggregation.training [--epochs 30] [--out training-results/reference]
        one process (the reference)
    python -m hostagent.aggregation.training --workers 4 [--out PREFIX]
        4 workers as threads of this process, summing in memory (ThreadAllReduce)
    python -m hostagent.aggregation.training --rank R --addresses 10.0.1.1,10.0.2.1,... --port 47000 [--out PREFIX]
        one worker per host (run inside each host's namespace), summing over the UDP ring
    python -m hostagent.aggregation.training --rank R --workers-total N --job J --server 10.0.9.1 [--out PREFIX]
        one worker per host, summing through the switch (hostagent/aggregation/allreduce.py, in-network aggregation)

Each writes PREFIX.csv (one row per epoch; for threads, rank 0's) and prints
the epochs as they finish.

Data: sklearn.datasets.load_digits (1797 8x8 images, 64 features, 10 classes),
features divided by 16 (to [0, 1]), split once with train_test_split(
test_size=0.25, random_state=0, stratify=y): 1347 training, 450 test samples.

Model: 64 -> 32 tanh -> 10 softmax, cross-entropy; weights drawn from
default_rng(seed) (N(0, 1/fan_in)), biases 0. The parameters live in one flat
float32 vector (layout PARAM_SHAPES, see flatten/unflatten), so a step needs
one all-reduce of PARAM_COUNT = 2410 float32.

Data parallelism: every epoch, all workers draw the same permutation of the
training set (default_rng([seed, epoch])) and cut it into global batches of
batch_size rows (the last one may be smaller). Worker r of n takes part r of
each global batch (np.array_split: n equal parts when n divides the batch,
otherwise sizes differing by one; a part may be empty), computes the
gradient of the SUM of its rows' losses (float64, sent as float32), calls
allreduce(gradient) for the sum over all workers, divides by the global
batch size and takes an SGD step. With n = 1 and allreduce = identity
this is plain mini-batch SGD on the same batches (reference_run), so a
data-parallel run differs from it only by the all-reduce's rounding (and
whatever error it adds, e.g. quantisation). After each epoch every worker
evaluates loss and accuracy on the full training and test sets.
"""
from __future__ import annotations

import argparse
import csv
import os
import sys
import threading
import time
import zipfile
from dataclasses import asdict, dataclass, fields
from functools import lru_cache
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
from hostagent.aggregation.allreduce import AggregationWorker, seq_base_at
from hostagent.aggregation.ring_allreduce import RingAllReduce
from wire import aggregation_codec as ah

AllReduce = Callable[[np.ndarray], np.ndarray]

N_FEATURES = 64
N_HIDDEN = 32
N_CLASSES = 10
# the flat parameter vector, in this order: x @ w1 + b1 -> tanh -> @ w2 + b2
PARAM_SHAPES: dict[str, tuple[int, ...]] = {
    "w1": (N_FEATURES, N_HIDDEN),
    "b1": (N_HIDDEN,),
    "w2": (N_HIDDEN, N_CLASSES),
    "b2": (N_CLASSES,),
}
PARAM_COUNT = sum(int(np.prod(s)) for s in PARAM_SHAPES.values())   # 2410


@dataclass(frozen=True)
class Dataset:
    x_train: np.ndarray   # (1347, 64) float64 in [0, 1]
    y_train: np.ndarray   # (1347,) int64 labels 0..9
    x_test: np.ndarray    # (450, 64)
    y_test: np.ndarray    # (450,)


@lru_cache(maxsize=1)
def load_data() -> Dataset:
    """The digits, scaled to [0, 1] and split (fixed: random_state=0, stratified).

    The split is made with scikit-learn once and kept in the user's cache
    (split_cache_path: one .npz a scikit-learn version); later processes read
    it with numpy. Importing scikit-learn costs a process about 2 s of CPU,
    and a training case starts one rank a host at once on two cores."""
    path = split_cache_path()
    try:
        with np.load(path) as f:
            arrays = [f[name] for name in ("x_train", "y_train", "x_test", "y_test")]
    except (OSError, KeyError, ValueError, EOFError, zipfile.BadZipFile):   # absent, or cut short
        arrays = list(_split_digits())
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f"{path.stem}.{os.getpid()}.npz")
        np.savez(partial, **dict(zip(("x_train", "y_train", "x_test", "y_test"), arrays)))
        os.replace(partial, path)               # ranks starting together each write whole files
    for a in arrays:
        a.setflags(write=False)
    return Dataset(*arrays)


def split_cache_path() -> Path:
    """$XDG_CACHE_HOME (or ~/.cache)/p4-ai-fabric/digits-split-scikit-learn-<version>.npz."""
    from importlib.metadata import version
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return root / "p4-ai-fabric" / f"digits-split-scikit-learn-{version('scikit-learn')}.npz"


def _split_digits() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """x_train, y_train, x_test, y_test, made with scikit-learn."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    x = digits.data.astype(np.float64) / 16.0
    y = digits.target.astype(np.int64)
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.25, random_state=0, stratify=y)
    return x_train, y_train, x_test, y_test


@dataclass
class EpochRecord:
    epoch: int              # 1-based
    train_loss: float       # mean cross-entropy over the full training set, after the epoch
    train_accuracy: float
    test_loss: float
    test_accuracy: float
    epoch_s: float          # wall time of the epoch's steps (evaluation not included)
    allreduce_s: float      # of which spent in allreduce()
    wall_s: float           # since train() started, evaluation included


# --- the model -------------------------------------------------------------------

def init_params(seed: int = 0) -> np.ndarray:
    """Initial flat float32 parameters: weights N(0, 1/fan_in) from default_rng(seed), biases 0."""
    rng = np.random.default_rng(seed)
    parts = {
        "w1": rng.standard_normal(PARAM_SHAPES["w1"]) / np.sqrt(N_FEATURES),
        "b1": np.zeros(N_HIDDEN),
        "w2": rng.standard_normal(PARAM_SHAPES["w2"]) / np.sqrt(N_HIDDEN),
        "b2": np.zeros(N_CLASSES),
    }
    return flatten(parts)


def flatten(parts: dict[str, np.ndarray]) -> np.ndarray:
    """One float32 vector of the parts, in PARAM_SHAPES order."""
    for name, shape in PARAM_SHAPES.items():
        if name not in parts:
            raise ValueError(f"parts: {name} missing")
        if np.shape(parts[name]) != shape:
            raise ValueError(f"parts[{name!r}]: shape {np.shape(parts[name])}, expected {shape}")
    return np.concatenate([np.ravel(parts[name]) for name in PARAM_SHAPES]).astype(np.float32)


def unflatten(vector: np.ndarray) -> dict[str, np.ndarray]:
    """The parts of a flat vector as float64 arrays (copies), by name."""
    vector = np.asarray(vector)
    if vector.shape != (PARAM_COUNT,):
        raise ValueError(f"vector: shape {vector.shape}, expected ({PARAM_COUNT},)")
    parts, at = {}, 0
    for name, shape in PARAM_SHAPES.items():
        size = int(np.prod(shape))
        parts[name] = vector[at:at + size].astype(np.float64).reshape(shape)
        at += size
    return parts


def _forward(p: dict[str, np.ndarray], x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(hidden activations, class probabilities)."""
    h = np.tanh(x @ p["w1"] + p["b1"])
    logits = h @ p["w2"] + p["b2"]
    logits -= logits.max(axis=1, keepdims=True)
    e = np.exp(logits)
    return h, e / e.sum(axis=1, keepdims=True)


def evaluate(params: np.ndarray, x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """(mean cross-entropy, accuracy) of the model on (x, y)."""
    _, prob = _forward(unflatten(params), x)
    loss = -np.mean(np.log(np.maximum(prob[np.arange(len(y)), y], 1e-300)))
    return float(loss), float(np.mean(prob.argmax(axis=1) == y))


def gradient_sum(params: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Gradient of the SUM of the rows' cross-entropies, as a flat float32
    vector (computed in float64); zeros for no rows."""
    if len(x) == 0:
        return np.zeros(PARAM_COUNT, dtype=np.float32)
    p = unflatten(params)
    h, prob = _forward(p, x)
    d_logits = prob
    d_logits[np.arange(len(y)), y] -= 1.0
    d_hidden = (d_logits @ p["w2"].T) * (1.0 - h * h)
    return flatten({
        "w1": x.T @ d_hidden,
        "b1": d_hidden.sum(axis=0),
        "w2": h.T @ d_logits,
        "b2": d_logits.sum(axis=0),
    })


# --- training --------------------------------------------------------------------

def global_batches(n_train: int, batch_size: int, seed: int, epoch: int) -> list[np.ndarray]:
    """Row indices of the epoch's global batches (the same on every worker)."""
    order = np.random.default_rng([seed, epoch]).permutation(n_train)
    return [order[i:i + batch_size] for i in range(0, n_train, batch_size)]


def train(rank: int, n_workers: int, allreduce: AllReduce, epochs: int = 30, batch_size: int = 64,
          lr: float = 0.5, seed: int = 0, on_epoch: Callable[[EpochRecord], None] | None = None
          ) -> list[EpochRecord]:
    """Worker `rank` of `n_workers` trains the MLP data-parallel (module
    docstring); allreduce(gradient) must return the element-wise sum of all
    workers' float32 gradient vectors, the same on every worker. on_epoch is
    called with each record as it is made. Returns one record per epoch."""
    if n_workers < 1:
        raise ValueError(f"n_workers: {n_workers}, need at least 1")
    if not 0 <= rank < n_workers:
        raise ValueError(f"rank: {rank} is not in 0..{n_workers - 1}")
    if epochs < 1:
        raise ValueError(f"epochs: {epochs}, need at least 1")
    if batch_size < 1:
        raise ValueError(f"batch_size: {batch_size}, need at least 1")
    if not lr > 0:
        raise ValueError(f"lr: {lr}, need > 0")
    data = load_data()
    params = init_params(seed)
    records: list[EpochRecord] = []
    start = time.perf_counter()
    for epoch in range(1, epochs + 1):
        epoch_start = time.perf_counter()
        reduce_s = 0.0
        for batch in global_batches(len(data.y_train), batch_size, seed, epoch):
            rows = np.array_split(batch, n_workers)[rank]
            grad = gradient_sum(params, data.x_train[rows], data.y_train[rows])
            t = time.perf_counter()
            total = np.asarray(allreduce(grad))
            reduce_s += time.perf_counter() - t
            if total.shape != grad.shape:
                raise ValueError(f"allreduce: returned shape {total.shape}, expected {grad.shape}")
            params = (params - lr * total.astype(np.float64) / len(batch)).astype(np.float32)
        epoch_s = time.perf_counter() - epoch_start
        train_loss, train_acc = evaluate(params, data.x_train, data.y_train)
        test_loss, test_acc = evaluate(params, data.x_test, data.y_test)
        record = EpochRecord(epoch, train_loss, train_acc, test_loss, test_acc, epoch_s, reduce_s,
                             time.perf_counter() - start)
        records.append(record)
        if on_epoch is not None:
            on_epoch(record)
    return records


def reference_run(epochs: int = 30, batch_size: int = 64, lr: float = 0.5, seed: int = 0,
                  on_epoch: Callable[[EpochRecord], None] | None = None) -> list[EpochRecord]:
    """Single-process training on the same global batches: what a data-parallel
    run must reproduce up to the all-reduce's error."""
    return train(0, 1, lambda g: g, epochs=epochs, batch_size=batch_size, lr=lr, seed=seed, on_epoch=on_epoch)


class ThreadAllReduce:
    """An in-memory all-reduce for n workers that are threads of one process:
    `for_rank(r)` is worker r's allreduce. A call blocks until all n workers
    called (threading.Barrier); then the vectors are summed once, in rank
    order, in their dtype, `transform` (if given) is applied to the sum (e.g.
    to model quantisation error), and every worker gets a copy of the same
    result. A worker that fails should call abort() so the others do not wait
    out `timeout_s`."""

    def __init__(self, n: int, transform: Callable[[np.ndarray], np.ndarray] | None = None,
                 timeout_s: float = 60.0):
        if n < 1:
            raise ValueError(f"n: {n}, need at least 1")
        self.n = n
        self.transform = transform
        self._inputs: list[np.ndarray | None] = [None] * n
        self._result: np.ndarray | None = None
        self._barrier = threading.Barrier(n, action=self._reduce, timeout=timeout_s)

    def _reduce(self) -> None:
        inputs = [v for v in self._inputs if v is not None]
        assert len(inputs) == self.n  # every worker stored its vector before reaching the barrier
        shapes = {np.shape(v) for v in inputs}
        if len(shapes) != 1:
            raise ValueError(f"ThreadAllReduce: workers passed different shapes {sorted(shapes)}")
        total = inputs[0].copy()
        for v in inputs[1:]:
            total += v
        self._result = self.transform(total) if self.transform is not None else total

    def for_rank(self, rank: int) -> AllReduce:
        if not 0 <= rank < self.n:
            raise ValueError(f"rank: {rank} is not in 0..{self.n - 1}")

        def allreduce(vector: np.ndarray) -> np.ndarray:
            self._inputs[rank] = np.asarray(vector)
            self._barrier.wait()        # the last to arrive runs _reduce before anyone leaves
            assert self._result is not None
            return self._result.copy()  # the next _reduce needs this thread at the barrier again
        return allreduce

    def abort(self) -> None:
        self._barrier.abort()


def run_threads(n_workers: int, epochs: int = 30, batch_size: int = 64, lr: float = 0.5, seed: int = 0,
                transform: Callable[[np.ndarray], np.ndarray] | None = None,
                on_epoch: Callable[[EpochRecord], None] | None = None) -> list[list[EpochRecord]]:
    """n_workers run train() as threads over a ThreadAllReduce; the records of
    each rank. Re-raises the first worker error. on_epoch gets rank 0's records."""
    reducer = ThreadAllReduce(n_workers, transform)
    results: list[list[EpochRecord] | None] = [None] * n_workers
    errors: list[BaseException | None] = [None] * n_workers

    def worker(rank: int) -> None:
        try:
            results[rank] = train(rank, n_workers, reducer.for_rank(rank), epochs=epochs, batch_size=batch_size,
                                  lr=lr, seed=seed, on_epoch=on_epoch if rank == 0 else None)
        except BaseException as exc:   # noqa: BLE001 - re-raised in the caller's thread
            errors[rank] = exc
            reducer.abort()

    threads = [threading.Thread(target=worker, args=(r,), name=f"worker-{r}") for r in range(n_workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    first = next((e for e in errors if e is not None and not isinstance(e, threading.BrokenBarrierError)),
                 next((e for e in errors if e is not None), None))
    if first is not None:
        raise first
    done = [r for r in results if r is not None]
    assert len(done) == n_workers  # no worker failed, so every one stored its records
    return done


def write_records_csv(records: Sequence[EpochRecord], path: str | Path) -> Path:
    """Write the records, one row per epoch (header: EpochRecord's fields); the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=[fl.name for fl in fields(EpochRecord)])
        writer.writeheader()
        for r in records:
            writer.writerow(asdict(r))
    return path


# --- command line ----------------------------------------------------------------

def _print_record(r: EpochRecord) -> None:
    print(f"epoch {r.epoch:3d}: train loss {r.train_loss:.4f} acc {r.train_accuracy:.4f}, "
          f"test loss {r.test_loss:.4f} acc {r.test_accuracy:.4f}, {r.epoch_s:.3f} s "
          f"(all-reduce {r.allreduce_s:.3f} s)", flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--epochs", type=int, default=30)
    ap.add_argument("--batch-size", type=int, default=64, help="global batch size (default 64)")
    ap.add_argument("--lr", type=float, default=0.5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workers", type=int, default=1, help="workers as threads of this process (default 1)")
    ap.add_argument("--rank", type=int, help="with --addresses: this host's worker, over the UDP ring")
    ap.add_argument("--addresses", help="comma-separated IPv4 addresses of the ring's workers 0, 1, ...")
    ap.add_argument("--port", type=int, default=47000, help="UDP port of the ring (default 47000)")
    ap.add_argument("--timeout", type=float, default=60.0, help="ring: give up an all-reduce after this long")
    ap.add_argument("--job", type=int, help="in-network aggregation: the job (with --server, --rank, --workers-total)")
    ap.add_argument("--server", help="in-network aggregation: the job's parameter server address")
    ap.add_argument("--block-elements", type=int, default=ah.DEFAULT_BLOCK_ELEMENTS,
                    help=f"in-network aggregation: the job's block_elements (default {ah.DEFAULT_BLOCK_ELEMENTS})")
    ap.add_argument("--workers-total", type=int, help="in-network aggregation: the job's number of workers")
    ap.add_argument("--start-at", type=float, help="in-network aggregation: wall-clock start agreed by the workers "
                                                   "(also gives the job's first sequence number)")
    ap.add_argument("--out", help="output prefix: writes <out>.csv (default training-results/<mode>)")
    a = ap.parse_args(argv)
    ina = a.job is not None
    if ina and (a.server is None or a.rank is None or a.workers_total is None or a.addresses is not None):
        ap.error("in-network aggregation needs --job, --server, --rank and --workers-total (no --addresses)")
    if not ina and (a.rank is None) != (a.addresses is None):
        ap.error("--rank and --addresses go together")
    if a.rank is not None and a.workers != 1:
        ap.error("--workers: threads or the ring (--rank/--addresses), not both")
    try:
        if ina:
            import time as _time
            out = a.out or f"training-results/ina-rank{a.rank}"
            start_at = a.start_at or _time.time()
            with AggregationWorker(a.job, a.server, a.workers_total, timeout_s=a.timeout,
                                   seq_base=seq_base_at(start_at), block_elements=a.block_elements) as worker:
                _time.sleep(max(0.0, start_at - _time.time()))
                records = train(a.rank, a.workers_total, worker.allreduce, a.epochs, a.batch_size, a.lr, a.seed,
                                on_epoch=_print_record)
                s = worker.stats
                print(f"in-network: {s.calls} all-reduces, sent {s.packets_sent} packets / {s.bytes_sent} B, "
                      f"{s.retransmissions} retransmissions, {s.fallback_blocks} blocks via the server")
        elif a.addresses is not None:
            addresses = [x.strip() for x in a.addresses.split(",") if x.strip()]
            out = a.out or f"training-results/ring-rank{a.rank}"
            with RingAllReduce(a.rank, addresses, a.port, timeout_s=a.timeout) as ring:
                records = train(a.rank, len(addresses), ring.allreduce, a.epochs, a.batch_size, a.lr, a.seed,
                                on_epoch=_print_record)
                rs = ring.stats
                print(f"ring: {rs.calls} all-reduces, sent {rs.packets_sent} packets / {rs.bytes_sent} B, "
                      f"{rs.retransmissions} retransmissions")
        elif a.workers > 1:
            out = a.out or f"training-results/threads{a.workers}"
            records = run_threads(a.workers, a.epochs, a.batch_size, a.lr, a.seed, on_epoch=_print_record)[0]
        else:
            out = a.out or "training-results/reference"
            records = reference_run(a.epochs, a.batch_size, a.lr, a.seed, on_epoch=_print_record)
    except (ValueError, TimeoutError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    path = write_records_csv(records, out + ".csv")
    print(f"final test accuracy {records[-1].test_accuracy:.4f}; wrote {path.resolve()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
