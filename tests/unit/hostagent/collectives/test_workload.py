"""Training-step workloads: their operations pair up between ranks, and
run_steps over the transport reports each step and collective."""
from __future__ import annotations

from collections import Counter

import pytest

from hostagent.collectives import schedule as sc
from hostagent.collectives.workload import (Collective, Compute, DataParallel, MixtureOfExperts, Pipeline, Recv, Send,
                                            run_steps)
from tests.unit.hostagent.collectives.test_communicator import Hub, group, run_all


@pytest.mark.parametrize("ranks", [2, 3, 5])
def test_pipeline_sends_and_receives_pair_up(ranks):
    w = Pipeline(microbatches=3)
    sends, recvs = Counter(), Counter()
    for r in range(ranks):
        for op in w.ops(r, ranks):
            if isinstance(op, Send):
                sends[(r, op.peer)] += 1
            elif isinstance(op, Recv):
                recvs[(op.peer, r)] += 1
    assert sends == recvs and sum(sends.values()) == 2 * 3 * (ranks - 1)


def test_data_parallel_buckets_cover_the_model():
    ops = DataParallel(model_bytes=100_000, buckets=3).ops(0, 4)
    assert sum(op.nbytes for op in ops if isinstance(op, Collective)) == 100_000
    assert sum(op.ms for op in ops if isinstance(op, Compute)) == pytest.approx(60.0)


@pytest.mark.parametrize("workload,collectives", [(DataParallel(model_bytes=16_000, buckets=2, forward_ms=2,
                                                                backward_ms=4), 2),
                                                   (MixtureOfExperts(tokens_bytes=8_000, layers=1, attention_ms=1,
                                                                     expert_ms=1), 2),
                                                   (Pipeline(activation_bytes=4_000, microbatches=2, stage_ms=1), 0)])
def test_run_steps_over_the_transport(workload, collectives):
    comms = group(4, Hub(loss=0.01, seed=5))
    out = run_all(comms, lambda c: run_steps(c, workload, steps=2))
    for results in out:
        assert [r.step for r in results] == [0, 1]
        for r in results:
            assert r.seconds >= r.compute_seconds > 0
            assert len(r.collectives) == collectives
            assert all(c.busbw > 0 and c.busbw == pytest.approx(c.algbw * sc.bus_factor(c.collective, 4))
                       for c in r.collectives)
