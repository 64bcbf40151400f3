"""Least-loaded channels (Alibaba HPN): pieces of one ACK's worth of packets,
each on the peer's connection with the fewest bytes outstanding. The choice
itself; results the same bytes as the fixed split's and the in-memory
schedule's for every collective and algorithm, over a hub that loses,
duplicates and reorders; a channel whose ACKs come late carries less than
under the fixed split; mismatches, silent and dead peers still named."""
from __future__ import annotations

import heapq
import re
import threading
import time

import numpy as np
import pytest

from hostagent.collectives import schedule as sc
from hostagent.collectives.communicator import (CHANNEL_CHOICES, CHANNEL_QP_BASE, FIXED, LEAST_LOADED,
                                                CollectiveError,
                                                Communicator, choose_channel, piece_cuts)
from hostagent.rdma.cc.dcqcn import Dcqcn
from hostagent.ecn.dcqcn import DcqcnParams
from hostagent.rdma.endpoint import Endpoint
from hostagent.rdma.transport import SEND, Ack, QpError, Requester, TransportParams
from wire.rdma import SYNDROME_ACK

from tests.unit.hostagent.collectives.test_communicator import Hub, all_reduce_errors, group, run_all
from tests.unit.hostagent.collectives.test_schedule import expected


def test_the_choice_is_the_channel_with_the_fewest_bytes_outstanding():
    assert choose_channel([4096, 1024, 2048]) == 1
    assert choose_channel([0, 0, 0]) == 0                  # equals: the lowest-numbered
    assert choose_channel([3000, 500, 500]) == 1
    assert choose_channel([None, 9000, 100]) == 2
    assert choose_channel([None, 9000, None]) == 1         # a failed connection is never chosen
    assert choose_channel([None, None]) is None
    assert CHANNEL_CHOICES == (FIXED, LEAST_LOADED)


def test_the_requester_counts_bytes_posted_and_not_acknowledged():
    """What the choice reads (Connection.outstanding_bytes): bytes posted,
    queued or in flight, until an ACK covers them; none once failed."""
    req = Requester(TransportParams(mtu_bytes=100), Dcqcn(DcqcnParams(line_rate_pps=1e6)), peer="10.0.2.1", qp=7)
    req.post(250, 0.0, kind=SEND)
    req.post(40, 0.0, kind=SEND)
    assert req.unacked_bytes == 290                 # nothing sent yet: queued bytes count
    sent, now = [], 0.0
    while len(sent) < 4:
        now += 0.001
        pkt = req.next_packet(now)
        if pkt is not None:
            sent.append(pkt)
    assert req.unacked_bytes == 290
    req.on_ack(Ack(sent[1].psn, SYNDROME_ACK, 0), now)          # the first two packets: 200 bytes
    assert req.unacked_bytes == 90
    req.on_ack(Ack(sent[3].psn, SYNDROME_ACK, 2), now)
    assert req.unacked_bytes == 0 and req.done
    req.post(300, now, kind=SEND)
    req.fail(QpError("10.0.2.1", 7, True, "retry count exceeded", "test"), now)
    assert req.unacked_bytes == 0


def test_pieces_cover_a_transfer_once():
    assert piece_cuts(0, 10) == []
    assert piece_cuts(25, 10) == [(0, 10), (10, 10), (20, 5)]
    for count in (1, 252, 253, 254, 5000):
        cuts = piece_cuts(count, 253)
        assert sum(n for _, n in cuts) == count and all(o == i * 253 for i, (o, _) in enumerate(cuts))


@pytest.mark.parametrize("collective,algorithm", sorted(sc.ALGORITHMS))
def test_pieces_of_one_step_name_their_transfer(collective, algorithm):
    """The receiver files a piece by (peer, offset): no step of any schedule
    has two transfers between the same ranks whose ranges overlap."""
    for n in range(1, 17):
        for elements in (n, 7 * n, 1000 * n):
            for step in sc.schedule(collective, algorithm, n, elements).steps:
                pairs: dict[tuple[int, int], list[sc.Transfer]] = {}
                for t in step:
                    pairs.setdefault((t.src, t.dst), []).append(t)
                for ts in pairs.values():
                    spans = sorted((t.dst_start, t.dst_start + t.count) for t in ts)
                    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:])), (collective, algorithm, n, ts)


@pytest.mark.parametrize("collective,algorithm", sorted(sc.ALGORITHMS))
@pytest.mark.parametrize("n", [2, 5])
def test_least_loaded_gives_the_fixed_splits_bytes_under_loss(collective, algorithm, n):
    """Float32 (the order of additions shows in the bytes) over a hub that
    loses 3%, duplicates 2% and reorders: least-loaded's results are the
    fixed split's bytes and the in-memory schedule's, close to numpy's."""
    elements = 700 * n                     # several pieces (253 float32 each at the hub's 256-byte MTU) a transfer
    rng = np.random.default_rng([n, len(collective)])
    xs = [rng.standard_normal(elements).astype(np.float32) for _ in range(n)]
    options = {"root": n - 1} if collective == sc.BROADCAST else {}
    reference = sc.run_in_memory(sc.schedule(collective, algorithm, n, elements, **options), xs)
    out = {}
    for choice in CHANNEL_CHOICES:
        comms = group(n, Hub(loss=0.03, dup=0.02, jitter=0.002, seed=n), channels=3, channel_choice=choice)
        out[choice] = run_all(comms, lambda c: [c.run(collective, algorithm, xs[c.rank], **options)
                                                for _ in range(2)])
    for r in range(n):
        want = expected(collective, xs, **options)[r]
        for got in out[LEAST_LOADED][r]:
            assert got.tobytes() == reference[r].tobytes() == out[FIXED][r][0].tobytes()
            assert np.allclose(got, want, atol=1e-4)


def test_point_to_point_and_integers_over_least_loaded_channels():
    comms = group(3, Hub(loss=0.02, seed=9), channels=2, channel_choice=LEAST_LOADED)

    def work(c: Communicator):
        x = np.arange(3000, dtype=np.int64) * (c.rank + 1)
        out = [c.all_reduce(x, sc.TREE), c.all_to_all(x), c.all_gather(x[:7])]
        if c.rank == 0:
            for k in range(3):
                c.send(np.full(500 + k, k, dtype=np.float32), 2)
        if c.rank == 2:
            out.append([c.recv(0, 500 + k, np.float32) for k in range(3)])
        out.append(c.all_reduce(x[:5]))
        return out
    out = run_all(comms, work)
    xs = [np.arange(3000, dtype=np.int64) * (q + 1) for q in range(3)]
    for r in range(3):
        assert np.array_equal(out[r][0], expected(sc.ALL_REDUCE, xs)[r])
        assert np.array_equal(out[r][1], expected(sc.ALL_TO_ALL, xs)[r])
        assert np.array_equal(out[r][2], expected(sc.ALL_GATHER, [x[:7] for x in xs])[r])
        assert np.array_equal(out[r][-1], expected(sc.ALL_REDUCE, [x[:5] for x in xs])[r])
    assert [len(x) for x in out[2][3]] == [500, 501, 502] and all((x == k).all() for k, x in enumerate(out[2][3]))
    for c in comms:
        stats = c.transport_stats()
        assert stats["channel_choice"] == LEAST_LOADED and all(b > 0 for b in stats["channel_bytes"])


class SlowChannelHub(Hub):
    """A clean hub on which every frame from UDP source port `slow_sport`
    (a channel's ACKs: the responder answers queue pair q from 0xC000 | q)
    arrives `delay_s` late."""

    def __init__(self, slow_sport: int, delay_s: float):
        super().__init__()
        self.slow_sport, self.delay_s = slow_sport, delay_s

    def send(self, frame: bytes) -> None:
        if int.from_bytes(frame[34:36], "big") != self.slow_sport:
            super().send(frame)
            return
        dst = ".".join(str(b) for b in frame[30:34])
        with self.cv:
            self.frames += 1
            heapq.heappush(self.queues[dst], (time.monotonic() + self.delay_s, next(self.seq), frame))
            self.cv.notify_all()


def test_a_channel_acknowledging_late_carries_less_under_least_loaded():
    """Channel 1's ACKs 15 ms late (a congested path's queue): the fixed
    split still gives it half of every transfer; least-loaded gives it a
    small share, and the sums are unchanged."""
    n, elements = 2, 40_000                    # 80 KB a direction a step: 80 pieces
    xs = [np.arange(elements, dtype=np.float32) * (r + 1) for r in range(n)]
    share = {}
    for choice in CHANNEL_CHOICES:
        hub = SlowChannelHub(0xC000 | (CHANNEL_QP_BASE + 1), 0.015)
        comms = group(n, hub, channels=2, channel_choice=choice)
        out = run_all(comms, lambda c: [c.all_reduce(xs[c.rank]) for _ in range(3)])
        for calls in out:
            assert all(np.array_equal(got, xs[0] * 3) for got in calls)
        sent = [c.transport_stats()["channel_bytes"] for c in comms]
        share[choice] = sum(s[1] for s in sent) / sum(sum(s) for s in sent)
    assert 0.45 < share[FIXED] < 0.55, share
    assert share[LEAST_LOADED] < 0.3, share


def test_a_mismatched_length_is_named_at_once():
    comms = group(2, Hub(), timeout_s=5.0, channel_choice=LEAST_LOADED)
    start = time.monotonic()
    with pytest.raises(CollectiveError, match=r"all-reduce call 0 step 0: rank \d channel 0 sent call 0 step 0 "
                                              r"offset \d+, \d+ bytes; expected offset .* \(do all ranks run the "
                                              r"same collectives with the same lengths, dtype and channel choice"):
        run_all(comms, lambda c: c.all_reduce(np.zeros(10 if c.rank == 0 else 12, dtype=np.int32)))
    assert time.monotonic() - start < 2.0, "not after the timeout"
    comms = group(2, Hub(), timeout_s=2.0, channel_choice=LEAST_LOADED)
    with pytest.raises(CollectiveError, match="expected a send of 10 float32"):
        run_all(comms, lambda c: c.send(np.zeros(12, np.float32), 1) if c.rank == 0 else c.recv(0, 10, np.float32))


def test_a_piece_of_another_call_at_the_head_of_every_channel_is_a_mismatch():
    """Rank 0 sends before its all-reduce, rank 1 only all-reduces: every
    channel from rank 0 offers rank 1 the send's piece first, which no step
    of its all-reduce can take. Named at once, not after the timeout."""
    comms = group(2, Hub(), timeout_s=10.0, channel_choice=LEAST_LOADED)
    errors: dict[int, str] = {}

    def one(c: Communicator) -> None:
        try:
            if c.rank == 0:
                c.send(np.ones(4, np.int32), 1)
            c.all_reduce(np.ones(10, np.int32))
        except CollectiveError as e:
            errors[c.rank] = str(e)
    start = time.monotonic()
    threads = [threading.Thread(target=one, args=(c,)) for c in comms]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert time.monotonic() - start < 5.0
    assert re.search(r"all-reduce call 0 step 0: rank 0 channel 0 sent call 0 step 4294967295 offset 0, 16 bytes",
                     errors[1]), errors
    assert "gave up" in errors[0], errors
    for c in comms:
        c.close(timeout_s=0)


def test_a_silent_peer_times_out_naming_it():
    comms = group(2, Hub(loss=1.0), timeout_s=0.5, channels=2, channel_choice=LEAST_LOADED)
    with pytest.raises(CollectiveError, match=r"all-reduce \(ring\) step 0: nothing from rank 1 \(10.0.2.1\) on "
                                              r"any of its 2 channels within 0.5 s"):
        comms[0].all_reduce(np.zeros(8, dtype=np.int32))
    for c in comms:
        c.close(timeout_s=0)


def test_a_dead_rank_fails_every_rank_as_soon_as_one_gives_up():
    """As with the fixed split (test_communicator.py): rank 2 of 4 dead, rank
    1's connection to it exceeds its retry count, its abort ends ranks 3
    and 0 at once; and a later send to the dead rank fails at once."""
    ips = [f"10.0.{r + 1}.1" for r in range(4)]
    comms = group(4, Hub(dead={ips[2]}), timeout_s=30.0, channels=2, channel_choice=LEAST_LOADED)
    errors, seconds = all_reduce_errors([c for c in comms if c.rank != 2], 2000)
    assert seconds < 3.0, "within the retry limit, not the 30 s timeout"
    assert "the connection with rank 2 (10.0.3.1) failed" in errors[1] and "retry count exceeded" in errors[1]
    for rank in (0, 3):
        assert re.search(r"rank 1 \(10.0.2.1\) gave up: rank 1: all-reduce \(ring\) step \d+: the connection with "
                         r"rank 2 \(10.0.3.1\) failed: .*retry count exceeded", errors[rank]), errors
    with pytest.raises(CollectiveError, match=r"the connection with rank 2 \(10.0.3.1\) failed: .* retry count"):
        comms[1].send(np.zeros(4, dtype=np.int32), 2)
    for c in comms:
        c.close(timeout_s=0)


def test_an_unknown_choice_is_refused():
    hub = Hub()
    ep = Endpoint(hub.link("10.0.1.1"), "10.0.1.1", "02:00:00:00:00:01", "02:00:00:00:00:fe", TransportParams(),
                  lambda: Dcqcn(DcqcnParams()))
    with pytest.raises(ValueError, match="channel_choice must be one of fixed, least-loaded, got 'random'"):
        Communicator(ep, ["10.0.1.1", "10.0.2.1"], 0, channel_choice="random")


def test_the_command_takes_the_choice():
    from hostagent.collectives.__main__ import parser
    host = ["--rank", "0", "--addresses", "10.0.1.1,10.0.2.1", "--iface", "lo", "--src-ip", "10.0.1.1",
            "--src-mac", "02:00:00:00:00:01", "--gw-mac", "02:00:00:00:00:fe"]
    for command in ("sweep", "step"):
        assert parser().parse_args([command, *host]).channel_choice == FIXED
        assert parser().parse_args([command, *host, "--channel-choice", LEAST_LOADED]).channel_choice == LEAST_LOADED
