"""PTF tests of data-plane failover (p4src/include/failover.p4): a member
whose port stopped hearing heartbeats is replaced by its slot's backup, so
only its flows move and the others stay; the flows come back when the port
is heard again; with no live member left packets are dropped with their own
reason, never sent to a dead port; a port never heard from is not
monitored; with failover off nothing changes.

Group 1 routes 10.0.0.0/8 over ports 2, 3 and 4; packets enter on port 1.
Heartbeats are source-routed frames (features/failover/heartbeat.py) sent into a
member's port and routed out of port 1; path heartbeats also name the edge
switch they come from, and a path silent to one edge switch moves only the
flows to that switch's subnets.

Timing, independent of the machine's speed: the timeout is 1 s. A port (or
path) meant to be alive keeps hearing heartbeats while the flows are sent,
one round every HEARTBEAT_EVERY flow packets, as a real heartbeat period
would (a slow machine stretches a round, not the gap between heartbeats);
one meant to be dead has been silent for DEAD_AFTER_S = 1.5 timeouts before
any flow is sent.
"""
from __future__ import annotations

import time
from collections import Counter

from ptf_lib.base_test import HOST_MAC, SWITCH_MAC, P4RuntimeTest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from features.failover.data_plane import backups, empty_state, failover_state
from features.failover.heartbeat import HEARTBEAT_UDP_PORT, heartbeat_frame
from hostagent.sender import RawSender

IN_PORT = 1
MEMBERS = [2, 3, 4]
GROUP = 1
TIMEOUT_MS = 1000
DEAD_AFTER_S = 1.5
FLOWS = 96
HEARTBEAT_EVERY = 8          # flow packets between two heartbeat rounds to the live ports

# Heartbeats a test keeps sending: (ports, edge switch of a path heartbeat or None).
Alive = list[tuple[list[int], int | None]]


def flow_packet(sport: int, dst: str = "10.0.0.2") -> bytes:
    return bytes(Ether(dst=SWITCH_MAC, src=HOST_MAC) / IP(src="10.9.0.1", dst=dst)
                 / UDP(sport=sport, dport=4791) / (b"\0" * 32))


class FailoverTestBase(P4RuntimeTest):
    def setUp(self):
        super().setUp()
        self.dataplane.set_qlen(10_000)
        self.route_through_group("10.0.0.0/8", GROUP, MEMBERS)
        self.set_failover(True)

    edges: dict[str, int] = {}

    def set_failover(self, on: bool) -> None:
        self.with_feature(failover_state(self.p4info, {GROUP: self.slots}, TIMEOUT_MS, self.edges) if on
                          else empty_state(self.p4info))

    def heartbeat(self, ports, origin: int | None = None) -> None:
        """One heartbeat into each of `ports` (a path heartbeat from edge
        switch `origin` if given), routed out of port 1 (drained)."""
        self.send_heartbeats([(list(ports), origin)])
        got = self.drain_heartbeats()
        self.assertEqual(got, len(list(ports)), "every heartbeat is source-routed out of port 1")

    def send_heartbeats(self, alive: Alive) -> None:
        for ports, origin in alive:
            for port in ports:
                with RawSender(self.iface(port)) as tx:
                    tx.send(heartbeat_frame([IN_PORT], src_mac=HOST_MAC, dst_mac=SWITCH_MAC, src_ip="10.8.0.1",
                                            dst_ip="10.9.0.1", origin=origin))

    def drain_heartbeats(self) -> int:
        """Heartbeats that came out of port 1 (the capture also shows what we sent)."""
        return sum(1 for f in self.receive_all(IN_PORT, timeout=0.3)
                   if UDP in Ether(f) and Ether(f)[UDP].dport == HEARTBEAT_UDP_PORT)

    def assert_only_moved_off(self, dead: int, before: dict[int, int], after: dict[int, int]) -> None:
        """Every flow still delivered; those on port `dead` now on another
        member, every other flow where it was."""
        self.assertEqual(len(after), FLOWS, "nothing is lost: the dead member's flows take backups")
        for flow, port in before.items():
            if port == dead:
                self.assertIn(after[flow], set(MEMBERS) - {dead})
            else:
                self.assertEqual(after[flow], port, f"flow {flow} on a live member moved")

    def flow_ports(self, dst: str = "10.0.0.2", alive: Alive = ()) -> dict[int, int]:
        """Egress port of each of FLOWS flows to `dst` (one packet each; a
        drop has none), the `alive` heartbeats sent before the first packet
        and every HEARTBEAT_EVERY packets."""
        out = {}
        with RawSender(self.iface(IN_PORT)) as tx:
            for i in range(FLOWS):
                if i % HEARTBEAT_EVERY == 0:
                    self.send_heartbeats(alive)
                tx.send(flow_packet(40000 + i, dst))
                time.sleep(0.002)
        by_port = self.receive_by_port(MEMBERS, timeout=0.5)
        for port, frames in by_port.items():
            for f in frames:
                pkt = Ether(f)
                if UDP in pkt and pkt[UDP].dport == 4791:   # (the capture also shows heartbeats we sent)
                    out[pkt[UDP].sport - 40000] = port
        if alive:
            self.drain_heartbeats()
        return out


class OnlyTheDeadMembersFlowsMoveTest(FailoverTestBase):
    def runTest(self):
        self.heartbeat(MEMBERS)
        before = self.flow_ports(alive=[(MEMBERS, None)])
        self.assertEqual(len(before), FLOWS)
        self.assertEqual(set(before.values()), set(MEMBERS), "every member carries flows")
        time.sleep(DEAD_AFTER_S)
        self.heartbeat([3, 4])                   # port 2 stays silent: dead
        after = self.flow_ports(alive=[([3, 4], None)])
        self.assert_only_moved_off(2, before, after)
        # each dead slot's flows went to its precomputed backup
        backup = backups(self.slots)
        moved = Counter(after[f] for f, p in before.items() if p == 2)
        self.assertTrue(set(moved) <= {backup[s].port for s, hop in enumerate(self.slots) if hop.port == 2})


class ASilentPathMovesOnlyThatDestinationsFlowsTest(FailoverTestBase):
    """Every port keeps hearing its neighbour, but port 2 stops hearing path
    heartbeats from edge switch 5 (a link behind the neighbour failed):
    flows to edge 5's subnet on port 2 take their backups, flows to edge 6
    (whose paths were never heard: unmonitored) stay, and the moved flows
    come back when the path is heard again."""
    edges = {"10.0.1.0/24": 5, "10.0.2.0/24": 6}

    def runTest(self):
        everything: Alive = [(MEMBERS, None), (MEMBERS, 5)]
        self.heartbeat(MEMBERS)
        self.heartbeat(MEMBERS, origin=5)
        before = self.flow_ports("10.0.1.2", alive=everything)
        before_other = self.flow_ports("10.0.2.2", alive=everything)
        self.assertIn(2, set(before.values()))
        time.sleep(DEAD_AFTER_S)
        self.heartbeat(MEMBERS)                  # every neighbour is heard...
        self.heartbeat([3, 4], origin=5)         # ...but edge 5 no longer through port 2
        path_down: Alive = [(MEMBERS, None), ([3, 4], 5)]
        self.assert_only_moved_off(2, before, self.flow_ports("10.0.1.2", alive=path_down))
        self.assertEqual(self.flow_ports("10.0.2.2", alive=path_down), before_other,
                         "another destination's flows stay")
        self.heartbeat(MEMBERS, origin=5)
        self.assertEqual(self.flow_ports("10.0.1.2", alive=everything), before, "heard again: the flows come back")


class FlowsComeBackWhenThePortIsHeardAgainTest(FailoverTestBase):
    def runTest(self):
        self.heartbeat(MEMBERS)
        before = self.flow_ports(alive=[(MEMBERS, None)])
        time.sleep(DEAD_AFTER_S)
        self.heartbeat([3, 4])
        self.assertNotIn(2, set(self.flow_ports(alive=[([3, 4], None)]).values()))
        self.heartbeat(MEMBERS)
        self.assertEqual(self.flow_ports(alive=[(MEMBERS, None)]), before)


class NoLiveMemberDropsWithItsReasonTest(FailoverTestBase):
    def runTest(self):
        self.heartbeat(MEMBERS)
        time.sleep(DEAD_AFTER_S)
        self.heartbeat([4])                      # 2 and 3 dead: slots of 2 or 3 whose backup is dead too drop
        dropped_before = self.drops("NO_LIVE_MEMBER")
        after = self.flow_ports(alive=[([4], None)])
        lost = FLOWS - len(after)
        self.assertEqual(set(after.values()), {4}, f"nothing is sent to a dead port: {after} slots {self.slots}")
        self.assertEqual(self.drops("NO_LIVE_MEMBER") - dropped_before, lost)
        time.sleep(DEAD_AFTER_S)                 # now every member is dead
        before_all = self.drops("NO_LIVE_MEMBER")
        self.assertEqual(self.flow_ports(), {})
        self.assertEqual(self.drops("NO_LIVE_MEMBER") - before_all, FLOWS)


class PortsNeverHeardAreNotMonitoredTest(FailoverTestBase):
    def runTest(self):
        ports = self.flow_ports()                # no heartbeat ever: forwarding as usual
        self.assertEqual(len(ports), FLOWS)
        self.assertEqual(set(ports.values()), set(MEMBERS))


class FailoverOffChangesNothingTest(FailoverTestBase):
    def runTest(self):
        self.heartbeat(MEMBERS)
        before = self.flow_ports(alive=[(MEMBERS, None)])
        self.set_failover(False)
        time.sleep(DEAD_AFTER_S)                 # every port silent, but nobody watches
        self.assertEqual(self.flow_ports(), before)
        self.assertEqual(self.drops("NO_LIVE_MEMBER"), 0)
