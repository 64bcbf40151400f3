"""The agent's UET mode (hostagent/rdma/uet_agent.py): its frames are
Scapy's bytes and parse back (a trimmed one by its PDS header), and the
real sender and receiver loops, joined by a socket pair, deliver every
message over every entropy value; a sender whose receiver is gone fails
within the retry limit; options of the RC mode it cannot honour are
refused by name."""
import json
import socket
import threading

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from hostagent.rdma import agent
from hostagent.rdma.frames import Malformed, NotOurs
from hostagent.rdma.uet_agent import UetFrames, entropies, parse_uet
from wire.ecn import ECT0
from wire.lossless import dscp_tos
from wire.trimming import trimmed
from wire.uet import UET_PORT, AckCc, Nack, PdsRequest, Request, UetMessage

REQ = Request(psn=9, spdcid=3, dpdcid=1, msg_id=2, offset=1024, length=4096, ackreq=True)


def test_data_frames_are_scapys_and_parse_back():
    f = UetFrames("02:00:00:00:00:01", "02:00:00:00:00:02", "10.0.1.1", "10.0.2.1", dscp=3)
    frame = f.data(0xC123, REQ, b"x" * 100)
    theirs = (Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
              / IP(src="10.0.1.1", dst="10.0.2.1", tos=dscp_tos(3, ECT0), flags="DF")
              / UDP(sport=0xC123, dport=UET_PORT, chksum=0)
              / PdsRequest(psn=9, spdcid=3, dpdcid=1, ackreq=1) / UetMessage(msg_id=2, offset=1024, length=4096)
              / (b"x" * 100))
    assert frame == bytes(theirs)
    p = parse_uet(frame, trimmed_dscp=5)
    assert (p.kind, p.src_ip, p.sport, p.request, p.payload) == ("data", "10.0.1.1", 0xC123, REQ, b"x" * 100)
    cut = parse_uet(trimmed(frame), trimmed_dscp=5)
    assert cut.kind == "trimmed" and cut.request is not None and cut.request.psn == 9
    ack = AckCc(cack_psn=8, ack_psn=9, spdcid=1, dpdcid=3, sack_base=10)
    assert parse_uet(f.reply(0xC123, ack), 5).ack == ack
    assert parse_uet(f.reply(0xC123, Nack(1, 9, 1, 3)), 5).nack == Nack(1, 9, 1, 3)


def test_acks_nacks_and_credits_wear_the_control_class_and_data_its_own():
    f = UetFrames("02:00:00:00:00:01", "02:00:00:00:00:02", "10.0.1.1", "10.0.2.1", dscp=3, control_dscp=46)
    ack = AckCc(cack_psn=8, ack_psn=9, spdcid=1, dpdcid=3, sack_base=10)
    assert IP(f.reply(0xC123, ack)[14:]).tos == dscp_tos(46, 0)
    assert IP(f.reply(0xC123, Nack(1, 9, 1, 3))[14:]).tos == dscp_tos(46, 0)
    assert IP(f.data(0xC123, REQ, b"x")[14:]).tos == dscp_tos(3, ECT0)
    plain = UetFrames("02:00:00:00:00:01", "02:00:00:00:00:02", "10.0.1.1", "10.0.2.1", dscp=3)
    assert IP(plain.reply(0xC123, ack)[14:]).tos == dscp_tos(3, 0), "without a control class: the data's DSCP"


@pytest.mark.parametrize("frame,error,words", [
    (b"\x00" * 20, NotOurs, "shorter than"),
    (bytes(Ether() / IP() / UDP(dport=4791) / (b"\x00" * 20)), NotOurs, "not UET"),
    (bytes(Ether() / IP() / UDP(dport=UET_PORT) / b"\x40\x00"), Malformed, "has 32 bytes"),
    (bytes(Ether() / IP() / UDP(dport=UET_PORT) / b"\x38\x00"), Malformed, "PDS type 7 is not one"),
    (bytes(Ether() / IP() / UDP(dport=UET_PORT) / (b"\xf8" + b"\x00" * 20)), Malformed, "PDS type 31"),
])
def test_frames_it_cannot_use_are_refused_naming_why(frame, error, words):
    with pytest.raises(error, match=words):
        parse_uet(frame, 5)


def test_entropies_are_distinct_ports_in_the_rocev2_range():
    for pdc in (0, 1, 3, 1000, 65535):
        e = entropies(pdc, 16)
        assert len(set(e)) == 16 and all(0xC000 <= x <= 0xFFFF for x in e)


TX = ["--iface", "tx0", "--src-ip", "10.0.1.1", "--src-mac", "02:00:00:00:00:01", "--gw-mac", "02:00:00:00:00:02"]
RX = ["--iface", "rx0", "--src-ip", "10.0.2.1", "--src-mac", "02:00:00:00:00:02", "--gw-mac", "02:00:00:00:00:01"]
SEND = ["send", *TX, "--dst-ip", "10.0.2.1", "--qp", "3", "--mode", "uet", "--cc", "nscc"]


@pytest.fixture
def link(monkeypatch):
    ends = dict(zip(("tx0", "rx0"), socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)))
    monkeypatch.setattr(agent, "open_socket", lambda iface: ends[iface])
    monkeypatch.setattr("hostagent.rdma.uet_agent.open_socket", lambda iface: ends[iface])
    yield ends
    for s in ends.values():
        s.close()


def test_the_uet_sender_and_receiver_deliver_every_message_over_every_entropy(link, tmp_path):
    args = agent.parser().parse_args(["receive", *RX, "--mode", "uet", "--duration", "4", "--out",
                                      str(tmp_path / "rx")])
    params = agent.uet_params(args, agent.dilation(args))
    t = threading.Thread(target=agent.run_uet_receiver, args=(args, params, lambda: False), kwargs={"sock": link["rx0"]})
    t.start()
    code = agent.main([*SEND, "--messages", "20", "--message-bytes", "5000", "--line-rate-pps", "5000",
                       "--duration", "10", "--out", str(tmp_path / "tx")])
    t.join()
    tx = json.loads((tmp_path / "tx.json").read_text())
    rx = json.loads((tmp_path / "rx.json").read_text())
    assert code == 0 and tx["messages_completed"] == 20 and tx["error"] is None
    assert tx["entropies_used"] == 16 and tx["mode"] == "uet"
    flow = rx["flows"]["10.0.1.1"]
    assert flow["delivered_messages"] == 20 and flow["delivered_bytes"] == 20 * 5000 and rx["pdcs"] == 1


def test_rccc_senders_are_served_by_a_receiver_that_grants_credit(link, tmp_path):
    args = agent.parser().parse_args(["receive", *RX, "--mode", "uet", "--duration", "4", "--credit-pps", "5000",
                                      "--out", str(tmp_path / "rx")])
    params = agent.uet_params(args, agent.dilation(args))
    t = threading.Thread(target=agent.run_uet_receiver, args=(args, params, lambda: False), kwargs={"sock": link["rx0"]})
    t.start()
    code = agent.main([*SEND[:-1], "rccc", "--messages", "10", "--message-bytes", "20000", "--line-rate-pps", "5000",
                       "--duration", "10", "--out", str(tmp_path / "tx")])
    t.join()
    rx = json.loads((tmp_path / "rx.json").read_text())
    assert code == 0 and rx["flows"]["10.0.1.1"]["delivered_bytes"] == 10 * 20000
    assert rx["credit_granted_bytes"] > 0 and rx["receiver"]["credits"] > 0


def test_a_uet_sender_whose_receiver_is_gone_fails_within_the_retry_limit(link, tmp_path, capsys):
    code = agent.main([*SEND, "--messages", "3", "--message-bytes", "2048", "--rto-s", "0.01", "--retry-cnt", "2",
                       "--duration", "30", "--out", str(tmp_path / "tx")])
    assert code == 1
    assert "PDC 3 to 10.0.2.1: retry count exceeded" in capsys.readouterr().err
    assert json.loads((tmp_path / "tx.json").read_text())["messages_failed"] == 3


@pytest.mark.parametrize("extra,words", [(["--tclass", "3"], "--mode uet takes no --tclass"),
                                         (["--mode", "selective-repeat", "--cc", "rccc"], "runs with --mode uet only"),
                                         (["--write"], "--mode uet takes no"),
                                         (["--entropies", "0"], "--entropies must be within 1..4096"),
                                         (["--mode", "selective-repeat", "--control-dscp", "46"],
                                          "--control-dscp is UET's control class"),
                                         (["--control-dscp", "5"], "DSCP 5 marks trimmed packets")])
def test_rc_options_uet_cannot_honour_are_refused(extra, words, capsys):
    assert agent.main([*SEND, *extra]) == 2
    assert words in capsys.readouterr().err


def test_entropies_chosen_by_the_fabrics_hash_model_spread_evenly_where_consecutive_ones_may_not():
    """The project's model of the switches' ECMP hash (hostagent/collectives/
    paths.py, UDP 4793) picks 16 entropy values with 4 on each of the 4 paths
    across fat-tree-k4's pods (8 on each of leaf-spine's 2); 16 consecutive
    ports, as a sender without the topology takes, left a path with 1 of 16
    for PDC 3 (and random ones do no better: a path with none in 6-8% of
    draws)."""
    from features import load_topology
    from hostagent.collectives.paths import PathModel, path_aware_entropies
    for name, src, dst, paths in (("leaf-spine", "h1", "h3", 2), ("fat-tree-k4", "h1", "h16", 4)):
        topo = load_topology(name)
        model = PathModel(topo)
        a, b = topo.hosts[src].primary.ip, topo.hosts[dst].primary.ip
        chosen = path_aware_entropies(model, a)(b)
        used: dict = {}
        for e in chosen:
            p = model.path(a, b, e, dport=UET_PORT)
            used[p] = used.get(p, 0) + 1
        assert len(chosen) == 16 and sorted(used.values()) == [16 // paths] * paths, (name, used)
    topo = load_topology("fat-tree-k4")
    model = PathModel(topo)
    a, b = topo.hosts["h1"].primary.ip, topo.hosts["h16"].primary.ip
    consecutive = [model.path(a, b, e, dport=UET_PORT) for e in entropies(3, 16)]
    assert min(consecutive.count(p) for p in set(consecutive)) == 1


def test_entropy_ports_are_checked():
    from hostagent.rdma.uet_agent import entropy_ports
    assert entropy_ports("49152,65535") == (49152, 65535)
    for bad in ("1,2", "49152,49152", "x", ""):
        with pytest.raises(ValueError, match="--entropy-ports"):
            entropy_ports(bad)
