"""An interactive prompt over a running network, in Mininet's spirit:

    fabric> h1 ping -c 3 h4        run a command in h1's namespace (host names -> IPs)
    fabric> g1 ping -I g1.eth1 g2.eth1   multi-homed hosts: host.nic -> that NIC's IP
    fabric> pingall                 ping every host pair
    fabric> counters leaf1          port and drop counters of a switch (P4Runtime)
    fabric> alerts                  the alerts firing now (`make monitor`'s alert receiver)
"""
from __future__ import annotations

import cmd
import shlex
import threading
import subprocess

from control.controller import FabricController
from emulator.network import Network, NetworkError, tail
from control.p4constants import drop_reasons
from telemetry.alert_receiver import Alert, firing, render
from telemetry.metrics import ALERT_RECEIVER_PORT

DEFAULT_ALERTS_URL = f"http://127.0.0.1:{ALERT_RECEIVER_PORT}"


class FabricCLI(cmd.Cmd):
    intro = "Type `help` for commands; `<host> <command>` runs a command on a host. `exit` tears down."
    prompt = "fabric> "

    def __init__(self, net: Network, controller: FabricController, lock: "threading.Lock | None" = None):
        super().__init__()
        self.feature_commands = {name: command for f in net.topo.known_features
                                 for name, command in f.commands.items()}
        self.net = net
        self.ctl = controller
        self.lock = lock or threading.Lock()     # shared with the recovery supervisor (emulator/supervisor.py)

    def onecmd(self, line: str) -> bool:
        with self.lock:
            return super().onecmd(line)

    def precmd(self, line: str) -> str:
        try:
            self.net.check_alive()
        except NetworkError as exc:
            print(f"WARNING: {exc}")
        demoted = sorted(name for name, (primary, _) in self.ctl.primacy().items() if not primary)
        if demoted:
            print(f"WARNING: this controller is not primary on {', '.join(demoted)}: writes there are refused "
                  f"(`primary` shows who is)")
        return line

    def get_names(self) -> list[str]:
        """cmd's command list (help, completion), with the features' commands
        and their help; without EOF (Ctrl-D leaves, but it is no command)."""
        return ([n for n in super().get_names() if n != "do_EOF"]
                + [f"{kind}_{name}" for name in self.feature_commands for kind in ("do", "help")])

    def __getattr__(self, attr: str):
        """do_<name> / help_<name> of a command a feature adds (control/feature.py)."""
        kind, _, name = attr.partition("_")
        command = self.__dict__.get("feature_commands", {}).get(name)
        if command is not None and kind == "do":
            return lambda arg: command.run(self, arg)
        if command is not None and kind == "help":
            return lambda: print(command.help)
        raise AttributeError(attr)

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
        """A host name -> its (first NIC's) address; host.nic -> that NIC's."""
        topo = self.net.topo
        if word in topo.hosts:
            return topo.hosts[word].ip
        host, dot, nic = word.partition(".")
        if dot and host in topo.hosts and nic in topo.hosts[host].nics:
            return topo.hosts[host].nics[nic].ip
        return word

    def do_nodes(self, _arg: str):
        """List switches and hosts."""
        for sw in self.net.topo.switches.values():
            where = "".join(f"  {label} {getattr(sw, label)}" for label in ("plane", "rail")
                            if getattr(sw, label) is not None)
            print(f"{sw.name:8s} switch  device {sw.device_id}  P4Runtime {sw.grpc_addr}  Thrift 127.0.0.1:{sw.thrift_port}"
                  f"  role {sw.role or '-'}{where}")
        for h in self.net.topo.hosts.values():
            if not h.multi_homed:
                print(f"{h.name:8s} host    {h.ip}/{h.prefix_len}  {h.mac}  on {h.switch} port {h.switch_port}")
                continue
            print(f"{h.name:8s} host    {len(h.nics)} NICs  role {h.role or '-'}")
            for n in h.nics.values():
                where = "".join(f"  {label} {getattr(n, label)}" for label in ("plane", "rail")
                                if getattr(n, label) is not None)
                print(f"  {n.id:10s} {n.iface:10s} {n.ip}/{n.prefix_len}  {n.mac}  on {n.switch} port {n.switch_port}"
                      f"{where}")

    def do_primary(self, _arg: str):
        """Whether this controller is each switch's primary P4Runtime client (alone may write)."""
        for name, (primary, by) in sorted(self.ctl.primacy().items()):
            who = "" if by is None else f"{by[0]},{by[1]}"
            print(f"  {name:10s} {'primary' if primary else 'NOT PRIMARY'}  (primary's election id {who or 'unknown'}; "
                  f"ours {self.ctl.election_id[0]},{self.ctl.election_id[1]})")

    def do_links(self, _arg: str):
        """List links with bandwidth, delay and loss."""
        topo = self.net.topo

        def end(node: str) -> str:
            return topo.link_nic(link, node).label if node in topo.hosts else node

        for link in topo.links:
            print(f"{end(link.a):>8s} <-> {end(link.b):<8s} {link.bandwidth_mbps:g} Mbit/s  {link.delay_ms:g} ms  "
                  f"{link.loss_pct:g}% loss")

    def do_routes(self, arg: str):
        """routes <switch>: the routes and ECMP next hops the controller computed.
        routes <host>: the host's own routes and policy rules (multi-homed hosts)."""
        name = arg.strip()
        if name in self.net.topo.hosts:
            routes, rules = self.net.topo.host_routing(name)
            for rule in rules:
                print(f"rule from {rule.source} table {rule.table} priority {rule.priority}")
            for r in routes:
                print(f"{r.prefix:18s} via {r.via} dev {r.dev}" + (f" table {r.table}" if r.table is not None else ""))
            return
        if name not in self.net.topo.switches:
            topo = self.net.topo
            print(f"usage: routes <switch|host> ({', '.join(topo.switches)}; {', '.join(topo.hosts)})")
            return
        for route in self.net.topo.routes()[name]:
            hops = ", ".join(f"port {h.port} -> {h.peer}" for h in route.next_hops)
            print(f"{route.prefix:18s} {hops}")

    def do_pingall(self, _arg: str):
        """Ping every ordered pair of hosts; with multi-homed hosts, every
        pair of NICs on a shared plane, each from its source NIC."""
        topo = self.net.topo
        pairs = [(a, b) for a, b, connected in topo.nic_pairs() if connected]
        results = self.net.ping_nics(pairs)
        for (a, b), ok in sorted(results.items()):
            if not ok:
                print(f"  {a} -> {b}: no reply")
        print(f"{sum(results.values())}/{len(results)} {'NIC' if topo.multi_homed else 'host'} pairs reachable")

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

    def do_alerts(self, arg: str):
        """alerts [URL]: the alerts firing now, from the alert receiver `make
        monitor` starts (default http://127.0.0.1:9774)."""
        try:
            now = firing(arg.strip() or DEFAULT_ALERTS_URL)
        except OSError as exc:
            print(exc)
            return
        print(render([Alert(**a) for a in now]), end="")

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
