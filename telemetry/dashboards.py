"""The Grafana dashboards, as Python: every query is written from the
metric definitions in telemetry/metrics.py, and this writes the JSON that
Grafana provisions from telemetry/grafana/dashboards/.

    python -m telemetry.dashboards          # rewrite the JSON files

tests/monitoring check that the files are current, that every query names
only metrics the exporters produce, and that every query returns data on a
real Prometheus fed by the collector and the switch exporter.
"""
from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from telemetry import metrics as m

OUT_DIR = Path(__file__).resolve().parent / "grafana" / "dashboards"
DATASOURCE = {"type": "prometheus", "uid": "prometheus"}
WINDOW = "1m"


def total(spec: m.MetricSpec) -> str:
    return spec.exposed()[0]


def bucket(spec: m.MetricSpec) -> str:
    return f"{spec.name}_bucket"


@dataclass
class Target:
    expr: str
    legend: str = ""
    instant: bool = False


@dataclass
class Panel:
    title: str
    targets: list[Target]
    kind: str = "timeseries"     # timeseries | stat | table
    unit: str = "short"
    width: int = 12
    height: int = 8
    description: str = ""


@dataclass
class Variable:
    name: str
    metric: str
    label: str

    def model(self) -> dict:
        query = f"label_values({self.metric}, {self.label})"
        return {"name": self.name, "label": self.label, "type": "query", "datasource": DATASOURCE,
                "query": {"query": query, "refId": f"var-{self.name}"}, "definition": query,
                "includeAll": True, "multi": True, "allValue": ".*", "refresh": 2, "sort": 1,
                "current": {"selected": True, "text": ["All"], "value": ["$__all"]}, "options": []}


@dataclass
class Dashboard:
    uid: str
    title: str
    description: str
    panels: list[Panel]
    variables: list[Variable] = field(default_factory=list)

    def model(self) -> dict:
        panels, x, y, row_h = [], 0, 0, 0
        for i, p in enumerate(self.panels, start=1):
            if x + p.width > 24:
                x, y, row_h = 0, y + row_h, 0
            panels.append(_panel(i, p, x, y))
            x, row_h = x + p.width, max(row_h, p.height)
        return {
            "uid": self.uid, "title": self.title, "description": self.description,
            "tags": ["p4-ai-fabric"], "timezone": "browser", "editable": True, "graphTooltip": 1,
            "schemaVersion": 38, "version": 1, "refresh": "5s", "time": {"from": "now-15m", "to": "now"},
            "annotations": {"list": []}, "links": [],
            "templating": {"list": [v.model() for v in self.variables]},
            "panels": panels,
        }


def _panel(pid: int, p: Panel, x: int, y: int) -> dict:
    targets = []
    for i, t in enumerate(p.targets):
        target = {"refId": chr(ord("A") + i), "datasource": DATASOURCE, "expr": t.expr,
                  "legendFormat": t.legend or "__auto", "range": not (t.instant or p.kind == "table"),
                  "instant": t.instant or p.kind == "table"}
        if p.kind == "table":
            target["format"] = "table"
        targets.append(target)
    model = {"id": pid, "type": p.kind, "title": p.title, "description": p.description, "datasource": DATASOURCE,
             "gridPos": {"h": p.height, "w": p.width, "x": x, "y": y}, "targets": targets,
             "fieldConfig": {"defaults": {"unit": p.unit}, "overrides": []}}
    if p.kind == "timeseries":
        model["options"] = {"legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
                            "tooltip": {"mode": "multi", "sort": "desc"}}
    elif p.kind == "stat":
        model["options"] = {"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
                            "colorMode": "value", "graphMode": "area", "textMode": "auto"}
    else:
        model["options"] = {"showHeader": True}
        model["transformations"] = [{"id": "organize", "options": {"excludeByName": {"Time": True}}}]
    return model


SW = '{switch=~"$switch"}'
FLOW = '{flow=~"$flow"}'
SWITCH_VAR = Variable("switch", m.FABRIC_SWITCH_UP.name, "switch")
FLOW_VAR = Variable("flow", m.INT_FLOW_HOPS.name, "flow")


def dashboards() -> list[Dashboard]:
    overview = Dashboard("fabric-overview", "Fabric overview",
                         "Switch counters (switch exporter) and INT report health (collector).", [
        Panel("Switches up", [Target(f"sum({m.FABRIC_SWITCH_UP.name})", "up")], "stat", width=6, height=5),
        Panel("Switch drops /s", [Target(f"sum(rate({total(m.FABRIC_DROPS)}{SW}[{WINDOW}]))", "drops/s")],
              "stat", unit="pps", width=6, height=5),
        Panel("INT reports /s", [Target(f"sum(rate({total(m.INT_REPORT_PACKETS)}[{WINDOW}]))", "reports/s")],
              "stat", unit="reqps", width=6, height=5),
        Panel("INT reports lost", [Target(f"sum({m.INT_REPORT_LOST.name})", "lost")], "stat", width=6, height=5),
        Panel("Transmit rate per switch",
              [Target(f"sum by (switch) (rate({total(m.FABRIC_PORT_TX_BYTES)}{SW}[{WINDOW}])) * 8", "{{switch}}")],
              unit="bps"),
        Panel("Receive packet rate per switch",
              [Target(f"sum by (switch) (rate({total(m.FABRIC_PORT_RX_PACKETS)}{SW}[{WINDOW}]))", "{{switch}}")],
              unit="pps"),
        Panel("Drops /s by reason",
              [Target(f"sum by (reason) (rate({total(m.FABRIC_DROPS)}{SW}[{WINDOW}]))", "{{reason}}")], unit="pps"),
        Panel("Frames /s lost (or held) in BMv2's input path, before any P4 counter",
              [Target(f"sum by (switch, port) (rate({total(m.FABRIC_PORT_INTERFACE_RX_PACKETS)}{SW}[{WINDOW}])"
                      f" - on (switch, port, peer) rate({total(m.FABRIC_PORT_RX_PACKETS)}{SW}[{WINDOW}]))",
                      "{{switch}} port {{port}}")], unit="pps"),
        Panel("ECN marks /s per switch",
              [Target(f"sum by (switch) (rate({total(m.FABRIC_ECN_MARKED)}{SW}[{WINDOW}]))", "{{switch}}")],
              unit="pps"),
        Panel("INT reports /s by kind",
              [Target(f"sum by (kind) (rate({total(m.INT_REPORTS)}[{WINDOW}]))", "{{kind}}")], unit="reqps"),
        Panel("INT report streams: lost, reordered, duplicates",
              [Target(f"sum by (switch, hw_id) ({m.INT_REPORT_LOST.name})", "lost {{switch}}/{{hw_id}}"),
               Target(f"sum by (switch, hw_id) (increase({total(m.INT_REPORT_REORDERED)}[5m]))",
                      "reordered (5m) {{switch}}/{{hw_id}}"),
               Target(f"sum by (switch, hw_id) (increase({total(m.INT_REPORT_DUPLICATES)}[5m]))",
                      "duplicates (5m) {{switch}}/{{hw_id}}")]),
        Panel("Malformed reports /s by reason",
              [Target(f"sum by (reason) (rate({total(m.INT_REPORT_MALFORMED)}[{WINDOW}]))", "{{reason}}")],
              unit="reqps"),
        Panel("Exporter read errors /s",
              [Target(f"sum by (switch, source) (rate({total(m.FABRIC_READ_ERRORS)}[{WINDOW}]))",
                      "{{switch}} {{source}}")], unit="reqps"),
    ], [SWITCH_VAR])

    ports = Dashboard("fabric-ports", "Ports and queues",
                      "Per port: rates, queue depth per priority queue (queue_depth; gaps: no packet left it), ECN marks; INT queue occupancy, HPCC tx rate, "
                      "congestion reports.", [
        Panel("Queue depth per port and queue (packets)",
              [Target(f"{m.FABRIC_QUEUE_DEPTH.name}{SW}", "{{switch}}:{{port}} > {{peer}} q{{queue}}")]),
        Panel("INT queue occupancy per egress port",
              [Target(f"{m.INT_QUEUE_OCCUPANCY.name}{SW}", "{{switch}}:{{egress_port}} q{{queue_id}}")]),
        Panel("Transmit rate per port",
              [Target(f"rate({total(m.FABRIC_PORT_TX_BYTES)}{SW}[{WINDOW}]) * 8", "{{switch}}:{{port}} > {{peer}}")],
              unit="bps"),
        Panel("Receive rate per port",
              [Target(f"rate({total(m.FABRIC_PORT_RX_BYTES)}{SW}[{WINDOW}]) * 8", "{{switch}}:{{port}} < {{peer}}")],
              unit="bps"),
        Panel("ECN marks /s per port",
              [Target(f"rate({total(m.FABRIC_ECN_MARKED)}{SW}[{WINDOW}])", "{{switch}}:{{port}} > {{peer}}")],
              unit="pps"),
        Panel("Egress rate from INT tx bytes (HPCC)",
              [Target(f"{m.INT_PORT_TX_RATE.name}{SW}", "{{switch}}:{{egress_port}}")], unit="bps"),
        Panel("Congestion reports /s",
              [Target(f"sum by (switch, queue_id) (rate({total(m.INT_CONGESTION_REPORTS)}{SW}[{WINDOW}]))",
                      "{{switch}} q{{queue_id}}")], unit="reqps"),
        Panel("Queue occupancy in the latest congestion report",
              [Target(f"{m.INT_CONGESTION_QUEUE.name}{SW}", "{{switch}} q{{queue_id}}")]),
    ], [SWITCH_VAR])

    flows = Dashboard("int-flows", "INT flows: paths and latency",
                      "Per flow, from the sinks' INT reports: path, end-to-end and per-hop latency, queues.", [
        Panel("Current path per flow", [Target(f"{m.INT_FLOW_PATH.name}{FLOW} == 1")], "table", width=24, height=7),
        Panel("End-to-end latency (latest)",
              [Target(f"{m.INT_FLOW_E2E_LATENCY_LAST.name}{FLOW}", "{{flow}}")], unit="s"),
        Panel("End-to-end latency p50 / p99",
              [Target(f"histogram_quantile(0.5, sum by (flow, le) (rate({bucket(m.INT_FLOW_E2E_LATENCY)}{FLOW}"
                      f"[{WINDOW}])))", "p50 {{flow}}"),
               Target(f"histogram_quantile(0.99, sum by (flow, le) (rate({bucket(m.INT_FLOW_E2E_LATENCY)}{FLOW}"
                      f"[{WINDOW}])))", "p99 {{flow}}")], unit="s"),
        Panel("Per-hop latency", [Target(f"{m.INT_FLOW_HOP_LATENCY.name}{FLOW}", "{{flow}} #{{hop}} {{switch}}")],
              unit="s"),
        Panel("Per-hop queue occupancy",
              [Target(f"{m.INT_FLOW_HOP_QUEUE.name}{FLOW}", "{{flow}} #{{hop}} {{switch}}")]),
        Panel("Hop latency p99 per switch",
              [Target(f"histogram_quantile(0.99, sum by (switch, le) (rate({bucket(m.INT_HOP_LATENCY)}[{WINDOW}])))",
                      "{{switch}}")], unit="s"),
        Panel("Hops per flow", [Target(f"{m.INT_FLOW_HOPS.name}{FLOW}", "{{flow}}")], width=6),
        Panel("Path changes (15 m)",
              [Target(f"increase({total(m.INT_FLOW_PATH_CHANGES)}{FLOW}[15m])", "{{flow}}")], width=6),
        Panel("Tracked-flow reports /s",
              [Target(f"rate({total(m.INT_FLOW_REPORTS)}{FLOW}[{WINDOW}])", "{{flow}}")], unit="reqps"),
    ], [FLOW_VAR])

    drops = Dashboard("fabric-drops", "Drops", "Drops counted by the switches, INT drop reports, and the packets "
                      "trimming kept from a drop.", [
        Panel("Switch drops /s by switch and reason",
              [Target(f"sum by (switch, reason) (rate({total(m.FABRIC_DROPS)}{SW}[{WINDOW}]))",
                      "{{switch}} {{reason}}")], unit="pps"),
        Panel("Switch drops by reason (15 m)",
              [Target(f"sum by (reason) (increase({total(m.FABRIC_DROPS)}{SW}[15m]))")], "table"),
        Panel("INT drop reports /s by switch and reason",
              [Target(f"sum by (switch, reason) (rate({total(m.INT_DROP_REPORTS)}{SW}[{WINDOW}]))",
                      "{{switch}} {{reason}}")], unit="reqps"),
        Panel("INT drop reports by reason (since the collector started)",
              [Target(f"sum by (reason) ({total(m.INT_DROP_REPORTS)}{SW})")], "table"),
        Panel("Packets trimmed /s instead of dropped (per port/queue)",
              [Target(f"rate({total(m.FEATURE_METRICS['fabric_trimmed'])}{SW}[{WINDOW}])",
                      "{{switch}} port/queue {{port_queue}}")], unit="pps"),
    ], [SWITCH_VAR])
    pfc = m.FEATURE_METRICS
    per_cell = "{{switch}} port/class {{port_class}}"
    lossless = Dashboard("fabric-lossless", "Lossless classes and PFC",
                         "Per (port, class): PFC frames sent and received, packets held while paused, watchdog "
                         "storms; lossless drops must stay 0.", [
        Panel("Lossless headroom drops /s (per ingress port, class: whose headroom was short; must stay 0)",
              [Target(f"rate({total(pfc['fabric_pfc_headroom_dropped'])}{SW}[{WINDOW}])", per_cell)], unit="pps"),
        Panel("Packets /s per class and egress port",
              [Target(f"rate({total(pfc['fabric_class_packets'])}{SW}[{WINDOW}])", per_cell)], unit="pps"),
        Panel("Pauses sent /s (per ingress port, class)",
              [Target(f"rate({total(pfc['fabric_pfc_pause_sent'])}{SW}[{WINDOW}])", per_cell)], unit="pps"),
        Panel("Resumes sent /s (per ingress port, class)",
              [Target(f"rate({total(pfc['fabric_pfc_resume_sent'])}{SW}[{WINDOW}])", per_cell)], unit="pps"),
        Panel("PFC frames received /s (per port, class)",
              [Target(f"rate({total(pfc['fabric_pfc_frames_received'])}{SW}[{WINDOW}])", per_cell)], unit="pps"),
        Panel("Time paused by the peer (fraction of each second, per port, class)",
              [Target(f"rate({total(pfc['fabric_pfc_paused_seconds'])}{SW}[{WINDOW}])", per_cell)],
              unit="percentunit"),
        Panel("Packets held while paused /s",
              [Target(f"rate({total(pfc['fabric_pfc_held'])}{SW}[{WINDOW}])", per_cell)], unit="pps"),
        Panel("Watchdog: storms detected and restored (15 m)",
              [Target(f"increase({total(pfc['fabric_pfc_storms_detected'])}{SW}[15m])", "detected " + per_cell),
               Target(f"increase({total(pfc['fabric_pfc_storms_restored'])}{SW}[15m])", "restored " + per_cell)]),
        Panel("Watchdog drops /s",
              [Target(f"rate({total(pfc['fabric_pfc_storm_dropped'])}{SW}[{WINDOW}])", per_cell)], unit="pps"),
    ], [SWITCH_VAR])
    return [overview, ports, flows, drops, lossless]


PROMQL_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless",
                   "offset", "inf", "nan"}
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'')
_GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_DURATION = re.compile(r"(?<![A-Za-z_:0-9])\d+(ms|s|m|h|d|w|y)\b")
_NUMBER = re.compile(r"(?<![A-Za-z_:0-9])\d+(\.\d+)?([eE][+-]?\d+)?")
_IDENT = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")


def promql_metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects (not functions,
    aggregations, keywords, label names or values): enough of PromQL for
    the dashboards' queries, to check they name only exported metrics."""
    text = _STRING.sub(" ", expr)
    text = re.sub(r"\{[^}]*\}", " ", text)        # label matchers
    text = re.sub(r"\[[^\]]*\]", " ", text)       # range selectors
    text = _GROUPING.sub(" ", text)
    text = _DURATION.sub(" ", text)
    text = _NUMBER.sub(" ", text)
    names = set()
    for match in _IDENT.finditer(text):
        follows = text[match.end():].lstrip()[:1]
        if follows != "(" and match.group() not in PROMQL_KEYWORDS:
            names.add(match.group())
    return names


def queries(d: dict) -> list[tuple[str, str]]:
    """(panel title, expression) of every target of a dashboard model."""
    return [(p["title"], t["expr"]) for p in d.get("panels", []) for t in p.get("targets", [])]


def render(d: Dashboard) -> str:
    return json.dumps(d.model(), indent=2) + "\n"


def write_all(out_dir: Path = OUT_DIR) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for d in dashboards():
        path = out_dir / f"{d.uid}.json"
        path.write_text(render(d))
        paths.append(path)
    return paths


def main(argv: Optional[list[str]] = None) -> int:
    for path in write_all():
        print(f"dashboards: wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
