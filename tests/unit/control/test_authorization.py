"""Who may do what on P4Runtime (control/authorization.py): the policy
table for every role and RPC, the stream messages a read-only role may send,
and the role read from a certificate (the project's client certificates name
theirs; one without a role, with an unknown role or from another CA is
refused)."""
from __future__ import annotations

import datetime

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from p4.v1 import p4runtime_pb2

from control.authorization import POLICY_TABLE, RPCS, Policy, Refused
from control.tls import CLIENT_ROLES, ROLE_ATTRIBUTE, Pki, certificate_role

P4RUNTIME_RPCS = {m.name for m in p4runtime_pb2.DESCRIPTOR.services_by_name["P4Runtime"].methods}
WRITES = {"Write", "SetForwardingPipelineConfig"}
EXPECTED = {  # (role, operator's access) -> the RPCs it may call
    ("controller", "full"): P4RUNTIME_RPCS, ("controller", "read-only"): P4RUNTIME_RPCS,
    ("operator", "full"): P4RUNTIME_RPCS, ("operator", "read-only"): P4RUNTIME_RPCS - WRITES,
    ("monitor", "full"): P4RUNTIME_RPCS - WRITES, ("monitor", "read-only"): P4RUNTIME_RPCS - WRITES,
}


def test_the_policy_names_every_p4runtime_rpc_and_every_role_the_pki_makes():
    assert RPCS == P4RUNTIME_RPCS
    assert set(POLICY_TABLE) == set(CLIENT_ROLES)


@pytest.mark.parametrize("operator", ["full", "read-only"])
@pytest.mark.parametrize("role", CLIENT_ROLES)
def test_every_role_and_rpc(role, operator):
    policy = Policy.default(operator=operator)
    for rpc in sorted(P4RUNTIME_RPCS):
        allowed = rpc in EXPECTED[role, operator]
        assert policy.allowed(role, rpc) is allowed, (role, rpc)
        if allowed:
            policy.check_rpc(role, rpc)
        else:
            with pytest.raises(Refused, match=f"role '{role}' may not call {rpc} \\(read-only access\\)"):
                policy.check_rpc(role, rpc)
    assert policy.may_be_primary(role) is (EXPECTED[role, operator] == P4RUNTIME_RPCS)


def test_a_role_outside_the_table_may_do_nothing_and_an_unknown_access_is_refused():
    policy = Policy.default()
    for rpc in P4RUNTIME_RPCS:
        with pytest.raises(Refused, match=f"role 'admin' may not call {rpc} \\(no access\\)"):
            policy.check_rpc("admin", rpc)
    assert not policy.may_be_primary("admin")
    with pytest.raises(ValueError, match="access must be one of full, read-only, got 'write-only'"):
        Policy.default(operator="write-only")


def arbitration(**election) -> p4runtime_pb2.StreamMessageRequest:
    msg = p4runtime_pb2.StreamMessageRequest(arbitration=p4runtime_pb2.MasterArbitrationUpdate(device_id=1))
    if election:
        msg.arbitration.election_id.CopyFrom(p4runtime_pb2.Uint128(**election))
    return msg


def test_stream_messages_of_a_read_only_role():
    policy = Policy.default()
    for ok in (arbitration(), arbitration(high=0, low=0)):          # unset or 0: a backup
        policy.check_stream_message("monitor", ok)
    for eid in ({"high": 0, "low": 1}, {"high": 1000, "low": 0}):
        with pytest.raises(Refused, match=r"role 'monitor' may not ask for primacy on StreamChannel \(election id"):
            policy.check_stream_message("monitor", arbitration(**eid))
    others = {"packet": p4runtime_pb2.StreamMessageRequest(packet=p4runtime_pb2.PacketOut(payload=b"x")),
              "digest_ack": p4runtime_pb2.StreamMessageRequest(digest_ack=p4runtime_pb2.DigestListAck(digest_id=1)),
              "an empty message": p4runtime_pb2.StreamMessageRequest()}
    for kind, msg in others.items():
        with pytest.raises(Refused, match=f"role 'monitor' may not send {kind} on StreamChannel"):
            policy.check_stream_message("monitor", msg)
    for role in ("controller", "operator"):                        # may be primary: nothing is checked
        policy.check_stream_message(role, arbitration(high=1000, low=0))
        policy.check_stream_message(role, others["packet"])


def signed(ca: Pki, subject: list[x509.NameAttribute], key: ec.EllipticCurvePrivateKey | None = None) -> bytes:
    """A client certificate with `subject` (for `key`, a new one by default), signed by `ca`'s CA."""
    ca.ensure({})
    ca_cert = x509.load_pem_x509_certificate(ca.ca_cert_path.read_bytes())
    ca_key = serialization.load_pem_private_key(ca.ca_key_path.read_bytes(), None)
    key = key or ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(x509.Name(subject)).issuer_name(ca_cert.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now).not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    return cert.public_bytes(serialization.Encoding.PEM)


def test_the_role_is_read_from_a_certificate_of_the_project_ca(tmp_path):
    pki = Pki(tmp_path / "pki")
    pki.ensure({})
    ca = x509.load_pem_x509_certificate(pki.ca_cert_path.read_bytes())
    policy = Policy.default()
    for role in CLIENT_ROLES:
        pem = pki.client_credentials(role).cert.read_bytes()
        assert certificate_role(x509.load_pem_x509_certificate(pem)) == role
        assert policy.role_of(pem, ca) == role
        assert policy.role_of(pem, ca) == role                          # remembered

    no_role = signed(pki, [x509.NameAttribute(NameOID.COMMON_NAME, "fabric-controller")])
    with pytest.raises(Refused, match="CN=fabric-controller names no role"):
        policy.role_of(no_role, ca)
    two_roles = signed(pki, [x509.NameAttribute(ROLE_ATTRIBUTE, "monitor"), x509.NameAttribute(ROLE_ATTRIBUTE, "controller")])
    with pytest.raises(Refused, match="names no role"):
        policy.role_of(two_roles, ca)
    unknown = signed(pki, [x509.NameAttribute(ROLE_ATTRIBUTE, "admin")])
    with pytest.raises(Refused, match="names role 'admin', which has no access"):
        policy.role_of(unknown, ca)

    other = Pki(tmp_path / "other", ca_name="another CA")
    foreign = other.client("controller").cert.read_bytes()          # names a role, from another CA
    assert certificate_role(x509.load_pem_x509_certificate(foreign)) == "controller"
    with pytest.raises(Refused, match="is not signed by the project's CA"):
        policy.role_of(foreign, ca)
    with pytest.raises(Refused, match="cannot be read"):
        policy.role_of(b"", ca)


def test_a_client_certificate_without_its_role_is_remade(tmp_path):
    pki = Pki(tmp_path / "pki")
    pki.ensure({})
    creds = pki.client_credentials("monitor")
    old = signed(pki, [x509.NameAttribute(NameOID.ORGANIZATION_NAME, "p4-ai-fabric"),
                       x509.NameAttribute(NameOID.COMMON_NAME, "fabric-monitor")],     # as made before roles
                 serialization.load_pem_private_key(creds.key.read_bytes(), None))
    creds.cert.write_bytes(old)
    pki.client("monitor")
    assert creds.cert.read_bytes() != old
    assert certificate_role(x509.load_pem_x509_certificate(creds.cert.read_bytes())) == "monitor"
