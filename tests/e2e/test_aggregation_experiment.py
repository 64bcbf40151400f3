"""The aggregation experiment end to end, shortened (16384 elements, n = 2
and 4, loss 0 and 2%, one and four shared jobs, one training epoch): it runs,
writes its CSV and PNG files, and what it measures has the shape the
protocol implies: in-network aggregation sends each block once plus the
window's exponent-only packets (1.5 S at this size, blocks of 256) while
the ring sends at least its own 2(n-1)/n S; a window's rows are exact; every all-reduce is
within its bound; loss costs retransmissions; shared jobs are all exact;
one epoch through the switch matches the single-process reference. Over
trees (leaf-spine only here; fat-tree-k4 in test_aggregation_live.py):
the trees keep the busiest fabric link at about one packet per block,
summing at the server's switch does not, and every result is good under
loss. Every case carries a fidelity verdict; the bounds on traffic, which
retransmissions inflate, hold where the case was faithful."""
import csv
import re
import subprocess
import sys
from pathlib import Path

from hostagent.aggregation.allreduce import DEFAULT_WINDOW
from wire import aggregation as ah

REPO = Path(__file__).resolve().parents[2]
ELEMENTS = 16384
# Jobs sharing the slot pool at once: one alone, and all four (the pool smaller than their windows together).
# Two and three run in `make experiments`: each adds 8-9 s here and only the same outcome (every job exact)
# between the two ends; test_aggregation_live.py's four shared jobs judge it again, with the pool's collisions.
SHARED = (1, 4)


def rows(path):
    return list(csv.DictReader(open(path)))


def faithful(row) -> bool:
    """The case's verdict: its performance is the network's only where "ok"."""
    return row["fidelity"] == "ok"


def test_aggregation_experiment(tmp_path):
    out = tmp_path / "agg"
    cmd = [sys.executable, "-m", "experiments.aggregation", "--elements", str(ELEMENTS), "--workers", "2,4",
           "--loss", "0,2", "--windows", "8,64", "--jobs", ",".join(map(str, SHARED)), "--epochs", "1",
           "--tree-elements", "16384", "--tree-topologies", "leaf-spine", "--out", str(out)]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert f"results in {out}" in proc.stdout
    for name in ("goodput", "window", "loss", "jobs", "training", "levels", "tree_loss", "tree_ecn"):
        assert (out / f"{name}.png").stat().st_size > 10_000, name

    goodput = rows(out / "goodput.csv")
    assert len(goodput) == 4
    # in-network: each block once, plus the window's exponent-only packets, with their headers
    blocks = -(-ELEMENTS // ah.DEFAULT_BLOCK_ELEMENTS)
    protocol = (blocks + min(DEFAULT_WINDOW, blocks)) * (ah.HEADER_BYTES + 4 * ah.DEFAULT_BLOCK_ELEMENTS) / (4 * ELEMENTS)
    for r in goodput:
        ratio = float(r["sent_over_bound"])
        if r["method"] == "in-network":
            assert protocol - 0.001 <= ratio, r
            # + retransmissions: on a machine that did not keep up (workers' timers late, frames lost before
            # the pipeline) they are the machine's: 2.02 x the bound with 128 (CPU wait 93%)
            assert ratio < 1.3 * protocol or not faithful(r), r
        else:
            assert ratio >= 1.0, r
    window = rows(out / "window.csv")
    assert [(r["window"], r["all_within_bound"]) for r in window] == [("8", "True"), ("64", "True")]
    assert all(float(r["srtt_ms"]) > 0 and int(r["contributions_per_s"]) > 0 for r in window)
    loss = rows(out / "loss.csv")
    assert [r["all_within_bound"] for r in loss] == ["True", "True"]
    assert int(loss[1]["retransmissions_per_worker"]) > 0
    jobs = rows(out / "jobs.csv")
    assert sorted({int(r["jobs"]) for r in jobs}) == list(SHARED) and len(jobs) == sum(SHARED)
    assert all(r["exact_or_within_bound"] == "True" for r in jobs)
    training = rows(out / "training.csv")
    assert len(training) == 1 and float(training[0]["ina_loss_rel_diff"]) < 1e-4

    levels = {r["mode"]: r for r in rows(out / "levels.csv")}
    assert list(levels) == ["one level", "one tree", "2 trees"]
    assert all(r["all_within_bound"] == "True" for r in levels.values())
    for mode in ("one tree", "2 trees"):           # retransmissions cross the links again
        assert float(levels[mode]["busiest_over_bound"]) <= 1.1 or not faithful(levels[mode]), levels[mode]
    # one level: h1's and h2's contributions (and their results) both cross leaf1's uplinks unreduced
    assert int(levels["one level"]["fabric_packets"]) > int(levels["2 trees"]["fabric_packets"])
    tree_loss = rows(out / "tree_loss.csv")
    assert [r["all_within_bound"] for r in tree_loss] == ["True", "True"]
    assert int(tree_loss[1]["retransmissions_per_worker"]) > 0
    tree_ecn = {r["case"]: r for r in rows(out / "tree_ecn.csv")}
    assert len(tree_ecn) == 5 and all(r["all_within_bound"] == "True" for r in tree_ecn.values())
    assert int(tree_ecn["alone"]["congested_results_per_worker"]) == 0
    # without ECN nothing is marked (not ECT); with it, the elephant's queue marks results and windows shrink
    assert int(tree_ecn["fixed-rate elephant, no ECN"]["congested_results_per_worker"]) == 0
    assert int(tree_ecn["fixed-rate elephant, ECN on aggregation"]["congested_results_per_worker"]) > 0
    assert float(tree_ecn["fixed-rate elephant, ECN on aggregation"]["smallest_window"]) < 32
    judged = [*goodput, *window, *loss, *jobs, *levels.values(), *tree_loss, *tree_ecn.values()]
    assert all(r["fidelity"] == "ok" or r["fidelity"].startswith("violated: ") for r in judged), judged
    assert training[0]["ina_fidelity"] and training[0]["ring_fidelity"]
    # 4 goodput, 2 window, 2 loss, 2 jobs, 2 training, 3 levels, 2 tree_loss, 5 tree_ecn cases
    assert re.search(r"fidelity: (every case faithful \(22 of 22\)|\d+ of 22 cases violated)", proc.stdout), \
        proc.stdout[-3000:]
