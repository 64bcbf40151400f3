"""The ECN incast experiment end to end, shortened: it runs, writes its CSV
and PNG files, and what it measures has the shape the mechanisms imply
(without marking: no CE, no CNP, tail drops at 2.5x oversubscription; with
marking: the switch marks, the receiver sees CE and sends CNPs, the senders
receive them)."""
import csv
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]



def test_ecn_incast_experiment(tmp_path):
    out = tmp_path / "ecn"
    proc = subprocess.run([sys.executable, "-m", "experiments.ecn_incast", "--duration", "4", "--out", str(out)],
                          cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"results: {out}/summary.csv" in proc.stdout
    rows = {r["case"]: r for r in csv.DictReader(open(out / "summary.csv"))}
    assert set(rows) == {"no-ecn", "step-ecn-dcqcn", "wred-ecn-dcqcn"}
    none = rows["no-ecn"]
    assert float(none["ce_fraction"]) == 0 and int(none["cnps_sent"]) == 0 and int(none["switch_marks"]) == 0
    assert int(none["drops"]) > 0, "4 senders at 2.5x the bottleneck without ECN must tail-drop"
    for name in ("step-ecn-dcqcn", "wred-ecn-dcqcn"):
        r = rows[name]
        assert int(r["switch_marks"]) > 0 and float(r["ce_fraction"]) > 0
        assert int(r["cnps_sent"]) > 0 and int(r["cnps_received"]) > 0
        assert int(r["cnps_received"]) <= int(r["cnps_sent"])
        assert (out / name / "timeseries.png").stat().st_size > 10_000
    assert (out / "summary.png").exists()
