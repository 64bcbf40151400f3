"""Run a real Prometheus (Debian's `prometheus`) for the monitor and the
tests: its own config, TSDB directory and loopback port, never the system
service the Debian package may have started. Readiness and targets are
polled over the HTTP API with bounded timeouts, never blind sleeps.
"""
from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, Optional


class PrometheusMissing(RuntimeError):
    pass


class PrometheusError(RuntimeError):
    pass


def find_prometheus() -> str:
    path = shutil.which("prometheus")
    if path is None:
        raise PrometheusMissing("prometheus not found on PATH: install Debian's package "
                                "(apt-get install prometheus, or `bash scripts/setup.sh`, which does)")
    return path


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on right now (the OS's choice)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class PrometheusClient:
    """The HTTP API of a Prometheus at `url` (queries, targets, series),
    with polling helpers that time out instead of sleeping blindly."""

    def __init__(self, url: str):
        self.url = url.rstrip("/")

    def _check_alive(self, what: str) -> None:
        """Raise when waiting for `what` is pointless (a process that died)."""

    def _describe(self) -> str:
        return ""

    # -- API --------------------------------------------------------------

    def _get(self, path: str, params: Optional[dict[str, str]] = None, raw: bool = False) -> Any:
        url = self.url + path + ("?" + urllib.parse.urlencode(params) if params else "")
        try:
            with urllib.request.urlopen(url, timeout=5) as reply:
                body = reply.read()
        except urllib.error.HTTPError as exc:
            if raw:
                return None
            detail = exc.read().decode(errors="replace")
            raise PrometheusError(f"{url}: HTTP {exc.code}: {detail}") from None
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            return None
        if raw:
            return body
        data = json.loads(body)
        if data.get("status") != "success":
            raise PrometheusError(f"{url}: {data.get('errorType')}: {data.get('error')}")
        return data["data"]

    def _wait(self, done, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while True:
            self._check_alive(what)
            if done():
                return
            if time.monotonic() > deadline:
                raise PrometheusError(f"prometheus at {self.url} did not get {what.strip()} within "
                                      f"{timeout:.0f}s{self._describe()}")
            time.sleep(0.2)

    def targets(self) -> list[dict[str, Any]]:
        data = self._get("/api/v1/targets", {"state": "active"})
        return [] if data is None else data.get("activeTargets", [])

    def wait_targets_up(self, jobs: set[str], timeout: float = 60.0) -> list[dict[str, Any]]:
        """Poll /api/v1/targets until every target of `jobs` has health "up"."""
        last: list[dict[str, Any]] = []

        def all_up() -> bool:
            nonlocal last
            last = [t for t in self.targets() if t.get("labels", {}).get("job") in jobs]
            return {t["labels"]["job"] for t in last} == set(jobs) and all(t.get("health") == "up" for t in last)

        try:
            self._wait(all_up, timeout, f"targets {sorted(jobs)} up")
        except PrometheusError as exc:
            states = ", ".join(f"{t['labels'].get('job')}@{t.get('scrapeUrl')}: {t.get('health')} "
                               f"{t.get('lastError', '')}".strip() for t in last) or "none listed"
            raise PrometheusError(f"{exc}\ntargets: {states}") from None
        return last

    def query(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        """Instant query (now, or at Unix time `at`): the result vector (a
        scalar comes back as one sample)."""
        data = self._get("/api/v1/query", {"query": expr, **({"time": f"{at:.3f}"} if at is not None else {})})
        if data is None:
            raise PrometheusError(f"no answer from {self.url} for {expr!r}")
        if data["resultType"] == "scalar":
            return [{"metric": {}, "value": data["result"]}]
        return data["result"]

    def series(self, match: str) -> list[dict[str, str]]:
        data = self._get("/api/v1/series", {"match[]": match})
        return data or []

    def wait_query(self, expr: str, predicate=lambda result: bool(result), timeout: float = 30.0):
        """Poll an instant query until `predicate(result)` holds; the result."""
        result: list = []

        def ok() -> bool:
            nonlocal result
            result = self.query(expr)
            return bool(predicate(result))

        try:
            self._wait(ok, timeout, f"an answer to {expr!r} as expected")
        except PrometheusError as exc:
            raise PrometheusError(f"{exc}\nlast result: {result}") from None
        return result


class ServerProcess(PrometheusClient):
    """A server of the Prometheus family run for the project (Prometheus,
    Alertmanager): `command()` on HOST:PORT with CONFIG and DATA, its output
    in LOG, ready when /-/ready answers. Use as a context manager, or
    start()/stop()."""

    name = "server"

    def __init__(self, binary: str, config: Path, data_dir: Path, *, host: str = "127.0.0.1", port: int = 0,
                 log: Optional[Path] = None):
        self.binary = binary
        self.config = Path(config)
        self.data_dir = Path(data_dir)
        self.host = host
        self.port = port or free_port(host)
        super().__init__(f"http://{host}:{self.port}")
        self.log = Path(log) if log is not None else self.data_dir.parent / f"{self.name}.log"
        self.proc: Optional[subprocess.Popen] = None

    def command(self) -> list[str]:
        raise NotImplementedError

    def start(self, ready_timeout: float = 30.0):
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True)
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

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def log_tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def _check_alive(self, what: str) -> None:
        if self.proc is None or self.proc.poll() is not None:
            code = None if self.proc is None else self.proc.returncode
            raise PrometheusError(f"{self.name} exited ({code}) before {what.strip()}; "
                                  f"its log ({self.log}):\n{self.log_tail()}")

    def _describe(self) -> str:
        return f"; its log ({self.log}):\n{self.log_tail()}"


class PrometheusProcess(ServerProcess):
    """prometheus --config.file=CONFIG --storage.tsdb.path=DATA --web.listen-address=HOST:PORT,
    its output in LOG. Use as a context manager, or start()/stop()."""

    name = "prometheus"

    def __init__(self, config: Path, data_dir: Path, *, host: str = "127.0.0.1", port: int = 0,
                 log: Optional[Path] = None):
        super().__init__(find_prometheus(), config, data_dir, host=host, port=port, log=log)

    def command(self) -> list[str]:
        return [self.binary, f"--config.file={self.config}", f"--storage.tsdb.path={self.data_dir}",
                f"--web.listen-address={self.host}:{self.port}", "--log.level=warn"]

    def start(self, ready_timeout: float = 30.0) -> "PrometheusProcess":
        super().start(ready_timeout)
        return self

    def __enter__(self) -> "PrometheusProcess":
        return self.start()
