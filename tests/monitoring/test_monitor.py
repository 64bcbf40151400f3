"""`python -m telemetry.monitor`: one command starts the collector, the
switch exporter, a real Prometheus with the alerting rules, a real
Alertmanager (Debian's) and the alert receiver on loopback, prints where
they are, and stops all of them on Ctrl-C. No switch runs here: the
exporter must say so (fabric_switch_up 0) and keep serving, and the
SwitchDown alert must reach the receiver through Alertmanager."""
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from telemetry.alert_receiver import firing
from telemetry.alertmanager import find_alertmanager
from telemetry.prometheus import PrometheusClient, find_prometheus, free_port
from telemetry.synthetic import Flow, Hop, flow_report

REPO = Path(__file__).resolve().parents[2]
P4INFO = REPO / "tests" / "fixtures" / "main.p4info.txtpb"


class Lines:
    """A process's stdout, line by line, read by a thread (no blocking reads)."""

    def __init__(self, proc):
        self.q: queue.Queue = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._pump, args=(proc.stdout,), daemon=True).start()

    def _pump(self, stream):
        for line in stream:
            self.q.put(line.rstrip("\n"))
        self.q.put(None)

    def until(self, text: str, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self.q.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                break
            if line is None:
                break
            self.seen.append(line)
            if text in line:
                return line
        raise AssertionError(f"no line with {text!r} within {timeout}s; output so far:\n" + "\n".join(self.seen))

    def rest(self, timeout: float = 10) -> list[str]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self.q.get(timeout=0.5)
            except queue.Empty:
                continue
            if line is None:
                break
            self.seen.append(line)
        return self.seen


def field(lines: Lines, label: str) -> str:
    line = next(x for x in lines.seen if x.startswith(f"monitor: {label}"))
    return line.split("-> ", 1)[1]


def test_monitor_runs_everything_on_loopback_and_cleans_up(tmp_path):
    find_prometheus()   # fails, not skips, without Debian's prometheus
    find_alertmanager()     # and without its prometheus-alertmanager
    prom_port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "telemetry.monitor", "--topology", "topologies/leaf-spine.yaml", "--p4info",
         str(P4INFO), "--run-dir", str(tmp_path), "--collector-port", "0", "--collector-metrics-port", "0",
         "--exporter-port", "0", "--prometheus-port", str(prom_port), "--scrape-interval", "1s",
         "--interval", "0.5", "--progress", "2", "--alertmanager-port", "0", "--alert-receiver-port", "0"],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = Lines(proc)
    try:
        lines.until("monitor: running", timeout=60)
        report_port = int(field(lines, "INT reports").split(":")[-1])
        prom_url = field(lines, "Prometheus").split()[0]
        prom_pid = int(field(lines, "Prometheus").split("(pid ")[1].split(",")[0])
        assert prom_url == f"http://127.0.0.1:{prom_port}"
        for label in ("collector", "switches"):
            assert field(lines, label).startswith("http://127.0.0.1:")
        prom = PrometheusClient(prom_url)
        prom.wait_targets_up({"int-collector", "switch-exporter"}, timeout=90)
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as tx:
            tx.sendto(flow_report(Flow("10.0.1.1", "10.0.3.1", 1, 2), [Hop(3, 1, 3), Hop(4, 3, 1)], seq_no=0,
                                  start_ts=0, latencies=[1, 1], queues=[0, 0]), ("127.0.0.1", report_port))
        prom.wait_query('int_report_packets_total{switch="leaf2"} == 1', timeout=30)
        prom.wait_query("count(fabric_switch_up == 0) == 4", timeout=30)       # no switch runs here
        prom.wait_query('fabric_exporter_read_errors_total{source="p4runtime"} > 0', timeout=30)
        # SwitchDown holds for 30 s, is evaluated every second, and Alertmanager waits 2 s for its group:
        # one notification per switch (grouped by alertname and switch) within about 35 s of the start
        alerts_url = field(lines, "alerts").split()[0]
        assert field(lines, "Alertmanager").startswith("http://127.0.0.1:")
        for _ in range(4):
            lines.until("monitor: alert FIRING   SwitchDown", timeout=90)
        down = [a for a in firing(alerts_url) if a["name"] == "SwitchDown"]
        assert sorted(a["labels"]["switch"] for a in down) == ["leaf1", "leaf2", "spine1", "spine2"], down
        assert all(a["annotations"]["summary"] for a in down), down
    finally:
        proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=60)
    output = "\n".join(lines.rest())
    assert code == 0, output
    assert "monitor: stopped collector, exporter, Prometheus, Alertmanager and the alert receiver" in output
    assert f"monitor: wrote {tmp_path / 'alerts.jsonl'}" in output
    logged = (tmp_path / "alerts.jsonl").read_text().splitlines()
    assert sum('"SwitchDown"' in line for line in logged) >= 4, logged
    assert f"monitor: wrote {tmp_path / 'collector' / 'summary.json'}" in output
    with pytest.raises(ProcessLookupError):
        os.kill(prom_pid, 0)
    with pytest.raises(OSError):
        urllib.request.urlopen(prom_url + "/-/ready", timeout=2)
    assert '"report_packets": 1' in (tmp_path / "collector" / "summary.json").read_text()


@pytest.mark.parametrize("args,message", [
    (["--topology", "no/such.yaml"], "cannot read topology file"),
    (["--topology", "topologies/leaf-spine.yaml", "--p4info", "no/such.txtpb"], "make build"),
])
def test_monitor_names_what_is_wrong(tmp_path, args, message):
    run = subprocess.run([sys.executable, "-m", "telemetry.monitor", "--run-dir", str(tmp_path),
                          "--collector-port", "0", "--collector-metrics-port", "0", "--exporter-port", "0",
                          *args], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert run.returncode == 2 and message in run.stderr, run.stderr
