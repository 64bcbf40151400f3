"""`fabric train` on a live leaf-spine, as a short ablation: PyTorch DDP on
four ranks, their gradients all-reduced through BMv2 with the techniques
composed (ring, lossless class with PFC, HPCC on INT, path-aware channels
with the least-loaded choice, failover, monitoring), then the same with the
fixed split; a spine killed as step 4 starts in both. Every step of both
completes, the loss curve equals the single-process reference's, the
failure is absorbed by a step from step 4 on, every rank's NIC honours the
lossless class's pauses (and counts them), and the run leaves its table,
CSV, PNG and a Chrome trace per case."""
from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

from emulator.build import compile_p4

REPO = Path(__file__).resolve().parents[2]
STEPS = 10


def test_a_short_ablation_survives_a_spine_killed_mid_run_and_equals_the_reference(tmp_path):
    compile_p4()
    run = subprocess.run([sys.executable, "-m", "fabric.cli", "train", "--topology", "leaf-spine", "--steps",
                          str(STEPS), "--fail", "spine1@step4", "--ablate", "channel-choice", "--out", str(tmp_path)],
                         cwd=REPO, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout[-5000:] + run.stderr[-2000:]
    rows = json.loads((tmp_path / "summary.json").read_text())
    assert [r["case"] for r in rows] == ["composed", "fixed split instead of least-loaded"]
    for r in rows:
        assert r["completed"] == STEPS and r["errors"] == "", r
        assert float(r["max_loss_error"]) <= 1e-4
        assert r["failure"] == "switch spine1 killed at step 4"
        assert r["absorbed_by_step"] >= 4                     # a step from the failure on took the hit
        # the ideal step's latency: the idle fabric's round trips, pinged before the ranks started
        assert 0 < float(r["ideal_latency_ms"]) < float(r["ideal_ms"]), r
    assert rows[0]["channel_choice"] == "least-loaded" and rows[1]["channel_choice"] == "fixed"
    assert run.stdout.count("!!! switch spine1 killed as step 4 started") == 2
    lines = [line for line in run.stdout.splitlines() if line.startswith("step ")]
    assert len(lines) == 2 * STEPS and all("= reference" in line for line in lines)
    # the ablation's table, CSV and PNG
    out = run.stdout.splitlines()
    header = next(i for i, line in enumerate(out) if "step_ms_p50" in line and "efficiency" in line)
    assert [line.split()[0] for line in out[header + 1:header + 3]] == ["composed", "fixed"]
    with open(tmp_path / "ablation.csv") as f:
        assert [r["case"] for r in csv.DictReader(f)] == [r["case"] for r in rows]
    assert (tmp_path / "ablation.png").read_bytes()[:4] == b"\x89PNG"
    with open(tmp_path / "verdicts.csv") as f:           # one run a case: no verdict, and it says why
        (verdict,) = csv.DictReader(f)
    assert verdict["technique off"] == rows[1]["case"] and verdict["verdict"].startswith("not judged: "), verdict
    # the composition really ran: its sections, and every rank's timeline with the failure on it
    topo = (tmp_path / "composed" / "topology.yaml").read_text()
    assert "lossless:" in topo and "to_host: true" in topo and "failover:" in topo
    for r in range(4):          # every rank's NIC honoured the lossless class's pauses, and counted them
        summary = json.loads((tmp_path / "composed" / f"rank{r}.json").read_text())
        assert summary["tclass"] == 3 and {"pauses_received", "paused_s"} <= set(summary), summary
        steps = [json.loads(line) for line in (tmp_path / "composed" / f"rank{r}.jsonl").read_text().splitlines()]
        assert all("pauses_received" in x and "paused_s" in x for x in steps)
    trace = json.loads((tmp_path / "composed" / "trace.json").read_text())["traceEvents"]
    assert {e["pid"] for e in trace if e["name"] == "backward"} == {0, 1, 2, 3}
    assert sum(1 for e in trace if e["name"] == "backward") == 4 * STEPS
    assert any(e["name"] == "switch spine1 killed" and e["ph"] == "i" for e in trace)


INCAST_STEPS = 4             # the incast from step 2: three steps under it (six until 2026-12-03; the lossy case
                             # took 3.7-13.6 s a step from step 2 on)


def test_a_competing_incast_on_links_at_the_nic_rate_pauses_the_lossless_class_and_costs_the_lossy_one(tmp_path):
    """Every link at a rank NIC's rate (2 x 150 packets/s and ACKs: 375),
    and two fixed-rate senders of 300 packets/s each into rank h3's link
    from step 2: the lossless class pauses (no drop the switches count but
    the pause frames they consume, every step done, the loss curve the
    reference's: every gradient exact at the ranks); the lossy class loses the ring's
    packets there, so its ranks resend them or give up, saying so."""
    compile_p4()
    run = subprocess.run([sys.executable, "-m", "fabric.cli", "train", "--topology", "leaf-spine", "--steps",
                          str(INCAST_STEPS), "--link-rate", "nic", "--line-rate-pps", "150", "--incast", "2@300",
                          "--ablate", "traffic-class", "--no-monitor", "--out", str(tmp_path)],
                         cwd=REPO, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout[-5000:] + run.stderr[-2000:]
    assert "links: every link at 375 packets/s" in run.stdout
    assert run.stdout.count("!!! incast: 2 x 300 packets/s from incast1, incast2 to h3 as step 2 started") == 2
    lossless, lossy = json.loads((tmp_path / "summary.json").read_text())
    assert lossless["scenario"] == lossy["scenario"] == "links at the NIC rate, incast 2 x 300 packets/s"
    assert lossless["completed"] == INCAST_STEPS and lossless["errors"] == "", lossless
    assert float(lossless["max_loss_error"]) <= 1e-4
    assert lossless["pauses"] > 0, lossless
    # the only drops: the pause frames the switches consumed; none past the headroom, none of any other reason
    assert all(d.startswith("PFC_FRAME:") for d in lossless["drop_reasons"].split()), lossless
    assert lossy["traffic_class"] == "lossy" and lossy["pauses"] == 0
    assert lossy["resent"] > 0 or "retry count exceeded" in lossy["errors"], lossy
