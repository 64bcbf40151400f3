"""The collectives experiment's least-loaded phase, its parts that need no
fabric: the slowed spine links, the two ranks' channels on the two spines,
the competing flows' queue pairs on spine1, the byte share and the figure.
(The phase itself runs on BMv2: `fabric experiment collectives --phases
least-loaded`; its results are in docs/collectives.md.)"""
from __future__ import annotations

from experiments import collectives as exp
from hostagent.collectives.paths import PathModel
from hostagent.ecn.roce import flow_sport


def test_the_phase_is_selectable():
    assert "least-loaded" in exp.PHASES


def test_the_spines_links_are_slowed_and_the_channels_take_both_spines(tmp_path):
    topo, path = exp.least_loaded_topology(tmp_path)
    assert path.exists()
    rates = {frozenset((sw.name, p.peer)): p.link.bandwidth_mbps for sw in topo.switches.values()
             for p in sw.ports.values()}
    assert all(rate == exp.LL_SPINE_MBPS for pair, rate in rates.items() if pair & set(exp.SPINES))
    assert all(rate == 100.0 for pair, rate in rates.items() if not pair & set(exp.SPINES))
    model = PathModel(topo)
    addresses = [topo.hosts[h].ip for h in exp.LL_RANKS]
    spines = exp.channel_spines(model, addresses, 2)
    assert [sorted(s) for s in spines] == [list(exp.SPINES)] * 2          # each rank: one channel a spine
    for src, dst in exp.LL_COMPETING:
        qp = exp.competing_qp(model, topo.hosts[src].ip, topo.hosts[dst].ip)
        path = model.path(topo.hosts[src].ip, topo.hosts[dst].ip, flow_sport(qp))
        assert exp.LOADED_SPINE in [sw for sw, _ in path.hops]
        other = exp.competing_qp(model, topo.hosts[src].ip, topo.hosts[dst].ip, spine="spine2")
        assert "spine2" in [sw for sw, _ in model.path(topo.hosts[src].ip, topo.hosts[dst].ip,
                                                       flow_sport(other)).hops]


def test_the_share_on_the_loaded_spine():
    spines = [["spine1", "spine2"], ["spine2", "spine1"]]
    assert exp.loaded_share([[100, 300], [200, 400]], spines) == round((100 + 400) / 1000, 3)
    assert exp.loaded_share([[0, 0], [0, 0]], spines) == 0.0


def test_the_figure(tmp_path):
    rows = [{"channel_choice": choice, "competing_flow": flow, "step_ms_median": 300.0, "allreduce_ms_median": 200.0,
             "spine1_channel_share": share}
            for flow in ("none", "500 pps each way on spine1") for choice, share in (("fixed", 0.5),
                                                                                      ("least-loaded", 0.3))]
    assert exp._plot_least_loaded(rows, tmp_path).stat().st_size > 0
