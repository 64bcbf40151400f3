"""Routing around failures (Topology.routes with Failures) and reading link
health from the heartbeat registers (control/recovery.link_health) with a
stand-in for BMv2's Thrift server."""
import pytest

from features.failover.rerouting import link_health
from control.topology import Failures
from features import load_topology

LS = load_topology("topologies/leaf-spine.yaml")
FT = load_topology("topologies/fat-tree-k4.yaml")


def hops(topo, switch, failed=None):
    return {r.prefix: sorted(h.port for h in r.next_hops) for r in topo.routes(failed)[switch]}


def test_no_failure_is_the_topologys_own_routes():
    assert LS.routes(Failures()) == LS.routes()


def test_a_failed_link_leaves_the_other_spine():
    failed = Failures(links=frozenset({frozenset(("leaf1", "spine1"))}))
    to_spine2 = next(p.number for p in LS.switches["leaf1"].ports.values() if p.peer == "spine2")
    remote = [p for p, ports in hops(LS, "leaf1").items() if len(ports) == 2]
    assert remote and all(hops(LS, "leaf1", failed)[p] == [to_spine2] for p in remote)
    # spine1 still reaches leaf1's hosts? only through leaf2 -> spine2 -> leaf1: 3 hops, one path
    assert all(len(v) == 1 for v in hops(LS, "spine1", failed).values())


def test_a_failed_switch_gets_no_routes_and_nobody_routes_through_it():
    failed = Failures(switches=frozenset({"spine2"}))
    assert LS.routes(failed)["spine2"] == []
    to_spine1 = next(p.number for p in LS.switches["leaf1"].ports.values() if p.peer == "spine1")
    assert {tuple(v) for p, v in hops(LS, "leaf1", failed).items() if len(hops(LS, "leaf1")[p]) == 2} == {(to_spine1,)}


def test_fat_tree_loses_one_core_of_four():
    core = sorted(s for s, sw in FT.switches.items() if sw.role == "core")[0]
    failed = Failures(switches=frozenset({core}))
    before = max(len(v) for sw in FT.switches for v in hops(FT, sw).values())
    after = [len(v) for sw in FT.switches if sw != core for v in hops(FT, sw, failed).values()]
    assert before == 2 and min(after) >= 1 and all(v for v in after)


class FakeThrift:
    def __init__(self, now, heard):
        self.now, self.heard = now, heard

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def now_us(self):
        return self.now

    def register_read(self, name):
        assert name == "port_heard"
        return [self.heard.get(p, 0) for p in range(512)]


def test_link_health_from_heartbeat_registers():
    now = 10_000_000
    port = {s: {p.peer: n for n, p in LS.switches[s].ports.items()} for s in LS.switches}
    fresh = {s: {n: now - 30_000 for n in LS.switches[s].ports} for s in LS.switches}
    fresh["leaf1"][port["leaf1"]["spine2"]] = now - 400_000     # leaf1 has not heard spine2 for 400 ms

    def thrift_of(s):
        if s == "spine1":
            raise ConnectionRefusedError("dead")
        return FakeThrift(now, fresh[s])

    links, switches = link_health(LS, 100, thrift_of)
    assert switches == {"spine1"}
    assert links == {frozenset(("leaf1", "spine2"))}


def test_ports_never_heard_are_not_dead():
    never = {s: {} for s in LS.switches}
    links, switches = link_health(LS, 100, lambda s: FakeThrift(5_000_000, never[s]))
    assert links == set() and switches == set()


def test_thrift_sessions_are_kept_and_replaced_when_they_fail():
    from features.failover.rerouting import ThriftSessions
    opened = []

    class Session(FakeThrift):
        alive = True
        closed = False

        def now_us(self):
            if not self.alive:
                raise ConnectionResetError("the switch restarted")
            return self.now

        def close(self):
            self.closed = True

    def opener(s):
        if s == "spine1":
            raise ConnectionRefusedError("dead")
        opened.append(Session(1_000_000, {}))
        return opened[-1]

    sessions = ThriftSessions(LS, opener=opener)
    with sessions("leaf1") as a:
        pass
    with sessions("leaf1") as b:
        assert b is a and not a.closed, "kept from one poll to the next"
    a.alive = False
    with sessions("leaf1") as c:
        assert c is not a and a.closed, "a session that fails its check is replaced"
    with pytest.raises(KeyError):
        with sessions("leaf1") as d:
            raise KeyError("port_heard")     # e.g. opened before the restarted switch had its pipeline
    assert d.closed and "leaf1" not in sessions.open, "a session whose use failed is dropped"
    with pytest.raises(ConnectionRefusedError):
        sessions("spine1")
    assert link_health(LS, 100, sessions)[1] == {"spine1"}
    sessions.close()
    assert all(s.closed for s in opened)
