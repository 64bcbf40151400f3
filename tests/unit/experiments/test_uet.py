"""experiments/uet.py's allreduce phase, without a network: the fabric it
builds, the collision it arranges for RoCE, what the budget counts."""
import pytest

from control.path_assignment import default_sport
from emulator.dilation import Dilation, DilationError
from experiments.uet import COMPETING, HEADER_QUEUE, RING_RANKS, colliding_qp, ring_demand, ring_ideal_s, \
    ring_topology, spread
from features.trimming import SECTION as TRIMMING
from hostagent.collectives.communicator import open_communicator
from hostagent.collectives.paths import PathModel


def test_the_ring_fabric_trims_every_switch_port_and_keeps_a_lossless_class():
    topo, raw = ring_topology(Dilation(1.0), trim_threshold=12)
    ports = {(sw.name, port) for sw in topo.switches.values() for port in sw.ports}
    trimmed = topo.features[TRIMMING]
    assert {(sw, port) for sw, port, _queue in trimmed} == ports
    assert {(p.threshold, p.header_queue) for p in trimmed.values()} == {(12, HEADER_QUEUE)}
    assert raw["lossless"]["classes"][0]["lossless"] is True
    assert all(link.bandwidth_mbps == 10.0 for link in topo.links)


def test_dilation_slows_the_ring_fabrics_links():
    topo, _ = ring_topology(Dilation(4.0))
    assert {link.bandwidth_mbps for link in topo.links} == {2.5}


def test_the_competing_roce_flow_takes_the_rings_first_hops_way():
    topo, _ = ring_topology(Dilation(1.0))
    model = PathModel(topo)
    qp = colliding_qp(model, topo)
    ip = {h: topo.hosts[h].ip for h in (*RING_RANKS, *COMPETING)}
    ring = model.path(ip[RING_RANKS[0]], ip[RING_RANKS[1]], default_sport(0, 1, 0)).hops
    competing = model.path(ip[COMPETING[0]], ip[COMPETING[1]], 0xC000 | qp).hops
    assert [sw for sw, _ in competing[:-1]] == [sw for sw, _ in ring[:-1]]
    assert competing[:-1] == ring[:-1], "the same egress ports up to the last edge switch: one queue shared"
    assert competing[-1] != ring[-1], "then each to its own host"


def test_the_budget_counts_every_ring_hop_and_the_competing_flow():
    topo, _ = ring_topology(Dilation(1.0))
    flows = ring_demand(topo)
    assert {(f.src, f.dst) for f in flows} == {("h1", "h5"), ("h5", "h9"), ("h9", "h13"), ("h13", "h1"), COMPETING}
    assert {f.pps for f in flows} == {833}
    slow, _ = ring_topology(Dilation(4.0))
    assert {f.pps for f in ring_demand(slow)} == {208}, "the dilated links' rate"


def test_a_communicator_refuses_a_dilation_below_one_before_it_opens_a_socket():
    with pytest.raises(DilationError, match="a dilation factor is a number >= 1"):
        open_communicator(0, ["10.0.1.1", "10.0.2.1"], "no-such-iface", "10.0.1.1", "0a:00:00:00:00:01",
                          "0a:00:00:00:00:02", dilation=0.5)


def test_the_rings_ideal_is_what_a_rank_sends_at_the_links_rate():
    # a ring of four: each rank sends 2 x 3/4 of 64 KB, 96 packets of 1 KB
    assert ring_ideal_s(4, 833) == pytest.approx(96 / 833)
    assert ring_ideal_s(4, 833 / 12) == pytest.approx(12 * 96 / 833), "dilated links: as much longer"


def test_a_cases_spread_comes_from_its_faithful_runs_or_says_none_was():
    def row(case, v, fidelity):
        return {"phase": "allreduce", "case": case, "allreduce_vs_ideal": v, "fidelity": fidelity}
    rows = [row("a", 1.0, "ok"), row("a", 9.0, "violated: cpu"), row("a", 3.0, "ok"),
            row("b", 5.0, "violated: cpu"), row("b", 7.0, "violated: input_path")]
    a, b = spread(rows)
    assert (a["faithful"], a["over"], a["allreduce_vs_ideal"]) == (2, "faithful runs", "2 [1, 3]")
    assert (b["faithful"], b["over"], b["allreduce_vs_ideal"]) == (0, "all runs, none faithful", "6 [5, 7]")
