"""Link impairments for experiments and the launcher: random loss and a
black hole on one direction of a veth, with or without the kernel's netem.

    drop_fraction("s3-eth2", 0.05)     # 5% of what leaves s3-eth2, at random
    blackhole("s3-eth2")               # everything that leaves s3-eth2

Each returns a function that undoes it. A switch's interface is the end its
BMv2 process sends on: impairing it loses what that switch sends over the
link (one direction), while the port stays up.

Loss uses netem where the kernel has it, else an nftables rule on the
netdev egress hook (`numgen random mod 10000 < fraction * 10000 drop`),
which also applies to frames sent by BMv2's packet sockets. The black hole
is a `pfifo limit 0` qdisc. Delay has no fallback: without netem,
`netem_available()` is false and the launcher refuses `delay_ms` by name.
"""
from __future__ import annotations

import re
import subprocess
from functools import lru_cache
from typing import Callable, Optional

Undo = Callable[[], None]


class ImpairmentError(RuntimeError):
    """An impairment that cannot be made here (with the reason)."""


def _run(cmd: list[str], netns: Optional[str] = None) -> None:
    if netns:
        cmd = ["ip", "netns", "exec", netns] + cmd
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise ImpairmentError(f"{' '.join(cmd)}: {(proc.stderr or proc.stdout).strip()}")


@lru_cache(maxsize=None)
def netem_available() -> bool:
    """Whether this kernel has the netem qdisc (minimal VM kernels may not)."""
    probe = subprocess.run(["tc", "qdisc", "add", "dev", "lo", "root", "netem", "delay", "0ms"],
                           capture_output=True, text=True)
    if probe.returncode == 0:
        subprocess.run(["tc", "qdisc", "del", "dev", "lo", "root"], capture_output=True)
        return True
    return "unknown" not in probe.stderr        # e.g. lo already has a root qdisc: netem itself is there


def _table(iface: str) -> str:
    return "impair_" + re.sub(r"[^A-Za-z0-9_]", "_", iface)


def drop_fraction(iface: str, fraction: float, netns: Optional[str] = None) -> Undo:
    """Drop `fraction` (0 < f <= 1) of the frames leaving `iface`, at random."""
    if not 0 < fraction <= 1:
        raise ImpairmentError(f"loss fraction must be in (0, 1], got {fraction!r}")
    if netem_available():
        _run(["tc", "qdisc", "add", "dev", iface, "root", "netem", "loss", f"{100 * fraction:g}%"], netns)
        return lambda: _run(["tc", "qdisc", "del", "dev", iface, "root"], netns)
    table = _table(iface)
    threshold = round(fraction * 10000)
    _run(["nft", "add", "table", "netdev", table], netns)
    try:
        _run(["nft", "add", "chain", "netdev", table, "egress",
              f"{{ type filter hook egress device \"{iface}\" priority 0; }}"], netns)
        _run(["nft", "add", "rule", "netdev", table, "egress", "numgen", "random", "mod", "10000",
              "lt", str(threshold), "drop"], netns)
    except ImpairmentError as exc:
        _run(["nft", "delete", "table", "netdev", table], netns)
        raise ImpairmentError(f"no netem, and nftables' netdev egress hook failed: {exc}") from None
    return lambda: _run(["nft", "delete", "table", "netdev", table], netns)


def remove_impairment(iface: str, netns: Optional[str] = None) -> None:
    """Remove what drop_fraction or blackhole put on `iface`, if anything."""
    for cmd in (["nft", "delete", "table", "netdev", _table(iface)], ["tc", "qdisc", "del", "dev", iface, "root"]):
        try:
            _run(cmd, netns)
        except (ImpairmentError, FileNotFoundError):
            pass


def blackhole(iface: str, netns: Optional[str] = None) -> Undo:
    """Drop every frame leaving `iface`; the interface stays up."""
    _run(["tc", "qdisc", "add", "dev", iface, "root", "pfifo", "limit", "0"], netns)
    return lambda: _run(["tc", "qdisc", "del", "dev", iface, "root"], netns)
