"""The agents' exit status (python -m hostagent.rdma): the real sender and
receiver loops joined by a socket pair (frames as datagrams, put where the
raw socket would be). A sender whose receiver is gone fails within the
retry limit, not at --duration; --messages N stopped short of N fails,
saying how many completed; mismatched modes fail at both ends, naming
both."""
import csv
import json
import re
import signal
import socket
import threading
import time

import pytest

from hostagent.rdma import agent
from tests.unit.hostagent.rdma.test_frames import int_to_host_frame

TX = ["--iface", "tx0", "--src-ip", "10.0.1.1", "--src-mac", "02:00:00:00:00:01", "--gw-mac", "02:00:00:00:00:02"]
RX = ["--iface", "rx0", "--src-ip", "10.0.2.1", "--src-mac", "02:00:00:00:00:02", "--gw-mac", "02:00:00:00:00:01"]
SEND = ["send", *TX, "--dst-ip", "10.0.2.1", "--qp", "3"]


@pytest.fixture
def link(monkeypatch):
    """The two ends of a socket pair: main() opens "tx0" and "rx0" as them."""
    ends = dict(zip(("tx0", "rx0"), socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)))
    monkeypatch.setattr(agent, "open_socket", lambda iface: ends[iface])
    handler = signal.getsignal(signal.SIGTERM)          # main() installs its own
    yield ends
    signal.signal(signal.SIGTERM, handler)
    for s in ends.values():
        s.close()


def receiver(ends, *args: str) -> threading.Thread:
    """The receiver's loop in a thread (main() would install a signal handler, which only the main thread may)."""
    t = threading.Thread(target=agent.run_receiver, args=(agent.parser().parse_args(["receive", *RX, *args]),),
                         kwargs={"sock": ends["rx0"]})
    t.start()
    return t


def test_a_sender_whose_receiver_is_gone_fails_within_the_retry_limit(link, tmp_path, capsys):
    start = time.monotonic()
    code = agent.main([*SEND, "--messages", "5", "--message-bytes", "2048", "--rto-s", "0.01", "--retry-cnt", "2",
                       "--duration", "30", "--out", str(tmp_path / "tx")])
    elapsed = time.monotonic() - start
    err = capsys.readouterr().err
    assert code == 1
    assert re.search(r"hostagent.rdma: send: queue pair 3 to 10.0.2.1: retry count exceeded: no ACK for [0-9.]+ s, "
                     r"2 retries \(retry_cnt 2\); 0 of 5 messages completed, 5 failed with this error", err), err
    assert elapsed < 3, f"{elapsed:.1f} s: the retry limit (0.01 + 0.02 + 0.04 s), not --duration"
    summary = json.loads((tmp_path / "tx.json").read_text())
    assert (summary["timeouts"], summary["messages_completed"], summary["messages_failed"]) == (3, 0, 5)
    with open(tmp_path / "tx.messages.csv") as f:
        rows = list(csv.DictReader(f))
    assert [(r["completed_s"], r["error"]) for r in rows] == [("", "retry count exceeded")] * 5


def test_a_healthy_transfer_cut_short_by_duration_fails_saying_how_much_completed(link, tmp_path, capsys):
    rx = receiver(link, "--duration", "2", "--out", str(tmp_path / "rx"))
    code = agent.main([*SEND, "--messages", "40", "--message-bytes", "4096", "--line-rate-pps", "200",
                       "--duration", "0.5", "--out", str(tmp_path / "tx")])       # 160 packets need 0.8 s
    rx.join()
    summary = json.loads((tmp_path / "tx.json").read_text())
    n = summary["messages_completed"]
    assert code == 1 and 0 < n < 40 and summary["error"] is None and summary["timeouts"] == 0, summary
    assert f"hostagent.rdma: send: --duration 0.5 s ran out with {n} of 40 messages completed" \
        in capsys.readouterr().err


def test_a_complete_transfer_exits_0(link, tmp_path, capsys):
    rx = receiver(link, "--duration", "2", "--out", str(tmp_path / "rx"))
    code = agent.main([*SEND, "--messages", "5", "--message-bytes", "4096", "--line-rate-pps", "2000",
                       "--duration", "10", "--out", str(tmp_path / "tx")])
    rx.join()
    assert code == 0 and "hostagent.rdma" not in capsys.readouterr().err
    sent, got = (json.loads((tmp_path / f"{end}.json").read_text()) for end in ("tx", "rx"))
    assert sent["messages_completed"] == 5
    flow = got["flows"]["10.0.1.1/3"]
    assert flow["delivered_messages"] == 5 and flow["refused"] == 0 and flow["error"] is None
    # what each end's socket dropped, for the run's fidelity verdict: the kernel keeps no packet
    # statistics for a socket pair, so neither says (a packet socket's count: tests/unit/hostagent/ecn)
    assert sent["socket_drops"] is None and got["socket_drops"] is None


def test_the_receiver_keeps_each_packets_departure_from_the_last_switch(link, tmp_path):
    """INT to the host (HPCC): the last hop's tx time and the depth the packet
    met there, in arrival order, for the run's departure-spacing check."""
    rx = receiver(link, "--duration", "1", "--out", str(tmp_path / "rx"))
    last_hops = [(4_294_966_000 + 1250 * i) % (1 << 32) for i in range(4)]     # crossing 2^32 us
    for psn, t in enumerate(last_hops):
        link["tx0"].send(int_to_host_frame([(1, 0, 100, 5, 10), (2, psn, 200, t, 10)], psn=psn))
    rx.join()
    summary = json.loads((tmp_path / "rx.json").read_text())
    assert summary["int_last_hop_departures"] == [[t, q] for q, t in enumerate(last_hops)]
    assert summary["flows"]["10.0.1.1/7"]["received"] == 4


def test_mismatched_modes_fail_both_agents_naming_both(link, tmp_path, capsys):
    a = agent.parser().parse_args([*SEND, "--mode", "selective-repeat", "--messages", "5", "--message-bytes", "2048",
                                   "--duration", "10", "--out", str(tmp_path / "tx")])
    sent: dict = {}
    tx = threading.Thread(target=lambda: sent.update(agent.run_sender(a, sock=link["tx0"])))
    tx.start()
    code = agent.main(["receive", *RX, "--duration", "1", "--out", str(tmp_path / "rx")])    # go-back-N
    tx.join()
    err = capsys.readouterr().err
    assert code == 1
    assert "hostagent.rdma: receive: queue pair 3 from 10.0.1.1: mismatched ends: 10.0.1.1 sends selective-repeat " \
           "with dcqcn, this end receives go-back-n with any congestion control" in err, err
    assert "hostagent.rdma: receive: 1 queue pair(s) refused" in err
    assert agent.sender_failure(a, sent) == (
        "queue pair 3 to 10.0.2.1: mismatched ends: this end sends selective-repeat with dcqcn, 10.0.2.1 receives "
        "go-back-n with any congestion control; 0 of 5 messages completed, 5 failed with this error")
    flow = json.loads((tmp_path / "rx.json").read_text())["flows"]["10.0.1.1/3"]
    assert flow["delivered_messages"] == 0 and flow["refused"] >= 1


def test_frames_carry_the_kernels_receive_time():
    """recv_stamped: when the kernel received the frame (monotonic clock),
    not when it was read."""
    import socket
    import time

    from hostagent.ecn.roce import recv_stamped, stamp_arrivals
    tx, rx = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    with tx, rx:
        assert stamp_arrivals(rx)
        sent = time.monotonic()
        tx.send(b"frame")
        time.sleep(0.2)
        frame, received = recv_stamped(rx)
        read = time.monotonic()
    assert frame == b"frame" and received is not None
    assert sent - 0.01 <= received < read - 0.15
    assert not stamp_arrivals(object()), "a test link that is not a socket: no timestamps"


def test_dilation_slows_the_agents_time_constants_and_keeps_what_is_given():
    a = agent.parser().parse_args([*SEND, "--cc", "hpcc", "--line-rate-pps", "208", "--dilation", "4"])
    params = agent.transport_params(a)
    assert (params.rto_s, params.ack_delay_s) == (4 * agent.TransportParams.rto_s, 4 * agent.TransportParams.ack_delay_s)
    hpcc = agent.congestion_controls()["hpcc"](a).p
    assert hpcc.line_rate_pps == 208 and hpcc.base_rtt_s == 4 * agent.HpccParams.base_rtt_s
    given = agent.parser().parse_args([*SEND, "--rto-s", "0.3", "--dilation", "4"])
    assert agent.transport_params(given).rto_s == 0.3
    receive = agent.parser().parse_args(["receive", *RX, "--dilation", "2"])
    assert agent.transport_params(receive).cnp_interval_s == 2 * agent.TransportParams.cnp_interval_s
    assert agent.main([*SEND, "--dilation", "0.5"]) == 2       # refused before any socket opens


def test_data_may_not_wear_the_dscp_that_marks_trimmed_packets(capsys):
    assert agent.main([*SEND, "--dscp", "5"]) == 2                      # refused before any socket opens
    assert "DSCP 5 marks trimmed packets" in capsys.readouterr().err
    assert agent.parser().parse_args([*SEND, "--dscp", "5", "--trimmed-dscp", "9"]).trimmed_dscp == 9


def test_cc_param_sets_the_chosen_congestion_controls_constants_as_given():
    """Given values are the dilated network's already: taken as they are, the others' defaults dilated."""
    a = agent.parser().parse_args([*SEND, "--cc", "timely", "--line-rate-pps", "208", "--dilation", "4",
                                   "--cc-param", "t_low_s=0.02", "--cc-param", "hai_after=3"])
    timely = agent.congestion_controls()["timely"](a).p
    assert (timely.t_low_s, timely.hai_after) == (0.02, 3) and isinstance(timely.hai_after, int)
    assert timely.t_high_s == 4 * agent.TimelyParams.t_high_s and timely.line_rate_pps == 208
    dcqcn = agent.parser().parse_args([*SEND, "--cc", "dcqcn", "--cc-param", "byte_counter_bytes=9e6"])
    assert agent.congestion_controls()["dcqcn"](dcqcn).params.byte_counter_bytes == 9_000_000
    # the receiver's part: DCQCN's CNP interval N, which its responder keeps
    receive = agent.parser().parse_args(["receive", *RX, "--dilation", "2", "--cc-param", "cnp_interval_s=0.05"])
    assert agent.transport_params(receive).cnp_interval_s == 0.05


@pytest.mark.parametrize("args,message", [
    ([*SEND, "--cc", "hpcc", "--cc-param", "t_low_s=0.01"],
     "--cc-param t_low_s: not a parameter of hpcc (parameters: base_rtt_s, eta, expected_flows, max_stage, "
     "min_window_packets; HpccParams's fields)"),
    ([*SEND, "--cc", "hpcc", "--cc-param", "base_rtt_s=fast"], "argument --cc-param: base_rtt_s: expected a number, "
                                                              "got 'fast'"),
    ([*SEND, "--cc", "hpcc", "--cc-param", "base_rtt_s"], "argument --cc-param: expected NAME=VALUE, got 'base_rtt_s'"),
    ([*SEND, "--cc", "hpcc", "--cc-param", "base_rtt_s=nan"], "base_rtt_s: expected a finite number"),
    ([*SEND, "--cc", "swift", "--cc-param", "hops=2.5"], "--cc-param hops: expected a whole number"),
    ([*SEND, "--cc", "swift", "--cc-param", "line_rate_pps=100"],
     "--cc-param line_rate_pps: the agent's own option (--line-rate-pps), not a --cc-param"),
    ([*SEND, "--cc", "swift", "--cc-param", "hops=2", "--cc-param", "hops=3"], "--cc-param hops: given twice"),
    ([*SEND, "--cc", "timely", "--cc-param", "t_low_s=0.3"],
     "--cc-param t_low_s: invalid TIMELY parameters: t_low_s must be > 0 and below t_high_s, got 0.3 and 0.05"),
    (["receive", *RX, "--cc-param", "base_rtt_s=0.01"],
     "--cc-param base_rtt_s: not a parameter of the receiver (parameters: cnp_interval_s;"),
    (["receive", *RX, "--mode", "uet", "--cc-param", "cnp_interval_s=0.01"], "--mode uet's receiver takes none"),
])
def test_a_bad_cc_param_is_refused_by_name_before_any_socket_opens(args, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        agent.main(args)
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err
