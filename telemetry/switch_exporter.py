"""Prometheus metrics of every switch of a running topology: port packet
and byte counters (ingress_port_counter, egress_port_counter), drops by
reason (drop_counter; reasons from p4src/include/defines.p4 via
control/p4constants.py), ECN marks (ecn_marked_counter), INT reports sent
and held back by kind (int_report_counter, drop_reports_limited), and the depth
of every egress queue a packet left since the previous read (registers
queue_depth and its kin, over BMv2 Thrift: PI does not serve register
reads; emulator/queue_depth.py).

    python -m telemetry.switch_exporter --topology topologies/leaf-spine.yaml \\
        [--p4info build/main.p4info.txtpb] [--port 9772] [--interval 1]

A poll thread reads every switch each interval and keeps the latest
readings; a scrape serves them, so a slow or dead switch never stalls
Prometheus (it shows as fabric_switch_up 0 and read errors by source). The
exporter connects to P4Runtime as a backup client (election id (0, 0) by
default, READER_ELECTION_ID, below the controller's (1000, 0),
CONTROLLER_ELECTION_ID in control/switch.py): it only reads.

Reading and exposing are separate: `samples()` turns readings into metric
families and needs no switch (tests feed it readings).

Two comparisons the alerts make need counters of one instant: the frames
the kernel delivered to a port against the pipeline's ingress counter
(InputPathLoss) and a sender's egress counter against the kernel's count
at the link's other end (LinkFramesLost). A gRPC read under load takes
tens of ms, during which a busy port receives tens of frames, so the
kernel's counts are read just before and just after each counter and
interpolated to the instant that read was answered (`at_instant`): the
port's own interfaces around the ingress counter, the far ends' around
the egress counter. Read after every other read instead, the first two
were hundreds of packets apart under load (docs/telemetry.md), enough to
hold an alert pending for most of a minute after traffic changed; the far
end's, read with its own switch (a read later), held LinkFramesLost
pending for seconds at each change of rate.
"""
from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Optional, Protocol

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric


from telemetry import metrics as m
from telemetry.state import NOT_DROPS, drop_reason_names as all_reasons
from control.feature import priority_queues
from control.topology import TopologyError
from features import load_topology
from control.p4info import P4Info
from control.p4info import EntryError
from control.switch import (CONTROLLER_ELECTION_ID, MONITOR_CREDENTIALS, READER_ELECTION_ID, ElectionId, SwitchConnection,
                         parse_election_id)
from control.tls import ClientCredentials
from emulator import queue_depth
from emulator.queue_depth import QueueKey
from emulator.bmv2_thrift import Bmv2Thrift
from emulator.network import interface_rx_packets, peer_rx_packets

REPO = Path(__file__).resolve().parent.parent
DEFAULT_P4INFO = REPO / "build" / "main.p4info.txtpb"
INGRESS_COUNTER = "ingress_port_counter"
EGRESS_COUNTER = "egress_port_counter"
DROP_COUNTER = "drop_counter"
# The kernel's counts each of these counters is compared with, read around it (at_instant)
KERNEL_COUNTS = {INGRESS_COUNTER: interface_rx_packets, EGRESS_COUNTER: peer_rx_packets}


def _ports(sw) -> list[int]:
    return list(sw.ports)


# The cells read on a switch, where not every cell: its ports' (of per-port counters) and what a feature names
# (CounterMetric.cells). A whole counter is read cell by cell: trim_counter's 4096 took 0.19 s a switch.
CELLS: dict[str, Callable[[Any], Iterable[int]]] = {
    **{name: _ports for name in (INGRESS_COUNTER, EGRESS_COUNTER)},
    **{c.counters[0]: _ports for c in m.FEATURE_COUNTERS if c.label == "port"},
    **{name: c.cells for c in m.FEATURE_COUNTERS if c.cells is not None for name in c.counters}}
# The fabric's own counters, then every feature's (their counters() hook); the
# port counters first, read together with the kernel's (see above).
COUNTERS = tuple(dict.fromkeys((INGRESS_COUNTER, EGRESS_COUNTER, DROP_COUNTER,
                                *(name for c in m.FEATURE_COUNTERS for name in c.counters))))


@dataclass(frozen=True)
class SwitchReadings:
    """One read of one switch. counters: counter name -> cell index ->
    (packets, bytes); a counter missing from it was not read. qdepth: for
    each queue a packet left since the previous read, the depth that packet
    met, {(port, queue): packets}; None if not read.
    errors: (source, message) of every read that failed. controller_primary:
    whether the switch's primary P4Runtime client has the controller's election
    id (None: not known). interface_rx: port -> frames the kernel delivered to
    its interface (emulator.network.interface_rx_packets; empty: not on this
    machine); peer_rx: port -> those delivered to the interface at the link's
    other end, for a switch's (emulator.network.peer_rx_packets), at the
    instant of the egress counter."""
    switch: str
    counters: dict[str, dict[int, tuple[int, int]]] = field(default_factory=dict)
    qdepth: Optional[dict[QueueKey, int]] = None
    errors: tuple[tuple[str, str], ...] = ()
    controller_primary: Optional[bool] = None
    interface_rx: dict[int, int] = field(default_factory=dict)
    peer_rx: dict[int, int] = field(default_factory=dict)

    @property
    def up(self) -> bool:
        return not any(source == "p4runtime" for source, _ in self.errors) and bool(self.counters)


class SwitchReader(Protocol):
    def read(self, switch, queues: int = queue_depth.QUEUES) -> SwitchReadings: ...   # queues: per port

    def close(self) -> None: ...


def at_instant(before: dict[int, int], before_s: float, after: dict[int, int], after_s: float,
               instant_s: float) -> dict[int, int]:
    """Counters read at `before_s` and `after_s`, interpolated to `instant_s`
    between them (the fraction dropped: a count not yet reached is not
    claimed). Ports read only once keep that reading."""
    span = after_s - before_s
    share = 0.0 if span <= 0 else min(1.0, max(0.0, (instant_s - before_s) / span))
    out = dict(after)
    for port, b in before.items():
        out[port] = b + int((after[port] - b) * share) if port in after else b
    return out


def drop_reason_names() -> dict[int, str]:
    """drop_counter index -> reason name (lower case), DROP_NONE left out,
    and the reasons that are not drops (NOT_DROPS: trimmed, which
    drop_counter never counts; fabric_trimmed_total counts trims)."""
    return {code: name for code, name in all_reasons().items() if code != 0 and name not in NOT_DROPS}


def samples(topo, readings: Iterable[SwitchReadings], reasons: dict[int, str],
            read_errors: Optional[dict[tuple[str, str], int]] = None) -> list[Metric]:
    """Metric families for `readings` of switches of `topo`: only the
    topology's ports are exported (labelled with the neighbour's name),
    every known drop reason (0 when not counted yet) and any other nonzero
    drop_counter cell as reason_<n>."""
    fam = {spec.name: (CounterMetricFamily if spec.kind == "counter" else GaugeMetricFamily)(
        spec.name, spec.help, labels=spec.labels) for spec in m.EXPORTER_METRICS}
    port_counters = ((m.FABRIC_PORT_RX_PACKETS, INGRESS_COUNTER, 0), (m.FABRIC_PORT_RX_BYTES, INGRESS_COUNTER, 1),
                     (m.FABRIC_PORT_TX_PACKETS, EGRESS_COUNTER, 0), (m.FABRIC_PORT_TX_BYTES, EGRESS_COUNTER, 1),
                     *((m.FEATURE_METRICS[c.metric], c.counters[0], 0) for c in m.FEATURE_COUNTERS if c.label == "port"))
    for r in readings:
        sw = topo.switches.get(r.switch)
        if sw is None:
            continue
        fam[m.FABRIC_SWITCH_UP.name].add_metric([r.switch], 1.0 if r.up else 0.0)
        if r.controller_primary is not None:
            fam[m.FABRIC_CONTROLLER_PRIMARY.name].add_metric([r.switch], 1.0 if r.controller_primary else 0.0)
        for number, port in sorted(sw.ports.items()):
            labels = [r.switch, str(number), port.peer]
            for spec, counter, which in port_counters:
                cells = r.counters.get(counter)
                if cells is not None:
                    fam[spec.name].add_metric(labels, float(cells.get(number, (0, 0))[which]))
            if number in r.interface_rx:
                fam[m.FABRIC_PORT_INTERFACE_RX_PACKETS.name].add_metric(labels, float(r.interface_rx[number]))
            if number in r.peer_rx:
                fam[m.FABRIC_PORT_PEER_RX_PACKETS.name].add_metric(labels, float(r.peer_rx[number]))
        for (number, queue), depth in sorted((r.qdepth or {}).items()):
            if number in sw.ports:
                labels = [r.switch, str(number), sw.ports[number].peer, str(queue)]
                fam[m.FABRIC_QUEUE_DEPTH.name].add_metric(labels, float(depth))
        drops = r.counters.get(DROP_COUNTER)
        if drops is not None:
            for code in sorted(set(reasons) | {c for c, (p, _) in drops.items() if p and c != 0}):
                name = reasons.get(code, f"reason_{code}")
                fam[m.FABRIC_DROPS.name].add_metric([r.switch, name], float(drops.get(code, (0, 0))[0]))
        for c in m.FEATURE_COUNTERS:
            if c.label == "port" or c.values is None or any(name not in r.counters
                                                            for name in c.counters + c.registers):
                continue
            read = {name: r.counters[name] for name in c.counters + c.registers}
            for label, number in c.values(read).items():
                fam[c.metric].add_metric([r.switch, label], number)
    for (switch, source), n in sorted((read_errors or {}).items()):
        fam[m.FABRIC_READ_ERRORS.name].add_metric([switch, source], float(n))
    return list(fam.values())


class Bmv2Reader:
    """Reads BMv2 switches: counters over P4Runtime (control/switch.py's
    SwitchConnection, entries from control/p4info.py), queue_depth over
    Thrift (emulator/bmv2_thrift.py). Connections are kept and re-made after
    a failure; each switch's last queue_depth read is kept to tell which
    queues a packet left since (emulator/queue_depth.py `fresh`)."""

    def __init__(self, p4info_path: Path = DEFAULT_P4INFO, *, election_id: ElectionId = READER_ELECTION_ID,
                 controller_election_id: ElectionId = CONTROLLER_ELECTION_ID,
                 connect_timeout: float = 2.0, read_qdepth: bool = True,
                 credentials: ClientCredentials | None = MONITOR_CREDENTIALS):
        if not Path(p4info_path).exists():
            raise FileNotFoundError(f"{p4info_path} not found: run `make build` first, or pass --p4info")
        self.p4info = P4Info.from_file(p4info_path)
        self.election_id = election_id
        self.controller_election_id = controller_election_id
        self.connect_timeout = connect_timeout
        self.credentials = credentials        # the exporter's own client certificate (mutual TLS); None: plain gRPC
        self.read_qdepth = read_qdepth
        self._p4rt: dict[str, object] = {}
        self._thrift: dict[str, object] = {}
        self._queues: dict[str, dict[QueueKey, queue_depth.QueueSample]] = {}

    def read(self, sw, queues: int = queue_depth.QUEUES) -> SwitchReadings:
        """One switch's readings; `queues`: its priority queues per port
        (a switch with queue 0 alone has no class registers worth reading)."""
        errors: list[tuple[str, str]] = []
        counters: dict[str, dict[int, tuple[int, int]]] = {}
        controller_primary = None
        kernel: dict[str, dict[int, int]] = {}         # the kernel's counts at the instant of a counter's read
        try:
            conn = self._connection(sw)
            conn.is_primary()                   # takes in the switch's latest arbitration news
            if conn.primary_election_id is not None:
                controller_primary = conn.primary_election_id == self.controller_election_id
            for name in COUNTERS:
                try:
                    cells = CELLS.get(name)
                    entries = ([self.p4info.counter_entry(name, i) for i in cells(sw)] if cells is not None
                               else [self.p4info.counter_entry(name)])
                except EntryError as exc:       # the pipeline has no such counter: say so, read the rest
                    errors.append(("p4info", str(exc)))
                    continue
                if not entries:
                    counters[name] = {}
                    continue
                kernel_read = KERNEL_COUNTS.get(name)
                if kernel_read is None:
                    counters[name] = conn.counter(*entries)
                    continue
                rx_before, before_s = kernel_read(sw), time.monotonic()
                counters[name] = conn.counter(*entries)
                answered_s = time.monotonic()
                rx_after, after_s = kernel_read(sw), time.monotonic()
                # the switch took its snapshot during the call: its midpoint is the best guess
                kernel[name] = at_instant(rx_before, before_s, rx_after, after_s, (before_s + answered_s) / 2)
        except (Exception, SystemExit) as exc:  # SystemExit: p4runtime-shell exits when arbitration fails
            text = str(exc) or type(exc).__name__
            errors.append(("p4runtime", text if text.startswith(sw.name) else f"{sw.name}: {text}"))
            self._drop(self._p4rt, sw.name)
            counters = {}
        qdepth = None
        if self.read_qdepth:
            try:
                thrift = self._thrift_session(sw)
                now = queue_depth.read_all(thrift, queues)
                qdepth = {key: s.depth for key, s in queue_depth.fresh(now, self._queues.get(sw.name)).items()}
                self._queues[sw.name] = now     # a restarted switch shows as times that went back (fresh)
                if counters:                    # the features' registers, as cells beside the counters
                    for name in m.FEATURE_REGISTERS:
                        counters[name] = {i: (int(v), 0) for i, v in enumerate(thrift.register_read(name)) if v}
            except Exception as exc:
                errors.append(("thrift", str(exc)))
                self._drop(self._thrift, sw.name)
        return SwitchReadings(sw.name, counters, qdepth, tuple(errors), controller_primary,
                              kernel.get(INGRESS_COUNTER) or interface_rx_packets(sw),
                              kernel.get(EGRESS_COUNTER) or peer_rx_packets(sw))

    def _connection(self, sw):
        conn = self._p4rt.get(sw.name)
        if conn is None:
            conn = self._p4rt[sw.name] = SwitchConnection(sw.name, sw.grpc_addr, sw.device_id,
                                                          election_id=self.election_id, reader=True,
                                                          connect_timeout=self.connect_timeout,
                                                          credentials=self.credentials)
        return conn

    def _thrift_session(self, sw):
        session = self._thrift.get(sw.name)
        if session is None:
            session = self._thrift[sw.name] = Bmv2Thrift(sw.thrift_port, sw.thrift_host,
                                                         connect_timeout=self.connect_timeout, name=sw.name)
        return session

    @staticmethod
    def _drop(cache: dict, name: str) -> None:
        item = cache.pop(name, None)
        if item is not None:
            try:
                item.close()
            except Exception:
                pass

    def close(self) -> None:
        for cache in (self._p4rt, self._thrift):
            for name in list(cache):
                self._drop(cache, name)


class SwitchExporter:
    """Polls every switch of `topo` with `reader` each `interval` seconds
    and serves the latest readings as Prometheus metrics."""

    def __init__(self, topo, reader: SwitchReader, *, interval: float = 1.0,
                 reasons: Optional[dict[int, str]] = None):
        self.topo = topo
        self.reader = reader
        self.interval = interval
        self.reasons = drop_reason_names() if reasons is None else reasons
        self.latest: dict[str, SwitchReadings] = {}
        self.read_errors: dict[tuple[str, str], int] = {}
        self.polls = 0
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self)
        self.server: Optional[m.MetricsServer] = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def collect(self) -> Iterable[Metric]:
        """prometheus_client's collector interface: the latest readings."""
        with self._lock:
            return samples(self.topo, list(self.latest.values()), self.reasons, dict(self.read_errors))

    def _read(self, sw) -> SwitchReadings:
        try:
            return self.reader.read(sw, priority_queues(self.topo, sw.name))
        except Exception as exc:   # a reader must not kill the poll thread
            return SwitchReadings(sw.name, errors=(("reader", f"{sw.name}: {exc}"),))

    def poll_once(self) -> None:
        """Read every switch, in parallel: a dead switch costs its connect
        timeout once per poll, not once per switch."""
        switches = list(self.topo.switches.values())
        with ThreadPoolExecutor(max_workers=min(16, len(switches)), thread_name_prefix="read") as pool:
            results = list(pool.map(self._read, switches))
        with self._lock:
            for sw, readings in zip(switches, results):
                self.latest[sw.name] = readings
                for source, _ in readings.errors:
                    self.read_errors[(sw.name, source)] = self.read_errors.get((sw.name, source), 0) + 1
            self.polls += 1

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            self.poll_once()
            self._stop.wait(max(0.0, self.interval - (time.monotonic() - started)))

    def start(self, host: str = "127.0.0.1", port: int = m.EXPORTER_METRICS_PORT) -> "SwitchExporter":
        self.server = m.MetricsServer(self.registry, host, port)
        self._thread = threading.Thread(target=self._run, name="switch-exporter", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None
        if self.server is not None:
            self.server.stop()
            self.server = None
        self.reader.close()

    def status(self) -> str:
        with self._lock:
            up = sorted(name for name, r in self.latest.items() if r.up)
            down = {name: r.errors[0][1] for name, r in self.latest.items() if not r.up and r.errors}
        text = f"polls {self.polls}, switches up {len(up)}/{len(self.topo.switches)}"
        if down:
            _, why = sorted(down.items())[0]
            text += f" (e.g. {why.splitlines()[0][:120]})"
        return text


def election_id_arg(text: str) -> ElectionId:
    try:
        return parse_election_id(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m telemetry.switch_exporter", description=__doc__.split("\n\n")[0])
    ap.add_argument("--topology", "-t", required=True, help="topology YAML of the running network")
    ap.add_argument("--p4info", type=Path, default=DEFAULT_P4INFO, help="P4Info of the running pipeline")
    ap.add_argument("--bind", default="127.0.0.1", help="address of /metrics (default: %(default)s)")
    ap.add_argument("--port", type=int, default=m.EXPORTER_METRICS_PORT, help="port of /metrics (default: %(default)s)")
    ap.add_argument("--interval", type=float, default=1.0, help="seconds between reads of every switch")
    ap.add_argument("--election-id", type=election_id_arg, default=READER_ELECTION_ID,
                    help="P4Runtime election id HIGH,LOW (default %s,%s: a backup below the controller)"
                         % READER_ELECTION_ID)
    ap.add_argument("--controller-election-id", type=election_id_arg, default=CONTROLLER_ELECTION_ID,
                    help="the controller's election id: fabric_controller_primary is 1 where the switch's "
                         "primary has it (default %s,%s)" % CONTROLLER_ELECTION_ID)
    ap.add_argument("--no-qdepth", action="store_true", help="do not read queue_depth over Thrift")
    ap.add_argument("--no-tls", action="store_true", help="plain gRPC (switches started with --no-tls); by default "
                    "the exporter presents build/pki/clients/monitor.pem")
    ap.add_argument("--duration", type=float, help="stop after this many seconds (default: until Ctrl-C)")
    args = ap.parse_args(argv)
    try:
        topo = load_topology(args.topology)
        reader = Bmv2Reader(args.p4info, election_id=args.election_id,
                            controller_election_id=args.controller_election_id, read_qdepth=not args.no_qdepth,
                            credentials=None if args.no_tls else MONITOR_CREDENTIALS)
        exporter = SwitchExporter(topo, reader, interval=args.interval).start(args.bind, args.port)
        assert exporter.server is not None  # start() opened it
    except (TopologyError, OSError) as exc:
        print(f"switch_exporter: error: {exc}", file=sys.stderr)
        return 2
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    print(f"switch_exporter: {len(topo.switches)} switches of {topo.name}, metrics on {exporter.server.url}",
          flush=True)
    start = time.monotonic()
    try:
        while not stop.wait(5.0 if args.duration is None else min(5.0, args.duration)):
            print(f"switch_exporter: {exporter.status()}", flush=True)
            if args.duration is not None and time.monotonic() - start >= args.duration:
                break
    finally:
        exporter.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
