"""The in-network all-reduce as a collective algorithm, on a live fabric
(BMv2): the sweep on the leaf-spine's aggregation job (h1-h3, server h4,
summed at leaf2) equal to numpy's for float32 and int32, and PyTorch DDP
with its gradients summed by the switch."""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import yaml

from core.build import compile_p4
from core.controller import FabricController
from core.network import Network
from features import load_topology, topology_from_dict
from hostagent.aggregation.runs import start_server, stop_server

REPO = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}


def host_options(h) -> list[str]:
    return ["--iface", h.iface, "--src-ip", h.ip, "--src-mac", h.mac, "--gw-mac", h.gateway_mac]


def test_in_network_sweep_equals_numpy_on_three_ranks(tmp_path):
    compile_p4()
    topo = load_topology(REPO / "topologies" / "leaf-spine.yaml")
    job = topo.features["aggregation"].jobs[0]
    ranks = [topo.hosts[w] for w in job.workers]
    assert len(ranks) == 3                           # not a power of two
    server = topo.hosts[job.server]
    with Network(topo, tmp_path / "run", log_level="warn") as net, FabricController(topo) as ctl:
        ctl.program()
        net.apply_queue_rates()
        server_proc = start_server(topo, job.job, tmp_path)
        try:
            for dtype in ("float32", "int32"):
                start_at = time.time() + 3
                procs = []
                for rank, h in enumerate(ranks):
                    out = tmp_path / f"{dtype}-rank{rank}"
                    cmd = ["ip", "netns", "exec", h.name, sys.executable, "-m", "hostagent.collectives", "sweep",
                           "--rank", str(rank), "--addresses", ",".join(r.ip for r in ranks), *host_options(h),
                           "--algorithm", "in-network", "--aggregation-job", str(job.job),
                           "--aggregation-server", server.ip, "--dtype", dtype, "--min-bytes", "1000",
                           "--max-bytes", "64000", "--iterations", "2", "--start-at", str(start_at),
                           "--out", str(out)]
                    procs.append((subprocess.Popen(cmd, cwd=REPO, env=ENV, stdout=subprocess.PIPE,
                                                   stderr=subprocess.PIPE, text=True), out))
                for rank, (p, out) in enumerate(procs):
                    stdout, stderr = p.communicate(timeout=600)
                    assert p.returncode == 0, f"{dtype} rank {rank}: {stdout}\n{stderr}"
                    summary = json.loads(out.with_suffix(".json").read_text())
                    assert summary["wrong_results"] == 0 and summary["algorithm"] == "in-network"
                    assert [row["size_bytes"] for row in summary["table"]] == [1000, 2000, 4000, 8000, 16000,
                                                                                32000, 64000]
                    # every block went through the switch: 1000 elements are 16 packets a call
                    agg = summary["in_network"]
                    assert agg["packets_sent"] >= 3 * sum(-(-row["elements"] // 64) for row in summary["table"])
                    assert all(row["busbw_bytes_per_s"] > 0 for row in summary["table"])
        finally:
            stop_server(server_proc, tmp_path, job.job)


def test_ddp_with_gradients_summed_by_the_switch(tmp_path):
    """DDP on h1 and h3 (different leaves), aggregation job 1 made of those
    two with its server h4: every gradient bucket is summed at leaf2; the
    loss curve equals the single-process run within the quantisation."""
    compile_p4()
    raw = yaml.safe_load((REPO / "topologies" / "leaf-spine.yaml").read_text())
    raw["aggregation"] = {"jobs": [{"job": 1, "workers": ["h1", "h3"], "server": "h4", "slots": 32}]}
    topo = topology_from_dict(raw, "leaf-spine, aggregation job h1 + h3")
    epochs = 2
    reference = subprocess.run([sys.executable, "-m", "hostagent.collectives.ddp", "--reference", "--epochs",
                                str(epochs), "--out", str(tmp_path / "reference")], cwd=REPO, env=ENV,
                               capture_output=True, text=True, timeout=300)
    assert reference.returncode == 0, reference.stderr
    hosts = [topo.hosts["h1"], topo.hosts["h3"]]
    with Network(topo, tmp_path / "run", log_level="warn") as net, FabricController(topo) as ctl:
        ctl.program()
        net.apply_queue_rates()
        server_proc = start_server(topo, 1, tmp_path)
        try:
            procs = []
            for rank, h in enumerate(hosts):
                cmd = ["ip", "netns", "exec", h.name, sys.executable, "-m", "hostagent.collectives.ddp",
                       "--rank", str(rank), "--addresses", ",".join(x.ip for x in hosts), *host_options(h),
                       "--algorithm", "in-network", "--aggregation-job", "1",
                       "--aggregation-server", topo.hosts["h4"].ip, "--epochs", str(epochs),
                       "--out", str(tmp_path / f"rank{rank}")]
                procs.append(subprocess.Popen(cmd, cwd=REPO, env=ENV, stdout=subprocess.PIPE,
                                              stderr=subprocess.PIPE, text=True))
            for rank, p in enumerate(procs):
                stdout, stderr = p.communicate(timeout=900)
                assert p.returncode == 0, f"rank {rank}: {stdout}\n{stderr[-3000:]}"
        finally:
            stop_server(server_proc, tmp_path, 1)
    ref = json.loads((tmp_path / "reference.json").read_text())["epochs"]
    for rank in range(2):
        mine = json.loads((tmp_path / f"rank{rank}.json").read_text())
        assert mine["algorithm"] == "in-network"
        assert mine["buckets_all_reduced"] >= epochs * (1347 // 64)
        for a, b in zip(mine["epochs"], ref):
            assert abs(a["train_loss"] - b["train_loss"]) <= 1e-4, (rank, a, b)
