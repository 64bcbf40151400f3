"""`fabric export kathara` (fabric/kathara.py) for every shipped topology,
read back by Kathara's own parser (the `kathara` package: LabParser loads a
lab without running it), and each device's startup checked against what
the project's launcher runs for the same node (emulator/network.py, emulator/bmv2.py)."""
from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from Kathara.parser.netkit.LabParser import LabParser

from emulator.bmv2 import switch_command
from control.feature import priority_queues
from emulator.network import apply_queue_settings, host_routing_commands, nic_commands
from control.switch import Pipeline
from cryptography import x509

from control.tls import subject_alt_names
from control.topology import TopologyError
from emulator.p4runtime_proxy import ProxyConfig
from fabric.kathara import CONTROLLER, MANAGEMENT, SWITCH_PROXY_CONFIG, QueueScript, devices, export, \
    management_ip, switch_tls
from features import load_topology

REPO = Path(__file__).resolve().parents[3]
TOPOLOGIES = sorted(p.stem for p in (REPO / "topologies").glob("*.yaml"))


@pytest.fixture
def pipeline(tmp_path) -> Pipeline:
    """Stand-ins for the compiled pipeline: the export copies them, nothing reads them here."""
    json_file, p4info = tmp_path / "main.json", tmp_path / "main.p4info.txtpb"
    json_file.write_text('{"program": "main.p4"}\n')
    p4info.write_text("pkg_info { arch: \"v1model\" }\n")
    return Pipeline(json_file, p4info)


def startup(lab_dir: Path, device: str) -> list[str]:
    return (lab_dir / f"{device}.startup").read_text().splitlines()[1:]


@pytest.mark.parametrize("name", TOPOLOGIES)
def test_every_topology_exports_a_lab_kathara_loads_that_runs_what_the_launcher_runs(tmp_path, pipeline, name):
    topo = load_topology(name)
    out = tmp_path / "lab"
    export(topo, out, pipeline)
    lab = LabParser.parse(str(out))
    assert set(lab.machines) == {*topo.switches, *topo.hosts, CONTROLLER}

    def domain(node: str, iface: int) -> str:
        return lab.machines[node].interfaces[iface].link.name

    # every link: its two ends on one collision domain of their own
    ends: dict[str, set[str]] = {}
    for node, machine in lab.machines.items():
        for i, iface in machine.interfaces.items():
            ends.setdefault(iface.link.name, set()).add(node)
    assert ends.pop(MANAGEMENT) == {*topo.switches, CONTROLLER}
    assert sorted(tuple(sorted(e)) for e in ends.values()) == sorted(tuple(sorted((l.a, l.b))) for l in topo.links)

    for sw in topo.switches.values():
        machine = lab.machines[sw.name]
        assert machine.meta["image"] == "p4-ai-fabric" and machine.meta["args"] == "bash"   # not the image's make run
        lines = startup(out, sw.name)
        (cmd_line,) = [line for line in lines if line.startswith("simple_switch_grpc ")]
        cmd = shlex.split(cmd_line.split(" > ")[0])
        ports = dict(arg.split("@") for arg in cmd[cmd.index("-i") + 1::2] if "@" in arg)
        ports = {int(n): iface for n, iface in ports.items()}
        assert set(ports) == set(sw.ports)
        for number, iface in ports.items():       # BMv2 port N is the lab interface on port N's link
            port = sw.ports[number]
            assert domain(sw.name, int(iface[3:])) == next(d for d, e in ends.items() if e == {sw.name, port.peer}
                                                           or (port.peer == sw.name and e == {sw.name})), number
            assert machine.interfaces[int(iface[3:])].mac_address == port.mac
        backend = f"unix:/run/p4-ai-fabric/{sw.name}.sock"
        assert cmd == switch_command("simple_switch_grpc", device_id=sw.device_id, thrift_port=sw.thrift_port,
                                     grpc_addr=backend, ports=ports,
                                     log_level="warn", log_file=Path(f"/var/log/{sw.name}"),
                                     priority_queues=priority_queues(topo, sw.name))
        # in front of BMv2, the authorizing proxy: the management address, mutual TLS with the switch's certificate
        assert "mkdir -p -m 700 /run/p4-ai-fabric" in lines
        assert any("-m emulator.p4runtime_proxy /etc/p4-ai-fabric/p4runtime-proxy.json" in x for x in lines)
        proxy = ProxyConfig.read(out / sw.name / SWITCH_PROXY_CONFIG.removeprefix("/"))
        (proxied,) = proxy.switches
        tls = switch_tls(sw.name)
        assert (proxied.name, proxied.address, proxied.backend, proxied.cert, proxied.key, proxy.ca) == \
            (sw.name, f"{management_ip(topo, sw.name)}:9559", backend, str(tls.cert), str(tls.key), str(tls.ca))
        launcher = QueueScript()
        apply_queue_settings(topo, sw.name, launcher)
        queue_lines = lines[lines.index(next(x for x in lines if "> /var/log/" in x and ".queues" in x)) + 1:-1]
        assert queue_lines == launcher.lines and launcher.lines

    for host in topo.hosts.values():
        machine = lab.machines[host.name]
        renamed = {nic.iface: f"eth{i}" for i, nic in enumerate(host.nics.values())}
        assert [machine.interfaces[i].mac_address for i in range(len(host.nics))] == \
            [nic.mac for nic in host.nics.values()]
        # what the launcher runs, but its IPv6 sysctl (unprivileged containers refuse it)
        expected = [shlex.join(c) for nic in host.nics.values() for c in nic_commands(nic, renamed[nic.iface])
                    if c[0] != "sysctl"]
        expected += [shlex.join(c) for c in host_routing_commands(topo, host.name, renamed.__getitem__)]
        assert [line for line in startup(out, host.name) if not line.startswith("tc ")] == expected

    build = out / CONTROLLER / "fabric" / "build"                     # /fabric/build in the controller
    managed = load_topology(build / "topology.yaml")
    assert list(managed.switches) == list(topo.switches) and list(managed.hosts) == list(topo.hosts)
    waits = "\n".join(startup(out, CONTROLLER))
    for sw in managed.switches.values():
        assert sw.grpc_addr == f"{management_ip(topo, sw.name)}:9559"
        assert f"/dev/tcp/{sw.grpc_addr.replace(':', '/')})" in waits
    assert (build / "main.json").read_text() == pipeline.bmv2_json.read_text()
    assert (build / "main.p4info.txtpb").read_text() == pipeline.p4info_txt.read_text()
    assert "fabric program --topology /fabric/build/topology.yaml" in waits
    assert not (out / "shared").exists()      # nothing the lab needs is in a shared folder (not Megalos')
    check_lab_pki(topo, out)


def check_lab_pki(topo, out: Path) -> None:
    """Each switch holds the lab CA and its own certificate, for its name and
    management address, signed by that CA; the controller holds the CA and a
    client certificate from it where `fabric program` looks; no device
    directory holds the CA's key."""
    ca = x509.load_pem_x509_certificate((out / "pki" / "ca.pem").read_bytes())
    for sw in topo.switches.values():
        inside = switch_tls(sw.name)
        files = [out / sw.name / p.relative_to("/") for p in (inside.ca, inside.cert, inside.key)]
        assert files[0].read_bytes() == (out / "pki" / "ca.pem").read_bytes()
        cert = x509.load_pem_x509_certificate(files[1].read_bytes())
        cert.verify_directly_issued_by(ca)
        assert subject_alt_names(cert) == {sw.name, management_ip(topo, sw.name)}
        assert files[2].exists()
    home = out / CONTROLLER / "fabric" / "build" / "pki"
    x509.load_pem_x509_certificate((home / "clients" / "controller.pem").read_bytes()).verify_directly_issued_by(ca)
    assert (home / "ca.pem").exists() and (home / "clients" / "controller.key").exists()
    assert [p for p in out.rglob("ca.key")] == [out / "pki" / "ca.key"]


def test_a_delayed_link_gets_the_launchers_netem_at_both_ends(tmp_path, pipeline):
    topo = load_topology("dumbbell")            # s1 - s2: 1 ms
    export(topo, tmp_path, pipeline)
    for sw in ("s1", "s2"):
        assert [line for line in startup(tmp_path, sw) if line.startswith("tc ")] == \
            [f"tc qdisc add dev eth{2 if sw == 's1' else 0} root netem delay 1ms"]


def test_bad_input_is_named_and_nothing_written(tmp_path):
    run = subprocess.run([sys.executable, "-m", "fabric.kathara", "--topology", "no-such", str(tmp_path / "a")],
                         cwd=REPO, capture_output=True, text=True, timeout=60)
    assert run.returncode == 2 and "no topology named 'no-such'" in run.stderr, run.stderr
    assert not (tmp_path / "a").exists()
    missing = Pipeline(tmp_path / "none.json", tmp_path / "none.txtpb")
    with pytest.raises(FileNotFoundError, match="make build"):
        export(load_topology("star"), tmp_path / "b", missing)
    assert not (tmp_path / "b").exists()


def test_management_ip_is_validated_by_the_topology_loader(tmp_path):
    text = (REPO / "topologies" / "star.yaml").read_text().replace("- {name: s1", "- {name: s1, management_ip: 300.1.2.3")
    assert "300.1.2.3" in text, "star.yaml's switch entry changed shape"
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    with pytest.raises(Exception, match=r"switches\[0\]\.management_ip: '300.1.2.3' is not an IPv4 address"):
        load_topology(bad)


def test_no_startup_line_needs_a_privileged_container(tmp_path, pipeline):
    """Kathara's default devices are unprivileged: they cannot write
    net.ipv6.conf.<if>.* (the launcher's namespaces can)."""
    export(load_topology("leaf-spine"), tmp_path / "lab", pipeline)
    for dev in ("leaf1", "spine1", "h1", "h3", CONTROLLER):
        assert not [line for line in startup(tmp_path / "lab", dev) if "sysctl" in line], dev


@pytest.mark.parametrize("name", ["controller", "pki", "shared"])
def test_a_node_named_after_what_the_export_makes_is_refused_naming_the_field(name, tmp_path):
    path = tmp_path / "star.yaml"
    path.write_text((REPO / "topologies" / "star.yaml").read_text().replace("h1", name))
    with pytest.raises(TopologyError, match=rf"star.yaml.*hosts\[0\]\.name: '{name}' is reserved"):
        load_topology(path)


@pytest.fixture
def kubernetes_settings():
    """Kathara's settings with its Kubernetes manager (Megalos), put back after."""
    from Kathara.setting.Setting import Setting
    Setting.get_instance().load_from_dict({"manager_type": "kubernetes"})
    yield Setting.get_instance()
    Setting.get_instance().load_from_dict({"manager_type": "docker"})


@pytest.mark.parametrize("name", ["star", "leaf-spine", "fat-tree-k4", "rail-optimized"])
def test_a_lab_for_kubernetes_names_interfaces_as_kathara_gives_them_there(tmp_path, pipeline, name,
                                                                          kubernetes_settings):
    """Kathara's own Kubernetes code, run without a cluster: the ConfigMap each
    device's files travel in (at most 3 MiB), and the pod each device runs in,
    whose Multus annotation names the lab's interfaces net0, net1... (eth0 is
    the pod network). Every startup uses those names; the controller's
    pipeline, topology and certificate arrive where `fabric program` reads
    them."""
    import base64
    import io
    import json
    import tarfile

    from Kathara.manager.kubernetes.KubernetesConfigMap import KubernetesConfigMap
    from Kathara.manager.kubernetes.KubernetesMachine import KubernetesMachine
    from Kathara.manager.kubernetes.KubernetesNamespace import KubernetesNamespace

    topo = load_topology(name)
    out = tmp_path / "lab"
    export(topo, out, pipeline, manager="kubernetes")
    lab = LabParser.parse(str(out))
    for link in lab.links.values():                # what the cluster would name each network
        link.api_object = {"metadata": {"name": f"kathara-{link.name}"}}
    devs = devices(topo, manager="kubernetes")
    sizes = {}
    kube_machine = KubernetesMachine(KubernetesNamespace())
    for dev_name, machine in lab.machines.items():
        machine.add_meta("real_name", kube_machine.get_deployment_name(machine.name))   # as its deploy does
        config_map = KubernetesConfigMap()._build_for_machine(machine)     # raises above 3 MiB
        packed = base64.b64decode(config_map.data["hostlab.b64"])
        sizes[dev_name] = len(packed)
        pod = kube_machine._build_definition(machine, config_map)
        networks = json.loads(pod.spec.template.metadata.annotations["k8s.v1.cni.cncf.io/networks"])
        names = {n["kathara.link"]: n["interface"] for n in networks}
        assert [names[domain] for domain, _ in devs[dev_name].interfaces] == \
            [f"net{i}" for i in range(len(devs[dev_name].interfaces))]
        text = "\n".join(startup(out, dev_name))
        assert "eth" not in text.replace("ethtool", ""), (dev_name, text)    # eth0 is the pod's
        for domain, iface in names.items():
            if dev_name in topo.switches and domain != MANAGEMENT:
                assert f"@{iface} " in text or text.count(f"@{iface}\n"), (dev_name, iface)
        if dev_name == CONTROLLER:
            with tarfile.open(fileobj=io.BytesIO(packed)) as tar:
                inside = set(tar.getnames())
            for f in ("main.json", "main.p4info.txtpb", "topology.yaml", "pki/clients/controller.pem"):
                assert f"hostlab/controller/fabric/build/{f}" in inside, f
            assert "dev net0" in text
    assert max(sizes.values()) < 3 * 2 ** 20
