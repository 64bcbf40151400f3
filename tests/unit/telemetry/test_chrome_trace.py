"""The training timeline in the Chrome trace event format: valid JSON with
the fields the format (and Perfetto's importer) require, each track's
timestamps monotonic, complete events nested as DDP runs them (each bucket's
all-reduce inside its backward), and the fabric's events and counters."""
from __future__ import annotations

import json

import pytest

from telemetry.chrome_trace import ALLREDUCE_TID, COMPUTE_TID, FABRIC_PID, PHASES, FabricEvent, trace_events, \
    write_heatmap, write_trace

T0 = 1_800_000_000.0


def step(n: int, start: float, resent_so_far: int) -> dict:
    """A step as ddp.py records it: 2 ms forward, 30 ms backward holding two
    buckets' all-reduces, 1 ms optimizer."""
    b0 = (start + 0.004, start + 0.014, 1000)
    b1 = (start + 0.016, start + 0.030, 18000)
    return {"step": n, "epoch": 0, "start": start, "forward_s": 0.002, "backward_s": 0.030, "optimizer_s": 0.001,
            "end": start + 0.033, "loss": 2.0, "buckets": [list(b0), list(b1)], "retransmitted": resent_so_far,
            "timeouts": 0}


def records(ranks: int = 3, steps: int = 4) -> list[list[dict]]:
    # rank r starts each step r ms late; rank 1 resends 5 packets in step 3
    return [[step(s, T0 + 0.05 * s + 0.001 * r, 5 if r == 1 and s >= 2 else 0) for s in range(steps)]
            for r in range(ranks)]


def test_trace_is_valid_json_with_the_formats_fields(tmp_path):
    trace = trace_events(records(), ["h1", "h2", "h3"], [FabricEvent(T0 + 0.1, "switch spine1 failed")],
                         [{"at": T0 + 0.033, "pauses": 2, "drops": 0}])
    path = write_trace(tmp_path / "trace.json", trace)
    loaded = json.loads(path.read_text())
    assert loaded["displayTimeUnit"] == "ms"
    for e in loaded["traceEvents"]:
        assert isinstance(e["name"], str) and e["name"]
        assert e["ph"] in PHASES and isinstance(e["pid"], int) and isinstance(e["tid"], int)
        if e["ph"] != "M":
            assert isinstance(e["ts"], (int, float)) and e["ts"] >= 0
        if e["ph"] == "X":
            assert e["dur"] >= 0
        if e["ph"] == "i":
            assert e["s"] in ("g", "p", "t")
        if e["ph"] == "C":
            assert all(isinstance(v, (int, float)) for v in e["args"].values())
    names = {(e["pid"], e["args"]["name"]) for e in loaded["traceEvents"] if e["name"] == "process_name"}
    assert names == {(0, "rank 0 (h1)"), (1, "rank 1 (h2)"), (2, "rank 2 (h3)"), (FABRIC_PID, "fabric")}


def test_each_tracks_timestamps_are_monotonic_and_start_at_the_first_step():
    events = trace_events(records(), ["h1", "h2", "h3"])["traceEvents"]
    timed = [e for e in events if e["ph"] != "M"]
    assert min(e["ts"] for e in timed) == 0
    tracks: dict[tuple[int, int], list[float]] = {}
    for e in timed:
        tracks.setdefault((e["pid"], e["tid"]), []).append(e["ts"])
    assert set(tracks) >= {(r, t) for r in range(3) for t in (COMPUTE_TID, ALLREDUCE_TID)}
    for ts in tracks.values():
        assert ts == sorted(ts)
    # on one track, complete events do not overlap: forward, backward, optimizer, forward, ...
    compute = [e for e in timed if (e["pid"], e["tid"]) == (0, COMPUTE_TID)]
    assert [e["name"] for e in compute[:4]] == ["forward", "backward", "optimizer", "forward"]
    for a, b in zip(compute, compute[1:]):
        assert a["ts"] + a["dur"] <= b["ts"] + 0.2


def test_buckets_sit_inside_their_backward_and_resends_are_marked():
    events = trace_events(records(), ["h1", "h2", "h3"])["traceEvents"]
    backward = {(e["pid"], e["args"]["step"]): e for e in events if e["name"] == "backward"}
    buckets = [e for e in events if e["name"].startswith("all-reduce bucket")]
    assert len(buckets) == 3 * 4 * 2
    for b in buckets:
        bw = backward[(b["pid"], b["args"]["step"])]
        assert bw["ts"] <= b["ts"] and b["ts"] + b["dur"] <= bw["ts"] + bw["dur"] + 0.2
    [resent] = [e for e in events if e["ph"] == "i" and e["pid"] != FABRIC_PID]
    assert resent["pid"] == 1 and resent["args"] == {"step": 3, "packets": 5}


def test_with_channels_each_step_shows_where_the_ranks_bytes_went():
    recs = records(ranks=1, steps=3)
    for s, sent in zip(recs[0], ([100, 100], [250, 150], [250, 400])):     # so far, per channel
        s["channel_bytes"] = sent
    counters = [e for e in trace_events(recs, ["h1"])["traceEvents"] if e["name"] == "bytes by channel"]
    assert [e["args"] for e in counters] == [{"channel 0": 100, "channel 1": 100},
                                             {"channel 0": 150, "channel 1": 50},
                                             {"channel 0": 0, "channel 1": 250}]     # moved off channel 0
    assert all(e["ph"] == "C" and e["pid"] == 0 for e in counters)


def test_a_rank_whose_nic_was_paused_has_a_counter_of_its_pauses_per_step():
    recs = records(ranks=2, steps=3)
    for s, (pauses, paused_s) in zip(recs[1], ((0, 0.0), (3, 0.25), (3, 0.25))):    # so far
        s["pauses_received"], s["paused_s"] = pauses, paused_s
    for s in recs[0]:
        s["pauses_received"], s["paused_s"] = 0, 0.0
    counters = [e for e in trace_events(recs, ["h1", "h2"])["traceEvents"] if e["name"] == "PFC at the NIC"]
    assert all(e["ph"] == "C" and e["pid"] == 1 for e in counters), "only the rank that was paused"
    assert [e["args"] for e in counters] == [{"pauses received": 0, "ms paused": 0.0},
                                             {"pauses received": 3, "ms paused": 250.0},
                                             {"pauses received": 0, "ms paused": 0.0}]     # during each step
    ends = [e["ts"] + e["dur"] for e in trace_events(recs, ["h1", "h2"])["traceEvents"]
            if e["name"] == "optimizer" and e["pid"] == 1]
    assert [e["ts"] for e in counters] == pytest.approx(ends, abs=0.2), "at each step's end"


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="3 ranks' records but 2 hosts"):
        trace_events(records(), ["h1", "h2"])
    with pytest.raises(ValueError, match="no step records"):
        trace_events([[], []], ["h1", "h2"])


def test_heatmap_is_a_png(tmp_path):
    path = write_heatmap(tmp_path / "heatmap.png", records(), ["h1", "h2", "h3"], "test")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
