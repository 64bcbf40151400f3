"""Only changes of slow-moving values are sent (telemetry/changes.py): which
tracked-flow reports reach reports.csv and the change listeners, which are
kept back, and that metrics and the plain listeners still see every report."""
import csv
import json
from pathlib import Path

import pytest

from features.int_telemetry import ReportSettings
from wire.int_telemetry import HopMetadata
from telemetry import collector as collector_mod
from telemetry.changes import ChangeFilter, ChangeSettings
from telemetry.collector import Collector, main, node_names_from_topology
from telemetry.decode import decode_report
from telemetry.state import TelemetryState
from telemetry.synthetic import Flow, Hop, congestion_report, drop_report, flow_report

REPO = Path(__file__).resolve().parents[3]
NAMES = node_names_from_topology(REPO / "topologies" / "leaf-spine.yaml")   # spine1=1 spine2=2 leaf1=3 leaf2=4
FLOW = Flow("10.0.1.1", "10.0.3.1", 49152, 4791)
OTHER = Flow("10.0.1.2", "10.0.3.1", 49153, 4791)
PATH_A = [Hop(3, 1, 3), Hop(1, 1, 2), Hop(4, 3, 1)]
PATH_B = [Hop(3, 1, 4), Hop(2, 1, 2), Hop(4, 4, 1)]
T0 = 1_000_000.0


class Stream:
    """Reports of one sink (leaf2, node 4) with consecutive sequence numbers."""

    def __init__(self):
        self.seq = 0

    def flow(self, latencies=(5, 5, 5), queues=(0, 0, 0), path=PATH_A, flow=FLOW) -> bytes:
        data = flow_report(flow, path, seq_no=self.seq, start_ts=self.seq * 100, latencies=list(latencies),
                           queues=list(queues))
        self.seq += 1
        return data


def offer(state, data, now):
    """Whether each individual report of `data` was sent."""
    _, outcomes = state.handle(decode_report(data), now)
    return [o.sent for o in outcomes]


def state_with(**settings):
    return TelemetryState(node_names=NAMES, changes=ChangeSettings(**settings))


def test_first_report_sent_then_same_path_and_buckets_kept_back():
    state, s = state_with(), Stream()
    assert offer(state, s.flow(latencies=[5, 5, 5], queues=[0, 1, 2]), T0) == [True]
    unchanged = {"node_id": "4", "switch": "leaf2"}
    assert state.registry.get_sample_value("int_reports_unchanged_total", unchanged) == 0   # the series exists
    # Queues 0..3 are bucket 0 (of 4 packets), latencies 0..15 us bucket 0 (of 16 us): nothing changed.
    assert offer(state, s.flow(latencies=[0, 15, 9], queues=[3, 0, 3]), T0 + 0.1) == [False]
    assert offer(state, s.flow(latencies=[15, 0, 0], queues=[0, 3, 1]), T0 + 0.2) == [False]
    assert state.sent == 1 and state.kept_back == 2
    assert state.totals()["sent"] == 1 and state.totals()["kept_back"] == 2
    # Another flow's first report is sent whatever the first flow did.
    assert offer(state, s.flow(flow=OTHER), T0 + 0.3) == [True]


def test_a_queue_bucket_change_is_sent_and_compared_with_the_last_sent_report():
    state, s = state_with(), Stream()
    assert offer(state, s.flow(queues=[0, 0, 3]), T0) == [True]
    assert offer(state, s.flow(queues=[0, 0, 4]), T0 + 0.1) == [True]      # the sink's hop: bucket 0 -> 1
    assert offer(state, s.flow(queues=[0, 0, 7]), T0 + 0.2) == [False]     # still bucket 1
    assert offer(state, s.flow(queues=[0, 4, 7]), T0 + 0.3) == [True]      # the spine's hop: 0 -> 1
    assert offer(state, s.flow(queues=[3, 5, 6]), T0 + 0.4) == [False]
    assert offer(state, s.flow(queues=[3, 5, 3]), T0 + 0.5) == [True]      # back down: a change too


def test_a_latency_bucket_change_is_sent():
    state, s = state_with(), Stream()
    assert offer(state, s.flow(latencies=[5, 5, 15]), T0) == [True]
    assert offer(state, s.flow(latencies=[5, 5, 16]), T0 + 0.1) == [True]   # 16 us: bucket 1
    assert offer(state, s.flow(latencies=[0, 15, 31]), T0 + 0.2) == [False]
    assert offer(state, s.flow(latencies=[16, 15, 31]), T0 + 0.3) == [True]  # the source's hop


def test_a_path_change_is_sent_and_so_is_the_way_back():
    state, s = state_with(), Stream()
    assert offer(state, s.flow(path=PATH_A), T0) == [True]
    assert offer(state, s.flow(path=PATH_B), T0 + 0.1) == [True]
    assert offer(state, s.flow(path=PATH_B), T0 + 0.2) == [False]
    assert offer(state, s.flow(path=PATH_A), T0 + 0.3) == [True]
    assert state.summary()["flows"][FLOW.label]["path_changes"] == 2
    # The same switches over another link (only ports differ) is a change.
    parallel = [Hop(3, 1, 3), Hop(1, 1, 5), Hop(4, 5, 1)]
    assert offer(state, s.flow(path=parallel), T0 + 0.4) == [True]
    assert offer(state, s.flow(path=parallel), T0 + 0.5) == [False]
    # A shorter path (same first hops, one switch less) is a change too.
    assert offer(state, s.flow(path=PATH_A[:2], latencies=[5, 5], queues=[0, 0]), T0 + 0.6) == [True]


def test_refresh_after_refresh_s_counts_from_the_last_sent_report():
    state, s = state_with(refresh_s=1.0), Stream()
    assert offer(state, s.flow(), T0) == [True]
    assert offer(state, s.flow(), T0 + 0.999) == [False]
    assert offer(state, s.flow(), T0 + 1.0) == [True]        # refresh_s passed
    assert offer(state, s.flow(), T0 + 1.5) == [False]       # 0.5 s after the refresh
    assert offer(state, s.flow(), T0 + 2.0) == [True]
    state, s = state_with(refresh_s=0), Stream()               # 0: every report
    assert [offer(state, s.flow(), T0)[0] for _ in range(3)] == [True, True, True]


def test_drop_and_congestion_reports_are_always_sent():
    state = state_with()
    for i in range(3):
        assert offer(state, drop_report(FLOW, node_id=3, seq_no=i, reason=4), T0) == [True]
        assert offer(state, congestion_report(FLOW, node_id=1, seq_no=i, queue_id=0, occupancy=42,
                                              egress_port=2), T0) == [True]
    assert state.sent == 6 and state.kept_back == 0
    # Drops and congestion are not offered: no kept-back series for their switches.
    assert state.registry.get_sample_value("int_reports_unchanged_total", {"node_id": "3", "switch": "leaf1"}) is None


def test_metrics_count_every_report_and_kept_back_ones_per_switch():
    state, s = state_with(), Stream()
    for i in range(5):
        offer(state, s.flow(latencies=[5, 5, 5 + i]), T0 + i * 0.01)
    get = state.registry.get_sample_value
    assert get("int_flow_reports_total", {"flow": FLOW.label}) == 5
    assert get("int_flow_e2e_latency_seconds_count", {"flow": FLOW.label}) == 5
    assert get("int_flow_hop_latency_seconds", {"flow": FLOW.label, "hop": "2", "node_id": "4",
                                                "switch": "leaf2"}) == pytest.approx(9e-6)   # the last report's
    assert get("int_reports_unchanged_total", {"node_id": "4", "switch": "leaf2"}) == 4
    summary = state.summary()
    assert summary["reports_sent"] == 1 and summary["reports_kept_back"] == 4
    assert summary["flows"][FLOW.label]["kept_back"] == 4
    assert summary["changes_only"] == {"queue_bucket": 4, "latency_bucket_us": 16, "refresh_s": 1.0}


def test_without_change_settings_the_state_sends_everything():
    state, s = TelemetryState(node_names=NAMES), Stream()
    assert [offer(state, s.flow(), T0)[0] for _ in range(3)] == [True, True, True]
    assert state.summary()["changes_only"] is None and state.kept_back == 0


def test_buckets_are_the_switches_shifts():
    for queue_bucket in (1, 2, 4, 8, 64):
        for latency_bucket_us in (1, 16, 4096):
            settings = ChangeSettings(queue_bucket=queue_bucket, latency_bucket_us=latency_bucket_us)
            params = ReportSettings(queue_bucket=queue_bucket, latency_bucket_us=latency_bucket_us).port_params()
            filt = ChangeFilter(settings)                 # reports in us, as BMv2's
            for value in (0, 1, 3, 4, 15, 16, 17, 100, 4095, 4096, 70000):
                (sig,) = filt.signature([HopMetadata(node_id=1, queue_occupancy=value, hop_latency=value)])
                assert sig[3] == value >> params["queue_bucket_shift"]
                assert sig[4] == value >> params["latency_bucket_shift"]
    # Reports in nanoseconds: the same 16 us bucket.
    filt = ChangeFilter(ChangeSettings(), time_unit_ns=1)
    assert [filt.signature([HopMetadata(hop_latency=ns)])[0][4] for ns in (0, 15999, 16000, 32000)] == [0, 0, 1, 2]


def test_the_flow_table_is_bounded_and_never_hides_a_change():
    filt = ChangeFilter(ChangeSettings(refresh_s=1.0), max_flows=2)
    sig = filt.signature([HopMetadata(node_id=1, queue_occupancy=0)])
    assert filt.offer("a", sig, T0) and filt.offer("b", sig, T0)
    assert filt.offer("c", sig, T0) and filt.offer("c", sig, T0 + 0.1)     # no room: always sent
    assert not filt.offer("a", sig, T0 + 0.2)
    assert filt.offer("c", sig, T0 + 1.05)            # a and b expired (refresh passed): forgotten, c kept
    assert set(filt.last) == {"c"} and not filt.offer("c", sig, T0 + 1.1)


@pytest.mark.parametrize("settings, message", [
    ({"queue_bucket": 3}, "queue_bucket: expected a power of two"),
    ({"queue_bucket": 0}, "queue_bucket: expected a power of two"),
    ({"latency_bucket_us": -16}, "latency_bucket_us: expected a power of two"),
    ({"refresh_s": -1.0}, "refresh_s: expected seconds >= 0"),
    ({"refresh_s": float("nan")}, "refresh_s: expected seconds >= 0"),
])
def test_bad_settings_are_named(settings, message):
    with pytest.raises(ValueError, match=message):
        ChangeSettings(**settings)
    with pytest.raises(ValueError, match=message):
        Collector(port=0, metrics_port=None, out_dir=None, **settings)


# ---------------------------------------------------------------------------
# The collector: reports.csv, listeners, summary.json, the command line

def mixed_stream():
    """12 datagrams: 8 reports of a steady flow (one queue bucket change,
    one path change), 2 drop and 2 congestion reports."""
    s = Stream()
    flows = [s.flow(), s.flow(), s.flow(queues=[0, 0, 9]), s.flow(queues=[0, 0, 9]), s.flow(path=PATH_B),
             s.flow(path=PATH_B), s.flow(path=PATH_B), s.flow(path=PATH_B)]
    others = [drop_report(FLOW, node_id=3, seq_no=i, reason=4) for i in range(2)] + \
        [congestion_report(FLOW, node_id=1, seq_no=i, queue_id=0, occupancy=42, egress_port=2) for i in range(2)]
    return flows + others


def feed_collector(col, datagrams):
    for i, data in enumerate(datagrams):
        col.handle_datagram(data, now=T0 + i * 0.01)


def run_collector(tmp_path, **kwargs):
    heard, changed = [], []
    with Collector(port=0, metrics_port=None, out_dir=tmp_path, node_names=NAMES,
                   listeners=[lambda t, data, pkt: heard.append(pkt.seq_no)],
                   change_listeners=[lambda t, data, pkt, out: changed.append((pkt.seq_no, out.kinds))],
                   **kwargs) as col:
        feed_collector(col, mixed_stream())        # handle_datagram directly, as the receiver thread would
    rows = list(csv.DictReader(open(tmp_path / "reports.csv")))
    return col, rows, heard, changed


def test_collector_writes_only_changes_and_tells_change_listeners(tmp_path):
    col, rows, heard, changed = run_collector(tmp_path)
    flow_rows = [r for r in rows if r["kinds"] == "tracked_flow"]
    assert [r["seq_no"] for r in flow_rows] == ["0", "2", "4"]       # first, queue bucket, path
    assert flow_rows[1]["queue_occupancies"] == "0;0;9"
    assert flow_rows[2]["path"] == "leaf1[1>4] spine2[1>2] leaf2[4>1]"
    assert [r["kinds"] for r in rows[3:]] == ["drop", "drop", "congestion", "congestion"]
    assert len(heard) == 12                                          # the plain listeners: every report
    assert changed == [(0, ["tracked_flow"]), (2, ["tracked_flow"]), (4, ["tracked_flow"]),
                       (0, ["drop"]), (1, ["drop"]), (0, ["congestion"]), (1, ["congestion"])]
    assert col.totals()["sent"] == 7 and col.totals()["kept_back"] == 5
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["reports_sent"] == 7 and summary["reports_kept_back"] == 5
    assert summary["flows"][FLOW.label]["reports"] == 8 and summary["flows"][FLOW.label]["kept_back"] == 5
    assert col.state.registry.get_sample_value("int_reports_unchanged_total",
                                               {"node_id": "4", "switch": "leaf2"}) == 5


def test_collector_all_reports_sends_everything(tmp_path):
    col, rows, heard, changed = run_collector(tmp_path, changes_only=False)
    assert len(rows) == 12 and [r["seq_no"] for r in rows[:8]] == [str(i) for i in range(8)]
    assert len(heard) == 12 and len(changed) == 12
    assert col.totals()["sent"] == 12 and col.totals()["kept_back"] == 0
    assert json.loads((tmp_path / "summary.json").read_text())["changes_only"] is None


def test_a_duplicate_still_gets_its_row():
    col = Collector(port=0, metrics_port=None, out_dir=None, node_names=NAMES)
    s = Stream()
    first = s.flow()
    col.handle_datagram(first, now=T0)
    col.handle_datagram(first, now=T0 + 0.1)
    assert col.totals()["duplicates"] == 1 and col.totals()["sent"] == 1 and col.totals()["kept_back"] == 0


def cli(monkeypatch, *flags):
    """main() with `flags`: the collector it builds, fed mixed_stream() instead of a socket."""
    seen = {}

    def fake_run(collector, duration, progress, summary_interval):
        feed_collector(collector, mixed_stream())
        seen["collector"] = collector
        collector.stop()
        return 0

    monkeypatch.setattr(collector_mod.Collector, "start", lambda self: self)
    monkeypatch.setattr(collector_mod, "run_until_stopped", fake_run)
    assert main(["--no-metrics", "--no-files", *flags]) == 0
    return seen["collector"]


def test_cli_flags_reach_the_collector(monkeypatch):
    col = cli(monkeypatch)
    assert col.changes == ChangeSettings() and col.totals()["kept_back"] == 5
    col = cli(monkeypatch, "--all-reports")
    assert col.changes is None and col.totals()["kept_back"] == 0 and col.totals()["sent"] == 12
    col = cli(monkeypatch, "--queue-bucket", "16")          # 0 -> 9 packets is no longer a change
    assert col.changes.queue_bucket == 16 and col.totals()["kept_back"] == 6
    col = cli(monkeypatch, "--refresh-s", "0")
    assert col.totals()["kept_back"] == 0
    col = cli(monkeypatch, "--latency-bucket-us", "1", "--refresh-s", "0.015")   # a refresh at t0+0.06
    assert col.changes == ChangeSettings(latency_bucket_us=1, refresh_s=0.015) and col.totals()["kept_back"] == 4


@pytest.mark.parametrize("flags, message", [
    (["--queue-bucket", "3"], "argument --queue-bucket: expected a power of two (1, 2, 4, ...), got '3'"),
    (["--queue-bucket", "-4"], "argument --queue-bucket: expected a power of two (1, 2, 4, ...), got '-4'"),
    (["--queue-bucket", "four"], "argument --queue-bucket: expected a power of two (1, 2, 4, ...), got 'four'"),
    (["--latency-bucket-us", "10"],
     "argument --latency-bucket-us: expected a power of two (1, 2, 4, ...), got '10'"),
    (["--latency-bucket-us", "0"], "argument --latency-bucket-us: expected a power of two (1, 2, 4, ...), got '0'"),
    (["--refresh-s", "-1"], "argument --refresh-s: expected seconds >= 0 (0: send every report), got '-1'"),
    (["--refresh-s", "nan"], "argument --refresh-s: expected seconds >= 0 (0: send every report), got 'nan'"),
])
def test_bad_cli_values_are_named(capsys, flags, message):
    with pytest.raises(SystemExit) as exc:
        main(["--no-metrics", "--no-files", *flags])
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_a_change_of_ecn_marking_is_sent_and_a_steady_mark_is_kept_back():
    filt = ChangeFilter(ChangeSettings(refresh_s=10))
    sig = filt.signature([HopMetadata(node_id=1, queue_occupancy=0)])
    assert [filt.offer("f", sig, t, marked) for t, marked in
            enumerate([False, False, True, True, False])] == [True, False, True, False, True]


def test_the_collector_forwards_upstream_only_datagrams_with_a_report_sent_on():
    import socket
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as up:
        up.bind(("127.0.0.1", 0))
        up.settimeout(2)
        col = Collector(port=0, metrics_port=None, out_dir=None, node_names=NAMES, upstream=up.getsockname())
        col.start()
        try:
            s = Stream()
            first, same = s.flow(), s.flow()
            drop = drop_report(FLOW, node_id=3, seq_no=0, reason=1)
            for data in (first, same, drop):
                col.handle_datagram(data, T0)
            got = [up.recv(65535), up.recv(65535)]
            up.settimeout(0.2)
            with pytest.raises(socket.timeout):
                up.recv(65535)
        finally:
            col.stop()
    assert got == [first, drop] and col.forwarded == 2
