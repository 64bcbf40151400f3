"""UET's reliable unordered delivery (hostagent/rdma/uet.py) over simulated
paths, every packet through wire/uet.py's codecs: each entropy value takes
one of several paths of different delays (so spraying reorders), and a
path can lose, duplicate, trim or CE-mark what it carries, or die. Every
message is delivered whole and exactly once, in any order; a trimmed packet
is resent on its NACK, never by a timeout; the sender moves off a path that
marks or loses; a silent receiver fails the PDC after retry_cnt retries;
the receiver's rules one packet at a time; NSCC's four cases."""
import heapq
import random
from dataclasses import dataclass, field

import pytest

from hostagent.rdma.cc.nscc import Nscc, NsccParams
from hostagent.rdma.cc.rccc import CreditScheduler, Rccc, RcccParams
from hostagent.rdma.cc.base import Feedback
from hostagent.rdma.uet import MISMATCHED_ENDS, RETRY_EXCEEDED, UNKNOWN_PDC, UetParams, UetReceiver, UetSender
from wire.uet import (NACK_INVALID_DPDCID, NACK_MODE_MISMATCH, NACK_TRIMMED, PSN_MOD, REQUEST_BYTES, AckCc, Credit,
                      MalformedPds, Nack, Request, decode_ack, decode_credit, decode_nack, decode_request, encode_ack,
                      encode_credit, encode_nack, encode_request, request_payload_at)

TRIM_KEEP = 64 - 42                  # what a 64-byte trim leaves after Ethernet, IPv4 and UDP


@dataclass
class Path:
    delay: float
    loss: float = 0.0
    dup: float = 0.0
    trim: float = 0.0
    mark: float = 0.0
    dead: bool = False


@dataclass
class Fabric:
    """Paths by entropy (entropy mod the number of paths); ACKs come back on
    a path of their own (`back`)."""
    rng: random.Random
    paths: list
    back: Path
    queue: list = field(default_factory=list)
    n: int = 0
    carried: dict = field(default_factory=dict)        # path index -> packets put on it

    def _push(self, at: float, item) -> None:
        self.n += 1
        heapq.heappush(self.queue, (at, self.n, item))

    def forward(self, now: float, entropy: int, frame: bytes) -> None:
        i = entropy % len(self.paths)
        path = self.paths[i]
        self.carried[i] = self.carried.get(i, 0) + 1
        if path.dead or self.rng.random() < path.loss:
            return
        ce = self.rng.random() < path.mark
        if self.rng.random() < path.trim:
            frame, kind = frame[:TRIM_KEEP], "trimmed"
        else:
            kind = "data"
        for _ in range(2 if self.rng.random() < path.dup else 1):
            self._push(now + path.delay, (kind, frame, ce))

    def backward(self, now: float, kind: str, frame: bytes) -> None:
        if self.rng.random() < self.back.loss:
            return
        for _ in range(2 if self.rng.random() < self.back.dup else 1):
            self._push(now + self.back.delay + self.rng.random() * 0.0005, (kind, frame, False))

    def due(self, now: float):
        while self.queue and self.queue[0][0] <= now:
            yield heapq.heappop(self.queue)[2]


def send_back(fabric: Fabric, now: float, replies) -> None:
    for r in replies:
        if isinstance(r, AckCc):
            fabric.backward(now, "ack", encode_ack(r))
        elif isinstance(r, Credit):
            fabric.backward(now, "credit", encode_credit(r))
        else:
            fabric.backward(now, "nack", encode_nack(r))


def transfer(sizes, paths, *, back=None, seed=1, start_psn=0, limit_s=60.0, params=None, rate=5000.0, cc=None,
             credit=None):
    rng = random.Random(seed)
    p = params or UetParams(mtu_bytes=256)
    snd = UetSender(p, cc or Nscc(NsccParams(line_rate_pps=rate, base_rtt_s=0.004)), start_psn=start_psn, spdcid=7)
    rcv = UetReceiver(p, credit=credit)
    data = [rng.randbytes(n) for n in sizes]
    for d in data:
        snd.post(len(d), 0.0, data=d)
    fabric = Fabric(rng, paths, back or Path(delay=0.001))
    delivered = []
    now, step = 0.0, 0.0001
    while not (snd.done and len(delivered) == len(data)) and now < limit_s and snd.error is None:
        out = snd.next_packet(now)
        if out is not None:
            fabric.forward(now, out.entropy, encode_request(out.request) + out.payload)
        for kind, frame, ce in fabric.due(now):
            if kind == "trimmed":
                send_back(fabric, now, rcv.on_trimmed(decode_request(frame, headers_only=True), now))
            elif kind == "data":
                replies, done = rcv.on_request(decode_request(frame), frame[request_payload_at(frame):], now, ce=ce)
                delivered += done
                send_back(fabric, now, replies)
            elif kind == "ack":
                snd.on_ack(decode_ack(frame), now)
            elif kind == "credit":
                snd.on_credit(decode_credit(frame), now)
            else:
                snd.on_nack(decode_nack(frame), now)
        send_back(fabric, now, [reply for _, reply in rcv.poll(now)])
        now += step
    return data, delivered, snd, rcv, fabric, now


def by_id(delivered) -> dict:
    ids = [d.msg_id for d in delivered]
    assert len(ids) == len(set(ids)), "a message delivered twice"
    return {d.msg_id: d.data for d in delivered}


def four_paths(**kw) -> list:
    return [Path(delay=0.001 + 0.0004 * i, **kw) for i in range(4)]


def test_sprayed_packets_take_every_path_and_arrive_out_of_order_yet_complete_once():
    sizes = [1, 255, 256, 257, 5000, 100, 3000]
    data, delivered, snd, rcv, fabric, _ = transfer(sizes, four_paths())
    assert by_id(delivered) == dict(enumerate(data))
    assert snd.done and snd.stats.retransmitted == 0 and snd.stats.timeouts == 0
    assert set(fabric.carried) == {0, 1, 2, 3} and min(fabric.carried.values()) >= snd.stats.sent // 4 - 1
    assert rcv.stats.out_of_order > 0, "the paths' delays reordered packets"
    assert rcv.stats.acks < snd.stats.sent, "ACKs coalesced"
    assert all(m.completed_at is not None and m.error is None for m in snd.messages)


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("loss,dup,trim", [(0.05, 0.0, 0.0), (0.0, 0.05, 0.0), (0.0, 0.0, 0.1), (0.03, 0.03, 0.05)])
def test_loss_duplication_reordering_and_trimming_deliver_every_message_exactly_once(seed, loss, dup, trim):
    rng = random.Random(seed)
    sizes = [rng.randint(1, 3000) for _ in range(40)]
    back = Path(delay=0.001, loss=loss, dup=dup)
    data, delivered, snd, rcv, _, now = transfer(sizes, four_paths(loss=loss, dup=dup, trim=trim), back=back,
                                                 seed=seed)
    assert snd.done, f"stuck at {now:.1f} s: una {snd.una} of {snd.posted_seq}"
    assert by_id(delivered) == dict(enumerate(data))
    if loss or trim:
        assert snd.stats.retransmitted > 0


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_trimmed_packets_are_resent_on_their_nack_never_by_a_timeout(seed):
    data, delivered, snd, rcv, _, _ = transfer([2000] * 20, four_paths(trim=0.1), seed=seed)
    assert by_id(delivered) == dict(enumerate(data)) and snd.done
    assert rcv.stats.trimmed > 0 and snd.stats.timeouts == 0
    assert snd.stats.trim_nacks == rcv.stats.trimmed, "one NACK a trim, each answered"


def test_a_dead_path_is_left_after_its_losses_without_a_reroute():
    """One of four paths drops everything (a link failed, the routes not yet
    changed): packets sprayed onto it are found lost by the later packets'
    ACKs, resent elsewhere, and its entropies rest, longer at each penalty
    without a clean ACK between: everything is delivered, and the dead path
    carries a few packets where each live one carries hundreds (20 against
    640 each; with a fixed 50 ms rest it carried 72)."""
    paths = four_paths()
    paths[2].dead = True
    data, delivered, snd, _, fabric, _ = transfer([4000] * 120, paths)
    assert by_id(delivered) == dict(enumerate(data)) and snd.error is None
    assert snd.stats.lost > 0 and snd.stats.penalties > 0
    assert fabric.carried[2] < 0.05 * min(fabric.carried[i] for i in (0, 1, 3)), fabric.carried


def test_a_marking_path_carries_less_than_the_others():
    paths = four_paths()
    paths[1].mark = 1.0
    _, delivered, snd, _, fabric, _ = transfer([4000] * 30, paths)
    assert len(delivered) == 30 and snd.stats.penalties > 0
    assert fabric.carried[1] < 0.5 * min(fabric.carried[i] for i in (0, 2, 3))


def test_the_receiver_learns_the_start_psn_from_any_syn_packet_and_psns_wrap():
    """The PDC's first packet goes on the slowest path, so a later one sets
    the PDC up; the PSNs cross 2^32."""
    paths = [Path(delay=0.001), Path(delay=0.004)]
    data, delivered, snd, rcv, _, _ = transfer([3000] * 4, paths, start_psn=PSN_MOD - 5,
                                               params=UetParams(mtu_bytes=256, entropies=(0xC001, 0xC000)))
    assert by_id(delivered) == dict(enumerate(data))
    pdc = rcv.pdcs[("the peer", 7)]
    assert pdc.start_psn == PSN_MOD - 5 and snd.dpdcid == pdc.spdcid


def test_a_silent_receiver_fails_the_pdc_after_retry_cnt_retries_and_every_message_with_it():
    p = UetParams(mtu_bytes=256, retry_cnt=3, rto_s=0.1, rto_max_s=0.4)
    snd = UetSender(p, Nscc(NsccParams(line_rate_pps=5000)), peer="10.0.0.2")
    msgs = [snd.post(600, 0.0) for _ in range(3)]
    now = 0.0
    while snd.error is None and now < 10:
        snd.next_packet(now)
        now += 0.001
    assert snd.error is not None and snd.error.cause == RETRY_EXCEEDED
    assert snd.stats.timeouts == 4 and "3 retries (retry_cnt 3)" in str(snd.error)
    assert 0.1 + 0.2 + 0.4 + 0.4 <= now <= 1.2
    assert all(m.error is snd.error for m in msgs)
    later = snd.post(10, now)
    assert later.error is snd.error and snd.next_packet(now + 1) is None


def req(psn, msg_id=0, offset=0, length=256, *, syn=True, start=0, ackreq=False, spdcid=7) -> Request:
    return Request(psn=psn, spdcid=spdcid, dpdcid=0 if syn else 1, msg_id=msg_id, offset=offset, length=length,
                   ackreq=ackreq, syn=syn, syn_offset=psn - start if syn else 0)


def test_receiver_places_packets_by_offset_and_delivers_the_message_once_whole():
    rcv = UetReceiver(UetParams(mtu_bytes=4, ack_every=100))
    parts = [b"abcd", b"efgh", b"ij"]
    acks, done = rcv.on_request(req(2, offset=8, length=10), parts[2], 0.0)
    assert done == [] and acks == []
    acks, done = rcv.on_request(req(0, offset=0, length=10), parts[0], 0.0)
    assert done == [] and [(a.cack_psn, a.sack_base, a.sack_bitmap) for a in acks] == [(0, 2, 1)], \
        "the cumulative PSN moved while a later packet waits: acknowledged at once"
    acks, done = rcv.on_request(req(1, offset=4, length=10, ackreq=True), parts[1], 0.0)
    assert [d.data for d in done] == [b"abcdefghij"]
    assert len(acks) == 1 and acks[0].cack_psn == 2 and acks[0].sack_bitmap == 0
    again, done = rcv.on_request(req(1, offset=4, length=10), parts[1], 0.1)
    assert done == [] and rcv.stats.duplicates == 1 and len(again) == 1, "a duplicate is acknowledged at once"


def test_receiver_sacks_what_arrived_beyond_the_hole_and_acks_at_once_when_it_fills():
    rcv = UetReceiver(UetParams(ack_every=100))
    for psn in (0, 2, 3, 5):
        rcv.on_request(req(psn, msg_id=psn), b"x", 0.0)
    ((_, ack),) = rcv.poll(1.0)
    assert ack.cack_psn == 0 and ack.sack_base == 2 and ack.sack_bitmap == 0b1011 and ack.ooo_count == 3
    acks, _ = rcv.on_request(req(1, msg_id=1), b"x", 1.0)
    assert [(a.cack_psn, a.sack_base, a.sack_bitmap) for a in acks] == [(3, 5, 0b1)]


def test_receiver_nacks_a_trimmed_packet_and_acks_one_whose_copy_arrived():
    rcv = UetReceiver(UetParams())
    (nack,) = rcv.on_trimmed(req(0), 0.0)
    assert isinstance(nack, Nack) and nack.code == NACK_TRIMMED and nack.psn == 0
    rcv.on_request(req(1, msg_id=1), b"x", 0.0)
    (reply,) = rcv.on_trimmed(req(1, msg_id=1), 0.0)
    assert isinstance(reply, AckCc)


def test_receiver_acks_a_ce_marked_packet_at_once_naming_it():
    rcv = UetReceiver(UetParams(ack_every=100))
    rcv.on_request(req(0), b"x", 0.0)
    (ack,), _ = rcv.on_request(req(1, msg_id=1), b"x", 0.0, ce=True)
    assert ack.ecn_marked and ack.ack_psn == 1


@pytest.mark.parametrize("offset,length,payload", [(250, 256, bytes(10)), (0, 0, b"x"), (0, 10, b"")])
def test_receiver_drops_a_message_header_that_contradicts_itself(offset, length, payload):
    rcv = UetReceiver(UetParams())
    acks, done = rcv.on_request(req(0, offset=offset, length=length), payload, 0.0)
    assert acks == [] and done == [] and rcv.stats.malformed == 1


def test_receiver_drops_a_packet_whose_message_length_differs_from_its_first():
    rcv = UetReceiver(UetParams())
    rcv.on_request(req(0, length=512), bytes(256), 0.0)
    rcv.on_request(req(1, offset=256, length=1024), bytes(256), 0.0)
    assert rcv.stats.malformed == 1 and rcv.stats.delivered_messages == 0


def test_a_packet_of_an_unknown_pdc_without_syn_is_nacked_and_fails_the_sender():
    rcv = UetReceiver(UetParams())
    (nack,), _ = rcv.on_request(req(5, syn=False, spdcid=9), b"x", 0.0)
    assert nack.code == NACK_INVALID_DPDCID and rcv.stats.unknown_pdc == 1
    snd = UetSender(UetParams(), Nscc(), spdcid=9, peer="10.0.0.2")
    snd.post(10, 0.0)
    snd.next_packet(0.0)
    snd.on_nack(Nack(NACK_INVALID_DPDCID, 0, 0, 9), 0.001)
    assert snd.error is not None and snd.error.cause == UNKNOWN_PDC and snd.messages[0].error is snd.error


def test_a_syn_offset_beyond_12_bits_cannot_be_encoded_so_the_window_stays_below_it():
    with pytest.raises(ValueError, match="max_outstanding must be within 1..4095"):
        UetParams(max_outstanding=4096)


@pytest.mark.parametrize("kw,words", [(dict(entropies=()), "entropies"), (dict(entropies=(1, 1)), "entropies"),
                                      (dict(reorder_packets=0), "reorder_packets"), (dict(rto_s=0), "rto_s"),
                                      (dict(retry_cnt=8), "retry_cnt")])
def test_bad_parameters_are_named(kw, words):
    with pytest.raises(ValueError, match=words):
        UetParams(**kw)


def test_a_request_cut_before_its_pds_header_ends_is_refused():
    with pytest.raises(MalformedPds):
        decode_request(encode_request(req(0))[:REQUEST_BYTES - 1], headers_only=True)


# -- RCCC ------------------------------------------------------------------------

def test_rccc_delivers_everything_against_the_receivers_credit():
    """The sender starts with a BDP of credit; the rest of its 120 kB comes
    as the receiver grants it, at the receiver's link rate."""
    credit = CreditScheduler(rate_pps=2000, mtu_bytes=256, base_rtt_s=0.004)
    cc = Rccc(RcccParams(line_rate_pps=5000, base_rtt_s=0.004, mtu_bytes=256))
    initial = cc.credit_bytes
    data, delivered, snd, rcv, _, now = transfer([4000] * 30, four_paths(), cc=cc, credit=credit)
    assert by_id(delivered) == dict(enumerate(data)) and snd.done
    assert credit.granted_bytes >= 30 * 4000 - initial - 256 * 4, "what the initial credit did not cover was granted"
    assert rcv.stats.credits > 0
    assert now >= (30 * 4000 - initial) / (2000 * 256) * 0.9, "paced by the receiver's rate, not the sender's"


def test_an_rccc_sender_waits_for_credit_but_asks_with_one_packet_when_nothing_is_in_flight():
    cc = Rccc(RcccParams(initial_credit_packets=0, mtu_bytes=100))
    snd = UetSender(UetParams(mtu_bytes=100), cc)
    snd.post(1000, 0.0)
    first = snd.next_packet(0.0)
    assert first is not None and first.request.credit_target == 900, "nothing in flight: a packet asks"
    assert snd.next_packet(0.01) is None, "no credit, one in flight: wait"
    snd.on_credit(Credit(250, spdcid=1, dpdcid=1), 0.02)
    sent = [snd.next_packet(0.02 + i * 0.01) for i in range(3)]
    assert [o.request.credit_target for o in sent if o is not None] == [800, 700]


def test_the_credit_scheduler_shares_its_rate_round_robin_and_keeps_at_most_a_bdp_unused():
    s = CreditScheduler(rate_pps=1000, mtu_bytes=100, base_rtt_s=0.01, burst_s=0.005)
    for pdc in ("a", "b", "c"):
        s.on_data(pdc, credit_target=10_000, nbytes=100)
    grants = s.grant(0.003)                       # 3 ms at 1000 packets/s: 3 packets' worth
    assert grants == {"a": 100, "b": 100, "c": 100}
    s.grant(1.0)
    assert sum(s.unused.values()) <= s.bdp_bytes == 1000, "a BDP of the receiver's link at most"
    s.on_data("a", credit_target=0, nbytes=400)
    assert "a" not in s.grant(2.0), "nothing left to send: no credit"


def test_an_rccc_sender_to_a_receiver_granting_no_credit_fails_naming_both_ends():
    rcv = UetReceiver(UetParams())
    snd = UetSender(UetParams(), Rccc(), peer="10.0.0.2")
    snd.post(10, 0.0)
    out = snd.next_packet(0.0)
    (nack,), _ = rcv.on_request(out.request, out.payload, 0.0)
    assert nack.code == NACK_MODE_MISMATCH and rcv.stats.refused == 1
    snd.on_nack(nack, 0.001)
    assert snd.error is not None and snd.error.cause == MISMATCHED_ENDS and "grants none" in str(snd.error)


# -- NSCC ------------------------------------------------------------------------

def nscc(**kw) -> Nscc:
    return Nscc(NsccParams(line_rate_pps=1000, base_rtt_s=0.01, target_qdelay_s=0.004, init_cwnd=5, **kw))


def test_nscc_increases_in_proportion_to_the_headroom_below_the_target():
    near, far = nscc(), nscc()
    near.on_ack(Feedback(now=0.1, acked_packets=1, acked_seq=1, rtt_s=0.013))     # delay 3 ms of 4
    far.on_ack(Feedback(now=0.1, acked_packets=1, acked_seq=1, rtt_s=0.010))      # no queueing
    assert 5 < near.cwnd < far.cwnd and far.counts["proportional"] == 1
    assert far.cwnd == pytest.approx(5 + 10 / 5)                                   # bdp 10, acked 1, cwnd 5


def test_nscc_grows_gently_above_the_target_without_marks():
    cc = nscc()
    cc.on_ack(Feedback(now=0.1, acked_packets=1, acked_seq=1, rtt_s=0.020))
    assert cc.cwnd == pytest.approx(5 + 1 / 5) and cc.counts["fair"] == 1


def test_nscc_decreases_on_a_mark_above_the_target_once_per_rtt():
    cc = nscc()
    cc.on_ack(Feedback(now=0.1, acked_packets=1, acked_seq=1, rtt_s=0.020, ecn_echo=True))
    assert cc.cwnd == pytest.approx(5 * (1 - 0.8 * (10 - 4) / 10)), "delay 10 ms against a target of 4"
    cc.on_ack(Feedback(now=0.105, acked_packets=1, acked_seq=2, rtt_s=0.050, ecn_echo=True))
    assert cc.counts["decrease"] == 1, "not twice within an RTT"
    cc.on_ack(Feedback(now=0.2, acked_packets=1, acked_seq=3, rtt_s=0.050, ecn_echo=True))
    assert cc.cwnd == pytest.approx(5 * 0.52 * 0.5), "delay 40 ms: the cut is capped at max_md"
    assert cc.counts["decrease"] == 2


def test_nscc_leaves_the_window_on_a_mark_below_the_target():
    cc = nscc()
    cc.on_ack(Feedback(now=0.1, acked_packets=1, acked_seq=1, rtt_s=0.011, ecn_echo=True))
    assert cc.cwnd == 5 and cc.counts["noop"] == 1


def test_nscc_quick_adapts_to_what_was_delivered_on_a_trim_and_stays_within_bounds():
    cc = nscc()
    for i in range(3):
        cc.on_ack(Feedback(now=0.100 + i * 0.001, acked_packets=1, acked_seq=i + 1, rtt_s=0.020))
    cc.on_loss(0.104)
    assert cc.cwnd == 3 and cc.counts["quick_adapt"] == 1
    for i in range(200):
        cc.on_ack(Feedback(now=0.2 + i * 0.001, acked_packets=1, acked_seq=i, rtt_s=0.010))
    assert cc.cwnd == pytest.approx(15.0), "at most 1.5 x the BDP"


def test_acks_rotate_over_the_peers_entropies_and_one_before_a_duplicate_rests():
    from hostagent.rdma.uet import AckSpray
    spray = AckSpray(rest_s=0.05)
    assert spray.pick(0.0, 7) == 7, "nothing seen yet: the data packet's own"
    for e in (1, 2, 3):
        spray.on_data(e, duplicate=False, now=0.0)
    assert [spray.pick(0.0, 9) for _ in range(4)] == [1, 2, 3, 1]
    spray.on_data(2, duplicate=True, now=0.01)          # the ACK on 1 was (perhaps) lost: 1 rests
    assert [spray.pick(0.02, 9) for _ in range(4)] == [2, 3, 2, 3]
    spray.on_data(2, duplicate=True, now=0.03)          # and now 3 (the last ACK's)
    assert [spray.pick(0.04, 9) for _ in range(2)] == [2, 2]
    assert 1 in [spray.pick(0.07, 9) for _ in range(3)], "back after its rest"


def test_credit_whose_data_never_came_is_written_off():
    """A sender's packets lost on a dead path: the credit they used never
    comes back as data; without a write-off the receiver, its BDP granted,
    would grant nothing more."""
    s = CreditScheduler(rate_pps=1000, mtu_bytes=100, base_rtt_s=0.01, burst_s=0.005)
    s.on_data("a", credit_target=100_000, nbytes=100)       # at 0 s
    for t in (0.005, 0.010, 0.015):
        s.grant(t)
    assert sum(s.unused.values()) >= s.bdp_bytes == 1000
    assert s.grant(0.030) == {}, "a BDP out and unused: nothing more"
    assert s.grant(0.045).get("a", 0) > 0, "4 RTTs (40 ms) without data: written off, granted again"


def test_a_lost_tail_packet_is_probed_not_left_to_the_timeout():
    """A message's last packet takes a dead path (entropies alternate over
    two paths, the second dead): no later packet can show it lost, so the
    tail loss probe resends it after 2 SRTT on the next entropy, well before
    the 200 ms timeout."""
    paths = [Path(delay=0.001), Path(delay=0.001, dead=True)]
    p = UetParams(mtu_bytes=256, entropies=(0xC000, 0xC001))
    data, delivered, snd, _, _, now = transfer([512], paths, params=p)
    assert by_id(delivered) == dict(enumerate(data)) and snd.done
    assert snd.stats.probes >= 1 and snd.stats.timeouts == 0 and now < 0.1, (snd.stats, now)
