"""The RoCE-against-UET experiment end to end, shortened (one run, 4 s a
case, 2 all-reduces a ring, RoCE with PFC and UET with NSCC, trimming from
4 packets queued so that NSCC's queue reaches it): it runs, writes its CSV and PNG, and what it
measures has the shape the mechanisms imply. Incast: both deliver, RoCE's
senders are paused and UET's packets trimmed (and resent on their NACKs),
never the other way round. A link black-holed mid-transfer: every UET
message completes (its senders, and its receiver's ACKs, moved off the
dead spine) and none fails. A ring all-reduce on fat-tree-k4 beside a
competing flow: every all-reduce completes, each result exact, on both
transports."""
import csv
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_roce_pauses_where_uet_trims_uet_sprays_around_a_dead_link_and_both_all_reduce_exactly(tmp_path):
    out = tmp_path / "uet"
    proc = subprocess.run([sys.executable, "-m", "experiments.uet", "--cases", "roce-pfc", "uet-nscc", "--runs", "1",
                           "--duration", "4", "--senders", "4", "--trim-threshold", "4", "--ring-iterations", "2",
                           "--out", str(out)],
                          cwd=REPO, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"results: {out}/summary.csv" in proc.stdout
    rows = {(r["phase"], r["case"]): r for r in csv.DictReader(open(out / "summary.csv"))}
    assert set(rows) == {(p, c) for p in ("incast", "failure", "allreduce") for c in ("roce-pfc", "uet-nscc")}
    roce, uet = rows[("incast", "roce-pfc")], rows[("incast", "uet-nscc")]
    for r in (roce, uet):
        assert int(r["messages"]) > 0 and int(r["senders_failed"]) == 0, r
    # RoCE is paused, never trimmed; undilated, this run is over budget (x2.46), and BMv2's input path may lose
    # what would have filled the queue: pauses 62-77 in 3 runs that lost 54-258 frames there, none in one
    # that lost 313 (2026-12-01). A case that lost frames says so in its verdict: then its pauses are not judged
    assert int(roce["pauses"]) > 0 or "input_path" in roce["fidelity"], roce
    assert int(roce["trims"]) == 0, roce
    assert int(uet["trims"]) > 0 and int(uet["pauses"]) == 0 and int(uet["retransmitted"]) > 0, uet
    failed = rows[("failure", "uet-nscc")]
    assert int(failed["senders_failed"]) == 0 and int(failed["messages_failed"]) == 0, failed
    assert int(failed["messages"]) > 0
    for case in ("roce-pfc", "uet-nscc"):
        ring = rows[("allreduce", case)]
        assert int(ring["allreduces"]) == 2 and int(ring["wrong_results"]) == 0, ring
        assert float(ring["competing_goodput_mbps"]) > 0, ring
    assert int(rows[("allreduce", "roce-pfc")]["trims"]) == 0 and int(rows[("allreduce", "uet-nscc")]["pauses"]) == 0
    assert (out / "summary.png").stat().st_size > 10_000
    spread = list(csv.DictReader(open(out / "spread.csv")))
    assert {(r["phase"], r["case"]) for r in spread} == set(rows)
