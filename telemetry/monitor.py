"""Monitoring next to a running network, in one command: the INT collector,
the switch exporter, Prometheus with the alerting rules, Alertmanager and
the project's alert receiver, all on loopback; prints their URLs; stops
and cleans up all of them on Ctrl-C / SIGTERM (or after --duration).

    fabric monitor --topology leaf-spine

Prometheus is Debian's `prometheus` binary with its own config and TSDB
under --run-dir (default build/monitor); Grafana is not packaged here: see
telemetry/docker-compose.yml for a Grafana (and Prometheus) in Docker,
which reads the same dashboards. Alertmanager is Debian's
`prometheus-alertmanager` (telemetry/alertmanager.py); every alert it
sends is printed here, logged to --run-dir/alerts.jsonl, and listed by
the receiver (telemetry/alert_receiver.py; `alerts` in the fabric shell).
"""
from __future__ import annotations

import argparse
import shutil
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Optional

from wire.int_telemetry import REPORT_UDP_PORT
from telemetry import prometheus_config
from telemetry import metrics as m
from telemetry.adaptive_sampling import CHANGES_PORT
from telemetry.collector import Collector, progress_line
from emulator.netns import NETNS_DIR
from telemetry.alert_receiver import AlertReceiver
from telemetry.alertmanager import AlertmanagerMissing, AlertmanagerProcess, write_config
from telemetry.prometheus import PrometheusError, PrometheusMissing, PrometheusProcess
from telemetry.switch_exporter import DEFAULT_P4INFO, Bmv2Reader, SwitchExporter
from control.switch import MONITOR_CREDENTIALS
from control.topology import TopologyError
from features import load_topology

REPO = Path(__file__).resolve().parent.parent
DEFAULT_RUN_DIR = REPO / "build" / "monitor"
COLLECTOR_JOB, EXPORTER_JOB = "int-collector", "switch-exporter"


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="fabric monitor", description=__doc__.split("\n\n")[0])
    ap.add_argument("--topology", "-t", required=True,
                    help="the running network's topology: a name in topologies/ or a YAML path")
    ap.add_argument("--p4info", type=Path, default=DEFAULT_P4INFO, help="P4Info of the running pipeline "
                    "(default: build/main.p4info.txtpb)")
    ap.add_argument("--run-dir", type=Path, default=DEFAULT_RUN_DIR, help="config, TSDB, logs and collector "
                    "outputs (default: build/monitor)")
    ap.add_argument("--collector-bind", default="127.0.0.1",
                    help="address the collector receives reports on (default: %(default)s)")
    ap.add_argument("--collector-port", type=int, default=REPORT_UDP_PORT,
                    help="UDP port of reports (default: %(default)s)")
    ap.add_argument("--collector-netns", help="receive reports inside this network namespace (default: the "
                    "collector host of the topology's int section, on its address; else this namespace)")
    ap.add_argument("--collector-metrics-port", type=int, default=m.COLLECTOR_METRICS_PORT,
                    help="port of the collector's /metrics, 0 = any (default: %(default)s)")
    ap.add_argument("--exporter-port", type=int, default=m.EXPORTER_METRICS_PORT,
                    help="port of the switch exporter's /metrics, 0 = any (default: %(default)s)")
    ap.add_argument("--prometheus-port", type=int, default=m.PROMETHEUS_PORT,
                    help="Prometheus web port, 0 = any (default: %(default)s)")
    ap.add_argument("--alertmanager-port", type=int, default=m.ALERTMANAGER_PORT,
                    help="Alertmanager web port, 0 = any (default: %(default)s)")
    ap.add_argument("--alert-receiver-port", type=int, default=m.ALERT_RECEIVER_PORT,
                    help="port of the alert receiver (the webhook), 0 = any (default: %(default)s)")
    ap.add_argument("--no-prometheus", action="store_true", help="run only the collector and the exporter "
                    "(e.g. with docker-compose's Prometheus)")
    ap.add_argument("--no-alertmanager", action="store_true", help="no Alertmanager nor receiver: alerts only "
                    "on Prometheus's /alerts page")
    ap.add_argument("--no-tls", action="store_true", help="read switches over plain gRPC (a network started with "
                    "--no-tls); by default the exporter presents build/pki/clients/monitor.pem")
    ap.add_argument("--interval", type=float, default=1.0, help="seconds between switch reads (default: 1)")
    ap.add_argument("--scrape-interval", default="5s", help="Prometheus scrape interval (default: 5s)")
    ap.add_argument("--progress", type=float, default=10.0, help="seconds between status lines, 0 = none")
    ap.add_argument("--duration", type=float, help="stop after this many seconds (default: until Ctrl-C)")
    args = ap.parse_args(argv)

    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    collector: Optional[Collector] = None
    exporter: Optional[SwitchExporter] = None
    prom: Optional[PrometheusProcess] = None
    am: Optional[AlertmanagerProcess] = None
    receiver: Optional[AlertReceiver] = None
    run_dir = args.run_dir.resolve()
    try:
        topo = load_topology(args.topology)
        run_dir.mkdir(parents=True, exist_ok=True)
        names = {sw.device_id: sw.name for sw in topo.switches.values()}
        bind, port, netns = args.collector_bind, args.collector_port, args.collector_netns
        int_cfg = topo.features.get("int")
        if int_cfg is not None and netns is None:
            # The switches send reports to the topology's collector host: receive them in its namespace.
            nic = topo.nic(int_cfg.collector)
            if (NETNS_DIR / nic.host).exists():
                netns, bind, port = nic.host, nic.ip, int_cfg.collector_port
            else:
                print(f"monitor: no namespace {nic.host} (is the network running?): reports on "
                      f"{bind}:{port} instead of the collector host {nic.label}", flush=True)
        # A topology with int.adaptive: what the collector sends on also goes to the loop beside `fabric run`.
        upstream = ("127.0.0.1", CHANGES_PORT) if int_cfg is not None and int_cfg.adaptive is not None else None
        collector = Collector(bind=bind, port=port, netns=netns,
                              metrics_port=args.collector_metrics_port, out_dir=run_dir / "collector",
                              node_names=names, upstream=upstream).start()
        if upstream is not None:
            say(f"monitor: collector forwards its changes to udp {upstream[0]}:{upstream[1]} (adaptive sampling)")
        reader = Bmv2Reader(args.p4info, credentials=None if args.no_tls else MONITOR_CREDENTIALS)
        exporter = SwitchExporter(topo, reader, interval=args.interval).start(
            port=args.exporter_port)
        assert collector.server is not None and exporter.server is not None  # start() opened them
        if not args.no_prometheus and not args.no_alertmanager:
            receiver = AlertReceiver(port=args.alert_receiver_port, log=run_dir / "alerts.jsonl",
                                     echo=lambda line: say(f"monitor: alert {line}")).start()
            shutil.rmtree(run_dir / "alertmanager-data", ignore_errors=True)
            am = AlertmanagerProcess(write_config(run_dir / "alertmanager.yml", receiver.webhook_url),
                                     run_dir / "alertmanager-data", port=args.alertmanager_port,
                                     log=run_dir / "alertmanager.log").start()
        if not args.no_prometheus:
            config = prometheus_config.write(
                run_dir / "prometheus.yml",
                {COLLECTOR_JOB: [collector.server.target], EXPORTER_JOB: [exporter.server.target]},
                scrape_interval=args.scrape_interval, alertmanagers=[am.target] if am is not None else [])
            data = run_dir / "prometheus-data"
            shutil.rmtree(data, ignore_errors=True)   # a fresh TSDB per run
            prom = PrometheusProcess(config, data, port=args.prometheus_port, log=run_dir / "prometheus.log").start()
    except (TopologyError, OSError, PrometheusMissing, PrometheusError, AlertmanagerMissing) as exc:
        print(f"monitor: error: {exc}", file=sys.stderr)
        _cleanup(prom, am, receiver, exporter, collector)
        return 2

    print(f"monitor: topology {topo.name} ({len(topo.switches)} switches)")
    print(f"monitor: INT reports   -> {collector.report_address}")
    print(f"monitor: collector     -> {collector.server.url}")
    print(f"monitor: switches      -> {exporter.server.url}")
    if prom is not None:
        assert prom.proc is not None  # start() launched it
        print(f"monitor: Prometheus    -> {prom.url}  (pid {prom.proc.pid}, config {prom.config}, log {prom.log})")
    if am is not None and receiver is not None:
        print(f"monitor: Alertmanager  -> {am.url}  (config {am.config}, log {am.log})")
        print(f"monitor: alerts        -> {receiver.url}  (firing now; every alert also in {receiver.store.log})")
    print("monitor: Grafana       -> docker compose -f telemetry/docker-compose.yml up grafana "
          f"(http://127.0.0.1:{m.GRAFANA_PORT}; dashboards in telemetry/grafana/dashboards)")
    for path in collector.outputs:
        print(f"monitor: output        -> {path}")
    print("monitor: running; Ctrl-C stops and cleans up", flush=True)

    code = 0
    start = last = time.monotonic()
    last_packets = 0
    try:
        while not stop.wait(0.5):
            now = time.monotonic()
            if prom is not None:
                assert prom.proc is not None  # running until _cleanup() stops it
                if prom.proc.poll() is not None:
                    print(f"monitor: Prometheus exited ({prom.proc.returncode}); its log:\n{prom.log_tail()}",
                          file=sys.stderr)
                    code = 1
                    break
            if am is not None and (am.proc is None or am.proc.poll() is not None):
                print(f"monitor: Alertmanager exited; its log:\n{am.log_tail()}", file=sys.stderr)
                code = 1
                break
            if args.duration is not None and now - start >= args.duration:
                break
            if args.progress and now - last >= args.progress:
                totals = collector.totals()
                rate = (totals["packets"] - last_packets) / (now - last)
                say(f"monitor: {progress_line(now - start, totals, rate)}\n"
                    f"monitor:          exporter {exporter.status()}"
                    + (f"; Prometheus targets: {_targets(prom)}" if prom is not None else ""))
                last, last_packets = now, totals["packets"]
    finally:
        _cleanup(prom, am, receiver, exporter, collector)
    for path in collector.outputs:
        print(f"monitor: wrote {path}")
    if receiver is not None and receiver.store.log is not None and receiver.store.log.exists():
        print(f"monitor: wrote {receiver.store.log}")
    print("monitor: stopped collector, exporter" + (", Prometheus" if prom is not None else "")
          + (", Alertmanager and the alert receiver" if am is not None else ""), flush=True)
    return code


_OUTPUT = threading.Lock()


def say(text: str) -> None:
    """Whole lines on stdout, from any thread: the alert receiver's lines
    come from its handler threads, between the progress lines (print()
    writes a line's text and its newline apart)."""
    with _OUTPUT:
        sys.stdout.write(text + "\n")
        sys.stdout.flush()


def _targets(prom: PrometheusProcess) -> str:
    try:
        return ", ".join(f"{t['labels'].get('job')} {t.get('health')}" for t in prom.targets()) or "none yet"
    except PrometheusError as exc:
        return f"unknown ({exc})"


def _cleanup(prom: Optional[PrometheusProcess], am: Optional[AlertmanagerProcess],
             receiver: Optional[AlertReceiver], exporter: Optional[SwitchExporter],
             collector: Optional[Collector]) -> None:
    for stop in (prom.stop if prom else None, am.stop if am else None, receiver.stop if receiver else None,
                 exporter.stop if exporter else None, collector.stop if collector else None):
        if stop is not None:
            try:
                stop()
            except Exception as exc:  # keep cleaning up the others
                print(f"monitor: while stopping: {exc}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
