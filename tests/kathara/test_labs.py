"""Labs on Kathara, live: `fabric export kathara` run by Kathara's own
Python API on a real Docker daemon (scripts/test_kathara.sh, `make
test-kathara`, starts it, builds the images and provides the network plugin,
then runs this file).

For each topology: the lab starts (lstart), its controller container programs
every switch over the management network with mutual TLS, through the
authorizing proxy in each switch's container; every host pings every other
host's address; an all-reduce over every host runs through the switches and
each rank checks its result exactly; the `monitor` role's certificate may
read a switch but its Write and its primacy grab are refused; lclean leaves
no container, no network and no bridge or veth of the plugin behind. Each
step is timed: the figures go to build/test-kathara/<topology>.json and a
line per step is printed.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import docker
import pytest
from Kathara.manager.Kathara import Kathara
from Kathara.parser.netkit.LabParser import LabParser
from Kathara.setting.Setting import Setting

from control.switch import Pipeline
from control.tls import Pki
from emulator.build import compile_p4
from fabric.kathara import CONTROLLER, LAB_PKI, LAB_TOPOLOGY, PROGRAM_DONE, PROGRAM_LOG, PROJECT_DIR, export, \
    management_ip
from features import load_topology

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "build" / "test-kathara"
IMAGE = os.environ.get("KATHARA_TEST_IMAGE", "")
OWN_PLUGIN = os.environ.get("KATHARA_TEST_OWN_PLUGIN") == "1"   # the project's driver: its bridges and veths are checked
TOPOLOGIES = os.environ.get("KATHARA_TEST_TOPOLOGIES", "star leaf-spine fat-tree-k4").split()
PROGRAM_TIMEOUT_S = 600        # lstart returns before the switches answer; 20 switches start on 2 cores
COLLECTIVE_PPS = 200           # each rank's connection rate: far below what the lab's BMv2s forward
AGENT_PYTHON = f"{PROJECT_DIR}/.venv/bin/python"
SETTINGS = {
    "manager_type": "docker",
    "network_plugin": "kathara/katharanp_vde",   # the name scripts/test_kathara.sh registers the driver under
    "image_update_policy": "Never",              # the images are built here: no registry to ask
    "device_prefix": "p4af", "net_prefix": "p4af",
    "hosthome_mount": False, "shared_mount": True, "enable_ipv6": False,
    "print_startup_log": False, "last_checked": time.time(),
}


@pytest.fixture(scope="session")
def kathara() -> Kathara:
    if not IMAGE:
        pytest.fail("KATHARA_TEST_IMAGE is not set: these tests run on a Docker daemon with the project's image and "
                    "Kathara's network plugin, which scripts/test_kathara.sh (make test-kathara) provides")
    Setting.get_instance().load_from_dict(SETTINGS)
    return Kathara.get_instance()


@pytest.fixture(scope="session")
def pipeline() -> Pipeline:
    return compile_p4()


class Steps:
    """Each step's wall time, printed as it ends."""

    def __init__(self, lab: str):
        self.lab, self.seconds = lab, dict[str, float]()

    @contextmanager
    def __call__(self, name: str):
        t0 = time.monotonic()
        try:
            yield
        finally:
            self.seconds[name] = round(time.monotonic() - t0, 1)
            print(f"[kathara {self.lab}] {name}: {self.seconds[name]:.1f} s", flush=True)


def wait_for_program(kathara: Kathara, lab_hash: str, timeout_s: float) -> str:
    """The controller's log once `fabric program` has exited."""
    deadline = time.monotonic() + timeout_s
    text = ""
    while time.monotonic() < deadline:
        _, text = run_in(kathara, lab_hash, CONTROLLER, f"cat {PROGRAM_LOG} 2>/dev/null")
        if PROGRAM_DONE in text:
            return text
        time.sleep(2)
    raise AssertionError(f"fabric program did not finish within {timeout_s} s; its log so far:\n{text}")


def run_in(kathara: Kathara, lab_hash: str, machine: str, command: str) -> tuple[int, str]:
    container = kathara.get_machine_api_object(machine, lab_hash=lab_hash)
    code, out = container.exec_run(["bash", "-c", command])
    return code, out.decode(errors="replace")


def ping_all(kathara: Kathara, lab_hash: str, topo) -> dict[str, list[str]]:
    """Every host pings every other host's address (one ping, a second try
    with three if it fails); the pairs that never answered, by source."""
    def from_host(src: str) -> tuple[str, list[str]]:
        targets = " ".join(h.ip for h in topo.hosts.values() if h.name != src)
        code, out = run_in(kathara, lab_hash, src, f"for ip in {targets}; do ping -c 1 -W 2 $ip >/dev/null || "
                                                   "ping -c 3 -W 2 $ip >/dev/null || echo FAIL $ip; done")
        return src, [line.split()[1] for line in out.splitlines() if line.startswith("FAIL ")]
    with ThreadPoolExecutor(len(topo.hosts)) as pool:
        return {src: failed for src, failed in pool.map(from_host, topo.hosts) if failed}


def all_reduce(kathara: Kathara, lab_hash: str, topo) -> list[tuple[str, int, str]]:
    """An all-reduce (ring, 4 KiB, one iteration after the warm-up) with every
    host a rank, started together; (host, exit status, output) per rank."""
    hosts = list(topo.hosts.values())
    addresses = ",".join(h.ip for h in hosts)
    start_at = time.time() + 5 + 0.2 * len(hosts)

    def rank(r: int) -> tuple[str, int, str]:
        h = hosts[r]
        code, out = run_in(kathara, lab_hash, h.name, (
            f"cd {PROJECT_DIR} && {AGENT_PYTHON} -m hostagent.collectives sweep --rank {r} --addresses {addresses} "
            f"--iface eth0 --src-ip {h.ip} --src-mac {h.mac} --gw-mac {h.gateway_mac} --min-bytes 4096 "
            f"--max-bytes 4096 --iterations 1 --line-rate-pps {COLLECTIVE_PPS} --timeout-s 90 "
            f"--start-at {start_at:.3f} 2>&1"))
        return h.name, code, out
    with ThreadPoolExecutor(len(hosts)) as pool:
        return list(pool.map(rank, range(len(hosts))))


def leftovers(client: docker.DockerClient, lab_hash: str) -> list[str]:
    """What of the lab is still there after lclean."""
    out = [f"container {c.name}" for c in client.containers.list(all=True, filters={"label": f"lab_hash={lab_hash}"})]
    out += [f"network {n.name}" for n in client.networks.list(filters={"label": f"lab_hash={lab_hash}"})]
    if OWN_PLUGIN:
        links = os.popen("ip -o link show").read()
        out += [f"host link {m}" for m in re.findall(r"^\d+: (k[tv][-0-9a-f]+?[oi]?)[@:]", links, re.M)]
    return out


@pytest.mark.parametrize("name", TOPOLOGIES)
def test_a_lab_starts_is_programmed_over_mutual_tls_and_carries_traffic(kathara, pipeline, tmp_path, name):
    topo = load_topology(name)
    lab_dir = tmp_path / name
    steps = Steps(name)
    with steps("export"):
        export(topo, lab_dir, pipeline, switch_image=IMAGE, host_image=IMAGE)
        lab = LabParser.parse(str(lab_dir))
    # the monitor's certificate from the lab's CA, and the check it runs, in the controller's /tmp/monitor
    monitor = Pki(lab_dir / LAB_PKI).client_credentials("monitor")
    inside = lab_dir / CONTROLLER / "tmp" / "monitor"
    inside.mkdir(parents=True)
    for src in (monitor.ca, monitor.cert, monitor.key, Path(__file__).with_name("monitor_write.py")):
        shutil.copy(src, inside / Path(src).name)
    client = docker.from_env()
    failures: list[str] = []
    try:
        with steps("lstart"):
            kathara.deploy_lab(lab)
        with steps("program"):
            log = wait_for_program(kathara, lab.hash, PROGRAM_TIMEOUT_S)
        assert log.rstrip().endswith(PROGRAM_DONE + "0"), f"fabric program failed in the lab:\n{log}"
        programmed = {line.split()[0] for line in log.splitlines() if " inserted, " in line}
        assert programmed == set(topo.switches), log

        with steps("ping"):
            unreachable = ping_all(kathara, lab.hash, topo)
        pairs = len(topo.hosts) * (len(topo.hosts) - 1)
        assert not unreachable, f"{sum(map(len, unreachable.values()))} of {pairs} pairs did not answer: {unreachable}"

        with steps("all-reduce"):
            ranks = all_reduce(kathara, lab.hash, topo)
        wrong = [(h, code, out[-600:]) for h, code, out in ranks if code != 0]
        assert not wrong, f"ranks that failed: {wrong}"
        assert re.search(r"^\s*4096\s", ranks[0][2], re.M), ranks[0][2]     # nccl-tests' row for 4 KiB

        with steps("roles"):
            sw = next(iter(topo.switches.values()))
            code, out = run_in(kathara, lab.hash, CONTROLLER, (
                f"{AGENT_PYTHON} /tmp/monitor/monitor_write.py {management_ip(topo, sw.name)}:9559 "
                f"{sw.device_id} /tmp/monitor/{monitor.ca.name} /tmp/monitor/{monitor.cert.name} "
                f"/tmp/monitor/{monitor.key.name}"))
            assert code == 0, out
            said = json.loads(out.strip().splitlines()[-1])
            assert said["Write"].startswith("PERMISSION_DENIED") and "role 'monitor' may not call Write" in said["Write"]
            assert said["primacy"].startswith("PERMISSION_DENIED") and "may not ask for primacy" in said["primacy"]
            assert said["Capabilities"] == "ok", said
            # nothing changed, and the controller is still the one that writes: programming again writes nothing
            code, again = run_in(kathara, lab.hash, CONTROLLER,
                                 f"cd {PROJECT_DIR} && .venv/bin/fabric program --topology {LAB_TOPOLOGY}")
            assert code == 0, again
            reports = [line for line in again.splitlines() if " inserted, " in line]
            assert len(reports) == len(topo.switches) and all("0 inserted, 0 modified, 0 deleted" in r
                                                              for r in reports), again
    finally:
        with steps("lclean"):
            kathara.undeploy_lab(lab_hash=lab.hash)
        failures = leftovers(client, lab.hash)
        RESULTS.mkdir(parents=True, exist_ok=True)
        (RESULTS / f"{name}.json").write_text(json.dumps(
            {"topology": name, "switches": len(topo.switches), "hosts": len(topo.hosts), "image": IMAGE,
             "seconds": steps.seconds, "leftovers": failures}, indent=1))
    assert not failures, f"lclean left: {failures}"
