"""Fast frame transmission for traffic generators and the host agent.

Building a Scapy packet per send costs tens of microseconds, and scapy's
sendp() opens a socket per call (tens of packets per second). Here headers
are built once, and bytes go out through one persistent AF_PACKET socket:
hundreds of thousands of frames per second from Python.
"""
from __future__ import annotations

import argparse
import socket
import time
from typing import Sequence

ETH_P_ALL = 0x0003


class RawSender:
    """One AF_PACKET socket bound to an interface (of the current namespace)."""

    def __init__(self, iface: str):
        self.iface = iface
        self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        try:
            self.sock.bind((iface, 0))
        except OSError as exc:
            self.sock.close()
            raise OSError(f"cannot bind a raw socket to {iface!r}: {exc.strerror}") from None

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> "RawSender":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def send(self, frame: bytes) -> None:
        self.sock.send(frame)

    def blast(self, frames: Sequence[bytes], duration_s: float, rate_pps: float | None = None) -> int:
        """Send `frames` round-robin for `duration_s` seconds, as fast as
        possible or paced at `rate_pps`. Returns how many were sent; a full
        socket buffer (ENOBUFS) is counted as not sent and retried."""
        send = self.sock.send
        n, sent = len(frames), 0
        gap = 1.0 / rate_pps if rate_pps else 0.0
        start = time.perf_counter()
        deadline = start + duration_s
        next_at = start
        while True:
            now = time.perf_counter()
            if now >= deadline:
                return sent
            if gap:
                if now < next_at:
                    time.sleep(min(next_at - now, 0.001))
                    continue
                # Send what is due since the last wake-up (sleep is coarser than the gap),
                # but no catch-up burst after a long stall.
                due = min(64, max(1, int((now - next_at) / gap) + 1))
                next_at = max(next_at + due * gap, now - 0.01)
            else:
                due = 64  # unpaced: check the clock every 64 frames
            for _ in range(due):
                try:
                    send(frames[sent % n])
                    sent += 1
                except OSError:
                    break


def add_host_arguments(p: argparse.ArgumentParser) -> None:
    """Where an agent sends from: its interface, addresses and gateway
    (the launcher's host fields; experiments/common.py passes them)."""
    p.add_argument("--iface", required=True)
    p.add_argument("--src-ip", required=True)
    p.add_argument("--src-mac", required=True)
    p.add_argument("--gw-mac", required=True, help="MAC of the switch port (the host's gateway)")
