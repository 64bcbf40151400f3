"""Open a socket inside a network namespace (`ip netns` name) while the
process stays where it is: the collector can receive reports as a host of
the fabric (h5's 10.0.5.1) and still serve /metrics on the root
namespace's loopback, where Prometheus scrapes.

setns(2) on a network namespace switches only the calling thread, and a
socket keeps the namespace it was created in; so a short-lived thread
enters the namespace, creates the socket and ends.
"""
from __future__ import annotations

import ctypes
import os
import socket
import threading
from pathlib import Path

CLONE_NEWNET = 0x40000000
NETNS_DIR = Path("/var/run/netns")


class NetnsError(OSError):
    pass


def socket_in_netns(netns: str | None, family: int = socket.AF_INET, kind: int = socket.SOCK_DGRAM) -> socket.socket:
    """A new socket in namespace `netns` (None: this thread's namespace).
    Needs CAP_SYS_ADMIN (root) for a namespace other than our own."""
    if not netns:
        return socket.socket(family, kind)
    path = NETNS_DIR / netns
    if not path.exists():
        known = ", ".join(sorted(p.name for p in NETNS_DIR.glob("*"))) if NETNS_DIR.exists() else "none"
        raise NetnsError(f"no network namespace {netns!r} ({path} missing; known: {known or 'none'})")
    result: dict[str, object] = {}

    def enter_and_open() -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError as exc:
            result["error"] = NetnsError(f"cannot open {path}: {exc.strerror}")
            return
        try:
            if libc.setns(fd, CLONE_NEWNET) != 0:
                err = ctypes.get_errno()
                result["error"] = NetnsError(f"cannot enter network namespace {netns!r}: {os.strerror(err)}"
                                             + (" (needs root)" if err == 1 else ""))
                return
            result["socket"] = socket.socket(family, kind)
        finally:
            os.close(fd)

    thread = threading.Thread(target=enter_and_open, name=f"netns:{netns}")
    thread.start()
    thread.join()
    if "error" in result:
        raise result["error"]  # type: ignore[misc]
    return result["socket"]  # type: ignore[return-value]
