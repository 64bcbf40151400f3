"""The RDMA experiment on live BMv2, shortened. 4:1 incast across a
leaf-spine with every congestion control on the RC transport: none
collapses (every sender completes messages, the bottleneck stays busy,
the senders share it), and the INT the fabric delivers to the receiver
shows the bottleneck's queue. Random loss at the last hop: selective
repeat keeps more of its goodput than go-back-N, resending less."""
import csv
import subprocess
import sys
from pathlib import Path

from hostagent.rdma.agent import congestion_controls

REPO = Path(__file__).resolve().parents[2]


def test_each_congestion_control_holds_an_incast(tmp_path):
    out = tmp_path / "rdma"
    proc = subprocess.run([sys.executable, "-m", "experiments.rdma", "--phases", "incast", "--senders", "4",
                           "--duration", "6", "--out", str(out)], cwd=REPO, capture_output=True, text=True,
                          timeout=1200)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = {r["cc"]: r for r in csv.DictReader(open(out / "incast" / "summary.csv"))}
    assert set(rows) == set(congestion_controls())
    for cc, r in rows.items():
        assert int(r["messages"]) >= 20, r
        assert float(r["utilisation"]) > 0.5, r
        assert float(r["jain"]) > 0.8, r
        assert r["int_queue_p99"] != "", f"{cc}: INT reached the receiver"
        assert (out / "incast" / f"{cc}-4" / "timeseries.png").stat().st_size > 10_000


def test_selective_repeat_keeps_its_goodput_under_loss_where_go_back_n_does_not(tmp_path):
    out = tmp_path / "rdma"
    proc = subprocess.run([sys.executable, "-m", "experiments.rdma", "--phases", "loss", "--losses", "0", "5",
                           "--duration", "5", "--out", str(out)], cwd=REPO, capture_output=True, text=True,
                          timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = {(r["mode"], float(r["loss_pct"])): r for r in csv.DictReader(open(out / "loss" / "summary.csv"))}
    gbn, sr = rows[("go-back-n", 5.0)], rows[("selective-repeat", 5.0)]
    for clean in (rows[("go-back-n", 0.0)], rows[("selective-repeat", 0.0)]):
        assert int(clean["retransmitted"]) == 0 and int(clean["messages"]) > 0, clean
    assert float(sr["goodput_mbps"]) > float(gbn["goodput_mbps"]), (sr, gbn)
    assert int(sr["retransmitted"]) < int(gbn["retransmitted"]) / 2, (sr, gbn)
    assert (out / "loss" / "goodput_vs_loss.png").stat().st_size > 10_000
