"""Kathara's network plugin, as a Docker network driver of the project's own.

Kathara (Docker backend) gives every collision domain a Docker network whose
driver is its plugin `kathara/katharanp_vde:<arch>`, which it otherwise pulls
from Docker Hub. scripts/test_kathara.sh registers this driver under that name
(`docker plugin create`), so a lab starts where no registry is reachable.
Why not Kathara's own plugin (Go, KatharaFramework/NetworkPlugin): building it
needs Go modules from the network, and this machine reaches no Go proxy.

What it does, per Docker's remote network driver protocol (JSON over HTTP on a
unix socket; docs.docker.com/engine/extend/plugins_network):
- a network (collision domain) is a Linux bridge `kt-<network id>` in the
  host's namespace, down to no IP and no STP;
- an endpoint (a device's interface) is a veth pair: Docker moves its inner
  end into the device's namespace as eth<i> (in the order Kathara connects
  them), with the MAC Kathara asks for (`kathara.mac_addr`); the outer end is
  a port of the bridge;
- a collision domain with exactly two devices (every fabric link) joins their
  outer ends with tc mirred redirects both ways, ahead of the bridge: every
  frame crosses, as on `fabric run`'s veth pairs, PFC pause frames
  (01:80:c2:00:00:01) included, which a Linux bridge never forwards. With a
  third device the domain is the bridge alone.

No state survives the driver: names derive from Docker's ids, and what a
request needs is read back from the kernel (`ip -j link`).

    python3 network_driver.py [--socket /run/docker/plugins/katharanp.sock]
"""
from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import socketserver
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler
from typing import Any, Callable

SOCKET = "/run/docker/plugins/katharanp.sock"
CONTENT_TYPE = "application/vnd.docker.plugins.v1.2+json"
MAC_OPTION = "kathara.mac_addr"
BRIDGE_PREFIX = "kt-"          # + 12 hex digits of the network id (15 characters, IFNAMSIZ - 1)
VETH_PREFIX = "kv"             # + 12 hex digits of the endpoint id + "o" (outer) or "i" (inner)

log = logging.getLogger("katharanp")

Runner = Callable[[list[str]], str]


class DriverError(Exception):
    """A request the driver refuses: its message goes back to Docker as Err."""


def run_command(argv: list[str]) -> str:
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode != 0:
        raise DriverError(f"{' '.join(argv)}: {done.stderr.strip() or f'exit {done.returncode}'}")
    return done.stdout


def bridge_name(network_id: str) -> str:
    return BRIDGE_PREFIX + network_id[:12]


def veth_names(endpoint_id: str) -> tuple[str, str]:
    """(outer, inner) ends of an endpoint's veth pair."""
    return VETH_PREFIX + endpoint_id[:12] + "o", VETH_PREFIX + endpoint_id[:12] + "i"


def derived_mac(network_id: str, endpoint_id: str) -> str:
    """A locally administered unicast MAC for an endpoint Kathara gave none."""
    digest = hashlib.sha256(f"{network_id}-{endpoint_id}".encode()).digest()
    return ":".join(f"{b:02x}" for b in (0x02, *digest[:5]))


def valid_mac(mac: str) -> bool:
    parts = mac.split(":")
    return len(parts) == 6 and all(len(p) == 2 and all(c in "0123456789abcdefABCDEF" for c in p) for p in parts)


class Driver:
    """The network driver's requests, each a method named after its endpoint."""

    def __init__(self, run: Runner = run_command) -> None:
        self.run = run
        self.lock = threading.Lock()   # one request changes the kernel at a time

    # -- kernel state -------------------------------------------------------------
    def _links(self, *args: str) -> list[dict[str, Any]]:
        out = self.run(["ip", "-j", "link", "show", *args])
        return json.loads(out) if out.strip() else []

    def _exists(self, name: str) -> bool:
        return any(link.get("ifname") == name for link in self._links())

    def _ports(self, bridge: str) -> list[str]:
        """The outer veth ends in `bridge`, by name."""
        return sorted(link["ifname"] for link in self._links("master", bridge))

    def _pair_up(self, bridge: str) -> None:
        """Mirred redirects between a two-port domain's ends; none otherwise."""
        ports = self._ports(bridge)
        for port in ports:
            self.run(["tc", "qdisc", "replace", "dev", port, "handle", "ffff:", "ingress"])
            self.run(["tc", "filter", "del", "dev", port, "parent", "ffff:"])
        if len(ports) == 2:
            for src, dst in (ports, ports[::-1]):
                # u32 matching every frame (matchall is not in every kernel)
                self.run(["tc", "filter", "add", "dev", src, "parent", "ffff:", "protocol", "all", "u32",
                          "match", "u32", "0", "0", "action", "mirred", "egress", "redirect", "dev", dst])

    # -- the protocol ---------------------------------------------------------------
    def activate(self, _req: dict) -> dict:
        return {"Implements": ["NetworkDriver"]}

    def get_capabilities(self, _req: dict) -> dict:
        return {"Scope": "local", "ConnectivityScope": "local"}

    def create_network(self, req: dict) -> dict:
        bridge = bridge_name(req["NetworkID"])
        with self.lock:
            if not self._exists(bridge):
                self.run(["ip", "link", "add", bridge, "type", "bridge", "stp_state", "0"])
            self.run(["ip", "link", "set", bridge, "up"])
        return {}

    def delete_network(self, req: dict) -> dict:
        bridge = bridge_name(req["NetworkID"])
        with self.lock:
            if self._exists(bridge):
                self.run(["ip", "link", "del", bridge])
        return {}

    def create_endpoint(self, req: dict) -> dict:
        options = req.get("Options") or {}
        mac = options.get(MAC_OPTION)
        given = (req.get("Interface") or {}).get("MacAddress")
        if mac is not None and not valid_mac(str(mac)):
            raise DriverError(f"{MAC_OPTION}: {mac!r} is not a MAC address (xx:xx:xx:xx:xx:xx)")
        outer, inner = veth_names(req["EndpointID"])
        mac = str(mac or given or derived_mac(req["NetworkID"], req["EndpointID"]))
        with self.lock:
            if not self._exists(outer):
                self.run(["ip", "link", "add", outer, "type", "veth", "peer", "name", inner])
            self.run(["ip", "link", "set", inner, "address", mac])
        # Docker takes the MAC from the response only when it chose none itself.
        return {} if given else {"Interface": {"MacAddress": mac}}

    def endpoint_oper_info(self, req: dict) -> dict:
        outer, _ = veth_names(req["EndpointID"])
        return {"Value": {"veth_outside": outer}}

    def delete_endpoint(self, req: dict) -> dict:
        outer, _ = veth_names(req["EndpointID"])
        with self.lock:
            if self._exists(outer):
                self.run(["ip", "link", "del", outer])
        return {}

    def join(self, req: dict) -> dict:
        bridge = bridge_name(req["NetworkID"])
        outer, inner = veth_names(req["EndpointID"])
        with self.lock:
            if not self._exists(bridge):
                raise DriverError(f"network {req['NetworkID'][:12]} has no bridge {bridge}: was it created?")
            self.run(["ip", "link", "set", outer, "master", bridge])
            self.run(["ip", "link", "set", outer, "up"])
            self._pair_up(bridge)
        return {"InterfaceName": {"SrcName": inner, "DstPrefix": "eth"}, "DisableGatewayService": True}

    def leave(self, req: dict) -> dict:
        bridge = bridge_name(req["NetworkID"])
        outer, _ = veth_names(req["EndpointID"])
        with self.lock:
            if self._exists(outer):
                self.run(["ip", "link", "del", outer])
            if self._exists(bridge):
                self._pair_up(bridge)
        return {}

    def nothing(self, _req: dict) -> dict:
        return {}

    def handlers(self) -> dict[str, Callable[[dict], dict]]:
        return {
            "/Plugin.Activate": self.activate,
            "/NetworkDriver.GetCapabilities": self.get_capabilities,
            "/NetworkDriver.CreateNetwork": self.create_network,
            "/NetworkDriver.DeleteNetwork": self.delete_network,
            "/NetworkDriver.CreateEndpoint": self.create_endpoint,
            "/NetworkDriver.EndpointOperInfo": self.endpoint_oper_info,
            "/NetworkDriver.DeleteEndpoint": self.delete_endpoint,
            "/NetworkDriver.Join": self.join,
            "/NetworkDriver.Leave": self.leave,
            # Swarm (global scope), service discovery, port mapping: not this driver's.
            "/NetworkDriver.AllocateNetwork": self.nothing,
            "/NetworkDriver.FreeNetwork": self.nothing,
            "/NetworkDriver.DiscoverNew": self.nothing,
            "/NetworkDriver.DiscoverDelete": self.nothing,
            "/NetworkDriver.ProgramExternalConnectivity": self.nothing,
            "/NetworkDriver.RevokeExternalConnectivity": self.nothing,
        }

    def handle(self, path: str, body: bytes) -> tuple[int, dict]:
        """(HTTP status, JSON reply) for one request."""
        handler = self.handlers().get(path)
        if handler is None:
            return 404, {"Err": f"unknown endpoint {path}"}
        try:
            req = json.loads(body) if body.strip() else {}
            if not isinstance(req, dict):
                raise DriverError("the request body is not a JSON object")
            return 200, handler(req)
        except (ValueError, KeyError, DriverError) as exc:
            what = f"missing field {exc}" if isinstance(exc, KeyError) else str(exc)
            log.warning("%s refused: %s", path, what)
            return 500, {"Err": f"{path}: {what}"}


class UnixHTTPServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


def serve(driver: Driver, socket_path: str) -> None:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            status, reply = driver.handle(self.path, body)
            log.info("%s %s -> %d %s", self.path, body[:300].decode(errors="replace"), status, reply)
            data = json.dumps(reply).encode()
            self.send_response(status)
            self.send_header("Content-Type", CONTENT_TYPE)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def address_string(self) -> str:     # a unix socket has no peer address
            return "docker"

        def log_message(self, *_args: Any) -> None:
            pass

    os.makedirs(os.path.dirname(socket_path), exist_ok=True)
    if os.path.exists(socket_path):
        os.unlink(socket_path)
    with UnixHTTPServer(socket_path, Handler) as server:
        log.info("listening on %s", socket_path)
        server.serve_forever()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--socket", default=SOCKET, help="where Docker looks for the plugin (default: %(default)s)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="katharanp: %(message)s")
    serve(Driver(), args.socket)
    return 0


if __name__ == "__main__":
    sys.exit(main())
