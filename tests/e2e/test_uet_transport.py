"""UET's reliable unordered delivery (python -m hostagent.rdma --mode uet)
through BMv2 on leaf-spine, its links at 10 Mbit/s (833 packets/s) and
trimming on leaf2's port to h3: h1 and h2 send to h3 at once (2:1 into
that port), with NSCC. Every message is delivered whole and exactly once;
the switch trims and the senders resend what it trimmed on the receiver's
NACK; the packets are sprayed over both spines (each took at least a fifth
of what crossed them)."""
import json
import subprocess
import time
from pathlib import Path

import yaml

from control.controller import FabricController
from emulator.build import compile_p4
from emulator.network import Network, interface_rx_packets
from experiments.common import rdma_agent
from features import topology_from_dict
from features.trimming import SECTION, TRIM_COUNTER
from features.trimming import cell as trim_cell

REPO = Path(__file__).resolve().parents[2]
MESSAGES, MESSAGE_BYTES = 40, 8192


def topology():
    raw = yaml.safe_load((REPO / "topologies" / "leaf-spine.yaml").read_text())
    raw["defaults"] = {"link": {"bandwidth_mbps": 10}}
    for section in ("int", "aggregation"):
        raw.pop(section, None)
    raw[SECTION] = [{"switch": "leaf2", "towards": "h3", "threshold": 2}]
    return topology_from_dict(raw, "leaf-spine at 10 Mbit/s, trimming towards h3")


def spine_packets(topo) -> int:
    return {s: sum(interface_rx_packets(topo.switches[s]).values()) for s in ("spine1", "spine2")}


def test_two_uet_senders_into_one_port_deliver_everything_sprayed_and_resend_the_trims(tmp_path):
    compile_p4()
    topo = topology()
    h3 = topo.hosts["h3"]
    port = h3.switch_port
    with Network(topo, tmp_path / "net", log_level="warn") as net, FabricController(topo) as ctl:
        ctl.program()
        net.apply_queue_rates()
        cell = trim_cell(port, 0)
        trims_before = ctl.counter("leaf2", TRIM_COUNTER, cell).get(cell, (0, 0))[0]
        spines_before = spine_packets(topo)
        start_at = time.time() + 2.0
        rx = rdma_agent(h3, "receive", start_at=start_at, out_dir=tmp_path,
                        extra=["--mode", "uet", "--duration", "40"])
        senders = [rdma_agent(topo.hosts[h], "send", start_at=start_at, out_dir=tmp_path,
                              extra=["--mode", "uet", "--cc", "nscc", "--dst-ip", h3.ip, "--qp", str(qp),
                                     "--line-rate-pps", "833", "--messages", str(MESSAGES),
                                     "--message-bytes", str(MESSAGE_BYTES), "--duration", "35"])
                   for qp, h in ((1, "h1"), (2, "h2"))]
        codes = [p.wait(timeout=60) for p in senders]
        rx.terminate()
        try:
            rx.wait(timeout=10)
        except subprocess.TimeoutExpired:
            rx.kill()
        net.check_alive()
        trims = ctl.counter("leaf2", TRIM_COUNTER, cell).get(cell, (0, 0))[0] - trims_before
        spines = {s: n - spines_before[s] for s, n in spine_packets(topo).items()}
    tx = [json.loads((tmp_path / f"send-{h}.json").read_text()) for h in ("h1", "h2")]
    assert codes == [0, 0], [t["error"] for t in tx]
    flows = json.loads((tmp_path / "receive-h3.json").read_text())["flows"]
    for t, h in zip(tx, ("h1", "h2")):
        assert t["messages_completed"] == MESSAGES and t["error"] is None
        f = flows[topo.hosts[h].ip]
        assert (f["delivered_messages"], f["delivered_bytes"]) == (MESSAGES, MESSAGES * MESSAGE_BYTES), f
    trimmed = sum(f["trimmed"] for f in flows.values())
    assert trims > 0 and trimmed > 0, (trims, flows)
    assert sum(t["trim_nacks"] for t in tx) > 0 and sum(t["retransmitted"] for t in tx) > 0
    total = sum(spines.values())
    assert total >= 2 * MESSAGES * MESSAGE_BYTES // 1024
    assert min(spines.values()) >= total / 5, spines
