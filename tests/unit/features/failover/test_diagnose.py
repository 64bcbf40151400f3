"""Fault localisation (features/failover/diagnose.py) on synthetic counter snapshots
of leaf-spine: a lossy link, a dead link direction, a switch that does not
answer (and none answering: no network to diagnose), a hung switch, a switch
dropping for want of a route, and a healthy network with nothing to report."""
import argparse
import contextlib

from features.failover import diagnose as diagnose_module
from features.failover.diagnose import Snapshot, diagnose, nothing_answers, switch_links
from features import load_topology

LS = load_topology("topologies/leaf-spine.yaml")


def healthy(per_link: int = 1000, base: int = 0) -> Snapshot:
    """Counters where every directed switch link carried per_link packets."""
    s = Snapshot(0.0)
    for sw in LS.switches:
        s.ingress[sw], s.egress[sw], s.drops[sw], s.backups[sw] = {}, {}, {}, 0
    for a, pa, b, pb in switch_links(LS):
        s.egress[a][pa] = base + per_link
        s.ingress[b][pb] = base + per_link
    return s


def port(a, b):
    return next(p.number for p in LS.switches[a].ports.values() if p.peer == b)


def test_links_are_every_directed_switch_link():
    links = switch_links(LS)
    assert len(links) == 8 and ("leaf1", port("leaf1", "spine2"), "spine2", port("spine2", "leaf1")) in links


def test_healthy_network_has_no_finding():
    assert diagnose(LS, healthy(base=0, per_link=0), healthy()) == []


def test_a_lossy_link_is_named_with_its_counts():
    after = healthy()
    after.ingress["spine2"][port("spine2", "leaf1")] -= 120          # 12% lost leaf1 -> spine2
    findings = diagnose(LS, healthy(per_link=0), after)
    top = findings[0]
    assert top.kind == "link" and top.name.startswith("leaf1:") and "->spine2:" in top.name
    assert "sent 1000" in top.evidence[0] and "received 880" in top.evidence[0] and "12.0% lost" in top.evidence[0]


def test_small_loss_on_a_big_link_outranks_big_loss_on_a_small_one():
    after = healthy()
    after.egress["leaf2"][port("leaf2", "spine1")] += 9000             # a busy direction...
    after.ingress["spine1"][port("spine1", "leaf2")] += 9000 - 500     # ...losing 5%
    after.ingress["leaf1"][port("leaf1", "spine1")] -= 30              # 3% of a quiet one
    findings = diagnose(LS, healthy(per_link=0), after)
    assert findings[0].name.startswith("leaf2:") and len(findings) == 2


def test_a_switch_that_does_not_answer_comes_first():
    after = healthy()
    after.ingress["spine1"] = after.egress["spine1"] = after.drops["spine1"] = None
    after.ingress["leaf1"][port("leaf1", "spine2")] -= 100             # noise elsewhere
    findings = diagnose(LS, healthy(per_link=0), after)
    assert (findings[0].kind, findings[0].name) == ("switch", "spine1")
    assert "does not answer" in findings[0].evidence[0]


def test_no_switch_answering_is_no_network_not_a_fault():
    one_down = healthy()
    one_down.ingress["spine1"] = None
    assert not nothing_answers(LS, diagnose(LS, healthy(per_link=0), one_down))
    silent = Snapshot(0.0)
    assert nothing_answers(LS, diagnose(LS, Snapshot(0.0), silent))


def test_fabric_diagnose_with_no_switch_answering_says_so_and_fails(monkeypatch, capsys):
    monkeypatch.setattr(diagnose_module, "FabricController", lambda topo: contextlib.nullcontext())
    monkeypatch.setattr(diagnose_module, "run", lambda ctl, interval: (diagnose(LS, Snapshot(0.0), Snapshot(0.0)), 2.0))
    assert diagnose_module.run_cli(argparse.Namespace(interval=2.0), LS) == 2
    err = capsys.readouterr().err
    assert "none of the 4 switches of leaf-spine answers P4Runtime" in err and "fabric run --topology leaf-spine" in err


def test_a_hung_switch_that_answers_but_counts_nothing_in():
    after = healthy()
    for p in LS.switches["spine2"].ports.values():
        after.ingress["spine2"][p.number] = 0
        after.egress["spine2"][p.number] = 0
    for leaf in ("leaf1", "leaf2"):
        after.ingress[leaf][port(leaf, "spine2")] = 0
    findings = diagnose(LS, healthy(per_link=0), after)
    assert (findings[0].kind, findings[0].name) == ("switch", "spine2")
    assert "counted none in" in " ".join(findings[0].evidence)


def test_drops_for_want_of_a_route_point_at_the_switch():
    after = healthy()
    after.drops["leaf2"] = {"NO_ROUTE": 400}
    findings = diagnose(LS, healthy(per_link=0), after)
    assert findings[0].name == "leaf2" and "NO_ROUTE" in findings[0].evidence[0]


def with_interface_rx(s: Snapshot) -> Snapshot:
    """The kernel's count of what each switch port's interface received: what its pipeline counted."""
    s.interface_rx = {sw: dict(ports) for sw, ports in s.ingress.items()}
    return s


def test_frames_lost_in_bmv2s_input_path_are_the_switchs_not_the_links():
    """The interface received all 1000 frames leaf1 sent, the pipeline
    counted 960: BMv2's input path lost 40 (an incast, a busy CPU), which no
    P4 counter sees. Named as the switch port's input, not as a lossy link."""
    after = with_interface_rx(healthy())
    after.ingress["spine2"][port("spine2", "leaf1")] -= 40
    findings = diagnose(LS, with_interface_rx(healthy(per_link=0)), after)
    assert [(f.kind, f.name) for f in findings] == [("input", f"spine2:{port('spine2', 'leaf1')}")]
    evidence = findings[0].evidence[0]
    assert "delivered 1000 frames" in evidence and "counted 960" in evidence and "4.0% lost" in evidence
    assert LS.switches["spine2"].ports[port("spine2", "leaf1")].iface in evidence


def test_with_the_kernels_counts_a_lossy_link_is_still_the_link():
    after = with_interface_rx(healthy())
    p = port("spine2", "leaf1")
    after.ingress["spine2"][p] -= 120
    after.interface_rx["spine2"][p] -= 120                                # never reached the interface
    findings = diagnose(LS, with_interface_rx(healthy(per_link=0)), after)
    assert [(f.kind, f.name.split("->")[1]) for f in findings] == [("link", f"spine2:{p}")]
    assert "interface received 880" in findings[0].evidence[0]
