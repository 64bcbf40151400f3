"""`fabric experiment topologies` end to end at small sizes: each phase
writes its CSV and PNG, and bad parameters are refused naming them (no
network: the phases are properties of graphs)."""
import csv

import pytest

from experiments import topologies


def test_the_collectives_phase_writes_a_row_per_case(tmp_path, capsys):
    assert topologies.main(["--phases", "collectives", "--ranks", "16", "--out", str(tmp_path)]) == 0
    rows = list(csv.DictReader(open(tmp_path / "collectives.csv")))
    cases = {(r["family"], r["order"]) for r in rows}
    # 16 ranks: fat tree k=4, Dragonfly p=2, Slim Fly q=3, a 4x4 torus (no 3D torus of 16 routers)
    assert cases == {("fat tree", "host order"), ("fat tree", "random"), ("dragonfly", "host order"),
                     ("dragonfly", "random"), ("slim fly", "host order"), ("slim fly", "random"),
                     ("torus 2D", "host order"), ("torus 2D", "neighbours"), ("torus 2D", "random")}
    assert len(rows) == 3 * len(cases), "ring, halving-doubling and all-to-all for each"
    assert all(float(r["slowdown"]) >= 1.0 and r["ranks"] == "16" for r in rows)
    assert (tmp_path / "collectives.png").stat().st_size > 10_000
    assert "[collectives 9/9]" in capsys.readouterr().out


@pytest.mark.parametrize("ranks", ["24", "8"])
def test_ranks_must_be_powers_of_two_of_at_least_16(tmp_path, ranks, capsys):
    with pytest.raises(SystemExit):
        topologies.main(["--phases", "collectives", "--ranks", ranks, "--out", str(tmp_path)])
    assert "--ranks must be powers of two of at least 16" in capsys.readouterr().err


def test_the_costs_and_throughput_phases_write_their_files(tmp_path):
    assert topologies.main(["--phases", "costs", "throughput", "--max-hosts", "130", "--targets", "100",
                            "--dragonfly-p", "1", "2", "--uniform-max-hosts", "30", "--out", str(tmp_path)]) == 0
    equal = list(csv.DictReader(open(tmp_path / "costs_at_equal_hosts.csv")))
    assert {r["family"] for r in equal} == {"fat tree", "torus 2D", "torus 3D"}, \
        "no Dragonfly (72, then 342 hosts) or Slim Fly (54, then 200) has 100 to 130 hosts"
    assert all(int(r["hosts"]) >= 100 for r in equal)
    rows = list(csv.DictReader(open(tmp_path / "throughput.csv")))
    assert {(r["family"], r["pattern"]) for r in rows} >= {("dragonfly", "uniform"), ("dragonfly", "group shift")}
    for name in ("costs.png", "throughput.png"):
        assert (tmp_path / name).stat().st_size > 10_000, name
