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
import subprocess
from pathlib import Path
from typing import Any, Optional

import yaml

from telemetry.prometheus import PrometheusClient, PrometheusError, free_port

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


class AlertmanagerProcess(PrometheusClient):
    """prometheus-alertmanager --config.file=CONFIG --storage.path=DATA
    --web.listen-address=HOST:PORT --cluster.listen-address= (no gossip),
    its output in LOG. Use as a context manager, or start()/stop()."""

    def __init__(self, config_file: Path, data_dir: Path, *, host: str = "127.0.0.1", port: int = 0,
                 log: Optional[Path] = None):
        self.binary = find_alertmanager()
        self.config = Path(config_file)
        self.data_dir = Path(data_dir)
        self.host = host
        self.port = port or free_port(host)
        super().__init__(f"http://{host}:{self.port}")
        self.log = Path(log) if log is not None else self.data_dir.parent / "alertmanager.log"
        self.proc: Optional[subprocess.Popen] = None

    @property
    def target(self) -> str:
        """host:port, as Prometheus's `alerting:` section names it."""
        return f"{self.host}:{self.port}"

    def start(self, ready_timeout: float = 30.0) -> "AlertmanagerProcess":
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                [self.binary, f"--config.file={self.config}", f"--storage.path={self.data_dir}",
                 f"--web.listen-address={self.target}", "--cluster.listen-address=", "--log.level=warn"],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            self._wait(lambda: self._get("/-/ready", raw=True) is not None, ready_timeout, "to be ready")
        except PrometheusError:
            self.stop()
            raise
        return self

    def stop(self, timeout: float = 10.0) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout)
        self.proc = None

    def __enter__(self) -> "AlertmanagerProcess":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def alerts(self) -> list[dict[str, Any]]:
        """The alerts Alertmanager holds (its API v2)."""
        body = self._get("/api/v2/alerts", raw=True)
        data: list[dict[str, Any]] = json.loads(body) if body else []
        return data

    def log_tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def _check_alive(self, what: str) -> None:
        if self.proc is None or self.proc.poll() is not None:
            code = None if self.proc is None else self.proc.returncode
            raise PrometheusError(f"alertmanager exited ({code}) before {what.strip()}; "
                                  f"its log ({self.log}):\n{self.log_tail()}")

    def _describe(self) -> str:
        return f"; its log ({self.log}):\n{self.log_tail()}"
