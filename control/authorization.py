"""Who may do what on a switch's P4Runtime: the role a client certificate
names, and the policy table that says what each role may call.

BMv2 checks only that a client certificate chains to the project's CA, so on
its own every holder of one may write, push a pipeline or take primacy with
a higher election id. The authorizing proxy in front of each switch
(emulator/p4runtime_proxy.py) reads the role from the certificate the TLS
handshake verified (control/tls.py names it in the subject's OU) and asks
this module before it forwards an RPC or a stream message:

    policy = Policy.default(operator="read-only")
    role = policy.role_of(cert_pem, ca)           # Refused: another CA, no role, an unknown role
    policy.check_rpc(role, "Write")               # Refused: "role 'monitor' may not call Write ..."
    policy.check_stream_message(role, request)    # a StreamMessageRequest, for roles that may not be primary

The table (POLICY_TABLE below): `controller` may do everything; `monitor`
reads (Read, GetForwardingPipelineConfig, Capabilities) and keeps a
StreamChannel as a backup; `operator` is configured, full by default.

A read-only role's StreamChannel: its MasterArbitrationUpdate must leave the
election id unset or (0, 0), and it may send nothing else (no packet-out,
no digest ack: both act on the switch). P4Runtime says a client with an
unset election id never becomes primary; BMv2 treats unset as 0 and makes
the highest id connected primary, so a read-only client alone on a switch is
BMv2's primary with id 0 until any other client arbitrates. It still cannot
write (its Write and SetForwardingPipelineConfig are refused here by name),
and a controller with any id above 0 takes over from it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from p4.v1 import p4runtime_pb2

from control.tls import certificate_role

SERVICE = "p4.v1.P4Runtime"
READ_RPCS = frozenset({"Read", "GetForwardingPipelineConfig", "Capabilities", "StreamChannel"})
WRITE_RPCS = frozenset({"Write", "SetForwardingPipelineConfig"})
RPCS = READ_RPCS | WRITE_RPCS


class Refused(PermissionError):
    """What a client asked for and may not do; the message names the role and the RPC."""


@dataclass(frozen=True)
class Access:
    """What a role may do: the RPCs it may call, and whether on its
    StreamChannel it may ask for primacy (an election id above 0) and send
    packet-outs and digest acks."""
    name: str
    rpcs: frozenset[str]
    primary: bool


FULL = Access("full", RPCS, primary=True)
READ_ONLY = Access("read-only", READ_RPCS, primary=False)
ACCESS = {a.name: a for a in (FULL, READ_ONLY)}
DEFAULT_OPERATOR_ACCESS = "full"

# The policy: role -> access. The operator's entry is Policy.default's `operator`.
POLICY_TABLE: Mapping[str, Access] = {"controller": FULL, "monitor": READ_ONLY, "operator": FULL}


def check_access(name: str) -> str:
    if name not in ACCESS:
        raise ValueError(f"access must be one of {', '.join(ACCESS)}, got {name!r}")
    return name


class Policy:
    def __init__(self, table: Mapping[str, Access]):
        self.table = dict(table)
        self._roles: dict[bytes, str] = {}      # certificate PEM -> its role, once verified

    @classmethod
    def default(cls, operator: str = DEFAULT_OPERATOR_ACCESS) -> "Policy":
        """POLICY_TABLE with the operator's access `operator` (full or read-only)."""
        return cls({**POLICY_TABLE, "operator": ACCESS[check_access(operator)]})

    def role_of(self, cert_pem: bytes, ca: x509.Certificate) -> str:
        """The role `cert_pem` names, once it is known to be signed by `ca`
        and its role is in the table (remembered per certificate: the proxy
        asks on every RPC)."""
        role = self._roles.get(cert_pem)
        if role is not None:
            return role
        try:
            cert = x509.load_pem_x509_certificate(cert_pem)
        except ValueError:
            raise Refused("the client certificate cannot be read") from None
        try:
            cert.verify_directly_issued_by(ca)
        except (ValueError, TypeError, InvalidSignature):
            raise Refused(f"the client certificate {cert.subject.rfc4514_string()} is not signed by the "
                          "project's CA") from None
        role = certificate_role(cert)
        if role is None:
            raise Refused(f"the client certificate {cert.subject.rfc4514_string()} names no role "
                          f"(one OU of {', '.join(sorted(self.table))})")
        if role not in self.table:
            raise Refused(f"the client certificate names role {role!r}, which has no access "
                          f"(roles: {', '.join(sorted(self.table))})")
        self._roles[cert_pem] = role
        return role

    def allowed(self, role: str, rpc: str) -> bool:
        access = self.table.get(role)
        return access is not None and rpc in access.rpcs

    def check_rpc(self, role: str, rpc: str) -> None:
        if not self.allowed(role, rpc):
            access = self.table.get(role)
            what = f"{access.name} access" if access else "no access"
            raise Refused(f"role {role!r} may not call {rpc} ({what})")

    def may_be_primary(self, role: str) -> bool:
        access = self.table.get(role)
        return access is not None and access.primary

    def check_stream_message(self, role: str, request: p4runtime_pb2.StreamMessageRequest) -> None:
        """A message on `role`'s StreamChannel: refused unless the role may be
        primary, or it is an arbitration with the election id unset or 0."""
        if self.may_be_primary(role):
            return
        kind = request.WhichOneof("update")
        if kind == "arbitration":
            eid = request.arbitration.election_id
            if eid.high == 0 and eid.low == 0:
                return
            raise Refused(f"role {role!r} may not ask for primacy on StreamChannel (election id "
                          f"({eid.high},{eid.low}); a backup's is unset or 0)")
        raise Refused(f"role {role!r} may not send {kind or 'an empty message'} on StreamChannel")

