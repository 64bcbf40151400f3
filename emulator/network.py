"""Bring a topology up on real BMv2: hosts in network namespaces, links as
veth pairs, one simple_switch_grpc process per switch.

Why namespaces + veth and not Mininet: the switches are BMv2 processes
either way, and a host only needs its own network stack, which a namespace
is. Doing it directly keeps the launcher independent of Mininet's Python
version and its OVS clean-up, lets us record and remove exactly what we made,
and runs the same inside the Docker image.

A multi-homed host is one namespace with one veth per NIC, each with its
own address, MAC, gateway and static ARP entry; its routes (per-NIC policy
tables, per-destination routes in the main table) come from
Topology.host_routing.

Every object made is recorded in <run_dir>/network-state.json before it is
made, so a run killed with SIGKILL is cleaned up by the next one.

A host has no resolver: its default route leads into the fabric, which has
no route to the machine's DNS server, so a name lookup in a host (gloo
names its peers' addresses when torch.distributed starts) waited out the
resolver's timeout, 5 s a try, and its queries were NO_ROUTE drops at the
first switch. `ip netns exec` reads /etc/netns/HOST/ over /etc: the launcher
writes a resolv.conf there naming the namespace's own loopback, where
nothing answers, so a lookup fails at once (and removes it with the host).

With `p4runtime_proxy` (what `fabric run` does), each switch's public
P4Runtime address is served by the authorizing proxy (emulator/p4runtime_proxy.py,
one process for the whole network) and BMv2 listens on a unix socket in a
0700 directory of its own; without it (experiments, the test suites, the
benchmarks) clients reach BMv2 directly, as before. docs/operations.md
says what the proxy costs and why.
"""
from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Protocol

from emulator.bmv2 import DEFAULT_INTERACTIVE_LOG_LEVEL, check_log_level, switch_command, written_log
from emulator.bmv2_thrift import Bmv2Thrift
from control.feature import priority_queues
from emulator.impairments import drop_fraction, netem_available, remove_impairment
from emulator.netns import NETNS_ETC
from control.authorization import DEFAULT_OPERATOR_ACCESS, check_access
from control.tls import Pki
from emulator.p4runtime_proxy import REPO, ProxiedSwitch, ProxyConfig, backend_address, backend_answers, proxy_command
from emulator.toolchain import require
from control.topology import Host, LinkSpec, Nic, Switch, Topology

QUEUE_RATE_PACKET_BYTES = 1500  # link bandwidth -> BMv2 queue rate (pps) assumes MTU-sized packets
BMV2_QUEUE_DEPTH = 64              # packets: simple_switch's default depth of every egress queue
STATE_FILE = "network-state.json"
PROXY_LOG = "p4runtime-proxy.txt"
MADE_KINDS = ("netns", "netns_etc", "veth", "pids", "nft", "nft_tables", "dirs")
NO_RESOLVER = "# written by emulator/network.py: no resolver in the fabric\nnameserver 127.0.0.1\noptions timeout:1 attempts:1\n"


class NetworkError(RuntimeError):
    pass


class SwitchDied(NetworkError):
    pass


def sh(*args: str, check: bool = True, netns: str | None = None, timeout: float = 30) -> subprocess.CompletedProcess:
    cmd = (["ip", "netns", "exec", netns] if netns else []) + list(args)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise NetworkError(f"command failed ({proc.returncode}): {shlex.join(cmd)}\n{proc.stderr.strip()}")
    return proc


def ip_batch(lines: list[str], netns: str | None = None, check: bool = True,
             timeout: float = 60) -> subprocess.CompletedProcess:
    """Several `ip` commands (each without the leading "ip") in one process,
    `ip -batch`, inside `netns` when given (`ip -n`, as `ip netns exec`
    would run them): a bring-up of torus-4x4 ran 400 processes one by one.
    Without `check` every line is tried (-force) and failures are ignored."""
    cmd = ["ip", *(["-n", netns] if netns else []), *([] if check else ["-force"]), "-batch", "-"]
    proc = subprocess.run(cmd, input="".join(f"{line}\n" for line in lines), capture_output=True, text=True,
                          timeout=timeout)
    if check and proc.returncode != 0:
        raise NetworkError(f"command failed ({proc.returncode}): {shlex.join(cmd)} with\n"
                           + "\n".join(lines) + f"\n{proc.stderr.strip()}")
    return proc


def make_veth_pair(a: str, b: str, mtu: int | None = None) -> None:
    """A veth pair in the root namespace, up, IPv6 off (no router solicitations
    in captures), checksum offload off; a stale pair of the same name is replaced."""
    sh("ip", "link", "del", a, check=False)
    sh("ip", "link", "add", a, "type", "veth", "peer", "name", b)
    for dev in (a, b):
        sh("sysctl", "-qw", f"net.ipv6.conf.{dev}.disable_ipv6=1")
        if mtu:
            sh("ip", "link", "set", dev, "mtu", str(mtu))
        sh("ip", "link", "set", dev, "up")
        sh("ethtool", "-K", dev, "tx", "off", "rx", "off", check=False)


def interface_rx_packets(switch) -> dict[int, int]:
    """{port: frames the kernel delivered to its interface (rx_packets)} for
    the ports of `switch` whose interface is in this namespace (none for a
    switch on another machine). Against the P4 ingress port counter: what
    BMv2 lost, or still holds, between its packet socket and ingress."""
    return _rx_packets({number: port.iface for number, port in switch.ports.items()})


def peer_rx_packets(switch) -> dict[int, int]:
    """{port: frames the kernel delivered to the interface at the link's
    other end} for the ports of `switch` whose peer is a switch with its
    interface in this namespace. Against the P4 egress port counter: what
    the link lost."""
    return _rx_packets({number: port.peer_iface for number, port in switch.ports.items() if port.peer_iface})


def _rx_packets(ifaces: dict[int, str]) -> dict[int, int]:
    out = {}
    for number, iface in ifaces.items():
        try:
            out[number] = int(Path(f"/sys/class/net/{iface}/statistics/rx_packets").read_text())
        except (OSError, ValueError):
            continue
    return out


def tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


class QueueSetter(Protocol):
    """Where apply_queue_settings writes: Bmv2Thrift, or a recorder of the
    same calls (fabric/kathara.py writes them as simple_switch_CLI commands)."""

    def set_queue_rate(self, port: int, pps: int) -> None: ...
    def set_queue_depth(self, port: int, packets: int) -> None: ...
    def set_priority_queue_rate(self, port: int, priority: int, pps: int) -> None: ...
    def set_priority_queue_depth(self, port: int, priority: int, packets: int) -> None: ...


def apply_queue_settings(topo: Topology, switch: str, thrift: QueueSetter) -> dict[int, int]:
    """One switch's egress queues over Thrift: every queue of a port at its
    link's rate and BMv2's default depth, then the features' per-queue rates
    and depths (so a setting a feature no longer asks for is undone).
    Returns {port: link rate in packets/s}."""
    rates: dict[int, int] = {}
    for port in topo.switches[switch].ports.values():
        rates[port.number] = queue_rate_pps(port.link.bandwidth_mbps)
        thrift.set_queue_rate(port.number, rates[port.number])
        thrift.set_queue_depth(port.number, BMV2_QUEUE_DEPTH)
    for feature in topo.known_features:
        for (port, queue), setting in sorted(feature.queues(topo, switch).settings.items()):
            if setting.rate_pps is not None:
                thrift.set_priority_queue_rate(port, queue, setting.rate_pps)
            if setting.depth is not None:
                thrift.set_priority_queue_depth(port, queue, setting.depth)
    return rates


def nic_commands(nic: Nic, dev: str) -> list[list[str]]:
    """What a host's NIC is set up with, run in the host's namespace once
    its interface `dev` is there: no IPv6, its MAC and address, up, the
    checksum offloads off (BMv2 does not complete partial checksums: the
    host computes its own), and a static ARP entry for its gateway (the
    switch port's MAC). The launcher runs these; a Kathara lab's host
    startup file holds them (fabric/kathara.py)."""
    return [["sysctl", "-qw", f"net.ipv6.conf.{dev}.disable_ipv6=1"],
            ["ip", "link", "set", dev, "address", nic.mac],
            ["ip", "addr", "add", f"{nic.ip}/{nic.prefix_len}", "dev", dev],
            ["ip", "link", "set", dev, "up"],
            ["ethtool", "-K", dev, "tx", "off", "rx", "off"],
            ["ip", "neigh", "replace", nic.gateway_ip, "lladdr", nic.gateway_mac, "dev", dev, "nud", "permanent"]]


def host_routing_commands(topo: Topology, host: str,
                          dev_of: Callable[[str], str] = lambda dev: dev) -> list[list[str]]:
    """A one-NIC host: a default route via its gateway. Several NICs:
    per-NIC tables selected by source address, and per-destination routes
    in the main table (see Topology.host_routing). `dev_of` renames the
    launcher's interface names (a Kathara lab's are eth0, eth1, ...)."""
    routes, rules = topo.host_routing(host)
    cmds = [["ip", "route", "add", r.prefix, "via", r.via, "dev", dev_of(r.dev),
             *(["table", str(r.table)] if r.table is not None else [])] for r in routes]
    cmds += [["ip", "rule", "add", "from", rule.source, "table", str(rule.table), "priority", str(rule.priority)]
             for rule in rules]
    return cmds


def queue_rate_pps(bandwidth_mbps: float) -> int:
    return max(1, int(bandwidth_mbps * 1e6 / (8 * QUEUE_RATE_PACKET_BYTES)))


@dataclass
class SwitchProcess:
    switch: Switch
    proc: subprocess.Popen
    log: Path
    stdout: Path

    def died(self) -> str | None:
        rc = self.proc.poll()
        if rc is None:
            return None
        return (f"switch {self.switch.name} (simple_switch_grpc, pid {self.proc.pid}) exited with code {rc}\n"
                f"--- tail of {self.stdout} ---\n{tail(self.stdout)}\n--- tail of {self.log} ---\n{tail(self.log)}")


class Network:
    """pki: every switch's P4Runtime server runs TLS with a certificate
    from this PKI and requires a client certificate from its CA (control/tls.py;
    the default, build/pki, is where the controller, exporter and shell look
    for theirs); None runs plain gRPC. Either way each switch's Thrift port,
    which BMv2 binds to every address, answers on loopback only (an
    nftables rule, _guard_thrift).

    p4runtime_proxy: the switches' P4Runtime addresses are the authorizing
    proxy's, BMv2 listens on unix sockets behind it (needs `pki`: roles come
    from certificates); `operator_access` is the operator role's entry in
    the policy (control/authorization.py: full or read-only)."""

    def __init__(self, topo: Topology, run_dir: Path, log_level: str = DEFAULT_INTERACTIVE_LOG_LEVEL,
                 pcap: bool = False, pki: Pki | None = Pki(), p4runtime_proxy: bool = False,
                 operator_access: str = DEFAULT_OPERATOR_ACCESS):
        try:
            self.log_level = check_log_level(log_level)  # before anything starts
            self.operator_access = check_access(operator_access)
        except ValueError as exc:
            raise NetworkError(str(exc)) from None
        if p4runtime_proxy and pki is None:
            raise NetworkError("the authorizing P4Runtime proxy reads roles from client certificates: it needs TLS")
        self.topo = topo
        self.run_dir = Path(run_dir)
        self.pcap = pcap
        self.pki = pki
        self.p4runtime_proxy = p4runtime_proxy
        self.proxy: subprocess.Popen | None = None
        self.backends: dict[str, str] = {}     # switch -> BMv2's P4Runtime address behind the proxy
        self.switches: dict[str, SwitchProcess] = {}
        self.queues_applied = False  # apply_queue_rates() ran: a restarted switch gets its queues back
        self._made: dict[str, list] = {kind: [] for kind in MADE_KINDS}

    # -- lifecycle -----------------------------------------------------------

    def __enter__(self) -> "Network":
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> None:
        self._check_link_emulation()              # before anything is made
        self.run_dir.mkdir(parents=True, exist_ok=True)
        cleanup_stale(self.run_dir)
        binary = require("simple_switch_grpc")
        if self.pki is not None:
            self.pki.ensure({sw.name: [sw.grpc_addr.rsplit(":", 1)[0]] for sw in self.topo.switches.values()})
        self._guard_thrift()
        self._add_hosts()
        ends = self._add_links()
        for host in self.topo.hosts.values():
            self._configure_host(host)
        self._emulate_links(ends)
        if self.p4runtime_proxy:
            sockets = Path(tempfile.mkdtemp(prefix="fabric-p4rt-"))     # 0700; short (a socket path is < 108 bytes)
            self._record("dirs", str(sockets))
            self.backends = {name: backend_address(sockets, name) for name in self.topo.switches}
        for sw in self.topo.switches.values():
            written_log(self.run_dir / sw.name).unlink(missing_ok=True)   # BMv2 appends: this run's log only
            self._start_switch(binary, sw)                                # (a restart appends to it)
        if self.p4runtime_proxy:
            self._start_proxy()
        self.check_alive()

    def stop(self) -> None:
        made_something = any(self._made.values())
        if self.proxy is not None:
            self.proxy.terminate()
            try:
                self.proxy.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proxy.kill()
                self.proxy.wait()
            self.proxy = None
        for sp in self.switches.values():
            if sp.proc.poll() is None:
                sp.proc.terminate()
        for sp in self.switches.values():
            try:
                sp.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                sp.proc.kill()
                sp.proc.wait()
        self.switches.clear()
        _remove(self._made)
        self._made = {kind: [] for kind in MADE_KINDS}
        self.backends = {}
        state = self.run_dir / STATE_FILE
        if state.exists():
            state.unlink()
        if made_something:
            print("network: torn down (switch processes, veths, namespaces)", flush=True)

    def check_alive(self) -> None:
        """Raise SwitchDied, with the tail of its logs, if a switch exited."""
        for sp in self.switches.values():
            report = sp.died()
            if report:
                raise SwitchDied(report)
        if self.proxy is not None and self.proxy.poll() is not None:
            log = self.run_dir / PROXY_LOG
            raise NetworkError(f"the P4Runtime proxy (pid {self.proxy.pid}) exited with code {self.proxy.returncode}\n"
                               f"--- tail of {log} ---\n{tail(log)}")

    # -- building ------------------------------------------------------------

    def _check_link_emulation(self) -> None:
        delayed = [f"{link.a}-{link.b}" for link in self.topo.links if link.delay_ms]
        if delayed and not netem_available():
            raise NetworkError(f"links {', '.join(delayed)} have delay_ms, which needs the kernel's netem qdisc "
                               "(sch_netem), and this kernel has none; loss_pct works without it (nftables)")

    def _record(self, kind: str, value) -> None:
        self._made[kind].append(value)
        (self.run_dir / STATE_FILE).write_text(json.dumps(self._made))

    def _guard_thrift(self) -> None:
        """Refuse every switch's Thrift port on any interface but loopback:
        BMv2 has no option for the address it binds (all of them) and no
        authentication, and Thrift reaches everything (tables, registers,
        queue rates, the pipeline itself). The hosts' namespaces cannot reach
        the root namespace's addresses anyway; this keeps the machine's own
        network out."""
        ports = sorted(sw.thrift_port for sw in self.topo.switches.values() if sw.thrift_host == "127.0.0.1")
        if not ports:
            return
        table = f"fabric_thrift_{ports[0]}"
        self._record("nft_tables", ["inet", table])
        sh("nft", "delete", "table", "inet", table, check=False)     # one a killed run left
        sh("nft", "add", "table", "inet", table)
        sh("nft", "add", "chain", "inet", table, "input", "{ type filter hook input priority -10; }")
        sh("nft", "add", "rule", "inet", table, "input", "iifname", "!=", "lo", "tcp", "dport",
           "{ " + ", ".join(map(str, ports)) + " }", "drop")

    def _add_hosts(self) -> None:
        """A namespace per host, each with a resolv.conf naming no resolver;
        none is made if one of the names is taken."""
        taken = set(sh("ip", "netns", "list").stdout.split())
        for host in self.topo.hosts.values():
            if host.name in taken:
                raise NetworkError(f"network namespace {host.name!r} already exists and was not made by this "
                                   f"launcher; remove it (ip netns del {host.name}) or rename the host")
        for host in self.topo.hosts.values():
            self._record("netns", host.name)
            sh("ip", "netns", "add", host.name)     # (not batched: `netns add` moves its process into the new one)
            etc = NETNS_ETC / host.name
            if not etc.exists():                # (a user's own /etc/netns/HOST is left alone)
                self._record("netns_etc", str(etc))
                etc.mkdir(parents=True)
                (etc / "resolv.conf").write_text(NO_RESOLVER)

    def _add_links(self) -> list[tuple[LinkSpec, str, str, str | None]]:
        """Every link as a veth pair: a switch's end up in the root namespace
        (IPv6 off), a host's end moved into the host's namespace (configured
        with its host, _configure_host). Returns (link, node, interface,
        namespace) of every end, for _emulate_links."""
        def iface_of(link: LinkSpec, node: str) -> str:
            if node in self.topo.hosts:
                return self.topo.link_nic(link, node).iface
            return next(p.iface for p in self.topo.switches[node].ports.values() if p.link is link)

        pairs = [(link, iface_of(link, link.a), iface_of(link, link.b)) for link in self.topo.links]
        for link, a_if, b_if in pairs:
            # Record the end that stays in the root namespace: deleting it removes the pair.
            self._record("veth", a_if if link.a in self.topo.switches else b_if)
        ip_batch([f"link add {a_if} type veth peer name {b_if}" for _link, a_if, b_if in pairs])
        ends = [(link, node, iface, node if node in self.topo.hosts else None)
                for link, a_if, b_if in pairs for node, iface in ((link.a, a_if), (link.b, b_if))]
        switch_ends = [iface for _link, _node, iface, ns in ends if ns is None]
        if switch_ends:
            sh("sysctl", "-qw", *(f"net.ipv6.conf.{iface}.disable_ipv6=1" for iface in switch_ends))
        ip_batch([f"link set {iface} up" if ns is None else f"link set {iface} netns {ns}"
                  for _link, _node, iface, ns in ends])
        return ends

    def _configure_host(self, host: Host) -> None:
        """A host's namespace once its NICs' ends are in it: IPv6 off, loopback
        up, each NIC set up (nic_commands), its routes (host_routing_commands);
        the `ip` commands in one batch, the sysctls in one call."""
        cmds = [cmd for nic in host.nics.values() for cmd in nic_commands(nic, nic.iface)]
        cmds += host_routing_commands(self.topo, host.name)
        sysctls = ["net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1"]
        sysctls += [arg for cmd in cmds if cmd[:2] == ["sysctl", "-qw"] for arg in cmd[2:]]
        sh("sysctl", "-qw", *sysctls, netns=host.name)
        ip_batch(["link set lo up"] + [shlex.join(cmd[1:]) for cmd in cmds if cmd[0] == "ip"], netns=host.name)
        for cmd in cmds:
            if cmd[0] not in ("ip", "sysctl"):
                sh(*cmd, netns=host.name)

    def _emulate_links(self, ends: list[tuple[LinkSpec, str, str, str | None]]) -> None:
        """Each link's delay and loss at both its ends (netem; loss without netem: nftables)."""
        for link, _node, iface, ns in ends:
            netem = ["delay", f"{link.delay_ms}ms"] if link.delay_ms else []
            netem += ["loss", f"{link.loss_pct}%"] if link.loss_pct else []
            if netem and netem_available():
                sh("tc", "qdisc", "add", "dev", iface, "root", "netem", *netem, netns=ns)
            elif link.loss_pct:                  # no netem (and no delay, checked at start): nftables
                drop_fraction(iface, link.loss_pct / 100, netns=ns)
                if ns is None:                   # a host's rules go with its namespace
                    self._record("nft", iface)

    def restart_switch(self, name: str, timeout: float = 15.0) -> None:
        """Start a switch whose process died again, same ports and addresses.
        Its tables come back empty (the controller recovers it,
        recover_switch); what was set over Thrift, its queues' rates and
        depths, is set again here if apply_queue_rates() had set it (a P4
        pipeline pushed afterwards leaves them as they are)."""
        sp = self.switches[name]
        if sp.proc.poll() is None:
            raise NetworkError(f"switch {name} is running (pid {sp.proc.pid}): nothing to restart")
        self._start_switch(require("simple_switch_grpc"), sp.switch)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.switches[name].died():
                raise NetworkError(self.switches[name].died())
            with contextlib.suppress(OSError):
                if name in self.backends:              # behind the proxy, whose address stays open
                    if not backend_answers(self.backends[name]):
                        raise OSError
                else:
                    socket.create_connection(("127.0.0.1", int(sp.switch.grpc_addr.rsplit(":", 1)[1])), 0.5).close()
                if self.queues_applied:
                    self._apply_queue_settings(sp.switch)
                return
            time.sleep(0.1)
        raise NetworkError(f"switch {name} restarted but P4Runtime does not answer after {timeout:.0f} s")

    def dead_switches(self) -> list[str]:
        return [name for name, sp in self.switches.items() if sp.proc.poll() is not None]

    def _start_switch(self, binary: str, sw: Switch) -> None:
        log = self.run_dir / sw.name  # BMv2 writes <run_dir>/<switch>.txt (written_log)
        stdout = self.run_dir / f"{sw.name}.stdout"
        pcap_dir = self.run_dir / "pcap" if self.pcap else None
        if pcap_dir:
            pcap_dir.mkdir(exist_ok=True)
        behind_proxy = sw.name in self.backends
        cmd = switch_command(binary, device_id=sw.device_id, thrift_port=sw.thrift_port,
                             grpc_addr=self.backends[sw.name] if behind_proxy else sw.grpc_addr,
                             ports={p.number: p.iface for p in sw.ports.values()},
                             log_level=self.log_level, log_file=log, pcap_dir=pcap_dir,
                             priority_queues=self.priority_queues(sw.name),
                             tls=self.pki.server_credentials(sw.name) if self.pki and not behind_proxy else None)
        with open(stdout, "w") as out:
            proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True)
        self._record("pids", proc.pid)
        self.switches[sw.name] = SwitchProcess(sw, proc, written_log(log), stdout)

    def _start_proxy(self) -> None:
        """The authorizing proxy on every switch's public P4Runtime address
        (it opens each once that switch's BMv2 answers on its socket)."""
        assert self.pki is not None
        switches = tuple(ProxiedSwitch(sw.name, sw.grpc_addr, self.backends[sw.name],
                                       str(self.pki.server_credentials(sw.name).cert),
                                       str(self.pki.server_credentials(sw.name).key))
                         for sw in self.topo.switches.values())
        config = ProxyConfig(str(self.pki.ca_cert_path), switches, self.operator_access).write(
            self.run_dir / "p4runtime-proxy.json")
        with open(self.run_dir / PROXY_LOG, "w") as out:
            self.proxy = subprocess.Popen(proxy_command(config), stdout=out, stderr=subprocess.STDOUT,
                                          stdin=subprocess.DEVNULL, start_new_session=True, cwd=REPO)
        self._record("pids", self.proxy.pid)

    # -- after the pipeline is in --------------------------------------------

    def priority_queues(self, switch: str) -> int:
        """Priority queues per port of `switch`: the most any feature asks for (1 if none does)."""
        return priority_queues(self.topo, switch)

    def apply_queue_rates(self) -> dict[str, dict[int, int]]:
        """Link bandwidth -> BMv2 egress queue rate of each switch port (every
        priority queue of it), so queues build inside BMv2 (where the P4 program
        sees them); then the features' own per-queue rates and depths."""
        applied = {sw.name: self._apply_queue_settings(sw) for sw in self.topo.switches.values()}
        self.queues_applied = True
        return applied

    def _apply_queue_settings(self, sw: Switch) -> dict[int, int]:
        with Bmv2Thrift(sw.thrift_port, sw.thrift_host, name=sw.name) as thrift:
            return apply_queue_settings(self.topo, sw.name, thrift)

    def host_cmd(self, host: str, command: list[str] | str, timeout: float = 30) -> subprocess.CompletedProcess:
        if host not in self.topo.hosts:
            raise NetworkError(f"no host named {host!r} (hosts: {', '.join(self.topo.hosts)})")
        args = ["bash", "-c", command] if isinstance(command, str) else list(command)
        return subprocess.run(["ip", "netns", "exec", host, *args], capture_output=True, text=True,
                              timeout=timeout)

    def ping_nics(self, pairs: list[tuple[Nic, Nic]] | None = None, count: int = 1,
                  timeout_s: int = 2) -> dict[tuple[str, str], bool]:
        """Ping NIC b from NIC a for each pair (default: every ordered pair of
        NICs on different hosts), in parallel; True where a reply came. Keys
        are NIC labels (the host name for a one-NIC host, else host.nic). A
        multi-homed host pings from the NIC's address (-I), so its policy
        rule sends the request out of that very NIC."""
        if pairs is None:
            pairs = [(a, b) for a, b, _ in self.topo.nic_pairs()]
        procs = {}
        for a, b in pairs:
            src = ["-I", a.ip] if self.topo.hosts[a.host].multi_homed else []
            procs[(a.label, b.label)] = subprocess.Popen(
                ["ip", "netns", "exec", a.host, "ping", "-n", "-q", "-c", str(count), "-W", str(timeout_s), *src, b.ip],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return {pair: p.wait() == 0 for pair, p in procs.items()}

    def ping_all(self, count: int = 1, timeout_s: int = 2) -> dict[tuple[str, str], bool]:
        """Ping every ordered host pair (each host's first NIC), in parallel; True where a reply came."""
        procs = {}
        for a in self.topo.hosts:
            for b, hb in self.topo.hosts.items():
                if a != b:
                    procs[(a, b)] = subprocess.Popen(
                        ["ip", "netns", "exec", a, "ping", "-n", "-q", "-c", str(count), "-W", str(timeout_s), hb.ip],
                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return {pair: p.wait() == 0 for pair, p in procs.items()}


def _remove(made: dict) -> None:
    for pid in made.get("pids", []):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"simple_switch" in cmdline or b"emulator.p4runtime_proxy" in cmdline:
            try:
                os.killpg(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            for _ in range(50):
                if not _running(pid):
                    break
                time.sleep(0.1)
            else:
                os.killpg(pid, signal.SIGKILL)
    for iface in made.get("nft", []):
        remove_impairment(iface)
    for family, table in made.get("nft_tables", []):
        sh("nft", "delete", "table", family, table, check=False)
    if made.get("veth"):     # deleting one end deletes the pair (also when the other end is in a netns)
        ip_batch([f"link del {veth}" for veth in made["veth"]], check=False)
    if made.get("netns"):
        ip_batch([f"netns del {ns}" for ns in made["netns"]], check=False)
    for directory in made.get("dirs", []):
        shutil.rmtree(directory, ignore_errors=True)
    for etc in made.get("netns_etc", []):
        with contextlib.suppress(OSError):
            (Path(etc) / "resolv.conf").unlink(missing_ok=True)
            Path(etc).rmdir()


def _running(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has exited


def cleanup_stale(run_dir: Path) -> bool:
    """Remove what an earlier, killed run recorded in run_dir; True if any."""
    state = Path(run_dir) / STATE_FILE
    if not state.exists():
        return False
    try:
        made = json.loads(state.read_text())
    except (OSError, ValueError):
        made = {}
    print(f"network: cleaning up leftovers of an earlier run recorded in {state}")
    _remove(made)
    state.unlink()
    return True
