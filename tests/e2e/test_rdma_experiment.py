"""The RDMA experiment on live BMv2, shortened: 4:1 incast across a
leaf-spine with every congestion control on the RC transport. None
collapses: every sender completes messages, the bottleneck stays busy,
the senders share it, and the INT the fabric delivers to the receiver
shows the bottleneck's queue."""
import csv
import subprocess
import sys
from pathlib import Path

from hostagent.rdma.agent import congestion_controls

REPO = Path(__file__).resolve().parents[2]


def test_each_congestion_control_holds_an_incast(tmp_path):
    out = tmp_path / "rdma"
    proc = subprocess.run([sys.executable, "-m", "experiments.rdma", "--senders", "4", "--duration", "6",
                           "--out", str(out)], cwd=REPO, capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = {r["cc"]: r for r in csv.DictReader(open(out / "summary.csv"))}
    assert set(rows) == set(congestion_controls())
    for cc, r in rows.items():
        assert int(r["messages"]) >= 20, r
        assert float(r["utilisation"]) > 0.5, r
        assert float(r["jain"]) > 0.8, r
        assert r["int_queue_p99"] != "", f"{cc}: INT reached the receiver"
        assert (out / f"{cc}-4" / "timeseries.png").stat().st_size > 10_000
