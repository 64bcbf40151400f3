"""The collectives experiment, shortened: data-parallel steps on the live
leaf-spine under three load-balancing modes and two all-reduce algorithms
(the ring, and the switch's); the ring against the switch's all-reduce at
one switch and over a tree; spraying with each retransmission mode; rail
placement; two jobs, with and without ECN; a link failing mid-step; a
ring laid on a torus' neighbours."""
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
    out = experiment(tmp_path, "--phases", "lb", "--modes", "ecmp", "path-aware", "spray", "--algorithms", "ring",
                     "in-network", "--steps", "3")
    assert (out / "lb" / "step_time.png").exists()
    rows = {(r["mode"], r["algorithm"]): r for r in csv.DictReader(open(out / "lb" / "summary.csv"))}
    # (path-aware has nothing to choose for the switch's packets: one source port per worker)
    assert set(rows) == {("ecmp", "ring"), ("path-aware", "ring"), ("spray", "ring"), ("ecmp", "in-network"),
                         ("spray", "in-network")}
    for r in rows.values():
        assert int(r["steps"]) == 3 and float(r["step_ms_median"]) >= 60.0      # at least the compute
        assert float(r["busbw_MBps_median"]) > 0
    assert 0.25 <= float(rows[("path-aware", "ring")]["spine1_share"]) <= 0.75  # both spines carry the job


def test_allreduce_phase_compares_the_ring_with_the_switch_at_one_switch_and_over_a_tree(tmp_path):
    out = experiment(tmp_path, "--phases", "allreduce", "--allreduce-topologies", "leaf-spine", "--allreduce-ranks",
                     "2", "--algorithms", "ring", "in-network", "--steps", "2")
    assert (out / "allreduce" / "allreduce.png").exists()
    rows = {r["algorithm"]: r for r in csv.DictReader(open(out / "allreduce" / "summary.csv"))}
    assert set(rows) == {"ring", "in-network (one switch)", "in-network (tree)"}
    for r in rows.values():
        assert int(r["ranks"]) == 2 and int(r["steps"]) == 2 and float(r["step_ms_median"]) >= 60.0
    (table,) = csv.DictReader(open(out / "allreduce" / "table.csv"))
    assert float(table["in-network (tree) / ring"]) > 0 and float(table["in-network (one switch) / ring"]) > 0


def test_spraying_with_selective_repeat_resends_less_than_go_back_n(tmp_path):
    out = experiment(tmp_path, "--phases", "transport", "--modes", "spray", "--steps", "3")
    rows = {r["transport"]: r for r in csv.DictReader(open(out / "transport" / "summary.csv"))}
    assert set(rows) == {"go-back-n", "selective-repeat"}
    assert all(int(r["steps"]) == 3 for r in rows.values())
    # go-back-n resends everything after each packet the other spine overtook
    assert int(rows["selective-repeat"]["retransmitted"]) < int(rows["go-back-n"]["retransmitted"])


def test_a_link_failing_mid_step_stalls_the_job_without_failover(tmp_path):
    out = experiment(tmp_path, "--phases", "failure", "--protections", "none", "data plane", "--steps", "6",
                     "--fail-after", "1.0")
    rows = {r["protection"]: r for r in csv.DictReader(open(out / "failure" / "summary.csv"))}
    none, protected = rows["none"], rows["data plane"]
    assert none["stalled"].startswith("yes") and int(none["steps_completed"]) < 6, none
    assert protected["stalled"] == "no" and int(protected["steps_completed"]) == 6, protected
    assert protected["failure_step"] != "", protected


def test_rail_aware_placement_keeps_the_ring_off_the_spines(tmp_path):
    out = experiment(tmp_path, "--phases", "placement", "--steps", "2")
    rows = {r["placement"]: r for r in csv.DictReader(open(out / "placement" / "summary.csv"))}
    aware, naive = rows["rail-aware"], rows["host-major"]
    assert (int(aware["ring_hops_across_rails"]), int(naive["ring_hops_across_rails"])) == (4, 16)
    assert int(aware["ranks"]) == int(naive["ranks"]) == 16
    assert int(aware["spine_packets"]) * 2 < int(naive["spine_packets"])      # a quarter of the hops cross


def test_a_ring_laid_on_the_torus_neighbours_crosses_two_switches_a_packet(tmp_path):
    """16 ranks on torus-4x4, ring all-reduce: along a ring of neighbours
    every packet (and ACK) crosses exactly two switches, as the flow model
    says (one link a ring hop, no link above its share); in a random order
    more. (The fat tree's cases run in `make experiments`.)"""
    out = experiment(tmp_path, "--phases", "torus", "--torus-topologies", "torus-4x4", "--steps", "2")
    rows = {r["order"]: r for r in csv.DictReader(open(out / "torus" / "summary.csv"))}
    mapped, shuffled = rows["neighbours"], rows["random"]
    assert int(mapped["steps"]) == int(shuffled["steps"]) == 2 and int(mapped["ranks"]) == 16
    assert float(mapped["switches_per_packet"]) == 2.0 and float(mapped["model_mean_links"]) == 1.0
    assert float(mapped["model_max_link_load"]) == 1.0
    assert float(shuffled["switches_per_packet"]) > 2.5 and float(shuffled["model_mean_links"]) > 1.5
    assert (out / "torus" / "torus.png").stat().st_size > 10_000


def test_two_jobs_share_the_fabric(tmp_path):
    out = experiment(tmp_path, "--phases", "jobs", "--steps", "2")
    rows = {r["case"]: r for r in csv.DictReader(open(out / "jobs" / "summary.csv"))}
    assert set(rows) == {"alone-job0", "shared-job0", "shared-job1", "shared-ecn-job0", "shared-ecn-job1"}
    assert all(int(r["steps"]) == 2 and float(r["busbw_MBps_median"]) > 0 for r in rows.values())


def test_path_aware_channels_spread_over_the_fat_trees_cores(tmp_path):
    out = experiment(tmp_path, "--phases", "topologies", "--topologies", "fat-tree-k4", "--modes", "path-aware",
                     "--algorithms", "ring", "--steps", "2")
    (row,) = list(csv.DictReader(open(out / "topologies" / "summary.csv")))
    assert (row["topology"], row["mode"], int(row["steps"]), int(row["top_switches"])) == ("fat-tree-k4",
                                                                                            "path-aware", 2, 4)
    assert int(row["top_tier_packets"]) > 0
    # a pair's two channels cross two different cores: no core carries more than half
    assert float(row["busiest_top_share"]) <= 0.55, row
