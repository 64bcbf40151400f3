"""The collector receives reports inside a network namespace (as a host
of the fabric would) while /metrics stays on this namespace's loopback.
Needs root, as the network tests do: without it this fails, it does not skip."""
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from telemetry.collector import Collector
from emulator.netns import NetnsError
from telemetry.synthetic import Flow, Hop, flow_report

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def netns():
    assert os.geteuid() == 0, "needs root to make a network namespace (run the tests as root, like make test)"
    name = f"tmcol{os.getpid() % 100000}"
    subprocess.run(["ip", "netns", "del", name], capture_output=True)
    subprocess.run(["ip", "netns", "add", name], check=True)
    subprocess.run(["ip", "netns", "exec", name, "ip", "link", "set", "lo", "up"], check=True)
    yield name
    subprocess.run(["ip", "netns", "del", name], check=True)


def test_collector_receives_inside_a_netns_and_serves_metrics_outside(netns, tmp_path):
    report = flow_report(Flow("10.0.1.1", "10.0.3.1", 1, 2), [Hop(3, 1, 3), Hop(4, 3, 1)], seq_no=0, start_ts=0,
                         latencies=[1, 1], queues=[0, 0])
    (tmp_path / "report.bin").write_bytes(report)
    with Collector(netns=netns, port=0, metrics_port=0, out_dir=None) as col:
        sender = ("import socket,sys; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); "
                  f"s.sendto(open({str(tmp_path / 'report.bin')!r},'rb').read(), ('127.0.0.1', {col.port}))")
        subprocess.run(["ip", "netns", "exec", netns, sys.executable, "-c", sender], check=True, timeout=30)
        deadline = time.monotonic() + 10
        while col.totals()["packets"] < 1 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert col.totals()["packets"] == 1
        assert col.report_address.endswith(f"(netns {netns})")
        text = urllib.request.urlopen(col.server.url, timeout=5).read().decode()   # root namespace's loopback
        assert 'int_report_packets_total{hw_id="0",node_id="4",switch="node4"} 1.0' in text
        # while the collector holds the port inside the namespace, it is free out here
        local = subprocess.run([sys.executable, "-c", f"import socket; s=socket.socket(socket.AF_INET, "
                                f"socket.SOCK_DGRAM); s.bind(('127.0.0.1', {col.port})); print('free')"],
                               capture_output=True, text=True, timeout=30)
        assert local.stdout.strip() == "free", local.stderr


def test_unknown_netns_is_named():
    with pytest.raises(NetnsError, match="no network namespace 'no-such-ns'"):
        Collector(netns="no-such-ns", port=0, metrics_port=None, out_dir=None).start()
