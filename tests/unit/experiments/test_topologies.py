"""`fabric experiment topologies`, phase collectives, end to end at 16
ranks: its CSV and PNG, and bad rank counts refused naming the option.
(The costs and throughput phases: tests/unit/control/test_topology_costs.py.)"""
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

