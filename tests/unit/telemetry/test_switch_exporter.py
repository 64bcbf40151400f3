"""The switch exporter turns counter/register readings into Prometheus
samples (no switch needed), survives readers that fail, and its BMv2 reader
names what it could not reach."""
import dataclasses
import time
import urllib.request
from pathlib import Path

import pytest

from features import load_topology
from telemetry.switch_exporter import (Bmv2Reader, SwitchExporter, SwitchReadings, at_instant, drop_reason_names,
                                       samples)

REPO = Path(__file__).resolve().parents[3]
TOPO = load_topology(REPO / "topologies" / "leaf-spine.yaml")
FIXTURE_P4INFO = REPO / "tests" / "fixtures" / "main.p4info.txtpb"


def leaf1_readings(**kw) -> SwitchReadings:
    # leaf1: port 1 -> h1, 2 -> h2, 3 -> spine1, 4 -> spine2
    return SwitchReadings("leaf1", counters={
        "ingress_port_counter": {1: (10, 1000), 3: (5, 500), 200: (9, 9)},
        "egress_port_counter": {2: (7, 700)},
        "drop_counter": {4: (3, 0), 40: (2, 0)},
        "ecn_marked_counter": {3: (4, 0)},
    }, qdepth={(2, 0): 6, (2, 3): 0, (3, 0): 1, (200, 0): 9}, **kw)


def as_dict(families):
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for f in families for s in f.samples}


def value(d, name, **labels):
    return d.get((name, tuple(sorted(labels.items()))))


def test_samples_from_readings():
    d = as_dict(samples(TOPO, [leaf1_readings()], drop_reason_names()))
    assert value(d, "fabric_switch_up", switch="leaf1") == 1
    assert value(d, "fabric_port_rx_packets_total", switch="leaf1", port="1", peer="h1") == 10
    assert value(d, "fabric_port_rx_bytes_total", switch="leaf1", port="3", peer="spine1") == 500
    assert value(d, "fabric_port_rx_packets_total", switch="leaf1", port="4", peer="spine2") == 0
    assert value(d, "fabric_port_tx_bytes_total", switch="leaf1", port="2", peer="h2") == 700
    assert value(d, "fabric_ecn_marked_total", switch="leaf1", port="3", peer="spine1") == 4
    assert value(d, "fabric_queue_depth_packets", switch="leaf1", port="2", peer="h2", queue="0") == 6
    assert value(d, "fabric_queue_depth_packets", switch="leaf1", port="2", peer="h2", queue="3") == 0
    assert value(d, "fabric_queue_depth_packets", switch="leaf1", port="4", peer="spine2", queue="0") is None, \
        "a queue without a fresh sample is absent, not 0"
    assert value(d, "fabric_drops_total", switch="leaf1", reason="no_route") == 3
    assert value(d, "fabric_drops_total", switch="leaf1", reason="parser_error") == 0   # known, not counted yet
    assert value(d, "fabric_drops_total", switch="leaf1", reason="reason_40") == 2      # unknown cell, nonzero
    assert not any(lbl == ("port", "200") for (_, labels) in d for lbl in labels)      # not a topology port
    assert {r for (n, labels), _ in d.items() if n == "fabric_drops_total"
            for k, r in labels if k == "reason"} >= {"parser_error", "bad_ipv4_checksum", "not_ipv4",
                                                    "no_route", "ttl_expired"}
    assert value(d, "fabric_drops_total", switch="leaf1", reason="trimmed") is None, \
        "a trim is not a drop: fabric_trimmed_total counts trims"


def test_what_the_kernel_delivered_to_a_port_is_exported_beside_what_the_pipeline_counted():
    """leaf1's interface to h1 received 12 frames, its pipeline counted 10:
    the difference is BMv2's input path (lost, or not yet read)."""
    d = as_dict(samples(TOPO, [leaf1_readings(interface_rx={1: 12, 3: 5})], drop_reason_names()))
    assert value(d, "fabric_port_interface_rx_packets_total", switch="leaf1", port="1", peer="h1") == 12
    assert value(d, "fabric_port_interface_rx_packets_total", switch="leaf1", port="3", peer="spine1") == 5
    assert not [k for k in d if k[0] == "fabric_port_interface_rx_packets_total" and ("port", "2") in k[1]], \
        "a port whose interface was not read is not exported"


def test_what_the_links_other_end_received_is_exported_beside_what_the_port_sent():
    """leaf1 sent 7 frames to h2 (a host: its NIC's count is not this
    machine's) and the interface at spine1's end of port 3 received 5: the
    link lost what egress_port_counter counts above it. The far end is the
    peer switch's own port (control/topology.py Port.peer_iface)."""
    d = as_dict(samples(TOPO, [leaf1_readings(peer_rx={3: 5})], drop_reason_names()))
    assert value(d, "fabric_port_peer_rx_packets_total", switch="leaf1", port="3", peer="spine1") == 5
    assert not [k for k in d if k[0] == "fabric_port_peer_rx_packets_total" and ("port", "2") in k[1]]
    ports = TOPO.switches["leaf1"].ports
    assert ports[3].peer_iface == TOPO.switches["spine1"].ports[ports[3].peer_port].iface
    assert ports[1].peer_iface == "", "a host's NIC is in its namespace"


def test_what_was_not_read_is_not_exported():
    d = as_dict(samples(TOPO, [SwitchReadings("spine1", errors=(("p4runtime", "down"),))], {4: "no_route"},
                        {("spine1", "p4runtime"): 3}))
    assert value(d, "fabric_switch_up", switch="spine1") == 0
    assert value(d, "fabric_exporter_read_errors_total", switch="spine1", source="p4runtime") == 3
    assert not [k for k in d if k[0].startswith(("fabric_port", "fabric_drops", "fabric_queue"))]


class FakeReader:
    def __init__(self, fail=()):
        self.fail = set(fail)
        self.closed = False

    def read(self, sw, queues=8):
        if sw.name in self.fail:
            raise RuntimeError(f"{sw.name} is on fire")
        if sw.name == "leaf1":
            return leaf1_readings()
        return SwitchReadings(sw.name, counters={"ingress_port_counter": {1: (1, 64)}})

    def close(self):
        self.closed = True


def test_exporter_polls_every_switch_and_survives_a_failing_reader():
    exp = SwitchExporter(TOPO, FakeReader(fail={"spine2"}), reasons=drop_reason_names())
    exp.poll_once()
    exp.poll_once()
    get = exp.registry.get_sample_value
    assert get("fabric_switch_up", {"switch": "leaf1"}) == 1 and get("fabric_switch_up", {"switch": "spine2"}) == 0
    assert get("fabric_exporter_read_errors_total", {"switch": "spine2", "source": "reader"}) == 2
    assert get("fabric_port_rx_bytes_total", {"switch": "spine1", "port": "1", "peer": "leaf1"}) == 64
    assert "switches up 3/4" in exp.status() and "spine2 is on fire" in exp.status()


def test_exporter_serves_metrics_over_http_and_stops():
    reader = FakeReader()
    exp = SwitchExporter(TOPO, reader, interval=0.05, reasons={4: "no_route"}).start(port=0)
    try:
        deadline = time.monotonic() + 5
        while exp.polls < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        text = urllib.request.urlopen(exp.server.url, timeout=5).read().decode()
    finally:
        exp.stop()
    assert 'fabric_drops_total{reason="no_route",switch="leaf1"} 3.0' in text
    assert 'fabric_port_rx_packets_total{peer="h1",port="1",switch="leaf1"} 10.0' in text
    assert reader.closed


def test_bmv2_reader_names_what_it_cannot_reach():
    # A device id whose ports no network of the project uses (one may be running beside the tests).
    nowhere = dataclasses.replace(TOPO.switches["leaf1"], device_id=20_000)
    reader = Bmv2Reader(FIXTURE_P4INFO, connect_timeout=0.3)
    start = time.monotonic()
    r = reader.read(nowhere)
    assert time.monotonic() - start < 10
    sources = dict(r.errors)
    assert not r.up and r.counters == {} and r.qdepth is None
    assert f"no P4Runtime server at {nowhere.grpc_addr}" in sources["p4runtime"]
    assert "thrift" in sources
    reader.close()


def test_bmv2_reader_needs_a_p4info(tmp_path):
    with pytest.raises(FileNotFoundError, match="make build"):
        Bmv2Reader(tmp_path / "missing.txtpb")


def test_int_reports_by_kind():
    readings = SwitchReadings("leaf1", counters={
        "int_report_counter": {0: (40, 0), 1: (900, 0), 2: (7, 0), 3: (2, 0), 4: (1, 0)},
        "drop_reports_limited": {5: (3, 0), 6: (4, 0)}})
    d = as_dict(samples(TOPO, [readings], drop_reason_names()))
    got = {k: value(d, "fabric_int_reports_total", switch="leaf1", kind=k)
           for k in ("flow", "suppressed", "queue", "queue_limited", "drop", "drop_limited")}
    assert got == {"flow": 40, "suppressed": 900, "queue": 7, "queue_limited": 2, "drop": 1, "drop_limited": 7}


def test_controller_primacy_is_published_when_known():
    d = as_dict(samples(TOPO, [SwitchReadings("leaf1", controller_primary=False),
                               SwitchReadings("leaf2", controller_primary=True),
                               SwitchReadings("spine1")], {}))
    assert value(d, "fabric_controller_primary", switch="leaf1") == 0.0
    assert value(d, "fabric_controller_primary", switch="leaf2") == 1.0
    assert value(d, "fabric_controller_primary", switch="spine1") is None, "not known: no sample"


def test_the_kernels_count_is_taken_at_the_instant_the_pipeline_counter_was_read():
    """Read at 0 s and 0.1 s around an ingress read answered at 0.06 s: the
    kernel's count at 0.06 s, not at either end (at 1000 frames/s, 40-60
    frames apart)."""
    rx = at_instant({1: 1000, 2: 7}, 0.0, {1: 1100, 2: 7, 3: 5}, 0.1, 0.06)
    assert rx == {1: 1060, 2: 7, 3: 5}
    assert at_instant({1: 10}, 1.0, {1: 20}, 1.0, 1.0) == {1: 10}, "no time between the reads: the first"
    assert at_instant({1: 10}, 0.0, {1: 20}, 1.0, 5.0) == {1: 20}, "never beyond the readings"


def test_a_read_asks_for_the_cells_of_the_switchs_ports_not_whole_counters():
    """A whole counter is read cell by cell (trim_counter's 4096 took 0.19 s
    a switch): the port counters are read at the switch's ports, the
    trimming counter at its ports' eight queues."""
    from features.trimming import cell
    from telemetry.switch_exporter import CELLS
    leaf1 = TOPO.switches["leaf1"]
    assert CELLS["ingress_port_counter"](leaf1) == CELLS["egress_port_counter"](leaf1) == [1, 2, 3, 4]
    assert CELLS["trim_counter"](leaf1) == [cell(p, q) for p in (1, 2, 3, 4) for q in range(8)]
    assert "drop_counter" not in CELLS, "indexed by drop reason: read whole (a few cells)"
