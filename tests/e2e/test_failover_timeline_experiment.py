"""The failure-timeline experiment, shortened to dual-plane with data-plane
and host protection and a spine failing (a link failing runs in `make
experiments`, 18 s a run; test_failover_live.py routes around one in the
data plane): it runs, writes its CSV and PNG, every failure did
lose packets, and traffic was whole again well before the end of each run
(data-plane failover of a dead spine, hosts moving flows to the other
plane, and only the flows that crossed the failure) where the run was
faithful (its verdict, docs/fidelity.md): dilated x4, as undilated no run
on a 2-core machine is. Outage times are printed by the experiment, not
asserted."""
import csv
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_failover_timeline_experiment(tmp_path):
    out = tmp_path / "ft"
    proc = subprocess.run([sys.executable, "-m", "experiments.failover_timeline", "--topologies", "dual-plane",
                           "--protections", "data plane", "host", "--failures", "switch", "--after", "1.5", "--repeats", "1", "--dilation", "4", "--out", str(out)],
                          cwd=REPO, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    print(proc.stdout[-1500:])
    assert f"results: {out / 'runs.csv'}" in proc.stdout
    assert (out / "timeline.png").stat().st_size > 10_000
    runs = list(csv.DictReader(open(out / "runs.csv")))
    assert [(r["protection"], r["failure"]) for r in runs] == [("data plane", "switch"), ("host", "switch")]
    for r in runs:
        assert int(r["lost"]) > 0, f"{r['protection']}/{r['failure']}: the failure cost nothing?"
        assert r["fidelity"] == "ok" or r["fidelity"].startswith("violated: "), r
        assert r["dilation"] == "x4", r
        # Recovered well before the end, and only the flows on the failed part moved plane, where the run was
        # faithful. Undilated, every run on the 2-core machine of 2026-11-28 was violated (threads waiting for a
        # core 42-84%): the 20 ms heartbeats ran late and the leaves failed over with no failure, 47-436 packets
        # were lost in the last second of 5 runs, and acks held up 100 ms by the machine moved all 64 flows of a
        # host-protected run (CI, 2026-11-30). On 2026-11-30 at x3: host cases 8 of 8 faithful (CPU wait
        # 21-28%), data-plane cases 3 of 8 (27-37%; 4-8 frames lost before a leaf's pipeline); at x4 (the
        # experiment's default) 30 of 30 cases of a full run (15-30%) and 4 of 4 of this one
        if r["fidelity"] == "ok":
            assert int(r["last_second_lost"]) <= 0.01 * int(r["sent_after_t0"]), f"not recovered: {r}"
            if r["protection"] == "host":
                assert 0 < int(r["flows_moved"]) < int(r["flows"]), f"only the flows on the failed part move: {r}"
        elif r["protection"] == "host":
            assert int(r["flows_moved"]) > 0, f"the failure moved no flow: {r}"
    timeline = list(csv.DictReader(open(out / "timeline.csv")))
    assert {r["protection"] for r in timeline} == {"data plane", "host"}
    assert all(int(r["lost"]) <= int(r["sent"]) for r in timeline)
