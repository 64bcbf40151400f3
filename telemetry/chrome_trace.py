"""A training run's per-rank timeline in the Chrome trace event format (the
JSON PyTorch's profiler writes; Perfetto, ui.perfetto.dev, and
chrome://tracing open it).

Each rank is a process (pid = rank, named "rank R (host)") with two tracks
(threads): `compute` (forward, backward, optimizer: complete events, phase
"X") and `all-reduce` (each gradient bucket's all-reduce, inside its
backward: DDP's hook runs synchronously). Packets a rank resent during a
step are an instant event on its all-reduce track; with several channels
a peer pair (paths), a counter "bytes by channel" per step shows where the
rank's bytes went (the least-loaded choice moving them off a slow path);
a rank whose NIC received PFC pauses of its class has a counter "PFC at
the NIC" per step: the pauses it received and the milliseconds it was
paused during the step (its sending stopped: why its all-reduce waited). Fabric-wide events (a
failure, a reroute) are global instants (phase "i", scope "g") of a process
`fabric`, whose counter events (phase "C") carry the PFC pauses and drops
the switches counted per step. Timestamps are microseconds from the run's
first step; events are sorted by time, so each track's are monotonic.

The input is the step records hostagent/collectives/ddp.py writes (one JSON
line per step: start, forward_s, backward_s, optimizer_s, end, buckets as
[start, end, bytes], retransmitted so far, and pauses_received and
paused_s so far when the rank's NIC honours PFC).
"""
from __future__ import annotations

import json
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

COMPUTE_TID, ALLREDUCE_TID = 0, 1
FABRIC_PID = 10_000                      # after every rank's pid
PHASES = {"X", "i", "C", "M"}            # complete, instant, counter, metadata: all this writer emits


@dataclass(frozen=True)
class FabricEvent:
    """Something that happened to the fabric at wall-clock time `at`."""
    at: float
    name: str
    args: dict | None = None


def _us(t: float, t0: float) -> float:
    return round((t - t0) * 1e6, 1)


def trace_events(records: Sequence[Sequence[dict]], hosts: Sequence[str],
                 fabric_events: Sequence[FabricEvent] = (),
                 step_counters: Sequence[dict] = ()) -> dict[str, Any]:
    """records[rank] = that rank's step records, in step order; hosts[rank] its
    host; step_counters: per step {"at": wall time, name: value, ...} for the
    fabric's counter track. Returns the trace (a JSON object)."""
    if len(records) != len(hosts):
        raise ValueError(f"{len(records)} ranks' records but {len(hosts)} hosts")
    starts = [r[0]["start"] for r in records if r]
    if not starts:
        raise ValueError("no step records: nothing to trace")
    t0 = min(starts)
    events: list[dict] = []
    for rank, (steps, host) in enumerate(zip(records, hosts)):
        events.append({"name": "process_name", "ph": "M", "pid": rank, "tid": 0, "args": {"name": f"rank {rank} ({host})"}})
        events.append({"name": "process_sort_index", "ph": "M", "pid": rank, "tid": 0, "args": {"sort_index": rank}})
        for tid, name in ((COMPUTE_TID, "compute"), (ALLREDUCE_TID, "all-reduce")):
            events.append({"name": "thread_name", "ph": "M", "pid": rank, "tid": tid, "args": {"name": name}})
        resent_before = 0
        sent_before: list[int] = []
        paused = any(r.get("pauses_received", 0) or r.get("paused_s", 0.0) for r in steps)
        pauses_before, paused_s_before = 0, 0.0
        for r in steps:
            phases = (("forward", r["start"], r["forward_s"]),
                      ("backward", r["start"] + r["forward_s"], r["backward_s"]),
                      ("optimizer", r["start"] + r["forward_s"] + r["backward_s"], r["optimizer_s"]))
            for name, at, dur in phases:
                events.append({"name": name, "cat": "compute", "ph": "X", "pid": rank, "tid": COMPUTE_TID,
                               "ts": _us(at, t0), "dur": round(dur * 1e6, 1), "args": {"step": r["step"] + 1}})
            for i, (start, end, nbytes) in enumerate(r["buckets"]):
                events.append({"name": f"all-reduce bucket {i}", "cat": "communication", "ph": "X", "pid": rank,
                               "tid": ALLREDUCE_TID, "ts": _us(start, t0), "dur": round((end - start) * 1e6, 1),
                               "args": {"step": r["step"] + 1, "bytes": nbytes}})
            channels = r.get("channel_bytes") or []
            if len(channels) > 1:       # where the rank's bytes went: a path's channel losing its share shows
                events.append({"name": "bytes by channel", "cat": "paths", "ph": "C", "pid": rank, "tid": 0,
                               "ts": _us(r["end"], t0),
                               "args": {f"channel {c}": n - (sent_before[c] if c < len(sent_before) else 0)
                                        for c, n in enumerate(channels)}})
            sent_before = channels
            if paused:                  # (every step, zeros too: the counter falls back between pauses)
                events.append({"name": "PFC at the NIC", "cat": "pfc", "ph": "C", "pid": rank, "tid": 0,
                               "ts": _us(r["end"], t0),
                               "args": {"pauses received": r.get("pauses_received", 0) - pauses_before,
                                        "ms paused": round(1000 * (r.get("paused_s", 0.0) - paused_s_before), 3)}})
                pauses_before, paused_s_before = r.get("pauses_received", 0), r.get("paused_s", 0.0)
            resent = r["retransmitted"] - resent_before
            resent_before = r["retransmitted"]
            if resent > 0:
                events.append({"name": f"resent {resent} packets", "cat": "retransmission", "ph": "i", "s": "t",
                               "pid": rank, "tid": ALLREDUCE_TID, "ts": _us(r["end"], t0),
                               "args": {"step": r["step"] + 1, "packets": resent}})
    events.append({"name": "process_name", "ph": "M", "pid": FABRIC_PID, "tid": 0, "args": {"name": "fabric"}})
    for e in fabric_events:
        events.append({"name": e.name, "cat": "fabric", "ph": "i", "s": "g", "pid": FABRIC_PID, "tid": 0,
                       "ts": _us(e.at, t0), "args": e.args or {}})
    for c in step_counters:
        values = {k: v for k, v in c.items() if k != "at"}
        events.append({"name": "switches", "cat": "fabric", "ph": "C", "pid": FABRIC_PID, "tid": 0,
                       "ts": _us(c["at"], t0), "args": values})
    metadata = [e for e in events if e["ph"] == "M"]
    timed = sorted((e for e in events if e["ph"] != "M"), key=lambda e: (e["ts"], e["pid"], e["tid"]))
    return {"traceEvents": metadata + timed, "displayTimeUnit": "ms",
            "otherData": {"source": "fabric train", "t0_unix_s": t0}}


def write_trace(path: Path, trace: dict) -> Path:
    path.write_text(json.dumps(trace))
    return path


def write_heatmap(path: Path, records: Sequence[Sequence[dict]], hosts: Sequence[str], title: str) -> Path:
    """Per rank and step, the rank's own step time (its start to its end), as
    a PNG heatmap: a slow step is a column, a slow rank a row."""
    import matplotlib.pyplot as plt
    import numpy as np
    steps = min(len(r) for r in records)
    grid = np.array([[1000 * (r[s]["end"] - r[s]["start"]) for s in range(steps)] for r in records])
    width = max(6.0, 0.3 * steps + 2)
    fig, ax = plt.subplots(figsize=(width, max(2.5, 0.35 * len(records) + 1.5)))
    im = ax.imshow(grid, aspect="auto", cmap="viridis", interpolation="nearest")
    ax.set_xlabel("step")
    ax.set_ylabel("rank")
    ax.set_xticks(range(0, steps, max(1, steps // 10)))
    ax.set_xticklabels([str(s + 1) for s in range(0, steps, max(1, steps // 10))])
    ax.set_yticks(range(len(records)))
    ax.set_yticklabels([f"{r} ({h})" for r, h in enumerate(hosts)])
    fig.colorbar(im, ax=ax, label="step time (ms)")
    # wrapped to the figure's width (about 11 characters an inch at 10 pt): a long case label stays inside it
    ax.set_title(textwrap.fill(title, int(width * 11), break_on_hyphens=False), fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
