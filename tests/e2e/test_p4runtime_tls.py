"""Mutual TLS on P4Runtime, on a live switch: only holders of a certificate
from the project's CA get a channel, and the Thrift port answers loopback only.

A client with no certificate, one with a certificate from another CA, and
one on plain gRPC each try to write a route (a Write sent on its own gRPC
channel, and a SwitchConnection): every one is refused, and the switch's
entries afterwards are exactly those before. The controller, the exporter
(its own certificate) and p4runtime-shell with the operator's certificate
(test_controller_primacy.py) still do their work.

Thrift: BMv2 binds it to every address; the launcher's nftables rule drops
it on anything but loopback. From a namespace wired to the root namespace
by a veth, a TCP connection to a Thrift port gets nowhere, while one to a
listener of this test on the same address is accepted.
"""
import socket
import subprocess
from pathlib import Path

import grpc
import pytest
from p4.v1 import p4runtime_pb2, p4runtime_pb2_grpc

from emulator.build import compile_p4
from control.controller import FabricController
from emulator.network import Network, sh
from control.switch import SwitchConnection, SwitchError, update
from control.sync import read_managed
from control.tls import ClientCredentials, Pki
from features import load_topology
from telemetry.switch_exporter import Bmv2Reader

REPO = Path(__file__).resolve().parents[2]
PROBE_NS, ROOT_IF, PROBE_IF = "tlsprobe", "tlsprobe-root", "tlsprobe-ns"
ROOT_IP, PROBE_IP = "10.253.0.1", "10.253.0.2"


@pytest.fixture
def fabric(tmp_path):
    compile_p4()
    topo = load_topology(REPO / "topologies" / "star.yaml")
    with Network(topo, tmp_path / "net", log_level="warn") as net, FabricController(topo) as ctl:
        ctl.program()
        yield net, ctl


def route(ctl: FabricController) -> p4runtime_pb2.Update:
    entry = ctl.p4info.table_entry("ipv4_lpm", {"hdr.ipv4.dst_addr": "10.99.0.0/16"},
                                   action="set_next_id", params={"next_id": 1})
    return update(p4runtime_pb2.Update.INSERT, table_entry=entry)


def entries(ctl: FabricController, name: str) -> list[bytes]:
    held = read_managed(ctl.connections[name], ctl.desired_state(name))
    return sorted(e.SerializeToString(deterministic=True) for e in held.table_entries)


def raw_write(channel: grpc.Channel, device_id: int, upd: p4runtime_pb2.Update) -> grpc.StatusCode:
    """A Write on `channel` with no arbitration (which a refused channel never
    reaches anyway): the status it fails with."""
    req = p4runtime_pb2.WriteRequest(device_id=device_id, election_id=p4runtime_pb2.Uint128(high=10 ** 6))
    req.updates.append(upd)
    with channel:
        try:
            p4runtime_pb2_grpc.P4RuntimeStub(channel).Write(req, timeout=5)
        except grpc.RpcError as exc:
            return exc.code()
    return grpc.StatusCode.OK


def test_only_clients_with_a_certificate_from_the_ca_get_a_channel_and_a_refusal_changes_nothing(fabric, tmp_path):
    net, ctl = fabric
    sw = net.topo.switches["s1"]
    project = Pki().client_credentials("controller")
    ca, cert, key = project.read()
    rogue = Pki(tmp_path / "rogue", ca_name="another CA").client("controller")
    before = entries(ctl, "s1")
    assert before, "the controller programmed s1"

    attempts = {
        "plain gRPC": grpc.insecure_channel(sw.grpc_addr),
        "TLS, no client certificate": grpc.secure_channel(sw.grpc_addr, grpc.ssl_channel_credentials(ca)),
        "TLS, a certificate from another CA": grpc.secure_channel(
            sw.grpc_addr, grpc.ssl_channel_credentials(ca, rogue.key.read_bytes(), rogue.cert.read_bytes())),
    }
    codes = {what: raw_write(channel, sw.device_id, route(ctl)) for what, channel in attempts.items()}
    assert codes == {what: grpc.StatusCode.UNAVAILABLE for what in attempts}, codes

    with pytest.raises(SwitchError, match="no plain-gRPC channel came up"):
        SwitchConnection("s1", sw.grpc_addr, sw.device_id, credentials=None, connect_timeout=3)
    with pytest.raises(SwitchError, match="TLS channel did not come up"):
        SwitchConnection("s1", sw.grpc_addr, sw.device_id, connect_timeout=3,
                         credentials=ClientCredentials(project.ca, rogue.cert, rogue.key))

    assert entries(ctl, "s1") == before, "a refused client changed the switch's entries"
    assert ctl.primary_of() == {"s1": True}
    assert all(r.report.writes == 0 for r in ctl.program()), "the controller found something to rewrite"
    ctl.connections["s1"].write([route(ctl)])           # the controller's own channel still writes
    assert len(entries(ctl, "s1")) == len(before) + 1
    assert Bmv2Reader(REPO / "build" / "main.p4info.txtpb", read_qdepth=False).read(sw).controller_primary is True


@pytest.fixture
def probe_namespace():
    """A namespace wired to the root namespace by a veth: the machine's own
    network as a remote client sees it."""
    sh("ip", "netns", "del", PROBE_NS, check=False)
    sh("ip", "link", "del", ROOT_IF, check=False)
    sh("ip", "netns", "add", PROBE_NS)
    try:
        sh("ip", "link", "add", ROOT_IF, "type", "veth", "peer", "name", PROBE_IF)
        sh("ip", "link", "set", PROBE_IF, "netns", PROBE_NS)
        sh("ip", "addr", "add", f"{ROOT_IP}/30", "dev", ROOT_IF)
        sh("ip", "link", "set", ROOT_IF, "up")
        sh("ip", "addr", "add", f"{PROBE_IP}/30", "dev", PROBE_IF, netns=PROBE_NS)
        sh("ip", "link", "set", PROBE_IF, "up", netns=PROBE_NS)
        yield PROBE_NS
    finally:
        sh("ip", "link", "del", ROOT_IF, check=False)
        sh("ip", "netns", "del", PROBE_NS, check=False)


def connects_from(netns: str, port: int) -> bool:
    probe = ("import socket,sys\n"
             "try:\n"
             f"    socket.create_connection(('{ROOT_IP}', {port}), timeout=2).close()\n"
             "except OSError:\n"
             "    sys.exit(1)\n")
    return subprocess.run(["ip", "netns", "exec", netns, "python3", "-c", probe], timeout=10).returncode == 0


def test_the_thrift_port_answers_on_loopback_only(fabric, probe_namespace):
    net, _ctl = fabric
    sw = net.topo.switches["s1"]
    listener = socket.create_server(("0.0.0.0", 0))     # the control: reachable from the probe's side
    try:
        assert connects_from(probe_namespace, listener.getsockname()[1]), "the probe namespace reaches the root"
        assert not connects_from(probe_namespace, sw.thrift_port), "Thrift answered off loopback"
    finally:
        listener.close()
    socket.create_connection(("127.0.0.1", sw.thrift_port), timeout=2).close()
    net.apply_queue_rates()                             # Thrift on loopback: the launcher's own use
