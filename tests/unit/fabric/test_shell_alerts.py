"""The fabric shell's `alerts`: what the alert receiver lists as firing, and
a message saying what to start when no receiver answers."""
from __future__ import annotations

import json
import urllib.request
from types import SimpleNamespace

from fabric.shell import FabricCLI
from telemetry.alert_receiver import AlertReceiver
from telemetry.prometheus import free_port


def shell() -> FabricCLI:
    return FabricCLI(SimpleNamespace(topo=SimpleNamespace(known_features=[])), None)  # type: ignore[arg-type]


def test_alerts_lists_what_fires(capsys):
    with AlertReceiver(port=0) as receiver:
        shell().onecmd(f"alerts {receiver.url}")
        assert capsys.readouterr().out == "no alert firing\n"
        body = json.dumps({"version": "4", "alerts": [{
            "status": "firing", "labels": {"alertname": "SwitchDown", "severity": "critical", "switch": "leaf1"},
            "annotations": {"summary": "The exporter cannot read switch leaf1"}, "fingerprint": "f1"}]}).encode()
        urllib.request.urlopen(urllib.request.Request(receiver.webhook_url, data=body), timeout=5).close()
        shell().onecmd(f"alerts {receiver.url}")
        assert capsys.readouterr().out == \
            "FIRING   SwitchDown [critical] switch=leaf1: The exporter cannot read switch leaf1\n"


def test_alerts_without_a_receiver_says_what_to_start(capsys):
    shell().onecmd(f"alerts http://127.0.0.1:{free_port()}")
    assert "make monitor" in capsys.readouterr().out
