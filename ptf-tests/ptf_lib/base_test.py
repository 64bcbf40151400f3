"""P4RuntimeTest: the base of every PTF test of this project.

setUp connects to the switch under test over P4Runtime and pushes the
pipeline (a fresh push also zeroes counters); tearDown deletes every entry
the test wrote. Helpers build entries through the same control-plane code as
the controller (control.p4info, control.forwarding), so the tests exercise
what the fabric really writes.

Test parameters (ptf --test-params, set by run_ptf.py): grpc_addr, device_id,
bmv2_json, p4info, thrift_port.
"""
from __future__ import annotations

from pathlib import Path

import ptf
import ptf.testutils as tu
from ptf.base_tests import BaseTest

from features.aggregation import GROUPS_PER_JOB, JOB_GROUP_BASE
from features.int_telemetry import REPORT_SESSION
from features.lossless import SESSION_BASE as PFC_SESSION_BASE
from control.forwarding import LPM_TABLE, NEXT_HOP_TABLE, assign_slots, group_entries, route_entry
from control.p4constants import drop_reasons
from control.p4info import P4Info
from control.switch import Pipeline, SwitchConnection
from control.sync import SwitchState, reconcile
from control.topology import NextHop

SWITCH_MAC = "0a:00:00:00:01:00"   # source MAC of frames sent to the switch
HOST_MAC = "0a:00:01:00:00:99"


def port_mac(port: int) -> str:
    return "0a:00:00:00:01:%02x" % port


def neighbour_mac(port: int) -> str:
    return "0a:00:02:00:00:%02x" % port


def next_hop(port: int) -> NextHop:
    """The next hop behind a switch port: rewrite to that port's MAC pair."""
    return NextHop(port, port_mac(port), neighbour_mac(port), f"port{port}")


class P4RuntimeTest(BaseTest):
    #: ports the runner attached (PTF port number == BMv2 port number)
    ports: list[int] = []

    def setUp(self):
        BaseTest.setUp(self)
        params = tu.test_params_get()
        self.dataplane = ptf.dataplane_instance
        self.dataplane.flush()
        self.ports = sorted(p for (_dev, p) in self.dataplane.ports)
        self.pipeline = Pipeline(Path(params["bmv2_json"]), Path(params["p4info"]))
        self.p4info = P4Info(self.pipeline.p4info())
        self.thrift_port = int(params["thrift_port"])
        self.sw = SwitchConnection("switch-under-test", params["grpc_addr"], int(params["device_id"]))
        self.sw.push_pipeline(self.pipeline, force=True)
        self.state = self.empty_state()

    def tearDown(self):
        try:
            reconcile(self.sw, self.empty_state())  # delete everything the test wrote
        finally:
            self.sw.close()
            BaseTest.tearDown(self)

    # -- entries ---------------------------------------------------------------

    def empty_state(self) -> SwitchState:
        info = self.p4info.proto
        return SwitchState(managed_tables={t.preamble.id for t in info.tables},
                           managed_profiles={p.preamble.id for p in info.action_profiles},
                           managed_clone_sessions={REPORT_SESSION, *(PFC_SESSION_BASE + p for p in range(1, 9))},
                           managed_multicast_groups=set(range(JOB_GROUP_BASE, JOB_GROUP_BASE + 16 * GROUPS_PER_JOB)))

    def apply(self) -> None:
        """Make the switch hold exactly self.state."""
        reconcile(self.sw, self.state)

    def add_route(self, prefix: str, next_id: int) -> None:
        """`prefix` to ECMP group `next_id` (see set_ecmp_group / add_next_hop)."""
        self.state.table_entries.append(self.p4info.table_entry(
            LPM_TABLE, {"hdr.ipv4.dst_addr": prefix}, action="set_next_id", params={"next_id": next_id}))

    def add_direct_route(self, prefix: str, port: int) -> None:
        """`prefix` straight to the next hop behind `port` (no group)."""
        self.state.table_entries.append(route_entry(self.p4info, prefix, next_hop(port)))

    def add_next_hop(self, next_id: int, port: int) -> None:
        """Group `next_id` with one next hop: every slot routes out of `port`."""
        self.set_ecmp_group(next_id, [port])

    def set_ecmp_group(self, next_id: int, ports: list[int], previous: list[NextHop] | None = None) -> list[NextHop]:
        """(Re)write ECMP group `next_id` over `ports`, resiliently if
        `previous` (the slot assignment it had) is given. Returns the new assignment."""
        table_id = self.p4info.table(NEXT_HOP_TABLE).preamble.id
        next_id_field = next(f.id for f in self.p4info.table(NEXT_HOP_TABLE).match_fields if f.name == "meta.next_id")
        s = self.state
        s.table_entries = [e for e in s.table_entries
                           if not (e.table_id == table_id and any(
                               m.field_id == next_id_field and int.from_bytes(m.exact.value, "big") == next_id
                               for m in e.match))]
        slots = assign_slots([next_hop(p) for p in ports], previous)
        s.table_entries += group_entries(self.p4info, next_id, slots)
        return slots

    def route_all_to(self, port: int) -> None:
        """Every test address (10.0.0.0/8) out of `port`, written now;
        self.forwarding is the routing (kept aside for with_feature)."""
        self.add_route("10.0.0.0/8", 1)
        self.add_next_hop(1, port)
        self.forwarding = list(self.state.table_entries)
        self.apply()

    def route_through_group(self, prefix: str, next_id: int, ports: list[int]) -> None:
        """`prefix` to ECMP group `next_id` over `ports`: self.slots is the
        slot assignment, self.forwarding the routing entries (kept aside for
        with_feature)."""
        self.add_route(prefix, next_id)
        self.slots = self.set_ecmp_group(next_id, ports)
        self.forwarding = list(self.state.table_entries)

    def with_feature(self, feature: SwitchState) -> None:
        """Make the switch hold the routing plus exactly `feature`'s entries
        in the tables it manages."""
        self.state.table_entries = [e for e in self.forwarding if e.table_id not in feature.managed_tables]
        self.state.table_entries += feature.table_entries
        self.apply()

    # -- counters --------------------------------------------------------------

    def counter(self, name: str, index: int) -> tuple[int, int]:
        """(packets, bytes) of one counter cell."""
        cells = self.sw.counter(self.p4info.counter_entry(name, index))
        return cells.get(index, (0, 0))

    def drops(self, reason: str) -> int:
        return self.counter("drop_counter", drop_reasons()[reason])[0]

    # -- data plane ------------------------------------------------------------

    def iface(self, port: int) -> str:
        """The Linux interface PTF uses for `port` (for raw-socket senders)."""
        return self.dataplane.ports[(0, port)].interface_name

    def receive_all(self, port: int, timeout: float = 1.0) -> list[bytes]:
        """Every frame that arrives on `port` until none came for `timeout` s."""
        frames = []
        while True:
            result = tu.dp_poll(self, device_number=0, port_number=port, timeout=timeout)
            if not isinstance(result, self.dataplane.PollSuccess):
                return frames
            frames.append(bytes(result.packet))

    def receive_by_port(self, ports, expected: int | None = None, timeout: float = 1.0,
                        settle: float = 0.3) -> dict[int, list[bytes]]:
        """Every frame that leaves any of `ports`, by port, in one wait for
        them all (not `timeout` a port): until none came for `timeout` s, or,
        once `expected` frames have come, none more for `settle` s (a
        duplicate or a stray would have come by then). Frames on other ports
        are read and left out."""
        frames: dict[int, list[bytes]] = {p: [] for p in ports}
        n = 0
        while True:
            wait = settle if expected is not None and n >= expected else timeout
            result = tu.dp_poll(self, device_number=0, port_number=None, timeout=wait)
            if not isinstance(result, self.dataplane.PollSuccess):
                return frames
            if result.port in frames:
                frames[result.port].append(bytes(result.packet))
                n += 1
