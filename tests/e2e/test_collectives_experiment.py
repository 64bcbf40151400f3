"""The collectives experiment, shortened: data-parallel steps on the live
leaf-spine under three load-balancing modes; every case completes, and
path-aware channels use both spines."""
import csv
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def experiment(tmp_path, *args: str) -> Path:
    """Run the experiment with `args`; its --out directory."""
    out = tmp_path / "collectives"
    proc = subprocess.run([sys.executable, "-m", "experiments.collectives", *args, "--out", str(out)], cwd=REPO,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "results:" in proc.stdout
    return out


def test_collectives_experiment_runs_each_mode(tmp_path):
    out = experiment(tmp_path, "--modes", "ecmp", "path-aware", "spray", "--algorithms", "ring", "--steps", "3")
    assert (out / "lb" / "step_time.png").exists()
    rows = {r["mode"]: r for r in csv.DictReader(open(out / "lb" / "summary.csv"))}
    assert set(rows) == {"ecmp", "path-aware", "spray"}
    for r in rows.values():
        assert int(r["steps"]) == 3 and float(r["step_ms_median"]) >= 60.0      # at least the compute
        assert float(r["busbw_MBps_median"]) > 0
    assert 0.25 <= float(rows["path-aware"]["spine1_share"]) <= 0.75           # both spines carry the job


def test_rail_aware_placement_keeps_the_ring_off_the_spines(tmp_path):
    out = experiment(tmp_path, "--phases", "placement", "--steps", "2")
    rows = {r["placement"]: r for r in csv.DictReader(open(out / "placement" / "summary.csv"))}
    aware, naive = rows["rail-aware"], rows["host-major"]
    assert (int(aware["ring_hops_across_rails"]), int(naive["ring_hops_across_rails"])) == (4, 16)
    assert int(aware["ranks"]) == int(naive["ranks"]) == 16
    assert int(aware["spine_packets"]) * 2 < int(naive["spine_packets"])      # a quarter of the hops cross


def test_two_jobs_share_the_fabric(tmp_path):
    out = experiment(tmp_path, "--phases", "jobs", "--steps", "2")
    rows = {r["case"]: r for r in csv.DictReader(open(out / "jobs" / "summary.csv"))}
    assert set(rows) == {"alone-job0", "shared-job0", "shared-job1"}
    assert all(int(r["steps"]) == 2 and float(r["busbw_MBps_median"]) > 0 for r in rows.values())
