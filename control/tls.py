"""Mutual TLS on the P4Runtime channel: the project's own certificate
authority, a server certificate per switch and a client certificate per role.

Every switch the project starts runs its P4Runtime server with TLS and
requires a client certificate signed by the project's CA
(`--grpc-server-with-client-auth`); the controller, the switch exporter and
an operator's p4runtime-shell each present one. A client certificate names
its role (CLIENT_ROLES) as the subject's organisational unit
(certificate_role). BMv2 checks only that the client's certificate chains
to the CA; what each role may do is enforced by the authorizing proxy in
front of the switch (control/authorization.py, emulator/p4runtime_proxy.py).

    pki = Pki(PKI_DIR)                       # build/pki, made on first use
    server = pki.server("leaf1", "127.0.0.1")  # leaf1's certificate, for its address
    client = pki.client("controller")         # the controller's, any switch

Layout of the directory (keys 0600, the directory 0700):

    ca.pem  ca.key                      the CA (ECDSA P-256, CA_DAYS)
    switches/<switch>.pem .key          server certificates: the switch's name
                                        and the address its P4Runtime listens on
    clients/<role>.pem .key             client certificates (CLIENT_ROLES): CN fabric-<role>,
                                        OU <role>

Everything is made once and reused: a certificate is made again only when
it is missing, expires within RENEW_BEFORE_DAYS, was signed by another CA,
names another subject (a client certificate made before roles were named)
or (a switch's) names other addresses. Making a CA replaces every
certificate it signed. Concurrent users (two launchers) serialise on a lock
file, and every file is written whole (a temporary file renamed).
"""
from __future__ import annotations

import contextlib
import datetime
import fcntl
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

REPO = Path(__file__).resolve().parent.parent
PKI_DIR = REPO / "build" / "pki"
CA_DAYS = 3650                    # a lab CA: as long as the checkout lives
LEAF_DAYS = 365
RENEW_BEFORE_DAYS = 30
CLIENT_ROLES = ("controller", "monitor", "operator")   # fabric controller and shell; switch exporter; by hand
ORGANISATION = "p4-ai-fabric"
ROLE_ATTRIBUTE = NameOID.ORGANIZATIONAL_UNIT_NAME      # where a client certificate names its role


class PkiError(RuntimeError):
    pass


@dataclass(frozen=True)
class ClientCredentials:
    """What a P4Runtime client presents: the CA that must have signed the
    switch's certificate, and its own certificate and key."""
    ca: Path
    cert: Path
    key: Path

    def read(self) -> tuple[bytes, bytes, bytes]:
        """(CA, certificate, key) PEM bytes; an error naming a missing file."""
        missing = [str(p) for p in (self.ca, self.cert, self.key) if not p.exists()]
        if missing:
            raise PkiError(f"TLS client credentials missing: {', '.join(missing)} (the network launcher makes them "
                           "in build/pki when it starts switches; a switch started without TLS needs --no-tls)")
        return self.ca.read_bytes(), self.cert.read_bytes(), self.key.read_bytes()

    def p4runtime_shell_args(self) -> list[str]:
        """The same credentials as p4runtime-shell's options."""
        return ["--ssl", "--cacert", str(self.ca), "--cert", str(self.cert), "--private-key", str(self.key)]


@dataclass(frozen=True)
class ServerCredentials:
    """What a switch's P4Runtime server presents and checks clients against."""
    ca: Path
    cert: Path
    key: Path

    def bmv2_args(self) -> list[str]:
        """simple_switch_grpc's target options: TLS, and a client certificate
        from the CA required of every client."""
        return ["--grpc-server-ssl", "--grpc-server-cacert", str(self.ca), "--grpc-server-cert", str(self.cert),
                "--grpc-server-key", str(self.key), "--grpc-server-with-client-auth"]


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


def _write(path: Path, data: bytes, private: bool = False) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if private else 0o644)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _san_entries(names: list[str]) -> list[x509.GeneralName]:
    out: list[x509.GeneralName] = []
    for name in names:
        try:
            out.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            out.append(x509.DNSName(name))
    return out


def _pair(key: ec.EllipticCurvePrivateKey, cert: x509.Certificate) -> bool:
    """Whether `key` is the private half of `cert`'s public key."""
    spki = serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    return key.public_key().public_bytes(*spki) == cert.public_key().public_bytes(*spki)


def certificate_role(cert: x509.Certificate) -> str | None:
    """The role a client certificate names (its one ROLE_ATTRIBUTE); None
    when it names none, or more than one."""
    values = cert.subject.get_attributes_for_oid(ROLE_ATTRIBUTE)
    return str(values[0].value) if len(values) == 1 else None


def _subject(common_name: str, role: str | None = None) -> x509.Name:
    attributes = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, ORGANISATION)]
    if role is not None:
        attributes.append(x509.NameAttribute(ROLE_ATTRIBUTE, role))
    return x509.Name([*attributes, x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def subject_alt_names(cert: x509.Certificate) -> set[str]:
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return set()
    return {str(n) for n in san.get_values_for_type(x509.IPAddress)} | set(san.get_values_for_type(x509.DNSName))


class Pki:
    """The project's CA and the certificates it signs, in one directory."""

    def __init__(self, directory: Path = PKI_DIR, ca_name: str = f"{ORGANISATION} P4Runtime CA"):
        self.dir = Path(directory)
        self.ca_name = ca_name
        self.ca_cert_path = self.dir / "ca.pem"
        self.ca_key_path = self.dir / "ca.key"

    # -- paths ---------------------------------------------------------------

    def server_credentials(self, switch: str) -> ServerCredentials:
        return ServerCredentials(self.ca_cert_path, self.dir / "switches" / f"{switch}.pem",
                                 self.dir / "switches" / f"{switch}.key")

    def client_credentials(self, role: str = "controller") -> ClientCredentials:
        if role not in CLIENT_ROLES:
            raise PkiError(f"client role must be one of {', '.join(CLIENT_ROLES)}, got {role!r}")
        return ClientCredentials(self.ca_cert_path, self.dir / "clients" / f"{role}.pem",
                                 self.dir / "clients" / f"{role}.key")

    # -- making --------------------------------------------------------------

    def server(self, switch: str, *addresses: str) -> ServerCredentials:
        """Switch `switch`'s server credentials, for the addresses clients
        dial (an IP or a DNS name each; its name is added), made if needed."""
        creds = self.server_credentials(switch)
        with self._locked():
            ca_cert, ca_key = self._ca()
            names = sorted({switch, *addresses})
            self._leaf(creds.cert, creds.key, ca_cert, ca_key, _subject(switch), names,
                       ExtendedKeyUsageOID.SERVER_AUTH)
        return creds

    def client(self, role: str = "controller") -> ClientCredentials:
        """Client credentials of `role`, made if needed."""
        creds = self.client_credentials(role)
        with self._locked():
            ca_cert, ca_key = self._ca()
            self._leaf(creds.cert, creds.key, ca_cert, ca_key, _subject(f"fabric-{role}", role), [],
                       ExtendedKeyUsageOID.CLIENT_AUTH)
        return creds

    def ensure(self, switches: dict[str, list[str]]) -> dict[str, ServerCredentials]:
        """Server credentials of every switch ({name: addresses}) and every
        client role's credentials."""
        out = {name: self.server(name, *addresses) for name, addresses in switches.items()}
        for role in CLIENT_ROLES:
            self.client(role)
        return out

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        for d in (self.dir, self.dir / "switches", self.dir / "clients"):
            d.mkdir(parents=True, exist_ok=True)
        os.chmod(self.dir, 0o700)
        with open(self.dir / ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _ca(self) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
        if self.ca_cert_path.exists() and self.ca_key_path.exists():
            cert = x509.load_pem_x509_certificate(self.ca_cert_path.read_bytes())
            key = serialization.load_pem_private_key(self.ca_key_path.read_bytes(), None)
            fresh = cert.not_valid_after_utc - _now() > datetime.timedelta(days=RENEW_BEFORE_DAYS)
            if fresh and isinstance(key, ec.EllipticCurvePrivateKey) and _pair(key, cert):
                return cert, key
        key = _new_key()
        name = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, ORGANISATION),
                          x509.NameAttribute(NameOID.COMMON_NAME, self.ca_name)])
        now = _now()
        cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
                .serial_number(x509.random_serial_number())
                .not_valid_before(now - datetime.timedelta(minutes=5))
                .not_valid_after(now + datetime.timedelta(days=CA_DAYS))
                .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
                .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                             content_commitment=False, key_encipherment=False,
                                             data_encipherment=False, key_agreement=False, encipher_only=False,
                                             decipher_only=False), critical=True)
                .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
                .sign(key, hashes.SHA256()))
        _write(self.ca_key_path, _key_pem(key), private=True)
        _write(self.ca_cert_path, cert.public_bytes(serialization.Encoding.PEM))
        return cert, key

    def _leaf(self, cert_path: Path, key_path: Path, ca_cert: x509.Certificate, ca_key: ec.EllipticCurvePrivateKey,
              subject: x509.Name, names: list[str], usage: x509.ObjectIdentifier) -> None:
        if cert_path.exists() and key_path.exists() and \
                self._still_good(cert_path, key_path, ca_cert, subject, names):
            return
        key = _new_key()
        now = _now()
        builder = (x509.CertificateBuilder()
                   .subject_name(subject)
                   .issuer_name(ca_cert.subject).public_key(key.public_key())
                   .serial_number(x509.random_serial_number())
                   .not_valid_before(now - datetime.timedelta(minutes=5))
                   .not_valid_after(now + datetime.timedelta(days=LEAF_DAYS))
                   .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                   .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
                   .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                                  critical=False))
        if names:
            builder = builder.add_extension(x509.SubjectAlternativeName(_san_entries(names)), critical=False)
        cert = builder.sign(ca_key, hashes.SHA256())
        _write(key_path, _key_pem(key), private=True)
        _write(cert_path, cert.public_bytes(serialization.Encoding.PEM))

    @staticmethod
    def _still_good(cert_path: Path, key_path: Path, ca_cert: x509.Certificate, subject: x509.Name,
                    names: list[str]) -> bool:
        try:
            cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
            key = serialization.load_pem_private_key(key_path.read_bytes(), None)
            cert.verify_directly_issued_by(ca_cert)
        except (ValueError, TypeError, InvalidSignature):
            return False
        if not isinstance(key, ec.EllipticCurvePrivateKey) or not _pair(key, cert) or cert.subject != subject:
            return False
        if cert.not_valid_after_utc - _now() <= datetime.timedelta(days=RENEW_BEFORE_DAYS):
            return False
        return not names or subject_alt_names(cert) == set(names)
