"""Collectives on a live fabric (BMv2): the path model against the spines'
counters, and the sweep on four hosts of the leaf-spine with path-aware
channels, every result equal to numpy's; PyTorch DDP through the fabric,
by the ring or summed by the switch."""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from emulator.build import compile_p4
from control.controller import FabricController
from emulator.network import Network
from features import load_topology, topology_from_dict
from hostagent.aggregation.runs import start_server, stop_server
from hostagent.collectives.paths import PathModel

REPO = Path(__file__).resolve().parents[2]
SPINES = ("spine1", "spine2")


def spine_rx(ctl) -> dict[str, int]:
    return {sw: sum(pkts for pkts, _ in ctl.counter(sw, "ingress_port_counter").values()) for sw in SPINES}


def send_flow(net, host, dst_ip: str, sport: int, count: int) -> None:
    h = net.topo.hosts[host]
    script = ("from scapy.all import Ether, IP, UDP, Raw, sendp; "
              f"sendp([Ether(src='{h.mac}', dst='{h.gateway_mac}') / IP(src='{h.ip}', dst='{dst_ip}') / "
              f"UDP(sport={sport}, dport=4791) / Raw(bytes(40))] * {count}, iface='{h.iface}', inter=0.005, verbose=False)")
    proc = net.host_cmd(host, [sys.executable, "-c", script], timeout=60)
    assert proc.returncode == 0, proc.stderr


def sweep(hosts, prefix: Path, *options: str) -> list[dict]:
    """`python -m hostagent.collectives sweep` on `hosts` (rank order), two
    iterations a size, from one start time: each rank's summary."""
    start_at = time.time() + 3
    addresses = ",".join(h.ip for h in hosts)
    procs = []
    for rank, h in enumerate(hosts):
        out = prefix.with_name(f"{prefix.name}-rank{rank}")
        cmd = ["ip", "netns", "exec", h.name, sys.executable, "-m", "hostagent.collectives", "sweep",
               "--rank", str(rank), "--addresses", addresses, "--iface", h.iface, "--src-ip", h.ip,
               "--src-mac", h.mac, "--gw-mac", h.gateway_mac, "--iterations", "2", "--start-at", str(start_at),
               "--out", str(out), *options]
        procs.append((subprocess.Popen(cmd, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
                                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True), out))
    summaries = []
    for rank, (p, out) in enumerate(procs):
        stdout, stderr = p.communicate(timeout=600)
        assert p.returncode == 0, f"rank {rank} ({' '.join(options)}): {stdout}\n{stderr}"
        summaries.append(json.loads(out.with_suffix(".json").read_text()))
    return summaries


def test_path_model_and_path_aware_sweep_on_leaf_spine(tmp_path):
    compile_p4()
    topo = load_topology(REPO / "topologies" / "leaf-spine.yaml")
    model = PathModel(topo)
    h1, h4 = topo.hosts["h1"], topo.hosts["h4"]
    with Network(topo, tmp_path / "run", log_level="warn") as net, FabricController(topo) as ctl:
        ctl.program()
        # The model names the spine each chosen source port crosses; the counters agree.
        ports = model.choose_ports(h1.ip, h4.ip, 2)
        spines = [model.path(h1.ip, h4.ip, p).hops[1][0] for p in ports]
        assert sorted(spines) == list(SPINES)                  # two channels, two disjoint paths
        for sport, spine in zip(ports, spines):
            before = spine_rx(ctl)
            send_flow(net, "h1", h4.ip, sport, 60)
            time.sleep(0.5)
            after = spine_rx(ctl)
            grew = {sw: after[sw] - before[sw] for sw in SPINES}
            assert grew[spine] >= 60, (sport, spine, grew)
            other = next(sw for sw in SPINES if sw != spine)
            assert grew[other] < 10, (sport, spine, grew)     # (a stray ARP or report at most)

        # The sweep on four hosts, two path-aware channels per pair, ring and halving-doubling.
        hosts = [topo.hosts[h] for h in ("h1", "h2", "h3", "h4")]
        addresses = ",".join(h.ip for h in hosts)
        for algorithm in ("ring", "halving-doubling"):
            summaries = sweep(hosts, tmp_path / algorithm, "--algorithm", algorithm, "--min-bytes", "4096",
                              "--max-bytes", "65536", "--channels", "2", "--line-rate-pps", "2000",
                              "--paths", str(REPO / "topologies" / "leaf-spine.yaml"))
            for summary in summaries:
                assert summary["wrong_results"] == 0
                assert summary["table"][-1]["size_bytes"] == 65536
                assert all(row["busbw_bytes_per_s"] > 0 for row in summary["table"])


def test_in_network_sweep_equals_numpy_on_three_ranks(tmp_path):
    """The sweep with the switch's all-reduce on the leaf-spine's aggregation
    job (h1-h3: not a power of two; server h4, summed at leaf2), float32
    and int32."""
    compile_p4()
    topo = load_topology(REPO / "topologies" / "leaf-spine.yaml")
    job = topo.features["aggregation"].jobs[0]
    ranks = [topo.hosts[w] for w in job.workers]
    assert len(ranks) == 3
    with Network(topo, tmp_path / "run", log_level="warn") as net, FabricController(topo) as ctl:
        ctl.program()
        net.apply_queue_rates()
        server = start_server(topo, job.job, tmp_path)
        try:
            for dtype in ("float32", "int32"):
                summaries = sweep(ranks, tmp_path / dtype, "--algorithm", "in-network", "--aggregation-job",
                                  str(job.job), "--aggregation-server", topo.hosts[job.server].ip, "--dtype", dtype,
                                  "--min-bytes", "1000", "--max-bytes", "64000")
                for summary in summaries:
                    assert summary["wrong_results"] == 0 and summary["algorithm"] == "in-network"
                    assert [row["size_bytes"] for row in summary["table"]] == [1000, 2000, 4000, 8000, 16000,
                                                                                32000, 64000]
                    # every block went through the switch: the job's block a packet, 3 calls a size
                    blocks = sum(-(-row["elements"] // job.block_elements) for row in summary["table"])
                    assert summary["in_network"]["packets_sent"] >= 3 * blocks
                    assert all(row["busbw_bytes_per_s"] > 0 for row in summary["table"])
        finally:
            stop_server(server, tmp_path, job.job)


@pytest.mark.parametrize("algorithm", ["in-network"])
def test_ddp_through_the_fabric_equals_the_single_process_run(tmp_path, algorithm):
    """PyTorch DDP on h1 and h3 (different leaves): gradients summed at leaf2
    by the aggregation feature (in-network: aggregation job 1 made of h1 and
    h3, its server h4); torch.distributed's gloo set-up over TCP through the
    fabric too; the loss curve equals the reference's (within the
    quantisation, far below the tolerance). DDP over the RC transport (ring)
    is fabric train's test (test_train.py)."""
    compile_p4()
    raw = yaml.safe_load((REPO / "topologies" / "leaf-spine.yaml").read_text())
    raw["aggregation"] = {"jobs": [{"job": 1, "workers": ["h1", "h3"], "server": "h4", "slots": 32}]}
    topo = topology_from_dict(raw, "leaf-spine, aggregation job h1 + h3")
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    epochs = 2
    reference = subprocess.run([sys.executable, "-m", "hostagent.collectives.ddp", "--reference", "--epochs",
                                str(epochs), "--out", str(tmp_path / "reference")], cwd=REPO, env=env,
                               capture_output=True, text=True, timeout=300)
    assert reference.returncode == 0, reference.stderr
    hosts = [topo.hosts["h1"], topo.hosts["h3"]]
    switch_options = [] if algorithm == "ring" else ["--aggregation-job", "1",
                                                      "--aggregation-server", topo.hosts["h4"].ip]
    with Network(topo, tmp_path / "run", log_level="warn") as net, FabricController(topo) as ctl:
        ctl.program()
        net.apply_queue_rates()
        server = start_server(topo, 1, tmp_path) if algorithm == "in-network" else None
        try:
            procs = []
            for rank, h in enumerate(hosts):
                cmd = ["ip", "netns", "exec", h.name, sys.executable, "-m", "hostagent.collectives.ddp",
                       "--rank", str(rank), "--addresses", ",".join(x.ip for x in hosts), "--iface", h.iface,
                       "--src-ip", h.ip, "--src-mac", h.mac, "--gw-mac", h.gateway_mac, "--line-rate-pps", "3000",
                       "--algorithm", algorithm, *switch_options, "--epochs", str(epochs),
                       "--out", str(tmp_path / f"rank{rank}")]
                procs.append(subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                              text=True))
            for rank, p in enumerate(procs):
                stdout, stderr = p.communicate(timeout=900)
                assert p.returncode == 0, f"rank {rank}: {stdout}\n{stderr[-3000:]}"
        finally:
            if server is not None:
                stop_server(server, tmp_path, 1)
    ref = json.loads((tmp_path / "reference.json").read_text())["epochs"]
    for rank in range(2):
        mine = json.loads((tmp_path / f"rank{rank}.json").read_text())
        assert mine["algorithm"] == algorithm
        assert mine["buckets_all_reduced"] >= epochs * (1347 // 64)
        for a, b in zip(mine["epochs"], ref):
            assert abs(a["train_loss"] - b["train_loss"]) <= 1e-4, (rank, a, b)
