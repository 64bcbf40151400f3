"""Run a real Alertmanager (Debian's `prometheus-alertmanager`) for the
monitor and the tests: its own config and data directory, on loopback, its
clustering (gossip on 0.0.0.0:9094 by default) off, never the system
service the Debian package installs. Its one receiver is the project's
webhook (telemetry/alert_receiver.py).

Timing: Prometheus evaluates the rules every scrape interval and sends what
fires; Alertmanager waits GROUP_WAIT for more alerts of a new group, then
notifies, and again at most every GROUP_INTERVAL while the group changes
(resolved alerts included). A rule with `for: 0s` therefore reaches the
receiver within about an evaluation interval plus GROUP_WAIT.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any, Optional

import yaml

from telemetry.prometheus import ServerProcess

BINARIES = ("prometheus-alertmanager", "alertmanager")      # Debian's name, upstream's
GROUP_WAIT, GROUP_INTERVAL, REPEAT_INTERVAL = "2s", "10s", "1h"
RECEIVER = "fabric-webhook"


class AlertmanagerMissing(RuntimeError):
    pass


def find_alertmanager() -> str:
    for name in BINARIES:
        path = shutil.which(name)
        if path is not None:
            return path
    raise AlertmanagerMissing("prometheus-alertmanager not found on PATH: install Debian's package "
                              "(apt-get install prometheus-alertmanager, or `bash scripts/setup.sh`, which does)")


def config(webhook_url: str, *, group_wait: str = GROUP_WAIT, group_interval: str = GROUP_INTERVAL,
           repeat_interval: str = REPEAT_INTERVAL) -> dict[str, Any]:
    """Every alert, grouped by name and switch, to the webhook, resolved ones too."""
    return {
        "route": {"receiver": RECEIVER, "group_by": ["alertname", "switch"], "group_wait": group_wait,
                  "group_interval": group_interval, "repeat_interval": repeat_interval},
        "receivers": [{"name": RECEIVER, "webhook_configs": [{"url": webhook_url, "send_resolved": True}]}],
    }


def write_config(path: Path, webhook_url: str, **kw: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("# written by telemetry/alertmanager.py\n" + yaml.safe_dump(config(webhook_url, **kw),
                                                                                  sort_keys=False))
    return path


class AlertmanagerProcess(ServerProcess):
    """prometheus-alertmanager --config.file=CONFIG --storage.path=DATA
    --web.listen-address=HOST:PORT --cluster.listen-address= (no gossip),
    its output in LOG. Use as a context manager, or start()/stop()."""

    name = "alertmanager"

    def __init__(self, config_file: Path, data_dir: Path, *, host: str = "127.0.0.1", port: int = 0,
                 log: Optional[Path] = None):
        super().__init__(find_alertmanager(), config_file, data_dir, host=host, port=port, log=log)

    @property
    def target(self) -> str:
        """host:port, as Prometheus's `alerting:` section names it."""
        return f"{self.host}:{self.port}"

    def command(self) -> list[str]:
        return [self.binary, f"--config.file={self.config}", f"--storage.path={self.data_dir}",
                f"--web.listen-address={self.target}", "--cluster.listen-address=", "--log.level=warn"]

    def start(self, ready_timeout: float = 30.0) -> "AlertmanagerProcess":
        super().start(ready_timeout)
        return self

    def __enter__(self) -> "AlertmanagerProcess":
        return self.start()

    def alerts(self) -> list[dict[str, Any]]:
        """The alerts Alertmanager holds (its API v2)."""
        body = self._get("/api/v2/alerts", raw=True)
        data: list[dict[str, Any]] = json.loads(body) if body else []
        return data
