"""Adaptive INT sampling: sparse everywhere, every packet where something happens.

The watchlist's rules put INT into one packet in N (`sample: N`,
features/int_telemetry.py). This loop reads every report the collector
receives and raises sampling to every packet where the reports show a sign:

  a queue at or above `queue` packets      a congestion report (Q) from a hop, or a hop's
                                           queue in a flow report: its port is hot, and so is
                                           every flow last seen crossing that port
  `ecn_marks` CE-marked reports of a flow  within the quiet period: the flow is hot
  `drops` drop reports of a flow           within the quiet period (a black hole, a failed
                                           link: drop reports come from every packet, sampled
                                           or not; a trim's are not drops): the flow is hot

A hot flow is raised at its first switch (an entry of its own, every
packet); a host port with more than `max_flows` hot flows is raised as a
port instead (its rules' N set to 1). Flows whose rule already samples
every packet (HPCC's `to_host` rules) are left alone. A flow or port goes
back to its rule's rate `quiet_ms` after its last sign.

    loop = AdaptiveSampling(topo, settings, apply=lambda r: ints.set_raised(r.ports, r.flows))
    collector.listeners.append(loop.observe)     # every report, not only changes
    with loop:                                   # decides every `interval_s` in a thread
        ...
    loop.changes                                 # (time, raised ports, raised flows) each time it applied

`observe` runs on the collector's receiver thread and only records;
`step` decides and applies (P4Runtime writes) on the loop's own thread.

Beside `fabric run` (a topology with `int.adaptive`), the loop runs in the
controller's process (`serving`): it receives the datagrams `fabric monitor`'s
collector forwards (only reports sent on: every congestion and drop report,
a flow's report when its path, a queue or latency bucket or its ECN mark
changed: telemetry/changes.py) on 127.0.0.1:CHANGES_PORT, and writes the
switches through the controller, under its lock.
"""
from __future__ import annotations

import contextlib
import logging
import socket
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Optional

from control.p4constants import drop_reasons
from control.topology import Topology
from features.int_telemetry import (SECTION, AdaptiveSettings, FlowKey, IntConfig, IntConfigError, Raised,
                                    flow_sources, watching_rule)
from telemetry.decode import HopMetadata, MalformedReport, ReportPacket, decode_report
from wire.ecn import CE

log = logging.getLogger(__name__)
TRIMMED = drop_reasons()["TRIMMED"]    # a trim's drop report: not a drop (the header was forwarded)
CHANGES_PORT = 32767        # where the loop beside `fabric run` receives what the collector sends on (loopback)


@dataclass
class Change:
    """One decision the loop applied."""
    time: float
    raised: Raised
    why: dict[str, str] = field(default_factory=dict)   # what was raised -> its first sign


class AdaptiveSampling:
    def __init__(self, topo: Topology, settings: AdaptiveSettings, apply: Callable[[Raised], Any], *,
                 interval_s: float = 0.05, clock: Callable[[], float] = time.monotonic):
        cfg: Optional[IntConfig] = topo.features.get(SECTION)
        if cfg is None:
            raise IntConfigError("adaptive sampling: the topology has no int section")
        self.topo, self.settings, self.apply = topo, settings, apply
        self.rules = cfg.watchlist
        self.interval_s, self.clock = interval_s, clock
        self.quiet_s = settings.quiet_ms / 1000.0
        self.switch_of = {sw.device_id: name for name, sw in topo.switches.items()}
        self.lock = threading.Lock()
        self.flow_ports: dict[FlowKey, set[tuple[str, int]]] = {}   # the ports a flow's last path crossed
        self.hot_ports: dict[tuple[str, int], float] = {}            # port -> its last sign
        self.hot_flows: dict[FlowKey, float] = {}
        self.signs: dict[str, str] = {}                              # what -> its first sign (for `changes`)
        self.marks: dict[FlowKey, deque[float]] = {}
        self.drops: dict[FlowKey, deque[float]] = {}
        self.current = Raised()
        self.changes: list[Change] = []
        self.errors = 0
        self.malformed = 0               # datagrams `serving` could not decode
        self.address: Optional[tuple[str, int]] = None   # where `serving` receives
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    # -- input: the collector's receiver thread ------------------------------

    def observe(self, now: float, data: bytes, pkt: ReportPacket) -> None:
        """A collector listener: record the signs in one report packet."""
        t = self.clock()
        with self.lock:
            for r in pkt.reports:
                flow = self._flow(r.inner)
                meta = r.metadata or HopMetadata()
                if r.d and meta.drop_reason != TRIMMED:       # a trim's report: the packet was forwarded
                    if flow is not None and self._count(self.drops, flow, t) >= self.settings.drops:
                        self._hot_flow(flow, t, f"drop report from {self._switch(pkt.node_id)}")
                    continue
                if r.q and meta.queue_occupancy is not None and meta.queue_occupancy >= self.settings.queue:
                    port = self._port(pkt.node_id, meta.egress_port)
                    if port is not None:
                        self._hot_port(port, t, f"congestion report: queue {meta.queue_occupancy}")
                    if flow is not None:
                        self._hot_flow(flow, t, f"congestion report from {self._switch(pkt.node_id)}")
                stack = r.inner.int_stack if r.inner is not None else None
                if not r.f or stack is None or flow is None:
                    continue
                hops = [*stack.hops, meta if meta.node_id is not None else
                        HopMetadata(node_id=pkt.node_id, egress_port=meta.egress_port,
                                    queue_occupancy=meta.queue_occupancy)]
                ports = set()
                for hop in hops:
                    port = self._port(hop.node_id if hop.node_id is not None else pkt.node_id, hop.egress_port)
                    if port is None:
                        continue
                    ports.add(port)
                    if hop.queue_occupancy is not None and hop.queue_occupancy >= self.settings.queue:
                        self._hot_port(port, t, f"flow report: queue {hop.queue_occupancy}")
                        self._hot_flow(flow, t, f"flow report: queue {hop.queue_occupancy} at {port[0]}")
                self.flow_ports[flow] = ports
                if r.inner is not None and r.inner.ecn == CE \
                        and self._count(self.marks, flow, t) >= self.settings.ecn_marks:
                    self._hot_flow(flow, t, "ECN CE")

    def _flow(self, inner) -> Optional[FlowKey]:
        if inner is None or inner.sport is None or inner.dport is None or inner.proto not in (6, 17):
            return None
        return FlowKey(inner.src, inner.dst, inner.proto, inner.sport, inner.dport)

    def _switch(self, node_id: Optional[int]) -> str:
        return self.switch_of.get(node_id, f"node {node_id}") if node_id is not None else "?"

    def _port(self, node_id: Optional[int], port: Optional[int]) -> Optional[tuple[str, int]]:
        name = self.switch_of.get(node_id) if node_id is not None else None
        return None if name is None or port is None else (name, port)

    def _count(self, seen: dict[FlowKey, deque[float]], flow: FlowKey, t: float) -> int:
        times = seen.setdefault(flow, deque())
        times.append(t)
        while times and times[0] < t - self.quiet_s:
            times.popleft()
        return len(times)

    def _hot_port(self, port: tuple[str, int], t: float, why: str) -> None:
        self.hot_ports[port] = t
        self.signs.setdefault(f"port {port[0]}:{port[1]}", why)

    def _hot_flow(self, flow: FlowKey, t: float, why: str) -> None:
        self.hot_flows[flow] = t
        self.signs.setdefault(f"flow {flow}", why)

    # -- decisions: the loop's thread ------------------------------------------

    def decide(self, now: Optional[float] = None) -> Raised:
        """What should sample every packet now."""
        now = self.clock() if now is None else now
        since = now - self.quiet_s
        with self.lock:
            for port in [p for p, t in self.hot_ports.items() if t < since]:
                del self.hot_ports[port]
                self.signs.pop(f"port {port[0]}:{port[1]}", None)
            for flow in [f for f, t in self.hot_flows.items() if t < since]:
                del self.hot_flows[flow]
                self.signs.pop(f"flow {flow}", None)
            hot = set(self.hot_flows)
            for flow, ports in self.flow_ports.items():
                if ports & self.hot_ports.keys():
                    hot.add(flow)
        raisable = {f: nic for f, nic in flow_sources(self.topo, hot).items() if self._sparse(f)}
        by_port: dict[tuple[str, int], list[FlowKey]] = {}
        for flow, nic in raisable.items():
            by_port.setdefault((nic.switch, nic.switch_port), []).append(flow)
        ports, flows = set(), set()
        for port, port_flows in by_port.items():
            if len(port_flows) > self.settings.max_flows:
                ports.add(port)
            else:
                flows.update(port_flows)
        return Raised(frozenset(ports), frozenset(flows))

    def _sparse(self, flow: FlowKey) -> bool:
        """The first rule that watches the flow samples less than every packet."""
        rule = watching_rule(self.rules, flow)
        return rule is not None and rule.sample > 1

    def step(self, now: Optional[float] = None) -> Optional[Change]:
        """Decide, and apply what changed; the change, or None."""
        wanted = self.decide(now)
        if wanted == self.current:
            return None
        self.apply(wanted)
        self.current = wanted
        with self.lock:
            why = {k: v for k, v in self.signs.items()}
        change = Change(self.clock() if now is None else now, wanted, why)
        self.changes.append(change)
        log.info("INT sampling raised: %d ports, %d flows", len(wanted.ports), len(wanted.flows))
        return change

    # -- the thread ------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.step()
            except Exception as exc:      # a failed write: counted, tried again next interval
                self.errors += 1
                log.warning("adaptive sampling: applying failed: %s", exc)

    def start(self) -> "AdaptiveSampling":
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="adaptive-sampling", daemon=True)
        self._thread.start()
        return self

    def stop(self, lower: bool = True) -> None:
        """Stop the thread; with `lower`, put every rate back to its rule's."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if lower and self.current:
            self.apply(Raised())
            self.current = Raised()

    def __enter__(self) -> "AdaptiveSampling":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


@contextlib.contextmanager
def serving(topo: Topology, controller, lock: threading.Lock, say: Callable[[str], None],
            address: tuple[str, int] = ("127.0.0.1", CHANGES_PORT)) -> Iterator[Optional[AdaptiveSampling]]:
    """The loop beside a running network, for as long as the block runs:
    reports forwarded to `address` (`fabric monitor` does, for a topology
    with `int.adaptive`) are observed, and the raises written through
    `controller` under `lock`. Yields None (and does nothing) without
    `int.adaptive`."""
    cfg: Optional[IntConfig] = topo.features.get(SECTION)
    if cfg is None or cfg.adaptive is None:
        yield None
        return
    ints = controller.feature("int_telemetry")

    def apply(raised: Raised) -> None:
        with lock:
            ints.set_raised(raised.ports, raised.flows)
    loop = AdaptiveSampling(topo, cfg.adaptive, apply)
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        sock.bind(address)
    except OSError as exc:
        sock.close()
        raise OSError(f"adaptive sampling: cannot receive on udp {address[0]}:{address[1]}: {exc.strerror}") from None
    sock.settimeout(0.2)
    loop.address = sock.getsockname()
    stop = threading.Event()

    def receive() -> None:
        while not stop.is_set():
            try:
                data = sock.recv(65535)
            except socket.timeout:
                continue
            except OSError:
                return
            try:
                loop.observe(time.time(), data, decode_report(data))
            except MalformedReport:
                loop.malformed += 1
    receiver = threading.Thread(target=receive, name="adaptive-sampling-receiver", daemon=True)
    receiver.start()
    loop.start()
    say(f"adaptive INT sampling: listening on udp {address[0]}:{address[1]} for the collector's changes "
        f"(fabric monitor forwards them), raising to every packet for {cfg.adaptive.quiet_ms:g} ms after a sign")
    try:
        yield loop
    finally:
        stop.set()
        receiver.join(timeout=2)
        sock.close()
        try:
            loop.stop()
        except Exception as exc:      # the network may be going down already
            log.warning("adaptive sampling: lowering at exit failed: %s", exc)
