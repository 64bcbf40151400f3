"""Controller rerouting: the data plane's own liveness state (each switch's
port_heard register, written by heartbeats in failover.p4) read over
Thrift, and routes recomputed around the links and switches it calls dead,
and back when they return (`make run` runs a Rerouter in the background
when the topology has a failover section).
"""
from __future__ import annotations

import contextlib
import threading
import time

from emulator.bmv2_thrift import Bmv2Thrift
from control.controller import FabricController
from control.topology import Failures
from features.failover.data_plane import HEARD_REGISTER


def link_health(topo, timeout_ms: float, thrift_of=None) -> tuple[set, set]:
    """(dead links, dead switches) from the data plane's own liveness state:
    each switch's port_heard register (heartbeats, failover.p4) read over
    Thrift against the switch's clock. A link is dead when either end has
    heard from the other before and not for timeout_ms (or the end's switch
    does not answer); a switch is dead when it does not answer Thrift.
    `thrift_of(switch)` opens a Bmv2Thrift (default: the switch's port)."""
    # A switch that refuses the connection is dead: no retrying for long.
    thrift_of = thrift_of or (lambda s: Bmv2Thrift(topo.switches[s].thrift_port, topo.switches[s].thrift_host, connect_timeout=0.2))
    heard: dict[str, dict[int, float | None] | None] = {}   # switch -> port -> ms since heard
    for s in topo.switches:
        try:
            with thrift_of(s) as t:
                now = t.now_us()
                values = t.register_read(HEARD_REGISTER)
                heard[s] = {p: (now - values[p]) / 1000 if values[p] else None for p in topo.switches[s].ports}
        except Exception:
            heard[s] = None
    dead_switches = {s for s, h in heard.items() if h is None}
    dead_links = set()
    for s, ports in heard.items():
        if ports is None:
            continue
        for number, port in topo.switches[s].ports.items():
            if port.peer not in topo.switches or port.peer in dead_switches:
                continue
            silent_ms = ports[number]
            if silent_ms is not None and silent_ms > timeout_ms:
                dead_links.add(frozenset((s, port.peer)))
    return dead_links, dead_switches


class ThriftSessions:
    """Thrift sessions to the switches kept open from one poll to the next:
    a new session costs a connection and BMv2's whole JSON config (to
    resolve register names), which every 200 ms on every switch is most of
    a poll. A kept session is checked with one cheap call first; one that
    fails (its switch died, or was restarted), or whose use failed, is
    replaced by a new one, and if that cannot connect the switch does not
    answer. Use as link_health's thrift_of."""

    def __init__(self, topo, connect_timeout: float = 0.2, opener=None):
        self.opener = opener or (lambda s: Bmv2Thrift(topo.switches[s].thrift_port, topo.switches[s].thrift_host,
                                                      connect_timeout=connect_timeout))
        self.open: dict[str, Bmv2Thrift] = {}

    def __call__(self, switch: str):
        t = self.open.pop(switch, None)
        if t is not None:
            try:
                t.now_us()
            except Exception:
                with contextlib.suppress(Exception):
                    t.close()
                t = None
        if t is None:
            t = self.opener(switch)          # raises when the switch does not answer
        self.open[switch] = t
        return self._borrowed(switch, t)

    @contextlib.contextmanager
    def _borrowed(self, switch: str, t):
        """Stays open for the next poll, unless using it failed: e.g. a session
        opened while a restarted switch had no pipeline yet knows no registers."""
        try:
            yield t
        except Exception:
            self.open.pop(switch, None)
            with contextlib.suppress(Exception):
                t.close()
            raise

    def close(self) -> None:
        for t in self.open.values():
            with contextlib.suppress(Exception):
                t.close()
        self.open.clear()


class Rerouter:
    """The controller's side of failure recovery: every period, read link and
    switch health from the heartbeat registers (link_health); when what is
    dead changes, recompute routes around it and reconcile every switch that
    answers (FabricController.reroute); when it comes back, routes return.
    Needs heartbeats (the topology's failover: section; make run sends them)."""

    def __init__(self, ctl: FabricController, timeout_ms: float, lock: threading.Lock | None = None,
                 on_change=print, thrift_of=None):
        self.ctl, self.timeout_ms = ctl, timeout_ms
        self.lock = lock or threading.Lock()
        self.on_change = on_change
        self.thrift_of = thrift_of or ThriftSessions(ctl.topo)
        self.changes: list[tuple[float, str]] = []

    def check_once(self):
        links, switches = link_health(self.ctl.topo, self.timeout_ms, self.thrift_of)
        failed = Failures(frozenset(links), frozenset(switches))
        if failed == self.ctl.failed:
            return None
        with self.lock:
            start = time.monotonic()
            reports = self.ctl.reroute(failed)
            took = time.monotonic() - start
        writes = sum(r.writes for r in reports.values())
        what = f"routes now avoid {failed}" if failed else "everything is back: the topology's own routes"
        self.changes.append((time.time(), what))
        self.on_change(f"{what} ({writes} writes on {len(reports)} switches, {took * 1000:.0f} ms)")
        return failed

    def run(self, stop: threading.Event, period_s: float = 0.2) -> None:
        try:
            while not stop.wait(period_s):
                try:
                    self.check_once()
                except Exception as exc:
                    self.on_change(f"rerouting failed: {exc}")
        finally:
            if isinstance(self.thrift_of, ThriftSessions):
                self.thrift_of.close()
