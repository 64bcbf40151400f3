"""Host-side plane failover (hostagent/failover/plane_failover.py): on
loopback a sender whose first "plane" never answers moves every flow to the
second one, while one whose plane answers moves nothing. (Its wire format:
tests/unit/wire/test_plane_failover.py.)"""
import socket
import threading
import time

import pytest

from hostagent.failover import plane_failover as pf
from wire import plane_failover as wpf


NOWHERE = "192.0.2.1"      # TEST-NET-1: nobody answers there


def _loopback(host):
    return socket.socket(socket.AF_INET, socket.SOCK_DGRAM)


def _run(sender, receiver, seconds):
    """The sender for `seconds`; the receiver until 0.1 s after it stopped,
    so the last packet sent is read (stopped together, CI once missed it)."""
    stop_rx, stop_tx = threading.Event(), threading.Event()
    rx = threading.Thread(target=receiver.run, args=(stop_rx,))
    tx = threading.Thread(target=sender.run, args=(stop_tx,))
    rx.start()
    tx.start()
    time.sleep(seconds)
    stop_tx.set()
    tx.join()
    time.sleep(0.1)
    stop_rx.set()
    rx.join()
    sender.close()
    receiver.close()


def _plane_0_dies(failover: bool, base_port: int):
    """Plane 0 is a receiver on 127.0.0.1, plane 1 one on 127.0.0.2; plane 0
    stops after 0.4 s. Returns (sender, plane 1's receiver, when plane 0 died)."""
    plane0 = pf.FlowReceiver("rx0", netns_socket=_loopback, address="127.0.0.1")
    plane1 = pf.FlowReceiver("rx1", netns_socket=_loopback, address="127.0.0.2")
    sender = pf.FlowSender("tx", 3, {"peer": ["127.0.0.1", "127.0.0.2"]}, flows_per_peer=4, rate_pps=400,
                           timeout_ms=50, failover=failover, netns_socket=_loopback, base_port=base_port)
    stop0, stop = threading.Event(), threading.Event()
    threads = [threading.Thread(target=plane0.run, args=(stop0,)),
               threading.Thread(target=plane1.run, args=(stop,)), threading.Thread(target=sender.run, args=(stop,))]
    for t in threads:
        t.start()
    time.sleep(0.4)
    stop0.set()
    threads[0].join()
    plane0.close()
    died = time.monotonic()
    time.sleep(0.6)
    stop.set()
    for t in threads[1:]:
        t.join()
    sender.close()
    plane1.close()
    return sender, plane1, died


def test_flows_move_to_the_plane_that_answers():
    sender, plane1, died = _plane_0_dies(True, 47100)
    assert all(not any(t < died for t, *_ in f.moves) for f in sender.flows), "no move while plane 0 answered"
    # Every flow's first move is to plane 1, and it ends there. (Some flows have flapped back to the dead
    # plane for one timeout about 250 ms after the move, in runs on a busy 2-core machine: an ack gap
    # on plane 1 of more than 50 ms, not explained yet; they return 50 ms later.)
    assert all(f.plane == 1 and f.moves and f.moves[0][1:] == (0, 1) for f in sender.flows), \
        [(f.plane, [(round(t - died, 3), *m) for t, *m in f.moves]) for f in sender.flows]
    assert {flow for _, s, flow, _, plane in plane1.received if s == 3 and plane == 1} == {0, 1, 2, 3}
    assert min(t for t, *_ in plane1.received) > died, "plane 1 used only after"


def test_without_failover_flows_never_move():
    sender, plane1, _ = _plane_0_dies(False, 47300)
    assert all(f.plane == 0 and not f.moves for f in sender.flows)
    assert not plane1.received


def test_a_flow_never_acknowledged_does_not_move():
    receiver = pf.FlowReceiver("rx", netns_socket=_loopback)
    sender = pf.FlowSender("tx", 1, {"peer": [NOWHERE, "127.0.0.1"]}, flows_per_peer=2, rate_pps=200,
                           timeout_ms=20, netns_socket=_loopback, base_port=47500)
    _run(sender, receiver, 0.3)
    assert all(f.plane == 0 and not f.moves for f in sender.flows), "still connecting: nothing to time"


def test_flows_stay_where_acks_come_back():
    receiver = pf.FlowReceiver("rx", netns_socket=_loopback)
    sender = pf.FlowSender("tx", 1, {"peer": ["127.0.0.1", NOWHERE]}, flows_per_peer=4, rate_pps=400,
                           timeout_ms=100, netns_socket=_loopback, base_port=47200)
    _run(sender, receiver, 0.5)
    assert all(f.plane == 0 and not f.moves for f in sender.flows)
    assert len(receiver.received) == len(sender.sent) > 100


@pytest.mark.parametrize("kwargs, reason", [
    ({"peers": {}}, "at least one peer"),
    ({"rate_pps": 0}, "must be positive"),
    ({"flows_per_peer": 0}, "must be positive"),
], ids=["no peers", "no rate", "no flows"])
def test_bad_sender_settings_are_named(kwargs, reason):
    args = {"peers": {"p": ["127.0.0.1"]}, **kwargs}
    peers = args.pop("peers")
    with pytest.raises(ValueError, match=reason):
        pf.FlowSender("tx", 0, peers, netns_socket=_loopback, **args)


def test_a_malformed_ack_is_counted_not_fatal():
    sender = pf.FlowSender("tx", 0, {"p": ["127.0.0.1"]}, flows_per_peer=1, netns_socket=_loopback,
                           base_port=47400)
    flow = sender.flows[0]
    flow.seq, flow.waiting_since = 10, 0.5          # packets 0..9 out, waiting since 0.5
    try:
        sender._on_ack(b"\x02\x00\x00", 0.0)
        sender._on_ack(wpf.pack_ack(0, 0, {0: 5, 99: 7}), 1.0)     # flow 99 is not ours: ignored
        assert flow.acked == 5 and flow.waiting_since == 1.0, "new data acknowledged restarts the clock"
        sender._on_ack(wpf.pack_ack(0, 0, {0: 4}), 2.0)
        assert flow.acked == 5 and flow.waiting_since == 1.0, "an old ack changes nothing"
        sender._on_ack(wpf.pack_ack(0, 0, {0: 9}), 3.0)
        assert flow.waiting_since is None, "all acknowledged: no clock"
    finally:
        sender.close()
    assert sender.malformed == 1
