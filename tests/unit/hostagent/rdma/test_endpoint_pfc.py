"""The Endpoint honouring PFC (hostagent/rdma/endpoint.py): two endpoints on
a fake wire with a fake clock; pauses injected as the switch would send
them. A pause of its class stops its data for exactly the pause's time, a
resume restarts it at once, another class's pause does not; ACKs and CNPs
are held through a pause and go first after it; a pause longer than the
whole retry budget costs no retry; PFC frames are never 'ignored'."""
from __future__ import annotations

from collections import deque

import pytest

from hostagent.ecn.dcqcn import DcqcnParams
from hostagent.rdma.cc.dcqcn import Dcqcn
from hostagent.rdma.endpoint import Endpoint
from hostagent.rdma.frames import parse
from hostagent.rdma.transport import RETRY_EXCEEDED, TransportParams
from wire.lossless import encode_pfc, pause_us

A_IP, B_IP = "10.0.1.1", "10.0.2.1"
SWITCH_MAC = "02:00:00:00:00:fe"
LINK_MBPS = 100.0
CLASS = 3
QP = 0x100


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


class FakeLink:
    """One end of a wire: what it sends lands in the other end's inbox (or,
    while `hold` is set, in `held`: a switch queue holding it); every
    frame sent, and every wait poll() asked for, recorded. `stamp_age`: how
    long ago the host received each frame, as a RawLink's kernel timestamp
    tells (None: unknown)."""

    def __init__(self):
        self.inbox: deque[bytes] = deque()
        self.sent: list[bytes] = []
        self.waits: list[float] = []
        self.other: FakeLink | None = None
        self.hold = False
        self.held: list[bytes] = []
        self.stamp_age: float | None = None

    def send(self, frame: bytes) -> None:
        self.sent.append(frame)
        if self.hold:
            self.held.append(frame)
        elif self.other is not None:
            self.other.inbox.append(frame)

    def release(self) -> None:
        assert self.other is not None
        self.other.inbox.extend(self.held)
        self.held.clear()
        self.hold = False

    def recv(self, timeout: float):
        if timeout > 0:
            self.waits.append(timeout)
        return self.inbox.popleft() if self.inbox else None

    def wait(self, timeout: float) -> None:
        self.waits.append(timeout)

    def age(self) -> float | None:
        return self.stamp_age

    def kinds(self) -> list[str]:
        return [parse(f).kind for f in self.sent]


def pair(params: TransportParams | None = None, a_class: int | None = CLASS, b_class: int | None = CLASS):
    """Endpoints at A and B joined by a wire, on one fake clock, A with a
    connection to B."""
    params = params or TransportParams(mtu_bytes=256)
    clock = Clock()
    la, lb = FakeLink(), FakeLink()
    la.other, lb.other = lb, la

    def endpoint(link, ip, n, tclass):
        return Endpoint(link, ip, f"02:00:00:00:00:0{n}", SWITCH_MAC, params,
                        lambda: Dcqcn(DcqcnParams(line_rate_pps=100_000.0)), dscp=26, clock=clock,
                        tclass=tclass, link_mbps=LINK_MBPS)
    a, b = endpoint(la, A_IP, 1, a_class), endpoint(lb, B_IP, 2, b_class)
    return a, b, la, lb, clock, a.connect(B_IP, QP, 0xC001)


def pause(tclass: int, quanta: int) -> bytes:
    return encode_pfc(SWITCH_MAC, {tclass: quanta})


def data_sent(link: FakeLink) -> int:
    return link.kinds().count("data")


def test_a_pause_of_its_class_stops_data_for_exactly_its_time_and_poll_wakes_at_its_end():
    a, b, la, lb, clock, conn = pair()
    conn.post(bytes(1024), 0.0)                        # 4 packets
    la.inbox.append(pause(CLASS, 1000))                # 1000 quanta at 100 Mbit/s: 5.12 ms
    length = pause_us(1000, LINK_MBPS) / 1e6
    a.poll(wait=1.0)
    assert data_sent(la) == 0 and a.paused()
    assert la.waits[-1] == pytest.approx(length), "poll() waited for the pause's end, not the whole second"
    clock.t = length - 1e-5
    a.poll(wait=0)
    assert data_sent(la) == 0
    clock.t = length + 1e-5
    a.poll(wait=0)
    assert data_sent(la) >= 1 and not a.paused()
    for _ in range(10):
        clock.t += 0.001
        a.poll(wait=0)
        b.poll(wait=0)
    assert conn.idle and conn.requester.stats.sent == 4, "every packet kept through the pause, none lost"
    s = a.pause_stats()
    assert (s.tclass, s.pfc_frames, s.pauses, s.resumes, s.malformed) == (CLASS, 1, 1, 0, 0)
    assert s.paused_s == pytest.approx(length)
    assert dict(a.ignored) == {}, "a PFC frame is the NIC's, never 'ignored'"


def test_a_resume_restarts_the_class_at_once():
    a, _, la, _, clock, conn = pair()
    conn.post(bytes(1024), 0.0)
    la.inbox.append(pause(CLASS, 0xFFFF))              # 335 ms
    a.poll(wait=0)
    clock.t = 0.002
    a.poll(wait=0)
    assert data_sent(la) == 0
    la.inbox.append(pause(CLASS, 0))                   # resumed (quanta 0) at 2 ms
    a.poll(wait=0)
    assert data_sent(la) >= 1, "sent in the same poll that read the resume"
    s = a.pause_stats()
    assert (s.pauses, s.resumes) == (1, 1) and s.paused_s == pytest.approx(0.002)


def test_a_pause_of_another_class_does_not_stop_it():
    a, _, la, _, _, conn = pair()
    conn.post(bytes(1024), 0.0)
    la.inbox.append(pause(CLASS + 1, 0xFFFF))
    a.poll(wait=0)
    assert data_sent(la) == 1 and not a.paused()
    s = a.pause_stats()
    assert (s.pfc_frames, s.pauses, s.paused_s) == (1, 0, 0.0)
    assert a.pfc.pauses[CLASS + 1] == 1 and dict(a.ignored) == {}


def test_without_a_class_pauses_are_counted_not_honoured():
    a, _, la, _, _, conn = pair(a_class=None)
    conn.post(bytes(1024), 0.0)
    la.inbox.append(pause(CLASS, 0xFFFF))
    la.inbox.append(pause(CLASS, 0xFFFF)[:40])          # a runt MAC control frame
    a.poll(wait=0)
    assert data_sent(la) == 1
    s = a.pause_stats()
    assert (s.tclass, s.pfc_frames, s.pauses, s.malformed, s.paused_s) == (None, 1, 0, 1, 0.0)
    assert dict(a.ignored) == {}


def test_acks_and_cnps_are_held_through_a_pause_and_go_first_after_it():
    a, b, la, lb, clock, conn = pair()
    lb.inbox.append(pause(CLASS, 1000))                # B's uplink paused: 5.12 ms
    b.poll(wait=0)
    conn.post(bytes(1024), 0.0)
    for _ in range(4):                                 # A's packets reach B; B answers none of them yet
        clock.t += 0.0005
        a.poll(wait=0)
        b.poll(wait=0)
    assert data_sent(la) == 4 and lb.sent == [] and b.pause_stats().held_frames >= 1
    assert not conn.idle
    clock.t = 0.006                                    # the pause is over
    b.poll(wait=0)
    assert lb.kinds() and set(lb.kinds()) == {"ack"}
    a.poll(wait=0)
    assert conn.idle and conn.requester.stats.retransmitted == 0


def test_a_pause_longer_than_the_retry_budget_costs_no_retry_but_silence_after_it_fails():
    """Packets in flight wait in a switch that pauses the sender's uplink
    (refreshed every 100 ms) for a second, nine times the retry budget
    (timeouts 20 + 40 + 50 ms); then the switch delivers them and the ACKs come."""
    params = TransportParams(mtu_bytes=256, rto_s=0.02, rto_max_s=0.05, retry_cnt=2)
    a, b, la, lb, clock, conn = pair(params)
    msg = conn.post(bytes(1024), 0.0)
    la.hold = True                                     # the switch holds what A sends
    a.poll(wait=0)
    sent = data_sent(la)
    assert sent >= 1
    while clock.t < 1.0:
        if round(clock.t * 1000) % 100 == 0:
            la.inbox.append(pause(CLASS, 0xFFFF))
        a.poll(wait=0)
        clock.t = round(clock.t + 0.005, 6)
    assert data_sent(la) == sent and conn.requester.error is None and a.errors == []
    assert conn.requester.stats.timeouts == 0, "the pause counted toward no timeout"
    la.inbox.append(pause(CLASS, 0))
    la.release()
    for _ in range(20):
        a.poll(wait=0)
        b.poll(wait=0)
        clock.t += 0.001
    assert msg.completed_at is not None and msg.error is None
    assert conn.requester.stats.timeouts == 0 and conn.requester.stats.retransmitted == 0
    assert a.pause_stats().paused_s == pytest.approx(1.0), "paused from 0 to the resume at 1 s"

    later = conn.post(bytes(256), clock.t)             # then B falls silent, A not paused: the limit still holds
    la.hold = True
    resumed_at = clock.t
    while conn.requester.error is None and clock.t < resumed_at + 1.0:
        a.poll(wait=0)
        clock.t = round(clock.t + 0.001, 6)
    assert conn.requester.error is not None and conn.requester.error.cause == RETRY_EXCEEDED
    assert later.error is conn.requester.error and a.errors == [conn.requester.error]
    assert clock.t - resumed_at < 0.3


def test_a_bad_class_is_refused():
    with pytest.raises(ValueError, match="traffic class"):
        Endpoint(FakeLink(), A_IP, "02:00:00:00:00:01", SWITCH_MAC, TransportParams(), Dcqcn, tclass=8)
