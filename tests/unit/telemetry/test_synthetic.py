"""Synthetic reports follow real paths of the topology and decode cleanly."""
import subprocess
import sys
import time
from pathlib import Path

from features import load_topology
from telemetry.collector import Collector
from telemetry.decode import decode_report
from telemetry.synthetic import SyntheticFabric, topology_path

REPO = Path(__file__).resolve().parents[3]


def test_paths_follow_the_topology():
    for name in ("leaf-spine", "fat-tree-k4"):
        topo = load_topology(REPO / "topologies" / f"{name}.yaml")
        by_id = {sw.device_id: sw for sw in topo.switches.values()}
        hosts = list(topo.hosts.values())
        for src, dst in [(hosts[0], hosts[-1]), (hosts[-1], hosts[0])]:
            for choice in range(4):
                path = topology_path(topo, src.name, dst.name, choice)
                assert by_id[path[0].node_id].name == src.switch and path[0].ingress_port == src.switch_port
                for here, there in zip(path, path[1:]):
                    port = by_id[here.node_id].ports[here.egress_port]
                    assert port.peer == by_id[there.node_id].name and port.peer_port == there.ingress_port
                assert by_id[path[-1].node_id].ports[path[-1].egress_port].peer == dst.name


def test_rounds_decode_without_errors_and_number_streams_per_node():
    fabric = SyntheticFabric(load_topology(REPO / "topologies" / "leaf-spine.yaml"))
    seen: dict[int, list[int]] = {}
    for _ in range(3):
        for data in fabric.next_round():
            pkt = decode_report(data)
            seen.setdefault(pkt.node_id, []).append(pkt.seq_no)
    assert all(seqs == list(range(len(seqs))) for seqs in seen.values())


def test_cli_sends_to_a_collector():
    with Collector(port=0, metrics_port=None, out_dir=None) as col:
        run = subprocess.run([sys.executable, "-m", "telemetry.synthetic", "--topology", "topologies/leaf-spine.yaml",
                              "--to", f"127.0.0.1:{col.port}", "--rate", "20", "--duration", "0.3"],
                             cwd=REPO, capture_output=True, text=True, timeout=60)
        assert run.returncode == 0, run.stderr
        sent = int(run.stdout.split("sent ")[1].split()[0])
        deadline = time.monotonic() + 10
        while col.totals()["packets"] < sent and time.monotonic() < deadline:
            time.sleep(0.02)
        assert col.totals()["packets"] == sent > 0 and col.totals()["malformed"] == 0
