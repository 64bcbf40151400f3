"""A real Prometheus (Debian's package, started here on a free loopback
port with its own config and TSDB) scrapes the collector, fed crafted
reports over loopback UDP, and the switch exporter, fed known readings.
PromQL must return what was sent, and every dashboard query must return
data. Without the prometheus binary these tests fail, they do not skip."""
import json
import socket
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path

import pytest

from features import load_topology
from features.lossless import COUNTERS as LOSSLESS_COUNTERS, PAUSED_REGISTER, cell
from features.trimming import TRIM_COUNTER
from features.trimming import cell as trim_cell
from telemetry import dashboards, prometheus_config
from telemetry.collector import Collector
from telemetry.prometheus import PrometheusProcess, find_prometheus
from telemetry.switch_exporter import SwitchExporter, SwitchReadings, drop_reason_names
from telemetry.synthetic import Flow, Hop, congestion_report, drop_report, flow_report

REPO = Path(__file__).resolve().parents[2]
TOPO = load_topology(REPO / "topologies" / "leaf-spine.yaml")
NAMES = {sw.device_id: sw.name for sw in TOPO.switches.values()}     # spine1=1 spine2=2 leaf1=3 leaf2=4
FLOW = Flow("10.0.1.1", "10.0.3.1", 49152, 4791)
PATH = [Hop(3, 1, 3), Hop(1, 1, 2), Hop(4, 3, 1)]
JOBS = {"int-collector", "switch-exporter"}
DASHBOARD_FILES = sorted((REPO / "telemetry" / "grafana" / "dashboards").glob("*.json"))


def sent_datagrams() -> list[bytes]:
    """Sink leaf2's stream: sequence 0..9 sent as 0 1 2 3 5 6 8 7 2 9 (4 lost, 7 late, 2 twice);
    leaf1: 3 no_route + 2 ttl_expired drop reports; spine1: 2 congestion reports (last 42);
    3 malformed datagrams (2 truncated, 1 wrong version)."""
    flow = {s: flow_report(FLOW, PATH, seq_no=s, start_ts=1000 * s, latencies=[10, 20, 30], queues=[1, 2, 3],
                           tx_bytes=[0, 125_000 * s, 0]) for s in range(10)}
    out = [flow[s] for s in (0, 1, 2, 3, 5, 6, 8, 7, 2, 9)]
    out += [drop_report(FLOW, node_id=3, seq_no=s, reason=4 if s < 3 else 5) for s in range(5)]
    out += [congestion_report(FLOW, node_id=1, seq_no=s, queue_id=0, occupancy=occ, egress_port=2)
            for s, occ in enumerate((17, 42))]
    out += [b"\x20\x00", b"", b"\x30" + flow[0][1:]]
    return out


class GrowingReader:
    """Known switch readings: port counters grow 100 packets per read, leaf1's drop
    counter and queue depths stay fixed, every PFC counter counts on (port 3,
    class 3), trims on (port 3, queue 0) two a read; spine2 cannot be read."""

    def __init__(self):
        self.reads = 0
        self.lock = threading.Lock()

    def read(self, sw, queues=8):
        if sw.name == "spine2":
            raise ConnectionError("spine2: no P4Runtime server (test)")
        with self.lock:
            self.reads += 1
            n = self.reads
        ports = {p: (100 * n + p, 64_000 * n + p) for p in sw.ports}
        drops = {4: (3, 0), 5: (1, 0)} if sw.name == "leaf1" else {}
        qdepth = {(3, 0): 6 if sw.name == "leaf1" else 1}
        lossless_counters = {name: {cell(3, 3): (n, 0)} for name in LOSSLESS_COUNTERS}
        lossless_counters[PAUSED_REGISTER] = {cell(3, 3): (250_000 * n, 0)}    # a register: microseconds
        # the kernel delivered a frame more per read to each port's interface than the pipeline counted
        interface_rx = {p: 101 * n + p for p in sw.ports}
        return SwitchReadings(sw.name, {"ingress_port_counter": ports, "egress_port_counter": ports,
                                        "drop_counter": drops, "ecn_marked_counter": {3: (n, 0)},
                                        TRIM_COUNTER: {trim_cell(3, 0): (2 * n, 0)},
                                        **lossless_counters}, qdepth, interface_rx=interface_rx)

    def close(self):
        pass


@dataclass
class Stack:
    prom: PrometheusProcess
    collector: Collector
    exporter: SwitchExporter


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    find_prometheus()     # PrometheusMissing: an error, not a skip
    tmp = tmp_path_factory.mktemp("monitoring")
    collector = Collector(port=0, metrics_port=0, out_dir=tmp / "collector", node_names=NAMES).start()
    exporter = SwitchExporter(TOPO, GrowingReader(), interval=0.5, reasons=drop_reason_names()).start(port=0)
    config = prometheus_config.write(tmp / "prometheus.yml", {"int-collector": [collector.server.target],
                                                              "switch-exporter": [exporter.server.target]},
                                     scrape_interval="1s")
    prom = None
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as tx:
            for data in sent_datagrams():
                tx.sendto(data, ("127.0.0.1", collector.port))
        prom = PrometheusProcess(config, tmp / "tsdb", log=tmp / "prometheus.log").start()
        prom.wait_targets_up(JOBS, timeout=90)
        yield Stack(prom, collector, exporter)
    finally:
        if prom is not None:
            prom.stop()
        exporter.stop()
        collector.stop()


def test_generated_config_passes_promtool(stack):
    result = subprocess.run(["promtool", "check", "config", str(stack.prom.config)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    default = subprocess.run(["promtool", "check", "config", str(REPO / "telemetry" / "prometheus.yml")],
                             capture_output=True, text=True)
    assert default.returncode == 0, default.stdout + default.stderr


def test_targets_are_up(stack):
    targets = stack.prom.targets()
    assert {t["labels"]["job"] for t in targets} == JOBS and all(t["health"] == "up" for t in targets)


def one_value(stack, expr, expected, timeout=30):
    """Poll until the query returns exactly one sample equal to `expected`."""
    stack.prom.wait_query(expr, lambda r: len(r) == 1 and float(r[0]["value"][1]) == pytest.approx(expected),
                          timeout=timeout)


@pytest.mark.parametrize("expr,expected", [
    ('int_report_packets_total{switch="leaf2",hw_id="0"}', 10),
    ('int_report_lost{switch="leaf2"}', 1),
    ('int_report_reordered_total{switch="leaf2"}', 1),
    ('int_report_duplicates_total{switch="leaf2"}', 1),
    ('int_report_packets_total{switch="leaf1"}', 5),
    ('sum(int_report_lost)', 1),
    ('int_drop_reports_total{switch="leaf1",reason="no_route"}', 3),
    ('int_drop_reports_total{switch="leaf1",reason="ttl_expired"}', 2),
    ('int_congestion_reports_total{switch="spine1",queue_id="0"}', 2),
    ('int_congestion_queue_occupancy{switch="spine1"}', 42),
    ('int_report_malformed_total{reason="truncated"}', 2),
    ('int_report_malformed_total{reason="bad-version"}', 1),
    (f'int_flow_reports_total{{flow="{FLOW.label}"}}', 9),
    (f'int_flow_e2e_latency_last_seconds{{flow="{FLOW.label}"}}', 70e-6),        # 10+5+20+5+30 us
    (f'int_flow_e2e_latency_seconds_count{{flow="{FLOW.label}"}}', 9),
    (f'int_flow_hops{{flow="{FLOW.label}"}}', 3),
    (f'int_flow_path_info{{flow="{FLOW.label}",path="leaf1[1>3] spine1[1>2] leaf2[3>1]"}}', 1),
    (f'int_flow_hop_latency_seconds{{flow="{FLOW.label}",hop="1",switch="spine1"}}', 20e-6),
    ('int_queue_occupancy{switch="leaf2",egress_port="1"}', 3),
    ('int_port_tx_rate_bps{switch="spine1",egress_port="2"}', 1e9),                # 125 kB per 1000 us
    ('int_reports_total{switch="leaf2",kind="tracked_flow"}', 9),
    ('fabric_drops_total{switch="leaf1",reason="no_route"}', 3),
    ('fabric_drops_total{switch="leaf1",reason="ttl_expired"}', 1),
    ('fabric_drops_total{switch="leaf1",reason="parser_error"}', 0),
    ('fabric_queue_depth_packets{switch="leaf1",port="3",peer="spine1",queue="0"}', 6),
    ('fabric_switch_up{switch="spine2"}', 0),
    ('sum(fabric_switch_up)', 3),
    ('count(fabric_port_rx_packets_total)', 10),       # leaf1, leaf2: 4 ports; spine1: 2 (spine2 unreadable)
])
def test_promql_returns_what_was_sent(stack, expr, expected):
    one_value(stack, expr, expected)


def test_counters_move_between_scrapes(stack):
    stack.prom.wait_query('rate(fabric_port_rx_packets_total{switch="leaf1",port="1"}[1m]) > 0', timeout=30)
    stack.prom.wait_query('fabric_exporter_read_errors_total{switch="spine2",source="reader"} > 1', timeout=30)
    stack.prom.wait_query('rate(fabric_trimmed_total{switch="leaf1",port_queue="3/0"}[1m]) > 0', timeout=30)


def substitute(expr: str, variables: list[dict]) -> str:
    for var in variables:
        expr = expr.replace(f"${var['name']}", var.get("allValue", ".*"))
    return expr


@pytest.mark.parametrize("path", DASHBOARD_FILES, ids=lambda p: p.stem)
def test_every_dashboard_query_returns_data(stack, path):
    model = json.loads(path.read_text())
    variables = model["templating"]["list"]
    for var in variables:
        metric = var["definition"].split("(", 1)[1].split(",")[0].strip()
        assert stack.prom.series(metric), f"{path.name}: variable {var['name']}: no series of {metric}"
    failures = []
    for title, expr in dashboards.queries(model):
        query = substitute(expr, variables)
        try:
            stack.prom.wait_query(query, timeout=45)
        except Exception as exc:
            failures.append(f"{title}: {query}: {str(exc).splitlines()[0]}")
    assert not failures, f"{path.name}: queries without data:\n" + "\n".join(failures)
