"""The fault-diagnosis experiment, shortened (one fault of each kind, the
link losing 20%): it runs, writes its CSV and PNG, and names each injected
fault first; each fault carries a fidelity verdict, the run one for frames
lost before a pipeline, and the results name the toolchain."""
import csv
import json
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_failover_diagnosis_experiment(tmp_path):
    out = tmp_path / "fd"
    proc = subprocess.run([sys.executable, "-m", "experiments.failover_diagnosis", "--per-kind", "1", "--loss-rates", "20", "--interval", "1",
                           "--out", str(out)], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert f"results: {out / 'faults.csv'}" in proc.stdout
    assert (out / "accuracy.png").stat().st_size > 10_000
    rows = list(csv.DictReader(open(out / "faults.csv")))
    assert sorted(r["kind"] for r in rows) == ["blackhole", "dead switch", "lossy link"]
    assert [r["loss_pct"] for r in rows if r["kind"] == "lossy link"] == ["20.0"]
    assert all(r["top1"] == "True" for r in rows), rows
    # the traffic's cost to this machine, stated before the faults and kept in every row
    assert "budget: " in proc.stdout and all(re.fullmatch(r"within|over x[0-9.]+|unknown", r["budget"]) for r in rows)
    assert all(r["fidelity"] == "ok" or r["fidelity"].startswith("violated: cpu") for r in rows), rows
    # four verdicts, the three faults' and the whole run's: all faithful, or the
    # violated ones named (a fault's CPU wait passed 30% once in CI: 33%)
    assert "fidelity: every case faithful (4 of 4)" in proc.stdout or " of 4 cases violated an invariant" in proc.stdout
    assert json.loads((out / "toolchain.json").read_text())["p4c"].startswith("1.2.")
