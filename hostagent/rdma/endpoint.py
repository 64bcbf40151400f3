"""Many reliable connections of one host over one link: what a library on
top of the RC transport (the collectives) talks to, where the agent
(agent.py) runs one queue pair per process.

A connection goes one way, from this host to a peer, and is named by its
queue pair number, which both ends agree on: this host's requester sends
data to (peer, qp), the peer's responder answers with ACKs/NAKs/CNPs on the
same qp. So (peer address, qp) names one requester here for ACKs and one
responder here for data. Each connection has its own UDP source port (the
fabric's ECMP hash reads it: a caller picking ports picks paths), its own
congestion control, and delivers whole messages in order, exactly once.

The endpoint is driven by `poll()`: it reads what the link has, feeds the
transport, sends what the requesters may send now (paced by each one's
congestion control) and the responders' delayed ACKs, and returns the
messages delivered since the last call. `Link` is anything that sends and
receives Ethernet frames: a raw socket on the host's interface
(`RawLink`), or a test's in-memory hub. A link that knows when the host
received a frame (RawLink: the kernel's receive timestamp, SO_TIMESTAMPNS)
says how long ago (`age()`), and an ACK's RTT sample ends there, as a NIC
timestamps a completion: the time the progress thread took to read the ACK
(descheduled on a busy machine) is not taken for the fabric's queueing, as
in the single-flow agent (docs/rdma.md).

A connection that fails (its retry count exceeded, or the peer refused its
retransmission mode or congestion control), and a peer's connection this
endpoint refuses (the same terms are expected of it: this endpoint's mode
and congestion control), lands in `errors`, once, as the transport's
QpError naming the peer; the caller decides what that means for it.

PFC (a lossless class, docs/rdma.md): every frame read goes first to a
PauseState (hostagent/lossless), which takes the PFC frames (counted there,
never as ignored; broken MAC control frames counted as malformed). With a
traffic class `tclass` (the lossless class the endpoint's DSCP maps to at
the switches) and the host link's rate `link_mbps` (a pause's quanta are
512 bit times of it), the endpoint honours pauses of that class as a RoCE
NIC does: while the class is paused nothing of it leaves the host. The
requesters keep their packets (none is taken, so none is lost or counted
sent) and the responders' ACKs, NAKs and CNPs are held in order and go out
first when the pause ends: they carry the same DSCP, so the switch counts
them in the paused class's buffer, and an ACK sent into a pause would use
the headroom the pause keeps for packets already on the wire (a headroom
drop of an ACK is a loss like any other). Holding them delays the peers'
ACKs by the pause; their timeouts (rto_s 200 ms at least, doubling) allow
a retry or two for a pause refreshed past them, and any ACK after the pause
resets their retry count. The paused time does not count toward this
endpoint's own retransmission timeouts (Requester.paused): a pause, however
long and however often refreshed, costs its connections no retry, so a
paused-but-alive peer is never given up on (the single-flow agent,
hostagent/rdma/agent.py, likewise checks no timeout while paused). poll()
waits no longer than the pause's end, and a resume (time 0) restarts the
class at once. Without a class (None) no pause is honoured: the frames are
only counted.
"""
from __future__ import annotations

import contextlib
import os
import select
import socket
import time
from collections import defaultdict, deque
from dataclasses import dataclass
from typing import Callable, Optional, Protocol

from hostagent.ecn.roce import open_socket, recv_stamped, stamp_arrivals
from hostagent.lossless import PauseState
from hostagent.rdma.agent import hop_info
from hostagent.rdma.cc.base import CongestionControl
from hostagent.rdma.frames import FrameBuilder, Malformed, NotOurs, check_dscp, parse
from hostagent.rdma.transport import SEND, Ack, Message, QpError, Requester, Responder, TransportParams
from wire.lossless import CLASSES
from wire.trimming import TRIMMED_DSCP

QP_MIN, QP_MAX = 1, (1 << 24) - 1
SOCKET_BUFFER_BYTES = 4 << 20     # a burst of many connections' packets and ACKs
RECV_BYTES = 65536                # more than any frame the interface takes


class Link(Protocol):
    def send(self, frame: bytes) -> None: ...

    def recv(self, timeout: float) -> Optional[bytes]:
        """One frame, waiting at most `timeout` seconds (0: only what is there)."""
        ...

    def wait(self, timeout: float) -> None:
        """Return when a frame may be there, when wake() was called, or after
        `timeout` seconds."""
        ...

    def wake(self) -> None:
        """End a wait() now, from another thread (something was posted to
        send: a progress loop asleep until its next timer sends it now)."""
        ...

    def age(self) -> Optional[float]:
        """Seconds since the host received the frame recv() last returned,
        or None if the link cannot tell."""
        ...


class RawLink:
    """The host's interface, as the agent uses it (hostagent/ecn/roce.py)."""

    def __init__(self, iface: str):
        self.sock = open_socket(iface)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SOCKET_BUFFER_BYTES)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SOCKET_BUFFER_BYTES)
        self.sock.setblocking(False)
        self.tx_errors = 0
        self.stamped = stamp_arrivals(self.sock)
        self._arrived: Optional[float] = None     # the last frame's kernel timestamp, on time.monotonic()'s clock
        self._wake_r, self._wake_w = os.pipe()    # wake(): a byte that ends a wait()'s select
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)

    def send(self, frame: bytes) -> None:
        try:
            self.sock.send(frame)
        except OSError:         # refused by the interface (a full queue, a drop rule): lost, resent later
            self.tx_errors += 1

    def recv(self, timeout: float) -> Optional[bytes]:
        try:
            return self._read()
        except BlockingIOError:
            if timeout > 0 and select.select([self.sock], [], [], timeout)[0]:
                try:
                    return self._read()
                except (BlockingIOError, socket.timeout):
                    return None
            return None

    def _read(self) -> bytes:
        if not self.stamped:
            return self.sock.recv(RECV_BYTES)
        frame, self._arrived = recv_stamped(self.sock, RECV_BYTES)
        return frame

    def age(self) -> Optional[float]:
        return None if self._arrived is None else max(0.0, time.monotonic() - self._arrived)

    def wait(self, timeout: float) -> None:
        ready = select.select([self.sock.fileno(), self._wake_r], [], [], timeout)[0]
        if self._wake_r in ready:
            with contextlib.suppress(BlockingIOError):
                os.read(self._wake_r, 4096)

    def wake(self) -> None:
        with contextlib.suppress(BlockingIOError):      # (a full pipe: a wake is pending already)
            os.write(self._wake_w, b"w")

    def close(self) -> None:
        self.sock.close()
        os.close(self._wake_r)
        os.close(self._wake_w)


@dataclass(frozen=True)
class Received:
    """A message a peer sent on one of its connections to this host."""
    peer: str
    qp: int
    data: bytes
    at: float


class Connection:
    """One way, this host -> peer, on queue pair `qp` from UDP port `sport`."""

    def __init__(self, peer: str, qp: int, sport: int, requester: Requester, frames: FrameBuilder):
        self.peer, self.qp, self.sport = peer, qp, sport
        self.requester = requester
        self.frames = frames

    def post(self, data: bytes, now: float) -> Message:
        """Queue `data` as one message; on a failed connection it completes at once with the error."""
        return self.requester.post(len(data), now, kind=SEND, data=data)

    @property
    def outstanding_bytes(self) -> int:
        """Bytes posted on this connection and not yet acknowledged (queued
        behind the pace and the window, or in flight; the requester's count)."""
        return self.requester.unacked_bytes

    @property
    def idle(self) -> bool:
        """Everything posted is acknowledged, or has failed."""
        return self.requester.done or self.requester.error is not None


@dataclass(frozen=True)
class PauseStats:
    """What PFC did to an endpoint so far."""
    tclass: Optional[int]     # the class it honours (None: none)
    pfc_frames: int           # PFC frames received (any class)
    pauses: int               # pauses of its class received (time > 0; refreshes included)
    resumes: int              # resumes of its class received (time 0)
    paused_s: float           # seconds its class was paused (nothing of it sent)
    malformed: int            # MAC control frames that were not whole PFC frames
    held_frames: int          # ACKs, NAKs and CNPs held by a pause (sent when it ended)


class Endpoint:
    """This host's connections (requesters) and its peers' connections to it
    (responders), over one link."""

    def __init__(self, link: Link, ip: str, mac: str, gateway_mac: str, params: TransportParams,
                 congestion_control: Callable[[], CongestionControl], dscp: int = 0,
                 clock: Optional[Callable[[], float]] = None, accept_qps: Optional[range] = None,
                 tclass: Optional[int] = None, link_mbps: float = 100.0,
                 trimmed_dscp: Optional[int] = TRIMMED_DSCP):
        """accept_qps: the queue pairs this endpoint answers data on (None:
        all); another endpoint on the same host (another job) has others.
        clock: seconds, by default since this endpoint was made (the
        congestion controls start their timers at 0: on time.monotonic(),
        the machine's uptime, DCQCN's first call ran every 20 ms timer
        period since boot, tens of seconds of a collective's first step).
        tclass: the lossless class whose PFC pauses it honours (the class
        `dscp` maps to; None: it honours none); link_mbps: the host link's
        rate, the length of a pause quantum; trimmed_dscp: what marks a
        packet a switch trimmed (wire/trimming.py; None: no trimming)."""
        check_dscp(dscp, trimmed_dscp)
        if tclass is not None and not 0 <= tclass < CLASSES:
            raise ValueError(f"traffic class must be within 0..{CLASSES - 1}, got {tclass}")
        self.link = link
        self.ip, self.mac, self.gateway_mac = ip, mac, gateway_mac
        self._ip_bytes = bytes(int(x) for x in ip.split("."))
        self.params = params
        self.make_cc = congestion_control
        self.cc_name = congestion_control().name       # what this endpoint's responders expect of their peers
        self.dscp = dscp
        self.trimmed_dscp = trimmed_dscp
        if clock is None:
            t0 = time.monotonic()
            clock = lambda: time.monotonic() - t0    # noqa: E731
        self.clock = clock
        self.accept_qps = accept_qps
        self.connections: dict[tuple[str, int], Connection] = {}
        self._order: deque[Connection] = deque()
        self._responders: dict[tuple[str, int], tuple[Responder, FrameBuilder]] = {}
        self.ignored: defaultdict[str, int] = defaultdict(int)
        self.errors: list[QpError] = []        # connections failed and peers' connections refused, in order
        self.tclass = tclass
        self.pfc = PauseState(link_mbps)       # every PFC frame received, honoured for `tclass`
        self._held: deque[bytes] = deque()     # ACKs, NAKs, CNPs waiting for the pause to end
        self.held_frames = 0
        self._paused_credited = 0.0            # paused seconds the requesters have been told of

    def connect(self, peer: str, qp: int, sport: int) -> Connection:
        """The connection to `peer` on queue pair `qp` (the peer delivers it
        as (this host, qp)), sending from UDP port `sport`."""
        if not QP_MIN <= qp <= QP_MAX:
            raise ValueError(f"queue pair number must be within {QP_MIN}..{QP_MAX}, got {qp}")
        if not 1 <= sport <= 0xFFFF:
            raise ValueError(f"UDP source port must be within 1..65535, got {sport}")
        key = (peer, qp)
        if key in self.connections:
            raise ValueError(f"a connection to {peer} on queue pair {qp} exists already")
        conn = Connection(peer, qp, sport, Requester(self.params, self.make_cc(), now=self.clock(), peer=peer, qp=qp),
                          FrameBuilder(self.mac, self.gateway_mac, self.ip, peer, sport=sport, dscp=self.dscp))
        self.connections[key] = conn
        self._order.append(conn)
        return conn

    @property
    def idle(self) -> bool:
        """Everything posted here has been acknowledged, or has failed."""
        return all(c.idle for c in self._order)

    def paused(self, now: Optional[float] = None) -> bool:
        """Its class is paused (PFC) now: nothing of it is sent."""
        return self.tclass is not None and self.pfc.paused(self.tclass, self.clock() if now is None else now)

    def pause_stats(self) -> PauseStats:
        c = self.tclass
        return PauseStats(c, self.pfc.frames, self.pfc.pauses[c] if c is not None else 0,
                          self.pfc.resumes[c] if c is not None else 0,
                          self.pfc.paused_s(c, self.clock()) if c is not None else 0.0, self.pfc.malformed,
                          self.held_frames)

    def _pause_check(self, now: float) -> bool:
        """Whether its class is paused now; the paused time since the last
        check is told to every requester (their timeouts do not count it)."""
        if self.tclass is None:
            return False
        paused_s = self.pfc.paused_s(self.tclass, now)
        if paused_s > self._paused_credited:
            for conn in self._order:
                conn.requester.paused(paused_s - self._paused_credited)
            self._paused_credited = paused_s
        return self.pfc.paused(self.tclass, now)

    def next_due(self) -> Optional[float]:
        """The earliest time (on `clock`) poll() has something to do that no
        arriving frame brings: a requester's next paced packet or its
        retransmission timeout, a delayed ACK, the end of a pause that holds
        something; None: nothing until a frame arrives or more is posted."""
        due = [t for t in (conn.requester.next_due() for conn in self._order) if t is not None]
        if self.tclass is not None and (due or self._held):
            now = self.clock()
            if self.pfc.paused(self.tclass, now):        # nothing goes, and no timeout runs, until it ends
                due = [self.pfc.until[self.tclass]]
        due += [t for t in (rsp.next_due() for rsp, _ in self._responders.values()) if t is not None]
        return min(due, default=None)

    def poll(self, wait: float = 0.001) -> list[Received]:
        """One round: frames in, packets out. Waits for a frame at most
        `wait` seconds when there is nothing to send before then (while
        paused: before the pause ends)."""
        received: list[Received] = []
        frame = self.link.recv(0)
        while frame is not None:
            self._on_frame(frame, received)
            frame = self.link.recv(0)
        now = self.clock()
        paused = self._pause_check(now)
        if not paused:
            self._send_held()
        next_send = None
        failed: list[tuple[Connection, QpError]] = []
        for _ in range(len(self._order)):
            conn = self._order[0]
            self._order.rotate(-1)
            req = conn.requester
            if not paused:              # (paused: the requester keeps its packets, and checks no timeout)
                pkt = req.next_packet(now)
                while pkt is not None:
                    self.link.send(conn.frames.data(conn.qp, pkt.psn, pkt.opcode, pkt.payload, ackreq=pkt.ackreq,
                                                    terms=req.terms))
                    pkt = req.next_packet(now)
            if req.error is not None:
                failed.append((conn, req.error))
            elif not req.done:
                t = self.pfc.until[self.tclass] if paused and self.tclass is not None else req.next_send_time()
                next_send = t if next_send is None else min(next_send, t)
        for conn, error in failed:      # (a failed connection sends nothing more: out of the rotation)
            self._order.remove(conn)
            self.errors.append(error)
        for (peer, qp), (rsp, back) in self._responders.items():
            late = rsp.poll(now)
            if late is not None:
                self._send_ack(back, qp, late)
        if paused and self._held and self.tclass is not None:       # held frames go when the pause ends
            end = self.pfc.until[self.tclass]
            next_send = end if next_send is None else min(next_send, end)
        if not received and wait > 0:
            pause = wait if next_send is None else min(wait, max(0.0, next_send - self.clock()))
            frame = self.link.recv(pause) if pause > 0 else None
            if frame is not None:
                self._on_frame(frame, received)
        return received

    def _send_held(self) -> None:
        """What a pause held, in order, before anything else of the class."""
        while self._held:
            self.link.send(self._held.popleft())

    def _send_control(self, frame: bytes) -> None:
        """An ACK, NAK or CNP: sent now (after what a pause held), or held
        while the class is paused."""
        if self.paused():
            self._held.append(frame)
            self.held_frames += 1
        else:
            self._send_held()
            self.link.send(frame)

    def _send_ack(self, back: FrameBuilder, qp: int, ack: Ack) -> None:
        self._send_control(back.ack(qp, ack.psn, ack.syndrome, ack.msn, ack.sack, ack.hops, ack.terms))

    def _on_frame(self, frame: bytes, received: list[Received]) -> None:
        if self.pfc.on_frame(frame, self.clock()):     # PFC (or a broken MAC control frame): the NIC's
            return
        if frame[30:34] != self._ip_bytes:       # (a flooding bridge, a capture): not for this host
            self.ignored["not addressed to this host"] += 1
            return
        try:
            p = parse(frame, self.trimmed_dscp)
        except (NotOurs, Malformed) as e:
            self.ignored[str(e).split(" (")[0][:60]] += 1
            return
        now = self.clock()
        key = (p.src_ip, p.qp)
        if p.kind in ("data", "trimmed"):
            if self.accept_qps is not None and p.qp not in self.accept_qps:
                self.ignored["data for another endpoint's queue pair"] += 1
                return
            if key not in self._responders:
                self._responders[key] = (Responder(self.params, peer=p.src_ip, qp=p.qp, cc=self.cc_name),
                                         FrameBuilder(self.mac, self.gateway_mac, self.ip, p.src_ip,
                                                      sport=0xC000 | (p.qp & 0x3FFF), dscp=self.dscp))
            rsp, back = self._responders[key]
            if p.kind == "trimmed":                # lost, and known lost now: NAK it for a resend
                for ack in rsp.on_trimmed(p.psn, now):
                    self._send_ack(back, p.qp, ack)
                return
            refused = rsp.error is not None
            acks, done, cnp = rsp.on_data(p.psn, p.opcode, p.payload, now, ackreq=p.ackreq, ce=p.ce, hops=p.hops,
                                          terms=p.terms)
            if rsp.error is not None and not refused:
                self.errors.append(rsp.error)
            for ack in acks:
                self._send_ack(back, p.qp, ack)
            if cnp:
                self._send_control(back.cnp(p.qp))
            received.extend(Received(p.src_ip, p.qp, m.data, m.at) for m in done)
            return
        conn = self.connections.get(key)
        if conn is None:
            self.ignored[f"{p.kind} for no connection here"] += 1
        elif p.kind == "ack":
            age = self.link.age()
            conn.requester.on_ack(Ack(p.psn, p.syndrome, p.msn, p.sack, p.hops, p.terms), now,
                                  hops=hop_info(p.hops, self.params.mtu_bytes),
                                  arrived=None if age is None else now - age)
        else:
            conn.requester.on_cnp(now)

    def responder_stats(self) -> dict[tuple[str, int], object]:
        return {k: rsp.stats for k, (rsp, _) in self._responders.items()}
