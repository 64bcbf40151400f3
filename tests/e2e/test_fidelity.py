"""Fidelity on real runs (docs/fidelity.md): `fabric calibrate` measures this
machine and stores what identifies the measurement; then the ECN incast's
no-ECN case, deliberately overloaded (four senders far above what BMv2
forwards here), is announced over budget and its row and last lines say it
was not faithful, while the same case at rates within budget is announced
within budget and judged faithful."""
import csv
import json
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FABRIC = REPO / ".venv" / "bin" / "fabric"
LIGHT_PPS, HEAVY_PPS = 100, 20000           # per sender, four senders into one 500 packets/s link


def incast(out: Path, rate: int) -> tuple[dict, str]:
    proc = subprocess.run([sys.executable, "-m", "experiments.ecn_incast", "--cases", "no-ecn", "--duration", "3",
                           "--sender-rate", str(rate), "--out", str(out)],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (row,) = csv.DictReader(open(out / "summary.csv"))
    return row, proc.stdout


def test_calibrated_rates_are_faithful_and_an_overloaded_run_says_it_is_not(tmp_path):
    proc = subprocess.run([str(FABRIC), "calibrate"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    written = re.search(r"calibrate: written to (\S+\.json)", proc.stdout)
    assert written, proc.stdout
    cal = json.loads(Path(written.group(1)).read_text())
    print("\n" + proc.stdout)
    assert set(cal["switch_pps_per_core"]) == {"fabric", "training"}
    assert all(v > 0 for v in cal["switch_pps_per_core"].values()) and cal["agent_pps_per_core"] > 0
    assert cal["identity"]["cores"] >= 1 and "simple_switch_grpc" in cal["identity"]["bmv2"]
    # the training composition does more per packet than every feature off
    assert cal["switch_pps_per_core"]["training"] < cal["switch_pps_per_core"]["fabric"]

    light, light_out = incast(tmp_path / "light", LIGHT_PPS)
    heavy, heavy_out = incast(tmp_path / "heavy", HEAVY_PPS)
    print(f"light: budget {light['budget']}, fidelity {light['fidelity']}\n"
          f"heavy: budget {heavy['budget']}, fidelity {heavy['fidelity']}")
    assert light["budget"] == "within" and "budget: this run needs" in light_out
    assert light["fidelity"] == "ok", light_out
    assert "fidelity: every case faithful (1 of 1)" in light_out
    assert heavy["budget"].startswith("over x"), heavy_out
    assert "!!! budget: this run needs" in heavy_out
    assert heavy["fidelity"].startswith("violated: "), heavy_out
    assert "!!! fidelity: 1 of 1 cases violated an invariant" in heavy_out
