"""docker/kathara-plugin/network_driver.py, the network plugin Kathara labs
run on (scripts/test_kathara.sh), against a model of the kernel's links: the
requests Docker sends, the commands each runs, and bad requests refused
whole. tests/kathara runs it for real."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
_spec = importlib.util.spec_from_file_location("network_driver", REPO / "docker/kathara-plugin/network_driver.py")
assert _spec and _spec.loader
nd = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(nd)

NET = "a" * 64
EP1, EP2, EP3 = "1" * 64, "2" * 64, "3" * 64


class Kernel:
    """The links `ip` and `tc` would change: name -> master; the commands run."""

    def __init__(self) -> None:
        self.links: dict[str, str | None] = {}
        self.macs: dict[str, str] = {}
        self.redirects: dict[str, str] = {}
        self.peers: dict[str, str] = {}
        self.commands: list[list[str]] = []

    def run(self, argv: list[str]) -> str:
        self.commands.append(argv)
        match argv:
            case ["ip", "-j", "link", "show"]:
                return json.dumps([{"ifname": n} for n in self.links])
            case ["ip", "-j", "link", "show", "master", bridge]:
                return json.dumps([{"ifname": n} for n, m in self.links.items() if m == bridge])
            case ["ip", "link", "add", name, "type", "bridge", *_]:
                self.links[name] = None
            case ["ip", "link", "add", outer, "type", "veth", "peer", "name", inner]:
                self.links[outer] = self.links[inner] = None
                self.peers[outer], self.peers[inner] = inner, outer
            case ["ip", "link", "set", name, "address", mac]:
                self.macs[name] = mac
            case ["ip", "link", "set", name, "master", bridge]:
                assert bridge in self.links
                self.links[name] = bridge
            case ["ip", "link", "del", name]:
                for end in (name, self.peers.get(name)):     # a veth goes with its peer
                    if end is not None:
                        self.links.pop(end)
                        self.redirects.pop(end, None)
            case ["tc", "filter", "del", "dev", name, *_]:
                self.redirects.pop(name, None)
            case ["tc", "filter", "add", "dev", src, *rest]:
                self.redirects[src] = rest[-1]
        return ""


@pytest.fixture
def kernel() -> Kernel:
    return Kernel()


@pytest.fixture
def driver(kernel: Kernel):
    return nd.Driver(run=kernel.run)


def call(driver, endpoint: str, body: dict | bytes) -> tuple[int, dict]:
    return driver.handle(endpoint, body if isinstance(body, bytes) else json.dumps(body).encode())


def endpoint(driver, ep: str, mac: str | None = None) -> tuple[int, dict]:
    options = {"kathara.iface": "0", "kathara.link": "leaf1_spine1", **({"kathara.mac_addr": mac} if mac else {})}
    status, reply = call(driver, "/NetworkDriver.CreateEndpoint",
                         {"NetworkID": NET, "EndpointID": ep, "Options": options, "Interface": {}})
    if status == 200:
        assert call(driver, "/NetworkDriver.Join", {"NetworkID": NET, "EndpointID": ep, "SandboxKey": "/x",
                                                     "Options": {}})[0] == 200
    return status, reply


def test_it_is_a_local_network_driver(driver):
    assert call(driver, "/Plugin.Activate", b"") == (200, {"Implements": ["NetworkDriver"]})
    assert call(driver, "/NetworkDriver.GetCapabilities", {}) == (200, {"Scope": "local",
                                                                        "ConnectivityScope": "local"})


def test_an_interface_is_a_veth_with_katharas_mac_joined_to_its_domains_bridge(driver, kernel):
    assert call(driver, "/NetworkDriver.CreateNetwork", {"NetworkID": NET, "Options": {}}) == (200, {})
    bridge = nd.bridge_name(NET)
    assert bridge in kernel.links and len(bridge) <= 15
    status, reply = endpoint(driver, EP1, "00:00:00:00:01:01")
    assert (status, reply) == (200, {"Interface": {"MacAddress": "00:00:00:00:01:01"}})
    outer, inner = nd.veth_names(EP1)
    assert kernel.macs[inner] == "00:00:00:00:01:01" and kernel.links[outer] == bridge
    status, join = call(driver, "/NetworkDriver.Join", {"NetworkID": NET, "EndpointID": EP1, "SandboxKey": "/x"})
    assert join["InterfaceName"] == {"SrcName": inner, "DstPrefix": "eth"}
    assert call(driver, "/NetworkDriver.EndpointOperInfo", {"NetworkID": NET, "EndpointID": EP1}) == \
        (200, {"Value": {"veth_outside": outer}})


def test_a_mac_docker_chose_is_not_answered_again_and_none_given_derives_one(driver, kernel):
    call(driver, "/NetworkDriver.CreateNetwork", {"NetworkID": NET})
    status, reply = call(driver, "/NetworkDriver.CreateEndpoint", {"NetworkID": NET, "EndpointID": EP1,
                                                                   "Interface": {"MacAddress": "02:00:00:00:00:09"}})
    assert (status, reply) == (200, {})
    assert kernel.macs[nd.veth_names(EP1)[1]] == "02:00:00:00:00:09"
    status, reply = call(driver, "/NetworkDriver.CreateEndpoint", {"NetworkID": NET, "EndpointID": EP2})
    mac = reply["Interface"]["MacAddress"]
    assert mac == nd.derived_mac(NET, EP2) and int(mac[:2], 16) & 0b11 == 0b10   # local, unicast


def test_two_devices_are_joined_by_redirects_both_ways_and_a_third_makes_it_a_bridge(driver, kernel):
    call(driver, "/NetworkDriver.CreateNetwork", {"NetworkID": NET})
    (o1, _), (o2, _), (o3, _) = (nd.veth_names(e) for e in (EP1, EP2, EP3))
    endpoint(driver, EP1)
    assert kernel.redirects == {}
    endpoint(driver, EP2)
    assert kernel.redirects == {o1: o2, o2: o1}         # PFC pause frames cross, which a bridge never forwards
    endpoint(driver, EP3)
    assert kernel.redirects == {}
    assert call(driver, "/NetworkDriver.Leave", {"NetworkID": NET, "EndpointID": EP3}) == (200, {})
    assert kernel.redirects == {o1: o2, o2: o1} and o3 not in kernel.links


def test_leaving_and_deleting_remove_what_was_made_and_repeat_harmlessly(driver, kernel):
    call(driver, "/NetworkDriver.CreateNetwork", {"NetworkID": NET})
    endpoint(driver, EP1)
    for _ in range(2):
        assert call(driver, "/NetworkDriver.Leave", {"NetworkID": NET, "EndpointID": EP1}) == (200, {})
        assert call(driver, "/NetworkDriver.DeleteEndpoint", {"NetworkID": NET, "EndpointID": EP1}) == (200, {})
        assert call(driver, "/NetworkDriver.DeleteNetwork", {"NetworkID": NET}) == (200, {})
    assert kernel.links == {}


@pytest.mark.parametrize("body, said", [
    (b"{not json", "/NetworkDriver.CreateEndpoint: "),
    (b"[1, 2]", "not a JSON object"),
    ({"EndpointID": EP1}, "missing field 'NetworkID'"),
    ({"NetworkID": NET, "EndpointID": EP1, "Options": {"kathara.mac_addr": "zz:00"}},
     "kathara.mac_addr: 'zz:00' is not a MAC address"),
])
def test_a_bad_request_is_refused_naming_what_is_wrong_and_changes_nothing(driver, kernel, body, said):
    status, reply = call(driver, "/NetworkDriver.CreateEndpoint", body)
    assert status == 500 and said in reply["Err"]
    assert kernel.links == {} and not [c for c in kernel.commands if c[:3] != ["ip", "-j", "link"]]


def test_joining_a_network_that_was_never_created_is_refused(driver):
    status, reply = call(driver, "/NetworkDriver.Join", {"NetworkID": NET, "EndpointID": EP1})
    assert status == 500 and "has no bridge" in reply["Err"]


def test_an_unknown_endpoint_is_404(driver):
    assert call(driver, "/NetworkDriver.Nonsense", {})[0] == 404
