"""The central routing experiment end to end at a small size (leaf-spine,
ring and halving-doubling, one channel): the CSV and PNG it writes, the
central assignment at the lower bound and never above ECMP's model, and
its flows split over channels as the Communicator's are."""
import csv

from control.path_assignment import ring_all_reduce_flows
from experiments import central_routing as exp
from hostagent.collectives.communicator import default_sport


def test_leaf_spine_end_to_end(tmp_path, capsys):
    assert exp.main(["--topologies", "leaf-spine", "--channels", "1", "--out", str(tmp_path), "--no-docs"]) == 0
    rows = list(csv.DictReader(open(tmp_path / "central_routing.csv")))
    assert [(r["topology"], r["collective"]) for r in rows] == [("leaf-spine", "ring"),
                                                                ("leaf-spine", "halving_doubling")]
    for r in rows:
        assert float(r["central_MB"]) == float(r["bound_MB"])
        assert float(r["central_MB"]) <= min(float(r["ecmp_MB"]), float(r["path_aware_MB"]))
        assert float(r["central_failed_MB"]) >= float(r["bound_failed_MB"]) - 1e-3
    assert (tmp_path / "central_routing.png").stat().st_size > 0
    assert "wrote" in capsys.readouterr().out


def test_channels_split_each_pair():
    addresses = ["10.0.1.1", "10.0.2.1", "10.0.3.1"]
    flows = exp.channel_flows("ring", addresses, 1000, 3, default_sport)
    assert len(flows) == 9
    pairs = ring_all_reduce_flows(addresses, 1000)
    for i, pair in enumerate(pairs):
        mine = flows[3 * i:3 * i + 3]
        assert sum(f.bytes for f in mine) == pair.bytes
        assert [f.sport for f in mine] == [default_sport(i, (i + 1) % 3, c) for c in range(3)]
