"""The parameter server of an aggregation job: the software aggregator for
the blocks the switch does not finish (docs/protocols/aggregation.md).

    python -m hostagent.aggregation.parameter_server --job 1 --workers 10.0.1.1,10.0.2.1 [--duration 60] [--out PREFIX]

Runs in the server host's namespace, on UDP port AGG_UDP_PORT_BASE + job.
Packets reach it when the aggregating switch passes a contribution on:

  COLLISION  the block's slot was held by another use (a shared pool);
  FALLBACK   a worker sends the block here (the switch's sum overflowed, or
             this server asked for it).

A block that reaches the server is summed here, in int64, from every
worker's contribution: at its first packet the server asks the workers it
has nothing from (FALLBACK request) and asks again every --request-ms until
it has all (for --give-up-s at most); then it sends each worker the result (RESULT | WIDE, int64
elements, largest exponent), which also frees the block's slot on the
switch. A finished block's result is kept (the last --keep blocks), so a
worker that lost it gets it again when it sends the block again.

Workers are known by address (--workers, in the job's worker order); a
packet from anyone else, or one that is not an aggregation packet, is
counted and ignored.
"""
from __future__ import annotations

import argparse
import json
import select
import signal
import socket
import sys
import time
from collections import OrderedDict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional

import numpy as np

from hostagent.aggregation.sockets import job_socket
from wire import aggregation_codec as ah
@dataclass
class ServerStats:
    packets: int = 0
    collisions: int = 0            # contributions the switch passed on as COLLISION
    fallbacks: int = 0             # FALLBACK contributions
    duplicates: int = 0
    requests_sent: int = 0
    blocks_completed: int = 0
    results_sent: int = 0
    results_resent: int = 0
    ignored: int = 0               # not an aggregation packet, another job, not a worker
    send_errors: int = 0           # packets the kernel refused to send (lost)
    abandoned: int = 0             # blocks given up after give_up_s without every contribution


@dataclass
class _Block:
    contributions: dict = field(default_factory=dict)   # worker index -> int64 elements
    elements: int = 0                                    # the block's size (its first contribution's)
    exponent: int = 0                                   # largest biased exponent
    asked_at: float = 0.0
    started: float = field(default_factory=time.monotonic)


class ParameterServer:
    def __init__(self, job: int, workers: list[str], *, bind_ip: str = "0.0.0.0",
                 request_s: float = 0.1, keep: int = 65536, give_up_s: float = 30.0):
        if not workers:
            raise ValueError("a job needs workers")
        if len(workers) > ah.MAX_WORKERS:
            raise ValueError(f"{len(workers)} workers, at most {ah.MAX_WORKERS}")
        self.job, self.port = job, ah.job_port(job)
        self.workers = {ip: i for i, ip in enumerate(workers)}
        self.addresses = list(workers)
        self.request_s, self.keep, self.give_up_s = request_s, keep, give_up_s
        self.stats = ServerStats()
        self.pending: dict[int, _Block] = {}
        self.finished: OrderedDict[int, list[bytes]] = OrderedDict()   # seq -> the result's packets
        self.sock = job_socket(job, bind_ip)

    def close(self) -> None:
        self.sock.close()

    def _send(self, payload: bytes, ip: str) -> None:
        """A packet the kernel refuses (full buffer, EPERM from a packet
        filter) is lost: workers retransmit, and requests are repeated."""
        try:
            self.sock.sendto(payload, (ip, self.port))
        except (BlockingIOError, PermissionError, ConnectionRefusedError):
            self.stats.send_errors += 1

    def serve(self, duration_s: Optional[float] = None, stop=lambda: False) -> None:
        end = None if duration_s is None else time.monotonic() + duration_s
        while not stop() and (end is None or time.monotonic() < end):
            readable, _, _ = select.select([self.sock], [], [], self.request_s / 2)
            if readable:
                self.handle_waiting()
            self._ask_again()

    def handle_waiting(self) -> None:
        while True:
            try:
                data, (ip, _port) = self.sock.recvfrom(4096)
            except BlockingIOError:
                return
            self.handle(data, ip)

    def handle(self, data: bytes, ip: str) -> None:
        self.stats.packets += 1
        try:
            pkt = ah.unpack(data)
        except ah.MalformedPacket:
            self.stats.ignored += 1
            return
        worker = self.workers.get(ip)
        if pkt.job != self.job or worker is None or pkt.flags & (ah.FLAG_SERVER | ah.FLAG_RESULT):
            self.stats.ignored += 1
            return
        if pkt.flags & ah.FLAG_COLLISION:
            self.stats.collisions += 1
        elif pkt.flags & ah.FLAG_FALLBACK:
            self.stats.fallbacks += 1
        else:
            self.stats.ignored += 1      # a plain contribution is the switch's to sum
            return
        if pkt.seq in self.finished:
            self.stats.results_resent += 1
            for part in self.finished[pkt.seq]:
                self._send(part, ip)
            return
        block = self.pending.get(pkt.seq)
        if block is None:
            block = self.pending[pkt.seq] = _Block()
        if worker in block.contributions:
            self.stats.duplicates += 1
            return
        if block.contributions and pkt.elements.size != block.elements:
            self.stats.ignored += 1      # not the block's size: a worker started with another block_elements
            return
        block.elements = pkt.elements.size
        block.contributions[worker] = pkt.elements.astype(np.int64)
        block.exponent = max(block.exponent, pkt.exponent)
        if len(block.contributions) == len(self.workers):
            self._finish(pkt.seq, block)
        elif block.asked_at == 0.0:
            self._ask(pkt.seq, block)

    def _ask(self, seq: int, block: _Block) -> None:
        request = ah.pack(ah.FLAG_SERVER | ah.FLAG_FALLBACK, self.job, seq, count=block.elements)
        for ip, i in self.workers.items():
            if i not in block.contributions:
                self._send(request, ip)
                self.stats.requests_sent += 1
        block.asked_at = time.monotonic()

    def _ask_again(self) -> None:
        now = time.monotonic()
        for seq, block in list(self.pending.items()):
            if now - block.started > self.give_up_s:
                del self.pending[seq]          # its workers moved on (they got the switch's result)
                self.stats.abandoned += 1
            elif now - block.asked_at >= self.request_s:
                self._ask(seq, block)

    def _finish(self, seq: int, block: _Block) -> None:
        total = np.sum(np.stack(list(block.contributions.values())), axis=0)
        result = [ah.pack(ah.FLAG_SERVER | ah.FLAG_RESULT | ah.FLAG_WIDE, self.job, seq, total[o:o + n],
                          exponent=block.exponent, offset=o) for o, n in ah.wide_parts(block.elements)]
        for ip in self.addresses:
            for part in result:
                self._send(part, ip)
            self.stats.results_sent += 1
        del self.pending[seq]
        self.finished[seq] = result
        while len(self.finished) > self.keep:
            self.finished.popitem(last=False)
        self.stats.blocks_completed += 1


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m hostagent.aggregation.parameter_server", description=__doc__.split("\n\n")[0])
    ap.add_argument("--job", type=int, required=True, help=f"job id 1..{ah.MAX_JOBS}")
    ap.add_argument("--workers", required=True, help="the job's worker addresses, in worker order, comma-separated")
    ap.add_argument("--bind", default="0.0.0.0", help="address to listen on (default: all of this namespace)")
    ap.add_argument("--duration", type=float, default=None, help="seconds to serve (default: until SIGTERM/SIGINT)")
    ap.add_argument("--request-ms", type=float, default=100.0, help="ask workers again for missing blocks this often")
    ap.add_argument("--give-up-s", type=float, default=30.0, help="forget a block missing contributions this long")
    ap.add_argument("--progress-s", type=float, default=5.0)
    ap.add_argument("--out", default=None, help="write PREFIX.json with the counters at the end")
    args = ap.parse_args(argv)
    workers = [w.strip() for w in args.workers.split(",") if w.strip()]
    try:
        for w in workers:
            socket.inet_aton(w)
        server = ParameterServer(args.job, workers, bind_ip=args.bind, request_s=args.request_ms / 1000,
                                 give_up_s=args.give_up_s)
    except (ValueError, OSError) as exc:
        ap.error(str(exc))
    stopping = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stopping.append(True))
    start = time.monotonic()
    print(f"parameter server job {args.job} on UDP {args.bind}:{server.port}, workers {', '.join(workers)}",
          flush=True)
    while not stopping and (args.duration is None or time.monotonic() - start < args.duration):
        server.serve(min(args.progress_s, args.duration - (time.monotonic() - start)) if args.duration
                     else args.progress_s, stop=lambda: bool(stopping))
        s = server.stats
        print(f"  {time.monotonic() - start:6.1f} s: {s.blocks_completed} blocks summed here "
              f"({s.collisions} collisions, {s.fallbacks} fallbacks, {len(server.pending)} waiting)", flush=True)
    server.close()
    if args.out:
        path = Path(args.out + ".json")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(asdict(server.stats), indent=2) + "\n")
        print(f"counters: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
