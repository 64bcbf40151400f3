"""The authorizing P4Runtime proxy: one process in front of every switch of
a network, enforcing control/authorization.py's policy per RPC.

    python -m emulator.p4runtime_proxy CONFIG.json

For each switch it listens on the switch's public P4Runtime address (what
clients dial; mutual TLS with the switch's own certificate, a client
certificate from the project's CA required), reads the client's role from
the certificate the handshake verified, and forwards what the role may do to
BMv2, which listens on a unix socket in a 0700 directory (plain gRPC: only
the proxy's user reaches it). A refused RPC or stream message ends with
PERMISSION_DENIED naming the switch, the role and the RPC, and never reaches
BMv2.

Forwarding keeps bytes as bytes (generic handlers, no (de)serialisers):
only the StreamChannel messages of a role that may not be primary are
parsed, to check them. StreamChannel is proxied both ways (arbitration,
packet-in/out, digests); when either side ends it, the other is ended too,
so BMv2 drops a client's arbitration when the client goes. Errors from BMv2
come back with their code, details and trailing metadata (a Write's
per-update errors).

One asyncio loop serves every switch (a gRPC server per switch, since the
address a call came to picks the backend). A switch's public address opens
once its BMv2 answers on the socket, as BMv2's own address did. The network
launcher (emulator/network.py) writes the config and starts the process.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import logging
import signal
import socket
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import AsyncIterator

import grpc
from cryptography import x509
from p4.v1 import p4runtime_pb2

from control.authorization import DEFAULT_OPERATOR_ACCESS, SERVICE, Policy, Refused

REPO = Path(__file__).resolve().parent.parent
UNARY_RPCS = ("Write", "SetForwardingPipelineConfig", "GetForwardingPipelineConfig", "Capabilities")
# A pipeline push carries BMv2's JSON (2.2 MB for main.p4): no size limit either way, as BMv2 has none.
MESSAGE_OPTIONS = [("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1)]
BACKEND_OPTIONS = MESSAGE_OPTIONS + [("grpc.initial_reconnect_backoff_ms", 50),
                                     ("grpc.max_reconnect_backoff_ms", 250)]
STOP_GRACE_S = 0.5

log = logging.getLogger("p4runtime_proxy")


@dataclass(frozen=True)
class ProxiedSwitch:
    name: str
    address: str        # public, host:port: mutual TLS
    backend: str        # BMv2's P4Runtime, unix:PATH (plain gRPC)
    cert: str           # the switch's server certificate and key (control/tls.py)
    key: str


@dataclass(frozen=True)
class ProxyConfig:
    ca: str
    switches: tuple[ProxiedSwitch, ...]
    operator: str = DEFAULT_OPERATOR_ACCESS     # the operator's access (control/authorization.py)

    def write(self, path: Path) -> Path:
        path.write_text(json.dumps(asdict(self), indent=1))
        return path

    @classmethod
    def read(cls, path: Path) -> "ProxyConfig":
        raw = json.loads(Path(path).read_text())
        return cls(raw["ca"], tuple(ProxiedSwitch(**s) for s in raw["switches"]), raw["operator"])


def proxy_command(config: Path) -> list[str]:
    """The proxy's command line (run with cwd REPO: this checkout's modules)."""
    return [sys.executable, "-m", "emulator.p4runtime_proxy", str(config)]


def backend_address(socket_dir: Path, switch: str) -> str:
    return f"unix:{socket_dir / f'{switch}.sock'}"


def backend_answers(backend: str) -> bool:
    """Whether something accepts connections on a unix:PATH backend."""
    with socket.socket(socket.AF_UNIX) as s:
        try:
            s.connect(backend.removeprefix("unix:"))
        except OSError:
            return False
    return True


def _trailing(exc: grpc.aio.AioRpcError) -> tuple:
    return tuple(exc.trailing_metadata() or ())


class SwitchProxy(grpc.GenericRpcHandler):
    """One switch's public address, forwarding to its BMv2."""

    def __init__(self, switch: ProxiedSwitch, ca_pem: bytes, policy: Policy):
        self.switch = switch
        self.ca_pem = ca_pem
        self.ca = x509.load_pem_x509_certificate(ca_pem)
        self.policy = policy
        self.channel: grpc.aio.Channel | None = None
        self.server: grpc.aio.Server | None = None
        self._handlers = {f"/{SERVICE}/{rpc}": grpc.unary_unary_rpc_method_handler(self._unary(rpc))
                          for rpc in UNARY_RPCS}
        self._handlers[f"/{SERVICE}/Read"] = grpc.unary_stream_rpc_method_handler(self._read)
        self._handlers[f"/{SERVICE}/StreamChannel"] = grpc.stream_stream_rpc_method_handler(self._stream_channel)

    def service(self, handler_call_details):
        return self._handlers.get(handler_call_details.method)

    async def start(self) -> None:
        """Wait for BMv2 on the backend, then listen on the public address."""
        t0 = time.monotonic()
        self.channel = grpc.aio.insecure_channel(self.switch.backend, options=BACKEND_OPTIONS)
        await self.channel.channel_ready()
        self._calls = {rpc: self.channel.unary_unary(f"/{SERVICE}/{rpc}") for rpc in UNARY_RPCS}
        self._read_call = self.channel.unary_stream(f"/{SERVICE}/Read")
        self._stream_call = self.channel.stream_stream(f"/{SERVICE}/StreamChannel")
        self.server = grpc.aio.server(options=MESSAGE_OPTIONS)
        self.server.add_generic_rpc_handlers((self,))
        creds = grpc.ssl_server_credentials([(Path(self.switch.key).read_bytes(), Path(self.switch.cert).read_bytes())],
                                            root_certificates=self.ca_pem, require_client_auth=True)
        self.server.add_secure_port(self.switch.address, creds)
        await self.server.start()
        log.info("%s: %s -> %s (BMv2 answered after %.2f s)", self.switch.name, self.switch.address,
                 self.switch.backend, time.monotonic() - t0)

    async def stop(self) -> None:
        if self.server is not None:
            await self.server.stop(STOP_GRACE_S)
        if self.channel is not None:
            await self.channel.close()

    async def _authorize(self, context: grpc.aio.ServicerContext, rpc: str) -> str:
        """The caller's role if it may call `rpc`; otherwise the call ends with PERMISSION_DENIED."""
        pem = context.auth_context().get("x509_pem_cert")
        try:
            try:
                role = self.policy.role_of(pem[0] if pem else b"", self.ca)
            except Refused as exc:
                raise Refused(f"{rpc} refused: {exc}") from None
            self.policy.check_rpc(role, rpc)
            return role
        except Refused as exc:
            log.warning("%s: %s (peer %s)", self.switch.name, exc, context.peer())
            await context.abort(grpc.StatusCode.PERMISSION_DENIED, f"{self.switch.name}: {exc}")
            raise                                # (abort raised already: the call ended there)

    def _unary(self, rpc: str):
        async def forward(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
            await self._authorize(context, rpc)
            try:
                return await self._calls[rpc](request, timeout=context.time_remaining())
            except grpc.aio.AioRpcError as exc:
                await context.abort(exc.code(), exc.details() or "", _trailing(exc))
                raise                            # (abort raised already: BMv2's status went back)
        return forward

    async def _read(self, request: bytes, context: grpc.aio.ServicerContext) -> AsyncIterator[bytes]:
        await self._authorize(context, "Read")
        call = self._read_call(request, timeout=context.time_remaining())
        try:
            async for reply in call:
                yield reply
        except grpc.aio.AioRpcError as exc:
            await context.abort(exc.code(), exc.details() or "", _trailing(exc))
        finally:
            call.cancel()

    async def _stream_channel(self, requests: AsyncIterator[bytes],
                              context: grpc.aio.ServicerContext) -> AsyncIterator[bytes]:
        role = await self._authorize(context, "StreamChannel")
        checked = not self.policy.may_be_primary(role)
        call = self._stream_call()
        refusal: list[Refused] = []

        async def upstream() -> None:
            try:
                async for raw in requests:
                    if checked:
                        try:
                            self.policy.check_stream_message(role, p4runtime_pb2.StreamMessageRequest.FromString(raw))
                        except Refused as exc:
                            refusal.append(exc)
                            call.cancel()        # before the message reaches BMv2
                            return
                    await call.write(raw)
                await call.done_writing()
            except (grpc.aio.AioRpcError, asyncio.InvalidStateError):
                pass                             # BMv2 ended the stream: the replies below say how

        sending = asyncio.create_task(upstream())
        try:
            try:
                async for reply in call:
                    yield reply
            except asyncio.CancelledError:
                if not refusal:
                    raise                         # the client went
            except grpc.aio.AioRpcError as exc:
                if not refusal:
                    await context.abort(exc.code(), exc.details() or "", _trailing(exc))
            if refusal:
                log.warning("%s: %s (peer %s)", self.switch.name, refusal[0], context.peer())
                await context.abort(grpc.StatusCode.PERMISSION_DENIED, f"{self.switch.name}: {refusal[0]}")
        finally:
            call.cancel()
            sending.cancel()


async def serve(config: ProxyConfig) -> None:
    """Serve every switch of `config` until SIGTERM or SIGINT."""
    ca_pem = Path(config.ca).read_bytes()
    policy = Policy.default(config.operator)
    proxies = [SwitchProxy(sw, ca_pem, policy) for sw in config.switches]
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    log.info("roles: %s", ", ".join(f"{role} {access.name}" for role, access in sorted(policy.table.items())))
    stopping = asyncio.create_task(stop.wait())
    starting: set[asyncio.Task] = {asyncio.create_task(p.start()) for p in proxies}
    try:
        while starting and not stop.is_set():
            done, starting = await asyncio.wait(starting | {stopping}, return_when=asyncio.FIRST_COMPLETED)
            starting.discard(stopping)
            for task in done - {stopping}:
                task.result()                    # a public address that cannot be bound ends the proxy
        await stop.wait()
    finally:
        for task in starting:
            task.cancel()
        await asyncio.gather(*(p.stop() for p in proxies), return_exceptions=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m emulator.p4runtime_proxy", description=__doc__.split("\n\n")[0])
    ap.add_argument("config", type=Path, help="the proxy's config (JSON, written by emulator/network.py)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", stream=sys.stdout)
    try:
        asyncio.run(serve(ProxyConfig.read(args.config)))
    except (OSError, RuntimeError, ValueError) as exc:
        log.error("%s", exc)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
