"""The trimming incast experiment end to end, shortened (3 s a case): it
runs, writes its CSV and PNG, and what it measures has the shape the
mechanism implies. Tail drop: packets vanish, nothing is trimmed. Trimming:
the switch trims, the receiver gets each trim as a header (never more
headers than trims), far fewer packets vanish than with tail drop in the
same run, and a header reaches the receiver sooner than a delivered packet
(it skips the data queue: strict priority)."""
import csv
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_trimming_turns_silent_losses_into_headers_that_arrive_first(tmp_path):
    out = tmp_path / "trim"
    proc = subprocess.run([sys.executable, "-m", "experiments.trimming_incast", "--duration", "3", "--out", str(out)],
                          cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"results: {out}/summary.csv" in proc.stdout
    rows = {r["case"]: {k: (float(v) if v.replace(".", "", 1).isdigit() else v) for k, v in r.items()}
            for r in csv.DictReader(open(out / "summary.csv"))}
    assert set(rows) == {"tail-drop", "trimming"}
    drop, trim = rows["tail-drop"], rows["trimming"]
    assert drop["switch_trims"] == 0 and drop["trimmed_headers"] == 0
    assert drop["lost_silently"] > 0.2 * drop["sent"], "2x the bottleneck with tail drop loses packets"
    assert trim["switch_trims"] > 0.2 * trim["sent"], "2x the bottleneck with trimming trims"
    assert 0 < trim["trimmed_headers"] <= trim["switch_trims"]
    assert trim["lost_silently"] < 0.1 * drop["lost_silently"], (trim, drop)
    assert trim["header_delay_p50_ms"] < trim["data_delay_p50_ms"], trim
    assert (out / "summary.png").stat().st_size > 10_000
