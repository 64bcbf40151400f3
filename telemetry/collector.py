"""The INT collector: receives Telemetry Report v2.0 datagrams over UDP,
decodes them (telemetry/decode.py), keeps flows, paths, latency, drops,
congestion and report loss (telemetry/state.py), writes reports.csv and
summary.json, and serves Prometheus metrics.

    python -m telemetry.collector [--bind 127.0.0.1] [--port 32766]
                                  [--netns h5] [--metrics-port 9771] [--out build/telemetry]
                                  [--all-reports | --queue-bucket 4 --latency-bucket-us 16 --refresh-s 1]

Everything listens on loopback unless told otherwise. With --netns NAME the
report socket is opened inside that network namespace (a host of the
fabric, e.g. `--netns h5 --bind 0.0.0.0`) while /metrics stays on this
namespace's loopback. Malformed datagrams are counted by reason and
ignored; the collector never stops on what it receives.

Only changes of slow-moving values are sent on (reports.csv, change
listeners): a tracked flow's report whose path and queue and latency
buckets are those of the flow's last sent report, within --refresh-s, is
kept back (telemetry/changes.py). Drop and congestion reports are always
sent; --all-reports sends every report. Metrics use every report.
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import signal
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Optional, TextIO

from wire.int_telemetry import REPORT_UDP_PORT, TIMESTAMP_UNIT_NS
from telemetry import metrics as m
from telemetry.decode import MalformedReport, ReportPacket, decode_report
from emulator.netns import socket_in_netns
from telemetry.sequence import DEFAULT_WINDOW
from telemetry.changes import (DEFAULT_LATENCY_BUCKET_US, DEFAULT_QUEUE_BUCKET, DEFAULT_REFRESH_S, ChangeSettings,
                               check_bucket, check_refresh)
from telemetry.state import Outcome, TelemetryState
from features import load_topology

REPO = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO / "build" / "telemetry"
CSV_FIELDS = ["time", "node_id", "switch", "hw_id", "seq_no", "verdict", "kinds", "flow", "path", "hops",
              "e2e_latency_s", "hop_latencies_s", "queue_occupancies", "drop_reason", "congestion_queue",
              "congestion_occupancy"]
MAX_DATAGRAM = 65535


def node_names_from_topology(path: str | Path) -> dict[int, str]:
    """INT node id -> switch name: node ids are the switches' device ids."""
    return {sw.device_id: sw.name for sw in load_topology(path).switches.values()}


class Collector:
    """A running collector: start(), then reports are handled by a receiver
    thread until stop(). handle_datagram() is the whole per-datagram path,
    callable directly (tests, replays)."""

    def __init__(self, *, bind: str = "127.0.0.1", port: int = REPORT_UDP_PORT, netns: Optional[str] = None,
                 metrics_bind: str = "127.0.0.1", metrics_port: Optional[int] = m.COLLECTOR_METRICS_PORT,
                 out_dir: Optional[Path] = DEFAULT_OUT, node_names: Optional[dict[int, str]] = None,
                 time_unit_ns: int = TIMESTAMP_UNIT_NS, window: int = DEFAULT_WINDOW,
                 listeners: Optional[list[Callable[[float, bytes, ReportPacket], None]]] = None,
                 changes_only: bool = True, queue_bucket: int = DEFAULT_QUEUE_BUCKET,
                 latency_bucket_us: int = DEFAULT_LATENCY_BUCKET_US, refresh_s: float = DEFAULT_REFRESH_S,
                 change_listeners: Optional[list[Callable[[float, bytes, ReportPacket, Outcome], None]]] = None,
                 upstream: Optional[tuple[str, int]] = None):
        m.disable_created_series()
        # Called with (time, datagram, decoded report) for every well-formed
        # report, under the collector's lock (experiments: volumes, coverage).
        self.listeners = list(listeners or [])
        # Called with (time, datagram, decoded report, outcome) once per
        # individual report sent on (a reports.csv row): with changes_only,
        # a tracked flow's report only when something slow-moving changed.
        self.change_listeners = list(change_listeners or [])
        # Where each datagram with a report sent on is forwarded as received
        # (UDP, from this namespace): the adaptive sampling loop of `fabric run`.
        self.upstream = upstream
        self._upstream_sock: Optional[socket.socket] = None
        self.forwarded = 0
        # ValueError on a bad bucket or refresh period, before anything opens.
        self.changes = ChangeSettings(queue_bucket=queue_bucket, latency_bucket_us=latency_bucket_us,
                                      refresh_s=refresh_s) if changes_only else None
        self.bind, self.port, self.netns = bind, port, netns
        self.metrics_bind, self.metrics_port = metrics_bind, metrics_port
        self.out_dir = Path(out_dir) if out_dir is not None else None
        self.state = TelemetryState(node_names=node_names, time_unit_ns=time_unit_ns, window=window,
                                    changes=self.changes)
        self.lock = threading.Lock()
        self.sock: Optional[socket.socket] = None
        self.server: Optional[m.MetricsServer] = None
        self._csv_file: Optional[TextIO] = None
        self._csv: Optional[Any] = None
        self._thread: Optional[threading.Thread] = None
        self._stop = threading.Event()
        self.internal_errors = 0

    # -- lifecycle ----------------------------------------------------------

    def start(self) -> "Collector":
        sock = socket_in_netns(self.netns, socket.AF_INET, socket.SOCK_DGRAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
            sock.bind((self.bind, self.port))
        except OSError as exc:
            sock.close()
            where = f" in netns {self.netns}" if self.netns else ""
            raise OSError(f"cannot receive reports on udp {self.bind}:{self.port}{where}: {exc.strerror}") from None
        sock.settimeout(0.2)
        self.sock = sock
        self.port = sock.getsockname()[1]
        try:
            if self.metrics_port is not None:
                self.server = m.MetricsServer(self.state.registry, self.metrics_bind, self.metrics_port)
            if self.out_dir is not None:
                self.out_dir.mkdir(parents=True, exist_ok=True)
                self._csv_file = open(self.out_dir / "reports.csv", "w", newline="")
                self._csv = csv.DictWriter(self._csv_file, CSV_FIELDS)
                self._csv.writeheader()
        except OSError:
            self.stop()
            raise
        if self.upstream is not None:
            self._upstream_sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._thread = threading.Thread(target=self._receive, name="collector", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        if self._upstream_sock is not None:
            self._upstream_sock.close()
            self._upstream_sock = None
        if self.server is not None:
            self.server.stop()
            self.server = None
        if self._csv_file is not None:
            self.write_summary()
            self._csv_file.close()
            self._csv_file = None

    def __enter__(self) -> "Collector":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- where things are -----------------------------------------------------

    @property
    def report_address(self) -> str:
        return f"udp {self.bind}:{self.port}" + (f" (netns {self.netns})" if self.netns else "")

    @property
    def outputs(self) -> list[Path]:
        return [] if self.out_dir is None else [self.out_dir / "reports.csv", self.out_dir / "summary.json"]

    # -- the per-datagram path ------------------------------------------------

    def _receive(self) -> None:
        sock = self.sock
        assert sock is not None  # start() opens it before starting this thread
        while not self._stop.is_set():
            try:
                data = sock.recv(MAX_DATAGRAM)
            except socket.timeout:
                continue
            except OSError:
                if self._stop.is_set():
                    return
                raise
            self.handle_datagram(data)

    def handle_datagram(self, data: bytes, now: Optional[float] = None) -> None:
        now = time.time() if now is None else now
        with self.lock:
            try:
                pkt = decode_report(data)
            except MalformedReport as exc:
                self.state.malformed_datagram(exc.reason)
                return
            except Exception:  # a decoder bug must not stop the collector: count it as malformed
                self.internal_errors += 1
                self.state.malformed_datagram("decoder-error")
                return
            verdict, outcomes = self.state.handle(pkt, now)
            for listener in self.listeners:
                listener(now, data, pkt)
            sent = [out for out in outcomes if out.sent]
            for out in sent:
                for change_listener in self.change_listeners:
                    change_listener(now, data, pkt, out)
            if sent and self._upstream_sock is not None and self.upstream is not None:
                try:
                    self._upstream_sock.sendto(data, self.upstream)
                    self.forwarded += 1
                except OSError:          # nobody listening (ICMP refused): the collector goes on
                    pass
            if self._csv is None or (outcomes and not sent):
                return                       # no files, or every report kept back
            switch = self.state.switch(pkt.node_id)
            rows: list[Optional[Outcome]] = list(sent) if sent else [None]   # None: a duplicate's row
            for o in rows:
                row = {"time": f"{now:.6f}", "node_id": pkt.node_id, "switch": switch, "hw_id": pkt.hw_id,
                       "seq_no": pkt.seq_no, "verdict": verdict}
                if o is not None:
                    row.update(kinds="+".join(o.kinds), flow=o.flow, path=o.path, hops=o.hops or "",
                               e2e_latency_s=_num(o.e2e_latency_s),
                               hop_latencies_s=";".join(_num(x) for x in o.hop_latencies_s),
                               queue_occupancies=";".join(_num(x) for x in o.queue_occupancies),
                               drop_reason=o.drop_reason, congestion_queue=_num(o.congestion_queue),
                               congestion_occupancy=_num(o.congestion_occupancy))
                self._csv.writerow(row)

    def write_summary(self) -> Optional[Path]:
        if self.out_dir is None:
            return None
        with self.lock:
            data = self.state.summary()
            data["internal_errors"] = self.internal_errors
            if self._csv_file is not None:
                self._csv_file.flush()
        path = self.out_dir / "summary.json"
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(data, indent=2) + "\n")
        os.replace(tmp, path)
        return path

    def totals(self) -> dict[str, int]:
        with self.lock:
            return self.state.totals()


def _num(x: Optional[float]) -> str:
    if x is None:
        return ""
    return f"{x:.9g}" if isinstance(x, float) else str(x)


def progress_line(elapsed: float, t: dict[str, int], rate: float) -> str:
    return (f"[{elapsed:6.0f}s] reports {t['packets']} ({rate:.0f}/s)  lost {t['lost']}  reordered "
            f"{t['reordered']}  duplicates {t['duplicates']}  malformed {t['malformed']}  flows {t['flows']}  "
            f"drops {t['drops']}  trims {t['trims']}  congestion {t['congestion']}  kept back {t['kept_back']}")


def _bucket_arg(name: str) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            return check_bucket(name, int(text))
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a power of two (1, 2, 4, ...), got {text!r}") from None
    return parse


def _refresh_arg(text: str) -> float:
    try:
        return check_refresh(float(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds >= 0 (0: send every report), got {text!r}") from None


def _address_arg(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 1 <= int(port) <= 0xFFFF:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT with a port 1..65535, got {text!r}")
    return host, int(port)


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m telemetry.collector", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="Outputs: <out>/reports.csv (one row per individual report sent: "
                                        "every drop and congestion report, a tracked flow's report when its path "
                                        "or a queue or latency bucket changed or --refresh-s passed; every report "
                                        "with --all-reports), <out>/summary.json (rewritten every "
                                        "--summary-interval s and at exit).")
    ap.add_argument("--bind", default="127.0.0.1", help="address to receive reports on (default: %(default)s)")
    ap.add_argument("--port", type=int, default=REPORT_UDP_PORT, help="UDP port of reports (default: %(default)s)")
    ap.add_argument("--netns", help="open the report socket in this network namespace (ip netns), e.g. a host")
    ap.add_argument("--metrics-bind", default="127.0.0.1", help="address of /metrics (default: %(default)s)")
    ap.add_argument("--metrics-port", type=int, default=m.COLLECTOR_METRICS_PORT,
                    help="port of /metrics, 0 = any free port (default: %(default)s)")
    ap.add_argument("--no-metrics", action="store_true", help="do not serve Prometheus metrics")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output directory (default: build/telemetry)")
    ap.add_argument("--no-files", action="store_true", help="write no CSV/JSON")
    ap.add_argument("--topology", "-t", help="topology file: name INT nodes after their switches (node id = device id)")
    ap.add_argument("--time-unit-ns", type=int, default=TIMESTAMP_UNIT_NS,
                    help="nanoseconds per timestamp/latency unit in the reports (default: %(default)s, BMv2's us)")
    ap.add_argument("--window", type=int, default=DEFAULT_WINDOW,
                    help="reorder window in sequence numbers (default: %(default)s)")
    ap.add_argument("--all-reports", action="store_true",
                    help="send every report to reports.csv, not only changes of path, queue or latency buckets")
    ap.add_argument("--queue-bucket", type=_bucket_arg("queue_bucket"), default=DEFAULT_QUEUE_BUCKET, metavar="N",
                    help="queue changes within a bucket of N packets are unchanged; a power of two "
                         "(default: %(default)s, as the switches)")
    ap.add_argument("--latency-bucket-us", type=_bucket_arg("latency_bucket_us"), default=DEFAULT_LATENCY_BUCKET_US,
                    metavar="N", help="hop latency changes within a bucket of N us are unchanged; a power of two "
                                      "(default: %(default)s, as the switches)")
    ap.add_argument("--refresh-s", type=_refresh_arg, default=DEFAULT_REFRESH_S, metavar="S",
                    help="send an unchanged flow's report again after S seconds, 0 = every report "
                         "(default: %(default)s)")
    ap.add_argument("--upstream", type=_address_arg, metavar="HOST:PORT",
                    help="forward each datagram with a report sent on (UDP) to HOST:PORT, e.g. the adaptive "
                         "sampling loop of `fabric run` (127.0.0.1:32767)")
    ap.add_argument("--duration", type=float, help="stop after this many seconds (default: until Ctrl-C)")
    ap.add_argument("--progress", type=float, default=5.0, help="seconds between progress lines, 0 = none")
    ap.add_argument("--summary-interval", type=float, default=5.0, help="seconds between summary.json rewrites")
    args = ap.parse_args(argv)
    try:
        names = node_names_from_topology(args.topology) if args.topology else None
        collector = Collector(bind=args.bind, port=args.port, netns=args.netns, metrics_bind=args.metrics_bind,
                              metrics_port=None if args.no_metrics else args.metrics_port,
                              out_dir=None if args.no_files else args.out, node_names=names,
                              time_unit_ns=args.time_unit_ns, window=args.window,
                              changes_only=not args.all_reports, queue_bucket=args.queue_bucket,
                              latency_bucket_us=args.latency_bucket_us, refresh_s=args.refresh_s,
                              upstream=args.upstream).start()
    except (OSError, ValueError) as exc:
        print(f"collector: error: {exc}", file=sys.stderr)
        return 2
    return run_until_stopped(collector, args.duration, args.progress, args.summary_interval)


def run_until_stopped(collector: Collector, duration: Optional[float], progress: float,
                      summary_interval: float) -> int:
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    print(f"collector: reports on {collector.report_address}", flush=True)
    if collector.server is not None:
        print(f"collector: metrics on {collector.server.url}", flush=True)
    for path in collector.outputs:
        print(f"collector: writing {path}", flush=True)
    print("collector: running; Ctrl-C stops", flush=True)
    start = last_progress = last_summary = time.monotonic()
    last_packets = 0
    try:
        while not stop.wait(0.2):
            now = time.monotonic()
            if duration is not None and now - start >= duration:
                break
            if progress and now - last_progress >= progress:
                t = collector.totals()
                print(progress_line(now - start, t, (t["packets"] - last_packets) / (now - last_progress)),
                      flush=True)
                last_progress, last_packets = now, t["packets"]
            if summary_interval and now - last_summary >= summary_interval:
                collector.write_summary()
                last_summary = now
    finally:
        collector.stop()
    t = collector.totals()
    print(progress_line(time.monotonic() - start, t, 0.0).replace("(0/s)", "total"), flush=True)
    for path in collector.outputs:
        print(f"collector: wrote {path}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
