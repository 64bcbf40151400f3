"""Many PDCs of one host over one link in UET's mode: what the collective
library talks to with `--transport uet`, as it talks to the RC transport's
Endpoint (endpoint.py) otherwise, through the same calls: connect(peer, qp,
sport), post(data) on a connection, poll() for the messages delivered.

A connection is one PDC from this host to a peer, named by the same number
at both ends (the RC endpoint's queue pair number: the sender's PDC id), so
(peer, qp) names a sender here for ACKs and NACKs, and the peer's PDC for
data. Its packets are sprayed over `entropies` UDP source ports from the
connection's port (the caller's path choice is a starting point: UET
spreads over every path anyway), and delivered whole at the receiver in
any order. The collective library reads each connection's messages in the
order they were posted, so the endpoint hands a PDC's messages up in
message-id order, holding one that completed before an earlier one (its
packets still arrived in any order: what UET's unordered delivery buys is
that no packet waits for another, and no path for another).

UET is lossy by design (trimming, not PFC): there is no traffic class to
honour; pause_stats() says none. A failed connection (retry limit, or the
peer refuses it) lands in `errors`, once, as UetError naming the peer.
"""
from __future__ import annotations

import dataclasses
import time
from collections import defaultdict, deque
from typing import Callable, Optional, Sequence

from hostagent.rdma.cc.base import CongestionControl
from hostagent.rdma.cc.rccc import CreditScheduler
from hostagent.rdma.endpoint import QP_MIN, Link, PauseStats, Received
from hostagent.rdma.frames import Malformed, NotOurs, check_dscp
from hostagent.rdma.uet import AckSpray, UetError, UetMessage, UetParams, UetReceiver, UetSender
from hostagent.rdma.uet_agent import UetFrames, parse_uet
from wire.trimming import TRIMMED_DSCP

PDC_MAX = 0xFFFF                  # a PDC id has 16 bits
ENTROPY_RANGE = range(0xC000, 0x10000)


class UetConnection:
    """One way, this host -> peer, PDC `qp`, sprayed from UDP port `sport` on."""

    def __init__(self, peer: str, qp: int, sport: int, sender: UetSender, frames: UetFrames):
        self.peer, self.qp, self.sport = peer, qp, sport
        self.requester = sender                 # (the name the collective library reads, as on Endpoint's)
        self.frames = frames

    def post(self, data: bytes, now: float) -> UetMessage:
        return self.requester.post(len(data), now, data=data)

    @property
    def outstanding_bytes(self) -> int:
        return self.requester.unacked_bytes

    @property
    def idle(self) -> bool:
        return self.requester.done or self.requester.error is not None


class UetEndpoint:
    """This host's PDCs to its peers and theirs to it, over one link."""

    def __init__(self, link: Link, ip: str, mac: str, gateway_mac: str, params: UetParams,
                 congestion_control: Callable[[], CongestionControl], dscp: int = 0,
                 clock: Optional[Callable[[], float]] = None, accept_qps: Optional[range] = None,
                 trimmed_dscp: Optional[int] = TRIMMED_DSCP, entropies: int = 16,
                 credit_pps: Optional[float] = None,
                 entropies_of: Optional[Callable[[str], Sequence[int]]] = None,
                 control_dscp: Optional[int] = None):
        """credit_pps: this host's link in packets/s, for RCCC senders'
        credit (None: grant none, refuse them); entropies_of(peer): the
        entropy values of the connections to `peer` (the path model's, spread
        over the paths: collectives/paths.py path_aware_entropies; None:
        `entropies` consecutive ports from each connection's port);
        control_dscp: the DSCP of its ACKs, NACKs and credits (None: `dscp`)."""
        check_dscp(dscp, trimmed_dscp)
        if control_dscp is not None:
            check_dscp(control_dscp, trimmed_dscp)
        if not 1 <= entropies <= 4096:
            raise ValueError(f"entropies must be within 1..4096, got {entropies}")
        self.link = link
        self.ip, self.mac, self.gateway_mac = ip, mac, gateway_mac
        self._ip_bytes = bytes(int(x) for x in ip.split("."))
        self.params = params
        self.make_cc = congestion_control
        self.dscp, self.trimmed_dscp, self.entropies = dscp, trimmed_dscp, entropies
        self.control_dscp = control_dscp
        self.entropies_of = entropies_of
        if clock is None:
            t0 = time.monotonic()
            clock = lambda: time.monotonic() - t0    # noqa: E731
        self.clock = clock
        self.accept_qps = accept_qps
        self.connections: dict[tuple[str, int], UetConnection] = {}
        self._order: deque[UetConnection] = deque()
        credit = CreditScheduler(credit_pps, params.mtu_bytes) if credit_pps else None
        self.receiver = UetReceiver(params, credit=credit)
        self._back: dict[str, UetFrames] = {}
        self._back_sport: dict[str, int] = {}
        self._sprays: dict[str, AckSpray] = {}      # per peer: the entropies this host's ACKs leave with
        self._next_msg: defaultdict[tuple[str, int], int] = defaultdict(int)     # (peer, PDC) -> next id up
        self._early: dict[tuple[str, int], dict[int, Received]] = defaultdict(dict)
        self.ignored: defaultdict[str, int] = defaultdict(int)
        self.errors: list[UetError] = []

    def connect(self, peer: str, qp: int, sport: int) -> UetConnection:
        if not QP_MIN <= qp <= PDC_MAX:
            raise ValueError(f"a PDC id (the connection's number) must be within {QP_MIN}..{PDC_MAX}, got {qp}")
        if sport not in ENTROPY_RANGE:
            raise ValueError(f"UDP source port must be within 0xC000..0xFFFF (UET's entropy values), got {sport}")
        key = (peer, qp)
        if key in self.connections:
            raise ValueError(f"a connection to {peer} on PDC {qp} exists already")
        values = (tuple(self.entropies_of(peer)) if self.entropies_of is not None else
                  tuple(ENTROPY_RANGE.start + (sport - ENTROPY_RANGE.start + i) % len(ENTROPY_RANGE)
                        for i in range(self.entropies)))
        params = dataclasses.replace(self.params, entropies=values)
        conn = UetConnection(peer, qp, sport, UetSender(params, self.make_cc(), now=self.clock(), spdcid=qp,
                                                        peer=peer),
                             UetFrames(self.mac, self.gateway_mac, self.ip, peer, dscp=self.dscp,
                                       control_dscp=self.control_dscp))
        self.connections[key] = conn
        self._order.append(conn)
        return conn

    @property
    def idle(self) -> bool:
        return all(c.idle for c in self._order)

    def pause_stats(self) -> PauseStats:
        return PauseStats(None, 0, 0, 0, 0.0, 0, 0)

    def next_due(self) -> Optional[float]:
        """As Endpoint.next_due, coarser: now while a sender has anything
        unacknowledged or RCCC grants credit (their timers are not
        exposed: the caller's shortest wait applies), else the receiver's
        next delayed ACK."""
        if self.receiver.credit is not None or any(not c.requester.done for c in self._order):
            return self.clock()
        return self.receiver.next_timer()

    def poll(self, wait: float = 0.001) -> list[Received]:
        received: list[Received] = []
        frame = self.link.recv(0)
        while frame is not None:
            self._on_frame(frame, received)
            frame = self.link.recv(0)
        now = self.clock()
        next_send = None
        failed = []
        for _ in range(len(self._order)):
            conn = self._order[0]
            self._order.rotate(-1)
            snd = conn.requester
            out = snd.next_packet(now)
            while out is not None:
                self.link.send(conn.frames.data(out.entropy, out.request, out.payload))
                out = snd.next_packet(now)
            if snd.error is not None:
                failed.append(conn)
            elif not snd.done:
                t = snd.next_send_time()
                next_send = t if next_send is None else min(next_send, t)
        for conn in failed:
            self._order.remove(conn)
            if conn.requester.error is not None:
                self.errors.append(conn.requester.error)
        for peer, reply in self.receiver.poll(now):
            default = self._back_sport.get(peer, ENTROPY_RANGE.start)
            spray = self._sprays.get(peer)
            self._reply(peer, spray.pick(now, default) if spray is not None else default, reply)
        if not received and wait > 0:
            pause = wait if next_send is None else min(wait, max(0.0, next_send - self.clock()))
            frame = self.link.recv(pause) if pause > 0 else None
            if frame is not None:
                self._on_frame(frame, received)
        return received

    def _reply(self, peer: str, sport: int, reply) -> None:
        back = self._back.get(peer)
        if back is None:
            back = self._back[peer] = UetFrames(self.mac, self.gateway_mac, self.ip, peer, dscp=self.dscp,
                                                control_dscp=self.control_dscp)
        self.link.send(back.reply(sport, reply))

    def _on_frame(self, frame: bytes, received: list[Received]) -> None:
        if frame[30:34] != self._ip_bytes:
            self.ignored["not addressed to this host"] += 1
            return
        try:
            p = parse_uet(frame, self.trimmed_dscp)
        except (NotOurs, Malformed) as e:
            self.ignored[str(e).split(" (")[0][:60]] += 1
            return
        now = self.clock()
        if p.request is not None:
            qp = p.request.spdcid
            if self.accept_qps is not None and qp not in self.accept_qps:
                self.ignored["data for another endpoint's PDC"] += 1
                return
            self._back_sport[p.src_ip] = p.sport
            spray = self._sprays.setdefault(p.src_ip, AckSpray())
            duplicates = self.receiver.stats.duplicates
            if p.kind == "trimmed":
                replies = self.receiver.on_trimmed(p.request, now, peer=p.src_ip)
            else:
                replies, done = self.receiver.on_request(p.request, p.payload, now, ce=p.ce, peer=p.src_ip)
                for m in done:
                    self._deliver((p.src_ip, qp), m.msg_id, Received(p.src_ip, qp, m.data, m.at), received)
            spray.on_data(p.sport, self.receiver.stats.duplicates > duplicates, now)
            for r in replies:
                self._reply(p.src_ip, spray.pick(now, p.sport), r)
            return
        number = p.ack.dpdcid if p.ack is not None else p.nack.dpdcid if p.nack is not None else \
            p.credit.dpdcid if p.credit is not None else None
        conn = self.connections.get((p.src_ip, number)) if number is not None else None
        if conn is None:
            self.ignored[f"{p.kind} for no connection here"] += 1
        elif p.ack is not None:
            age = self.link.age()
            conn.requester.on_ack(p.ack, now, arrived=None if age is None else now - age)
        elif p.nack is not None:
            conn.requester.on_nack(p.nack, now)
        elif p.credit is not None:
            conn.requester.on_credit(p.credit, now)

    def _deliver(self, key: tuple[str, int], msg_id: int, m: Received, received: list[Received]) -> None:
        """A PDC's messages up in the order they were posted."""
        early = self._early[key]
        early[msg_id] = m
        while self._next_msg[key] in early:
            received.append(early.pop(self._next_msg[key]))
            self._next_msg[key] += 1

    def responder_stats(self) -> dict:
        return {"receiver": self.receiver.stats}
