"""Host side of in-network aggregation without a switch: quantisation and
its bound (hostagent/aggregation/allreduce.py), and the parameter server's software
aggregation (hostagent/aggregation/parameter_server.py) driven with packets on
loopback: fallback blocks summed in int64, the missing workers asked,
results kept for retransmissions, malformed or foreign packets ignored."""
import contextlib
import socket
import threading
import time
from typing import Callable, Iterator

import numpy as np
import pytest

from wire import aggregation as ah
from hostagent.aggregation import allreduce as ar
from hostagent.aggregation.parameter_server import ParameterServer


def test_headroom_keeps_n_quantised_values_within_int32():
    for n in (1, 2, 3, 4, 8, 17, 32):
        b = ar.headroom_bits(n)
        assert n * 2 ** b <= 2 ** 31 - 1, n


def test_block_exponents_bound_every_magnitude():
    rng = np.random.default_rng(0)
    blocks = rng.standard_normal((50, ah.DEFAULT_BLOCK_ELEMENTS)) * np.exp2(rng.integers(-30, 30, (50, 1)))
    e = ar.block_exponents(blocks)
    assert np.all(np.max(np.abs(blocks), axis=1) < np.exp2(e))
    assert np.all(np.max(np.abs(blocks), axis=1) >= np.exp2(e - 1))
    assert ar.block_exponents(np.zeros((1, ah.DEFAULT_BLOCK_ELEMENTS)))[0] == 0


def test_check_accepts_the_quantised_sum_and_rejects_a_wrong_one():
    inputs = [ar.worker_input(3, r, 1000, "float32") for r in range(4)]
    exact = np.sum(np.stack([x.astype(np.float64) for x in inputs]), axis=0)
    # what the switch would produce: quantise each worker with the agreed exponent, sum, dequantise
    padded = np.zeros((4, 4 * ah.DEFAULT_BLOCK_ELEMENTS))
    padded[:, :1000] = np.stack(inputs)
    blocks = padded.reshape(4, 4, ah.DEFAULT_BLOCK_ELEMENTS)
    agreed = np.max(np.stack([ar.block_exponents(b) for b in blocks]), axis=0)
    scale = np.exp2(ar.headroom_bits(4) - agreed)[:, None]
    q = np.rint(blocks * scale).astype(np.int64)
    assert np.abs(q).max() < 2 ** 31 and np.abs(q.sum(axis=0)).max() < 2 ** 31
    result = (q.sum(axis=0) / scale).reshape(-1)[:1000].astype(np.float32)
    ok, err, bound = ar.check(result, inputs)
    assert ok and 0 < err <= bound
    wrong = result.copy()
    wrong[7] += 1e-3 * max(1.0, abs(exact[7]))
    assert not ar.check(wrong, inputs)[0]
    ints = [ar.worker_input(3, r, 100, "int32") for r in range(3)]
    total = np.sum(np.stack(ints).astype(np.int64), axis=0)
    assert ar.check(total, ints)[0] and not ar.check(total + (np.arange(100) == 5), ints)[0]


def test_allreduce_refuses_bad_arrays():
    with ar.AggregationWorker(1, "127.0.0.1", 2, bind_ip="127.0.0.9") as w:
        with pytest.raises(ValueError, match="empty"):
            w.allreduce(np.array([], np.float32))
        with pytest.raises(ValueError, match="NaN or infinity"):
            w.allreduce(np.array([1.0, np.nan], np.float32))
        with pytest.raises(ValueError, match="fit int32"):
            w.allreduce(np.array([2 ** 40], np.int64))
    with pytest.raises(ValueError, match="n_workers"):
        ar.AggregationWorker(1, "127.0.0.1", 0)


@pytest.fixture
def server():
    workers = ["127.0.0.11", "127.0.0.12", "127.0.0.13"]
    ps = ParameterServer(3, workers, bind_ip="127.0.0.10")
    socks = []
    for ip in workers:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind((ip, ah.job_port(3)))
        s.settimeout(2)
        socks.append(s)
    yield ps, workers, socks
    ps.close()
    for s in socks:
        s.close()


def received(sock) -> list:
    out = []
    sock.settimeout(0.3)
    try:
        while True:
            out.append(ah.unpack(sock.recvfrom(4096)[0]))
    except socket.timeout:
        return out


@pytest.mark.parametrize("n", [64, 256])
def test_server_sums_a_collided_block_in_int64_after_asking_the_others(server, n):
    ps, workers, socks = server
    values = [np.full(n, 2 ** 31 - 1 - i, np.int64) for i in range(3)]
    ps.handle(ah.pack(ah.FLAG_COLLISION, 3, 77, values[0], exponent=130), workers[0])
    # the other two are asked for seq 77, the first is not
    for i, s in enumerate(socks):
        got = received(s)
        if i == 0:
            assert got == []
        else:
            assert [(g.flags, g.seq, g.elements.size) for g in got] == [(ah.FLAG_SERVER | ah.FLAG_FALLBACK, 77, n)]
    ps.handle(ah.pack(ah.FLAG_FALLBACK, 3, 77, values[1], exponent=140), workers[1])
    ps.handle(ah.pack(ah.FLAG_FALLBACK | ah.FLAG_RETRANSMIT, 3, 77, values[1], exponent=140), workers[1])
    ps.handle(ah.pack(ah.FLAG_FALLBACK, 3, 77, values[2], exponent=129), workers[2])
    parts = ah.wide_parts(n)             # int64: a block of 256 is two packets of 128
    for s in socks:
        result = received(s)
        assert [(r.flags, r.exponent, r.offset) for r in result] == [
            (ah.FLAG_SERVER | ah.FLAG_RESULT | ah.FLAG_WIDE, 140, o) for o, _ in parts]
        sums = np.concatenate([r.elements for r in result])
        assert sums.tolist() == [sum(int(v[0]) for v in values)] * n   # beyond int32
    assert ps.stats.blocks_completed == 1 and ps.stats.duplicates == 1
    # a worker that lost the result sends again: it gets it again
    ps.handle(ah.pack(ah.FLAG_FALLBACK | ah.FLAG_RETRANSMIT, 3, 77, values[2]), workers[2])
    assert [r.seq for r in received(socks[2])] == [77] * len(parts) and ps.stats.results_resent == 1
    # a contribution of another size than the block's is not summed
    ps.handle(ah.pack(ah.FLAG_FALLBACK, 3, 78, values[0]), workers[0])
    other = 64 if n == 256 else 256
    ps.handle(ah.pack(ah.FLAG_FALLBACK, 3, 78, np.zeros(other, np.int64)), workers[1])
    assert list(ps.pending[78].contributions) == [0] and ps.stats.ignored == 1


@pytest.mark.parametrize("data, sender", [
    (b"garbage", "127.0.0.11"),                                        # not an aggregation packet
    (ah.pack(ah.FLAG_FALLBACK, 4, 1, count=64), "127.0.0.11"),         # another job
    (ah.pack(ah.FLAG_FALLBACK, 3, 1, count=64), "127.0.0.99"),         # not a worker
    (ah.pack(0, 3, 1, count=64), "127.0.0.11"),                        # a plain contribution: the switch's
    (ah.pack(ah.FLAG_RESULT | ah.FLAG_SERVER | ah.FLAG_WIDE, 3, 1, count=64), "127.0.0.11"),   # a result
], ids=["garbage", "other-job", "not-a-worker", "plain", "result"])
def test_server_ignores_what_is_not_its_to_sum(server, data, sender):
    ps, _, socks = server
    ps.handle(data, sender)
    assert ps.stats.ignored == 1 and not ps.pending and all(received(s) == [] for s in socks)


def test_a_congested_result_halves_the_window_once_per_window():
    """ECN on aggregation, against a stand-in switch on loopback that holds
    each burst until the worker stops sending (20 ms) and then answers it
    all: the bursts are the worker's window. The results of packets 40-45
    come back CONGESTED (one window): the window halves once, from 32 to 16,
    and grows again by one packet per window of unmarked results."""
    switch = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    switch.bind(("127.0.0.20", ah.job_port(4)))
    switch.settimeout(0.02)
    bursts: list[int] = []
    stop = threading.Event()

    def answer():
        pending = []
        while not stop.is_set():
            try:
                data, addr = switch.recvfrom(4096)
                pending.append((ah.unpack(data), addr))
            except socket.timeout:
                if pending:
                    bursts.append(len(pending))
                for pkt, addr in pending:
                    p = pkt.seq - 1000
                    flags = ah.FLAG_RESULT | (ah.FLAG_CONGESTED if 40 <= p <= 45 else 0)
                    switch.sendto(ah.pack(flags, 4, pkt.seq, pkt.elements, slot=pkt.slot), addr)
                pending = []

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    data = np.arange(64 * 200, dtype=np.int64) - 5000
    try:
        with ar.AggregationWorker(4, "127.0.0.20", 1, bind_ip="127.0.0.21", seq_base=1000, ecn=True,
                                  block_elements=64) as w:
            assert w.sock.getsockopt(socket.IPPROTO_IP, socket.IP_TOS) == ar.ECT0
            out = w.allreduce(data)
            stats = w.stats
    finally:
        stop.set()
        thread.join()
        switch.close()
    assert out.tolist() == data.tolist()
    assert (stats.congested_results, stats.window_decreases, stats.min_window) == (6, 1, 16.0)
    assert bursts[:2] == [32, 32]
    assert bursts[2] <= 18, bursts           # halved (and grown by about one)
    # then additive growth: no burst more than about one packet above the largest window since. (Bursts
    # are told apart by 20 ms of silence: a worker stalled that long mid-window, as in a CI run, splits
    # its window into two smaller bursts, so consecutive bursts are not compared; it never makes one larger.)
    peak = bursts[2]
    for b in bursts[3:]:
        assert b <= peak + 2, bursts
        peak = max(peak, b)
    assert max(bursts[4:]) > 18


@contextlib.contextmanager
def stand_in_server(ip: str, job: int, answer: Callable[[socket.socket, bytes, tuple], None]) -> Iterator[None]:
    """A stand-in for the switch and its server on loopback: `ip`, job
    `job`'s port; answer(socket, datagram, sender) for every datagram, in a
    thread, until the block ends."""
    server = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    server.bind((ip, ah.job_port(job)))
    server.settimeout(0.05)
    stop = threading.Event()

    def serve():
        while not stop.is_set():
            try:
                data, addr = server.recvfrom(4096)
            except socket.timeout:
                continue
            answer(server, data, addr)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        server.close()


def test_a_worker_assembles_a_wide_result_from_its_parts():
    """A stand-in server answers every block of 256 with its sum times 2^32
    (beyond int32) in two WIDE packets, the second first and sent twice:
    the worker's result is exact, the duplicate parts counted."""
    def answer(server: socket.socket, data: bytes, addr: tuple) -> None:
        pkt = ah.unpack(data)
        total = pkt.elements.astype(np.int64) * 2 ** 32
        parts = [ah.pack(ah.FLAG_SERVER | ah.FLAG_RESULT | ah.FLAG_WIDE, 5, pkt.seq, total[o:o + n], offset=o)
                 for o, n in ah.wide_parts(pkt.elements.size)]
        for part in parts[::-1] + parts[-1:]:
            server.sendto(part, addr)

    data = np.arange(256 * 3, dtype=np.int64) - 300
    with stand_in_server("127.0.0.30", 5, answer), \
            ar.AggregationWorker(5, "127.0.0.30", 1, bind_ip="127.0.0.31", seq_base=7) as w:
        assert w.block_elements == 256
        out = w.allreduce(data.astype(np.int32))
        stats = w.stats
    assert out.tolist() == (data * 2 ** 32).tolist()
    assert stats.results == 3 and stats.fallback_blocks == 3
    # the repeated parts of blocks 0 and 1 arrive before block 2's parts; block 2's may come after the call
    assert 2 <= stats.duplicate_results <= 3


def test_a_worker_refuses_a_block_size_no_job_can_declare():
    with pytest.raises(ValueError, match="a block is 64 or 256 elements"):
        ar.AggregationWorker(1, "127.0.0.1", 2, bind_ip="127.0.0.9", block_elements=100)


@pytest.mark.parametrize("rate_pps", [None, 200.0])
def test_a_paced_worker_sends_new_blocks_no_faster_than_its_rate(rate_pps):
    """A stand-in server answers every block at once with its sum (one
    worker: the block itself) and notes when each block arrived. Paced at
    200 packets/s, 30 blocks take at least (30 - 1 - burst) gaps of 5 ms (a
    lower bound: a loaded machine only makes it later); the result is exact
    either way."""
    arrivals: list[float] = []

    def answer(server: socket.socket, data: bytes, addr: tuple) -> None:
        pkt = ah.unpack(data)
        arrivals.append(time.monotonic())
        server.sendto(ah.pack(ah.FLAG_SERVER | ah.FLAG_RESULT, 6, pkt.seq, pkt.elements.astype(np.int64)), addr)

    data = np.arange(256 * 30, dtype=np.int32) - 1000
    with stand_in_server("127.0.0.40", 6, answer), \
            ar.AggregationWorker(6, "127.0.0.40", 1, bind_ip="127.0.0.41", rate_pps=rate_pps) as w:
        out = w.allreduce(data)
        stats = w.stats
    assert out.tolist() == data.tolist() and stats.retransmissions == 0
    assert len(arrivals) == 30
    if rate_pps:
        assert arrivals[-1] - arrivals[0] >= (30 - 1 - ar.PACING_BURST) / rate_pps


def test_a_worker_refuses_a_rate_that_is_not_one():
    for rate in (0.0, -5.0, float("inf")):
        with pytest.raises(ValueError, match="rate_pps must be above 0"):
            ar.AggregationWorker(1, "127.0.0.1", 2, bind_ip="127.0.0.9", rate_pps=rate)
