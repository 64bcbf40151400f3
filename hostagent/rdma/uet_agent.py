"""The UET mode of the RDMA agent: `python -m hostagent.rdma send|receive
--mode uet` runs UET's reliable unordered delivery (uet.py) over a raw
socket, its frames Ether / IPv4 / UDP(sport = the packet's entropy, dport
4793) / PDS (wire/uet.py), built from a template and parsed without Scapy.

The sender sprays: every packet leaves with the next entropy value of the
PDC's set (`--entropies N`: N UDP source ports, from a base taken from the
PDC id), and the switches' ECMP hash spreads them over the paths. The
receiver serves every PDC of every sender that reaches it. Both write the
agent's summary (<out>.json) and the sender its messages
(<out>.messages.csv) as the RC mode does.
"""
from __future__ import annotations

import argparse
import select
import time
from collections import defaultdict
from dataclasses import dataclass
from typing import Optional, Union

from hostagent.ecn.roce import open_socket, recv_stamped, socket_dropped, stamp_arrivals
from hostagent.rdma.frames import ETH, L4, Malformed, NotOurs, _ip, set_lengths
from hostagent.rdma.output import percentiles, write_messages, write_summary
from hostagent.rdma.cc.rccc import CreditScheduler
from hostagent.rdma.grain import loop_grain
from hostagent.rdma.uet import AckSpray, UetParams, UetReceiver, UetSender
from hostagent.start import wait_for_start
from wire.ecn import CE, ECT0
from wire.ipv4 import UDP_BYTES, encode_udp_header
from wire.lossless import dscp_tos
from wire.uet_codec import (ACK_CC, CONTROL, NACK, REQUEST_TYPES, UET_PORT, AckCc, Credit, MalformedPds, Nack,
                            Request, decode_ack, decode_credit, decode_nack, decode_request, encode_ack, encode_credit,
                            encode_nack, encode_request, pds_type, request_payload_at)

UET = "uet"
PDS_AT = L4 + UDP_BYTES
ENTROPY_BASE = 0xC000
SAMPLE_S = 0.01


def entropies(pdc: int, count: int) -> tuple[int, ...]:
    """`count` UDP source ports for PDC `pdc`: consecutive from a base the
    PDC id chooses, within 0xC000..0xFFFF."""
    if not 1 <= count <= 4096:
        raise ValueError(f"--entropies must be within 1..4096, got {count}")
    base = (pdc * count) % (0x4000 - count + 1)
    return tuple(ENTROPY_BASE + base + i for i in range(count))


class UetFrames:
    """Frames from one host to one peer: Ethernet (to the gateway), IPv4 (DF,
    the class's DSCP; ECT(0) for data), UDP to 4793 (checksum 0). ACKs,
    NACKs and credits wear `control_dscp` when given (UE's control traffic
    class: a queue of its own, where trimming and data's queueing do not
    reach them), else the data's DSCP."""

    def __init__(self, src_mac: str, dst_mac: str, src_ip: str, dst_ip: str, dscp: int = 0,
                 control_dscp: Optional[int] = None):
        self._head = bytearray(encode_udp_header(src_mac, dst_mac, src_ip, dst_ip, ENTROPY_BASE, UET_PORT,
                                                 tos=dscp_tos(dscp, ECT0)))
        self._tos_data = dscp_tos(dscp, ECT0)
        self._tos_ctrl = dscp_tos(dscp if control_dscp is None else control_dscp, 0)

    def _frame(self, tos: int, sport: int, pds: bytes) -> bytes:
        self._head[L4:L4 + 2] = sport.to_bytes(2, "big")
        set_lengths(self._head, tos, len(pds))
        return bytes(self._head) + pds

    def data(self, entropy: int, request: Request, payload: bytes) -> bytes:
        return self._frame(self._tos_data, entropy, encode_request(request) + payload)

    def reply(self, sport: int, reply: Union[AckCc, Nack, Credit]) -> bytes:
        """An ACK_CC, NACK or CREDIT, back on the entropy of the packet it answers."""
        pds = (encode_ack(reply) if isinstance(reply, AckCc) else encode_nack(reply) if isinstance(reply, Nack)
               else encode_credit(reply))
        return self._frame(self._tos_ctrl, sport, pds)


@dataclass(frozen=True)
class UetParsed:
    kind: str                       # "data", "trimmed", "ack", "nack", "credit"
    src_ip: str
    sport: int
    ce: bool = False
    request: Optional[Request] = None
    payload: bytes = b""
    ack: Optional[AckCc] = None
    nack: Optional[Nack] = None
    credit: Optional[Credit] = None


def parse_uet(frame: bytes, trimmed_dscp: Optional[int]) -> UetParsed:
    """The UET view of a frame, or NotOurs / Malformed naming why."""
    if len(frame) < PDS_AT:
        raise NotOurs("shorter than Ethernet/IPv4/UDP")
    if frame[12:14] != b"\x08\x00" or frame[ETH] >> 4 != 4:
        raise NotOurs("not IPv4")
    if frame[ETH] & 0x0F != 5:
        raise NotOurs("IPv4 options")
    if frame[ETH + 9] != 17 or int.from_bytes(frame[L4 + 2:L4 + 4], "big") != UET_PORT:
        raise NotOurs("not UET (UDP 4793)")
    src, sport = _ip(frame, ETH + 12), int.from_bytes(frame[L4:L4 + 2], "big")
    end = min(len(frame), ETH + int.from_bytes(frame[ETH + 2:ETH + 4], "big"))   # Ethernet may pad short frames
    pds = bytes(frame[PDS_AT:end])
    try:
        kind = pds_type(pds)
        if trimmed_dscp is not None and frame[ETH + 1] >> 2 == trimmed_dscp:
            if kind not in REQUEST_TYPES:
                raise Malformed(f"a trimmed packet of PDS type {kind}: only requests are trimmed")
            return UetParsed("trimmed", src, sport, request=decode_request(pds, headers_only=True))
        if kind in REQUEST_TYPES:
            return UetParsed("data", src, sport, ce=frame[ETH + 1] & 3 == CE, request=decode_request(pds),
                             payload=pds[request_payload_at(pds):])
        if kind == ACK_CC:
            return UetParsed("ack", src, sport, ack=decode_ack(pds))
        if kind == NACK:
            return UetParsed("nack", src, sport, nack=decode_nack(pds))
        if kind == CONTROL:
            return UetParsed("credit", src, sport, credit=decode_credit(pds))
    except MalformedPds as e:
        raise Malformed(str(e)) from None
    raise Malformed(f"PDS type {kind} is not one this transport uses")


def entropy_ports(text: str) -> tuple[int, ...]:
    """--entropy-ports: comma-separated UDP source ports, distinct, 0xC000..0xFFFF."""
    try:
        ports = tuple(int(x) for x in text.split(","))
    except ValueError:
        raise ValueError(f"--entropy-ports: expected comma-separated port numbers, got {text!r}") from None
    bad = [p for p in ports if not 0xC000 <= p <= 0xFFFF]
    if bad or len(set(ports)) != len(ports) or not ports:
        raise ValueError(f"--entropy-ports: distinct ports within 49152..65535, at least one, got {text!r}")
    return ports


def uet_params(a: argparse.Namespace, dilation) -> UetParams:
    given = {"rto_s": a.rto_s} if getattr(a, "rto_s", None) is not None else {}
    given.update({"retry_cnt": a.retry_cnt} if hasattr(a, "retry_cnt") else {})
    if hasattr(a, "qp"):
        given["entropies"] = entropy_ports(a.entropy_ports) if a.entropy_ports else entropies(a.qp, a.entropies)
    return dilation.params(UetParams, mtu_bytes=a.mtu, ack_every=a.ack_every, **given)


def run_uet_sender(a, cc, params: UetParams, stopping, sock=None) -> dict:
    """`stopping()`: whether SIGTERM asked the agent to stop."""
    snd = UetSender(params, cc, spdcid=a.qp, peer=a.dst_ip)
    frames = UetFrames(a.src_mac, a.gw_mac, a.src_ip, a.dst_ip, dscp=a.dscp, control_dscp=a.control_dscp)
    sock = sock or open_socket(a.iface)
    sock.setblocking(False)
    stamped = stamp_arrivals(sock)
    grain = loop_grain(a)
    ignored: defaultdict[str, int] = defaultdict(int)
    series = []
    late_s = wait_for_start(a)
    t0 = time.monotonic()
    posted = 0
    next_sample = 0.0
    while True:
        now = time.monotonic() - t0
        if snd.error is not None:
            break
        while posted < a.messages if a.messages else now < a.duration and \
                sum(m.completed_at is None for m in snd.messages[-3:]) < 2:
            snd.post(a.message_bytes, now)
            posted += 1
        if (a.messages and snd.done) or stopping() or now >= a.duration + (a.drain_s if not a.messages else 0.0):
            break
        while True:
            try:
                rx, received = recv_stamped(sock) if stamped else (sock.recv(4096), None)
            except BlockingIOError:
                break
            try:
                p = parse_uet(rx, a.trimmed_dscp)
            except (NotOurs, Malformed) as e:
                ignored[str(e).split(" (")[0][:60]] += 1
                continue
            if p.src_ip != a.dst_ip:
                ignored["another peer"] += 1
            elif p.ack is not None and p.ack.dpdcid == a.qp:
                snd.on_ack(p.ack, now, arrived=None if received is None else received - t0)
            elif p.nack is not None and p.nack.dpdcid == a.qp:
                snd.on_nack(p.nack, now)
            elif p.credit is not None and p.credit.dpdcid == a.qp:
                snd.on_credit(p.credit, now)
            else:
                ignored["another PDC, or data to a sender"] += 1
        if now >= next_sample:
            series.append((round(now, 4), round(cc.rate_pps, 2),
                           None if cc.window_packets is None else round(cc.window_packets, 2),
                           snd.outstanding, snd.stats.sent, snd.stats.retransmitted))
            next_sample += SAMPLE_S
        now = time.monotonic() - t0
        out = snd.next_packet(now) if now < a.duration or a.messages else None
        if out is not None:
            try:
                sock.send(frames.data(out.entropy, out.request, out.payload))
            except OSError:
                ignored["tx-error"] += 1
        else:
            wait = snd.next_send_time() - (time.monotonic() - t0)
            select.select([sock], [], [], min(wait, grain.pace_s) if wait > 0 else grain.idle_s)
    completed = [m for m in snd.messages if m.completed_at is not None and m.error is None]
    fct_ms = [1000 * (m.completed_at - m.posted_at) for m in completed if m.completed_at is not None]
    elapsed = max((m.completed_at for m in completed if m.completed_at is not None), default=0.0)
    summary = {
        "role": "sender", "started_late_s": round(late_s, 3), "qp": a.qp, "src": a.src_ip, "dst": a.dst_ip, "cc": a.cc, "mode": UET,
        "message_bytes": a.message_bytes, "messages_posted": posted, "messages_completed": len(completed),
        "messages_failed": sum(m.error is not None for m in snd.messages),
        "error": None if snd.error is None else str(snd.error), "stopped_by_signal": stopping(),
        "completion_ms": percentiles(fct_ms),
        "goodput_bytes_per_s": round(len(completed) * a.message_bytes / elapsed, 1) if elapsed else 0.0,
        "sent": snd.stats.sent, "retransmitted": snd.stats.retransmitted, "timeouts": snd.stats.timeouts,
        "trim_nacks": snd.stats.trim_nacks, "lost": snd.stats.lost, "penalties": snd.stats.penalties,
        "acks": snd.stats.acks, "stale": snd.stats.stale, "retries": snd.retries,
        "entropies_used": len(snd.stats.by_entropy), "ignored": dict(ignored),
        "rtt_ms": {"smoothed": round(1000 * snd.srtt, 3) if snd.srtt is not None else None},
        "socket_drops": socket_dropped(sock),      # replies the kernel dropped (the agent did not keep up)
    }
    write_summary(a, summary, ("t", "rate_pps", "window_packets", "outstanding", "sent", "retransmitted"), series)
    write_messages(a, snd.messages)
    return summary


def run_uet_receiver(a, params: UetParams, stopping, sock=None) -> dict:
    """Every PDC that reaches this host; with --credit-pps R, RCCC's credit
    for this host's link of R packets/s."""
    sock = sock or open_socket(a.iface)
    sock.settimeout(loop_grain(a).receive_s)
    credit = (CreditScheduler(a.credit_pps, params.mtu_bytes, base_rtt_s=a.credit_rtt_s) if a.credit_pps
              else None)
    rcv = UetReceiver(params, credit=credit)
    back: dict[str, UetFrames] = {}
    per_peer: defaultdict[str, defaultdict[str, int]] = defaultdict(lambda: defaultdict(int))
    last_sport: dict[str, int] = {}
    sprays: dict[str, AckSpray] = {}         # per peer: the entropies its ACKs leave with
    ignored: defaultdict[str, int] = defaultdict(int)

    def count(peer: str, kind: str) -> None:
        per_peer[peer]["received"] += 1
        per_peer[peer]["trimmed"] += kind == "trimmed"

    def send(frame: bytes) -> None:
        try:
            sock.send(frame)
        except OSError:
            ignored["tx-error"] += 1

    wait_for_start(a)
    t0 = time.monotonic()
    while (now := time.monotonic() - t0) < a.duration and not stopping():
        try:
            rx = sock.recv(4096)
        except OSError:            # (TimeoutError included: nothing came)
            rx = None
        if rx is not None:
            try:
                p = parse_uet(rx, a.trimmed_dscp)
            except (NotOurs, Malformed) as e:
                ignored[str(e).split(" (")[0][:60]] += 1
                p = None
            if p is not None and p.request is None:
                ignored[f"{p.kind} to a receiver"] += 1
            elif p is not None and p.request is not None:
                if p.src_ip not in back:
                    back[p.src_ip] = UetFrames(a.src_mac, a.gw_mac, a.src_ip, p.src_ip, dscp=a.dscp,
                                               control_dscp=a.control_dscp)
                last_sport[p.src_ip] = p.sport
                count(p.src_ip, p.kind)
                spray = sprays.setdefault(p.src_ip, AckSpray())
                duplicates = rcv.stats.duplicates
                if p.kind == "trimmed":
                    replies = rcv.on_trimmed(p.request, now, peer=p.src_ip)
                else:
                    replies, done = rcv.on_request(p.request, p.payload, now, ce=p.ce, peer=p.src_ip)
                    per_peer[p.src_ip]["delivered_messages"] += len(done)
                    per_peer[p.src_ip]["delivered_bytes"] += sum(len(m.data) for m in done)
                spray.on_data(p.sport, rcv.stats.duplicates > duplicates, now)
                for r in replies:
                    send(back[p.src_ip].reply(spray.pick(now, p.sport), r))
        for ip, due in rcv.poll(now):
            send(back[ip].reply(sprays[ip].pick(now, last_sport[ip]), due))
    summary = {"role": "receiver", "ip": a.src_ip, "mode": UET, "errors": [], "ignored": dict(ignored),
               "flows": {ip: dict(v) for ip, v in sorted(per_peer.items())},
               "receiver": vars(rcv.stats), "pdcs": len(rcv.pdcs),
               "credit_granted_bytes": credit.granted_bytes if credit is not None else None,
               "socket_drops": socket_dropped(sock)}       # frames the kernel dropped (the agent did not keep up)
    write_summary(a, summary)
    return summary


