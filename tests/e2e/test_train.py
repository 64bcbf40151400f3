"""`fabric train` on a live leaf-spine: PyTorch DDP on four ranks, their
gradients all-reduced through BMv2 with the techniques composed (ring,
lossless class with PFC, HPCC on INT, path-aware channels, failover), a
spine killed as step 5 starts: every step completes, and the loss curve
equals the single-process reference's."""
from __future__ import annotations

import json
import sys
import subprocess
from pathlib import Path

from core.build import compile_p4

REPO = Path(__file__).resolve().parents[2]
STEPS = 12


def test_training_survives_a_spine_killed_mid_run_and_equals_the_reference(tmp_path):
    compile_p4()
    run = subprocess.run([sys.executable, "-m", "fabric.cli", "train", "--topology", "leaf-spine", "--steps",
                          str(STEPS), "--fail", "spine1@step5", "--out", str(tmp_path)], cwd=REPO,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    [summary] = json.loads((tmp_path / "summary.json").read_text())
    assert summary["completed"] == STEPS and summary["errors"] == ""
    assert float(summary["max_loss_error"]) <= 1e-4
    assert summary["failure"] == "switch spine1 at step 5"
    assert summary["absorbed_by_step"] >= 5                  # a step from the failure on took the hit
    assert "!!! switch spine1 failed as step 5 started" in run.stdout
    lines = [line for line in run.stdout.splitlines() if line.startswith("step ")]
    assert len(lines) == STEPS and all("= reference" in line for line in lines)
    # the composition really ran: the ranks' packets carried the lossless class's DSCP, HPCC got INT
    topo = (tmp_path / "composed" / "topology.yaml").read_text()
    assert "lossless:" in topo and "to_host: true" in topo and "failover:" in topo
