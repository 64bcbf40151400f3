"""The RoCE agent's load-balancing options, through its real loops and CLI, with a
scripted socket in place of the raw one: `receive --reorder` and `send --plb`,
`--packets` (used by hostagent.traffic)."""
import csv
import json
import socket
import time

import pytest

from hostagent.ecn import roce
from wire.ecn import CE, ECT0
from wire.roce import OFFSETS, roce_cnp, roce_data

MACS = ("0a:00:01:00:00:01", "0a:00:00:00:01:01")
SPORT = roce.UDP_SPORT


class FakeSocket:
    """recv() returns the scripted frames, then times out (receiver) or would block (sender)."""

    def __init__(self, frames=(), endless=None):
        self.frames, self.endless, self.sent = list(frames), endless, []
        self.blocking = True

    def settimeout(self, t):
        self.timeout = t

    def setblocking(self, flag):
        self.blocking = flag

    def fileno(self):
        """What the sender waits on between packets: never readable (its scripted frames are read each round)."""
        if not hasattr(self, "_quiet"):
            self._quiet = socket.socketpair()
        return self._quiet[0].fileno()

    def recv(self, n):
        if self.frames:
            return self.frames.pop(0)
        if self.endless is not None:
            self.flip = not getattr(self, "flip", False)  # one frame per drain of the socket
            if self.flip:
                return self.endless
        if self.blocking:
            raise socket.timeout()
        raise BlockingIOError()

    def send(self, frame):
        self.sent.append(bytes(frame))

    def getsockopt(self, level, option, size):
        assert (level, option, size) == (roce.SOL_PACKET, roce.PACKET_STATISTICS, 8)
        return (0).to_bytes(4, "little") + getattr(self, "drops", 0).to_bytes(4, "little")


class LateFrames(FakeSocket):
    """recv() returns each frame once its time (s after the first recv) has come, else waits out the timeout."""

    def __init__(self, timed):
        super().__init__()
        self.timed, self.t0 = list(timed), None

    def recv(self, n):
        now = time.monotonic()
        self.t0 = self.t0 or now
        if self.timed and self.timed[0][0] <= now - self.t0:
            return self.timed.pop(0)[1]
        time.sleep(self.timeout)
        raise socket.timeout()


def data(psn, qp=7, ecn=ECT0, src="10.0.1.1"):
    return bytes(roce_data(*MACS, src, "10.0.5.1", qp=qp, psn=psn, payload=16, ecn=ecn))


RX = ["receive", "--iface", "x", "--src-ip", "10.0.5.1", "--src-mac", MACS[1], "--gw-mac", MACS[0],
      "--duration", "0.3"]
TX = ["send", "--iface", "x", "--src-ip", "10.0.1.1", "--src-mac", MACS[0], "--gw-mac", MACS[1],
      "--dst-ip", "10.0.5.1", "--qp", "7"]


def test_receiver_with_reorder_reports_per_flow(monkeypatch, tmp_path):
    frames = [data(0), data(2), data(1), data(1), data(3, ecn=CE), data(5), b"\x00" * 5, data(0, qp=9)]
    fake = FakeSocket(frames)
    monkeypatch.setattr(roce, "open_socket", lambda iface: fake)
    out = tmp_path / "rx"
    assert roce.main(RX + ["--reorder", "--reorder-timeout", "0.05", "--out", str(out)]) == 0
    s = json.loads(out.with_suffix(".json").read_text())
    f = s["flows"]["10.0.1.1/7"]
    r = f["reorder"]
    assert (r["received"], r["delivered"], r["duplicates"], r["held"]) == (6, 5, 1, 2)
    assert r["losses_declared"] == 1 and r["timeout_releases"] == 1     # PSN 4 never came
    assert r["depth_hist"] == {"0": 3, "1": 2} and r["reordered"] == 1
    assert f["lost"] == 1 and f["packets"] == 6 and f["ce"] == 1 and f["cnps_sent"] == 1
    assert s["flows"]["10.0.1.1/9"]["reorder"]["delivered"] == 1
    assert s["ignored"] == {"short": 1} and s["reorder"]["gap_timeout_s"] == 0.05 and s["t0_wall"] > 0
    assert [socket.inet_ntoa(x[OFFSETS.ip_src + 4:OFFSETS.ip_src + 8]) for x in fake.sent] == ["10.0.1.1"]
    rows = list(csv.DictReader(open(out.with_suffix(".csv"))))
    assert sum(int(x["lost"]) for x in rows if x["flow"] == "10.0.1.1/7") == 1
    assert max(int(x["reorder_held_max"]) for x in rows) == 1


def test_receiver_without_reorder_keeps_its_format(monkeypatch, tmp_path):
    monkeypatch.setattr(roce, "open_socket", lambda iface: FakeSocket([data(0), data(2)]))
    out = tmp_path / "rx"
    assert roce.main(RX + ["--duration", "0.1", "--out", str(out)]) == 0
    s = json.loads(out.with_suffix(".json").read_text())
    assert "reorder" not in s["flows"]["10.0.1.1/7"] and s["flows"]["10.0.1.1/7"]["lost"] == 1
    assert open(out.with_suffix(".csv")).readline().strip() == "t_s,flow,packets,ce,lost"


@pytest.mark.parametrize("quiet, received", [(None, 1), ("0.4", 3)])
def test_receiver_until_quiet_takes_what_arrives_after_the_duration(monkeypatch, tmp_path, quiet, received):
    """A paused class drains after its senders stopped: --until-quiet receives it, then stops once quiet."""
    monkeypatch.setattr(roce, "open_socket", lambda iface: LateFrames([(0.0, data(0)), (0.15, data(1)),
                                                                       (0.3, data(2))]))
    out = tmp_path / "rx"
    assert roce.main(RX + ["--duration", "0.1", "--out", str(out)]
                     + (["--until-quiet", quiet] if quiet else [])) == 0
    s = json.loads(out.with_suffix(".json").read_text())
    assert s["flows"]["10.0.1.1/7"]["packets"] == received
    if quiet:                       # the last packet at 0.3 s, then 0.4 s quiet
        assert 0.65 <= s["received_until_s"] < 2.0
    else:
        assert s["received_until_s"] < 0.5


def test_receiver_reports_what_its_socket_dropped(monkeypatch, tmp_path):
    fake = FakeSocket([data(0)])
    fake.drops = 7
    monkeypatch.setattr(roce, "open_socket", lambda iface: fake)
    out = tmp_path / "rx"
    assert roce.main(RX + ["--duration", "0.1", "--out", str(out)]) == 0
    assert json.loads(out.with_suffix(".json").read_text())["socket_drops"] == 7


def test_socket_dropped_is_the_kernels_count_for_a_full_buffer():
    """A real packet socket that is not read: what its buffer could not hold, counted once (the count resets)."""
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(roce.ETH_P_ALL))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 2048)
    sock.bind(("lo", 0))
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        for _ in range(200):
            udp.sendto(b"x" * 500, ("127.0.0.1", 9))
        assert roce.socket_dropped(sock) > 100
        assert roce.socket_dropped(sock) == 0
    finally:
        sock.close()
        udp.close()


def test_sender_stops_after_packets(monkeypatch):
    monkeypatch.setattr(roce, "open_socket", lambda iface: FakeSocket())
    a = roce.argparse.Namespace(iface="x", src_ip="10.0.1.1", src_mac=MACS[0], gw_mac=MACS[1], dst_ip="10.0.5.1",
                                qp=7, payload=16, not_ect=False, fixed_rate=True, sample_s=0.01, duration=5.0,
                                start_at=0.0, out=None, line_rate_pps=5000.0, packets=40)
    s = roce.run_sender(a, write=False)
    assert s["sent"] == 40 and s["plb"] is None


def test_sender_with_plb_rewrites_the_source_port(monkeypatch, tmp_path):
    cnp = bytes(roce_cnp(*MACS[::-1], "10.0.5.1", "10.0.1.1", qp=7))
    fake = FakeSocket(endless=cnp)                       # a CNP every time the sender looks
    monkeypatch.setattr(roce, "open_socket", lambda iface: fake)
    out = tmp_path / "tx"
    assert roce.main(TX + ["--duration", "0.25", "--fixed-rate", "--line-rate-pps", "2000", "--plb",
                           "--plb-slot-s", "0.01", "--plb-round-slots", "1", "--plb-rehash-rounds", "2",
                           "--plb-pause-s", "0", "--plb-seed", "1", "--payload", "16", "--out", str(out)]) == 0
    s = json.loads(out.with_suffix(".json").read_text())
    repaths = s["plb"]["repaths"]
    assert len(repaths) >= 3 and s["plb"]["cnps"] > 0
    chain = [0xC000 | 7] + [r["new_sport"] for r in repaths]
    assert all(r["old_sport"] == chain[i] for i, r in enumerate(repaths))
    ports = [int.from_bytes(f[SPORT:SPORT + 2], "big") for f in fake.sent]
    on_wire = [p for i, p in enumerate(ports) if i == 0 or p != ports[i - 1]]
    assert on_wire[0] == chain[0] and len(on_wire) >= 3
    it = iter(chain)                                     # the wire follows the chain, in order
    assert all(p in it for p in on_wire)
    rows = list(csv.DictReader(open(out.with_suffix(".csv"))))
    assert rows[0]["sport"] == str(0xC000 | 7)


@pytest.mark.parametrize("argv,message", [
    (RX + ["--reorder", "--reorder-timeout", "0"], "gap_timeout_s must be > 0"),
    (TX + ["--plb", "--plb-threshold", "2"], "cong_thresh must be within"),
])
def test_bad_options_are_named(monkeypatch, capsys, argv, message):
    monkeypatch.setattr(roce, "open_socket", lambda iface: FakeSocket())
    assert roce.main(argv) == 2
    assert message in capsys.readouterr().err


def test_sender_stamps_and_receiver_reports_one_way_delay(monkeypatch, tmp_path):
    """Sent packets carry the sender's monotonic clock; the receiver turns
    the stamps into delay percentiles per flow (unstamped packets: none)."""
    tx = FakeSocket()
    monkeypatch.setattr(roce, "open_socket", lambda iface: tx)
    a = roce.argparse.Namespace(iface="x", src_ip="10.0.1.1", src_mac=MACS[0], gw_mac=MACS[1], dst_ip="10.0.5.1",
                                qp=7, payload=16, not_ect=False, fixed_rate=True, sample_s=0.01, duration=5.0,
                                start_at=0.0, out=None, line_rate_pps=5000.0, packets=10)
    roce.run_sender(a, write=False)
    stamps = [int.from_bytes(f[roce.STAMP_AT:roce.STAMP_AT + 8], "big") for f in tx.sent]
    assert stamps == sorted(stamps) and stamps[0] > 0
    rx = FakeSocket(tx.sent + [data(0, qp=9)])
    monkeypatch.setattr(roce, "open_socket", lambda iface: rx)
    out = tmp_path / "rx"
    assert roce.main(RX + ["--duration", "0.1", "--out", str(out)]) == 0
    flows = json.loads(out.with_suffix(".json").read_text())["flows"]
    d = flows["10.0.1.1/7"]["delay_ms"]
    assert d["samples"] == 10 and 0 < d["p50"] <= d["p99"] <= d["max"] < 10_000
    assert flows["10.0.1.1/9"]["delay_ms"] is None, "zeros in the payload are no stamp"


def test_slow_receiver_pauses_its_uplink(monkeypatch, tmp_path):
    """`receive --drain-pps`: 20 class-3 packets at once into a NIC drained
    at 10 packets/s: a PFC pause at XOFF (4), drops beyond its buffer (8)."""
    frames = [bytes(roce_data(*MACS, "10.0.1.1", "10.0.5.1", qp=7, psn=i, payload=16, dscp=26))
              for i in range(20)]
    rx = FakeSocket(frames)
    monkeypatch.setattr(roce, "open_socket", lambda iface: rx)
    out = tmp_path / "rx"
    assert roce.main(RX + ["--duration", "0.1", "--drain-pps", "10", "--pfc-xoff", "4", "--pfc-xon", "2",
                           "--buffer-packets", "8", "--out", str(out)]) == 0
    s = json.loads(out.with_suffix(".json").read_text())
    assert s["slow_receiver"]["pauses_sent"] == 1 and s["slow_receiver"]["dropped"] == 12
    assert s["flows"]["10.0.1.1/7"]["packets"] == 8
    (pause,) = [f for f in rx.sent if f[12:14] == b"\x88\x08"]
    assert pause[:6] == bytes.fromhex("0180c2000001")


def test_sender_with_pcp_tags_its_frames_and_honours_that_priority(monkeypatch):
    """`send --pcp 3`: every frame priority-tagged (VLAN 0, PCP 3) with PSN,
    stamp and source port in their places behind the tag; a PFC pause of
    priority 3 stops it, one of another priority does not."""
    from scapy.contrib.roce import BTH
    from scapy.layers.l2 import Dot1Q, Ether
    from wire.lossless import MAX_PAUSE_QUANTA, encode_pfc

    def run(pause_class=None):
        frames = [encode_pfc(MACS[1], {pause_class: MAX_PAUSE_QUANTA})] if pause_class is not None else []
        tx = FakeSocket(frames)
        monkeypatch.setattr(roce, "open_socket", lambda iface: tx)
        assert roce.main(TX + ["--pcp", "3", "--duration", "0.1", "--fixed-rate", "--line-rate-pps", "200",
                               "--payload", "16"]) == 0
        return tx.sent

    sent = run()
    assert len(sent) >= 10
    for i, f in enumerate(sent):
        pkt = Ether(f)
        assert pkt[Dot1Q].prio == 3 and pkt[Dot1Q].vlan == 0 and pkt[BTH].psn == i
        assert pkt.sport == 0xC000 | 7
        assert int.from_bytes(bytes(pkt[BTH].payload)[:8], "big") > 0, "the stamp, behind the tag"
    assert run(pause_class=3) == [], "paused: priority 3 is the PCP"
    assert len(run(pause_class=4)) >= 10


def test_sender_goes_round_destinations_then_source_ports(monkeypatch):
    """--dst-ip A B C --sports 2: A, B, C on the first source port, then on
    the second, and again; each destination's PSNs count from 0 on their own."""
    sock = FakeSocket()
    monkeypatch.setattr(roce, "open_socket", lambda iface: sock)
    dsts = ["10.0.2.1", "10.0.3.1", "10.0.4.1"]
    a = roce.argparse.Namespace(iface="x", src_ip="10.0.1.1", src_mac=MACS[0], gw_mac=MACS[1], dst_ip=dsts,
                                sports=2, qp=7, payload=16, not_ect=False, fixed_rate=True, sample_s=0.01,
                                duration=5.0, start_at=0.0, out=None, line_rate_pps=5000.0, packets=12)
    s = roce.run_sender(a, write=False)
    assert s["sent"] == 12 and s["sent_to"] == dict.fromkeys(dsts, 4)
    O = OFFSETS
    seen = [(socket.inet_ntoa(f[O.ip_src + 4:O.ip_src + 8]), int.from_bytes(f[SPORT:SPORT + 2], "big"),
             int.from_bytes(f[O.bth_psn:O.bth_psn + 3], "big")) for f in sock.sent]
    base = 0xC000 | 7
    assert seen == [(d, base + k, 2 * r + k) for r in range(2) for k in range(2) for d in dsts]


def test_sender_refuses_plb_over_several_flows(monkeypatch):
    monkeypatch.setattr(roce, "open_socket", lambda iface: FakeSocket())
    a = roce.argparse.Namespace(iface="x", src_ip="10.0.1.1", src_mac=MACS[0], gw_mac=MACS[1],
                                dst_ip=["10.0.2.1", "10.0.3.1"], sports=1, plb=True, qp=7, payload=16,
                                not_ect=False, fixed_rate=True, sample_s=0.01, duration=5.0, start_at=0.0, out=None,
                                line_rate_pps=5000.0, packets=2)
    with pytest.raises(ValueError, match="--plb repaths one flow"):
        roce.run_sender(a, write=False)
