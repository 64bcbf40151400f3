"""The project's Alertmanager receiver: a webhook that logs every alert it
is sent and lists the ones firing.

    python -m telemetry.alert_receiver [--port 9774] [--log build/monitor/alerts.jsonl]

Alertmanager POSTs its notifications (webhook format version 4: a group of
alerts, each with status, labels, annotations, startsAt, endsAt and a
fingerprint) to /alerts. Each alert in them is printed as one line, appended
to the log as one JSON object, and kept by its fingerprint: the latest
notification of an alert says whether it is firing or resolved.

    GET /alerts            the alerts firing now (JSON list, newest first)
    GET /alerts?all=1      every alert received, resolved ones included
    GET /                  the firing alerts as text (what `fabric` shell's `alerts` shows)

A body that is not a webhook notification is answered 400 naming what is
wrong, and changes nothing. Listens on loopback unless told otherwise.
"""
from __future__ import annotations

import argparse
import json
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import asdict, dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable, Optional

from telemetry.metrics import ALERT_RECEIVER_PORT

WEBHOOK_PATH = "/alerts"
STATUSES = ("firing", "resolved")


class NotificationError(ValueError):
    """A POSTed body that is not an Alertmanager webhook notification."""


@dataclass
class Alert:
    name: str
    status: str                      # "firing" | "resolved"
    labels: dict[str, str]
    annotations: dict[str, str]
    starts_at: str
    ends_at: str
    fingerprint: str
    received_at: float = field(default_factory=time.time)

    def line(self) -> str:
        where = " ".join(f"{k}={v}" for k, v in sorted(self.labels.items()) if k not in ("alertname", "severity"))
        summary = self.annotations.get("summary", "")
        return (f"{self.status.upper():8s} {self.name} [{self.labels.get('severity', '-')}] {where}"
                f"{': ' + summary if summary else ''}")


def parse_notification(body: bytes) -> list[Alert]:
    """The alerts of one webhook notification; NotificationError naming the
    first thing that is not as Alertmanager sends it."""
    try:
        doc = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise NotificationError(f"body is not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise NotificationError("body is not a JSON object")
    if doc.get("version") != "4":
        raise NotificationError(f"version {doc.get('version')!r}: this receiver reads webhook version \"4\"")
    alerts = doc.get("alerts")
    if not isinstance(alerts, list):
        raise NotificationError("'alerts' is missing or not a list")
    out = []
    for i, a in enumerate(alerts):
        where = f"alerts[{i}]"
        if not isinstance(a, dict):
            raise NotificationError(f"{where} is not an object")
        labels, annotations = a.get("labels"), a.get("annotations", {})
        if not isinstance(labels, dict) or not isinstance(labels.get("alertname"), str):
            raise NotificationError(f"{where}.labels has no alertname")
        if not isinstance(annotations, dict):
            raise NotificationError(f"{where}.annotations is not an object")
        if a.get("status") not in STATUSES:
            raise NotificationError(f"{where}.status {a.get('status')!r} is not one of {', '.join(STATUSES)}")
        fingerprint = a.get("fingerprint") or json.dumps(labels, sort_keys=True)
        out.append(Alert(labels["alertname"], a["status"], {str(k): str(v) for k, v in labels.items()},
                         {str(k): str(v) for k, v in annotations.items()}, str(a.get("startsAt", "")),
                         str(a.get("endsAt", "")), str(fingerprint)))
    return out


class AlertStore:
    """Every alert received, by fingerprint (the latest notification wins);
    each one logged as it arrives."""

    def __init__(self, log: Optional[Path] = None, echo: Optional[Callable[[str], None]] = None):
        self.log, self.echo = log, echo
        self._alerts: dict[str, Alert] = {}
        self._lock = threading.Lock()
        self.notifications = 0
        if log is not None:
            log.parent.mkdir(parents=True, exist_ok=True)

    def add(self, alerts: list[Alert]) -> None:
        with self._lock:
            self.notifications += 1
            for a in alerts:
                self._alerts[a.fingerprint] = a
            if self.log is not None:
                with open(self.log, "a") as fh:
                    fh.writelines(json.dumps(asdict(a)) + "\n" for a in alerts)
        for a in alerts:
            if self.echo is not None:
                self.echo(a.line())

    def alerts(self, firing_only: bool = True) -> list[Alert]:
        with self._lock:
            every = sorted(self._alerts.values(), key=lambda a: a.received_at, reverse=True)
        return [a for a in every if a.status == "firing"] if firing_only else every


def _handler(store: AlertStore) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def _reply(self, code: int, body: bytes, kind: str) -> None:
            self.send_response(code)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self) -> None:
            if urllib.parse.urlsplit(self.path).path != WEBHOOK_PATH:
                return self._reply(404, f"POST notifications to {WEBHOOK_PATH}\n".encode(), "text/plain")
            length = int(self.headers.get("Content-Length") or 0)
            try:
                alerts = parse_notification(self.rfile.read(length))
            except NotificationError as exc:
                return self._reply(400, f"not an Alertmanager notification: {exc}\n".encode(), "text/plain")
            store.add(alerts)
            self._reply(200, b"ok\n", "text/plain")

        def do_GET(self) -> None:
            url = urllib.parse.urlsplit(self.path)
            if url.path == WEBHOOK_PATH:
                every = urllib.parse.parse_qs(url.query).get("all", ["0"])[0] not in ("0", "")
                body = json.dumps([asdict(a) for a in store.alerts(firing_only=not every)], indent=1)
                return self._reply(200, body.encode(), "application/json")
            if url.path == "/":
                return self._reply(200, render(store.alerts()).encode(), "text/plain; charset=utf-8")
            self._reply(404, b"GET /alerts or /\n", "text/plain")

        def log_message(self, *args: Any) -> None:      # the alerts are the log
            pass
    return Handler


def render(alerts: list[Alert]) -> str:
    """The firing alerts, a line each; a line saying none when there are none."""
    return "".join(a.line() + "\n" for a in alerts) or "no alert firing\n"


class AlertReceiver:
    """The webhook on HOST:PORT (port 0: any), serving in a thread."""

    def __init__(self, host: str = "127.0.0.1", port: int = ALERT_RECEIVER_PORT, log: Optional[Path] = None,
                 echo: Optional[Callable[[str], None]] = None):
        self.host = host
        self.store = AlertStore(log, echo)
        self.server = ThreadingHTTPServer((host, port), _handler(self.store))
        self.server.daemon_threads = True
        self._thread: Optional[threading.Thread] = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.server.server_port}"

    @property
    def webhook_url(self) -> str:
        return self.url + WEBHOOK_PATH

    def start(self) -> "AlertReceiver":
        self._thread = threading.Thread(target=self.server.serve_forever, name="alert-receiver", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> "AlertReceiver":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def firing(url: str = f"http://127.0.0.1:{ALERT_RECEIVER_PORT}", timeout: float = 2.0) -> list[dict[str, Any]]:
    """The alerts firing now, asked of a receiver at `url`; OSError (with
    what to do) when none answers there."""
    try:
        with urllib.request.urlopen(url.rstrip("/") + WEBHOOK_PATH, timeout=timeout) as resp:
            data: list[dict[str, Any]] = json.loads(resp.read())
            return data
    except (urllib.error.URLError, ConnectionError) as exc:
        raise OSError(f"no alert receiver answers at {url} ({exc}): `make monitor` starts one") from None


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m telemetry.alert_receiver", description=__doc__.split("\n\n")[0])
    ap.add_argument("--host", default="127.0.0.1", help="address to listen on (default: %(default)s)")
    ap.add_argument("--port", type=int, default=ALERT_RECEIVER_PORT, help="port, 0 = any (default: %(default)s)")
    ap.add_argument("--log", type=Path, help="append every alert received to this file (JSON lines)")
    args = ap.parse_args(argv)
    receiver = AlertReceiver(args.host, args.port, args.log, echo=lambda line: print(line, flush=True))
    print(f"alert receiver: {receiver.webhook_url} (Alertmanager's webhook_configs url); "
          f"firing alerts: GET {receiver.url}/", flush=True)
    try:
        receiver.server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        receiver.server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
