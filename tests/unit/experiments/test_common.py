"""What the experiments share that needs no network: the ratio of two
sets of runs' medians and its bootstrap interval; SIGTERM's handler; the
frames the agents' sockets dropped, by host; the busy processes a
busy-machine check runs beside its cases."""
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from emulator.fidelity import judge
from experiments.common import busy_processes, median_ratio_interval, socket_drops

REPO = Path(__file__).resolve().parents[3]


def test_a_clear_shift_has_an_interval_that_excludes_one_and_contains_the_ratio():
    ratio, lo, hi = median_ratio_interval([130, 128, 133, 131, 129], [100, 99, 102, 101, 98])
    assert ratio == pytest.approx(130 / 100)
    assert 1 < lo <= ratio <= hi


def test_overlapping_runs_give_an_interval_that_spans_one():
    _, lo, hi = median_ratio_interval([100, 108, 95, 103, 99], [101, 97, 106, 100, 104])
    assert lo < 1 < hi


def test_the_interval_is_reproduced_from_its_runs_and_narrows_with_confidence():
    runs = ([130, 110, 125, 140, 118], [100, 120, 95, 105, 112])
    assert median_ratio_interval(*runs) == median_ratio_interval(*runs)
    _, lo95, hi95 = median_ratio_interval(*runs)
    _, lo50, hi50 = median_ratio_interval(*runs, confidence=0.5)
    assert lo95 <= lo50 <= hi50 <= hi95


@pytest.mark.parametrize("args,message", [(([], [1.0]), "at least one value"),
                                          (([1.0], [1.0], 1.0), "confidence must be in")])
def test_bad_input_is_named(args, message):
    with pytest.raises(ValueError, match=message):
        median_ratio_interval(*args)


def test_sigterm_ends_an_experiment_through_its_cleanup(tmp_path):
    """`fabric experiment` killed by SIGTERM tears its network down as on
    Ctrl-C: the handler turns the signal into SystemExit, so `with` blocks
    and `finally` clauses run (before, the switches were left running)."""
    marker = tmp_path / "torn-down"
    child = subprocess.Popen([sys.executable, "-c", (
        "import sys, time\n"
        "from experiments.common import exit_on_sigterm\n"
        "exit_on_sigterm()\n"
        "try:\n"
        "    print('ready', flush=True)\n"
        "    time.sleep(60)\n"
        "finally:\n"
        f"    open({str(marker)!r}, 'w').write('yes')\n")], cwd=REPO, stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None and child.stdout.readline().strip() == "ready"
    child.send_signal(signal.SIGTERM)
    assert child.wait(30) == 128 + signal.SIGTERM
    assert marker.read_text() == "yes"


def test_a_hosts_socket_drops_sum_its_agents_receive_drops_and_refused_sends():
    drops = socket_drops([("r1", {"socket_drops": 3, "ignored": {"not RoCEv2": 50}}),
                          ("h1", {"socket_drops": 0, "ignored": {"tx-error": 2}}),
                          ("h1", {"socket_drops": None, "ignored": {}}),     # the kernel did not say
                          ("h2", {"socket_drops": 0, "ignored": {}})])
    assert drops == {"r1": 3, "h1": 2, "h2": 0}
    assert str(judge(None, {}, socket_drops=drops)) == (
        "violated: agents: h1's socket dropped 2 frames (its agent did not keep up); "
        "agents: r1's socket dropped 3 frames (its agent did not keep up)")


def _cpu_ticks(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])          # utime + stime


def test_busy_processes_spin_while_the_block_runs_and_are_gone_after(capsys):
    import time
    with busy_processes(1) as (proc,):
        deadline = time.monotonic() + 10
        while _cpu_ticks(proc.pid) < 20 and time.monotonic() < deadline:    # 0.2 s of CPU: it spins
            time.sleep(0.1)
        assert _cpu_ticks(proc.pid) >= 20 and proc.poll() is None
    assert proc.returncode is not None and not Path(f"/proc/{proc.pid}").exists()   # killed and reaped
    assert "busy: 1 process spinning on the CPU beside every case" in capsys.readouterr().out


def test_no_busy_process_is_none_and_a_negative_count_is_refused(capsys):
    with busy_processes(0):
        pass
    assert capsys.readouterr().out == ""
    with pytest.raises(ValueError, match="expected 0 or more, got -2"):
        with busy_processes(-2):
            pass
