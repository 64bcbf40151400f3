"""PyTorch DDP with the fabric hook, two ranks on a veth pair between two
namespaces (the gradient all-reduce over the RC transport on raw sockets,
torch.distributed's gloo set-up over TCP on the same veths): the loss curve
equals the single-process run's within float32 rounding. Each step's record
carries what the transport counted so far, the PFC pauses too."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from emulator.netns import NETNS_ETC, NetnsError, enter_netns
from hostagent.collectives.ranks import RankLauncher

REPO = Path(__file__).resolve().parents[4]
NS = ["ddp-a", "ddp-b"]
IPS = ["10.79.0.1", "10.79.0.2"]
MACS = ["0a:00:00:00:0d:01", "0a:00:00:00:0d:02"]
EPOCHS = 3


def sh(*cmd: str, ns: str | None = None) -> None:
    subprocess.run((["ip", "netns", "exec", ns] if ns else []) + list(cmd), check=True, capture_output=True,
                   text=True)


@pytest.fixture
def veth_pair():
    for ns in NS:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        sh("ip", "netns", "add", ns)
    try:
        sh("ip", "link", "add", f"{NS[0]}0", "type", "veth", "peer", "name", f"{NS[1]}0")
        for ns, ip, mac in zip(NS, IPS, MACS):
            sh("ip", "link", "set", f"{ns}0", "netns", ns)
            sh("ip", "link", "set", f"{ns}0", "address", mac, ns=ns)
            sh("ip", "addr", "add", f"{ip}/24", "dev", f"{ns}0", ns=ns)
            sh("ip", "link", "set", f"{ns}0", "up", ns=ns)
            sh("ip", "link", "set", "lo", "up", ns=ns)
        yield
    finally:
        for ns in NS:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def test_ddp_through_the_hook_equals_the_single_process_run(veth_pair, tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    reference = subprocess.run([sys.executable, "-m", "hostagent.collectives.ddp", "--reference", "--epochs",
                                str(EPOCHS), "--out", str(tmp_path / "reference")], cwd=REPO, env=env,
                               capture_output=True, text=True, timeout=300)
    assert reference.returncode == 0, reference.stderr
    # the ranks as fabric train starts them: forks of one process that imported PyTorch, each in its namespace
    launcher = RankLauncher()
    procs = [launcher.start(["--rank", str(r), "--addresses", ",".join(IPS), "--iface", f"{ns}0", "--src-ip", IPS[r],
                             "--src-mac", MACS[r], "--gw-mac", MACS[1 - r], "--line-rate-pps", "20000",
                             "--algorithm", "tree", "--epochs", str(EPOCHS), "--master-port", "29517",
                             "--out", str(tmp_path / f"rank{r}"), "--tclass", "3", "--link-mbps", "100",
                             "--steps-out", str(tmp_path / f"rank{r}.jsonl")], ns, tmp_path / f"rank{r}.log", nice=5)
             for r, ns in enumerate(NS)]
    for r, p in enumerate(procs):
        assert p.wait(timeout=600) == 0, f"rank {r}: {(tmp_path / f'rank{r}.log').read_text()}"
    ref = json.loads((tmp_path / "reference.json").read_text())["epochs"]
    for r in range(2):
        summary = json.loads((tmp_path / f"rank{r}.json").read_text())
        assert summary["buckets_all_reduced"] >= EPOCHS * (1347 // 64)    # every step went through the hook
        assert (summary["tclass"], summary["pauses_received"], summary["paused_s"]) == (3, 0, 0.0), \
            "a NIC honouring class 3, and nothing on a veth pair pauses it"
        steps = [json.loads(line) for line in (tmp_path / f"rank{r}.jsonl").read_text().splitlines()]
        assert len(steps) == EPOCHS * (1347 // 64) and all(x["pauses_received"] == 0 for x in steps)
        for mine, theirs in zip(summary["epochs"], ref):
            assert np.isclose(mine["train_loss"], theirs["train_loss"], rtol=0, atol=1e-4), (r, mine, theirs)
            assert np.isclose(mine["test_accuracy"], theirs["test_accuracy"], rtol=0, atol=1 / 450 + 1e-9)
    assert ref[-1]["test_accuracy"] > 0.9                                 # it learned


def test_a_forked_process_enters_a_namespace_as_ip_netns_exec_puts_a_command_there(veth_pair, tmp_path):
    """enter_netns: the namespace's interfaces, and /etc/netns/NAME/resolv.conf as its /etc/resolv.conf
    (the launcher writes one naming no resolver); the parent's stay as they were."""
    etc = NETNS_ETC / NS[0]
    etc.mkdir(parents=True)
    own = "# test_ddp.py: no resolver in this namespace\nnameserver 127.0.0.1\n"
    (etc / "resolv.conf").write_text(own)
    root_resolv = Path("/etc/resolv.conf").read_text()
    seen = tmp_path / "seen.json"
    try:
        pid = os.fork()
        if pid == 0:                                  # the child: report what it sees, then leave at once
            try:
                enter_netns(NS[0])
                import socket
                seen.write_text(json.dumps({"ifaces": [name for _, name in socket.if_nameindex()],
                                            "resolv": Path("/etc/resolv.conf").read_text()}))
            finally:
                os._exit(0)
        os.waitpid(pid, 0)
    finally:
        (etc / "resolv.conf").unlink()
        etc.rmdir()
    child = json.loads(seen.read_text())
    assert sorted(child["ifaces"]) == ["ddp-a0", "lo"] and child["resolv"] == own
    assert Path("/etc/resolv.conf").read_text() == root_resolv and f"{NS[0]}0" not in os.listdir("/sys/class/net")
    with pytest.raises(NetnsError, match="no network namespace 'no-such-host'"):
        enter_netns("no-such-host")


class CountingComm:
    """What train() asks of a communicator: its transport's counts so far,
    growing by one pause (0.1 s paused) and one resent packet each step."""
    size = 1

    def __init__(self):
        self.steps = 0

    def transport_stats(self) -> dict:
        self.steps += 1
        return {"retransmitted": self.steps, "timeouts": 0, "channel_bytes": [100 * self.steps],
                "pauses_received": self.steps, "paused_s": round(0.1 * self.steps, 6)}


def test_each_step_record_carries_the_pauses_received_and_seconds_paused_so_far(tmp_path):
    from hostagent.collectives import ddp
    path = tmp_path / "rank0.jsonl"
    ddp.train(ddp.model(1), 0, 1, 1, 1, log=lambda *_: None, steps=3, on_step=ddp.step_writer(path),
              hook=ddp.FabricHook(CountingComm()))
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [(r["step"], r["retransmitted"], r["pauses_received"], r["paused_s"]) for r in lines] == \
        [(0, 1, 1, 0.1), (1, 2, 2, 0.2), (2, 3, 3, 0.3)]
    assert ddp.StepRecord(0, 0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, []).pauses_received == 0, \
        "a rank whose NIC honours no PFC records none"


def test_a_forked_collective_rank_writes_only_what_the_rank_says(veth_pair, tmp_path):
    """The collectives experiment's ranks: forks of a server that imported
    `python -m hostagent.collectives`'s module. Their standard error holds
    what the rank says, not runpy's warning that the module was imported
    already (it is, on purpose). In a process of its own: a process has
    one fork server, and the first launcher decides what it imports."""
    script = ("import sys\n"
              "from hostagent.collectives.ranks import COLLECTIVE_PRELOAD, COLLECTIVE_PROGRAM, RankLauncher\n"
              "p = RankLauncher(COLLECTIVE_PROGRAM, COLLECTIVE_PRELOAD).start(['--help'], sys.argv[1], sys.argv[2], "
              "errors=sys.argv[3])\n"
              "sys.exit(p.wait(timeout=120))\n")
    log, err = tmp_path / "rank.log", tmp_path / "rank.err"
    proc = subprocess.run([sys.executable, "-c", script, NS[0], str(log), str(err)], cwd=REPO,
                          env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr + err.read_text()
    assert "usage:" in log.read_text() and err.read_text() == ""
