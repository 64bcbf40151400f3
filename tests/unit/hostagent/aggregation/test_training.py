"""Data-parallel MLP training on the digits (hostagent/aggregation/training.py): the data
split, flatten/unflatten, the gradient against finite differences, the accuracy
single-process training reaches, 4 thread workers over an in-memory all-reduce
matching the reference, a noisy (quantisation-like) all-reduce tracking it,
and the CSV."""
from __future__ import annotations

import csv
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from hostagent.aggregation.training import (PARAM_COUNT, PARAM_SHAPES, EpochRecord, ThreadAllReduce, evaluate, flatten,
                                global_batches, gradient_sum, init_params, load_data, main, reference_run,
                                run_threads, train, unflatten, write_records_csv)


@pytest.fixture(scope="module")
def reference() -> list[EpochRecord]:
    return reference_run()


def losses(records: list[EpochRecord]) -> np.ndarray:
    return np.array([[r.train_loss, r.test_loss] for r in records])


def test_data_is_split_and_scaled():
    d = load_data()
    assert d.x_train.shape == (1347, 64) and d.x_test.shape == (450, 64)
    assert d.x_train.min() == 0.0 and d.x_train.max() == 1.0
    assert set(np.unique(d.y_test)) == set(range(10))
    assert np.array_equal(load_data().y_test, d.y_test)          # fixed split



def test_the_split_is_made_once_and_read_without_scikit_learn_after(tmp_path):
    """The first process splits with scikit-learn and keeps the split; the
    next reads it with numpy alone, the same arrays; a file cut short is made again."""
    code = ("import sys; import numpy as np; from hostagent.aggregation.training import load_data, split_cache_path; "
            "d = load_data(); np.savez(sys.argv[1], *[d.x_train, d.y_train, d.x_test, d.y_test]); "
            "print('sklearn' in sys.modules, split_cache_path())")
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}

    def run(out: str) -> tuple[bool, Path, list[np.ndarray]]:
        printed = subprocess.run([sys.executable, "-c", code, str(tmp_path / out)], env=env, capture_output=True,
                                 text=True, check=True).stdout.split()
        with np.load(tmp_path / out) as f:
            return printed[0] == "True", Path(printed[1]), [f[k] for k in sorted(f.files)]

    imported, path, first = run("first.npz")
    assert imported and path.is_relative_to(tmp_path / "cache") and path.exists()
    imported, _, second = run("second.npz")
    assert not imported and all(np.array_equal(a, b) and a.dtype == b.dtype for a, b in zip(first, second))
    path.write_bytes(path.read_bytes()[:100])
    imported, _, third = run("third.npz")
    assert imported and all(np.array_equal(a, b) for a, b in zip(first, third))


def test_flatten_unflatten_round_trip_and_layout():
    v = init_params(3)
    assert v.dtype == np.float32 and v.shape == (PARAM_COUNT,) and PARAM_COUNT == 2410
    parts = unflatten(v)
    assert {k: p.shape for k, p in parts.items()} == PARAM_SHAPES
    assert np.array_equal(flatten(parts), v)
    assert np.array_equal(parts["b1"], np.zeros(32)) and parts["w1"].std() > 0.05
    assert np.array_equal(init_params(3), v) and not np.array_equal(init_params(4), v)
    with pytest.raises(ValueError, match="vector"):
        unflatten(v[:-1])
    parts["w2"] = parts["w2"][:, :9]
    with pytest.raises(ValueError, match=r"parts\['w2'\]"):
        flatten(parts)


def test_gradient_matches_finite_differences():
    d = load_data()
    x, y = d.x_train[:5], d.y_train[:5]
    params = init_params(1).astype(np.float64)
    grad = gradient_sum(params, x, y).astype(np.float64)

    def total_loss(p):
        return evaluate(p, x, y)[0] * len(y)

    rng = np.random.default_rng(0)
    for i in rng.choice(PARAM_COUNT, size=25, replace=False):
        e = np.zeros(PARAM_COUNT)
        e[i] = 1e-5
        numeric = (total_loss(params + e) - total_loss(params - e)) / 2e-5
        assert numeric == pytest.approx(grad[i], rel=1e-3, abs=1e-5)
    assert np.array_equal(gradient_sum(params, x[:0], y[:0]), np.zeros(PARAM_COUNT, dtype=np.float32))


def test_gradient_of_a_batch_is_the_sum_of_its_parts():
    d = load_data()
    params = init_params(0)
    rows = global_batches(len(d.y_train), 64, seed=0, epoch=1)[0]
    whole = gradient_sum(params, d.x_train[rows], d.y_train[rows])
    parts = [gradient_sum(params, d.x_train[r], d.y_train[r]) for r in np.array_split(rows, 4)]
    np.testing.assert_allclose(np.sum(parts, axis=0), whole, rtol=1e-5, atol=1e-6)


def test_batches_cover_the_training_set_once_per_epoch():
    batches = global_batches(1347, 64, seed=0, epoch=2)
    assert [len(b) for b in batches] == [64] * 21 + [3]
    assert np.array_equal(np.sort(np.concatenate(batches)), np.arange(1347))
    assert not np.array_equal(batches[0], global_batches(1347, 64, seed=0, epoch=3)[0])


def test_single_process_training_learns_the_digits(reference):
    """The reference reaches 97.1% test accuracy after 30 epochs (99% train);
    assert a margin below that."""
    assert len(reference) == 30 and [r.epoch for r in reference] == list(range(1, 31))
    last = reference[-1]
    assert last.test_accuracy > 0.95 and last.train_accuracy > 0.97
    assert last.test_loss < 0.2 and last.train_loss < reference[0].train_loss / 5
    assert reference[0].test_accuracy < 0.9 < max(r.test_accuracy for r in reference[:12])
    assert all(r.wall_s > 0 and r.epoch_s >= r.allreduce_s >= 0 for r in reference)


def test_four_thread_workers_match_the_reference(reference):
    per_rank = run_threads(4)
    for records in per_rank:
        assert len(records) == 30
        np.testing.assert_allclose(losses(records), losses(reference), rtol=1e-4)
        assert [r.test_accuracy for r in records] == pytest.approx([r.test_accuracy for r in reference], abs=0.005)
        assert np.array_equal(losses(records), losses(per_rank[0]))   # the replicas stay identical
        assert all(r.allreduce_s > 0 for r in records)


@pytest.mark.parametrize("relative,tolerance", [(1e-6, 1e-4), (1e-3, 1e-2)])
def test_noisy_allreduce_still_tracks_the_reference(reference, relative, tolerance):
    """Relative noise on every sum (like quantisation error), the same for all
    workers: 1e-6 moves the losses by ~1e-6 relative, 1e-3 by ~1e-3."""
    rng = np.random.default_rng(7)

    def noise(total: np.ndarray) -> np.ndarray:
        return (total * (1 + relative * rng.standard_normal(total.shape))).astype(np.float32)

    per_rank = run_threads(4, transform=noise)
    records = per_rank[0]
    assert all(np.array_equal(losses(r), losses(records)) for r in per_rank)   # one result for all
    assert not np.array_equal(losses(records), losses(run_threads(4)[0]))      # the noise did act
    np.testing.assert_allclose(losses(records), losses(reference), rtol=tolerance)
    assert abs(records[-1].test_accuracy - reference[-1].test_accuracy) <= 0.01


def test_uneven_shards_give_the_same_training():
    """3 workers split batches of 64 into 22/21/21 rows; the sum is the same."""
    ref = reference_run(epochs=3)
    records = run_threads(3, epochs=3)[0]
    np.testing.assert_allclose(losses(records), losses(ref), rtol=1e-4)


def test_a_wrong_allreduce_and_bad_arguments_are_reported():
    with pytest.raises(ValueError, match="allreduce: returned shape"):
        train(0, 1, lambda g: g[:10], epochs=1)
    with pytest.raises(ValueError, match="rank"):
        train(4, 4, lambda g: g)
    with pytest.raises(ValueError, match="n_workers"):
        train(0, 0, lambda g: g)
    with pytest.raises(ValueError, match="batch_size"):
        train(0, 1, lambda g: g, batch_size=0)
    with pytest.raises(ValueError, match="lr"):
        train(0, 1, lambda g: g, lr=0)


def test_mismatched_vectors_break_the_barrier_instead_of_hanging():
    """The worker that sums sees the shape error; the other is released with
    BrokenBarrierError at once (not after the barrier's timeout)."""
    reducer = ThreadAllReduce(2, timeout_s=30)
    outcome: list[BaseException | None] = [None, None]

    def worker(rank: int) -> None:
        try:
            reducer.for_rank(rank)(np.ones(3 + rank, dtype=np.float32))
        except BaseException as exc:   # noqa: BLE001 - inspected below
            outcome[rank] = exc

    threads = [threading.Thread(target=worker, args=(r,)) for r in range(2)]
    start = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join(5)
    assert time.monotonic() - start < 5
    kinds = sorted(type(e).__name__ for e in outcome)
    assert kinds == ["BrokenBarrierError", "ValueError"]
    assert "different shapes" in str(next(e for e in outcome if isinstance(e, ValueError)))


def test_records_csv_round_trip(tmp_path, reference):
    path = write_records_csv(reference[:3], tmp_path / "sub" / "ref.csv")
    rows = list(csv.DictReader(path.open()))
    assert list(rows[0]) == ["epoch", "train_loss", "train_accuracy", "test_loss", "test_accuracy", "epoch_s",
                             "allreduce_s", "wall_s"]
    assert [int(r["epoch"]) for r in rows] == [1, 2, 3]
    assert float(rows[2]["test_accuracy"]) == reference[2].test_accuracy


def test_cli_writes_csv(tmp_path, capsys):
    assert main(["--workers", "2", "--epochs", "2", "--out", str(tmp_path / "t2")]) == 0
    rows = list(csv.DictReader((tmp_path / "t2.csv").open()))
    assert len(rows) == 2
    assert f"wrote {tmp_path / 't2.csv'}" in capsys.readouterr().out
