"""The RDMA experiment on live BMv2, shortened. 4:1 incast across a
leaf-spine in a lossless class (PFC; the papers' setting) with every
congestion control on the RC transport; short messages among long flows;
flows joining and leaving; random loss and spraying.

Two kinds of claim. Outcomes hold on any machine: nothing is lost unseen (a
packet the receiver missed is named: a headroom drop, or a frame BMv2 lost
before its pipeline), every algorithm completes messages, the INT the fabric
delivers reaches the receiver, joins and leaves are found, the reorder
buffer gives up only on real losses. The network's performance is judged
where the case was faithful (its `fidelity` column is "ok",
emulator/fidelity.py): none collapses (the bottleneck is used; HPCC keeps
it busy and its queue short, shorter than DCQCN's; HPCC and Swift resend
nothing), the senders share it (TIMELY, whose fixed points are not unique,
and Swift, whose delays include the agents', less evenly), short messages
complete; random loss: selective repeat keeps more of its goodput than
go-back-N, resending less. A violated case measured the machine: on the
2-core machine of 2026-11-28 every case of these phases was (threads
waited for a core 46-88% of the run), and HPCC used 0.49-0.59 of the link
against 0.72-0.85 in faithful-looking runs of 2026-11-27, DCQCN down to
0.093 with 4162 frames lost before the pipeline (docs/fidelity.md)."""
import csv
import subprocess
import sys
from pathlib import Path

from experiments.rdma import CCS

REPO = Path(__file__).resolve().parents[2]
MIX_CONVERGE_CCS = ("hpcc", "swift")     # the mix and converge phases here; DCQCN's and TIMELY's in `make experiments`


def faithful(r: dict) -> bool:
    """The case's numbers measure the network, not the machine."""
    assert r["fidelity"] == "ok" or r["fidelity"].startswith("violated: "), r
    return r["fidelity"] == "ok"


def assert_every_loss_named(r: dict) -> None:
    """Nothing lost unseen: a case whose receiver got fewer packets than were
    sent names where they went (PFC headroom drops, frames BMv2 lost before
    its pipeline)."""
    if int(r["sent"]) > int(r["received"]):
        assert "LOSSLESS_HEADROOM" in r["switch_drops"] or r["lost_before_pipeline"], r


def assert_resent_nothing(r: dict) -> None:
    """HPCC and Swift keep the class's buffer below its headroom: nothing is
    resent unless BMv2 lost a frame before its pipeline (named). A failure
    says whether timeouts or NAKs resent, and what the switches dropped."""
    assert int(r["retransmitted"]) == 0 or r["lost_before_pipeline"], (
        f"{r['case']}: {r['retransmitted']} packets resent ({r['timeouts']} timeouts, {r['naks']} NAKs; "
        f"switch drops: {r['switch_drops'] or 'none'}; fidelity: {r['fidelity']})")


def test_each_congestion_control_holds_an_incast(tmp_path):
    out = tmp_path / "rdma"
    proc = subprocess.run([sys.executable, "-m", "experiments.rdma", "--phases", "incast", "--senders", "4",
                           "--fabrics", "pfc", "--duration", "6", "--out", str(out)], cwd=REPO, capture_output=True,
                          text=True, timeout=1200)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = {r["cc"]: r for r in csv.DictReader(open(out / "incast" / "summary.csv"))}
    assert set(rows) == set(CCS)
    for cc, r in rows.items():
        assert_every_loss_named(r)
        assert int(r["messages"]) > 0 and float(r["utilisation"]) > 0, r
        assert r["int_queue_p99"] != "", f"{cc}: INT reached the receiver"
        assert (out / "incast" / f"{cc}-4-pfc" / "timeseries.png").stat().st_size > 10_000
        if not faithful(r):
            continue
        # No collapse. DCQCN and TIMELY start at line rate, lose packets before BMv2's pipeline
        # (named above) and stall on go-back-N timeouts: 0.27-0.62 of the link over eight runs on
        # 2026-11-27 (a CI run: TIMELY 0.256), so only a link in use is asserted. HPCC keeps the link
        # busy (0.72-0.85 over the same runs). Swift loses and resends nothing, but its delay target is
        # absolute: on a loaded machine the emulation's own delay reads as queueing and it slows down
        # (0.68-0.76 in seven runs, 0.295 in one with the machine still busy), so its link is only in use.
        assert int(r["messages"]) >= (20 if cc == "hpcc" else 10), r
        assert float(r["utilisation"]) > (0.6 if cc == "hpcc" else 0.15), r
        if cc in ("hpcc", "swift"):
            # They keep the class's buffer below its headroom, so nothing is dropped in the pipeline and
            # nothing resent, unless BMv2 lost a frame before its pipeline (named above): on a busy
            # machine, 2 of Swift's 4962 packets in one of ten runs with two busy programs (5 resent).
            assert "LOSSLESS_HEADROOM" not in r["switch_drops"], r
            assert_resent_nothing(r)
        # TIMELY has no unique fixed point (Zhu et al., "ECN or Delay", CoNEXT'16): rates that
        # share a gradient stay where they are, so its share is not asserted fair, only not starved.
        # Swift's target is an absolute delay, and its samples include the agents' own delays (the
        # responder's ACK; the sender's receive is stamped by the kernel, as a NIC's would be): on a
        # busy machine they differ from flow to flow, and Swift's Jain index was 0.58-0.995 over eleven
        # runs with two busy programs (0.86 in an idle run), so it is judged as not collapsed onto one or two flows.
        # A case that lost packets is not judged for fairness: whichever senders lost more sat out
        # more go-back-N timeouts (DCQCN: Jain 0.54-0.97 over six runs, the leaf2 senders ahead)
        if int(r["sent"]) == int(r["received"]):
            assert float(r["jain"]) > {"timely": 0.6, "swift": 0.5}.get(cc, 0.8), r
    hpcc, dcqcn = rows["hpcc"], rows["dcqcn"]
    if faithful(hpcc) and faithful(dcqcn):      # of a 64-packet queue
        assert float(hpcc["int_queue_p99"]) <= 16 and float(hpcc["int_queue_p99"]) < float(dcqcn["int_queue_p99"])


# The loss and spray phases' length a case, in the network's time. What is judged are orderings between
# cases of one run (selective repeat against go-back-N, the reorder buffer against none) and outcomes
# (nothing resent on a clean link, nothing late behind the buffer), which hold at 2 s as at 3 s. Three
# runs at 2 s (x3) on 2026-11-29: at 5% loss selective repeat 2.10 Mbit/s against go-back-N's 1.05-1.31,
# resending 79-91 against 569-699; sprayed, the reorder buffer 2.19 against 0.79-0.87 without it, nothing
# late, nothing declared lost, nothing resent (3 s: 1.98 against 0.87, 2.21 against 0.64). 2 s, not 3:
# the test's seven cases take 21 s less (99 s -> 74 s here).
LOSS_SPRAY_S = 2


def test_retransmission_modes_under_loss_and_under_spraying(tmp_path):
    """Loss: selective repeat keeps more goodput than go-back-N. Spraying
    (reordering): go-back-N resends what was only late, the reorder buffer in
    front of it removes that, resending only for what the fabric lost.

    Dilated x3 (LOSS_SPRAY_S = 2 s of the network's time a case, 6 s here): undilated, on
    2026-11-29 every case of these phases violated the CPU invariant (threads
    waited for a core 46-72% of the run), and a sprayed flow at line rate
    overflowed BMv2's queues, so go-back-N's resends behind the buffer
    measured the machine (2404 against 3651 without it: a CI failure). At x3
    (two runs) every case was faithful but selective repeat's sprayed one (CPU
    wait 32-33%), which nothing below judges."""
    out = tmp_path / "rdma"
    proc = subprocess.run([sys.executable, "-m", "experiments.rdma", "--phases", "loss", "spray", "--losses", "0", "5",
                           "--duration", str(LOSS_SPRAY_S), "--dilation", "3", "--out", str(out)], cwd=REPO,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = {(r["mode"], float(r["loss_pct"])): r for r in csv.DictReader(open(out / "loss" / "summary.csv"))}
    assert all(r["dilation"] == "x3" for r in rows.values()), rows
    gbn, sr = rows[("go-back-n", 5.0)], rows[("selective-repeat", 5.0)]
    for clean in (rows[("go-back-n", 0.0)], rows[("selective-repeat", 0.0)]):
        assert int(clean["messages"]) > 0, clean
        # nothing resent on a clean link, unless the machine lost a frame before a pipeline (named): on
        # 2026-11-28 one frame lost at spine2 cost go-back-N a NAK and 217 packets resent
        assert int(clean["retransmitted"]) == 0 or clean["lost_before_pipeline"] or not faithful(clean), clean
    # A protocol outcome, asserted faithful or not: selective repeat resends a lost resend as soon as a
    # later packet is SACKed, so it waits out no timeout (x3: 2.10 against go-back-N's 1.17 Mbit/s; undilated
    # 4.93-5.56 against 2.31-2.73 in two runs); before that rule, timeouts chained on a loaded machine and it
    # once fell to 1.57 against 2.10 (CI)
    assert float(sr["goodput_mbps"]) > float(gbn["goodput_mbps"]), (sr, gbn)
    assert int(sr["retransmitted"]) < int(gbn["retransmitted"]) / 2, (sr, gbn)
    assert (out / "loss" / "goodput_vs_loss.png").stat().st_size > 10_000
    spray = {r["case"]: r for r in csv.DictReader(open(out / "spray" / "summary.csv"))}
    gbn, rob = spray["go-back-n"], spray["go-back-n-reorder"]
    assert int(gbn["retransmitted"]) > 0 and int(gbn["out_of_order_at_transport"]) > 0, gbn
    assert int(rob["held_by_reorder_buffer"]) > 0, rob
    # The buffer must give up only on real losses (nothing late), and then the transport resends only for
    # those. How many real losses there are is the machine's where a case was not faithful (a CI run
    # undilated: the buffer gave up on 33 gaps, none of whose packets came later, and go-back-N resent 978
    # for them against 3626 without the buffer; another 2404 against 3651), so that count is judged only on
    # faithful cases (x3: nothing declared lost, nothing resent, in two runs).
    assert int(rob["reorder_late"]) == 0, rob
    if faithful(rob) and faithful(gbn):
        if int(rob["reorder_declared_lost"]) == 0:
            assert int(rob["retransmitted"]) == 0, rob
        else:
            assert int(rob["retransmitted"]) < int(gbn["retransmitted"]) / 2, (rob, gbn)
    assert float(rob["goodput_mbps"]) > float(gbn["goodput_mbps"]), (rob, gbn)


def test_short_messages_among_long_flows_and_flows_joining_and_leaving(tmp_path):
    """Phase mix: Poisson short messages beside two long flows, lossless
    class: the short messages complete, their slowdown is measured against
    the fabric's least round trip (never below it by more than a packet's
    time), per size. Phase converge: the six joins and leaves are found, each
    with its flow count; HPCC keeps the link busy throughout, HPCC and Swift
    resend nothing; some event settles. Both phases with HPCC and Swift:
    DCQCN's and TIMELY's cases run in `make experiments` (their converge
    cases were violated in every CI run on record, so nothing but the events
    was judged of them; every algorithm holds an incast in
    test_each_congestion_control_holds_an_incast)."""
    out = tmp_path / "rdma"
    proc = subprocess.run([sys.executable, "-m", "experiments.rdma", "--phases", "mix", "converge", "--fabrics", "pfc",
                           "--ccs", *MIX_CONVERGE_CCS, "--duration", "6", "--out", str(out)], cwd=REPO,
                          capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    mix = {r["cc"]: r for r in csv.DictReader(open(out / "mix" / "summary.csv"))}
    assert set(mix) == set(MIX_CONVERGE_CCS)
    for cc, r in mix.items():
        assert int(r["short_messages"]) >= 50 and int(r["short_completed"]) > 0, r
        assert 0.8 <= float(r["slowdown_p50"]) <= float(r["slowdown_p99"]), r
        assert float(r["slowdown_16pkt_p50"]) > 0 and float(r["slowdown_4pkt_p50"]) > 0, r
        assert float(r["long_goodput_mbps"]) > 0, r
        rows = list(csv.DictReader(open(out / "mix" / f"{cc}-pfc" / "slowdowns.csv")))
        assert len(rows) == int(r["short_completed"]), cc
        if not faithful(r):
            continue
        assert int(r["short_completed"]) >= 0.9 * int(r["short_messages"]), r
        # the link is used; busy for HPCC (TIMELY's long flows used 0.27-0.61 of it over runs, DCQCN's
        # 0.33-0.62: their losses before the pipeline and timeouts, docs/rdma.md). Swift resends nothing,
        # but its absolute delay target slows it where the machine is loaded: 0.745 and 0.992 in runs by
        # hand, 0.527 in a CI run of 2026-11-27 whose minimum RTT was 3.7-4.3 ms (2.5-4.0 by hand), with no
        # drop, no pause and nothing resent
        assert float(r["utilisation"]) > (0.6 if cc == "hpcc" else 0.15), r
        if cc in ("hpcc", "swift"):
            assert_resent_nothing(r)
    assert (out / "mix" / "slowdown_cdf.png").stat().st_size > 10_000
    converge = {r["cc"]: r for r in csv.DictReader(open(out / "converge" / "summary.csv"))}
    events = list(csv.DictReader(open(out / "converge" / "events.csv")))
    assert set(converge) == set(MIX_CONVERGE_CCS)
    for cc in MIX_CONVERGE_CCS:
        mine = [e for e in events if e["cc"] == cc]
        assert [(e["event"], int(e["flows"])) for e in mine] == [("join", 2), ("join", 3), ("join", 4),
                                                                ("leave", 3), ("leave", 2), ("leave", 1)], mine
        assert all(0 <= float(e["utilisation"]) <= 1.2 and 0 <= float(e["jain"]) <= 1 for e in mine), mine
        assert (out / "converge" / f"{cc}-pfc" / "rates.png").stat().st_size > 10_000
        if not faithful(converge[cc]):
            continue
        # Every window between events delivers something (Jain 0: none did). (DCQCN and TIMELY, in `make
        # experiments`, dip with PFC down to nothing for most of an interval when their losses before the
        # pipeline stall every flow on go-back-N timeouts: CI rehearsals of 2026-11-27 and 28.)
        assert all(float(e["jain"]) > 0 for e in mine), mine
        if cc == "hpcc":   # it holds the link through joins and leaves (Swift did in CI, 0.76-0.99, and by hand
            # down to 0.59: with its absolute delay target, not asserted; it resends nothing, below)
            assert all(float(e["utilisation"]) > 0.5 for e in mine), mine
        assert_resent_nothing(converge[cc])
    assert any(e["converged_after_s"] != "" for e in events), "no algorithm settled after any event"
