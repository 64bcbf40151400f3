"""A topology as a Kathara lab: the same fabric on containers, on one
machine (Kathara's Docker manager) or on a Kubernetes cluster (Megalos,
Kathara's Kubernetes manager).

    fabric export kathara --topology fat-tree-k4 DIR [--manager docker|kubernetes]
        [--switch-image p4-ai-fabric] [--host-image p4-ai-fabric]

writes DIR/lab.conf and one DIR/<device>.startup per device; everything else
a device needs is in its own directory DIR/<device>/, which both managers
copy into the device's root at start (Docker: a copy; Kubernetes: a
ConfigMap of at most 3 MiB), so the lab needs no shared folder (on
Kubernetes, /shared is a folder of the cluster machine, not the lab's):
- every switch on `--switch-image` (the project's image: BMv2 from p4lang's
  image, and the authorizing P4Runtime proxy), one interface per port in
  port order (the switch's i-th port is interface i, BMv2 port number as in
  the topology) and a last one on the management collision domain `mgmt`;
  its startup runs simple_switch_grpc with the command line the launcher
  builds (emulator.bmv2.switch_command: same device id, ports, log level,
  priority queues), P4Runtime on a unix socket in a 0700 directory, and in
  front of it the authorizing proxy (emulator/p4runtime_proxy.py: mutual
  TLS on the management address, each RPC checked against the client
  certificate's role), as `fabric run` does; then it sets its egress queues
  with simple_switch_CLI as the launcher does over Thrift
  (emulator.network.apply_queue_settings, recorded: QueueScript);
- every host on `--host-image` (the project's image, `make docker-build`:
  its agents run there), its NICs with the topology's MACs (lab.conf), the
  launcher's NIC and routing commands (emulator.network.nic_commands,
  host_routing_commands);
- links with a delay or a loss get the launcher's netem at both ends;
- a `controller` device (the project's image) on `mgmt`, which waits for
  every switch's P4Runtime server and runs `fabric program` on the topology
  with each switch's `management_ip`; its output in
  /var/log/fabric-program.log, ending `fabric program: exit N`. The
  pipeline (main.json, main.p4info.txtpb), that topology and the
  controller's certificate are in DIR/controller/fabric/build, which is
  /fabric/build in the container, where `fabric program` looks;
- mutual TLS on P4Runtime as the launcher runs it (control/tls.py): the lab's
  own CA in DIR/pki (made once, reused by a later export; it is no device's
  directory, so its key never enters a container), each switch's
  certificate for its management address in DIR/<switch>/etc/p4-ai-fabric/pki
  with the proxy's configuration beside it.

Interface names are the manager's: Docker names a device's interfaces eth0,
eth1... in lab.conf order; Kubernetes (Multus) names them net0, net1... and
keeps eth0 for the pod network. `--manager` picks which the startups use.
Collision domains are named after the link's ends (`leaf1_spine1`; a
second link between the same two: `leaf1_spine1_2`). Management addresses:
MANAGEMENT_NET, switch n at .n, the controller at the last address.
"""
from __future__ import annotations

import argparse
import ipaddress
import shlex
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import yaml

from emulator.bmv2 import switch_command
from control.controller import DEFAULT_PIPELINE
from control.switch import Pipeline
from control.feature import priority_queues
from emulator.network import apply_queue_settings, host_routing_commands, nic_commands
from emulator.p4runtime_proxy import ProxiedSwitch, ProxyConfig, backend_address
from control.authorization import DEFAULT_OPERATOR_ACCESS
from control.tls import Pki, ServerCredentials
from control.topology import GRPC_PORT_BASE, Topology, TopologyError
from features import load_topology

HOST_IMAGE = "p4-ai-fabric"          # docker/Dockerfile, `make docker-build`
SWITCH_IMAGE = HOST_IMAGE            # the same: p4lang's image (BMv2) with the project (the proxy)
# The project's image runs `make run` by default; a device's container runs a shell (as Kathara's images do).
DEVICE_COMMAND = "bash"
CONTROLLER = "controller"
MANAGEMENT = "mgmt"
MANAGEMENT_NET = ipaddress.ip_network("172.31.0.0/16")
SWITCH_LOG_LEVEL = "warn"
PROJECT_DIR = "/fabric"              # where the project's image keeps it
PROGRAM_DONE = "fabric program: exit "   # the controller log's last line, with fabric program's exit status
PROGRAM_LOG = "/var/log/fabric-program.log"
CONTROLLER_BUILD = f"{PROJECT_DIR}/build"   # where `fabric program` finds the pipeline and its certificate
LAB_TOPOLOGY = f"{CONTROLLER_BUILD}/topology.yaml"
# What each Kathara manager names a device's lab interfaces (i: lab.conf's index).
INTERFACE_PREFIX = {"docker": "eth", "kubernetes": "net"}
SWITCH_PKI = "/etc/p4-ai-fabric/pki"  # a switch's CA and own certificate, in its container
SWITCH_PROXY_CONFIG = "/etc/p4-ai-fabric/p4runtime-proxy.json"
SWITCH_SOCKETS = Path("/run/p4-ai-fabric")  # BMv2's P4Runtime socket: only the proxy (root) reaches it
LAB_PKI = "pki"                      # DIR/pki: the lab's CA and every certificate it signed


class QueueScript:
    """A QueueSetter (emulator/network.py) that writes each call as the
    simple_switch_CLI command that does the same."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def set_queue_rate(self, port: int, pps: int) -> None:
        self.lines.append(f"set_queue_rate {pps} {port}")

    def set_queue_depth(self, port: int, packets: int) -> None:
        self.lines.append(f"set_queue_depth {packets} {port}")

    def set_priority_queue_rate(self, port: int, priority: int, pps: int) -> None:
        self.lines.append(f"set_queue_rate {pps} {port} {priority}")

    def set_priority_queue_depth(self, port: int, priority: int, packets: int) -> None:
        self.lines.append(f"set_queue_depth {packets} {port} {priority}")


@dataclass
class Device:
    name: str
    image: str
    interfaces: list[tuple[str, str]] = field(default_factory=list)     # (collision domain, MAC or "")
    startup: list[str] = field(default_factory=list)



def collision_domains(topo: Topology) -> list[str]:
    """One per link, in the topology's link order, named after its ends."""
    names, seen = [], dict[str, int]()
    for link in topo.links:
        base = f"{link.a}_{link.b}"
        seen[base] = seen.get(base, 0) + 1
        names.append(base if seen[base] == 1 else f"{base}_{seen[base]}")
    return names


def management_ip(topo: Topology, switch: str) -> str:
    return str(MANAGEMENT_NET[topo.switches[switch].device_id])


def controller_ip() -> str:
    return str(MANAGEMENT_NET[-2])


def devices(topo: Topology, switch_image: str = SWITCH_IMAGE, host_image: str = HOST_IMAGE,
            manager: str = "docker") -> dict[str, Device]:
    """Every device of the lab: switches, hosts, the controller, with
    `manager`'s interface names."""
    if manager not in INTERFACE_PREFIX:
        raise ValueError(f"manager must be one of {', '.join(INTERFACE_PREFIX)}, got {manager!r}")
    eth = INTERFACE_PREFIX[manager]
    domain_of = dict(zip((id(link) for link in topo.links), collision_domains(topo)))
    prefix = MANAGEMENT_NET.prefixlen
    out: dict[str, Device] = {}
    for sw in topo.switches.values():
        dev = out[sw.name] = Device(sw.name, switch_image)
        ports = [sw.ports[n] for n in sorted(sw.ports)]
        dev.interfaces = [(domain_of[id(p.link)], p.mac) for p in ports] + [(MANAGEMENT, "")]
        mgmt, ip = f"{eth}{len(ports)}", management_ip(topo, sw.name)
        dev.startup += [f"ip addr add {ip}/{prefix} dev {mgmt}", f"ip link set {mgmt} up"]
        dev.startup += _netem(topo, sw.name, {id(p.link): f"{eth}{i}" for i, p in enumerate(ports)})
        cmd = switch_command("simple_switch_grpc", device_id=sw.device_id, thrift_port=sw.thrift_port,
                             grpc_addr=backend_address(SWITCH_SOCKETS, sw.name),
                             ports={p.number: f"{eth}{i}" for i, p in enumerate(ports)},
                             log_level=SWITCH_LOG_LEVEL, log_file=Path(f"/var/log/{sw.name}"),
                             priority_queues=priority_queues(topo, sw.name))
        dev.startup.append(f"mkdir -p -m 700 {SWITCH_SOCKETS}")
        dev.startup.append(shlex.join(cmd) + f" > /var/log/{sw.name}.stdout 2>&1 &")
        dev.startup.append(f"(cd {PROJECT_DIR} && exec .venv/bin/python -m emulator.p4runtime_proxy "
                           f"{SWITCH_PROXY_CONFIG}) > /var/log/p4runtime-proxy.log 2>&1 &")
        script = QueueScript()
        apply_queue_settings(topo, sw.name, script)    # what the launcher sets over Thrift, recorded
        dev.startup.append(f"until (exec 3<>/dev/tcp/127.0.0.1/{sw.thrift_port}) 2>/dev/null; do sleep 1; done")
        dev.startup.append(f"simple_switch_CLI --thrift-port {sw.thrift_port} > /var/log/{sw.name}.queues <<'EOF'\n"
                           + "\n".join(script.lines) + "\nEOF")
    for host in topo.hosts.values():
        dev = out[host.name] = Device(host.name, host_image)
        links = {topo.link_nic(link, host.name).iface: link for link in topo.links if host.name in (link.a, link.b)}
        renamed = {}
        for i, nic in enumerate(host.nics.values()):
            link = links[nic.iface]
            dev.interfaces.append((domain_of[id(link)], nic.mac))
            renamed[nic.iface] = f"{eth}{i}"
        for nic in host.nics.values():
            # (not its IPv6 sysctl: Kathara's default containers are unprivileged, and refuse it)
            dev.startup += [shlex.join(c) for c in nic_commands(nic, renamed[nic.iface]) if c[0] != "sysctl"]
        dev.startup += _netem(topo, host.name, {id(links[n]): renamed[n] for n in links})
        dev.startup += [shlex.join(c) for c in host_routing_commands(topo, host.name, renamed.__getitem__)]
    ctl = out[CONTROLLER] = Device(CONTROLLER, host_image, [(MANAGEMENT, "")])
    ctl.startup += [f"ip addr add {controller_ip()}/{prefix} dev {eth}0", f"ip link set {eth}0 up"]
    # In the background: Kubernetes runs a startup as the pod's postStart hook, which must not wait for others.
    waits = [f"until (exec 3<>/dev/tcp/{management_ip(topo, sw.name)}/{GRPC_PORT_BASE}) 2>/dev/null; "
             f"do sleep 1; done   # {sw.name}" for sw in topo.switches.values()]
    ctl.startup += ["(", *(f"  {w}" for w in waits),
                    f"  cd {PROJECT_DIR} && .venv/bin/fabric program --topology {LAB_TOPOLOGY}",
                    f"  echo \"{PROGRAM_DONE}$?\"", f") > {PROGRAM_LOG} 2>&1 &"]
    return out


def proxy_config(topo: Topology, switch: str) -> ProxyConfig:
    """The authorizing proxy in `switch`'s container: its management address
    in front of BMv2's socket, with the switch's certificate."""
    tls = switch_tls(switch)
    return ProxyConfig(str(tls.ca), (ProxiedSwitch(switch, f"{management_ip(topo, switch)}:{GRPC_PORT_BASE}",
                                                   backend_address(SWITCH_SOCKETS, switch), str(tls.cert),
                                                   str(tls.key)),), DEFAULT_OPERATOR_ACCESS)


def switch_tls(switch: str) -> ServerCredentials:
    """Where a switch's container holds its TLS files."""
    return ServerCredentials(Path(SWITCH_PKI, "ca.pem"), Path(SWITCH_PKI, f"{switch}.pem"), Path(SWITCH_PKI, f"{switch}.key"))


def write_pki(topo: Topology, out: Path) -> list[Path]:
    """The lab's CA (DIR/pki), each switch's certificate for its management
    address and the controller's, copied where their devices read them."""
    pki = Pki(out / LAB_PKI, ca_name=f"p4-ai-fabric lab {topo.name} CA")
    made = pki.ensure({sw.name: [management_ip(topo, sw.name)] for sw in topo.switches.values()})
    copies: list[tuple[Path, Path]] = []
    for name, creds in made.items():
        inside = switch_tls(name)
        copies += [(src, out / name / dst.relative_to("/"))
                   for src, dst in ((creds.ca, inside.ca), (creds.cert, inside.cert), (creds.key, inside.key))]
    controller = pki.client_credentials("controller")
    inside_ctl = Pki(out / CONTROLLER / CONTROLLER_BUILD.removeprefix("/") / "pki").client_credentials()
    copies += zip((controller.ca, controller.cert, controller.key), (inside_ctl.ca, inside_ctl.cert, inside_ctl.key))
    for src, dst in copies:
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dst)
        if dst.suffix == ".key":
            dst.chmod(0o600)
    return [dst for _, dst in copies]


def _netem(topo: Topology, node: str, iface_of: dict[int, str]) -> list[str]:
    """The launcher's netem on `node`'s end of each delayed or lossy link."""
    out = []
    for link in topo.links:
        if node in (link.a, link.b) and (link.delay_ms or link.loss_pct) and id(link) in iface_of:
            netem = (["delay", f"{link.delay_ms:g}ms"] if link.delay_ms else []) + \
                    (["loss", f"{link.loss_pct:g}%"] if link.loss_pct else [])
            out.append(shlex.join(["tc", "qdisc", "add", "dev", iface_of[id(link)], "root", "netem", *netem]))
    return out


def lab_conf(topo: Topology, devs: dict[str, Device]) -> str:
    text = "".join(c for c in " ".join(topo.description.split()) if c not in "=\"'")    # Kathara splits on =
    lines = [f'LAB_DESCRIPTION="{topo.name}: {text}"',
             'LAB_AUTHOR="p4-ai-fabric (fabric export kathara)"', ""]
    for dev in devs.values():
        for i, (domain, mac) in enumerate(dev.interfaces):
            lines.append(f'{dev.name}[{i}]="{domain}{"/" + mac if mac else ""}"')
        lines.append(f'{dev.name}[image]="{dev.image}"')
        lines.append(f'{dev.name}[args]="{DEVICE_COMMAND}"')
        lines.append("")
    return "\n".join(lines)


def managed_topology(topo: Topology) -> dict:
    """The topology file's data with each switch's management_ip."""
    data = yaml.safe_load(Path(topo.source).read_text())
    entries = []
    for raw in data["switches"]:
        entry = {"name": raw} if isinstance(raw, str) else dict(raw)
        entry["management_ip"] = management_ip(topo, entry["name"])
        entries.append(entry)
    data["switches"] = entries
    return data


def export(topo: Topology, out: Path, pipeline: Pipeline = DEFAULT_PIPELINE, *, switch_image: str = SWITCH_IMAGE,
           host_image: str = HOST_IMAGE, manager: str = "docker") -> list[Path]:
    """Write the lab to `out` (made; an existing lab.conf there is replaced,
    nothing else removed); return the files written."""
    for path in (pipeline.bmv2_json, pipeline.p4info_txt):
        if not path.exists():
            raise FileNotFoundError(f"{path} not found: run `make build` first")
    devs = devices(topo, switch_image, host_image, manager)
    out.mkdir(parents=True, exist_ok=True)
    written = [out / "lab.conf"]
    written[0].write_text(lab_conf(topo, devs))
    for dev in devs.values():
        path = out / f"{dev.name}.startup"
        path.write_text(f"# {dev.name}: written by `fabric export kathara --manager {manager}`\n"
                        + "\n".join(dev.startup) + "\n")
        written.append(path)
    build = out / CONTROLLER / CONTROLLER_BUILD.removeprefix("/")
    build.mkdir(parents=True, exist_ok=True)
    for src, name in ((pipeline.bmv2_json, "main.json"), (pipeline.p4info_txt, "main.p4info.txtpb")):
        shutil.copyfile(src, build / name)
        written.append(build / name)
    topology = out / CONTROLLER / LAB_TOPOLOGY.removeprefix("/")
    topology.write_text(f"# {topo.source} with each switch's management address (fabric export kathara)\n"
                        + yaml.safe_dump(managed_topology(topo), sort_keys=False))
    written.append(topology)
    written += write_pki(topo, out)
    for sw in topo.switches.values():
        path = out / sw.name / SWITCH_PROXY_CONFIG.removeprefix("/")
        written.append(proxy_config(topo, sw.name).write(path))
    return written


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="fabric export kathara", description=__doc__.split("\n\n")[0])
    ap.add_argument("--topology", "-t", required=True, help="topology name in topologies/ or a YAML path")
    ap.add_argument("--manager", choices=sorted(INTERFACE_PREFIX), default="docker",
                    help="Kathara's manager the lab is for: its interface names (default: %(default)s; "
                         "kubernetes: Megalos)")
    ap.add_argument("--switch-image", default=SWITCH_IMAGE, help="image of the switches (default: %(default)s)")
    ap.add_argument("--host-image", default=HOST_IMAGE, help="image of the hosts and the controller, with the "
                    "project in /fabric (default: %(default)s, `make docker-build`)")
    ap.add_argument("out", type=Path, help="directory of the lab (made if missing)")
    args = ap.parse_args(argv)
    try:
        topo = load_topology(args.topology)
        written = export(topo, args.out, switch_image=args.switch_image, host_image=args.host_image,
                         manager=args.manager)
    except (TopologyError, OSError) as exc:
        print(f"fabric export kathara: error: {exc}", file=sys.stderr)
        return 2
    print(f"fabric export kathara: {topo.name}: {len(topo.switches)} switches, {len(topo.hosts)} hosts and the "
          f"controller in {args.out}/lab.conf ({len(written)} files); start it with `kathara lstart -d {args.out}`")
    return 0


if __name__ == "__main__":
    sys.exit(main())
