"""The INT experiment end to end, shortened: it runs, writes its CSV and PNG
files, and what it measures has the shape the mechanisms imply (reports for
every packet without suppression, far fewer with it, each counted by the
switches; congestion reports from the sink's queue; the queue INT shows
follows the Thrift-sampled register where the case was faithful; the
probes cover every link; the sink port's departures are judged)."""
import csv
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_int_experiment(tmp_path):
    out = tmp_path / "int"
    proc = subprocess.run([sys.executable, "-m", "experiments.int_telemetry", "--duration", "4", "--out", str(out)],
                          cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"results: {out}/summary.csv" in proc.stdout
    rows = {r["case"]: r for r in csv.DictReader(open(out / "summary.csv"))}
    assert set(rows) == {"every-packet", "suppressed"}
    # each case states what its rates cost this machine before it starts, and keeps it in its row
    assert proc.stdout.count("budget: ") >= 2 and all(re.fullmatch(r"within|over x[0-9.]+|unknown", r["budget"]) for r in rows.values())
    every, suppressed = rows["every-packet"], rows["suppressed"]
    # Every packet reaching a sink is reported: how many that is depends on the machine's speed.
    assert int(every["suppressed_at_sinks"]) == 0 and int(every["flow_reports"]) > 0
    assert int(suppressed["suppressed_at_sinks"]) > int(suppressed["flow_reports"])
    if every["fidelity"] == suppressed["fidelity"] == "ok":   # what every packet's reports come to: the machine's
        assert float(suppressed["reports_per_s"]) < 0.6 * float(every["reports_per_s"])
    for r in rows.values():
        assert int(r["queue_reports"]) > 0, "the incast queue passes the congestion threshold"
        assert r["queue_error_mean_pkts"] != "", "the reports and the register were compared"
        # INT's queue follows the register (reports placed at their egress timestamps): 0.53-0.68 packets
        # in the shortened runs of 2026-11-28, violated (threads waiting for a core 37-52%); 3.8 in a full
        # 8 s run with 76% waiting and 5202 frames lost before the pipeline, which measured the machine
        if r["fidelity"] == "ok":
            assert float(r["queue_error_mean_pkts"]) < 3, "INT's queue follows the register"
        assert float(r["probe_link_coverage"]) == 1.0
        assert (out / r["case"] / "timeseries.png").stat().st_size > 10_000
    assert (out / "summary.png").exists()
    # the departure-spacing invariant was measured on the sink's port from every packet's egress timestamp
    off, backlogged = map(int, every["departures_off_grid"].split("/"))
    assert backlogged > 50 and 0 <= off <= backlogged
    assert suppressed["departures_off_grid"] == ""
