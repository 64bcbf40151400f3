"""Agents that start together (hostagent/start.py, experiments/common.py
StartGate): the start time is given only once every agent is ready, so a
slow starter cannot make the others send into a busy machine."""
import subprocess
import sys
import time
from pathlib import Path

import pytest

from experiments.common import StartGate
from hostagent.start import ready_markers

REPO = Path(__file__).resolve().parents[3]

AGENT = """
import argparse, sys, time
time.sleep(float(sys.argv[1]))                  # the agent's own start-up
from hostagent.start import add_start_arguments, wait_for_start
p = argparse.ArgumentParser()
add_start_arguments(p)
a = p.parse_args(sys.argv[2:])
wait_for_start(a)
print(repr(time.time()))
"""


def agent(delay_s: float, gate: StartGate) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", AGENT, str(delay_s), *gate.args()], cwd=REPO,
                            stdout=subprocess.PIPE, text=True)


def test_the_gate_opens_when_the_slowest_agent_is_ready(tmp_path):
    gate = StartGate(tmp_path, lead_s=0.3)
    procs = [agent(0.0, gate), agent(1.5, gate)]
    launched = time.time()
    start_at = gate.open(procs)
    assert start_at - launched > 1.5, "not before the slow agent was ready"
    started = [float(p.communicate(timeout=10)[0]) for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert all(start_at <= t < start_at + 0.5 for t in started), (start_at, started)
    assert not ready_markers(gate.path), "the markers, read, are not left among the results"


def test_a_new_gate_clears_the_last_cases_files(tmp_path):
    (tmp_path / "start").write_text("1.0")
    (tmp_path / "start.123.ready").touch()
    gate = StartGate(tmp_path)
    assert not gate.path.exists() and not ready_markers(gate.path)


def test_an_agent_that_dies_before_the_start_is_an_error(tmp_path):
    gate = StartGate(tmp_path, timeout_s=10)
    procs = [agent(0.0, gate), subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])]
    with pytest.raises(RuntimeError, match=r"an agent exited before the start .*[01] of 2 ready"):
        gate.open(procs)
    assert procs[0].poll() is not None, "the agent still waiting was stopped: none outlives its case"


def test_agents_not_ready_in_time_are_stopped(tmp_path):
    gate = StartGate(tmp_path, timeout_s=0.5)
    procs = [agent(30.0, gate)]
    with pytest.raises(RuntimeError, match=r"0 of 1 agents ready after"):
        gate.open(procs)
    assert procs[0].poll() is not None
