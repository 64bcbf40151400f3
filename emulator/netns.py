"""Network namespaces (`ip netns` names) from within Python.

socket_in_netns opens a socket inside one while the process stays where it
is: the collector can receive reports as a host of the fabric (h5's
10.0.5.1) and still serve /metrics on the root namespace's loopback, where
Prometheus scrapes.

enter_netns moves the whole process into one, as `ip netns exec` would
start it there: a process forked from one that imported PyTorch once
(hostagent/collectives/ranks.py) becomes a host's rank without importing it
again.

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
CLONE_NEWNS = 0x00020000
MS_BIND, MS_REC, MS_SLAVE = 0x1000, 0x4000, 0x80000
NETNS_DIR = Path("/var/run/netns")
NETNS_ETC = Path("/etc/netns")    # ip netns exec: /etc/netns/NAME/FILE is the namespace's /etc/FILE


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


def enter_netns(netns: str) -> None:
    """Move this process into network namespace `netns` as `ip netns exec`
    starts a command there: the namespace itself, and a mount namespace of
    its own in which each /etc/netns/NAME/FILE is bind-mounted over /etc/FILE
    (the launcher's resolv.conf naming no resolver: a name lookup fails at
    once instead of waiting on a resolver the fabric cannot reach). Call it
    with one thread only (setns moves the calling thread); needs root."""
    path = NETNS_DIR / netns
    libc = ctypes.CDLL(None, use_errno=True)

    def check(ok: bool, what: str) -> None:
        if not ok:
            err = ctypes.get_errno()
            raise NetnsError(f"{what}: {os.strerror(err)}" + (" (needs root)" if err == 1 else ""))

    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as exc:
        raise NetnsError(f"no network namespace {netns!r} ({path}: {exc.strerror})") from None
    try:
        check(libc.setns(fd, CLONE_NEWNET) == 0, f"cannot enter network namespace {netns!r}")
    finally:
        os.close(fd)
    etc = NETNS_ETC / netns
    files = sorted(f for f in etc.iterdir() if f.is_file()) if etc.is_dir() else []
    if not files:
        return
    check(libc.unshare(CLONE_NEWNS) == 0, "cannot make a mount namespace")
    # mounts made here stay here (as ip netns exec: the root's mounts still propagate in)
    check(libc.mount(b"none", b"/", None, MS_REC | MS_SLAVE, None) == 0, "cannot make / a slave mount")
    for f in files:
        target = Path("/etc") / f.name
        if target.exists():
            check(libc.mount(bytes(f), bytes(target), None, MS_BIND, None) == 0, f"cannot bind {f} over {target}")
