"""The collector: what each kind of report updates (state and Prometheus
samples), over loopback UDP end to end, and its command line."""
import csv
import json
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from wire.int_telemetry import INS_NODE_ID, HopMetadata, int_report, int_source
from telemetry.collector import Collector, node_names_from_topology
from telemetry.state import TelemetryState
from telemetry.decode import decode_report
from telemetry.synthetic import Flow, Hop, congestion_report, drop_report, flow_report

REPO = Path(__file__).resolve().parents[3]
NAMES = node_names_from_topology(REPO / "topologies" / "leaf-spine.yaml")   # spine1=1 spine2=2 leaf1=3 leaf2=4
FLOW = Flow("10.0.1.1", "10.0.3.1", 49152, 4791)
LABEL = "10.0.1.1:49152>10.0.3.1:4791/udp"
PATH_A = [Hop(3, 1, 3), Hop(1, 1, 2), Hop(4, 3, 1)]
PATH_B = [Hop(3, 1, 4), Hop(2, 1, 2), Hop(4, 4, 1)]


def sample(state, name, **labels):
    return state.registry.get_sample_value(name, labels)


def feed(state, *datagrams):
    return [state.handle(decode_report(d)) for d in datagrams]


def test_flow_report_path_latency_and_queues():
    state = TelemetryState(node_names=NAMES)
    (verdict, (out,)), = feed(state, flow_report(FLOW, PATH_A, seq_no=0, start_ts=1000, latencies=[10, 20, 30],
                                                queues=[1, 2, 3], link_delay=5))
    assert verdict == "first" and out.kinds == ["tracked_flow"] and out.flow == LABEL == FLOW.label
    assert out.path == "leaf1[1>3] spine1[1>2] leaf2[3>1]"
    assert out.e2e_latency_s == pytest.approx(70e-6)          # 10 + 5 + 20 + 5 + 30 us
    assert out.hop_latencies_s == pytest.approx([10e-6, 20e-6, 30e-6]) and out.queue_occupancies == [1, 2, 3]
    assert sample(state, "int_flow_e2e_latency_last_seconds", flow=LABEL) == pytest.approx(70e-6)
    assert sample(state, "int_flow_e2e_latency_seconds_count", flow=LABEL) == 1
    assert sample(state, "int_flow_hops", flow=LABEL) == 3
    assert sample(state, "int_flow_path_info", flow=LABEL, path=out.path) == 1
    assert sample(state, "int_flow_hop_latency_seconds", flow=LABEL, hop="1", node_id="1",
                  switch="spine1") == pytest.approx(20e-6)
    assert sample(state, "int_flow_hop_queue_occupancy", flow=LABEL, hop="2", node_id="4", switch="leaf2") == 3
    assert sample(state, "int_queue_occupancy", node_id="1", switch="spine1", egress_port="2", queue_id="0") == 2
    assert sample(state, "int_hop_latency_seconds_count", node_id="3", switch="leaf1") == 1
    assert sample(state, "int_reports_total", node_id="4", switch="leaf2", kind="tracked_flow") == 1
    flow = state.summary()["flows"][LABEL]
    assert [p["switch"] for p in flow["path"]] == ["leaf1", "spine1", "leaf2"] and flow["path_changes"] == 0


def test_path_change_replaces_the_path_and_its_hop_series():
    state = TelemetryState(node_names=NAMES)
    feed(state, flow_report(FLOW, PATH_A, seq_no=0, start_ts=0, latencies=[1, 1, 1], queues=[0, 0, 0]),
         flow_report(FLOW, PATH_B, seq_no=1, start_ts=100, latencies=[1, 1, 1], queues=[0, 0, 0]))
    assert sample(state, "int_flow_path_changes_total", flow=LABEL) == 1
    assert sample(state, "int_flow_path_info", flow=LABEL, path="leaf1[1>3] spine1[1>2] leaf2[3>1]") is None
    assert sample(state, "int_flow_path_info", flow=LABEL, path="leaf1[1>4] spine2[1>2] leaf2[4>1]") == 1
    assert sample(state, "int_flow_hop_latency_seconds", flow=LABEL, hop="1", node_id="1", switch="spine1") is None
    assert sample(state, "int_flow_hop_latency_seconds", flow=LABEL, hop="1", node_id="2", switch="spine2") == 1e-6


def test_one_switch_path_sink_on_the_stack():
    state = TelemetryState(node_names=NAMES)
    (_, (out,)), = feed(state, flow_report(FLOW, [Hop(3, 1, 2)], seq_no=0, start_ts=50, latencies=[7], queues=[4]))
    assert out.path == "leaf1[1>2]" and out.e2e_latency_s == pytest.approx(7e-6)


def test_sink_metadata_missing_still_names_the_sink():
    state = TelemetryState()
    pkt = int_source(FLOW.packet(), HopMetadata(node_id=3), instructions=INS_NODE_ID)
    (_, (out,)), = feed(state, bytes(int_report(pkt, node_id=4, seq_no=0)))
    assert out.path == "3[?>?] 4[?>?]" and out.e2e_latency_s is None     # no topology: node ids


def test_drops_congestion_and_tx_rate():
    state = TelemetryState(node_names=NAMES)
    feed(state,
         drop_report(FLOW, node_id=3, seq_no=0, reason=4),
         drop_report(FLOW, node_id=3, seq_no=1, reason=5),
         drop_report(FLOW, node_id=3, seq_no=2, reason=99),
         congestion_report(FLOW, node_id=1, seq_no=0, queue_id=0, occupancy=42, egress_port=2),
         flow_report(FLOW, PATH_A, seq_no=0, start_ts=0, latencies=[10, 10, 10], queues=[0, 0, 0],
                     tx_bytes=[0, 1000, 0]),
         flow_report(FLOW, PATH_A, seq_no=1, start_ts=1000, latencies=[10, 10, 10], queues=[0, 0, 0],
                     tx_bytes=[0, 126000, 0]))
    assert sample(state, "int_drop_reports_total", node_id="3", switch="leaf1", reason="no_route") == 1
    assert sample(state, "int_drop_reports_total", node_id="3", switch="leaf1", reason="ttl_expired") == 1
    assert sample(state, "int_drop_reports_total", node_id="3", switch="leaf1", reason="reason_99") == 1
    assert sample(state, "int_congestion_reports_total", node_id="1", switch="spine1", queue_id="0") == 1
    assert sample(state, "int_congestion_queue_occupancy", node_id="1", switch="spine1", queue_id="0") == 42
    # spine1's egress port 2: 125000 bytes in 1000 us -> 1 Gbit/s
    assert sample(state, "int_port_tx_rate_bps", node_id="1", switch="spine1", egress_port="2") == pytest.approx(1e9)
    feed(state, flow_report(FLOW, PATH_A, seq_no=2, start_ts=500, latencies=[10, 10, 10], queues=[0, 0, 0],
                            tx_bytes=[0, 5, 0]))      # older than the last sample: ignored
    assert sample(state, "int_port_tx_rate_bps", node_id="1", switch="spine1", egress_port="2") == pytest.approx(1e9)
    assert state.summary()["flows"][LABEL]["drops"] == 3
    assert state.totals()["drops"] == 3 and state.totals()["congestion"] == 1


def test_a_trims_drop_report_is_a_trim_not_a_drop():
    """DROP_TRIMMED (a packet cut to its headers, the header forwarded):
    named "trimmed", counted as a trim by node, in no drop count."""
    from control.p4constants import drop_reasons
    state = TelemetryState(node_names=NAMES)
    (_, (out,)), _ = feed(state, drop_report(FLOW, node_id=3, seq_no=0, reason=drop_reasons()["TRIMMED"]),
                          drop_report(FLOW, node_id=3, seq_no=1, reason=drop_reasons()["NO_ROUTE"]))
    assert out.drop_reason == "trimmed" and out.kinds == ["trim"]
    assert sample(state, "int_drop_reports_total", node_id="3", switch="leaf1", reason="trimmed") == 1
    assert sample(state, "int_reports_total", node_id="3", switch="leaf1", kind="trim") == 1
    assert sample(state, "int_reports_total", node_id="3", switch="leaf1", kind="drop") == 1    # the no_route one
    summary = state.summary()
    assert summary["trims"] == [{"node_id": 3, "switch": "leaf1", "reports": 1}]
    assert summary["drops"] == [{"node_id": 3, "switch": "leaf1", "reason": "no_route", "reports": 1}]
    assert summary["flows"][LABEL]["drops"] == 1
    assert state.totals()["drops"] == 1 and state.totals()["trims"] == 1


def test_sequence_samples_and_duplicates_are_not_counted_twice():
    state = TelemetryState(node_names=NAMES)
    reports = {s: flow_report(FLOW, PATH_A, seq_no=s, start_ts=s, latencies=[1, 1, 1], queues=[0, 0, 0])
               for s in range(6)}
    results = feed(state, reports[0], reports[2], reports[1], reports[1], reports[5])
    assert [v for v, _ in results] == ["first", "gap", "reordered", "duplicate", "gap"]
    stream = dict(node_id="4", switch="leaf2", hw_id="0")
    assert sample(state, "int_report_packets_total", **stream) == 5
    assert sample(state, "int_report_lost", **stream) == 2          # 3 and 4
    assert sample(state, "int_report_reordered_total", **stream) == 1
    assert sample(state, "int_report_duplicates_total", **stream) == 1
    assert sample(state, "int_flow_reports_total", flow=LABEL) == 4  # the duplicate's contents are ignored


# ---------------------------------------------------------------------------
# End to end over loopback

def wait_for(predicate, timeout=10.0, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def test_collector_over_udp_counts_everything_and_writes_outputs(tmp_path):
    good = [flow_report(FLOW, PATH_A, seq_no=s, start_ts=s * 100, latencies=[5, 5, 5], queues=[0, 1, 2])
            for s in range(20)]
    malformed = [b"", b"\x20" * 5, b"\x10" + good[0][1:], good[0][:40]]
    with Collector(port=0, metrics_port=0, out_dir=tmp_path, node_names=NAMES) as col:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as tx:
            for data in good[:10] + malformed + good[15:]:
                tx.sendto(data, ("127.0.0.1", col.port))
        wait_for(lambda: col.totals()["packets"] + col.totals()["malformed"] == 19, what="19 datagrams")
        text = urllib.request.urlopen(col.server.url, timeout=5).read().decode()
        totals = col.totals()
    assert totals["packets"] == 15 and totals["malformed"] == 4 and totals["lost"] == 5
    assert 'int_report_lost{hw_id="0",node_id="4",switch="leaf2"} 5.0' in text
    assert 'int_report_malformed_total{reason="truncated"} 2.0' in text
    assert 'int_report_malformed_total{reason="bad-version"} 1.0' in text
    assert 'int_report_malformed_total{reason="bad-length"} 1.0' in text
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["report_packets"] == 15 and summary["malformed"] == {"bad-length": 1, "bad-version": 1,
                                                                         "truncated": 2}
    assert summary["streams"] == [{"node_id": 4, "switch": "leaf2", "hw_id": 0, "received": 15, "lost": 5,
                                   "reordered": 0, "duplicates": 0, "resets": 0}]
    assert summary["flows"][LABEL]["e2e_latency_s"]["count"] == 15
    # One flow, one path, queues 0-2 and latencies 5 us (one bucket each): only its first report is sent on.
    assert summary["reports_sent"] == 1 and summary["reports_kept_back"] == 14
    assert 'int_reports_unchanged_total{node_id="4",switch="leaf2"} 14.0' in text
    rows = list(csv.DictReader(open(tmp_path / "reports.csv")))
    assert len(rows) == 1 and rows[0]["path"] == "leaf1[1>3] spine1[1>2] leaf2[3>1]"
    assert float(rows[0]["e2e_latency_s"]) == pytest.approx(25e-6)


def test_collector_survives_a_decoder_bug(monkeypatch):
    col = Collector(port=0, metrics_port=None, out_dir=None)
    monkeypatch.setattr("telemetry.collector.decode_report", lambda data: 1 / 0)
    col.handle_datagram(b"anything")
    assert col.totals()["malformed"] == 1 and col.internal_errors == 1


def test_port_in_use_is_named():
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as busy:
        busy.bind(("127.0.0.1", 0))
        with pytest.raises(OSError, match=r"cannot receive reports on udp 127.0.0.1:\d+"):
            Collector(port=busy.getsockname()[1], metrics_port=None, out_dir=None).start()


def test_cli_help_and_a_short_run(tmp_path):
    help_text = subprocess.run([sys.executable, "-m", "telemetry.collector", "--help"], cwd=REPO,
                               capture_output=True, text=True, timeout=60)
    assert help_text.returncode == 0 and "--netns" in help_text.stdout and "reports.csv" in help_text.stdout
    run = subprocess.run([sys.executable, "-m", "telemetry.collector", "--port", "0", "--metrics-port", "0",
                          "--duration", "1", "--progress", "0.3", "--out", str(tmp_path),
                          "--topology", "topologies/leaf-spine.yaml"],
                         cwd=REPO, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert "collector: reports on udp 127.0.0.1:" in run.stdout and "/metrics" in run.stdout
    assert f"collector: wrote {tmp_path / 'summary.json'}" in run.stdout and "reports 0" in run.stdout
    bad = subprocess.run([sys.executable, "-m", "telemetry.collector", "--netns", "no-such-ns", "--no-files"],
                         cwd=REPO, capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "no network namespace 'no-such-ns'" in bad.stderr
