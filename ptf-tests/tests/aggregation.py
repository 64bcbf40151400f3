"""PTF tests of in-network aggregation (p4src/include/aggregation.p4): a
slot sums its workers' blocks and multicasts the exact result once the last
one arrives; retransmissions are neither added twice nor left unanswered;
the shadow sets let a slot be reused without leftovers and drop late
duplicates; jobs are isolated from each other; a shared pool falls back to
the parameter server on a collision and is freed by a completion or by the
server's result; overflowed sums are flagged; FALLBACK contributions and
traffic that is not for an aggregation job pass untouched; malformed or
foreign contributions are dropped with their own reason and add nothing.

Ports 1-3 are the workers 10.0.1.1, 10.0.2.1, 10.0.3.1; port 4 is the
parameter server (PS) 10.0.4.1, whose switch this is. The aggregation state
is the controller's own (features.aggregation.job_state, unknown_job_entry).

Ordering: every send waits until the switch's ingress port counter has
counted the packet, so the next packet is processed after it (BMv2 has one
ingress thread) whatever port it enters on. Negative checks ("nothing else
leaves") wait QUIET_S on every port, hundreds of times BMv2's latency.
Expected sums are computed here with Python integers, element by element.
"""
from __future__ import annotations

import random
import time
from collections import defaultdict

import ptf.testutils as tu
from ptf_lib.base_test import HOST_MAC, SWITCH_MAC, P4RuntimeTest, neighbour_mac, port_mac
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from features.aggregation import EVENTS, Job, JobPlacement, UpPath, WorkerPath, events, job_state, unknown_job_entry
from control.p4constants import drop_reasons
from wire.aggregation import (EXPONENT_BIAS, FLAG_COLLISION, FLAG_CONGESTED, FLAG_FALLBACK, FLAG_OVERFLOW,
                                   FLAG_RESULT, FLAG_RETRANSMIT, FLAG_SERVER, FLAG_WIDE, SLOT_SET,
                                   Aggregation, job_port, pack, udp_length, unpack)

PS_PORT = 4
PS_IP = "10.0.4.1"
WORKER_PORTS = [1, 2, 3]
TTL = 64
IP_ID = 0x2A2A
QUIET_S = 0.75          # negative checks: how long nothing more may arrive
ARRIVAL_S = 5.0         # positive checks: how long an expected packet may take
INT32_MIN, INT32_MAX = -2**31, 2**31 - 1
ELEMENTS = 64           # the tests' jobs declare one chunk unless a test says (block_elements)
STEAL_AFTER_MS = 600_000   # never reached in a test: no use is taken over by age


def worker_ip(port: int) -> str:
    return f"10.0.{port}.1"


def wrap32(value: int) -> int:
    return (value + 2**31) % 2**32 - 2**31


def block(tag: str, magnitude: int = 700_000_000, n: int = ELEMENTS) -> list[int]:
    """n deterministic int32 values in [-magnitude, magnitude], with both
    signs and the extremes: three of them never overflow."""
    rng = random.Random(tag)
    values = [rng.randint(-magnitude, magnitude) for _ in range(n)]
    values[0], values[1], values[2], values[3] = magnitude, -magnitude, 0, -1
    return values


def add(*blocks: list[int]) -> list[int]:
    """Element-wise sum, which the tests only use where it fits int32."""
    sums = [sum(lane) for lane in zip(*blocks)]
    assert all(INT32_MIN <= s <= INT32_MAX for s in sums), "test data: this sum must not overflow"
    return sums


def agg_frame(src_port: int, job: int, seq: int, elements: list[int], *, slot: int = 0,
              exponent: int = EXPONENT_BIAS, flags: int = 0, dst: str = PS_IP, src: str | None = None,
              worker: int = 0, dport: int | None = None):
    """A worker's contribution as its host sends it (Scapy computes the UDP checksum)."""
    port = job_port(job)
    return (Ether(dst=SWITCH_MAC, src=HOST_MAC)
            / IP(src=src or worker_ip(src_port), dst=dst, ttl=TTL, id=IP_ID)
            / UDP(sport=port, dport=port if dport is None else dport)
            / Aggregation(flags=flags, job=job, worker=worker, exponent=exponent, slot=slot, seq=seq,
                          elements=list(elements)))


def raw_frame(src: str, dst: str, job: int, payload: bytes):
    """A UDP datagram between job ports whose payload is given as bytes (pack() or malformed)."""
    port = job_port(job)
    return (Ether(dst=SWITCH_MAC, src=HOST_MAC) / IP(src=src, dst=dst, ttl=TTL, id=IP_ID)
            / UDP(sport=port, dport=port) / Raw(payload))


def routed(pkt, port: int) -> bytes:
    """`pkt` as plain forwarding sends it out of `port`: MACs, TTL, IPv4 checksum."""
    out = pkt.copy()
    out[Ether].src, out[Ether].dst = port_mac(port), neighbour_mac(port)
    out[IP].ttl -= 1
    del out[IP].chksum
    return bytes(out)


def passed_to_server(pkt, worker: int, flags: int) -> bytes:
    """A contribution the switch sends on to the PS: routed, worker id learned,
    `flags`, UDP checksum 0 (the switch owns the payload); elements unchanged."""
    out = Ether(bytes(pkt))
    out[Aggregation].worker = worker
    out[Aggregation].flags = flags
    out[UDP].chksum = 0
    return routed(out, PS_PORT)


def ipv4_checksum_ok(frame: bytes) -> bool:
    ip = Ether(frame)[IP]
    again = ip.copy()
    del again.chksum
    return IP(bytes(again)).chksum == ip.chksum


def lanes_differ(got: list[int], want: list[int]) -> str:
    bad = [(i, g, w) for i, (g, w) in enumerate(zip(got, want)) if g != w]
    return ", ".join(f"lane {i}: got {g}, want {w}" for i, g, w in bad[:6]) + (" ..." if len(bad) > 6 else "")


class AggTestBase(P4RuntimeTest):
    """Routes to the four /24s, then the aggregation state of `jobs` (the
    controller's entries and multicast groups) and the PS's wildcard entry."""

    #: (job id, worker ports, base, slots, shared): worker i of a job is its i-th port
    jobs: list[tuple[int, list[int], int, int, bool]] = [(1, WORKER_PORTS, 0, 4, False)]
    #: the jobs' block size (int32 elements a packet carries), and a job's own if it differs
    block_elements = ELEMENTS
    block_sizes: dict[int, int] = {}

    def setUp(self):
        super().setUp()
        self.dataplane.set_qlen(10_000)
        for port in WORKER_PORTS + [PS_PORT]:
            self.add_direct_route(f"10.0.{port}.0/24", port)
        self.workers_of: dict[int, list[int]] = {}
        for job_id, ports, base, slots, shared in self.jobs:
            job = Job(job_id, tuple(f"h{p}" for p in ports), "ps", 0 if shared else slots, shared,
                      block_elements=self.block_size(job_id))
            paths = [WorkerPath(worker_ip(p), p, port_mac(p), neighbour_mac(p)) for p in ports]
            self.state.merge(job_state(self.p4info, JobPlacement(job, "sut", base, slots), PS_IP, paths,
                                       STEAL_AFTER_MS))
            self.workers_of[job_id] = list(ports)
        self.state.table_entries.append(unknown_job_entry(self.p4info, PS_IP))
        self.apply()

    def block_size(self, job: int) -> int:
        return self.block_sizes.get(job, self.block_elements)

    # -- sending ---------------------------------------------------------------

    def send(self, port: int, pkt) -> None:
        """Send and wait until ingress has counted it: later packets are processed after it."""
        before = self.counter("ingress_port_counter", port)[0]
        tu.send_packet(self, port, bytes(pkt))
        deadline = time.monotonic() + ARRIVAL_S
        while self.counter("ingress_port_counter", port)[0] == before:
            self.assertLess(time.monotonic(), deadline, f"the switch never received the packet sent on port {port}")
            time.sleep(0.005)

    def contribute(self, job: int, ports: list[int], seq: int, blocks: dict[int, list[int]], **kw) -> None:
        """Each of `ports` sends its block of `blocks` for (job, seq), in order."""
        for port in ports:
            self.send(port, agg_frame(port, job, seq, blocks[port], **kw))

    # -- receiving -------------------------------------------------------------

    def collect(self, expected: dict[int, int]) -> dict[int, list[bytes]]:
        """Frames by port: exactly `expected[port]` on each port, none elsewhere."""
        got: dict[int, list[bytes]] = defaultdict(list)
        want = sum(expected.values())
        deadline = time.monotonic() + ARRIVAL_S
        while sum(map(len, got.values())) < want and time.monotonic() < deadline:
            result = tu.dp_poll(self, device_number=0, timeout=max(0.01, deadline - time.monotonic()))
            if isinstance(result, self.dataplane.PollSuccess):
                got[result.port].append(bytes(result.packet))
        while True:   # and then nothing more
            result = tu.dp_poll(self, device_number=0, timeout=QUIET_S)
            if not isinstance(result, self.dataplane.PollSuccess):
                break
            got[result.port].append(bytes(result.packet))
        counts = {port: len(frames) for port, frames in got.items() if frames}
        summary = {port: [Ether(f).summary() for f in frames] for port, frames in got.items()}
        self.assertEqual(counts, {p: n for p, n in expected.items() if n}, f"frames by port: {summary}")
        return got

    def nothing_leaves(self) -> None:
        self.collect({})

    def check_result(self, frame: bytes, port: int, job: int, seq: int, slot: int, sums: list[int] | None,
                     exponent: int = EXPONENT_BIAS, flags: int = FLAG_RESULT, dst: str | None = None) -> Aggregation:
        """A result replica for the worker (or, trees, the switch at `dst`)
        behind `port`: from the PS to it, TTL decremented, IPv4 checksum
        valid, UDP checksum 0, the given flags, exponent and sums (None: not
        checked); every other byte as the worker sent it."""
        dst = worker_ip(port) if dst is None else dst
        pkt = Ether(frame)
        self.assertIn(Aggregation, pkt, f"port {port}: not an aggregation packet: {pkt.summary()}")
        ip, udp, agg = pkt[IP], pkt[UDP], pkt[Aggregation]
        where = f"result on port {port}"
        self.assertEqual((pkt.src, pkt.dst), (port_mac(port), neighbour_mac(port)), f"{where}: MACs")
        self.assertEqual((ip.src, ip.dst), (PS_IP, dst), f"{where}: from the PS to the worker")
        self.assertEqual(ip.ttl, TTL - 1, f"{where}: TTL")
        self.assertTrue(ipv4_checksum_ok(frame), f"{where}: IPv4 checksum")
        self.assertEqual((udp.sport, udp.dport, udp.len),
                         (job_port(job), job_port(job), udp_length(self.block_size(job))), where)
        self.assertEqual(udp.chksum, 0, f"{where}: UDP checksum")
        self.assertEqual(int(agg.flags), flags, f"{where}: flags {agg.flags}")
        self.assertEqual((agg.job, agg.seq, agg.slot, agg.exponent), (job, seq, slot, exponent),
                         f"{where}: job, seq, slot, exponent")
        if sums is not None:
            self.assertEqual(list(agg.elements), sums, f"{where}: {lanes_differ(list(agg.elements), sums)}")
            decoded = unpack(bytes(udp.payload))
            self.assertEqual(decoded.elements.tolist(), sums, f"{where}: unpack() disagrees")
            expected = (Ether(src=port_mac(port), dst=neighbour_mac(port))
                        / IP(src=PS_IP, dst=dst, ttl=TTL - 1, id=IP_ID)
                        / UDP(sport=job_port(job), dport=job_port(job), chksum=0)
                        / Aggregation(flags=flags, job=job, worker=agg.worker, exponent=exponent, slot=slot,
                                      seq=seq, elements=sums))
            self.assertEqual(frame, bytes(expected), f"{where}: bytes")
        return agg

    def results(self, job: int, seq: int, slot: int, sums: list[int] | None, ports: list[int] | None = None,
                **kw) -> None:
        """One result on each of `ports` (default: all the job's workers), nothing else."""
        ports = self.workers_of[job] if ports is None else ports
        got = self.collect({p: 1 for p in ports})
        for port in ports:
            self.check_result(got[port][0], port, job, seq, slot, sums, **kw)

    # -- counters --------------------------------------------------------------

    def assertEvents(self, **expected: int) -> None:
        want = {name: expected.get(name, 0) for name in EVENTS}
        self.assertEqual(events(self.sw, self.p4info), want, "agg_events")

    def assertDrops(self, **expected: int) -> None:
        got = {reason: self.drops(reason) for reason in drop_reasons() if reason != "NONE"}
        want = {reason: expected.get(reason, 0) for reason in got}
        self.assertEqual(got, want, "drop_counter")


# -- one slot, one job -----------------------------------------------------------

class ThreeWorkersSumOneSlotTest(AggTestBase):
    """Nothing leaves before the third contribution; then each worker gets
    exactly one result: the exact element-wise sum (negatives, magnitudes
    near 2^31 / 3), the largest exponent, from the PS to that worker."""

    def runTest(self):
        blocks = {p: block(f"sum-{p}") for p in WORKER_PORTS}
        exponents = {1: EXPONENT_BIAS - 3, 2: EXPONENT_BIAS + 5, 3: EXPONENT_BIAS + 1}
        for port in (1, 2):
            self.send(port, agg_frame(port, 1, 0, blocks[port], exponent=exponents[port]))
            self.nothing_leaves()
        self.assertEvents(contribution=2)
        self.send(3, agg_frame(3, 1, 0, blocks[3], exponent=exponents[3]))
        self.results(1, 0, 0, add(*blocks.values()), exponent=EXPONENT_BIAS + 5)
        self.assertEvents(contribution=3, complete=1)
        self.assertDrops()


class RetransmissionBeforeCompletionIsNotAddedTwiceTest(AggTestBase):
    """Worker 1 sends its block twice (the second flagged RETRANSMIT) before
    the slot completes: the copy is dropped, the result counts it once."""

    def runTest(self):
        blocks = {p: block(f"dup-{p}") for p in WORKER_PORTS}
        self.send(1, agg_frame(1, 1, 0, blocks[1]))
        self.send(1, agg_frame(1, 1, 0, blocks[1], flags=FLAG_RETRANSMIT))
        self.nothing_leaves()
        self.assertEvents(contribution=1, duplicate=1)
        self.contribute(1, [2, 3], 0, blocks)
        self.results(1, 0, 0, add(*blocks.values()))
        self.assertEvents(contribution=3, duplicate=1, complete=1)


class RetransmissionAfterCompletionGetsTheResultAgainTest(AggTestBase):
    """Once the slot completed, a worker's retransmission (it lost the
    result) is answered by unicast to that worker alone, same sums and
    exponent; the slot does not complete a second time."""

    def runTest(self):
        blocks = {p: block(f"again-{p}") for p in WORKER_PORTS}
        sums = add(*blocks.values())
        for port in WORKER_PORTS:
            self.send(port, agg_frame(port, 1, 0, blocks[port], slot=1, exponent=EXPONENT_BIAS + port))
        self.results(1, 0, 1, sums, exponent=EXPONENT_BIAS + 3)
        self.send(2, agg_frame(2, 1, 0, blocks[2], slot=1, exponent=EXPONENT_BIAS + 2, flags=FLAG_RETRANSMIT))
        self.results(1, 0, 1, sums, ports=[2], exponent=EXPONENT_BIAS + 3)
        self.assertEvents(contribution=3, complete=1, result_again=1)


class ShadowSetsReuseASlotTest(AggTestBase):
    """Window 1 (one dedicated slot): seq p uses slot 0, set p % 2. Seq 0
    (set 0), seq 1 (set 1), seq 2 (set 0 again) each complete with their own
    sum. While set 0 holds seq 2 unfinished, a late retransmission of seq 0
    is dropped as stale and seq 2's sum is untouched; the other set still
    answers a retransmission of seq 1 with seq 1's result."""
    jobs = [(1, WORKER_PORTS, 0, 1, False)]

    def runTest(self):
        blocks = {seq: {p: block(f"shadow-{seq}-{p}") for p in WORKER_PORTS} for seq in range(3)}
        slot_of = {0: 0, 1: SLOT_SET, 2: 0}
        for seq in (0, 1):
            self.contribute(1, WORKER_PORTS, seq, blocks[seq], slot=slot_of[seq])
            self.results(1, seq, slot_of[seq], add(*blocks[seq].values()))
        self.send(1, agg_frame(1, 1, 2, blocks[2][1], slot=0))
        self.send(2, agg_frame(2, 1, 0, blocks[0][2], slot=0, flags=FLAG_RETRANSMIT))   # late: seq 0 on set 0
        self.nothing_leaves()
        self.assertEvents(contribution=7, complete=2, stale=1)
        self.send(3, agg_frame(3, 1, 1, blocks[1][3], slot=SLOT_SET, flags=FLAG_RETRANSMIT))
        self.results(1, 1, SLOT_SET, add(*blocks[1].values()), ports=[3])
        self.contribute(1, [2, 3], 2, blocks[2], slot=0)
        self.results(1, 2, 0, add(*blocks[2].values()))
        self.assertEvents(contribution=9, complete=3, stale=1, result_again=1)


# -- several jobs ------------------------------------------------------------------

class TwoJobsWithDedicatedRangesAreIsolatedTest(AggTestBase):
    """Job 1 (workers 1, 2; slots 0-3) and job 2 (workers 2, 3; slots 8-11)
    contribute interleaved to the same slot numbers and seqs: each result
    carries its own job's sum and reaches only that job's workers."""
    jobs = [(1, [1, 2], 0, 4, False), (2, [2, 3], 8, 4, False)]

    def runTest(self):
        for slot in (0, 3 | SLOT_SET):
            a = {p: block(f"iso-a-{slot}-{p}") for p in (1, 2)}
            b = {p: block(f"iso-b-{slot}-{p}") for p in (2, 3)}
            self.send(1, agg_frame(1, 1, 0, a[1], slot=slot))
            self.send(2, agg_frame(2, 2, 0, b[2], slot=slot))
            self.nothing_leaves()
            self.send(2, agg_frame(2, 1, 0, a[2], slot=slot))
            self.results(1, 0, slot, add(*a.values()), ports=[1, 2])
            self.send(3, agg_frame(3, 2, 0, b[3], slot=slot))
            self.results(2, 0, slot, add(*b.values()), ports=[2, 3])
        self.assertEvents(contribution=8, complete=4)


class SharedPoolTestBase(AggTestBase):
    """Jobs 1 (workers 1, 2) and 2 (workers 2, 3) share a pool of one slot
    (slot 100): every block of either job hashes to it."""
    jobs = [(1, [1, 2], 100, 1, True), (2, [2, 3], 100, 1, True)]


class CollisionInSharedPoolGoesToTheServerTest(SharedPoolTestBase):
    """Job 1's first contribution takes the slot; job 2's contribution to
    the same set is sent on to the PS unchanged in its elements, flagged
    COLLISION, with the worker id the switch learned (worker 3 is job 2's
    worker 1). Once job 1 completes, the slot is free: job 2 takes it and
    completes with its own sum."""

    def runTest(self):
        a = {p: block(f"coll-a-{p}") for p in (1, 2)}
        b = {p: block(f"coll-b-{p}") for p in (2, 3)}
        self.send(1, agg_frame(1, 1, 0, a[1]))
        self.nothing_leaves()
        colliding = agg_frame(3, 2, 0, b[3], worker=0x55)
        self.send(3, colliding)
        got = self.collect({PS_PORT: 1})
        self.assertEqual(got[PS_PORT][0], passed_to_server(colliding, worker=1, flags=FLAG_COLLISION))
        self.assertEvents(contribution=1, collision=1)
        self.send(2, agg_frame(2, 1, 0, a[2]))
        self.results(1, 0, 0, add(*a.values()))
        self.send(3, agg_frame(3, 2, 0, b[3], flags=FLAG_RETRANSMIT))
        self.nothing_leaves()
        self.send(2, agg_frame(2, 2, 0, b[2]))
        self.results(2, 0, 0, add(*b.values()))
        self.assertEvents(contribution=4, complete=2, collision=1)


class ServerResultReleasesTheSlotTest(SharedPoolTestBase):
    """Job 1's block (seq 7, set 1) holds the slot: job 2 collides. PS
    packets that are not the result of that block (another seq; a FALLBACK
    request) release nothing. The PS result of the block (SERVER|RESULT|WIDE,
    64 int64 sums) is forwarded to its worker unchanged and frees the cell:
    job 2's contribution then starts a new use and completes with its own sum."""

    def ps_packet(self, flags: int, seq: int, elements=None):
        return raw_frame(PS_IP, worker_ip(1), 1, pack(flags, 1, seq, elements, count=ELEMENTS, slot=SLOT_SET, worker=0))

    def runTest(self):
        a1 = block("rel-a-1")
        b = {p: block(f"rel-b-{p}") for p in (2, 3)}
        self.send(1, agg_frame(1, 1, 7, a1, slot=SLOT_SET))
        self.send(3, agg_frame(3, 2, 0, b[3], slot=SLOT_SET))
        self.collect({PS_PORT: 1})
        wide = [3 * v * 1_000_003 for v in a1]   # int64 sums, beyond int32
        for pkt in (self.ps_packet(FLAG_SERVER | FLAG_RESULT | FLAG_WIDE, 6, wide),
                    self.ps_packet(FLAG_SERVER | FLAG_FALLBACK, 7)):
            self.send(PS_PORT, pkt)
            got = self.collect({1: 1})
            self.assertEqual(got[1][0], routed(pkt, 1), "a PS packet is forwarded unchanged")
        self.send(3, agg_frame(3, 2, 0, b[3], slot=SLOT_SET, flags=FLAG_RETRANSMIT))
        self.collect({PS_PORT: 1})
        self.assertEvents(contribution=1, collision=2)

        result = self.ps_packet(FLAG_SERVER | FLAG_RESULT | FLAG_WIDE, 7, wide)
        self.send(PS_PORT, result)
        got = self.collect({1: 1})
        self.assertEqual(got[1][0], routed(result, 1), "the PS result is forwarded unchanged")
        self.assertEqual(unpack(bytes(Ether(got[1][0])[UDP].payload)).elements.tolist(), wide)
        self.assertEvents(contribution=1, collision=2, released=1)
        self.send(3, agg_frame(3, 2, 0, b[3], slot=SLOT_SET, flags=FLAG_RETRANSMIT))
        self.nothing_leaves()
        self.send(2, agg_frame(2, 2, 0, b[2], slot=SLOT_SET))
        self.results(2, 0, SLOT_SET, add(*b.values()))
        self.assertEvents(contribution=3, collision=2, released=1, complete=1)


# -- sums that do not fit, and blocks the PS sums ---------------------------------

class OverflowIsFlaggedTest(AggTestBase):
    """Two workers. Seq 0 reaches exactly INT32_MAX and INT32_MIN: a plain
    result. Seq 1 goes one beyond in lane 0 (above 2^31 - 1) and lane 1
    (below -2^31): the result is multicast flagged RESULT|OVERFLOW (the
    other lanes still exact), counted as overflow."""
    jobs = [(1, [1, 2], 0, 4, False)]

    def runTest(self):
        edge = {1: block("ovf-1"), 2: block("ovf-2")}
        edge[1][:3], edge[2][:3] = [INT32_MAX - 5, INT32_MIN + 7, INT32_MAX], [5, -7, INT32_MIN]
        self.contribute(1, [1, 2], 0, edge)
        self.results(1, 0, 0, add(*edge.values()))
        self.assertEvents(contribution=2, complete=1)

        beyond = {1: block("ovf-3"), 2: block("ovf-4")}
        beyond[1][:2], beyond[2][:2] = [INT32_MAX, INT32_MIN + 3], [1, -4]
        self.contribute(1, [1, 2], 1, beyond, slot=SLOT_SET)
        got = self.collect({1: 1, 2: 1})
        exact = [a + b for a, b in zip(*beyond.values())]
        for port in (1, 2):
            agg = self.check_result(got[port][0], port, 1, 1, SLOT_SET, None, flags=FLAG_RESULT | FLAG_OVERFLOW)
            self.assertEqual(list(agg.elements)[2:], exact[2:], lanes_differ(list(agg.elements)[2:], exact[2:]))
            self.assertEqual(list(agg.elements)[:2], [wrap32(v) for v in exact[:2]], "int32 wrap-around")
        self.assertEvents(contribution=4, complete=2, overflow=1)


class FallbackContributionGoesToTheServerTest(AggTestBase):
    """A FALLBACK contribution is not aggregated: it reaches the PS with
    its elements, the learned worker id and UDP checksum 0; the slot it
    names later completes with the three ordinary contributions only."""

    def runTest(self):
        fallback = agg_frame(2, 1, 0, block("fb-x", magnitude=2**31 - 1), flags=FLAG_FALLBACK, worker=0x7F)
        self.send(2, fallback)
        got = self.collect({PS_PORT: 1})
        self.assertEqual(got[PS_PORT][0], passed_to_server(fallback, worker=1, flags=FLAG_FALLBACK))
        self.assertEvents(fallback=1)
        blocks = {p: block(f"fb-{p}") for p in WORKER_PORTS}
        self.contribute(1, WORKER_PORTS, 0, blocks)
        self.results(1, 0, 0, add(*blocks.values()))
        self.assertEvents(fallback=1, contribution=3, complete=1)


# -- bad input -----------------------------------------------------------------------

class BadInputTestBase(AggTestBase):
    """check_dropped(reason, frames): every frame is dropped and counted
    under `reason`, no aggregation event happens, and nothing was added: job
    1 (workers 1-3, slots 0-3) and job 2 (workers 1, 2, slots 4-7, right
    after job 1's range) then complete slot 0 of seq 0 with exact sums, and
    plain traffic to the PS is still forwarded."""
    jobs = [(1, WORKER_PORTS, 0, 4, False), (2, [1, 2], 4, 4, False)]

    def check_dropped(self, reason: str, frames: list[tuple[int, object]]) -> None:
        for port, pkt in frames:
            self.send(port, pkt)
        self.nothing_leaves()
        self.assertDrops(**{reason: len(frames)})
        self.assertEvents()
        for job in (1, 2):
            blocks = {p: block(f"bad-{job}-{p}") for p in self.workers_of[job]}
            self.contribute(job, self.workers_of[job], 0, blocks)
            self.results(job, 0, 0, add(*blocks.values()))
        plain = Ether(dst=SWITCH_MAC, src=HOST_MAC) / IP(src=worker_ip(1), dst=PS_IP) / UDP(sport=1234, dport=4791) \
            / Raw(b"still forwarding")
        self.send(1, plain)
        self.assertEqual(self.collect({PS_PORT: 1})[PS_PORT][0], routed(plain, PS_PORT))
        self.assertDrops(**{reason: len(frames)})
        self.assertEvents(contribution=5, complete=2)


class UnknownJobIsDroppedTest(BadInputTestBase):
    """Jobs 3 and 15 are not set up: the PS's wildcard entry drops them."""

    def runTest(self):
        self.check_dropped("AGG_UNKNOWN_JOB", [(1, agg_frame(1, 3, 0, block("bad-1-1"))),
                                               (2, agg_frame(2, 15, 0, block("bad-1-2")))])


class SenderNotAWorkerIsDroppedTest(BadInputTestBase):
    """10.0.3.77 is no worker of job 1; 10.0.3.1 is a worker of job 1 but not of job 2."""

    def runTest(self):
        self.check_dropped("AGG_NOT_WORKER", [(3, agg_frame(3, 1, 0, block("bad-1-3"), src="10.0.3.77")),
                                              (3, agg_frame(3, 2, 0, block("bad-2-2")))])


class SlotOutsideTheRangeIsDroppedTest(BadInputTestBase):
    """Job 1 has slots 0-3: slot 4 (in either set; it would be job 2's slot
    0) and 0x7FFF are dropped."""

    def runTest(self):
        self.check_dropped("AGG_SLOT_RANGE", [(1, agg_frame(1, 1, 0, block("bad-2-1"), slot=4)),
                                              (2, agg_frame(2, 1, 0, block("bad-2-2"), slot=4 | SLOT_SET)),
                                              (3, agg_frame(3, 1, 0, block("bad-1-3"), slot=0x7FFF))])


class ShortPacketIsDroppedTest(BadInputTestBase):
    """63 elements, and the header alone: not a whole chunk (a parser error)."""

    def runTest(self):
        full = pack(0, 1, 0, block("bad-1-1"))
        self.check_dropped("AGG_BAD_LENGTH", [(1, raw_frame(worker_ip(1), PS_IP, 1, full[:-4])),
                                              (2, raw_frame(worker_ip(2), PS_IP, 1, full[:12]))])


class LongPacketIsDroppedTest(BadInputTestBase):
    """A chunk of elements and then 4 bytes, or 1 byte, more; two chunks;
    five chunks (more than AGG_CHUNKS): neither block size."""

    def runTest(self):
        self.check_dropped("AGG_BAD_LENGTH", [
            (1, raw_frame(worker_ip(1), PS_IP, 1, pack(0, 1, 0, block("bad-1-1")) + b"\x00\x00\x00\x01")),
            (2, raw_frame(worker_ip(2), PS_IP, 1, pack(0, 1, 0, block("bad-1-2")) + b"\x01")),
            (3, raw_frame(worker_ip(3), PS_IP, 1, pack(0, 1, 0, block("bad-1-3", n=256)) + bytes(256))),
            (1, raw_frame(worker_ip(1), PS_IP, 1, pack(0, 1, 0, block("bad-1-1")) + bytes(256)))])


class BlockOfAnotherSizeIsDroppedTest(BadInputTestBase):
    """Blocks of 256 elements to jobs that declared 64: each dropped as
    AGG_BLOCK_SIZE, nothing added to the slot they name."""

    def runTest(self):
        self.check_dropped("AGG_BLOCK_SIZE", [(1, agg_frame(1, 1, 0, block("bad-1-1", n=256))),
                                              (2, agg_frame(2, 2, 0, block("bad-2-2", n=256)))])


# -- traffic that is not for an aggregation job ------------------------------------

class OtherTrafficIsForwardedUntouchedTest(AggTestBase):
    """Plain UDP to the PS (a non-aggregation port, or 0xBEF0 just past the
    job ports, even carrying an aggregation-like payload), from a job port to
    another port, and an aggregation packet to an address this switch serves
    no job for (a worker's): each forwarded as any packet, bytes unchanged
    but for MACs, TTL and IPv4 checksum."""

    def runTest(self):
        payload = pack(0, 1, 0, block("other"), worker=0x66)
        port = job_port(1)
        cases = [
            ("plain UDP to the PS", 1, PS_PORT, Ether(dst=SWITCH_MAC, src=HOST_MAC)
             / IP(src=worker_ip(1), dst=PS_IP) / UDP(sport=4791, dport=4791) / Raw(b"x" * 100)),
            ("aggregation payload to port 0xBEF0", 2, PS_PORT, Ether(dst=SWITCH_MAC, src=HOST_MAC)
             / IP(src=worker_ip(2), dst=PS_IP) / UDP(sport=port, dport=0xBEF0) / Raw(payload)),
            ("from a job port to port 4791", 3, PS_PORT, Ether(dst=SWITCH_MAC, src=HOST_MAC)
             / IP(src=worker_ip(3), dst=PS_IP) / UDP(sport=port, dport=4791) / Raw(payload)),
            ("aggregation packet to 10.0.3.1", 1, 3, agg_frame(1, 1, 0, block("other"), dst=worker_ip(3),
                                                                worker=0x66)),
        ]
        for name, in_port, out_port, pkt in cases:
            with self.subTest(case=name):
                self.send(in_port, pkt)
                got = self.collect({out_port: 1})
                self.assertEqual(got[out_port][0], routed(pkt, out_port))
        self.assertEvents()
        self.assertDrops()


# -- packed lanes: elements summed AGG_WORD_BITS / 32 to a register word --------------

class EveryBlockSizeSumsExactlyTest(AggTestBase):
    """Jobs 1 and 2 declare 64 and 256 elements (one chunk, four): each
    sums its own size exactly, in every lane of every chunk, the last one
    included, in both shadow sets; a server's result of 64 int64 (532 bytes,
    neither size: not parsed beyond the first chunk) passes untouched."""
    jobs = [(1, [1, 2], 0, 4, False), (2, [1, 2], 4, 4, False)]
    block_sizes = {1: 64, 2: 256}

    def runTest(self):
        for slot in (0, 2 | SLOT_SET):
            for job, n in self.block_sizes.items():
                blocks = {p: block(f"size-{job}-{slot}-{p}", n=n) for p in (1, 2)}
                self.contribute(job, [1, 2], 0, blocks, slot=slot)
                self.results(job, 0, slot, add(*blocks.values()))
        self.assertEvents(contribution=8, complete=4)
        wide = raw_frame(PS_IP, worker_ip(1), 1, pack(FLAG_SERVER | FLAG_RESULT | FLAG_WIDE, 1, 9,
                                                      [3 * 2**40 + i for i in range(64)], worker=0))
        self.send(PS_PORT, wide)
        self.assertEqual(self.collect({1: 1})[1][0], routed(wide, 1))
        self.assertDrops()


class LanesTestBase(AggTestBase):
    """Job 1: workers 1 and 2, 256 elements a packet (four chunks), 128 slots."""
    jobs = [(1, [1, 2], 0, 128, False)]
    block_elements = 256


class CarriesStayInTheirLanesTest(LanesTestBase):
    """Seq 0: -1 + 1 in every lane carries out of every lane's top bit:
    all sums 0, nothing flagged. Seq 1: 0x7fffffff + 1 in lane 37 alone
    (its neighbours -1 + 0 and 0 + 0): that lane wraps to -2^31, flagged
    OVERFLOW, its neighbours exact. Seq 2: every lane at an edge without
    going past it (INT32_MAX, INT32_MIN, -1 + INT32_MIN + 1...): exact,
    nothing flagged."""

    def runTest(self):
        n = self.block_elements
        self.contribute(1, [1, 2], 0, {1: [-1] * n, 2: [1] * n})
        self.results(1, 0, 0, [0] * n)

        one = {1: [0] * n, 2: [0] * n}
        one[1][36], one[1][37], one[2][37] = -1, INT32_MAX, 1
        self.contribute(1, [1, 2], 1, one, slot=1)
        want = [0] * n
        want[36], want[37] = -1, INT32_MIN
        self.results(1, 1, 1, want, flags=FLAG_RESULT | FLAG_OVERFLOW)

        rng = random.Random("edges")
        edges = {1: [], 2: []}
        for i in range(n):
            x = rng.randint(0, 2**31 - 1)
            a, b = [(INT32_MAX - x, x), (INT32_MIN + x, -x), (-1, INT32_MIN + 1), (INT32_MIN, 0)][i % 4]
            edges[1].append(a)
            edges[2].append(b)
        self.contribute(1, [1, 2], 2, edges, slot=2)
        self.results(1, 2, 2, add(*edges.values()))
        self.assertEvents(contribution=6, complete=3, overflow=1)
        self.assertDrops()


class OverflowInEveryLanePositionIsFlaggedTest(LanesTestBase):
    """Block k (k = 0..255, each in its own cell) overflows in lane k alone,
    upwards for even k and downwards for odd k: every result is flagged
    OVERFLOW, lane k wraps around, and every other lane (both signs) is
    exact. Every lane position of the four words, and so of every chunk,
    reports its overflow."""

    def runTest(self):
        n = self.block_elements
        want = {}
        for k in range(n):
            blocks = {p: block(f"lane-{k}-{p}", magnitude=1_000_000_000, n=n) for p in (1, 2)}
            blocks[1][k], blocks[2][k] = (INT32_MAX - k, k + 1) if k % 2 == 0 else (INT32_MIN + k, -k - 1)
            exact = [a + b for a, b in zip(blocks[1], blocks[2])]
            want[k] = [wrap32(v) for v in exact]
            self.assertEqual([i for i, v in enumerate(exact) if v != want[k][i]], [k], "test data")
            self.contribute(1, [1, 2], k, blocks, slot=(k % 128) | (SLOT_SET if k >= 128 else 0))
        got = self.collect({1: n, 2: n})
        for port in (1, 2):
            seen = set()
            for frame in got[port]:
                agg = Ether(frame)[Aggregation]
                k = agg.seq
                seen.add(k)
                self.check_result(frame, port, 1, k, (k % 128) | (SLOT_SET if k >= 128 else 0), want[k],
                                  flags=FLAG_RESULT | FLAG_OVERFLOW)
            self.assertEqual(seen, set(range(n)), f"port {port}: a result per block")
        self.assertEvents(contribution=2 * n, complete=n, overflow=n)
        self.assertDrops()


# -- trees: the switch as a leaf (sums its workers, sends the partial up) or a spine --

LEAF_ADDR = "10.255.0.21"                                  # this switch's aggregation address, as a leaf
CHILD_ADDRS = {1: "10.255.0.31", 2: "10.255.0.32"}         # as a spine: the leaves behind ports 1 and 2


class LeafRoleTestBase(AggTestBase):
    """This switch as a leaf of job trees: workers on ports 1 and 2 are its
    children; `tree_jobs` gives each job's way up per tree (tree -> port).
    The PS's route is port 4: a partial of tree 0 leaves by port 3, the
    tree's port, not by the route."""
    jobs = []
    #: (job id, base, {tree: port up})
    tree_jobs: list[tuple[int, int, dict[int, int]]] = [(1, 0, {0: 3, 1: 4})]

    def setUp(self):
        super().setUp()
        for job_id, base, ups in self.tree_jobs:
            job = Job(job_id, ("h1", "h2"), "ps", 4, trees=len(ups), block_elements=self.block_elements)
            paths = [WorkerPath(worker_ip(p), p, port_mac(p), neighbour_mac(p)) for p in (1, 2)]
            up = [UpPath(tree, port, port_mac(port), neighbour_mac(port), LEAF_ADDR) for tree, port in ups.items()]
            self.state.merge(job_state(self.p4info, JobPlacement(job, "sut", base, 4), PS_IP, paths, STEAL_AFTER_MS,
                                       trees=len(ups), up=up))
            self.workers_of[job_id] = [1, 2]
        self.apply()

    def check_partial(self, frame: bytes, port: int, job: int, seq: int, slot: int, sums: list[int],
                      flags: int = 0) -> None:
        """A partial sum on its way up out of `port`: from this switch's
        address to the PS, TTL decremented, UDP checksum 0, `flags`, the sums."""
        agg = Ether(frame)[Aggregation]
        expected = (Ether(src=port_mac(port), dst=neighbour_mac(port))
                    / IP(src=LEAF_ADDR, dst=PS_IP, ttl=TTL - 1, id=IP_ID)
                    / UDP(sport=job_port(job), dport=job_port(job), chksum=0)
                    / Aggregation(flags=flags, job=job, worker=agg.worker, exponent=EXPONENT_BIAS, slot=slot, seq=seq,
                                  elements=sums))
        self.assertEqual(list(agg.elements), sums, lanes_differ(list(agg.elements), sums))
        self.assertEqual(frame, bytes(expected), f"partial out of port {port}: bytes")

    def parents_result(self, job: int, seq: int, slot: int, sums: list[int], *, flags: int = FLAG_RESULT,
                       tos: int = 0):
        """The root's result as it reaches this leaf: from the PS to the leaf's address."""
        port = job_port(job)
        return (Ether(dst=SWITCH_MAC, src=HOST_MAC) / IP(src=PS_IP, dst=LEAF_ADDR, ttl=TTL, id=IP_ID, tos=tos)
                / UDP(sport=port, dport=port, chksum=0)
                / Aggregation(flags=flags, job=job, slot=slot, seq=seq, elements=sums))


class LeafSendsOnePartialUpItsBlocksTreeTest(LeafRoleTestBase):
    """Nothing leaves before both workers contributed; then exactly one
    partial, their sum, out of the port to the block's tree's root: slot 0
    (tree 0) by port 3 (the PS's route is port 4), slot 1 (tree 1) by port 4."""

    def runTest(self):
        for seq, slot, port in ((0, 0, 3), (1, 1, 4)):
            blocks = {p: block(f"leaf-{seq}-{p}") for p in (1, 2)}
            self.contribute(1, [1], seq, blocks, slot=slot)
            self.nothing_leaves()
            self.contribute(1, [2], seq, blocks, slot=slot)
            got = self.collect({port: 1})
            self.check_partial(got[port][0], port, 1, seq, slot, add(*blocks.values()))
        self.assertEvents(contribution=4, complete=2, partial_up=2)


class LeafRetransmissionSendsThePartialUpAgainTest(LeafRoleTestBase):
    """A retransmission before the partial completes adds nothing; one after
    it sends the stored partial up again (the parent answers it)."""

    def runTest(self):
        blocks = {p: block(f"again-{p}") for p in (1, 2)}
        self.contribute(1, [1], 0, blocks)
        self.contribute(1, [1], 0, blocks, flags=FLAG_RETRANSMIT)
        self.nothing_leaves()
        self.contribute(1, [2], 0, blocks)
        first = self.collect({3: 1})[3][0]
        self.contribute(1, [2], 0, blocks, flags=FLAG_RETRANSMIT)
        again = self.collect({3: 1})[3][0]
        sums = add(*blocks.values())
        self.check_partial(first, 3, 1, 0, 0, sums)
        self.check_partial(again, 3, 1, 0, 0, sums)
        self.assertEvents(contribution=2, duplicate=1, complete=1, partial_up=1, partial_again=1)


class LeafPassesItsParentsResultDownTest(LeafRoleTestBase):
    """The root's result arriving on the port to the block's tree's root is
    multicast to the leaf's workers; the same result on tree 1's port or
    from a worker's port is dropped (AGG_NOT_PARENT)."""

    def runTest(self):
        sums = block("down")
        self.send(4, self.parents_result(1, 0, 0, sums))
        self.send(1, self.parents_result(1, 0, 0, sums))
        self.nothing_leaves()
        self.assertDrops(AGG_NOT_PARENT=2)
        self.send(3, self.parents_result(1, 0, 0, sums))
        got = self.collect({1: 1, 2: 1})
        for port in (1, 2):
            self.check_result(got[port][0], port, 1, 0, 0, sums)
        self.assertEvents(result_down=1)


class LeafCarriesCongestionUpAndDownTest(LeafRoleTestBase):
    """ECN on aggregation: a contribution that arrived CE-marked flags the
    partial CONGESTED (the packet that completes it was not marked); the
    next block, unmarked, is not flagged; a result that met congestion on
    its way down (CE) reaches the workers flagged CONGESTED."""

    def runTest(self):
        marked = {p: block(f"ce-{p}") for p in (1, 2)}
        first = agg_frame(1, 1, 0, marked[1])
        first[IP].tos = 3          # ECN CE
        self.send(1, first)
        self.contribute(1, [2], 0, marked)
        self.check_partial(self.collect({3: 1})[3][0], 3, 1, 0, 0, add(*marked.values()), flags=FLAG_CONGESTED)
        clean = {p: block(f"clean-{p}") for p in (1, 2)}
        self.contribute(1, [1, 2], 2, clean, slot=2)
        self.check_partial(self.collect({3: 1})[3][0], 3, 1, 2, 2, add(*clean.values()))
        sums = block("ce-down")
        self.send(3, self.parents_result(1, 0, 0, sums, tos=3))
        got = self.collect({1: 1, 2: 1})
        for port in (1, 2):
            agg = self.check_result(got[port][0], port, 1, 0, 0, None, flags=FLAG_RESULT | FLAG_CONGESTED)
            self.assertEqual(list(agg.elements), sums)


class TwoJobsOnTwoTreesTest(LeafRoleTestBase):
    """Job 1's tree is rooted behind port 3, job 2's behind port 4: the same
    workers' blocks of each job go up their own job's way, summed apart."""
    tree_jobs = [(1, 0, {0: 3}), (2, 4, {0: 4})]

    def runTest(self):
        for job, port in ((1, 3), (2, 4)):
            blocks = {p: block(f"jobs-{job}-{p}") for p in (1, 2)}
            self.contribute(job, [1, 2], 0, blocks)
            self.check_partial(self.collect({port: 1})[port][0], port, job, 0, 0, add(*blocks.values()))
        self.assertEvents(contribution=4, complete=2, partial_up=2)


class SpineRoleTestBase(AggTestBase):
    """This switch as the root of job 1's tree 0: its children are two
    leaves, behind ports 1 and 2, known by their aggregation addresses."""
    jobs = []

    def setUp(self):
        super().setUp()
        job = Job(1, ("leaf-a", "leaf-b"), "ps", 4, trees=2, block_elements=self.block_elements)
        paths = [WorkerPath(CHILD_ADDRS[p], p, port_mac(p), neighbour_mac(p)) for p in (1, 2)]
        self.state.merge(job_state(self.p4info, JobPlacement(job, "sut", 0, 4), PS_IP, paths, STEAL_AFTER_MS,
                                   trees=2))
        self.workers_of[1] = [1, 2]
        self.apply()

    def partial(self, port: int, seq: int, sums: list[int], *, slot: int = 0, flags: int = 0):
        return agg_frame(port, 1, seq, sums, slot=slot, flags=flags, src=CHILD_ADDRS[port])

    def results_down(self, seq: int, slot: int, sums: list[int], ports=(1, 2), **kw) -> None:
        got = self.collect({p: 1 for p in ports})
        for port in ports:
            self.check_result(got[port][0], port, 1, seq, slot, sums, dst=CHILD_ADDRS[port], **kw)


class SpineSumsThePartialsAndSendsTheResultDownTest(SpineRoleTestBase):
    """Two leaves' partials: one result to each leaf's address, the exact sum."""

    def runTest(self):
        partials = {p: block(f"spine-{p}") for p in (1, 2)}
        self.send(1, self.partial(1, 0, partials[1]))
        self.nothing_leaves()
        self.send(2, self.partial(2, 0, partials[2]))
        self.results_down(0, 0, add(*partials.values()))
        self.assertEvents(contribution=2, complete=1)


class SpineAnswersAPartialAgainAndDropsStaleOnesTest(SpineRoleTestBase):
    """A leaf's partial sent again after completion gets the result by
    unicast; once the cell is reused for seq 8 (slot 0, same shadow set), a
    late partial of seq 0 is dropped as stale."""

    def runTest(self):
        partials = {p: block(f"stale-{p}") for p in (1, 2)}
        for p in (1, 2):
            self.send(p, self.partial(p, 0, partials[p]))
        self.results_down(0, 0, add(*partials.values()))
        self.send(1, self.partial(1, 0, partials[1], flags=FLAG_RETRANSMIT))
        self.results_down(0, 0, add(*partials.values()), ports=(1,))
        later = {p: block(f"later-{p}") for p in (1, 2)}
        for p in (1, 2):
            self.send(p, self.partial(p, 8, later[p]))
        self.results_down(8, 0, add(*later.values()))
        self.send(2, self.partial(2, 0, partials[2], flags=FLAG_RETRANSMIT))
        self.nothing_leaves()
        self.assertEvents(contribution=4, complete=2, result_again=1, stale=1)


class SpineResultOfAnOverflowedPartialIsFlaggedTest(SpineRoleTestBase):
    """A leaf whose partial overflowed says so (OVERFLOW): the result is
    flagged OVERFLOW, and the workers send that block to the PS."""

    def runTest(self):
        partials = {p: block(f"of-{p}") for p in (1, 2)}
        self.send(1, self.partial(1, 0, partials[1], flags=FLAG_OVERFLOW))
        self.send(2, self.partial(2, 0, partials[2]))
        self.results_down(0, 0, add(*partials.values()), flags=FLAG_RESULT | FLAG_OVERFLOW)
        self.assertEvents(contribution=2, complete=1, overflow=1)


class SpineRoutesAWorkersFallbackToTheServerTest(SpineRoleTestBase):
    """A worker's FALLBACK contribution crossing a tree switch that does not
    know the worker (its children are leaves) is routed on to the PS."""

    def runTest(self):
        fallback = agg_frame(3, 1, 0, block("fb-tree"), flags=FLAG_FALLBACK)
        self.send(3, fallback)
        self.assertEqual(self.collect({PS_PORT: 1})[PS_PORT][0], routed(fallback, PS_PORT))
        self.assertEvents(fallback=1)
        self.assertDrops()
