"""The UDP ring all-reduce (hostagent/aggregation/ring_allreduce.py): wire format, ring
schedule, exact and float sums for n = 2, 3, 4 workers, tiny and odd lengths,
loss/duplication/reordering, packets of the next call arriving early, the
timeout of a missing peer, argument errors and the CLI.

Workers run as threads in this process, on 127.0.0.1, 127.0.0.2, ... (Linux
routes all of 127/8 to loopback), all on one UDP port as in the fabric where
each worker has its own address.
"""
from __future__ import annotations

import itertools
import json
import math
import random
import threading
import time

import numpy as np
import pytest

from hostagent.aggregation.ring_allreduce import (DATA_BYTES, FLAG_ACK, HEADER, RingAllReduce, check_result, main,
                                      make_input, pack_ack, pack_data, ring_segments, segment_bounds,
                                      unpack_header)

_ports = itertools.count(47100)


def addresses(n: int) -> list[str]:
    return [f"127.0.0.{i + 1}" for i in range(n)]


def run_ring(inputs, rings, calls: int = 1) -> list[list[np.ndarray]]:
    """Each worker all-reduces its input `calls` times in its own thread;
    results[rank][call]. A worker that is done keeps answering late packets
    (ring.linger) until all are done: the last ACK of a call may be lost, and
    its sender cannot finish without a retransmitted one. Then the rings are
    closed at once. Re-raises a worker's exception."""
    n = len(rings)
    results: list[list[np.ndarray]] = [[] for _ in range(n)]
    errors: list[BaseException | None] = [None] * n
    finished = [0]
    lock = threading.Lock()
    all_done = threading.Event()

    def worker(rank: int) -> None:
        try:
            for c in range(calls):
                x = inputs[rank] if not callable(inputs) else inputs(rank, c)
                results[rank].append(rings[rank].allreduce(x))
        except BaseException as exc:   # noqa: BLE001 - handed to the test thread
            errors[rank] = exc
        with lock:
            finished[0] += 1
            if finished[0] == n:
                all_done.set()
        if errors[rank] is None:
            rings[rank].linger(quiet_s=math.inf, until=all_done.is_set, max_s=30)

    threads = [threading.Thread(target=worker, args=(r,)) for r in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(40)
    for r in rings:
        r.close(linger_s=0.0)          # every call returned: nobody needs an ACK any more
    for e in errors:
        if e is not None:
            raise e
    assert not any(t.is_alive() for t in threads)
    return results


def make_rings(n: int, cls=RingAllReduce, **kwargs) -> list[RingAllReduce]:
    port = next(_ports)
    kwargs.setdefault("timeout_s", 10.0)
    return [cls(r, addresses(n), port, **kwargs) for r in range(n)]


def random_inputs(n: int, length: int, dtype: str, seed: int = 0) -> list[np.ndarray]:
    return [make_input(seed, r, length, dtype) for r in range(n)]


# --- wire format and schedule ---------------------------------------------------

def test_header_is_12_bytes_and_round_trips():
    assert HEADER.size == 12
    elements = np.arange(64, dtype=">f4").tobytes()
    packet = pack_data(step=5, call=65535, seq=123456, elements=elements, itemsize=4)
    assert len(packet) == 12 + DATA_BYTES
    h = unpack_header(packet)
    assert (h.step, h.call, h.seq, h.count, h.is_ack) == (5, 65535, 123456, 64, False)
    assert np.array_equal(np.frombuffer(packet, dtype=">f4", offset=12), np.arange(64, dtype=np.float32))
    ack = pack_ack(step=2, call=7, cumulative=10, received_seq=12)
    h = unpack_header(ack)
    assert h.is_ack and h.flags == FLAG_ACK and (h.step, h.call, h.seq, h.count) == (2, 7, 10, 0)
    assert int.from_bytes(ack[12:], "big") == 12


def test_foreign_and_malformed_packets_are_not_parsed():
    assert unpack_header(b"\xa7\x01") is None                       # short
    assert unpack_header(b"\x00" * 12) is None                      # wrong magic
    assert unpack_header(b"\xa7\x02" + b"\x00" * 10) is None        # wrong version
    with pytest.raises(ValueError, match="elements"):
        pack_data(0, 0, 0, b"\x00" * (DATA_BYTES + 4), 4)
    with pytest.raises(ValueError, match="elements"):
        pack_data(0, 0, 0, b"\x00" * 6, 4)


def test_segments_are_nearly_equal_and_cover_the_array():
    for length, n in [(1, 4), (3, 4), (10, 3), (1000, 7)]:
        b = segment_bounds(length, n)
        sizes = np.diff(b)
        assert b[0] == 0 and b[-1] == length and sizes.max() - sizes.min() <= 1


@pytest.mark.parametrize("n", [2, 3, 5, 8])
def test_ring_schedule_gives_every_worker_the_full_sum(n):
    """Simulate the schedule of ring_segments on symbolic contributions (sets of ranks)."""
    held = [[{r} for _ in range(n)] for r in range(n)]   # held[r][segment] = ranks summed in
    for step in range(2 * (n - 1)):
        sent = [held[r][ring_segments(r, n, step)[0]] for r in range(n)]
        for r in range(n):
            seg = ring_segments(r, n, step)[1]
            assert seg == ring_segments((r - 1) % n, n, step)[0]      # receives what the left sends
            incoming = sent[(r - 1) % n]
            if step < n - 1:
                assert not held[r][seg] & incoming                    # nothing is added twice
                held[r][seg] = held[r][seg] | incoming
            else:
                held[r][seg] = set(incoming)
    assert all(held[r][s] == set(range(n)) for r in range(n) for s in range(n))


# --- sums ------------------------------------------------------------------------

@pytest.mark.parametrize("n", [2, 3, 4])
def test_int32_sums_are_exact_and_int64(n):
    xs = random_inputs(n, 5000, "int32", seed=n)
    xs[0][:3] = [2**31 - 1, -2**31, 2**31 - 1]          # sums that overflow int32
    xs[1][:3] = [2**31 - 1, -2**31, 1]
    results = run_ring(xs, make_rings(n))
    exact = np.sum([x.astype(np.int64) for x in xs], axis=0)
    for r in range(n):
        assert results[r][0].dtype == np.int64
        assert np.array_equal(results[r][0], exact)


@pytest.mark.parametrize("n", [2, 3, 4])
def test_float32_sums_match_numpy_and_agree_bitwise(n):
    xs = random_inputs(n, 10_000, "float32", seed=10 + n)
    results = run_ring(xs, make_rings(n))
    exact = np.sum([x.astype(np.float64) for x in xs], axis=0)
    for r in range(n):
        assert results[r][0].dtype == np.float32
        np.testing.assert_allclose(results[r][0], exact, rtol=1e-5, atol=1e-5)
        assert check_result(results[r][0], xs)[0]
        assert results[r][0].tobytes() == results[0][0].tobytes()   # same bytes on every worker


def test_int64_sums_are_exact():
    xs = [np.array([2**40, -5, 7], dtype=np.int64), np.array([2**40, 5, 1], dtype=np.int64),
          np.array([1, 1, 1], dtype=np.int64)]
    results = run_ring(xs, make_rings(3))
    assert all(np.array_equal(res[0], [2**41 + 1, 1, 9]) for res in results)


@pytest.mark.parametrize("n,length", [(2, 1), (3, 1), (4, 1), (4, 2), (4, 3), (3, 65), (4, 1000), (2, 63)])
def test_tiny_and_odd_lengths(n, length):
    """Length 1, lengths below n (empty segments: no packets at all) and lengths
    that are no multiple of the 64 (32 for int64 on the wire) elements per packet."""
    xs = random_inputs(n, length, "int32", seed=length)
    results = run_ring(xs, make_rings(n))
    exact = np.sum([x.astype(np.int64) for x in xs], axis=0)
    assert all(np.array_equal(res[0], exact) for res in results)


def test_single_worker_returns_its_input():
    x = np.array([1.5, -2.0], dtype=np.float32)
    with RingAllReduce(0, ["127.0.0.1"], next(_ports), linger_s=0) as ring:
        out = ring.allreduce(x)
    assert np.array_equal(out, x) and out is not x and ring.stats.packets_sent == 0


def test_repeated_calls_with_changing_lengths():
    """Call numbers keep calls apart; each call may have another length."""
    n = 3
    lengths = [100, 1, 4097, 7]

    def inputs(rank, call):
        return make_input(call, rank, lengths[call], "int32")

    rings = make_rings(n)
    results = run_ring(inputs, rings, calls=len(lengths))
    for c, length in enumerate(lengths):
        exact = np.sum([inputs(r, c).astype(np.int64) for r in range(n)], axis=0)
        assert all(np.array_equal(results[r][c], exact) for r in range(n))
    assert rings[0].stats.calls == len(lengths)


def test_stats_count_payload_bytes():
    n, length = 2, 640                       # segments of 320 float32 = 5 full packets each
    rings = make_rings(n)
    run_ring(random_inputs(n, length, "float32"), rings)
    s = rings[0].stats
    data_packets = 2 * (n - 1) * 5
    assert s.data_packets_sent == data_packets and s.ack_packets_sent == data_packets
    assert s.packets_sent == 2 * data_packets
    assert s.bytes_sent == data_packets * (12 + 256) + data_packets * (12 + 4)
    assert s.bytes_received == s.bytes_sent and s.packets_received == s.packets_sent
    assert s.retransmissions == 0 and s.duplicates == 0 and s.calls == 1
    assert rings[0].last_stats.bytes_sent == s.bytes_sent and s.elapsed_s > 0


# --- loss ------------------------------------------------------------------------

class LossyRing(RingAllReduce):
    """Drops ~5% of outgoing packets, duplicates ~3%, and swaps ~3% with the next one."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.rng = random.Random(1000 + self.rank)
        self.dropped = self.duplicated = 0
        self.held: tuple[bytes, tuple[str, int]] | None = None

    def _send_datagram(self, packet, addr):
        u = self.rng.random()
        if u < 0.05:
            self.dropped += 1
            return
        if u < 0.08:
            self.duplicated += 1
            super()._send_datagram(packet, addr)
        if u > 0.97 and self.held is None:
            self.held = (packet, addr)                     # goes out after the next packet
            return
        super()._send_datagram(packet, addr)
        if self.held is not None:
            held, self.held = self.held, None
            super()._send_datagram(*held)


@pytest.mark.parametrize("n,dtype", [(2, "int32"), (3, "float32"), (4, "int32")])
def test_loss_duplication_and_reordering_still_give_exact_sums(n, dtype):
    xs = random_inputs(n, 6000, dtype, seed=99)
    rings = make_rings(n, cls=LossyRing)
    results = run_ring(xs, rings, calls=2)
    for r in range(n):
        for res in results[r]:
            assert check_result(res, xs)[0]
            assert res.tobytes() == results[0][0].tobytes()
    assert sum(r.dropped for r in rings) > 0 and sum(r.duplicated for r in rings) > 0
    assert sum(r.stats.retransmissions for r in rings) > 0
    assert sum(r.stats.duplicates for r in rings) > 0


class LoseFinalAcks(RingAllReduce):
    """Loses the first ACK of every packet of the last step of call 1."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.lost: set[int] = set()

    def _send_datagram(self, packet, addr):
        h = unpack_header(packet)
        if h.is_ack and h.call == 1 and h.step == 2 * (self.n - 1) - 1:
            seq = int.from_bytes(packet[12:], "big")
            if seq not in self.lost:
                self.lost.add(seq)
                return
        super()._send_datagram(packet, addr)


def test_lost_final_acks_and_packets_of_the_next_call_arriving_early():
    """Worker 0 loses its last ACKs of call 1: it finishes call 1 (it has all the
    data) and starts call 2 while worker 1 still waits for those ACKs, so worker 1
    gets call-2 data during call 1. It keeps it, worker 0 answers the
    retransmissions of call 1 during call 2, and both calls are exact."""
    port = next(_ports)
    rings = [LoseFinalAcks(0, addresses(2), port, timeout_s=10),
             RingAllReduce(1, addresses(2), port, timeout_s=10)]
    xs = random_inputs(2, 2000, "int32")
    results = run_ring(xs, rings, calls=2)
    exact = np.sum([x.astype(np.int64) for x in xs], axis=0)
    assert all(np.array_equal(res, exact) for r in range(2) for res in results[r])
    assert rings[0].lost and rings[1].stats.retransmissions >= len(rings[0].lost)
    assert rings[1].stats.early_next_call > 0
    assert rings[0].stats.duplicates > 0            # the call-1 retransmissions, seen in call 2


# --- failures --------------------------------------------------------------------

def test_missing_peer_raises_timeout_naming_rank_step_and_peer():
    with RingAllReduce(0, addresses(3), next(_ports), timeout_s=0.4) as ring:
        start = time.monotonic()
        with pytest.raises(TimeoutError) as info:
            ring.allreduce(np.ones(1000, dtype=np.float32))
        took = time.monotonic() - start
        message = str(info.value)
        assert 0.4 <= took < 1.5
        assert "rank 0" in message and "step 0 (reduce-scatter 1/2)" in message
        assert "received 0 of 6 data packets from rank 2 (127.0.0.3:" in message
        assert "6 of 6 data packets sent to rank 1 (127.0.0.2:" in message and "not acknowledged" in message
        assert ring.stats.retransmissions > 0
        with pytest.raises(RuntimeError, match="unusable"):
            ring.allreduce(np.ones(10, dtype=np.float32))


def test_length_mismatch_between_workers_is_reported():
    port = next(_ports)
    rings = [RingAllReduce(r, addresses(2), port, timeout_s=1) for r in range(2)]
    with pytest.raises((ValueError, TimeoutError), match="same length and dtype|timed out"):
        run_ring([np.ones(100, dtype=np.int32), np.ones(300, dtype=np.int32)], rings)


@pytest.mark.parametrize("kwargs,field", [
    (dict(rank=3, addresses=["127.0.0.1", "127.0.0.2"]), "rank"),
    (dict(rank=-1, addresses=["127.0.0.1"]), "rank"),
    (dict(rank=0, addresses=["127.0.0.1", "localhost"]), r"addresses\[1\]"),
    (dict(rank=0, addresses=["127.0.0.1", "127.0.0.1"]), "addresses: duplicates"),
    (dict(rank=0, addresses=[]), "addresses"),
    (dict(rank=0, addresses=["127.0.0.1"], port=0), "port"),
    (dict(rank=0, addresses=["127.0.0.1"], window=0), "window"),
    (dict(rank=0, addresses=["127.0.0.1"], timeout_s=0), "timeout_s"),
    (dict(rank=0, addresses=["127.0.0.1"], rto_initial_s=1.0, rto_max_s=0.5), "rto_initial_s"),
])
def test_bad_arguments_name_the_field(kwargs, field):
    kwargs.setdefault("port", 47000)
    with pytest.raises(ValueError, match=field):
        RingAllReduce(**kwargs)


@pytest.mark.parametrize("array,field", [
    (np.ones((2, 2), dtype=np.float32), "1-D"),
    (np.ones(0, dtype=np.float32), "empty"),
    (np.ones(4, dtype=np.float64), "dtype float64"),
])
def test_bad_arrays_are_refused(array, field):
    with RingAllReduce(0, ["127.0.0.1"], next(_ports), linger_s=0) as ring:
        with pytest.raises(ValueError, match=field):
            ring.allreduce(array)


# --- command line ----------------------------------------------------------------

def test_cli_runs_checks_and_writes_json(tmp_path, capsys):
    port = next(_ports)
    codes = [None, None]

    def worker(rank):
        codes[rank] = main(["--rank", str(rank), "--addresses", "127.0.0.1,127.0.0.2", "--port", str(port),
                            "--elements", "3000", "--dtype", "int32", "--seed", "5", "--repeat", "2",
                            "--timeout", "10", "--out", str(tmp_path / f"w{rank}")])

    threads = [threading.Thread(target=worker, args=(r,)) for r in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert codes == [0, 0]
    summary = json.loads((tmp_path / "w1.json").read_text())
    assert summary["check_passed"] and summary["completed"] == 2 and len(summary["elapsed_s"]) == 2
    assert summary["max_abs_error"] == 0 and summary["elements_per_s"] > 0
    assert summary["stats"]["calls"] == 2 and summary["stats"]["bytes_sent"] > 0
    out = capsys.readouterr().out
    assert "repeat 2/2" in out and "MB/s" in out and f"wrote {tmp_path / 'w0.json'}" in out


def test_cli_refuses_a_rank_outside_the_addresses(capsys):
    with pytest.raises(SystemExit):
        main(["--rank", "2", "--addresses", "127.0.0.1,127.0.0.2", "--elements", "10"])
    assert "--rank" in capsys.readouterr().err


def test_check_result_uses_float_rounding_bound():
    xs = [np.array([1e8, 1.0], dtype=np.float32), np.array([-1e8, 1.0], dtype=np.float32)]
    assert check_result(np.array([0.0, 2.0], dtype=np.float32), xs)[0]
    assert not check_result(np.array([0.0, 2.01], dtype=np.float32), xs)[0]
    assert not check_result(np.array([1, 2], dtype=np.int64), [np.array([1, 1]), np.array([0, 0])])[0]
