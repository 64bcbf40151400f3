"""The alerting rules (telemetry/alerts.py, telemetry/alerts.yml) on
Prometheus's own tool: `promtool check rules` on the file, and `promtool
test rules` with, for every rule, a case where it fires and one where it
stays silent, from series with the exporters' real metric names and labels.
promtool missing is a failure, not a skip."""
from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Union

import pytest
import yaml

from telemetry import alerts, dashboards, prometheus_config
from telemetry import metrics as m

REPO = Path(__file__).resolve().parents[3]
RULES = alerts.OUTPUT
EXPORTER, COLLECTOR = "switch-exporter", "int-collector"     # the default scrape jobs (prometheus_config)
Labels = dict[str, str]


def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.fail("promtool not found on PATH: it comes with Debian's prometheus package (apt-get install "
                    "prometheus, or `bash scripts/setup.sh`, which does); the alerting rules cannot be tested")
    return path


def rule_file() -> dict:
    return yaml.safe_load(RULES.read_text())


def rules_by_name() -> dict[str, dict]:
    return {r["alert"]: r for g in rule_file()["groups"] for r in g["rules"]}


def job(name: str) -> Labels:
    """The labels Prometheus adds to every series it scrapes from job `name`."""
    return {"job": name, "instance": prometheus_config.DEFAULT_TARGETS[name][0]}


def series(spec: Union[m.MetricSpec, str], values: str, of: str = EXPORTER, **labels: str) -> tuple[str, str]:
    """An input series as the exporter exposes it: the metric's sample name
    (counters with _total), exactly its labels, and the job's."""
    if isinstance(spec, str):
        assert spec in alerts.PROMETHEUS_SERIES and not labels, spec
        name = spec
    else:
        assert set(labels) == set(spec.labels), f"{spec.name} has labels {spec.labels}, not {sorted(labels)}"
        name = spec.exposed()[0]
    text = ",".join(f'{k}="{v}"' for k, v in {**labels, **job(of)}.items())
    return f"{name}{{{text}}}", values


@dataclass
class Case:
    series: list[tuple[str, str]]
    eval_time: str
    fires: list[Labels] = field(default_factory=list)     # each expected alert's labels, severity aside


F = m.FEATURE_METRICS
EXP = job(EXPORTER)
UP, DROPS, TX = m.FABRIC_SWITCH_UP, m.FABRIC_DROPS, m.FABRIC_PORT_TX_PACKETS
IFACE_RX, RX, PEER_RX = m.FABRIC_PORT_INTERFACE_RX_PACKETS, m.FABRIC_PORT_RX_PACKETS, m.FABRIC_PORT_PEER_RX_PACKETS
PAUSED, DETECTED = F["fabric_pfc_paused_seconds"], F["fabric_pfc_storms_detected"]
RESTORED, STORM_DROPPED = F["fabric_pfc_storms_restored"], F["fabric_pfc_storm_dropped"]
HEADROOM_DROPPED = F["fabric_pfc_headroom_dropped"]
CELL = {"switch": "leaf1", "port_class": "2/3"}
LINK = {"switch": "leaf1", "port": "3", "peer": "spine1"}
BACK = {"switch": "spine1", "port": "1", "peer": "leaf1"}          # the same link, from spine1
STREAM = {"node_id": "1", "switch": "leaf1", "hw_id": "0"}


def rising_drops(minutes: int) -> str:
    """A drop counter sampled every 5 s whose rate grows by 0.2/s each minute."""
    values, total = [], 0
    for i in range(minutes * 12 + 1):
        values.append(str(total))
        total += i // 12
    return " ".join(values)


# alert -> (a case where it fires, a case where it does not). Scrapes every 5 s (SCRAPE_INTERVAL).
CASES: dict[str, tuple[Case, Case]] = {
    "ScrapeTargetDown": (
        Case([series("up", "1x12 0x36")], "3m", [EXP]),
        Case([series("up", "1x12 0x36")], "2m")),                   # down 55 s: pending, not firing
    "SwitchDown": (
        Case([series(UP, "1x12 0x36", switch="leaf1")], "2m", [{"switch": "leaf1", **EXP}]),
        Case([series(UP, "1x12 0x36", switch="leaf1")], "90s")),    # down 25 s: a restart
    "ExporterReadErrors": (
        Case([series(m.FABRIC_READ_ERRORS, "0+1x60", switch="leaf1", source="thrift"),
              series(UP, "1x60", switch="leaf1")], "4m", [{"switch": "leaf1", "source": "thrift"}]),
        Case([series(m.FABRIC_READ_ERRORS, "0+1x60", switch="leaf1", source="p4runtime"),
              series(UP, "0x60", switch="leaf1")], "4m")),          # the switch is down: SwitchDown's
    "ControllerNotPrimary": (
        Case([series(m.FABRIC_CONTROLLER_PRIMARY, "1x12 0x36", switch="leaf1")], "2m",
             [{"switch": "leaf1", **EXP}]),
        Case([series(m.FABRIC_CONTROLLER_PRIMARY, "1x48", switch="leaf1")], "2m")),
    "SwitchDropsHigh": (
        Case([series(DROPS, "0+50x60", switch="leaf1", reason="no_route"),               # 10/s
              series(DROPS, "0+500x60", switch="leaf1", reason="pfc_frame")], "3m",
             [{"switch": "leaf1", "reason": "no_route"}]),
        Case([series(DROPS, "0+5x60", switch="leaf1", reason="no_route"),                # 1/s
              series(DROPS, "0+500x60", switch="leaf1", reason="pfc_frame"),             # consumed, not lost
              series(DROPS, "0+500x60", switch="leaf1", reason="trimmed"),               # forwarded as a header
              series(DROPS, "0+50x60", switch="leaf1", reason="lossless_headroom")], "3m")),   # its own rule
    "SwitchDropRateRising": (
        Case([series(DROPS, rising_drops(21), switch="leaf1", reason="no_route")], "20m",   # 3.8/s, rising
             [{"switch": "leaf1", "reason": "no_route"}]),
        Case([series(DROPS, "0+5x250", switch="leaf1", reason="no_route")], "20m")),          # a steady 1/s
    "InputPathLoss": (
        Case([series(IFACE_RX, "0+600x60", switch="leaf1", port="1", peer="h1"),           # 120/s arrive
              series(RX, "0+500x60", switch="leaf1", port="1", peer="h1")], "3m",           # 100/s counted
             [{"switch": "leaf1", "port": "1", "peer": "h1"}]),
        Case([series(IFACE_RX, "0+505x60", switch="leaf1", port="1", peer="h1"),
              series(RX, "0+500x60", switch="leaf1", port="1", peer="h1")], "3m")),
    "LinkFramesLost": (
        Case([series(TX, "0+500x60", **LINK), series(PEER_RX, "0+400x60", **LINK),        # 20% lost
              series(TX, "0+500x60", **BACK), series(PEER_RX, "0+500x60", **BACK),        # the way back: whole
              series(TX, "0+500x60", switch="leaf1", port="1", peer="h1")], "3m",         # a host port: no far end
             [{**LINK, **EXP}]),
        Case([series(TX, "0+500x60", **LINK), series(PEER_RX, "0+500x60", **LINK),
              series(TX, "0+25x60", **BACK), series(PEER_RX, "0+20x60", **BACK)], "3m")),   # 5/s: too few to judge
    "PortQueueCongested": (
        Case([series(m.FABRIC_QUEUE_DEPTH, "60x36", **LINK, queue="0")], "150s", [{**LINK, "queue": "0", **EXP}]),
        # A queue that went idle has no sample (the exporter leaves it out): two bursts within a minute do not fire.
        Case([series(m.FABRIC_QUEUE_DEPTH, "60x3 stale _x1 60x3 stale _x27", **LINK, queue="0")], "150s")),
    "PortEcnMarkingHigh": (
        Case([series(F["fabric_ecn_marked"], "0+400x100", **LINK), series(TX, "0+500x100", **LINK)], "7m",
             [LINK]),
        Case([series(F["fabric_ecn_marked"], "0+100x100", **LINK), series(TX, "0+500x100", **LINK)], "7m")),
    "PfcStorm": (
        Case([series(PAUSED, "0+4.75x60", **CELL)], "4m", [{**CELL, **EXP}]),      # paused 95% of the time
        Case([series(PAUSED, "0+3x60", **CELL)], "4m")),                           # 60%: an incast, not a storm
    "PfcWatchdogStormActive": (
        Case([series(DETECTED, "1x24", **CELL)], "1m", [{**CELL, **EXP}]),         # restored never exported yet
        Case([series(DETECTED, "1x24", **CELL), series(RESTORED, "1x24", **CELL)], "1m")),
    "PfcWatchdogDrops": (
        Case([series(STORM_DROPPED, "1x12 5x24", **CELL)], "90s", [{**CELL, **EXP}]),
        Case([series(STORM_DROPPED, "5x36", **CELL)], "3m")),                      # only old drops
    "LosslessHeadroomDrops": (
        Case([series(HEADROOM_DROPPED, "0x24 1x24", **CELL)], "150s", [{**CELL, **EXP}]),   # names the cell
        Case([series(HEADROOM_DROPPED, "0x48", **CELL),
              series(DROPS, "0+50x48", switch="leaf1", reason="no_route")], "3m")),
    "IntReportLoss": (
        Case([series(m.INT_REPORT_LOST, "0+1x100", of=COLLECTOR, **STREAM),
              series(m.INT_REPORT_PACKETS, "0+10x100", of=COLLECTOR, **STREAM)], "7m", [STREAM]),
        Case([series(m.INT_REPORT_LOST, "3x100", of=COLLECTOR, **STREAM),      # lost long ago, none since
              series(m.INT_REPORT_PACKETS, "0+10x100", of=COLLECTOR, **STREAM)], "7m")),
}

TEMPLATE = re.compile(r"\{\{ \$labels\.([a-z_]+) \}\}")


def expected_annotations(rule: dict, labels: Labels) -> Labels:
    """The rule's annotations for an alert with `labels` (its templates name labels only)."""
    out = {}
    for key, text in rule["annotations"].items():
        rendered = TEMPLATE.sub(lambda match: labels[match.group(1)], text)
        assert "{{" not in rendered, f"{rule['alert']}: {key} uses more than $labels: {text!r}"
        out[key] = rendered
    return out


def unit_tests(rules: dict[str, dict]) -> dict:
    tests = []
    for alert, pair in CASES.items():
        rule = rules[alert]
        for case in pair:
            exp = [{"exp_labels": {**labels, **rule["labels"]},
                    "exp_annotations": expected_annotations(rule, {**labels, **rule["labels"]})} for labels in case.fires]
            tests.append({"interval": alerts.SCRAPE_INTERVAL,
                          "input_series": [{"series": s, "values": v} for s, v in case.series],
                          "alert_rule_test": [{"eval_time": case.eval_time, "alertname": alert, "exp_alerts": exp}]})
    return {"rule_files": [str(RULES)], "evaluation_interval": alerts.SCRAPE_INTERVAL, "tests": tests}


def test_rule_file_is_current_and_passes_promtool_check():
    assert RULES.read_text() == alerts.render(), "telemetry/alerts.yml is stale: run `fabric generate`"
    result = subprocess.run([promtool(), "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(alerts.rules())} rules found" in result.stdout


def test_every_rule_has_a_firing_and_a_silent_case():
    names = list(rules_by_name())
    assert len(names) == len(set(names)), "two rules share an alert name"
    assert set(CASES) == set(names), f"rules without cases: {sorted(set(names) - set(CASES))}; " \
                                     f"cases without rules: {sorted(set(CASES) - set(names))}"
    for alert, (fires, silent) in CASES.items():
        assert fires.fires, f"{alert}: the firing case expects no alert"
        assert not silent.fires, f"{alert}: the silent case expects an alert"


def test_promtool_test_rules(tmp_path):
    path = tmp_path / "alerts_test.yml"
    path.write_text(yaml.safe_dump(unit_tests(rules_by_name()), sort_keys=False, width=1 << 16))
    result = subprocess.run([promtool(), "test", "rules", str(path)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout, result.stdout + result.stderr


def test_every_expression_names_only_exported_metrics():
    exported = m.exposed_names() | set(alerts.PROMETHEUS_SERIES)
    for alert, rule in rules_by_name().items():
        names = dashboards.promql_metric_names(rule["expr"])
        assert names, f"{alert}: no metric in {rule['expr']!r}"
        assert names <= exported, f"{alert}: {sorted(names - exported)} are not exported"


def test_every_rule_is_complete():
    for alert, rule in rules_by_name().items():
        assert set(rule) == {"alert", "expr", "for", "labels", "annotations"}, alert
        assert re.fullmatch(r"\d+(ms|s|m|h)", rule["for"]), f"{alert}: for {rule['for']!r}"
        assert rule["labels"] == {"severity": rule["labels"]["severity"]}, alert
        assert rule["labels"]["severity"] in alerts.SEVERITIES, alert
        assert set(rule["annotations"]) == {"summary", "description"}, alert
        assert all(text.strip() for text in rule["annotations"].values()), alert


def test_drop_reasons_and_labels_are_checked_when_written():
    with pytest.raises(ValueError, match="no drop reason"):
        alerts.reasons("no_such_reason")
    with pytest.raises(ValueError, match="has no label"):
        alerts.labels(m.FABRIC_DROPS, "port")
    assert alerts.reasons(*alerts.NOT_LOSSES) == "pfc_frame|trimmed"


def test_prometheus_loads_the_rules():
    default = prometheus_config.scrape_config()
    assert default["rule_files"] == ["alerts.yml"] and (REPO / "telemetry" / "alerts.yml") == RULES
    assert prometheus_config.rule_files_for(REPO / "telemetry" / "prometheus.yml") == ["alerts.yml"]
    assert prometheus_config.rule_files_for(REPO / "build" / "monitor" / "prometheus.yml") == [str(RULES)]


def test_operations_doc_describes_every_rule():
    doc = (REPO / "docs" / "operations.md").read_text()
    for alert in rules_by_name():
        assert f"| `{alert}` |" in doc, f"docs/operations.md: no table row for {alert}"
