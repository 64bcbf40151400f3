"""BMv2's log level as the launcher starts it: "off" means off.

simple_switch_grpc without --log-level logs at trace (every table, action
and primitive of every packet is formatted), so "off" must reach BMv2 as
`--log-level off`. Proven on a live switch: with off, pings go through and
the switch's log file holds no packet line; at debug it does.
"""
from pathlib import Path

import pytest

from emulator.build import compile_p4
from control.controller import FabricController
from emulator.network import Network
from features import load_topology

REPO = Path(__file__).resolve().parents[2]


def cmdline(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")


@pytest.mark.parametrize("level, logs_packets", [("off", False), ("debug", True)], ids=["off", "debug"])
def test_log_level_reaches_bmv2(tmp_path, level, logs_packets):
    compile_p4()
    topo = load_topology(REPO / "topologies" / "star.yaml")
    with Network(topo, tmp_path / "run", log_level=level) as net, FabricController(topo) as ctl:
        ctl.program()
        switch = net.switches["s1"]
        args = cmdline(switch.proc.pid)
        assert args[args.index("--log-level") + 1] == level
        ping = net.host_cmd("h1", ["ping", "-n", "-q", "-c", "3", "-W", "2", topo.hosts["h2"].ip])
        assert ping.returncode == 0, f"h1 -> h2 does not ping:\n{ping.stdout}"
        log = switch.log.read_text() if switch.log.exists() else ""
    packet_lines = [line for line in log.splitlines() if "Processing packet" in line]
    if logs_packets:
        assert packet_lines, f"no packet lines in {switch.log} at level {level}"
    else:
        assert not packet_lines, f"{len(packet_lines)} packet lines logged at level off, e.g. {packet_lines[0]}"
