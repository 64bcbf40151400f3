"""The project's PKI (control/tls.py): what it makes, what it keeps, what it
remakes, and that its certificates do mutual TLS (Python's ssl module, the
same OpenSSL checks gRPC makes: the server's name, a client certificate
from the CA required)."""
from __future__ import annotations

import socket
import ssl
import stat
import threading
from pathlib import Path

import pytest
from cryptography import x509

from emulator.bmv2 import switch_command
from control.tls import CLIENT_ROLES, ClientCredentials, Pki, PkiError, subject_alt_names


def files(pki: Pki) -> dict[str, bytes]:
    return {str(p.relative_to(pki.dir)): p.read_bytes() for p in sorted(pki.dir.rglob("*")) if p.is_file()}


def cert(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def test_a_pki_is_made_once_and_kept(tmp_path):
    pki = Pki(tmp_path / "pki")
    made = pki.ensure({"leaf1": ["127.0.0.1"], "leaf2": ["127.0.0.1"]})
    first = files(pki)
    assert {"ca.pem", "ca.key", "switches/leaf1.pem", "switches/leaf2.key",
            *(f"clients/{r}.pem" for r in CLIENT_ROLES)} <= set(first)
    assert subject_alt_names(cert(made["leaf1"].cert)) == {"leaf1", "127.0.0.1"}
    for path in (pki.ca_key_path, made["leaf1"].key, pki.client_credentials("monitor").key):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    assert stat.S_IMODE(pki.dir.stat().st_mode) == 0o700
    pki.ensure({"leaf1": ["127.0.0.1"], "leaf2": ["127.0.0.1"]})
    assert files(pki) == first


def test_a_certificate_is_remade_when_its_address_its_ca_or_its_file_is_wrong(tmp_path):
    pki = Pki(tmp_path / "pki")
    pki.ensure({"s1": ["127.0.0.1"], "s2": ["127.0.0.1"]})
    before = files(pki)
    pki.server("s1", "172.31.0.1")                      # moved: a new certificate for the new address
    assert subject_alt_names(cert(pki.server_credentials("s1").cert)) == {"s1", "172.31.0.1"}
    assert files(pki)["switches/s2.pem"] == before["switches/s2.pem"]

    other = Pki(tmp_path / "other")
    other.server("s2", "127.0.0.1")
    pki.server_credentials("s2").cert.write_bytes(other.server_credentials("s2").cert.read_bytes())
    pki.server("s2", "127.0.0.1")                       # signed by another CA: remade
    cert(pki.server_credentials("s2").cert).verify_directly_issued_by(cert(pki.ca_cert_path))

    pki.client_credentials("controller").key.write_text("not a key")
    pki.client("controller")
    assert b"PRIVATE KEY" in pki.client_credentials("controller").key.read_bytes()

    pki.ca_key_path.unlink()                            # a new CA: everything it signs is remade
    pki.ensure({"s1": ["127.0.0.1"]})
    ca = cert(pki.ca_cert_path)
    assert files(pki)["ca.pem"] != before["ca.pem"]
    for path in (pki.server_credentials("s1").cert, pki.client_credentials("operator").cert):
        cert(path).verify_directly_issued_by(ca)


def test_errors_name_what_is_wrong(tmp_path):
    with pytest.raises(PkiError, match="client role must be one of controller, monitor, operator, got 'admin'"):
        Pki(tmp_path).client_credentials("admin")
    creds = ClientCredentials(tmp_path / "ca.pem", tmp_path / "c.pem", tmp_path / "c.key")
    with pytest.raises(PkiError, match=r"missing: .*ca\.pem, .*c\.pem, .*c\.key"):
        creds.read()


def test_a_switch_started_with_credentials_requires_client_certificates(tmp_path):
    creds = Pki(tmp_path).server("s1", "127.0.0.1")
    cmd = switch_command("simple_switch_grpc", device_id=1, thrift_port=9091, grpc_addr="127.0.0.1:9560",
                         ports={1: "veth1"}, log_level="off", tls=creds)
    target = cmd[cmd.index("--") + 1:]
    assert target == ["--grpc-server-addr", "127.0.0.1:9560", "--grpc-server-ssl",
                      "--grpc-server-cacert", str(creds.ca), "--grpc-server-cert", str(creds.cert),
                      "--grpc-server-key", str(creds.key), "--grpc-server-with-client-auth"]


def handshake(server_ctx: ssl.SSLContext, client_ctx: ssl.SSLContext, name: str) -> str | None:
    """A TLS handshake over loopback; None if it succeeded, else the error."""
    listener = socket.create_server(("127.0.0.1", 0))
    errors: list[str] = []

    def serve():
        conn, _ = listener.accept()
        try:
            with server_ctx.wrap_socket(conn, server_side=True) as tls:
                tls.recv(1)
        except (ssl.SSLError, OSError) as exc:
            errors.append(f"server: {exc}")

    thread = threading.Thread(target=serve)
    thread.start()
    try:
        with socket.create_connection(listener.getsockname(), timeout=5) as raw, \
                client_ctx.wrap_socket(raw, server_hostname=name) as tls:
            tls.sendall(b"x")
            tls.recv(1)                                 # a refused client certificate shows here (TLS 1.3)
    except (ssl.SSLError, OSError) as exc:
        errors.append(f"client: {exc}")
    thread.join(timeout=5)
    listener.close()
    return "; ".join(errors) or None


def contexts(pki: Pki, client: ClientCredentials) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    server = pki.server("s1", "127.0.0.1")
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(server.cert, server.key)
    server_ctx.load_verify_locations(server.ca)
    server_ctx.verify_mode = ssl.CERT_REQUIRED           # BMv2's --grpc-server-with-client-auth
    client_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client_ctx.load_verify_locations(client.ca)
    client_ctx.load_cert_chain(client.cert, client.key)
    return server_ctx, client_ctx


def test_its_certificates_do_mutual_tls_and_another_cas_do_not(tmp_path):
    pki, rogue = Pki(tmp_path / "pki"), Pki(tmp_path / "rogue", ca_name="another CA")
    assert handshake(*contexts(pki, pki.client("controller")), "127.0.0.1") is None
    mixed = rogue.client("controller")
    refused = handshake(*contexts(pki, ClientCredentials(pki.ca_cert_path, mixed.cert, mixed.key)), "127.0.0.1")
    assert refused and "certificate" in refused.lower(), refused
    wrong_name = handshake(*contexts(pki, pki.client("controller")), "10.0.0.1")
    assert wrong_name and "mismatch" in wrong_name, wrong_name       # the client checks the switch's address


def test_a_client_without_its_certificates_says_so_and_whether_a_server_is_there(tmp_path):
    from control.switch import SwitchConnection, SwitchError
    missing = Pki(tmp_path / "none").client_credentials("controller")
    with socket.create_server(("127.0.0.1", 0)) as listener:
        addr = f"127.0.0.1:{listener.getsockname()[1]}"
        with pytest.raises(SwitchError, match=r"^s1: TLS client credentials missing: .*ca\.pem"):
            SwitchConnection("s1", addr, 1, credentials=missing, connect_timeout=1)
    with pytest.raises(SwitchError, match=rf"^s1: no P4Runtime server at {addr}, and TLS client credentials missing"):
        SwitchConnection("s1", addr, 1, credentials=missing, connect_timeout=1)
