"""The RC transport (hostagent/rdma/transport.py) over a simulated channel
that loses, duplicates and reorders, in both retransmission modes: every
message delivered whole, in order, exactly once; the responder's
ACK/NAK/SACK rules one packet at a time; the retry limit (a peer that never
answers fails the queue pair, and every message with it); ends whose terms
differ refused at both ends."""
import heapq
import random
from dataclasses import dataclass, field

import pytest

from hostagent.ecn.dcqcn import DcqcnParams
from hostagent.rdma.cc.dcqcn import Dcqcn
from hostagent.rdma.transport import (GO_BACK_N, MISMATCHED_ENDS, MODES, REFUSED, RETRY_EXCEEDED, SELECTIVE_REPEAT,
                                      Ack, Requester, Responder, TransportParams, unwrap)
from wire.rdma import (PSN_MOD, SEND_FIRST, SEND_LAST, SEND_MIDDLE, SEND_ONLY, SYNDROME_ACK,
                       SYNDROME_NAK_INVALID_REQUEST, SYNDROME_NAK_PSN_SEQUENCE_ERROR, SYNDROME_NAK_TRIMMED, WRITE_ONLY,
                       Terms)


@dataclass
class Channel:
    """One direction: each item arrives `delay` later, or not at all (loss),
    or twice (duplication), or up to `jitter` later still (reordering)."""
    rng: random.Random
    delay: float = 0.001
    loss: float = 0.0
    dup: float = 0.0
    jitter: float = 0.0
    trim: float = 0.0                  # a switch cut it (packet trimming): it arrives as ("trimmed", item)
    queue: list = field(default_factory=list)
    n: int = 0

    def send(self, now: float, item) -> None:
        if self.rng.random() < self.loss:
            return
        if self.rng.random() < self.trim:
            item = ("trimmed", item)
        for _ in range(2 if self.rng.random() < self.dup else 1):
            self.n += 1
            heapq.heappush(self.queue, (now + self.delay + self.rng.random() * self.jitter, self.n, item))

    def due(self, now: float):
        while self.queue and self.queue[0][0] <= now:
            yield heapq.heappop(self.queue)[2]


def transfer(mode: str, sizes, *, loss=0.0, dup=0.0, jitter=0.0, ack_loss=None, seed=1, initial_psn=0,
             limit_s=60.0, params=None, trim=0.0):
    rng = random.Random(seed)
    p = params or TransportParams(mode=mode, mtu_bytes=256)
    req = Requester(p, Dcqcn(DcqcnParams(line_rate_pps=5000)), initial_psn=initial_psn)
    rsp = Responder(p, initial_psn=initial_psn)
    data = [rng.randbytes(n) for n in sizes]
    for d in data:
        req.post(len(d), 0.0, data=d)
    fwd = Channel(rng, loss=loss, dup=dup, jitter=jitter, trim=trim)
    rev = Channel(rng, loss=loss if ack_loss is None else ack_loss, dup=dup, jitter=jitter)
    delivered = []
    now, step = 0.0, 0.0001
    while not (req.done and len(delivered) == len(data)) and now < limit_s:
        pkt = req.next_packet(now)
        if pkt is not None:
            fwd.send(now, pkt)
        for pkt in fwd.due(now):
            if isinstance(pkt, tuple):
                for a in rsp.on_trimmed(pkt[1].psn, now):
                    rev.send(now, a)
                continue
            acks, done, _cnp = rsp.on_data(pkt.psn, pkt.opcode, pkt.payload, now, ackreq=pkt.ackreq,
                                           terms=req.terms)
            delivered += done
            for a in acks:
                rev.send(now, a)
        late = rsp.poll(now)
        if late is not None:
            rev.send(now, late)
        for a in rev.due(now):
            req.on_ack(a, now)
        now += step
    return data, delivered, req, rsp, now


@pytest.mark.parametrize("mode", MODES)
def test_a_clean_channel_delivers_everything_once_with_coalesced_acks(mode):
    data, delivered, req, rsp, _ = transfer(mode, [1, 255, 256, 257, 5000, 100])
    assert [d.data for d in delivered] == data
    assert [d.msn for d in delivered] == list(range(1, 7))
    assert req.stats.retransmitted == 0 and req.stats.timeouts == 0
    packets = sum(-(-len(d) // 256) for d in data)
    assert req.stats.sent == packets and rsp.stats.acks < packets, "ACKs coalesced"
    assert all(m.completed_at is not None and m.completed_at > m.posted_at for m in req.messages)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("loss,dup,jitter", [(0.05, 0.0, 0.0), (0.0, 0.05, 0.0), (0.0, 0.0, 0.003),
                                             (0.03, 0.03, 0.003)])
def test_loss_duplication_and_reordering_deliver_every_message_once_in_order(mode, seed, loss, dup, jitter):
    rng = random.Random(seed)
    sizes = [rng.randint(1, 3000) for _ in range(40)]
    data, delivered, req, rsp, now = transfer(mode, sizes, loss=loss, dup=dup, jitter=jitter, seed=seed)
    assert req.done, f"stuck at {now:.1f} s: una {req.una} of {req.posted_seq}"
    assert [d.data for d in delivered] == data
    if loss:
        assert req.stats.retransmitted > 0


def test_selective_repeat_resends_less_than_go_back_n():
    sizes = [2000] * 100
    resent = {m: transfer(m, sizes, loss=0.02, seed=7)[2].stats.retransmitted for m in MODES}
    assert 0 < resent[SELECTIVE_REPEAT] < resent[GO_BACK_N] / 2, resent


def test_selective_repeat_resends_a_lost_retransmission_when_a_later_packet_is_sacked():
    """The resend of hole 1 is lost too: the SACK of packet 6, sent after it
    on the same in-order path, shows it, and 1 goes again at once, well
    before the timeout; SACKs of packets sent before the resend do not."""
    p = TransportParams(mode=SELECTIVE_REPEAT, mtu_bytes=100, rto_s=0.5)
    req = Requester(p, Dcqcn(DcqcnParams(line_rate_pps=1000)))
    req.post(700, 0.0)
    sent = [req.next_packet(t / 1000) for t in range(0, 12, 2)]
    assert [s.seq for s in sent] == [0, 1, 2, 3, 4, 5]
    nak = SYNDROME_NAK_PSN_SEQUENCE_ERROR
    req.on_ack(Ack(1, nak, 0, sack=(1, 0b1)), 0.013)               # 1 lost, 2 held
    assert req.next_packet(0.014).seq == 1                          # resent, and lost again
    assert req.next_packet(0.016).seq == 6
    req.on_ack(Ack(1, nak, 0, sack=(1, 0b1111)), 0.017)            # 3, 4, 5: sent before the resend
    assert req.next_packet(0.018) is None and req.stats.lost_again == 0
    req.on_ack(Ack(1, nak, 0, sack=(1, 0b11111)), 0.019)           # 6 was sent after it: the resend is lost
    again = req.next_packet(0.02)
    assert again.seq == 1 and again.retransmission and req.stats.lost_again == 1 and req.stats.timeouts == 0
    req.on_ack(Ack(6, SYNDROME_ACK, 1), 0.022)
    assert req.done and req.stats.retransmitted == 2


@pytest.mark.parametrize("mode", MODES)
def test_lost_acks_are_recovered_by_the_timeout(mode):
    data, delivered, req, _rsp, _ = transfer(mode, [3000] * 10, ack_loss=0.5, seed=3)
    assert [d.data for d in delivered] == data and req.done


def test_a_lost_last_packet_is_recovered_by_the_timeout_with_backoff():
    p = TransportParams(mtu_bytes=100, rto_s=0.05)
    req = Requester(p, Dcqcn(DcqcnParams(line_rate_pps=1000)))
    req.post(300, 0.0)
    sent = [req.next_packet(t / 1000) for t in range(0, 10)]
    assert [s.seq for s in sent if s] == [0, 1, 2]
    assert req.on_ack(Ack(1, SYNDROME_ACK, 0), 0.011) == 2     # PSN 2 lost, no ACK will come
    assert req.next_packet(0.05) is None, "not before the timeout"
    again = req.next_packet(0.0611)
    assert again is not None and again.seq == 2 and again.retransmission and req.stats.timeouts == 1
    assert req.rto == pytest.approx(0.1), "backed off"
    assert req.next_packet(0.12) is None and req.next_packet(0.1612).seq == 2 and req.rto == pytest.approx(0.2)
    req.on_ack(Ack(2, SYNDROME_ACK, 1), 0.17)
    assert req.done and req.rto == pytest.approx(0.05), "progress resets the timeout"


@pytest.mark.parametrize("mode", MODES)
def test_psns_wrap(mode):
    data, delivered, req, _rsp, _ = transfer(mode, [2000] * 20, loss=0.03, initial_psn=PSN_MOD - 30, seed=5)
    assert [d.data for d in delivered] == data and req.done


def test_unwrap():
    assert unwrap(5, PSN_MOD - 3) == PSN_MOD + 5
    assert unwrap(PSN_MOD - 2, PSN_MOD + 1) == PSN_MOD - 2
    assert unwrap(7, 7) == 7


def test_go_back_n_responder_drops_out_of_order_and_naks_once_per_gap():
    r = Responder(TransportParams(mode=GO_BACK_N, ack_every=100))
    acks, done, _ = r.on_data(0, SEND_ONLY, b"a", 0.0)
    assert done[0].data == b"a" and acks == []
    acks, _, _ = r.on_data(2, SEND_ONLY, b"c", 0.0)
    assert acks == [Ack(1, SYNDROME_NAK_PSN_SEQUENCE_ERROR, 1)], "NAK names the PSN it expects"
    assert r.on_data(3, SEND_ONLY, b"d", 0.0)[0] == [], "one NAK per gap"
    acks, done, _ = r.on_data(1, SEND_ONLY, b"b", 0.0, ackreq=True)
    assert [d.data for d in done] == [b"b"] and acks == [Ack(1, SYNDROME_ACK, 2)], "c and d were dropped"
    assert r.stats.dropped_out_of_order == 2


def test_selective_repeat_responder_keeps_out_of_order_and_sacks_it():
    r = Responder(TransportParams(mode=SELECTIVE_REPEAT, ack_every=100))
    r.on_data(0, SEND_FIRST, b"a", 0.0)
    r.on_data(2, SEND_MIDDLE, b"c", 0.0)
    (nak,), _, _ = r.on_data(3, SEND_LAST, b"d", 0.0)
    assert nak.is_nak and nak.psn == 1 and nak.sack == (1, 0b11), "PSN 1 missing; 2 and 3 held"
    acks, done, _ = r.on_data(1, SEND_MIDDLE, b"b", 0.0)
    assert [d.data for d in done] == [b"abcd"] and r.expected == 4
    assert acks == [Ack(3, SYNDROME_ACK, 1)]


def test_duplicates_are_acked_at_once_and_not_delivered_again():
    r = Responder(TransportParams(ack_every=100))
    r.on_data(0, SEND_ONLY, b"a", 0.0)
    acks, done, _ = r.on_data(0, SEND_ONLY, b"a", 0.0)
    assert done == [] and acks == [Ack(0, SYNDROME_ACK, 1)] and r.stats.duplicates == 1


def test_opcodes_out_of_place_are_counted_and_dropped():
    r = Responder(TransportParams())
    assert r.on_data(0, SEND_MIDDLE, b"x", 0.0)[1] == [], "a MIDDLE with no FIRST"
    assert r.on_data(0, 0x11, b"x", 0.0)[1] == [], "an ACK opcode in a data stream"
    r.on_data(0, SEND_FIRST, b"a", 0.0)
    assert r.on_data(1, WRITE_ONLY, b"x", 0.0)[1] == [], "a new message inside one"
    assert r.stats.malformed == 3 and r.expected == 1
    assert [d.data for d in r.on_data(1, SEND_LAST, b"b", 0.0)[1]] == [b"ab"]


def test_ce_marks_get_at_most_one_cnp_per_interval():
    r = Responder(TransportParams(cnp_interval_s=0.02))
    cnps = [r.on_data(i, SEND_ONLY, b"x", i * 0.005, ce=True)[2] for i in range(10)]
    assert cnps == [True, False, False, False, True, False, False, False, True, False]


def test_acks_outside_the_window_are_ignored():
    req = Requester(TransportParams(), Dcqcn())
    req.post(100, 0.0)
    assert req.on_ack(Ack(500, SYNDROME_ACK, 3), 0.0) == 0 and req.stats.stale_acks == 1 and req.una == 0


@pytest.mark.parametrize("kw,field_name", [({"mode": "sack"}, "mode"), ({"mtu_bytes": 0}, "mtu_bytes"),
                                            ({"ack_every": 0}, "ack_every"), ({"rto_s": 0}, "rto_s"),
                                            ({"rto_max_s": 0.01}, "rto_max_s"), ({"retry_cnt": 8}, "retry_cnt"),
                                            ({"retry_cnt": -1}, "retry_cnt")])
def test_bad_parameters_are_named(kw, field_name):
    with pytest.raises(ValueError, match=field_name):
        TransportParams(**kw)


def test_bad_messages_are_refused():
    req = Requester(TransportParams(), Dcqcn())
    with pytest.raises(ValueError, match="at least 1 byte"):
        req.post(0, 0.0)
    with pytest.raises(ValueError, match="kind"):
        req.post(10, 0.0, kind="read")


def test_the_timeout_follows_the_measured_rtt():
    p = TransportParams(mtu_bytes=100, rto_s=0.01, rto_max_s=1.0)
    req = Requester(p, Dcqcn(DcqcnParams(line_rate_pps=1000)))
    req.post(200, 0.0)
    assert req.next_packet(0.0).seq == 0 and req.next_packet(0.001).seq == 1
    req.on_ack(Ack(0, SYNDROME_ACK, 0), 0.1)                       # an RTT of 100 ms
    assert req.srtt == pytest.approx(0.1) and req.rto == pytest.approx(0.1 + 4 * 0.05)
    assert req.next_packet(0.25) is None, "packet 1 is not late yet: 0.249 s < rto 0.3 s"
    assert req.next_packet(0.302).retransmission


def test_an_rtt_sample_ends_when_the_ack_arrived_not_when_it_was_read():
    """The kernel's receive timestamp ends the sample: an ACK that waited
    80 ms for a descheduled agent is not 80 ms of the fabric's delay. A
    timestamp outside (sent, now] is not believed."""
    p = TransportParams(mtu_bytes=100, rto_s=0.01, rto_max_s=1.0)
    req = Requester(p, Dcqcn(DcqcnParams(line_rate_pps=1000)))
    req.post(300, 0.0)
    for t in (0.0, 0.001, 0.002):
        req.next_packet(t)
    req.on_ack(Ack(0, SYNDROME_ACK, 0), 0.1, arrived=0.02)           # read 80 ms after it came
    assert req.srtt == pytest.approx(0.02)
    req.on_ack(Ack(1, SYNDROME_ACK, 0), 0.2, arrived=0.0005)         # before packet 1 left: not believed
    assert req.min_rtt == pytest.approx(0.02) and req.srtt == pytest.approx(0.875 * 0.02 + 0.125 * 0.199)
    req.on_ack(Ack(2, SYNDROME_ACK, 0), 0.3, arrived=0.5)            # after it was read: not believed
    assert req.srtt == pytest.approx(0.875 * (0.875 * 0.02 + 0.125 * 0.199) + 0.125 * 0.298)


def silent_peer(params: TransportParams, messages: int = 3, size: int = 300, start: float = 0.0,
                req: Requester | None = None) -> tuple[Requester, float]:
    """A requester whose peer never answers, driven every ms from `start`
    until its queue pair fails (or 60 s)."""
    if req is None:
        req = Requester(params, Dcqcn(DcqcnParams(line_rate_pps=1000)), peer="10.0.2.1", qp=7)
    for _ in range(messages):
        req.post(size, start)
    now = start
    while now < start + 60:
        req.next_packet(now)
        if req.error is not None:
            break
        now = round(now + 0.001, 6)
    return req, now


def test_a_silent_peer_fails_the_queue_pair_after_retry_cnt_retries():
    p = TransportParams(mtu_bytes=100)          # the defaults: at least 0.2 s, doubling to 1 s; retry_cnt 7
    req, failed_at = silent_peer(p)
    assert req.error is not None and req.error.cause == RETRY_EXCEEDED
    assert req.stats.timeouts == p.retry_cnt + 1, "7 retries, and the 8th timeout is the error (verbs)"
    assert req.stats.retransmitted == p.retry_cnt * 9, "each retry resent the 9 packets (go-back-N)"
    assert failed_at == pytest.approx(0.2 + 0.4 + 0.8 + 5 * 1.0, abs=0.03)
    assert str(req.error) == ("queue pair 7 to 10.0.2.1: retry count exceeded: no ACK for 6.4 s, 7 retries "
                              "(retry_cnt 7)")
    assert [(m.completed_at, m.error) for m in req.messages] == [(failed_at, req.error)] * 3, \
        "every outstanding message completed with the error"
    assert req.pending_messages == 0 and req.next_packet(failed_at + 5) is None
    sent = req.stats.sent
    later = req.post(100, 7.0)
    assert (later.completed_at, later.error) == (7.0, req.error), "a later post fails at once"
    assert req.next_packet(7.5) is None and req.stats.sent == sent, "nothing more is sent"
    assert req.on_ack(Ack(8, SYNDROME_ACK, 3), 7.6) == 0, "an ACK too late changes nothing"


@pytest.mark.parametrize("retry_cnt", [0, 2])
def test_the_retry_count_is_how_many_retries(retry_cnt):
    p = TransportParams(mtu_bytes=100, rto_s=0.01, rto_max_s=0.04, retry_cnt=retry_cnt)
    req, failed_at = silent_peer(p, messages=1, size=100)
    assert req.stats.timeouts == retry_cnt + 1 and req.stats.retransmitted == retry_cnt
    assert failed_at == pytest.approx([0.01, 0.01 + 0.02 + 0.04][retry_cnt // 2], abs=0.003)


def test_progress_resets_the_retry_count():
    p = TransportParams(mtu_bytes=100, rto_s=0.01, rto_max_s=0.04, retry_cnt=3)
    req = Requester(p, Dcqcn(DcqcnParams(line_rate_pps=1000)), peer="10.0.2.1", qp=7)
    req.post(100, 0.0)
    now = 0.0
    while req.stats.timeouts < 3:                 # three retries without progress, then the ACK
        req.next_packet(now)
        now = round(now + 0.001, 6)
    assert req.retries == 3 and req.error is None
    req.on_ack(Ack(0, SYNDROME_ACK, 1), now)
    assert req.retries == 0 and req.messages[0].error is None and req.messages[0].completed_at == now
    req, _ = silent_peer(p, messages=1, size=100, start=now, req=req)
    assert req.error is not None and req.stats.timeouts == 3 + 4, "a fresh count of 3 retries after the progress"


def test_paused_time_does_not_count_toward_the_timeout_and_rtt_samples_stay_real():
    p = TransportParams(mtu_bytes=100, rto_s=0.01, rto_max_s=0.04, retry_cnt=0)
    req = Requester(p, Dcqcn(DcqcnParams(line_rate_pps=1000)), peer="10.0.2.1", qp=7)
    req.post(100, 0.0)
    assert req.next_packet(0.0) is not None
    req.paused(0.5)                               # the link paused half a second, its ACK perhaps held too
    assert req.next_packet(0.509) is None and req.stats.timeouts == 0, "0.509 s, of which 0.009 s unpaused"
    req.on_ack(Ack(0, SYNDROME_ACK, 1), 0.505)
    assert req.error is None and req.messages[0].completed_at == 0.505
    assert req.min_rtt == pytest.approx(0.505), "the RTT sample is the real time, pause included"
    assert req.rto == p.rto_max_s, "(that sample took the timeout to its top)"
    req.post(100, 0.6)
    assert req.next_packet(0.6) is not None
    req.paused(0.2)
    req.next_packet(0.839)
    assert req.error is None, "a pause after the send: not counted either"
    req.next_packet(0.841)
    assert req.error is not None and req.error.cause == RETRY_EXCEEDED, "0.041 s unpaused without an ACK: fails"
    with pytest.raises(ValueError, match="paused seconds"):
        req.paused(-1.0)


def agree(req_params: TransportParams, rsp_cc: str | None = None):
    """A requester (dcqcn) to 10.0.2.1 posting two messages, the responder
    at 10.0.2.1 for it, and what the responder answers its first packet."""
    req = Requester(req_params, Dcqcn(), peer="10.0.2.1", qp=7)
    rsp = Responder(TransportParams(), peer="10.0.1.1", qp=7, cc=rsp_cc)        # go-back-N
    msgs = [req.post(100, 0.0) for _ in range(2)]
    pkt = req.next_packet(0.0)
    acks, delivered, _ = rsp.on_data(pkt.psn, pkt.opcode, pkt.payload, 0.001, ackreq=True, terms=req.terms)
    return req, rsp, msgs, acks, delivered


def test_mismatched_modes_are_an_error_at_both_ends_naming_both():
    req, rsp, msgs, acks, delivered = agree(TransportParams(mode=SELECTIVE_REPEAT))
    assert delivered == [] and len(acks) == 1 and acks[0].is_refusal
    assert acks[0] == Ack(0, SYNDROME_NAK_INVALID_REQUEST, 0, terms=Terms(GO_BACK_N, None)), "its own terms"
    assert rsp.error is not None and rsp.error.cause == MISMATCHED_ENDS
    assert str(rsp.error) == ("queue pair 7 from 10.0.1.1: mismatched ends: 10.0.1.1 sends selective-repeat with "
                              "dcqcn, this end receives go-back-n with any congestion control")
    assert req.on_ack(acks[0], 0.002) == 0
    assert req.error is not None and req.error.cause == MISMATCHED_ENDS
    assert str(req.error) == ("queue pair 7 to 10.0.2.1: mismatched ends: this end sends selective-repeat with "
                              "dcqcn, 10.0.2.1 receives go-back-n with any congestion control")
    assert all(m.error is req.error and m.completed_at == 0.002 for m in msgs)
    assert req.next_packet(0.003) is None
    again, delivered, _ = rsp.on_data(1, SEND_ONLY, b"x", 0.004)       # even one that states nothing
    assert [a.is_refusal for a in again] == [True] and delivered == []
    assert rsp.stats.refused == 2 and rsp.expected == 0, "nothing accepted"


def test_a_congestion_control_the_responder_does_not_expect_is_refused_naming_both():
    req, rsp, _, acks, _ = agree(TransportParams(), rsp_cc="hpcc")
    req.on_ack(acks[0], 0.002)
    assert rsp.error is not None and "10.0.1.1 sends go-back-n with dcqcn, this end receives go-back-n with hpcc" \
        in str(rsp.error)
    assert req.error is not None and "this end sends go-back-n with dcqcn, 10.0.2.1 receives go-back-n with hpcc" \
        in str(req.error)


@pytest.mark.parametrize("rsp_cc", [None, "dcqcn"])
def test_ends_that_agree_go_on(rsp_cc):
    req, rsp, msgs, acks, delivered = agree(TransportParams(), rsp_cc=rsp_cc)
    assert [d.data for d in delivered] == [bytes(100)] and rsp.error is None
    req.on_ack(acks[0], 0.002)
    assert req.error is None and msgs[0].completed_at == 0.002 and msgs[0].error is None


def test_a_refusal_stating_no_terms_fails_the_queue_pair_too():
    req = Requester(TransportParams(), Dcqcn(), peer="10.0.2.1", qp=7)
    req.post(100, 0.0)
    req.next_packet(0.0)
    req.on_ack(Ack(0, SYNDROME_NAK_INVALID_REQUEST, 0), 0.001)
    assert req.error is not None and req.error.cause == REFUSED and req.messages[0].error is req.error


# -- packet trimming: a packet a switch cut reaches the responder as its headers

@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_trimmed_packets_are_resent_at_once_never_by_a_timeout(mode, seed):
    """A tenth of the data packets (first sends and resends alike) arrive
    trimmed: every message is delivered once, in order, and no packet waited
    for the timeout, not even the last one."""
    data, delivered, req, rsp, _ = transfer(mode, [2000] * 20, trim=0.1, seed=seed)
    assert [d.data for d in delivered] == data and req.done
    assert rsp.stats.trimmed > 0 and req.stats.timeouts == 0
    if mode == SELECTIVE_REPEAT:
        assert req.stats.trim_naks == rsp.stats.trimmed, "one NAK a trim, each answered"


def test_selective_repeat_responder_naks_a_trimmed_packet_by_its_psn_with_the_sack():
    r = Responder(TransportParams(mode=SELECTIVE_REPEAT, ack_every=100))
    r.on_data(0, SEND_FIRST, b"a", 0.0)
    r.on_data(2, SEND_MIDDLE, b"c", 0.0)
    assert r.on_trimmed(3, 0.0) == [Ack(3, SYNDROME_NAK_TRIMMED, 0, sack=(1, 0b1))], "3 cut; 1 missing, 2 held"
    assert r.on_trimmed(0, 0.0) == [Ack(0, SYNDROME_ACK, 0)], "a trimmed copy of what arrived: where we are"
    assert r.on_trimmed(2, 0.0)[0].syndrome == SYNDROME_ACK, "held already"
    assert r.stats.trimmed == 3 and r.expected == 1 and r.stats.delivered_messages == 0


def test_go_back_n_responder_naks_a_trimmed_packet_it_expects_every_time():
    r = Responder(TransportParams(mode=GO_BACK_N, ack_every=100))
    r.on_data(0, SEND_ONLY, b"a", 0.0)
    nak = Ack(1, SYNDROME_NAK_PSN_SEQUENCE_ERROR, 1)
    assert r.on_trimmed(1, 0.0) == [nak], "the packet it expects: the NAK go-back-N answers"
    assert r.on_trimmed(2, 0.0) == [], "beyond it: dropped as any out-of-order packet"
    assert r.on_trimmed(1, 0.0) == [nak], "its resend cut too: NAKed again (no timeout)"


def test_a_trim_nak_resends_that_packet_now_and_takes_the_cumulative_ack_from_the_sack():
    req = Requester(TransportParams(mode=SELECTIVE_REPEAT, mtu_bytes=256), Dcqcn(DcqcnParams(line_rate_pps=5000)))
    req.post(256 * 5, 0.0)
    sent = [req.next_packet(t / 1000) for t in range(0, 20)]
    assert [p.seq for p in sent if p] == [0, 1, 2, 3, 4]
    assert req.on_ack(Ack(4, SYNDROME_NAK_TRIMMED, 0, sack=(2, 0b1)), 0.021) == 2, "0 and 1 arrived"
    again = req.next_packet(0.022)
    assert again is not None and again.retransmission and {again.seq, req.next_packet(0.03).seq} == {2, 4}, \
        "the trimmed 4 and the hole 2 below the SACKed 3: no timeout"
    assert req.stats.trim_naks == 1 and req.stats.timeouts == 0


# -- when a progress loop must wake (next_due) ---------------------------------------

def test_a_requester_is_due_at_its_pace_then_at_its_timeout_and_not_when_all_is_acknowledged():
    req = Requester(TransportParams(mtu_bytes=100, ack_every=100), Dcqcn(DcqcnParams(line_rate_pps=1000)),
                    peer="10.0.2.1", qp=7)
    assert req.next_due() is None, "nothing posted"
    req.post(300, 0.0)                           # 3 packets, 1 ms apart at 1,000 packets/s
    sent = []
    now = req.next_due()
    while now is not None and now < 0.1:
        pkt = req.next_packet(now)
        if pkt is not None:
            sent.append((round(now, 6), pkt.psn))
        now = req.next_due()
    assert [psn for _, psn in sent] == [0, 1, 2]
    assert [t for t, _ in sent] == pytest.approx([0.0, 0.001, 0.002])
    assert now == pytest.approx(0.0 + req.rto), "all sent: due when the oldest one times out"
    req.on_ack(Ack(2, SYNDROME_ACK, 1), 0.01)
    assert req.next_due() is None, "all acknowledged"


def test_a_silent_peer_woken_only_when_due_fails_as_one_polled_every_ms():
    p = TransportParams(mtu_bytes=100)
    polled, polled_failed_at = silent_peer(p)
    req = Requester(p, Dcqcn(DcqcnParams(line_rate_pps=1000)), peer="10.0.2.1", qp=7)
    for _ in range(3):
        req.post(300, 0.0)
    now, wakes = 0.0, 0
    while req.error is None and wakes < 10_000:
        req.next_packet(now)
        due = req.next_due()
        if due is None:
            break
        now, wakes = max(due, now), wakes + 1
    assert req.error is not None and req.error.cause == RETRY_EXCEEDED
    assert req.stats.timeouts == polled.stats.timeouts and req.stats.sent == polled.stats.sent
    # the same failure, no later: the polled loop finds each of its 8 timeouts up to its 1 ms grain late
    assert polled_failed_at - 0.008 <= now <= polled_failed_at
    assert wakes < 100, f"woken {wakes} times in {now:.1f} s (polled: {int(polled_failed_at * 1000)})"


def test_a_responder_is_due_when_its_delayed_ack_is():
    r = Responder(TransportParams(ack_every=100, ack_delay_s=0.002))
    assert r.next_due() is None
    r.on_data(0, SEND_ONLY, b"a", 0.010)
    assert r.next_due() == pytest.approx(0.012)
    assert r.poll(0.011) is None and r.poll(0.012) is not None
    assert r.next_due() is None, "acknowledged"
