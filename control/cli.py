"""An interactive prompt over a running network, in Mininet's spirit:

    fabric> h1 ping -c 3 h4        run a command in h1's namespace (host names -> IPs)
    fabric> pingall                 ping every host pair
    fabric> counters leaf1          port and drop counters of a switch (P4Runtime)
"""
from __future__ import annotations

import cmd
import shlex
import subprocess

from .controller import FabricController
from .network import Network, NetworkError, tail
from .p4constants import drop_reasons


class FabricCLI(cmd.Cmd):
    intro = "Type `help` for commands; `<host> <command>` runs a command on a host. `exit` tears down."
    prompt = "fabric> "

    def __init__(self, net: Network, controller: FabricController):
        super().__init__()
        self.net = net
        self.ctl = controller

    def precmd(self, line: str) -> str:
        try:
            self.net.check_alive()
        except NetworkError as exc:
            print(f"WARNING: {exc}")
        return line

    def emptyline(self) -> bool:
        return False

    def default(self, line: str):
        words = shlex.split(line)
        if words and words[0] in self.net.topo.hosts:
            host, args = words[0], [self._ip(w) for w in words[1:]]
            if not args:
                print(f"usage: {host} <command> [args...]")
                return False
            try:
                subprocess.run(["ip", "netns", "exec", host, *args])
            except KeyboardInterrupt:
                print()
            return False
        print(f"unknown command {words[0]!r}: hosts are {', '.join(self.net.topo.hosts)}; see `help`")
        return False

    def _ip(self, word: str) -> str:
        host = self.net.topo.hosts.get(word)
        return host.ip if host else word

    def do_nodes(self, _arg: str):
        """List switches and hosts."""
        for sw in self.net.topo.switches.values():
            print(f"{sw.name:8s} switch  device {sw.device_id}  P4Runtime {sw.grpc_addr}  Thrift 127.0.0.1:{sw.thrift_port}"
                  f"  role {sw.role or '-'}")
        for h in self.net.topo.hosts.values():
            print(f"{h.name:8s} host    {h.ip}/{h.prefix_len}  {h.mac}  on {h.switch} port {h.switch_port}")

    def do_links(self, _arg: str):
        """List links with bandwidth, delay and loss."""
        for link in self.net.topo.links:
            print(f"{link.a:>8s} <-> {link.b:<8s} {link.bandwidth_mbps:g} Mbit/s  {link.delay_ms:g} ms  {link.loss_pct:g}% loss")

    def do_routes(self, arg: str):
        """routes <switch>: the routes and ECMP next hops the controller computed."""
        name = arg.strip()
        if name not in self.net.topo.switches:
            print(f"usage: routes <switch> ({', '.join(self.net.topo.switches)})")
            return
        for r in self.net.topo.routes()[name]:
            hops = ", ".join(f"port {h.port} -> {h.peer}" for h in r.next_hops)
            print(f"{r.prefix:18s} {hops}")

    def do_pingall(self, _arg: str):
        """Ping every ordered pair of hosts."""
        results = self.net.ping_all()
        for (a, b), ok in sorted(results.items()):
            if not ok:
                print(f"  {a} -> {b}: no reply")
        print(f"{sum(results.values())}/{len(results)} host pairs reachable")

    def do_counters(self, arg: str):
        """counters <switch>: per-port packets/bytes and drops by reason."""
        name = arg.strip()
        if name not in self.net.topo.switches:
            print(f"usage: counters <switch> ({', '.join(self.net.topo.switches)})")
            return
        ports = sorted(self.net.topo.switches[name].ports)
        rx = self.ctl.counter(name, "ingress_port_counter")
        tx = self.ctl.counter(name, "egress_port_counter")
        print(f"{'port':>4s} {'rx pkts':>10s} {'rx bytes':>12s} {'tx pkts':>10s} {'tx bytes':>12s}")
        for p in ports:
            print(f"{p:4d} {rx.get(p, (0, 0))[0]:10d} {rx.get(p, (0, 0))[1]:12d} "
                  f"{tx.get(p, (0, 0))[0]:10d} {tx.get(p, (0, 0))[1]:12d}")
        drops = self.ctl.counter(name, "drop_counter")
        for reason, index in drop_reasons().items():
            if index and drops.get(index, (0, 0))[0]:
                print(f"dropped {reason}: {drops[index][0]}")

    def do_log(self, arg: str):
        """log <switch>: the last lines of a switch's BMv2 log."""
        sp = self.net.switches.get(arg.strip())
        if sp is None:
            print(f"usage: log <switch> ({', '.join(self.net.switches)})")
            return
        print(tail(sp.log, 30))

    def do_exit(self, _arg: str) -> bool:
        """Tear the network down and leave."""
        return True

    do_quit = do_exit

    def do_EOF(self, _arg: str) -> bool:
        print()
        return True
