"""One P4Runtime connection to one switch.

Built on p4runtime-shell's client class (arbitration stream, Write, Read),
with what a multi-switch controller needs on top: a clean error when the
switch is unreachable, an idempotent pipeline push (a cookie identifies the
pipeline, so pushing the same one again keeps the switch's state), and
batched writes whose errors name each failed update.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import grpc
from google.protobuf import text_format
from p4.config.v1 import p4info_pb2
from p4.v1 import p4runtime_pb2
from p4runtime_sh.p4runtime import P4RuntimeClient, P4RuntimeException, P4RuntimeWriteException

UPDATE_TYPE = p4runtime_pb2.Update


class SwitchError(RuntimeError):
    pass


@dataclass(frozen=True)
class Pipeline:
    """A compiled P4 program: BMv2 JSON and P4Info, as `make build` writes them."""
    bmv2_json: Path
    p4info_txt: Path

    def p4info(self) -> p4info_pb2.P4Info:
        info = p4info_pb2.P4Info()
        text_format.Parse(self.p4info_txt.read_text(), info)
        return info

    def cookie(self) -> int:
        digest = hashlib.sha256(self.bmv2_json.read_bytes() + self.p4info_txt.read_bytes()).digest()
        return int.from_bytes(digest[:8], "big")


class _Client(P4RuntimeClient):
    """p4runtime-shell's client, keeping the arbitration answer (its own
    handshake only prints it, and exits the process when none comes)."""

    def handshake(self):
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
    def __init__(self, name: str, grpc_addr: str, device_id: int,
                 election_id: tuple[int, int] = (0, 1), connect_timeout: float = 10.0):
        self.name = name
        self.grpc_addr = grpc_addr
        self.device_id = device_id
        channel = grpc.insecure_channel(grpc_addr)
        try:
            grpc.channel_ready_future(channel).result(timeout=connect_timeout)
        except grpc.FutureTimeoutError:
            raise SwitchError(f"{name}: no P4Runtime server at {grpc_addr} after {connect_timeout:.0f}s") from None
        finally:
            channel.close()
        self.election_id = election_id
        self._client: _Client | None = _Client(device_id, grpc_addr, election_id)
        self._primary = self.client.primary

    @property
    def client(self) -> _Client:
        """The P4Runtime client; a closed connection says so."""
        if self._client is None:
            raise SwitchError(f"{self.name}: the P4Runtime connection is closed")
        return self._client

    def is_primary(self) -> bool:
        """Whether this connection is the switch's primary controller now
        (the switch tells every controller when the primary changes)."""
        while True:
            rep = self.client.get_stream_packet("arbitration", timeout=0)
            if rep is None:
                return self._primary
            self._primary = rep.arbitration.status.code == 0

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

    def counter(self, entry: p4runtime_pb2.CounterEntry) -> dict[int, tuple[int, int]]:
        """Read counter cells: index -> (packets, bytes)."""
        cells = {}
        for e in self.read([p4runtime_pb2.Entity(counter_entry=entry)]):
            c = e.counter_entry
            cells[c.index.index] = (c.data.packet_count, c.data.byte_count)
        return cells

    def direct_counters(self, table_id: int) -> list[tuple[p4runtime_pb2.TableEntry, int]]:
        """Every entry of a table with its direct counter's packets."""
        query = p4runtime_pb2.TableEntry(table_id=table_id, counter_data=p4runtime_pb2.CounterData())
        return [(e.table_entry, e.table_entry.counter_data.packet_count)
                for e in self.read([p4runtime_pb2.Entity(table_entry=query)])
                if not e.table_entry.is_default_action]


def update(kind: int, **entity) -> p4runtime_pb2.Update:
    """update(INSERT, table_entry=te) -> Update."""
    return p4runtime_pb2.Update(type=kind, entity=p4runtime_pb2.Entity(**entity))
