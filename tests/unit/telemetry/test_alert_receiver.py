"""The alert receiver (telemetry/alert_receiver.py) over HTTP on loopback,
fed notifications in Alertmanager's webhook format (version 4), and the
Alertmanager config it is named in, checked by Debian's `amtool`
(missing: a failure, not a skip)."""
from __future__ import annotations

import json
import shutil
import subprocess
import urllib.error
import urllib.request

import pytest

from telemetry.alert_receiver import AlertReceiver, firing, parse_notification, NotificationError
from telemetry.alertmanager import write_config
from telemetry import prometheus_config
from telemetry.prometheus_config import ConfigError


def notification(status: str, *alerts: dict) -> bytes:
    return json.dumps({"version": "4", "groupKey": "{}:{alertname=\"PfcStorm\"}", "status": status,
                       "receiver": "fabric-webhook", "groupLabels": {}, "commonLabels": {},
                       "commonAnnotations": {}, "externalURL": "http://127.0.0.1:9773",
                       "alerts": list(alerts)}).encode()


def alert(status: str, switch: str, fingerprint: str) -> dict:
    return {"status": status, "labels": {"alertname": "PfcStorm", "severity": "critical", "switch": switch,
                                         "port_class": "3/3"},
            "annotations": {"summary": f"class paused on {switch}"}, "startsAt": "2026-11-27T01:00:00Z",
            "endsAt": "0001-01-01T00:00:00Z", "generatorURL": "http://127.0.0.1:9770/graph",
            "fingerprint": fingerprint}


def post(url: str, body: bytes) -> tuple[int, str]:
    req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


@pytest.fixture
def receiver(tmp_path):
    lines: list[str] = []
    with AlertReceiver(port=0, log=tmp_path / "alerts.jsonl", echo=lines.append) as r:
        r.lines = lines
        yield r


def test_firing_then_resolved(receiver, tmp_path):
    assert firing(receiver.url) == []
    assert post(receiver.webhook_url, notification("firing", alert("firing", "leaf1", "a1"),
                                                   alert("firing", "leaf2", "a2")))[0] == 200
    assert sorted(a["labels"]["switch"] for a in firing(receiver.url)) == ["leaf1", "leaf2"]
    assert post(receiver.webhook_url, notification("resolved", alert("resolved", "leaf1", "a1")))[0] == 200
    now = firing(receiver.url)
    assert [a["labels"]["switch"] for a in now] == ["leaf2"] and now[0]["status"] == "firing"
    with urllib.request.urlopen(receiver.url + "/alerts?all=1", timeout=5) as resp:
        assert {a["fingerprint"]: a["status"] for a in json.loads(resp.read())} == {"a1": "resolved", "a2": "firing"}
    with urllib.request.urlopen(receiver.url + "/", timeout=5) as resp:
        text = resp.read().decode()
    assert text == "FIRING   PfcStorm [critical] port_class=3/3 switch=leaf2: class paused on leaf2\n"
    assert receiver.lines[-1].startswith("RESOLVED PfcStorm") and len(receiver.lines) == 3
    logged = [json.loads(line) for line in (tmp_path / "alerts.jsonl").read_text().splitlines()]
    assert [(a["name"], a["status"], a["labels"]["switch"]) for a in logged] == [
        ("PfcStorm", "firing", "leaf1"), ("PfcStorm", "firing", "leaf2"), ("PfcStorm", "resolved", "leaf1")]


@pytest.mark.parametrize("body,message", [
    (b"{not json", "not JSON"),
    (b"[]", "not a JSON object"),
    (json.dumps({"version": "3", "alerts": []}).encode(), "version '3'"),
    (json.dumps({"version": "4"}).encode(), "'alerts' is missing"),
    (json.dumps({"version": "4", "alerts": [{"status": "firing", "labels": {}}]}).encode(),
     "alerts[0].labels has no alertname"),
    (json.dumps({"version": "4", "alerts": [{"status": "pending", "labels": {"alertname": "X"}}]}).encode(),
     "alerts[0].status 'pending'"),
])
def test_a_bad_notification_is_refused_naming_what_is_wrong_and_changes_nothing(receiver, body, message):
    with pytest.raises(NotificationError, match=message.replace("[", r"\[").replace("]", r"\]")):
        parse_notification(body)
    good = notification("firing", alert("firing", "leaf1", "a1"))
    assert post(receiver.webhook_url, good)[0] == 200
    code, text = post(receiver.webhook_url, body)
    assert code == 400 and message in text, text
    assert [a["fingerprint"] for a in firing(receiver.url)] == ["a1"]
    assert receiver.store.notifications == 1


def test_no_receiver_is_an_error_saying_what_to_start():
    from telemetry.prometheus import free_port
    with pytest.raises(OSError, match="make monitor"):
        firing(f"http://127.0.0.1:{free_port()}")


def test_alertmanager_config_passes_amtool(tmp_path):
    amtool = shutil.which("amtool")
    if amtool is None:
        pytest.fail("amtool not found on PATH: it comes with Debian's prometheus-alertmanager package")
    path = write_config(tmp_path / "alertmanager.yml", "http://127.0.0.1:9774/alerts")
    run = subprocess.run([amtool, "check-config", str(path)], capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr


def test_prometheus_config_names_the_alertmanager(tmp_path):
    config = prometheus_config.scrape_config({"switch-exporter": ["127.0.0.1:9772"]},
                                             alertmanagers=["127.0.0.1:9773"])
    assert config["alerting"] == {"alertmanagers": [{"static_configs": [{"targets": ["127.0.0.1:9773"]}]}]}
    with pytest.raises(ConfigError, match="alertmanager 'nowhere'"):
        prometheus_config.scrape_config({"switch-exporter": ["127.0.0.1:9772"]}, alertmanagers=["nowhere"])
