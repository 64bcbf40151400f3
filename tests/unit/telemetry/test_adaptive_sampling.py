"""The adaptive sampling loop (telemetry/adaptive_sampling.py): which signs in
the reports raise a flow or a port to every packet, when it goes back, and
that HPCC's every-packet flows are left alone. Reports are built as the
collector decodes them; the apply function records what would be written."""
import socket
import threading
import time

import pytest

from features import int_telemetry as it
from features import topology_from_dict
from telemetry.adaptive_sampling import AdaptiveSampling, serving
from telemetry.synthetic import Flow, congestion_report as synthetic_congestion
from telemetry.decode import IndividualReport, InnerPacket, IntStack, ReportPacket
from wire.int_telemetry import HopMetadata

TOPO = {
    "name": "ls", "defaults": {"link": {"bandwidth_mbps": 100}},
    "switches": [{"name": "spine1"}, {"name": "leaf1"}, {"name": "leaf2"}],
    "hosts": [{"name": "h1"}, {"name": "h2"}, {"name": "h3"}],
    "links": [["h1", "leaf1"], ["h2", "leaf2"], ["h3", "leaf2"], ["leaf1", "spine1"], ["leaf2", "spine1"]],
}
SECTION = {"collector": "h3",
           "watchlist": [{"protocol": "udp", "dst_ports": 4791, "sample": 16},
                         {"protocol": "udp", "dst_ports": 4792, "to_host": True, "instructions": ["tx_bytes"]}],
           "adaptive": {"queue": 20, "ecn_marks": 2, "drops": 1, "quiet_ms": 1000, "max_flows": 2}}


class Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


@pytest.fixture
def fabric():
    topo = topology_from_dict({**TOPO, "int": SECTION}, "t.yaml")
    applied = []
    clock = Clock()
    loop = AdaptiveSampling(topo, topo.features["int"].adaptive, applied.append, clock=clock)
    return topo, loop, applied, clock


def node(topo, name):
    return topo.switches[name].device_id


def port_to(topo, switch, peer):
    return next(p.number for p in topo.switches[switch].ports.values() if p.peer == peer)


def inner(topo, src="h1", dst="h2", sport=49152, dport=4791, ecn=0, hops=None):
    stack = None if hops is None else IntStack(1, 1, 0, 0, 0, 2, 5, 0, 0, 0, 0, hops)
    return InnerPacket(topo.nic(src).ip, topo.nic(dst).ip, 17, sport, dport, 0, 100, stack, ecn=ecn)


def flow_report(topo, queue_at_spine=0, ecn=0, sport=49152, dport=4791, dst="h2"):
    """A sink (leaf2) report of a flow h1 -> dst through leaf1 and spine1."""
    hops = [HopMetadata(node_id=node(topo, "spine1"), egress_port=port_to(topo, "spine1", "leaf2"),
                        queue_occupancy=queue_at_spine),
            HopMetadata(node_id=node(topo, "leaf1"), egress_port=port_to(topo, "leaf1", "spine1"),
                        queue_occupancy=0)]
    sink = HopMetadata(egress_port=topo.nic(dst).switch_port, queue_occupancy=0)
    r = IndividualReport(1, 4, 0, 0, 1, 0, metadata=sink,
                         inner=inner(topo, dst=dst, sport=sport, dport=dport, ecn=ecn, hops=hops))
    return ReportPacket(0, 1, node(topo, "leaf2"), [r])


def congestion_report(topo, switch, port, queue, sport=49152):
    r = IndividualReport(1, 4, 0, 1, 1, 1, metadata=HopMetadata(egress_port=port, queue_occupancy=queue),
                         inner=inner(topo, sport=sport))
    return ReportPacket(0, 1, node(topo, switch), [r])


def drop_report(topo, switch, sport=49152):
    r = IndividualReport(1, 4, 1, 0, 0, 1, metadata=HopMetadata(drop_reason=2), inner=inner(topo, sport=sport))
    return ReportPacket(0, 1, node(topo, switch), [r])


def flow(topo, sport=49152, dport=4791, dst="h2"):
    return it.FlowKey(topo.nic("h1").ip, topo.nic(dst).ip, 17, sport, dport)


def test_quiet_reports_raise_nothing(fabric):
    topo, loop, applied, clock = fabric
    for _ in range(5):
        loop.observe(clock.t, b"", flow_report(topo, queue_at_spine=3))
    assert loop.step() is None and applied == []


def test_a_deep_queue_on_a_flows_path_raises_the_flow_at_its_first_switch_then_quiet_lowers_it(fabric):
    topo, loop, applied, clock = fabric
    loop.observe(clock.t, b"", flow_report(topo, queue_at_spine=25))
    change = loop.step()
    assert change is not None and change.raised == it.Raised(flows=frozenset({flow(topo)}))
    assert "queue 25" in change.why[f"flow {flow(topo)}"]
    clock.t += 0.9
    assert loop.step() is None                                  # still within the quiet period
    clock.t += 0.2
    assert loop.step().raised == it.Raised() and applied[-1] == it.Raised()


def test_a_congestion_report_raises_every_flow_last_seen_crossing_that_port(fabric):
    topo, loop, applied, clock = fabric
    loop.observe(clock.t, b"", flow_report(topo, sport=1000))            # two flows known to cross spine1 -> leaf2
    loop.observe(clock.t, b"", flow_report(topo, sport=1001, dst="h3"))
    loop.observe(clock.t, b"", flow_report(topo, sport=1002, dst="h3", dport=4792))   # HPCC's: left alone
    loop.observe(clock.t, b"", congestion_report(topo, "spine1", port_to(topo, "spine1", "leaf2"), 30, sport=1000))
    assert loop.step().raised.flows == {flow(topo, 1000), flow(topo, 1001, dst="h3")}


def test_more_hot_flows_than_max_flows_at_a_host_port_raise_the_port(fabric):
    topo, loop, applied, clock = fabric
    for sport in (1, 2, 3):
        loop.observe(clock.t, b"", flow_report(topo, queue_at_spine=40, sport=sport))
    raised = loop.step().raised
    assert raised == it.Raised(ports=frozenset({("leaf1", topo.nic("h1").switch_port)}))


def test_ecn_marks_need_their_count_within_the_quiet_period(fabric):
    topo, loop, applied, clock = fabric
    loop.observe(clock.t, b"", flow_report(topo, ecn=3))
    assert loop.step() is None                                 # one mark, two needed
    clock.t += 1.5
    loop.observe(clock.t, b"", flow_report(topo, ecn=3))
    assert loop.step() is None                                 # the first one is too old
    clock.t += 0.1
    loop.observe(clock.t, b"", flow_report(topo, ecn=3))
    assert loop.step().raised.flows == {flow(topo)}


def test_a_drop_report_raises_its_flow(fabric):
    topo, loop, applied, clock = fabric
    loop.observe(clock.t, b"", drop_report(topo, "spine1", sport=4242))
    change = loop.step()
    assert change.raised.flows == {flow(topo, 4242)} and "drop report from spine1" in change.why[f"flow {flow(topo, 4242)}"]


def test_flows_whose_rule_samples_every_packet_are_left_alone(fabric):
    topo, loop, applied, clock = fabric
    loop.observe(clock.t, b"", flow_report(topo, queue_at_spine=50, dport=4792))     # HPCC's to_host rule
    loop.observe(clock.t, b"", flow_report(topo, queue_at_spine=50, dport=9999))     # no rule watches it
    assert loop.step() is None and applied == []


def test_stop_lowers_what_is_raised(fabric):
    topo, loop, applied, clock = fabric
    loop.observe(clock.t, b"", drop_report(topo, "leaf2"))
    loop.step()
    loop.stop()
    assert applied[-1] == it.Raised() and not loop.current


def test_a_topology_without_int_is_an_error():
    topo = topology_from_dict(TOPO, "t.yaml")
    with pytest.raises(it.IntConfigError, match="no int section"):
        AdaptiveSampling(topo, it.AdaptiveSettings(), lambda r: None)


# -- beside `fabric run`: what the collector sends on, over UDP ------------------------------

class _Ints:
    def __init__(self):
        self.calls = []

    def set_raised(self, ports, flows):
        self.calls.append((frozenset(ports), frozenset(flows)))


class _Controller:
    def __init__(self):
        self.ints = _Ints()

    def feature(self, name):
        assert name == "int_telemetry"
        return self.ints


def test_serving_raises_from_a_forwarded_datagram_and_lowers_on_exit(fabric):
    topo = fabric[0]
    ctl = _Controller()
    spine_port = port_to(topo, "spine1", "leaf2")
    said = []
    with serving(topo, ctl, threading.Lock(), said.append, ("127.0.0.1", 0)) as loop:
        assert loop is not None and "listening on udp 127.0.0.1" in said[0]
        flow = Flow(topo.nic("h1").ip, topo.nic("h2").ip, 49152, 4791)
        data = synthetic_congestion(flow, node_id=node(topo, "spine1"), seq_no=1, queue_id=0, occupancy=40,
                                    egress_port=spine_port)
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.sendto(b"not a report", loop.address)
            s.sendto(data, loop.address)
        deadline = time.monotonic() + 5
        while not ctl.ints.calls and time.monotonic() < deadline:
            time.sleep(0.02)
        assert ctl.ints.calls[0] == (frozenset(), frozenset({it.FlowKey(flow.src_ip, flow.dst_ip, 17, 49152, 4791)}))
        assert loop.malformed == 1
    assert ctl.ints.calls[-1] == (frozenset(), frozenset())           # lowered when the network stops


def test_serving_does_nothing_without_an_adaptive_section():
    topo = topology_from_dict({**TOPO, "int": {k: v for k, v in SECTION.items() if k != "adaptive"}}, "t.yaml")
    with serving(topo, None, threading.Lock(), print) as loop:
        assert loop is None
