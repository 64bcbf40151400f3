"""The congestion controls of hostagent/rdma/cc fed known feedback: each
gives the rate or window its paper's equations give, computed here by hand."""
import math

import pytest

from hostagent.ecn.dcqcn import DcqcnParams
from hostagent.rdma.cc.base import CongestionControl, Feedback, HopInfo
from hostagent.rdma.cc.dcqcn import Dcqcn
from hostagent.rdma.cc.hpcc import Hpcc, HpccParams
from hostagent.rdma.cc.swift import Swift, SwiftParams
from hostagent.rdma.cc.timely import Timely, TimelyParams


def ack(now=0.0, rtt=None, acked=1, seq=1, hops=(), next_seq=0):
    return Feedback(now=now, acked_packets=acked, acked_seq=seq, rtt_s=rtt, hops=hops, next_seq=next_seq)


@pytest.mark.parametrize("cc", [Dcqcn(), Timely(), Swift(), Hpcc()])
def test_every_algorithm_is_a_congestion_control(cc):
    def use(c: CongestionControl) -> float:
        c.advance(0.0)
        c.on_send(0.0, 1024)
        c.on_ack(ack())
        c.on_cnp(0.0)
        c.on_timeout(0.0)
        return c.rate_pps

    assert use(cc) > 0 and cc.name in ("dcqcn", "timely", "swift", "hpcc")


# -- TIMELY ---------------------------------------------------------------------

P_T = TimelyParams(line_rate_pps=1000, t_low_s=0.004, t_high_s=0.040, min_rtt_s=0.002, delta_pps=10,
                   alpha=0.875, beta=0.8)


def timely_at(rate, prev_rtt, diff=0.0):
    t = Timely(P_T)
    t.rate_pps, t.prev_rtt, t.diff = rate, prev_rtt, diff
    return t


def test_timely_below_t_low_adds_delta():
    t = timely_at(500, 0.003)
    t.on_ack(ack(rtt=0.003))
    assert t.rate_pps == 510


def test_timely_above_t_high_cuts_on_the_rtt():
    t = timely_at(500, 0.05)
    t.on_ack(ack(rtt=0.08))
    assert t.rate_pps == pytest.approx(500 * (1 - 0.8 * (1 - 0.040 / 0.08)))    # 300


def test_timely_positive_gradient_cuts_by_it():
    t = timely_at(500, 0.010)
    t.on_ack(ack(rtt=0.012))                 # new_diff 2 ms, diff = 0.875 * 2 ms, gradient 0.875
    assert t.rate_pps == pytest.approx(500 * (1 - 0.8 * 0.875))


def test_timely_negative_gradient_adds_and_turns_hyperactive_after_five():
    t = timely_at(500, 0.020)
    rates = []
    for i in range(6):
        t.on_ack(ack(rtt=0.020 - 0.001 * (i + 1)))
        rates.append(t.rate_pps)
    assert rates == [510, 520, 530, 540, 590, 640], "N = 5 from the fifth sample in a row"


def test_timely_first_sample_only_records_and_rate_stays_within_bounds():
    t = Timely(P_T)
    t.on_ack(ack(rtt=0.5))
    assert t.rate_pps == 1000 and t.prev_rtt == 0.5
    t.on_ack(ack(rtt=0.003))
    assert t.rate_pps == 1000, "capped at the line rate"


# -- Swift ----------------------------------------------------------------------

P_S = SwiftParams(base_target_s=0.004, per_hop_s=0.0005, hops=3, fs_range_s=0.004, fs_min_cwnd=0.1,
                  fs_max_cwnd=100, ai=1, beta=0.8, max_mdf=0.5, init_cwnd=16)


def test_swift_target_with_flow_scaling():
    s = Swift(P_S)
    alpha = 0.004 / (1 / math.sqrt(0.1) - 1 / math.sqrt(100))
    beta = -alpha / math.sqrt(100)
    assert s.target() == pytest.approx(0.004 + 3 * 0.0005 + alpha / math.sqrt(16) + beta)
    s.cwnd = 0.05                               # below fs_min_cwnd: the whole range
    assert s.target() == pytest.approx(0.004 + 0.0015 + 0.004)
    s.cwnd = 128                                # above fs_max_cwnd: none
    assert s.target() == pytest.approx(0.0055)


def test_swift_additive_increase_below_the_target():
    s = Swift(P_S)
    s.on_ack(ack(now=1.0, rtt=0.002, acked=4))
    assert s.cwnd == pytest.approx(16 + 4 / 16)
    s.cwnd = 0.5
    s.on_ack(ack(now=1.1, rtt=0.002, acked=1))
    assert s.cwnd == pytest.approx(1.5), "below one packet: + ai per acked packet"


def test_swift_decreases_once_per_rtt_and_at_most_max_mdf():
    s = Swift(P_S)
    target = s.target()
    s.on_ack(ack(now=1.0, rtt=0.010))
    assert s.cwnd == pytest.approx(16 * (1 - 0.8 * (0.010 - target) / 0.010))
    after = s.cwnd
    s.on_ack(ack(now=1.005, rtt=0.010))
    assert s.cwnd == after, "within one RTT of the last decrease: nothing"
    s.on_ack(ack(now=1.2, rtt=0.100))
    assert s.cwnd == pytest.approx(after * 0.5), "max_mdf caps the cut"


def test_swift_drops_to_the_least_window_after_timeouts_in_a_row():
    s = Swift(P_S)
    for i in range(P_S.retx_reset_threshold - 1):
        s.on_timeout(1.0 + i)
    assert s.cwnd == pytest.approx(16 * 0.5 ** (P_S.retx_reset_threshold - 1))
    s.on_ack(ack(now=10.0, rtt=0.001))
    assert s.retransmit_cnt == 0, "an ACK of new data resets the count"
    for i in range(P_S.retx_reset_threshold):
        s.on_timeout(20.0 + i)
    assert s.cwnd == P_S.min_cwnd, "the threshold-th timeout in a row: min_cwnd"


def test_swift_timeout_and_pacing_below_one_packet():
    s = Swift(P_S)
    s.on_timeout(1.0)
    assert s.cwnd == 8
    s.cwnd, s.rtt = 0.25, 0.004
    assert s.window_packets == 1 and s.rate_pps == pytest.approx(62.5), "one packet every rtt / cwnd"


# -- HPCC -----------------------------------------------------------------------

P_H = HpccParams(line_rate_pps=1000, mtu_bytes=1000, base_rtt_s=0.004, eta=0.95, max_stage=5, expected_flows=10)
B = 1_250_000.0          # a 10 Mbit/s hop, bytes/s


def hop(ts, tx, q):
    return (HopInfo(ts_s=ts, tx_bytes=tx, qlen_bytes=q, link_bytes_per_s=B),)


def test_hpcc_window_from_two_acks_hops():
    h = Hpcc(P_H)
    w_init = 1000 * 1000 * 0.004                             # 4000 bytes
    w_ai = w_init * 0.05 / 10                                # 20 bytes
    h.on_ack(ack(seq=1, hops=hop(1.000, 0, 6000), next_seq=10))
    assert h.w == w_init, "the first ACK only records"
    h.on_ack(ack(seq=2, hops=hop(1.002, 2500, 5000), next_seq=11))
    u = 5000 / (B * 0.004) + (2500 / 0.002) / B             # min queue 1.0 + rate 1.0
    big_u = 0.5 * 0 + 0.5 * u                                # tau 2 ms of T 4 ms: U = 1.0
    assert h.u == pytest.approx(big_u)
    assert big_u >= 0.95
    assert h.w == pytest.approx(w_init / (big_u / 0.95) + w_ai)
    assert h.wc == h.w and h.last_update_seq == 11 and h.inc_stage == 0
    assert h.rate_pps == pytest.approx(h.w / (0.004 * 1000))


def test_hpcc_fast_reaction_keeps_wc_until_an_rtt_passed():
    h = Hpcc(P_H)
    h.w = h.wc = 2000.0                                              # half a BDP, so an increase shows
    h.on_ack(ack(seq=1, hops=hop(1.000, 0, 0), next_seq=10))
    h.on_ack(ack(seq=2, hops=hop(1.004, 2000, 0), next_seq=12))     # u 0.4 < eta: additive, updates
    wc = h.wc
    assert wc == pytest.approx(2000 + 20) and h.inc_stage == 1 and h.last_update_seq == 12
    h.on_ack(ack(seq=5, hops=hop(1.008, 7000, 0), next_seq=14))     # u = 1.0: multiplicative, fast reaction
    assert h.u == pytest.approx(1.0)
    assert h.w == pytest.approx(wc / (1.0 / 0.95) + 20) and h.wc == wc, "Wc unchanged before seq 12 is acked"
    h.on_ack(ack(seq=13, hops=hop(1.012, 12000, 0), next_seq=20))
    assert h.wc == h.w and h.inc_stage == 0 and h.last_update_seq == 20


def test_hpcc_tx_bytes_wrap_and_max_stage():
    h = Hpcc(P_H)
    h.on_ack(ack(seq=1, hops=hop(1.000, 2**32 - 1000, 0), next_seq=2))
    h.on_ack(ack(seq=3, hops=hop(1.004, 1000, 0), next_seq=4))      # 2000 bytes across the wrap
    assert h.u == pytest.approx(2000 / 0.004 / B)
    h.inc_stage = 5
    h.on_ack(ack(seq=5, hops=hop(1.008, 3000, 0), next_seq=6))
    assert h.inc_stage == 0, "max_stage reached: a multiplicative step even below eta"


def test_hpcc_takes_the_most_utilised_hop():
    h = Hpcc(P_H)
    two = lambda ts, a, b: (HopInfo(ts, a, 0, B), HopInfo(ts, b, 0, B))   # noqa: E731
    h.on_ack(ack(seq=1, hops=two(1.0, 0, 0), next_seq=2))
    h.on_ack(ack(seq=3, hops=two(1.004, 1000, 4000), next_seq=4))
    assert h.u == pytest.approx(4000 / 0.004 / B)


@pytest.mark.parametrize("make,field_name", [
    (lambda: TimelyParams(t_low_s=0.05, t_high_s=0.04), "t_low_s"), (lambda: TimelyParams(beta=0), "beta"),
    (lambda: SwiftParams(max_mdf=1.5), "max_mdf"), (lambda: SwiftParams(init_cwnd=500), "init_cwnd"),
    (lambda: HpccParams(eta=0), "eta"), (lambda: HpccParams(base_rtt_s=0), "base_rtt_s"),
    (lambda: DcqcnParams(g=2), "g")])
def test_bad_parameters_are_named(make, field_name):
    with pytest.raises(ValueError, match=field_name):
        make()


def test_timely_updates_once_per_rtt():
    t = timely_at(500, 0.003)
    t.on_ack(ack(rtt=0.003, seq=1, next_seq=10))
    t.on_ack(ack(rtt=0.003, seq=5, next_seq=12))
    assert t.rate_pps == 510, "seq 5 was sent before the last change: no second step"
    t.on_ack(ack(rtt=0.003, seq=11, next_seq=14))
    assert t.rate_pps == 520


def test_timely_updates_after_an_rtt_even_when_the_cumulative_ack_stalls():
    t = timely_at(500, 0.003)
    t.on_ack(ack(now=1.0, rtt=0.003, seq=1, next_seq=10))
    assert t.rate_pps == 510
    t.on_ack(ack(now=1.002, rtt=0.003, seq=2, next_seq=12))
    assert t.rate_pps == 510, "within an RTT, below the mark: nothing"
    t.on_ack(ack(now=1.004, rtt=0.003, seq=2, next_seq=12))
    assert t.rate_pps == 520, "an RTT later: an update, though the ACK is still below the mark (go-back-N stalled)"


def test_hpcc_with_every_hop_idle_keeps_the_largest_window():
    h = Hpcc(P_H)
    h.inc_stage = 5                                                   # a multiplicative step is due
    h.on_ack(ack(seq=1, hops=hop(1.000, 0, 0), next_seq=2))
    h.on_ack(ack(seq=3, hops=hop(1.004, 0, 0), next_seq=4))         # nothing sent, no queue: U = 0
    assert h.u == 0 and h.w == P_H.w_init_bytes
