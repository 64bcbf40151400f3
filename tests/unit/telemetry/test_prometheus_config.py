"""Monitoring configuration that needs no Prometheus: generated files are
current, dashboards query only metrics the exporters produce, and the
Grafana provisioning, the dashboards and docker-compose.yml fit together.
(tests/monitoring runs the queries on a real Prometheus.)"""
import json
from pathlib import Path

import pytest
import yaml

from telemetry import dashboards, prometheus_config
from telemetry import metrics as m

REPO = Path(__file__).resolve().parents[3]
MON = REPO / "telemetry"
DASHBOARD_FILES = sorted((MON / "grafana" / "dashboards").glob("*.json"))


def test_dashboard_files_are_current():
    assert [p.name for p in DASHBOARD_FILES] == sorted(f"{d.uid}.json" for d in dashboards.dashboards())
    for d in dashboards.dashboards():
        assert (MON / "grafana" / "dashboards" / f"{d.uid}.json").read_text() == dashboards.render(d), \
            f"{d.uid}.json is stale: run `python -m telemetry.dashboards`"


def test_default_prometheus_config_is_current():
    assert (MON / "prometheus.yml").read_text() == prometheus_config.render(prometheus_config.scrape_config()), \
        "telemetry/prometheus.yml is stale: run `python -m telemetry.prometheus_config -o telemetry/prometheus.yml`"


@pytest.mark.parametrize("path", DASHBOARD_FILES, ids=lambda p: p.stem)
def test_every_query_names_only_exported_metrics(path):
    model = json.loads(path.read_text())
    exported = m.exposed_names()
    qs = dashboards.queries(model)
    assert qs
    for title, expr in qs:
        names = dashboards.promql_metric_names(expr)
        assert names, f"{path.name}: {title}: no metric in {expr!r}"
        assert names <= exported, f"{path.name}: {title}: {sorted(names - exported)} are not exported"
    for var in model["templating"]["list"]:
        metric = var["definition"].split("(", 1)[1].split(",")[0].strip()
        assert metric in exported, f"{path.name}: variable {var['name']} reads unknown metric {metric}"
        used = any(f"${var['name']}" in expr for _, expr in qs)
        assert used, f"{path.name}: variable {var['name']} is not used"
    for _, expr in qs:
        for token in expr.split("$")[1:]:
            name = token.split('"')[0]
            assert name in {v["name"] for v in model["templating"]["list"]}, f"{path.name}: ${name} undefined"


def test_promql_metric_names():
    f = dashboards.promql_metric_names
    assert f('histogram_quantile(0.99, sum by (flow, le) (rate(a_bucket{flow=~"$flow"}[1m])))') == {"a_bucket"}
    assert f("x * 1e9 + on(a) group_left(b) y offset 5m") == {"x", "y"}
    assert f('sum without (le) (b{c="d"}) > bool 2') == {"b"}


def test_exposed_names_follow_prometheus_client_conventions():
    names = m.exposed_names()
    assert "int_report_packets_total" in names and "int_report_lost" in names
    assert {"int_flow_e2e_latency_seconds_bucket", "int_flow_e2e_latency_seconds_count"} <= names
    assert "fabric_drops_total" in names and "fabric_queue_depth_packets" in names
    assert len({s.name for s in m.COLLECTOR_METRICS + m.EXPORTER_METRICS}) == \
        len(m.COLLECTOR_METRICS + m.EXPORTER_METRICS)


def test_grafana_provisioning_and_compose_fit_together():
    ds = yaml.safe_load((MON / "grafana" / "provisioning" / "datasources" / "prometheus.yml").read_text())
    (source,) = ds["datasources"]
    assert source["type"] == "prometheus" and source["url"] == f"http://127.0.0.1:{m.PROMETHEUS_PORT}"
    for path in DASHBOARD_FILES:
        model = json.loads(path.read_text())
        uids = {p["datasource"]["uid"] for p in model["panels"]} | \
               {t["datasource"]["uid"] for p in model["panels"] for t in p["targets"]}
        assert uids == {source["uid"]}, f"{path.name} uses datasources {uids}"
    provider = yaml.safe_load((MON / "grafana" / "provisioning" / "dashboards" / "fabric.yml").read_text())
    dash_path = provider["providers"][0]["options"]["path"]
    compose = yaml.safe_load((MON / "docker-compose.yml").read_text())
    mounts = {v.split(":")[1]: v.split(":")[0] for svc in compose["services"].values()
              for v in svc.get("volumes", []) if v.startswith("./")}
    assert mounts[dash_path] == "./grafana/dashboards"
    assert mounts["/etc/grafana/provisioning"] == "./grafana/provisioning"
    assert mounts["/etc/prometheus/prometheus.yml"] == "./prometheus.yml"
    config = yaml.safe_load((MON / "prometheus.yml").read_text())     # its rule files, relative to it
    for rules in config["rule_files"]:
        assert mounts[f"/etc/prometheus/{rules}"] == f"./{rules}"
    for host_path in mounts.values():
        assert (MON / host_path).exists(), host_path
    prom_args = compose["services"]["prometheus"]["command"]
    assert f"--web.listen-address=127.0.0.1:{m.PROMETHEUS_PORT}" in prom_args
    assert compose["services"]["grafana"]["environment"]["GF_SERVER_HTTP_ADDR"] == "127.0.0.1"


@pytest.mark.parametrize("targets,kw,message", [
    ({}, {}, "no targets"),
    ({"1bad": ["127.0.0.1:1"]}, {}, "job name"),
    ({"ok": ["localhost"]}, {}, "not host:port"),
    ({"ok": ["127.0.0.1:70000"]}, {}, "not host:port"),
    ({"ok": ["127.0.0.1:1"]}, {"scrape_interval": "5 seconds"}, "not a Prometheus duration"),
])
def test_scrape_config_rejects_what_prometheus_would(targets, kw, message):
    with pytest.raises(prometheus_config.ConfigError, match=message):
        prometheus_config.scrape_config(targets, **kw)


def test_scrape_config_cli(tmp_path, capsys):
    out = tmp_path / "p.yml"
    assert prometheus_config.main(["--target", "a=127.0.0.1:1", "--target", "a=127.0.0.1:2",
                                   "--target", "b=[::1]:3", "--scrape-interval", "1s", "-o", str(out)]) == 0
    cfg = yaml.safe_load(out.read_text())
    assert cfg["global"]["scrape_interval"] == "1s"
    assert cfg["rule_files"] == [str(prometheus_config.RULE_FILE)]     # written elsewhere: the absolute path
    assert cfg["scrape_configs"] == [{"job_name": "a", "static_configs": [{"targets": ["127.0.0.1:1", "127.0.0.1:2"]}]},
                                     {"job_name": "b", "static_configs": [{"targets": ["[::1]:3"]}]}]
    assert prometheus_config.main(["--target", "nojob"]) == 2
    assert "expected JOB=HOST:PORT" in capsys.readouterr().err
