"""Collectives over the RC transport: n ranks, each an Endpoint in its own
thread, joined by a hub that loses, duplicates and delays frames. Every
result equals numpy's, and floats equal the in-memory schedule's bytes."""
from __future__ import annotations

import heapq
import itertools
import random
import re
import threading
import time

import numpy as np
import pytest

from hostagent.collectives import schedule as sc
from hostagent.aggregation.allreduce import AggregationWorker
from hostagent.collectives.communicator import IDLE_WAIT_S, IN_NETWORK, PROGRESS_WAIT_S, CollectiveError, \
    Communicator, nccl_tests_table, progress_wait
from hostagent.rdma.cc.dcqcn import Dcqcn
from hostagent.ecn.dcqcn import DcqcnParams
from hostagent.rdma.endpoint import Endpoint
from hostagent.rdma.transport import GO_BACK_N, SELECTIVE_REPEAT, TransportParams
from wire.lossless import encode_pfc

from tests.unit.hostagent.collectives.test_schedule import expected


class Hub:
    """Frames between hosts by destination IP, each lost with probability
    `loss`, duplicated with `dup`, delayed by up to `jitter` seconds (so
    reordered)."""

    def __init__(self, loss=0.0, dup=0.0, jitter=0.0, seed=1, dead=()):
        self.loss, self.dup, self.jitter = loss, dup, jitter
        self.dead = set(dead)               # hosts whose frames, to or from them, are all lost
        self.rng = random.Random(seed)
        self.queues: dict[str, list] = {}
        self.cv = threading.Condition()
        self.seq = itertools.count()
        self.frames = self.lost = 0

    def link(self, ip: str) -> "HubLink":
        self.queues[ip] = []
        return HubLink(self, ip)

    def send(self, frame: bytes) -> None:
        src, dst = (".".join(str(b) for b in frame[i:i + 4]) for i in (26, 30))
        with self.cv:
            self.frames += 1
            if self.rng.random() < self.loss or {src, dst} & self.dead:
                self.lost += 1
                return
            copies = 2 if self.rng.random() < self.dup else 1
            for _ in range(copies):
                at = time.monotonic() + self.rng.random() * self.jitter
                heapq.heappush(self.queues[dst], (at, next(self.seq), frame))
            self.cv.notify_all()

    def wait(self, ip: str, timeout: float) -> None:
        with self.cv:
            q = self.queues[ip]
            now = time.monotonic()
            if not q or q[0][0] > now:
                self.cv.wait(min(timeout, q[0][0] - now) if q else timeout)

    def recv(self, ip: str, timeout: float):
        deadline = time.monotonic() + timeout
        with self.cv:
            while True:
                q = self.queues[ip]
                now = time.monotonic()
                if q and q[0][0] <= now:
                    return heapq.heappop(q)[2]
                if now >= deadline:
                    return None
                self.cv.wait(min(deadline - now, q[0][0] - now) if q else deadline - now)


class HubLink:
    def __init__(self, hub: Hub, ip: str):
        self.hub, self.ip = hub, ip

    def send(self, frame: bytes) -> None:
        self.hub.send(frame)

    def recv(self, timeout: float):
        return self.hub.recv(self.ip, timeout)

    def wait(self, timeout: float) -> None:
        self.hub.wait(self.ip, timeout)

    def wake(self) -> None:
        with self.hub.cv:
            self.hub.cv.notify_all()

    def age(self) -> None:      # (no kernel timestamps on the hub)
        return None


def group(n: int, hub: Hub, mode=GO_BACK_N, channels=1, timeout_s=30.0,
          line_rate_pps=200_000.0, channel_choice="fixed", tclass: int | None = None) -> list[Communicator]:
    ips = [f"10.0.{r + 1}.1" for r in range(n)]
    params = TransportParams(mode=mode, mtu_bytes=256, rto_s=0.02, rto_max_s=0.1, ack_delay_s=0.001)
    comms = []
    for r, ip in enumerate(ips):
        ep = Endpoint(hub.link(ip), ip, f"02:00:00:00:00:{r + 1:02x}", "02:00:00:00:00:fe", params,
                      lambda: Dcqcn(DcqcnParams(line_rate_pps=line_rate_pps)), tclass=tclass, link_mbps=100.0)
        comms.append(Communicator(ep, ips, r, channels=channels, timeout_s=timeout_s,
                                  channel_choice=channel_choice))
    return comms


def run_all(comms, work, join_s: float = 120.0):
    """work(comm) in one thread per rank; their results in rank order."""
    results: list = [None] * len(comms)
    errors: list = []

    def one(r):
        try:
            results[r] = work(comms[r])
            comms[r].close()
        except Exception as e:          # re-raised below, in the test's thread
            errors.append(e)
    threads = [threading.Thread(target=one, args=(r,)) for r in range(len(comms))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(join_s)
    if errors:
        raise errors[0]
    return results


@pytest.mark.parametrize("collective,algorithm", sorted(sc.ALGORITHMS))
@pytest.mark.parametrize("n", [2, 3, 5])
def test_each_collective_equals_numpy_over_a_clean_hub(collective, algorithm, n):
    elements = 60 * n
    xs = [np.random.default_rng([4, r]).integers(-99, 99, elements).astype(np.int32) for r in range(n)]
    out = run_all(group(n, Hub()), lambda c: c.run(collective, algorithm, xs[c.rank]))
    for got, want in zip(out, expected(collective, xs)):
        assert np.array_equal(got, want)


@pytest.mark.parametrize("mode", [GO_BACK_N, SELECTIVE_REPEAT])
@pytest.mark.parametrize("algorithm", sc.algorithms_of(sc.ALL_REDUCE))
def test_all_reduce_with_loss_duplication_and_reordering(mode, algorithm):
    n, elements = 6, 5003                                  # not a power of two; 20 packets a rank's part
    hub = Hub(loss=0.03, dup=0.02, jitter=0.002, seed=7)
    rng = np.random.default_rng(5)
    xs = [rng.standard_normal(elements).astype(np.float32) for _ in range(n)]
    comms = group(n, hub, mode=mode, channels=2)
    out = run_all(comms, lambda c: [c.all_reduce(xs[c.rank], algorithm) for _ in range(2)])
    reference = sc.run_in_memory(sc.schedule(sc.ALL_REDUCE, algorithm, n, elements), xs)[0]
    for calls in out:
        for got in calls:                                   # the same bytes as the in-memory schedule, twice
            assert got.tobytes() == reference.tobytes()
    assert hub.lost > 0
    resent = sum(c.requester.stats.retransmitted for comm in comms for c in comm.endpoint.connections.values())
    assert resent > 0


def test_a_paused_rank_holds_the_all_reduce_for_the_pause_and_counts_it():
    """Rank 1's uplink paused in its class (3) for 100 ms, as its switch
    would, just before a ring all-reduce: the call lasts at least the pause,
    the result is numpy's, and rank 1's transport counts the pause."""
    n, pause_quanta = 3, 19532                             # 19532 x 5.12 us at 100 Mbit/s: 100.0 ms
    hub = Hub()
    comms = group(n, hub, tclass=3)
    xs = [np.arange(300, dtype=np.int32) * (r + 1) for r in range(n)]
    with hub.cv:                                           # a PFC frame from rank 1's switch, on its wire now
        heapq.heappush(hub.queues["10.0.2.1"], (time.monotonic(), next(hub.seq),
                                               encode_pfc("02:00:00:00:00:fe", {3: pause_quanta})))
        hub.cv.notify_all()
    deadline = time.monotonic() + 1.0
    while not comms[1].endpoint.pfc.frames and time.monotonic() < deadline:
        time.sleep(0.001)
    out = run_all(comms, lambda c: c.all_reduce(xs[c.rank]))
    for got, want in zip(out, expected(sc.ALL_REDUCE, xs)):
        assert np.array_equal(got, want)
    assert min(c.records[-1].seconds for c in comms) >= 0.06, "nobody finished while rank 1 could not send"
    stats = [c.transport_stats() for c in comms]
    assert (stats[1]["tclass"], stats[1]["pauses_received"], stats[1]["resumes_received"]) == (3, 1, 0)
    assert stats[1]["paused_s"] == pytest.approx(0.100, abs=1e-4)
    assert stats[0]["pauses_received"] == stats[2]["pauses_received"] == 0
    assert all("not addressed to this host" not in s["ignored"] for s in stats)


def test_a_sequence_of_collectives_and_the_nccl_tests_table():
    n = 4
    comms = group(n, Hub(loss=0.01, seed=3))

    def work(c: Communicator):
        out = []
        for elements in (4, 400, 4000):
            x = np.arange(elements, dtype=np.int64) * (c.rank + 1)
            out.append(c.all_reduce(x, sc.HALVING_DOUBLING))
            out.append(c.all_gather(x))
            out.append(c.all_to_all(x))
        out.append(c.broadcast(np.full(10, c.rank, dtype=np.int64), root=2))
        return out
    out = run_all(comms, work)
    for r in range(n):
        for i, elements in enumerate((4, 400, 4000)):
            xs = [np.arange(elements, dtype=np.int64) * (q + 1) for q in range(n)]
            assert np.array_equal(out[r][3 * i], expected(sc.ALL_REDUCE, xs)[r])
            assert np.array_equal(out[r][3 * i + 1], expected(sc.ALL_GATHER, xs)[r])
            assert np.array_equal(out[r][3 * i + 2], expected(sc.ALL_TO_ALL, xs)[r])
        assert np.array_equal(out[r][-1], np.full(10, 2))
    table = nccl_tests_table(comms[0].records[:1])
    assert "busbw" in table.splitlines()[0] and " 32 " in table.splitlines()[1]    # 4 int64 = 32 bytes
    assert len(comms[0].records) == 10


def test_mismatched_calls_are_named():
    comms = group(2, Hub(), timeout_s=2.0)
    with pytest.raises(CollectiveError, match=r"expected offset .* \(do all ranks run the same collectives"):
        run_all(comms, lambda c: c.all_reduce(np.zeros(10 if c.rank == 0 else 12, dtype=np.int32)))


def test_a_silent_peer_times_out_naming_it():
    comms = group(2, Hub(loss=1.0), timeout_s=0.5)
    with pytest.raises(CollectiveError, match=r"nothing from rank 1 \(10.0.2.1\) channel 0 within 0.5 s"):
        comms[0].all_reduce(np.zeros(8, dtype=np.int32))
    for c in comms:
        c.close(timeout_s=0)


def test_bad_groups_are_refused():
    hub = Hub()
    params = TransportParams()
    ep = Endpoint(hub.link("10.0.1.1"), "10.0.1.1", "02:00:00:00:00:01", "02:00:00:00:00:fe", params,
                  lambda: Dcqcn(DcqcnParams()))
    with pytest.raises(ValueError, match="addresses must be distinct"):
        Communicator(ep, ["10.0.1.1", "10.0.1.1"], 0)
    with pytest.raises(ValueError, match="rank 1's address is 10.0.2.1, but the endpoint's is 10.0.1.1"):
        Communicator(ep, ["10.0.1.1", "10.0.2.1"], 1)
    with pytest.raises(ValueError, match="channels must be within 1..64"):
        Communicator(ep, ["10.0.1.1", "10.0.2.1"], 0, channels=0)


def test_in_network_needs_the_aggregation_job_and_says_what_it_carries():
    """The switch's all-reduce (tests/e2e/test_collectives_live.py
    runs it on BMv2): refused, naming why, before anything is sent."""
    hub = Hub()
    comms = group(2, hub)
    try:
        with pytest.raises(ValueError, match="in-network all-reduce needs the switch's aggregation job"):
            comms[0].all_reduce(np.ones(8, np.float32), IN_NETWORK)
        with pytest.raises(ValueError, match="in-network is an all-reduce algorithm, not one of all-gather"):
            comms[0].all_gather(np.ones(8, np.float32), IN_NETWORK)
        assert comms[0].calls == 0 and hub.frames == 0
    finally:
        for c in comms:
            c.close(timeout_s=0)
    ep = Endpoint(hub.link("10.0.9.1"), "10.0.9.1", "02:00:00:00:00:09", "02:00:00:00:00:fe", TransportParams(),
                  lambda: Dcqcn(DcqcnParams()))
    with AggregationWorker(1, "10.0.9.9", 3, bind_ip="127.0.0.1") as worker:
        with pytest.raises(ValueError, match="the aggregation job has 3 workers, the communicator 2 ranks"):
            Communicator(ep, ["10.0.9.1", "10.0.9.2"], 0, aggregation=worker)
        with Communicator(ep, ["10.0.9.1", "10.0.9.2", "10.0.9.3"], 0, aggregation=worker) as comm:
            with pytest.raises(ValueError, match="in-network all-reduce carries float32 or int32, got float64"):
                comm.all_reduce(np.ones(8), IN_NETWORK)
            assert worker.stats.packets_sent == 0


def test_point_to_point_pairs_in_order_and_names_a_mismatch():
    comms = group(3, Hub(loss=0.02, seed=9))

    def work(c: Communicator):
        if c.rank == 0:
            for k in range(3):
                c.send(np.full(500 + k, k, dtype=np.float32), 2)
            return None
        if c.rank == 2:
            return [c.recv(0, 500 + k, np.float32) for k in range(3)]
        return None
    out = run_all(comms, work)
    assert [len(x) for x in out[2]] == [500, 501, 502] and all((x == k).all() for k, x in enumerate(out[2]))
    comms = group(2, Hub(), timeout_s=2.0)
    with pytest.raises(CollectiveError, match="expected a send of 10 float32"):
        run_all(comms, lambda c: c.send(np.zeros(12, np.float32), 1) if c.rank == 0 else c.recv(0, 10, np.float32))
    with pytest.raises(ValueError, match="peer must be another rank"):
        comms[0].send(np.zeros(1), 0)


def test_two_jobs_share_hosts_on_their_own_queue_pairs():
    """Two communicators per host (two jobs), each endpoint answering only
    its job's queue pairs, on one hub: both jobs get numpy's sums."""
    hub = Hub(loss=0.01, seed=11)
    ips = ["10.0.1.1", "10.0.2.1"]
    for ip in ips:
        hub.link(ip)
    params = TransportParams(mtu_bytes=256, rto_s=0.02, rto_max_s=0.1, ack_delay_s=0.001)
    jobs = []
    for job in range(2):
        comms = []
        for r, ip in enumerate(ips):
            ep = Endpoint(JobLink(hub, ip, job), ip, f"02:00:00:00:0{job}:{r + 1:02x}", "02:00:00:00:00:fe",
                          params, lambda: Dcqcn(DcqcnParams(line_rate_pps=200_000.0)),
                          accept_qps=range(0x100 + 0x40 * job, 0x140 + 0x40 * job))
            comms.append(Communicator(ep, ips, r, qp_base=0x100 + 0x40 * job))
        jobs.append(comms)
    results = [None, None]

    def job_run(j):
        results[j] = run_all(jobs[j], lambda c: c.all_reduce(np.arange(300, dtype=np.int64) * (c.rank + 1 + 10 * j)))
    threads = [threading.Thread(target=job_run, args=(j,)) for j in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    for j in range(2):
        want = np.arange(300, dtype=np.int64) * (1 + 2 + 20 * j)
        assert all(np.array_equal(x, want) for x in results[j])


class JobLink:
    """One job's view of a host's link on the hub: every frame to the host
    reaches every job's endpoint (as every raw socket on an interface sees
    every frame); each keeps what is its own."""
    queues: dict = {}

    def __init__(self, hub: Hub, ip: str, job: int):
        self.hub, self.ip, self.job = hub, ip, job
        JobLink.queues.setdefault((id(hub), ip), {})[job] = []

    def send(self, frame: bytes) -> None:
        self.hub.send(frame)

    def _pull(self, timeout: float) -> None:
        frame = self.hub.recv(self.ip, timeout)
        if frame is not None:
            for q in JobLink.queues[(id(self.hub), self.ip)].values():
                q.append(frame)

    def recv(self, timeout: float):
        q = JobLink.queues[(id(self.hub), self.ip)][self.job]
        if not q:
            self._pull(timeout)
        return q.pop(0) if q else None

    def wait(self, timeout: float) -> None:
        if not JobLink.queues[(id(self.hub), self.ip)][self.job]:
            self.hub.wait(self.ip, timeout)

    def age(self) -> None:
        return None


@pytest.mark.parametrize("extra, message", [
    (["--algorithm", "in-network"], "--algorithm in-network needs --aggregation-job and --aggregation-server"),
    (["--algorithm", "in-network", "--aggregation-job", "1", "--aggregation-server", "10.0.2.2"],
     "--algorithm in-network needs --start-at"),
    (["--algorithm", "in-network", "--aggregation-job", "1", "--aggregation-server", "10.0.2.2", "--start-at", "5",
      "--dtype", "int64"], "--algorithm in-network carries float32 or int32, got --dtype int64"),
    (["--algorithm", "in-network", "--collective", "broadcast"], "in-network is an all-reduce algorithm"),
])
def test_the_command_refuses_an_in_network_run_it_cannot_do(extra, message, capsys):
    from hostagent.collectives.__main__ import main
    host = ["--rank", "0", "--addresses", "10.0.1.1,10.0.2.1", "--iface", "lo", "--src-ip", "10.0.1.1",
            "--src-mac", "02:00:00:00:00:01", "--gw-mac", "02:00:00:00:00:fe"]
    assert main(["sweep", *host, *extra]) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("extra, message", [
    (["--tclass", "8"], "traffic class must be within 0..7, got 8"),
    (["--tclass", "3", "--link-mbps", "0"], "the link's rate must be > 0 Mbit/s, got 0.0"),
])
def test_the_command_refuses_a_class_it_cannot_honour(extra, message, capsys):
    from hostagent.collectives.__main__ import main
    host = ["--rank", "0", "--addresses", "10.0.1.1,10.0.2.1", "--iface", "lo", "--src-ip", "10.0.1.1",
            "--src-mac", "02:00:00:00:00:01", "--gw-mac", "02:00:00:00:00:fe"]
    assert main(["sweep", *host, *extra]) == 2
    assert message in capsys.readouterr().err


def test_a_dead_peer_is_named_as_soon_as_the_retry_limit_allows():
    """Rank 1 never answers: rank 0's connection to it exceeds its retry
    count (0.02 + 0.04 + 0.08 + 5 x 0.1 s in group()'s transport) long
    before the 30 s timeout, and the collective fails naming rank 1."""
    comms = group(2, Hub(loss=1.0), timeout_s=30.0)
    start = time.monotonic()
    with pytest.raises(CollectiveError, match=r"all-reduce \(ring\) step 0: the connection with rank 1 \(10.0.2.1\) "
                                              r"failed: queue pair 256 to 10.0.2.1: retry count exceeded"):
        comms[0].all_reduce(np.zeros(8, dtype=np.int32))
    assert 0.6 < time.monotonic() - start < 3.0
    with pytest.raises(CollectiveError, match=r"the connection with rank 1 \(10.0.2.1\) failed: .* retry count"):
        comms[0].send(np.zeros(4, dtype=np.int32), 1)         # a later post fails at once
    for c in comms:
        c.close(timeout_s=1.0)
    assert comms[0].endpoint.idle, "a failed connection has nothing left to do"


def all_reduce_errors(comms, elements: int) -> tuple[dict[int, str], float]:
    """An all-reduce of `elements` int32 zeros on each of `comms`, one thread
    a rank: ({rank: its CollectiveError's text}, seconds until all ended)."""
    errors: dict[int, str] = {}

    def one(c: Communicator) -> None:
        try:
            c.all_reduce(np.zeros(elements, dtype=np.int32))
        except CollectiveError as e:
            errors[c.rank] = str(e)
    start = time.monotonic()
    threads = [threading.Thread(target=one, args=(c,)) for c in comms]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return errors, time.monotonic() - start


def test_a_dead_rank_fails_every_rank_as_soon_as_one_gives_up():
    """Rank 2 of 4 is dead. In a ring all-reduce only rank 1 sends to it,
    so only rank 1's connection exceeds its retry count; ranks 3 and 0 wait
    on ranks that send nothing. Rank 1's abort reaches them and they fail
    at once, naming rank 1 and its cause, long before their 30 s timeout."""
    ips = [f"10.0.{r + 1}.1" for r in range(4)]
    comms = group(4, Hub(dead={ips[2]}), timeout_s=30.0)
    errors, seconds = all_reduce_errors([c for c in comms if c.rank != 2], 64)
    assert seconds < 3.0, "within the retry limit (about 0.64 s here), not the 30 s timeout"
    assert "the connection with rank 2 (10.0.3.1) failed" in errors[1] and "retry count exceeded" in errors[1]
    for rank in (0, 3):
        assert re.search(r"rank 1 \(10.0.2.1\) gave up: rank 1: all-reduce \(ring\) step \d+: the connection with "
                         r"rank 2 \(10.0.3.1\) failed: .*retry count exceeded", errors[rank]), errors
    for c in comms:
        c.close(timeout_s=0)


def test_ranks_in_different_modes_fail_at_both_ends_naming_both_modes():
    hub = Hub()
    ips = ["10.0.1.1", "10.0.2.1"]
    comms = []
    for r, (ip, mode) in enumerate(zip(ips, (SELECTIVE_REPEAT, GO_BACK_N))):
        params = TransportParams(mode=mode, mtu_bytes=256, rto_s=0.02, rto_max_s=0.1, ack_delay_s=0.001)
        ep = Endpoint(hub.link(ip), ip, f"02:00:00:00:00:{r + 1:02x}", "02:00:00:00:00:fe", params,
                      lambda: Dcqcn(DcqcnParams(line_rate_pps=200_000.0)))
        comms.append(Communicator(ep, ips, r, timeout_s=30.0))
    errors, seconds = all_reduce_errors(comms, 100)
    assert seconds < 3.0, "at once, not after the timeout"
    # each end refuses the other's connection and is refused on its own: both name both modes
    for rank, peer in ((0, 1), (1, 0)):
        assert errors.get(rank) is not None and f"the connection with rank {peer} ({ips[peer]}) failed" in errors[rank]
        assert "mismatched ends" in errors[rank] and "selective-repeat" in errors[rank] \
            and "go-back-n" in errors[rank], errors[rank]
    for c in comms:
        c.close(timeout_s=0)


# -- the progress thread's sleep ------------------------------------------------------

def test_the_progress_thread_sleeps_until_its_next_timer():
    assert progress_wait(None, 1.0, wakes=True) == IDLE_WAIT_S, "nothing due: until a frame or a post"
    assert progress_wait(1.003, 1.0, wakes=True) == pytest.approx(0.003), "a paced packet or a delayed ACK"
    assert progress_wait(9.0, 1.0, wakes=True) == IDLE_WAIT_S, "a far timeout: looked at again meanwhile"
    assert progress_wait(1.0, 1.0, wakes=True) == PROGRESS_WAIT_S, "due now, not known better (UET's senders)"
    assert progress_wait(None, 1.0, wakes=False) == PROGRESS_WAIT_S, "a link a post cannot wake: the fixed grain"


class CountingLink(HubLink):
    """A hub link that counts the progress thread's waits and wakes (or
    cannot be woken: `wakes` False)."""

    def __init__(self, hub: Hub, ip: str, wakes: bool = True):
        super().__init__(hub, ip)
        self.waits = self.wakes = 0
        if not wakes:
            self.wake = None            # type: ignore[assignment]

    def wait(self, timeout: float) -> None:
        self.waits += 1
        super().wait(timeout)

    def wake(self) -> None:            # type: ignore[override]
        self.wakes += 1
        super().wake()


@pytest.mark.parametrize("wakes", [True, False])
def test_an_idle_rank_sleeps_and_a_post_wakes_it(wakes):
    hub = Hub()
    ips = ["10.0.1.1", "10.0.2.1"]
    params = TransportParams(mtu_bytes=256, rto_s=0.02, rto_max_s=0.1, ack_delay_s=0.001)
    links = [CountingLink(hub, ip, wakes) for ip in ips]
    for ip in ips:
        hub.queues[ip] = []
    comms = [Communicator(Endpoint(link, ip, f"02:00:00:00:00:0{r + 1}", "02:00:00:00:00:fe", params,
                                   lambda: Dcqcn(DcqcnParams(line_rate_pps=200_000.0))), ips, r)
             for r, (ip, link) in enumerate(zip(ips, links))]
    time.sleep(0.3)                                  # idle: nothing posted, nothing arriving
    idle_waits = [link.waits for link in links]
    xs = [np.arange(500, dtype=np.int32) * (r + 1) for r in range(2)]
    out = run_all(comms, lambda c: c.all_reduce(xs[c.rank]))
    assert all(np.array_equal(got, xs[0] + xs[1]) for got in out)
    if wakes:
        assert max(idle_waits) <= 0.3 / IDLE_WAIT_S + 3, f"an idle rank woke {idle_waits} times in 0.3 s"
        assert all(link.wakes > 0 for link in links), "each post woke the progress thread"
    else:
        assert min(idle_waits) > 0.3 / IDLE_WAIT_S * 4, "without wake(): the fixed grain"
