"""The endpoint (hostagent/rdma/endpoint.py) ends an ACK's RTT sample when
the host received the ACK, not when its progress thread read it: the link's
`age()` (RawLink: the kernel's receive timestamp, SO_TIMESTAMPNS), as the
single-flow agent does (docs/rdma.md)."""
from __future__ import annotations

import socket
import time

import pytest

from hostagent.rdma import endpoint as endpoint_module
from hostagent.rdma.endpoint import RawLink
from tests.unit.hostagent.rdma.test_endpoint_pfc import pair


def deliver_one_message(stamp_age: float | None, read_late_s: float) -> float:
    """A one-packet message from A to B; B's ACK is read by A `read_late_s`
    after it reached A's link, which says it came `stamp_age` ago. A's
    smoothed RTT (its first sample)."""
    a, b, la, lb, clock, conn = pair(a_class=None, b_class=None)
    conn.post(bytes(100), 0.0)
    a.poll(wait=0)                      # the packet leaves at 0
    clock.t = 0.004
    b.poll(wait=0)                      # B reads it and ACKs (the last packet of a message asks for one)
    assert la.inbox, "B acknowledged"
    clock.t = 0.005 + read_late_s       # the ACK reached A at 5 ms; A reads it now
    la.stamp_age = stamp_age
    a.poll(wait=0)
    assert conn.idle
    return conn.requester.srtt


def test_an_ack_read_late_gives_the_rtt_up_to_its_arrival():
    assert deliver_one_message(stamp_age=0.080, read_late_s=0.080) == pytest.approx(0.005)


def test_without_a_timestamp_the_sample_ends_when_the_ack_is_read():
    assert deliver_one_message(stamp_age=None, read_late_s=0.080) == pytest.approx(0.085)


def test_a_timestamp_before_the_packet_left_is_not_believed():
    assert deliver_one_message(stamp_age=1.0, read_late_s=0.080) == pytest.approx(0.085)


def test_a_raw_link_tells_how_long_ago_the_kernel_received_a_frame(monkeypatch):
    tx, rx = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    monkeypatch.setattr(endpoint_module, "open_socket", lambda iface: rx)
    with tx, rx:
        link = RawLink("h1-eth0")
        assert link.stamped and link.age() is None
        assert link.recv(0) is None
        sent = time.monotonic()
        tx.send(b"an ACK")
        time.sleep(0.2)
        assert link.recv(0) == b"an ACK"
        age = link.age()
        assert age is not None and 0.19 <= age <= time.monotonic() - sent + 0.001
        sent = time.monotonic()
        tx.send(b"x" * 9000)            # a jumbo frame, whole
        assert link.recv(1.0) == b"x" * 9000
        age = link.age()                # no older than the frame (however late this ran)
        assert age is not None and age <= time.monotonic() - sent + 0.001
