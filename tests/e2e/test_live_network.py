"""The controller and launcher against a live leaf-spine network on BMv2:
idempotent programming, all-or-nothing validation, switch-death reports,
queue rates over Thrift, and cleanup."""
import subprocess
import sys
from pathlib import Path

import pytest

from emulator.bmv2_thrift import Bmv2Thrift, Bmv2ThriftError
from emulator.build import compile_p4
from control.controller import FabricController
from emulator.network import Network, SwitchDied, cleanup_stale
from control.p4info import EntryError
from control.sync import (clone_session_key, clone_session_value, multicast_group_key, multicast_group_value,
                          read_managed, read_state, table_key, table_value)
from features import load_topology

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def topo():
    return load_topology(REPO / "topologies" / "leaf-spine.yaml")


@pytest.fixture
def net(topo, tmp_path):
    compile_p4()
    with Network(topo, tmp_path / "run", log_level="warn") as network:
        yield network


def entity_counts(ctl):
    out = {}
    for name, conn in ctl.connections.items():
        state = ctl.desired_state(name)
        cur = read_state(conn, state.managed_tables, state.managed_profiles)
        out[name] = (len(cur.table_entries), len(cur.members), len(cur.groups))
    return out


def held_and_desired(ctl, name: str) -> tuple[set, set]:
    """A switch's entries read back, and the ones the controller meant it to
    hold, each as (table name, match, priority, action and parameters), plus
    its clone sessions and multicast groups."""
    desired = ctl.desired_state(name)
    held = read_managed(ctl.connections[name], desired)

    def entries(state) -> set:
        tables = {(ctl.p4info.by_id(e.table_id).preamble.name, table_key(e)[1:], table_value(e))
                  for e in state.table_entries}
        return (tables | {("clone session", clone_session_key(c), clone_session_value(c)) for c in state.clone_sessions}
                | {("multicast group", multicast_group_key(g), multicast_group_value(g))
                   for g in state.multicast_groups})
    return entries(held), entries(desired)


def test_programming_twice_writes_nothing_the_second_time(net, topo):
    with FabricController(topo) as ctl:
        first = ctl.program()
        assert all(r.pipeline_pushed and r.report.inserted > 0 for r in first)
        for name in ctl.connections:    # read back: the switch holds exactly what was written, whichever p4c
            held, desired = held_and_desired(ctl, name)
            assert held == desired, (f"{name}: held but not desired {sorted(map(str, held - desired))[:5]}; "
                                     f"desired but not held {sorted(map(str, desired - held))[:5]}")
        counts = entity_counts(ctl)
        # leaf1: 4 routes (2 to its hosts' ports, 2 to the spine group) + 16 slots of that group,
        # and INT (the file's int section): 3 int_port entries per port (4 ports), and on each of
        # its 2 host ports the port's sampling rate (int_source_port) and the watchlist rule
        assert counts["leaf1"] == (20 + 12 + 2 + 2, 0, 0)
        second = ctl.program()
        assert [(r.pipeline_pushed, r.report.writes) for r in second] == [(False, 0)] * 4
        assert entity_counts(ctl) == counts
    # A second controller process (the CLI) agrees: nothing to write.
    proc = subprocess.run([str(REPO / ".venv" / "bin" / "fabric"), "program", "-t", str(REPO / "topologies/leaf-spine.yaml")],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("0 inserted, 0 modified, 0 deleted") == 4, proc.stdout
    assert all(net.ping_all().values())


def test_invalid_entry_fails_before_anything_is_written(net, topo):
    class BrokenController(FabricController):
        def desired_state(self, name, current=None):
            state = super().desired_state(name, current)
            if name == "leaf2":  # the last switch: earlier ones would be written first if not validated up front
                state.table_entries.append(self.p4info.table_entry(
                    "ipv4_lpm", {"hdr.ipv4.dst_addr": "10.0.9.0/40"}, action="set_next_id", params={"next_id": 1}))
            return state

    with BrokenController(topo) as ctl:
        with pytest.raises(EntryError, match=r"hdr.ipv4.dst_addr: prefix length 40 outside 0..32"):
            ctl.program()
        assert [c.installed_cookie() for c in ctl.connections.values()] == [None] * 4, \
            "nothing may be half-applied: not even a pipeline"
    with FabricController(topo) as ctl:  # the valid program still goes in cleanly afterwards
        assert all(r.report.inserted > 0 for r in ctl.program())


def test_queue_rates_and_registers_over_thrift(net, topo):
    with FabricController(topo) as ctl:
        ctl.program()
    applied = net.apply_queue_rates()
    assert applied["leaf1"] == {1: 8333, 2: 8333, 3: 8333, 4: 8333}  # 100 Mbit/s of 1500-byte packets
    with Bmv2Thrift(topo.switches["leaf1"].thrift_port) as thrift:
        assert thrift.now_us() > 0
        with pytest.raises(Bmv2ThriftError, match="unknown register 'nope'"):
            thrift.register_read("nope", 0)
        with pytest.raises(ValueError, match="queue rate must be > 0"):
            thrift.set_queue_rate(1, 0)


def test_a_dead_switch_is_reported_with_its_log(net, topo):
    net.check_alive()
    victim = net.switches["spine2"]
    victim.proc.kill()
    victim.proc.wait()
    with pytest.raises(SwitchDied) as err:
        net.check_alive()
    text = str(err.value)
    assert "switch spine2 (simple_switch_grpc" in text and "exited with code -9" in text
    assert f"tail of {victim.stdout}" in text


def test_leftovers_of_a_killed_run_are_cleaned(topo, tmp_path):
    compile_p4()
    run_dir = tmp_path / "run"
    network = Network(topo, run_dir, log_level="off")
    network.start()
    # Simulate SIGKILL of the launcher: forget the objects, keep the state file.
    network._made = {"netns": [], "veth": [], "pids": []}
    for sp in network.switches.values():
        sp.proc.returncode = 0  # let stop() skip them; they are still running
    network.switches.clear()
    assert cleanup_stale(run_dir) is True
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert "h1" not in netns.split()
    assert subprocess.run(["pgrep", "-f", "simple_switch_grpc --device-id"], capture_output=True).returncode == 1
