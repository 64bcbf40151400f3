"""What an RDMA agent writes when it ends, in either mode (RC: agent.py;
UET: uet_agent.py): its summary as JSON, a sender's time series as CSV."""
from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Optional


def percentiles(values: list[float]) -> Optional[dict]:
    if not values:
        return None
    v = sorted(values)
    return {"p50": round(v[len(v) // 2], 3), "p99": round(v[min(len(v) - 1, int(0.99 * len(v)))], 3),
            "max": round(v[-1], 3)}


def write_messages(a, messages) -> None:
    """A sender's messages, one row each: <out>.messages.csv (nothing without --out)."""
    if a.out is None:
        return
    with open(Path(a.out).with_suffix(".messages.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(("message", "bytes", "posted_s", "completed_s", "error"))
        w.writerows((m.id, m.size, round(m.posted_at, 6),
                     "" if m.completed_at is None or m.error is not None else round(m.completed_at, 6),
                     "" if m.error is None else m.error.cause) for m in messages)


def write_summary(a, summary: dict, header: tuple = (), rows=()) -> None:
    if a.out is None:
        print(json.dumps(summary, indent=2))
        return
    out = Path(a.out)
    out.with_suffix(".json").write_text(json.dumps(summary, indent=2))
    if header:
        with open(out.with_suffix(".csv"), "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(header)
            w.writerows(rows)
