"""One P4Runtime connection to one switch.

Built on p4runtime-shell's client class (arbitration stream, Write, Read),
with what a multi-switch controller needs on top: a clean error when the
switch is unreachable, an idempotent pipeline push (a cookie identifies the
pipeline, so pushing the same one again keeps the switch's state), and
batched writes whose errors name each failed update.

Security: the channel is mutual TLS by default (the switch's certificate
checked against the project's CA, this client's presented), plain gRPC when
`credentials` is None; a switch that accepts the TCP connection but never
completes the channel is reported as a TLS mismatch, not as absent.

Primacy: of the clients connected to a switch, the one with the highest
election id is primary and alone may write. The controller's default,
CONTROLLER_ELECTION_ID, is above what tools use when not told otherwise
(p4runtime-shell: (1, 0)), so reading a switch with one does not demote the
controller; read-only clients of the project connect with READER_ELECTION_ID
(a backup below any controller). The switch tells every client when the
primary changes (a MasterArbitrationUpdate on the stream): a connection
that loses primacy logs it at once, remembers who took over, and refuses
writes with an error saying so rather than sending them.
"""
from __future__ import annotations

import functools
import hashlib
import logging
import queue
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

import grpc
from google.protobuf import text_format
from p4.config.v1 import p4info_pb2
from p4.v1 import p4runtime_pb2
from p4runtime_sh.p4runtime import P4RuntimeClient, P4RuntimeException, P4RuntimeWriteException, SSLOptions

from control.tls import ClientCredentials, Pki, PkiError

UPDATE_TYPE = p4runtime_pb2.Update
ElectionId = tuple[int, int]
CONTROLLER_ELECTION_ID: ElectionId = (1000, 0)   # (high, low): above p4runtime-shell's default (1, 0)
READER_ELECTION_ID: ElectionId = (0, 0)          # read-only clients: a backup below every controller
# The certificates the project's clients present (control/tls.py; the launcher makes them in build/pki).
CONTROLLER_CREDENTIALS = Pki().client_credentials("controller")
MONITOR_CREDENTIALS = Pki().client_credentials("monitor")

log = logging.getLogger(__name__)

# gRPC waits 1 s before trying a refused address again, then 1.6 times longer each time: a switch launched a
# moment before refuses the first attempt, so each bring-up waited about a second more for its switches than
# they took to listen (2.6 s where one was not up after the first retry). Retried every 50 ms, at most 250.
CONNECT_OPTIONS = [("grpc.initial_reconnect_backoff_ms", 50), ("grpc.max_reconnect_backoff_ms", 250)]


def parse_election_id(text: str) -> ElectionId:
    """"HIGH,LOW" or "HIGH" (low 0) -> (high, low); a clear error otherwise."""
    parts = text.split(",")
    try:
        values = tuple(int(p, 0) for p in parts)
    except ValueError:
        raise ValueError(f"election id {text!r}: expected HIGH,LOW (two integers)") from None
    if len(values) == 1:
        values = (values[0], 0)
    if len(values) != 2 or not all(0 <= v < 2 ** 64 for v in values):
        raise ValueError(f"election id {text!r}: expected HIGH,LOW, each 0..2^64-1")
    return values[0], values[1]


class SwitchError(RuntimeError):
    pass


@dataclass(frozen=True)
class Pipeline:
    """A compiled P4 program: BMv2 JSON and P4Info, as `make build` writes them."""
    bmv2_json: Path
    p4info_txt: Path

    def p4info(self) -> p4info_pb2.P4Info:
        """The P4Info, a copy of its one parse per file version (parsing the
        text is 0.13 s: 2.7 s of programming fat-tree-k4's 20 switches)."""
        info = p4info_pb2.P4Info()
        info.CopyFrom(_parsed_p4info(self.p4info_txt, *_version(self.p4info_txt)))
        return info

    def cookie(self) -> int:
        return _cookie(self.bmv2_json, self.p4info_txt, *_version(self.bmv2_json), *_version(self.p4info_txt))


def _version(path: Path) -> tuple[int, int]:
    """What changes when a file is rewritten: its modification time and size."""
    st = path.stat()
    return st.st_mtime_ns, st.st_size


@functools.lru_cache(maxsize=8)
def _parsed_p4info(path: Path, *_version: int) -> p4info_pb2.P4Info:
    info = p4info_pb2.P4Info()
    text_format.Parse(path.read_text(), info)
    return info


@functools.lru_cache(maxsize=8)
def _cookie(bmv2_json: Path, p4info_txt: Path, *_versions: int) -> int:
    digest = hashlib.sha256(bmv2_json.read_bytes() + p4info_txt.read_bytes()).digest()
    return int.from_bytes(digest[:8], "big")


class _ArbitrationQueue(queue.Queue):
    """The stream's arbitration messages, each also handed to a callback as
    it arrives (the stream thread calls put)."""

    def __init__(self, on_message: Callable[[p4runtime_pb2.StreamMessageResponse], None]):
        super().__init__()
        self.on_message = on_message

    def put(self, item, block=True, timeout=None):
        if item is not None:
            self.on_message(item)
        super().put(item, block, timeout)


class _Client(P4RuntimeClient):
    """p4runtime-shell's client, keeping the arbitration answer (its own
    handshake only prints it, and exits the process when none comes), and
    reporting every later arbitration message to `on_arbitration`."""

    def __init__(self, device_id: int, grpc_addr: str, election_id: ElectionId,
                 on_arbitration: Callable[[p4runtime_pb2.StreamMessageResponse], None],
                 credentials: ClientCredentials | None):
        self.on_arbitration = on_arbitration
        ssl = SSLOptions(True) if credentials is None else \
            SSLOptions(False, str(credentials.ca), str(credentials.cert), str(credentials.key))
        super().__init__(device_id, grpc_addr, election_id, ssl_options=ssl)

    def handshake(self):
        # (set_up_stream calls this; nothing arrives before the request below.)
        self.stream_in_q["arbitration"] = _ArbitrationQueue(self.on_arbitration)
        req = p4runtime_pb2.StreamMessageRequest()
        req.arbitration.device_id = self.device_id
        req.arbitration.election_id.high, req.arbitration.election_id.low = self.election_id
        self.stream_out_q.put(req)
        rep = self.get_stream_packet("arbitration", timeout=2)
        if rep is None:
            self.tear_down()
            raise SwitchError(f"device {self.device_id}: no arbitration answer")
        self.primary = rep.arbitration.status.code == 0


class SwitchConnection:
    """reader: a read-only client (the exporter): it never writes, and its
    primacy, which it may get while no controller is connected, is not news."""

    def __init__(self, name: str, grpc_addr: str, device_id: int,
                 election_id: ElectionId = CONTROLLER_ELECTION_ID, connect_timeout: float = 10.0,
                 reader: bool = False, credentials: ClientCredentials | None = CONTROLLER_CREDENTIALS):
        self.name = name
        self.grpc_addr = grpc_addr
        self.device_id = device_id
        self.credentials = credentials
        self._wait_for_channel(connect_timeout)
        self.election_id = election_id
        self.reader = reader
        self._primary = False
        self._handshaking = True          # the first answer is not news
        self.primary_election_id: ElectionId | None = None   # the switch's primary, as last announced
        self.demotions = 0                # times this connection lost primacy
        self._client: _Client | None = _Client(device_id, grpc_addr, election_id, self._arbitration, credentials)
        self._primary = self.client.primary
        self._handshaking = False

    def _wait_for_channel(self, timeout: float) -> None:
        if self.credentials is None:
            channel = grpc.insecure_channel(self.grpc_addr, options=CONNECT_OPTIONS)
        else:
            try:
                ca, cert, key = self.credentials.read()
            except PkiError as exc:
                absent = "" if self._listening() else f"no P4Runtime server at {self.grpc_addr}, and "
                raise SwitchError(f"{self.name}: {absent}{exc}") from None
            channel = grpc.secure_channel(self.grpc_addr, grpc.ssl_channel_credentials(ca, key, cert),
                                          options=CONNECT_OPTIONS)
        try:
            grpc.channel_ready_future(channel).result(timeout=timeout)
        except grpc.FutureTimeoutError:
            if not self._listening():
                raise SwitchError(f"{self.name}: no P4Runtime server at {self.grpc_addr} after {timeout:.0f}s") from None
            if self.credentials is None:
                raise SwitchError(f"{self.name}: {self.grpc_addr} accepts connections but no plain-gRPC channel came "
                                  f"up in {timeout:.0f}s: the switch runs TLS (drop --no-tls) or is still starting") from None
            raise SwitchError(f"{self.name}: {self.grpc_addr} accepts connections but the TLS channel did not come up in "
                              f"{timeout:.0f}s: the switch runs without TLS (use --no-tls), or its certificate is not "
                              f"from the CA in {self.credentials.ca}, or it refused {self.credentials.cert}") from None
        finally:
            channel.close()

    def _listening(self) -> bool:
        """Whether something accepts TCP connections at the P4Runtime address."""
        host, port = self.grpc_addr.rsplit(":", 1)
        try:
            socket.create_connection((host, int(port)), timeout=1).close()
        except OSError:
            return False
        return True

    @property
    def client(self) -> _Client:
        """The P4Runtime client; a closed connection says so."""
        if self._client is None:
            raise SwitchError(f"{self.name}: the P4Runtime connection is closed")
        return self._client

    def _arbitration(self, msg: p4runtime_pb2.StreamMessageResponse) -> None:
        """An arbitration message (stream thread): who is primary now."""
        primary = msg.arbitration.status.code == 0
        eid = msg.arbitration.election_id
        self.primary_election_id = (eid.high, eid.low) if msg.arbitration.HasField("election_id") else None
        was = self._primary
        # Log (and count) before the new state shows: whoever sees is_primary() change also finds the log line.
        if not (self._handshaking or self.reader):
            if was and not primary:
                self.demotions += 1
                log.error("%s: this controller (election id %s) is no longer primary: a client with election id "
                          "%s took over; writes to %s are refused until it leaves", self.name,
                          _show(self.election_id), _show(self.primary_election_id), self.name)
            elif primary and not was:
                log.warning("%s: this controller (election id %s) is primary again", self.name,
                            _show(self.election_id))
        self._primary = primary

    def is_primary(self) -> bool:
        """Whether this connection is the switch's primary controller now
        (the switch tells every controller when the primary changes)."""
        while self.client.get_stream_packet("arbitration", timeout=0) is not None:
            pass                          # already seen by _arbitration
        return self._primary

    def close(self) -> None:
        if self._client is not None:
            self._client.tear_down()
            self._client = None

    def __enter__(self) -> "SwitchConnection":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- pipeline ---------------------------------------------------------

    def installed_cookie(self) -> int | None:
        req = p4runtime_pb2.GetForwardingPipelineConfigRequest(
            device_id=self.device_id,
            response_type=p4runtime_pb2.GetForwardingPipelineConfigRequest.COOKIE_ONLY)
        try:
            reply = self.client.stub.GetForwardingPipelineConfig(req)
        except grpc.RpcError as exc:
            if exc.code() == grpc.StatusCode.FAILED_PRECONDITION:  # no pipeline yet
                return None
            raise SwitchError(f"{self.name}: cannot read pipeline config: {exc.details()}") from None
        return reply.config.cookie.cookie if reply.config.HasField("cookie") else None

    def push_pipeline(self, pipeline: Pipeline, force: bool = False) -> bool:
        """Install the pipeline unless the same one is installed; True if pushed."""
        cookie = pipeline.cookie()
        if not force and self.installed_cookie() == cookie:
            return False
        req = p4runtime_pb2.SetForwardingPipelineConfigRequest(
            device_id=self.device_id,
            action=p4runtime_pb2.SetForwardingPipelineConfigRequest.VERIFY_AND_COMMIT)
        req.election_id.high, req.election_id.low = self.client.election_id
        req.config.p4info.CopyFrom(pipeline.p4info())
        req.config.p4_device_config = pipeline.bmv2_json.read_bytes()
        req.config.cookie.cookie = cookie
        try:
            self.client.stub.SetForwardingPipelineConfig(req)
        except grpc.RpcError as exc:
            raise SwitchError(f"{self.name}: pipeline push rejected: {exc.details()}") from None
        return True

    # -- read / write -----------------------------------------------------

    def read(self, entities: Iterable[p4runtime_pb2.Entity]) -> list[p4runtime_pb2.Entity]:
        req = p4runtime_pb2.ReadRequest(device_id=self.device_id)
        req.entities.extend(entities)
        out: list[p4runtime_pb2.Entity] = []
        try:
            for reply in self.client.stub.Read(req):
                out.extend(reply.entities)
        except grpc.RpcError as exc:
            raise SwitchError(f"{self.name}: read failed: {P4RuntimeException(exc)}") from None
        return out

    def write(self, updates: list[p4runtime_pb2.Update]) -> None:
        if not updates:
            return
        if self.reader:
            raise SwitchError(f"{self.name}: a read-only connection does not write")
        if not self.is_primary():
            raise SwitchError(f"{self.name}: not the primary controller (our election id "
                              f"{_show(self.election_id)}, the primary's {_show(self.primary_election_id)}): "
                              f"write of {len(updates)} update(s) refused")
        req = p4runtime_pb2.WriteRequest(device_id=self.device_id)
        req.updates.extend(updates)
        try:
            self.client.write(req)
        except P4RuntimeWriteException as exc:
            raise SwitchError(f"{self.name}: write failed: {exc}") from None
        except P4RuntimeException as exc:
            raise SwitchError(f"{self.name}: write failed: {exc}") from None
        except grpc.RpcError as exc:          # e.g. PERMISSION_DENIED: this controller is not primary
            raise SwitchError(f"{self.name}: write refused: {exc.code().name}: {exc.details()}") from None

    def counter(self, *entries: p4runtime_pb2.CounterEntry) -> dict[int, tuple[int, int]]:
        """Read counter cells, `entries` in one request: index -> (packets, bytes)."""
        cells = {}
        for e in self.read([p4runtime_pb2.Entity(counter_entry=entry) for entry in entries]):
            c = e.counter_entry
            cells[c.index.index] = (c.data.packet_count, c.data.byte_count)
        return cells

    def direct_counters(self, table_id: int) -> list[tuple[p4runtime_pb2.TableEntry, int]]:
        """Every entry of a table with its direct counter's packets."""
        query = p4runtime_pb2.TableEntry(table_id=table_id, counter_data=p4runtime_pb2.CounterData())
        return [(e.table_entry, e.table_entry.counter_data.packet_count)
                for e in self.read([p4runtime_pb2.Entity(table_entry=query)])
                if not e.table_entry.is_default_action]


def _show(election_id: ElectionId | None) -> str:
    return "unknown" if election_id is None else f"({election_id[0]},{election_id[1]})"


def update(kind: int, **entity) -> p4runtime_pb2.Update:
    """update(INSERT, table_entry=te) -> Update."""
    return p4runtime_pb2.Update(type=kind, entity=p4runtime_pb2.Entity(**entity))
