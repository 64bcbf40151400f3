"""`python -m features.failover.diagnose` on a live leaf-spine network under traffic
between the leaves: it names a lossy link (10% lost at random on one
direction) and a switch whose process was killed, each as its first
finding, with the evidence."""
import threading
import time
from pathlib import Path

import pytest

from features.failover import diagnose
from emulator.build import compile_p4
from control.controller import FabricController
from emulator.impairments import drop_fraction
from emulator.network import Network
from features import load_topology
from emulator.netns import socket_in_netns

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def live(tmp_path):
    compile_p4()
    topo = load_topology(REPO / "topologies" / "leaf-spine.yaml")
    with Network(topo, tmp_path / "net", log_level="warn") as net, FabricController(topo) as ctl:
        ctl.program()
        stop = threading.Event()

        def traffic(src: str, dst: str):
            s = socket_in_netns(src)
            try:
                i = 0
                while not stop.is_set():
                    s.sendto(b"x" * 32, (topo.hosts[dst].ip, 5301 + i % 64))   # 64 flows: both spines
                    i += 1
                    time.sleep(0.002)
            except OSError:
                pass
            finally:
                s.close()

        threads = [threading.Thread(target=traffic, args=pair, daemon=True)
                   for pair in (("h1", "h3"), ("h3", "h1"), ("h2", "h4"), ("h4", "h2"))]
        for t in threads:
            t.start()
        time.sleep(1.0)
        try:
            yield topo, net, ctl
        finally:
            stop.set()
            for t in threads:
                t.join()


def test_names_a_lossy_link(live):
    topo, net, ctl = live
    port = next(p for p in topo.switches["leaf1"].ports.values() if p.peer == "spine2")
    undo = drop_fraction(port.iface, 0.10)      # leaf1 -> spine2 loses 10%
    try:
        findings, took = diagnose.run(ctl, interval_s=1.5)
    finally:
        undo()
    print("\n" + "\n".join(map(str, findings[:3])), f"({took:.1f} s)")
    assert findings and findings[0].kind == "link"
    assert findings[0].name.startswith(f"leaf1:{port.number}->spine2:")


def test_names_a_switch_that_died(live):
    topo, net, ctl = live
    net.switches["spine1"].proc.kill()
    net.switches["spine1"].proc.wait()
    ctl.connections.pop("spine1").close()
    findings, took = diagnose.run(ctl, interval_s=1.5)
    print("\n" + "\n".join(map(str, findings[:3])), f"({took:.1f} s)")
    assert (findings[0].kind, findings[0].name) == ("switch", "spine1")
