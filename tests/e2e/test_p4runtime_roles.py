"""Roles on P4Runtime, on a live switch behind the authorizing proxy
(emulator/p4runtime_proxy.py, the policy in control/authorization.py).

The monitor's certificate (the switch exporter's) tries to write a route,
push a pipeline, take primacy with an election id above the controller's
and send a packet-out; a certificate from the project's CA that names no
role tries to write. Each is refused with PERMISSION_DENIED naming the role
and the RPC, and afterwards the switch's entries, read back with the
controller's certificate, are those before and the controller is still
primary, never demoted. The controller then writes and reads through the
proxy (a Write's per-update error comes back as BMv2 gives it), and the
exporter reads the switch as it does without the proxy.
"""
import datetime
import time
from pathlib import Path

import grpc
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from p4.v1 import p4runtime_pb2, p4runtime_pb2_grpc

from control.controller import FabricController
from control.switch import SwitchError, update
from control.sync import read_managed
from control.tls import Pki
from emulator.build import compile_p4
from emulator.network import Network
from features import load_topology
from telemetry.switch_exporter import Bmv2Reader

REPO = Path(__file__).resolve().parents[2]
GRAB = p4runtime_pb2.Uint128(high=10 ** 6)     # above the controller's (1000, 0)


@pytest.fixture
def fabric(tmp_path):
    compile_p4()
    topo = load_topology(REPO / "topologies" / "star.yaml")
    with Network(topo, tmp_path / "net", log_level="warn", p4runtime_proxy=True) as net, \
            FabricController(topo) as ctl:
        ctl.program()
        yield net, ctl


def route(ctl: FabricController, prefix: str = "10.99.0.0/16") -> p4runtime_pb2.Update:
    entry = ctl.p4info.table_entry("ipv4_lpm", {"hdr.ipv4.dst_addr": prefix},
                                   action="set_next_id", params={"next_id": 1})
    return update(p4runtime_pb2.Update.INSERT, table_entry=entry)


def entries(ctl: FabricController, name: str) -> list[bytes]:
    held = read_managed(ctl.connections[name], ctl.desired_state(name))
    return sorted(e.SerializeToString(deterministic=True) for e in held.table_entries)


def roleless_certificate(pki: Pki) -> tuple[bytes, bytes]:
    """(key, certificate) PEM of a client certificate signed by `pki`'s CA whose subject names no role."""
    ca = x509.load_pem_x509_certificate(pki.ca_cert_path.read_bytes())
    ca_key = serialization.load_pem_private_key(pki.ca_key_path.read_bytes(), None)
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "fabric-nobody")]))
            .issuer_name(ca.subject).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    return (key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                              serialization.NoEncryption()), cert.public_bytes(serialization.Encoding.PEM))


def refusal(call) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.RpcError) as caught:
        call()
    return caught.value.code(), caught.value.details()


def test_the_monitor_reads_but_may_not_write_or_take_primacy(fabric):
    net, ctl = fabric
    sw = net.topo.switches["s1"]
    pki = Pki()
    ca, cert, key = pki.client_credentials("monitor").read()
    monitor = p4runtime_pb2_grpc.P4RuntimeStub(
        grpc.secure_channel(sw.grpc_addr, grpc.ssl_channel_credentials(ca, key, cert)))
    before = entries(ctl, "s1")
    assert before, "the controller programmed s1"

    write = p4runtime_pb2.WriteRequest(device_id=sw.device_id, election_id=GRAB, updates=[route(ctl)])
    push = p4runtime_pb2.SetForwardingPipelineConfigRequest(
        device_id=sw.device_id, election_id=GRAB,
        action=p4runtime_pb2.SetForwardingPipelineConfigRequest.VERIFY_AND_COMMIT)
    grab = p4runtime_pb2.StreamMessageRequest(
        arbitration=p4runtime_pb2.MasterArbitrationUpdate(device_id=sw.device_id, election_id=GRAB))
    packet_out = p4runtime_pb2.StreamMessageRequest(packet=p4runtime_pb2.PacketOut(payload=b"\0" * 64))
    backup = p4runtime_pb2.StreamMessageRequest(
        arbitration=p4runtime_pb2.MasterArbitrationUpdate(device_id=sw.device_id))
    attempts = {
        "Write": lambda: monitor.Write(write, timeout=5),
        "SetForwardingPipelineConfig": lambda: monitor.SetForwardingPipelineConfig(push, timeout=5),
        "primacy": lambda: list(monitor.StreamChannel(iter([grab]), timeout=5)),
        "packet": lambda: list(monitor.StreamChannel(iter([backup, packet_out]), timeout=5)),
    }
    said = {"Write": "role 'monitor' may not call Write",
            "SetForwardingPipelineConfig": "role 'monitor' may not call SetForwardingPipelineConfig",
            "primacy": "role 'monitor' may not ask for primacy on StreamChannel (election id (1000000,0)",
            "packet": "role 'monitor' may not send packet on StreamChannel"}
    for what, call in attempts.items():
        code, details = refusal(call)
        assert code == grpc.StatusCode.PERMISSION_DENIED and said[what] in details, (what, code, details)

    role_key, role_cert = roleless_certificate(pki)
    nobody = p4runtime_pb2_grpc.P4RuntimeStub(
        grpc.secure_channel(sw.grpc_addr, grpc.ssl_channel_credentials(ca, role_key, role_cert)))
    code, details = refusal(lambda: nobody.Write(write, timeout=5))
    assert code == grpc.StatusCode.PERMISSION_DENIED and "Write refused" in details and "names no role" in details

    # Reads are the monitor's: Capabilities and Read through the proxy.
    assert monitor.Capabilities(p4runtime_pb2.CapabilitiesRequest(), timeout=5).p4runtime_api_version
    time.sleep(0.3)                                      # a demotion, had one happened, reaches the controller
    assert entries(ctl, "s1") == before, "a refused client changed the switch's entries"
    assert ctl.primary_of() == {"s1": True} and ctl.connections["s1"].demotions == 0

    ctl.connections["s1"].write([route(ctl)])           # the controller writes and reads through the proxy
    assert len(entries(ctl, "s1")) == len(before) + 1
    with pytest.raises(SwitchError, match="ALREADY_EXISTS"):
        ctl.connections["s1"].write([route(ctl)])       # BMv2's per-update error, through the proxy
    assert all(r.report.writes == 1 for r in ctl.program())   # the extra route removed again

    reading = Bmv2Reader(REPO / "build" / "main.p4info.txtpb", read_qdepth=False).read(sw)
    assert reading.controller_primary is True
    assert ctl.primary_of() == {"s1": True}
