"""Host-side plane failover for multi-homed hosts, and the sequenced flows
the failure-timeline experiment measures with.

On a dual-plane fabric every host has one NIC on each plane and each peer
has one address per plane (topology: NIC i on plane i, 10.<i>.<host>.1).
A `FlowSender` keeps several UDP flows (one source port each, so ECMP
spreads them) to each peer, on the peer's first plane. The peer's
`FlowReceiver` acknowledges each flow on the flow's own reversed 5-tuple
(as a RoCE RC queue pair's ACKs travel), at most once an ack period: the
highest sequence number it got. A flow waiting for an ack for `timeout_ms`
(the clock starts when a packet goes out with nothing outstanding, once the
flow has had its first ack, and restarts whenever new data is acknowledged,
as TCP's RTO) moves to the
peer's next plane (the host route for that address leaves by the NIC on
that plane) -- what RDMA NIC bonding does after a retransmission timeout.
A flow notices a failure `timeout_ms` after its first packet into it. A
moved flow stays where it went; with `failover=False` flows never move (the switches'
protection alone is measured).

The wire format (FlowData to FLOW_UDP_PORT, FlowAck back from it) is
wire/plane_failover.py's.
"""
from __future__ import annotations

import selectors
import socket
import threading
import time
from dataclasses import dataclass, field

from wire.plane_failover import FLOW_UDP_PORT, FlowFormatError, pack_ack, pack_data, unpack_ack, unpack_data
from emulator.netns import socket_in_netns


@dataclass
class Flow:
    peer: str
    index: int                     # flow id within this sender
    addresses: list[str]           # the peer's address on each plane
    sock: socket.socket
    plane: int = 0
    seq: int = 0                   # next sequence number
    acked: int = -1                # highest sequence number acknowledged
    waiting_since: float | None = None   # the retransmission clock: when the oldest wait for an ack began
    moves: list[tuple[float, int, int]] = field(default_factory=list)   # (time, from plane, to plane)


class FlowSender:
    """`flows_per_peer` flows to each peer at `rate_pps` packets/s per peer
    (round robin over the flows), from the host's namespace. Records every
    packet sent as (time, peer, flow, seq, plane) in `sent`."""

    def __init__(self, host: str, sender_id: int, peers: dict[str, list[str]], *, flows_per_peer: int = 8,
                 rate_pps: float = 400.0, timeout_ms: float = 100.0, failover: bool = True,
                 netns_socket=None, base_port: int = 40000):
        if not peers:
            raise ValueError("a FlowSender needs at least one peer")
        if rate_pps <= 0 or flows_per_peer < 1 or timeout_ms <= 0:
            raise ValueError(f"rate_pps ({rate_pps}), flows_per_peer ({flows_per_peer}) and timeout_ms "
                             f"({timeout_ms}) must be positive")
        open_socket = netns_socket or socket_in_netns
        self.host, self.sender_id = host, sender_id
        self.rate_pps, self.timeout_s, self.failover = rate_pps, timeout_ms / 1000, failover
        self.flows: list[Flow] = []
        for p, (peer, addresses) in enumerate(sorted(peers.items())):
            for i in range(flows_per_peer):
                s = open_socket(host)
                s.bind(("0.0.0.0", base_port + p * flows_per_peer + i))
                self.flows.append(Flow(peer, p * flows_per_peer + i, list(addresses), s))
        for f in self.flows:
            f.sock.setblocking(False)
        self.sent: list[tuple[float, str, int, int, int]] = []
        self.malformed = 0
        self.send_errors = 0

    def _on_ack(self, data: bytes, now: float) -> None:
        try:
            _, _, acked = unpack_ack(data)
        except FlowFormatError:
            self.malformed += 1
            return
        for index, seq in acked.items():
            if 0 <= index < len(self.flows) and seq > self.flows[index].acked:
                f = self.flows[index]
                f.acked = seq
                # New data acknowledged restarts the clock (as TCP's RTO); all of it stops it.
                f.waiting_since = None if seq >= f.seq - 1 else now

    def _check_failover(self, now: float) -> None:
        for f in self.flows:
            if f.waiting_since is not None and now - f.waiting_since > self.timeout_s and len(f.addresses) > 1:
                new = (f.plane + 1) % len(f.addresses)
                f.moves.append((now, f.plane, new))
                f.plane, f.waiting_since = new, now

    def run(self, stop: threading.Event) -> None:
        per_peer = len(self.flows) // len({f.peer for f in self.flows})
        interval = 1.0 / (self.rate_pps * len(self.flows) / per_peer)
        sel = selectors.DefaultSelector()
        for f in self.flows:
            sel.register(f.sock, selectors.EVENT_READ, data=f.sock)
        next_at, k = time.monotonic(), 0
        while not stop.is_set():
            for key, _ in sel.select(max(0.0, next_at - time.monotonic())):
                sock: socket.socket = key.data
                while True:
                    try:
                        data = sock.recv(2048)
                    except (BlockingIOError, InterruptedError):
                        break
                    except OSError:             # e.g. an ICMP error queued on the socket
                        break
                    self._on_ack(data, time.monotonic())
            now = time.monotonic()
            if now < next_at:
                continue
            f = self.flows[k % len(self.flows)]
            k += 1
            try:
                f.sock.sendto(pack_data(f.plane, self.sender_id, f.index, f.seq), (f.addresses[f.plane], FLOW_UDP_PORT))
            except OSError:
                self.send_errors += 1      # e.g. a NIC whose link is down: counted as sent, lost
            self.sent.append((now, f.peer, f.index, f.seq, f.plane))
            if f.waiting_since is None and f.acked >= 0:     # (a flow never acknowledged is still connecting)
                f.waiting_since = now
            f.seq += 1
            next_at += interval
            if self.failover:
                self._check_failover(now)
        sel.close()

    def close(self) -> None:
        for f in self.flows:
            f.sock.close()


class FlowReceiver:
    """Receives FlowData on FLOW_UDP_PORT in `host`'s namespace, records each
    arrival as (time, sender, flow, seq, plane) in `received`, and every
    `ack_ms` acknowledges each flow that sent something new, back to the
    address and port it came from."""

    def __init__(self, host: str, *, ack_ms: float = 10.0, netns_socket=None, address: str = "0.0.0.0"):
        open_socket = netns_socket or socket_in_netns
        self.host, self.ack_s = host, ack_ms / 1000
        self.sock = open_socket(host)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 22)   # rides out the GIL's pauses
        self.sock.bind((address, FLOW_UDP_PORT))
        self.sock.settimeout(self.ack_s)
        self.received: list[tuple[float, int, int, int, int]] = []
        self.malformed = 0

    def run(self, stop: threading.Event) -> None:
        pending: dict[tuple[str, int], tuple[int, int, int, int]] = {}   # (addr, port) -> plane, sender, flow, seq
        highest: dict[tuple[int, int], int] = {}
        next_ack = time.monotonic() + self.ack_s
        while not stop.is_set():
            try:
                data, source = self.sock.recvfrom(2048)
            except OSError:                      # the timeout, or an ICMP error queued on the socket
                data = None
            now = time.monotonic()
            if data is not None:
                try:
                    plane, sender, flow, seq = unpack_data(data)
                except FlowFormatError:
                    self.malformed += 1
                else:
                    self.received.append((now, sender, flow, seq, plane))
                    key = (sender, flow)
                    highest[key] = max(seq, highest.get(key, -1))
                    pending[source] = (plane, sender, flow, highest[key])
            if now >= next_ack:
                for source, (plane, sender, flow, seq) in pending.items():
                    try:
                        self.sock.sendto(pack_ack(plane, sender, {flow: seq}), source)
                    except OSError:
                        pass
                pending.clear()
                next_ack = now + self.ack_s

    def close(self) -> None:
        self.sock.close()


# -- command line: one process per host, inside its namespace ------------------

def _plain_socket(host):
    return socket.socket(socket.AF_INET, socket.SOCK_DGRAM)


def _peer(text: str) -> tuple[str, list[str]]:
    import argparse
    import ipaddress
    name, _, addresses = text.partition("=")
    try:
        parsed = [str(ipaddress.IPv4Address(a)) for a in addresses.split(",")]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r}: {exc}") from None
    if not name or not parsed:
        raise argparse.ArgumentTypeError(f"{text!r}: expected NAME=ADDRESS[,ADDRESS...] (one per plane)")
    return name, parsed


def main(argv=None) -> int:
    """Run a sender or a receiver in this namespace for --duration seconds;
    print "ready" once the sockets are open, then write JSON to --out."""
    import argparse
    import json
    import sys
    ap = argparse.ArgumentParser(prog="python -m hostagent.failover.plane_failover",
                                 description="Sequenced UDP flows with per-flow acks and host plane failover.")
    sub = ap.add_subparsers(dest="command", required=True)
    snd = sub.add_parser("send", help="flows to each --peer, moving plane when acks stop")
    snd.add_argument("--host", required=True, help="this host's name (for the record)")
    snd.add_argument("--sender-id", type=int, required=True, help="this host's index (0..65535)")
    snd.add_argument("--peer", type=_peer, action="append", required=True,
                     help="NAME=ADDRESS[,ADDRESS...]: the peer's address on each plane, in plane order")
    snd.add_argument("--flows", type=int, default=8, help="flows per peer")
    snd.add_argument("--rate", type=float, default=100.0, help="packets/s per peer")
    snd.add_argument("--timeout-ms", type=float, default=100.0)
    snd.add_argument("--no-failover", action="store_true", help="never move a flow")
    rcv = sub.add_parser("receive", help="record arrivals and acknowledge every flow")
    rcv.add_argument("--ack-ms", type=float, default=10.0)
    for p in (snd, rcv):
        p.add_argument("--duration", type=float, required=True, help="seconds")
        p.add_argument("--out", required=True, help="JSON file")
    args = ap.parse_args(argv)
    if not 0 <= getattr(args, "sender_id", 0) <= 0xFFFF:
        ap.error("--sender-id must be in 0..65535")
    agent: FlowSender | FlowReceiver
    try:
        if args.command == "send":
            agent = FlowSender(args.host, args.sender_id, dict(args.peer), flows_per_peer=args.flows,
                               rate_pps=args.rate, timeout_ms=args.timeout_ms, failover=not args.no_failover,
                               netns_socket=_plain_socket)
        else:
            agent = FlowReceiver("", ack_ms=args.ack_ms, netns_socket=_plain_socket)
    except (ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    stop = threading.Event()
    print("ready", flush=True)
    timer = threading.Timer(args.duration, stop.set)
    timer.start()
    try:
        agent.run(stop)
    finally:
        timer.cancel()
        agent.close()
    result: dict[str, object]
    if isinstance(agent, FlowSender):            # args.command == "send"
        packets = len(agent.sent)
        result = {"sent": agent.sent, "send_errors": agent.send_errors, "malformed_acks": agent.malformed,
                  "moves": [[f.index, *m] for f in agent.flows for m in f.moves], "flows": len(agent.flows)}
    else:
        packets = len(agent.received)
        result = {"received": agent.received, "malformed": agent.malformed}
    with open(args.out, "w") as f:
        json.dump(result, f)
    print(f"{args.command}: {packets} packets; results in {args.out}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
