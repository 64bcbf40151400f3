"""Every Prometheus metric the collector and the switch exporter produce:
name, type, labels, help. Dashboards (monitoring/) and tests check their
PromQL against `exposed_names()`, so a metric is defined here once.

Conventions: counters are exposed with the `_total` suffix, histograms as
`_bucket`/`_sum`/`_count`; times are seconds, rates bits per second. INT
node ids are the switches' device ids (control/topology.py), so `switch`
names the node when the collector is given the topology.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server
from socketserver import ThreadingMixIn

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import make_wsgi_app

from features import FEATURES

# Default endpoints, all on loopback. Below Linux's ephemeral range, away
# from the switches' Thrift (9090+n) and P4Runtime (9559+n) ports.
COLLECTOR_METRICS_PORT = 9771
EXPORTER_METRICS_PORT = 9772
PROMETHEUS_PORT = 9770
ALERTMANAGER_PORT = 9773
ALERT_RECEIVER_PORT = 9774
GRAFANA_PORT = 3000


@dataclass(frozen=True)
class MetricSpec:
    name: str
    kind: str            # "counter" | "gauge" | "histogram"
    help: str
    labels: tuple[str, ...] = ()

    def exposed(self) -> tuple[str, ...]:
        """Sample names Prometheus stores for this metric."""
        if self.kind == "counter":
            return (f"{self.name}_total",)
        if self.kind == "histogram":
            return tuple(f"{self.name}_{s}" for s in ("bucket", "sum", "count"))
        return (self.name,)


STREAM = ("node_id", "switch", "hw_id")
NODE = ("node_id", "switch")
LATENCY_BUCKETS = (1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1, 0.25, 0.5, 1.0)

# -- collector -------------------------------------------------------------
INT_REPORT_PACKETS = MetricSpec("int_report_packets", "counter",
                                "Telemetry report packets accepted, per report stream", STREAM)
INT_REPORT_LOST = MetricSpec("int_report_lost", "gauge",
                             "Report sequence numbers skipped and not (yet) received (goes down when a late "
                             "report fills its gap)", STREAM)
INT_REPORT_REORDERED = MetricSpec("int_report_reordered", "counter",
                                  "Reports that arrived after a higher sequence number of their stream", STREAM)
INT_REPORT_DUPLICATES = MetricSpec("int_report_duplicates", "counter",
                                   "Reports whose sequence number was already received", STREAM)
INT_REPORT_RESETS = MetricSpec("int_report_stream_resets", "counter",
                               "Sequence jumps beyond the reorder window (a node restarted)", STREAM)
INT_REPORT_MALFORMED = MetricSpec("int_report_malformed", "counter",
                                  "Datagrams ignored because they are not well-formed reports", ("reason",))
INT_REPORTS = MetricSpec("int_reports", "counter",
                         "Individual reports, by association flag (tracked_flow, drop, congestion, "
                         "intermediate, other; trim: a drop report of reason trimmed)", (*NODE, "kind"))
INT_REPORTS_UNCHANGED = MetricSpec("int_reports_unchanged", "counter",
                                   "Tracked-flow reports the collector kept back from reports.csv and its change "
                                   "listeners: same path and queue and latency buckets as the flow's last sent "
                                   "report, within the refresh period (the metrics here still count them)", NODE)
INT_FLOW_REPORTS = MetricSpec("int_flow_reports", "counter", "Tracked-flow reports per flow", ("flow",))
INT_FLOW_E2E_LATENCY = MetricSpec("int_flow_e2e_latency_seconds", "histogram",
                                  "Sink egress timestamp minus source ingress timestamp", ("flow",))
INT_FLOW_E2E_LATENCY_LAST = MetricSpec("int_flow_e2e_latency_last_seconds", "gauge",
                                       "Latest end-to-end latency of the flow", ("flow",))
INT_FLOW_HOPS = MetricSpec("int_flow_hops", "gauge", "INT nodes on the flow's latest path", ("flow",))
INT_FLOW_PATH = MetricSpec("int_flow_path_info", "gauge",
                           "1 for the flow's current path: node[ingress>egress] per hop, source first",
                           ("flow", "path"))
INT_FLOW_PATH_CHANGES = MetricSpec("int_flow_path_changes", "counter", "Times the flow's path changed", ("flow",))
INT_FLOW_HOP_LATENCY = MetricSpec("int_flow_hop_latency_seconds", "gauge",
                                  "Latest hop latency at each hop of the flow (hop 0 = source)",
                                  ("flow", "hop", *NODE))
INT_FLOW_HOP_QUEUE = MetricSpec("int_flow_hop_queue_occupancy", "gauge",
                                "Latest queue occupancy at each hop of the flow (packets on BMv2)",
                                ("flow", "hop", *NODE))
INT_HOP_LATENCY = MetricSpec("int_hop_latency_seconds", "histogram", "Hop latency seen at each node", NODE)
INT_QUEUE_OCCUPANCY = MetricSpec("int_queue_occupancy", "gauge",
                                 "Latest queue occupancy INT saw at a node's egress port",
                                 (*NODE, "egress_port", "queue_id"))
INT_PORT_TX_RATE = MetricSpec("int_port_tx_rate_bps", "gauge",
                              "Egress port transmit rate from INT tx bytes and their timestamps (HPCC)",
                              (*NODE, "egress_port"))
INT_DROP_REPORTS = MetricSpec("int_drop_reports", "counter",
                              "Drop reports by node and drop reason (trimmed: a trim, not a drop)", (*NODE, "reason"))
INT_CONGESTION_REPORTS = MetricSpec("int_congestion_reports", "counter", "Queue congestion reports",
                                    (*NODE, "queue_id"))
INT_CONGESTION_QUEUE = MetricSpec("int_congestion_queue_occupancy", "gauge",
                                  "Queue occupancy in the latest congestion report", (*NODE, "queue_id"))

COLLECTOR_METRICS = (INT_REPORT_PACKETS, INT_REPORT_LOST, INT_REPORT_REORDERED, INT_REPORT_DUPLICATES,
                     INT_REPORT_RESETS, INT_REPORT_MALFORMED, INT_REPORTS, INT_REPORTS_UNCHANGED, INT_FLOW_REPORTS,
                     INT_FLOW_E2E_LATENCY, INT_FLOW_E2E_LATENCY_LAST, INT_FLOW_HOPS, INT_FLOW_PATH,
                     INT_FLOW_PATH_CHANGES, INT_FLOW_HOP_LATENCY, INT_FLOW_HOP_QUEUE, INT_HOP_LATENCY,
                     INT_QUEUE_OCCUPANCY, INT_PORT_TX_RATE, INT_DROP_REPORTS, INT_CONGESTION_REPORTS,
                     INT_CONGESTION_QUEUE)

# -- switch exporter -------------------------------------------------------
PORT = ("switch", "port", "peer")
FABRIC_SWITCH_UP = MetricSpec("fabric_switch_up", "gauge", "1 when the last read of the switch succeeded",
                              ("switch",))
FABRIC_CONTROLLER_PRIMARY = MetricSpec("fabric_controller_primary", "gauge",
                                       "1 when the switch's primary P4Runtime client has the controller's election id",
                                       ("switch",))
FABRIC_PORT_RX_PACKETS = MetricSpec("fabric_port_rx_packets", "counter", "ingress_port_counter packets", PORT)
FABRIC_PORT_RX_BYTES = MetricSpec("fabric_port_rx_bytes", "counter", "ingress_port_counter bytes", PORT)
FABRIC_PORT_INTERFACE_RX_PACKETS = MetricSpec(
    "fabric_port_interface_rx_packets", "counter",
    "frames the kernel delivered to the port's interface, before BMv2 read them; above fabric_port_rx_packets "
    "by what BMv2 lost or still holds in its input path", PORT)
FABRIC_PORT_TX_PACKETS = MetricSpec("fabric_port_tx_packets", "counter", "egress_port_counter packets", PORT)
FABRIC_PORT_PEER_RX_PACKETS = MetricSpec(
    "fabric_port_peer_rx_packets", "counter",
    "frames the kernel delivered to the interface at the link's other end (a switch's), read at the instant of "
    "fabric_port_tx_packets; below it by what the link lost", PORT)
FABRIC_PORT_TX_BYTES = MetricSpec("fabric_port_tx_bytes", "counter", "egress_port_counter bytes", PORT)
FABRIC_DROPS = MetricSpec("fabric_drops", "counter", "drop_counter packets by drop reason", ("switch", "reason"))
FABRIC_QUEUE_DEPTH = MetricSpec("fabric_queue_depth_packets", "gauge",
                                "queue_depth register: the depth the last packet to leave the port's priority queue "
                                "met on joining it; only for queues a packet left since the exporter's previous read "
                                "(an idle or never used queue has no sample: absent, not 0)", (*PORT, "queue"))
FABRIC_READ_ERRORS = MetricSpec("fabric_exporter_read_errors", "counter",
                                "Failed reads of a switch, by source (p4runtime, thrift)", ("switch", "source"))

# The features' counter metrics (their counters() hook, control/feature.py), named once there.
FEATURE_COUNTERS = tuple(c for f in FEATURES for c in f.counters)
FEATURE_REGISTERS = tuple(dict.fromkeys(r for c in FEATURE_COUNTERS for r in c.registers))
FEATURE_METRICS = {c.metric: MetricSpec(c.metric, "counter", c.help, PORT if c.label == "port" else ("switch", c.label))
                   for c in FEATURE_COUNTERS}
FABRIC_ECN_MARKED = FEATURE_METRICS["fabric_ecn_marked"]      # the dashboards' ECN panels
FABRIC_INT_REPORTS = FEATURE_METRICS["fabric_int_reports"]

EXPORTER_METRICS = (FABRIC_SWITCH_UP, FABRIC_CONTROLLER_PRIMARY, FABRIC_PORT_RX_PACKETS, FABRIC_PORT_RX_BYTES,
                    FABRIC_PORT_INTERFACE_RX_PACKETS, FABRIC_PORT_TX_PACKETS, FABRIC_PORT_PEER_RX_PACKETS,
                    FABRIC_PORT_TX_BYTES, FABRIC_DROPS, FABRIC_QUEUE_DEPTH, *FEATURE_METRICS.values(),
                    FABRIC_READ_ERRORS)


def exposed_names() -> set[str]:
    """Every sample name the two exporters can produce."""
    return {n for spec in COLLECTOR_METRICS + EXPORTER_METRICS for n in spec.exposed()}


def disable_created_series() -> None:
    """prometheus_client adds a `_created` series to every counter and
    histogram; the dashboards do not use them."""
    try:
        from prometheus_client import disable_created_metrics
        disable_created_metrics()
    except ImportError:  # prometheus_client < 0.18
        pass


def make_metric(spec: MetricSpec, registry: CollectorRegistry):
    """A prometheus_client metric for `spec`, registered in `registry`."""
    if spec.kind == "counter":
        return Counter(spec.name, spec.help, spec.labels, registry=registry)
    if spec.kind == "gauge":
        return Gauge(spec.name, spec.help, spec.labels, registry=registry)
    if spec.kind == "histogram":
        return Histogram(spec.name, spec.help, spec.labels, registry=registry, buckets=LATENCY_BUCKETS)
    raise ValueError(f"{spec.name}: unknown metric kind {spec.kind!r}")


# -- the /metrics endpoint ---------------------------------------------------

class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 - a scrape a second is not news
        pass


class _ThreadingServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class MetricsServer:
    """Serves a registry on http://host:port/metrics (port 0: any free port).
    Own server rather than prometheus_client.start_http_server so it can be
    stopped, and the chosen port read back, on every client version."""

    def __init__(self, registry: CollectorRegistry, host: str = "127.0.0.1", port: int = 0):
        try:
            self._server = make_server(host, port, make_wsgi_app(registry), _ThreadingServer,
                                       handler_class=_QuietHandler)
        except OSError as exc:
            raise OSError(f"cannot serve metrics on {host}:{port}: {exc.strerror}") from None
        self.host = host
        self.port = self._server.server_port
        self._thread = threading.Thread(target=self._server.serve_forever, name=f"metrics:{self.port}",
                                        daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/metrics"

    @property
    def target(self) -> str:
        return f"{self.host}:{self.port}"

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
