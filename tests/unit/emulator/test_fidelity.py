"""The fidelity invariants on synthetic runs: each one a run breaks is
flagged with how much, a run within every limit is ok, and the CPU figures
come out of /proc's formats as the kernel writes them."""
import os
import time
from dataclasses import replace

import pytest

from emulator.fidelity import (INPUT_PATH_REREADS, CpuSample, FidelityMonitor, Limits, cpu_sample, cpu_times, departure_spacing, departures_from_us,
                               groups_cores, judge, psi_some_us, report, summarise_cpu, thread_waits, traffic_samples,
                               wait_per_wakeup_us)

STAT = """cpu  300 0 100 500 100 0 0 0 0 0
cpu0 100 0 50 300 50 0 0 0 0 0
cpu1 200 0 50 200 50 0 0 0 0 0
intr 12345
"""
STAT_LATER = """cpu  600 0 200 600 100 0 0 100 0 0
cpu0 180 0 70 340 50 0 0 60 0 0
cpu1 420 0 130 260 50 0 0 40 0 0
"""
PSI = "some avg10=1.00 avg60=2.00 avg300=3.00 total=1500000\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"


def samples(idle: float, waited_share: float | None, n: int = 10, seconds: float = 0.5) -> list[CpuSample]:
    return [CpuSample(seconds, [idle, idle], [0.0, 0.0], None if waited_share is None else waited_share * seconds)
            for _ in range(n)]


def test_proc_stat_gives_each_core_with_iowait_as_idle_and_steal():
    assert cpu_times(STAT) == [(350, 0, 500), (250, 0, 500)]
    s = cpu_sample(cpu_times(STAT), cpu_times(STAT_LATER), 1.0, 200_000)
    # cpu0: 40 more idle of 200 jiffies, 60 stolen; cpu1: 60 idle of 400
    assert s.idle == pytest.approx([0.2, 0.15])
    assert s.steal == pytest.approx([0.3, 0.1])
    assert s.waited_s == pytest.approx(0.2)


def test_psi_total_is_read_and_its_absence_is_none():
    assert psi_some_us(PSI) == 1_500_000
    assert psi_some_us("") is None


def test_a_run_within_every_limit_is_ok():
    v = judge(summarise_cpu(samples(idle=0.5, waited_share=0.02)), {"leaf1": 0, "kernel:softnet": 0}, [0.001])
    assert v.ok and str(v) == "ok"
    assert v.input_path == {}


def test_cores_with_too_little_idle_violate_cpu_by_how_much():
    v = judge(summarise_cpu(samples(idle=0.2, waited_share=0.4)), {})
    assert not v.ok
    assert str(v).startswith("violated: cpu: the cores were idle 20% of the run (at least 30%; idle per core 20%/20%, "
                             "CPU wait 40%")


def test_threads_waiting_often_on_cores_with_room_do_not_violate_cpu():
    # PSI's "some" counts any wait, however short: 20 switches on two cores read 36-49% with each core half idle
    assert judge(summarise_cpu(samples(idle=0.45, waited_share=0.49)), {}).ok
    assert judge(summarise_cpu(samples(idle=0.35, waited_share=None)), {}).ok       # no PSI: idle alone


def test_a_busy_neighbour_taking_a_core_violates_cpu_whatever_psi_says():
    cpu = summarise_cpu([CpuSample(1.0, [0.31, 0.09], [0.0, 0.0], 0.2)])       # one core taken, PSI 20%
    assert cpu.idle == pytest.approx(0.2)
    assert "cpu: the cores were idle 20%" in str(judge(cpu, {}))


def test_the_wait_a_wakeup_comes_from_the_threads_schedstat(tmp_path):
    def write(pid, tid, wait, slices):
        d = tmp_path / str(pid) / "task" / str(tid)
        d.mkdir(parents=True, exist_ok=True)
        (d / "schedstat").write_text(f"123456 {wait} {slices}\n")

    write(10, 10, 1_000_000, 100)
    write(10, 11, 0, 0)
    before = thread_waits([10, 99], tmp_path)                   # 99: gone, left out
    assert before == {(10, 10): (1_000_000, 100), (10, 11): (0, 0)}
    write(10, 10, 3_000_000, 150)                                # 2 ms more over 50 wakeups
    write(10, 11, 1_000_000, 50)                                 # 1 ms over 50
    write(10, 12, 1_000_000, 0)                                  # began between the reads, never woke
    after = thread_waits([10], tmp_path)
    assert wait_per_wakeup_us(before, after) == pytest.approx(4_000_000 / 100 / 1e3)
    assert wait_per_wakeup_us(after, after) is None             # nothing ran
    cpu = replace(summarise_cpu(samples(idle=0.5, waited_share=0.1)), switch_wait_us=40.0)
    assert "switches' threads waited 40 us a wakeup" in str(cpu)


def test_frames_lost_before_the_pipeline_violate_input_path_with_where():
    v = judge(summarise_cpu(samples(idle=0.5, waited_share=0.0)), {"leaf3": 25, "spine2": 4, "kernel:softnet": 1,
                                                                   "leaf1": 0})
    assert str(v) == ("violated: input_path: 30 frames lost before the pipeline, seen by no P4 counter "
                      "(kernel:softnet:1 leaf3:25 spine2:4)")


def test_frames_an_agents_socket_dropped_violate_it():
    v = judge(None, {}, socket_drops={"h5": 7, "h3": 0})
    assert str(v) == "violated: agents: h5's socket dropped 7 frames (its agent did not keep up)"
    assert v.socket_drops == {"h5": 7} and judge(None, {}, socket_drops={"h5": 0}).ok


def test_late_agents_violate_agents():
    v = judge(None, {}, [0.01, 0.2])
    assert str(v) == "violated: agents: up to 200 ms late for their schedule (at most 50 ms)"
    assert v.agent_late_s == 0.2


def test_several_violations_are_all_named():
    v = judge(summarise_cpu(samples(idle=0.0, waited_share=0.5)), {"leaf1": 3}, [1.0])
    assert [x.split(":")[0] for x in v.violations] == ["cpu", "input_path", "agents"]


def test_limits_are_the_callers():
    lenient = Limits(idle_min=0.0, input_path_frames=5, agent_late_s=2.0)
    assert judge(summarise_cpu(samples(idle=0.0, waited_share=0.5)), {"leaf1": 5}, [1.0], lenient).ok


def test_the_cpu_summary_weights_samples_by_their_length():
    cpu = summarise_cpu([CpuSample(1.0, [1.0, 1.0], [0, 0], 0.0), CpuSample(3.0, [0.0, 0.0], [0, 0], 3.0)])
    assert cpu.idle_per_core == [0.25, 0.25]
    assert cpu.wait_share == 0.75
    assert cpu.idle == 0.25


def test_the_monitor_judges_what_grew_during_the_run():
    counts = iter([{"leaf1": 100, "leaf2": 7}] + [{"leaf1": 112, "leaf2": 7}] * (1 + INPUT_PATH_REREADS))
    with FidelityMonitor(input_path=lambda: next(counts), period_s=0.05) as mon:
        time.sleep(0.2)
    v = mon.verdict()
    assert v.input_path == {"leaf1": 12}
    assert "input_path: 12 frames" in str(v)
    assert v.cpu is not None and v.cpu.seconds > 0.1 and len(v.cpu.idle_per_core) >= 1


def test_frames_in_flight_when_the_input_path_is_read_are_not_lost(monkeypatch):
    """Heartbeats keep a frame or two between the kernel and ingress after
    the traffic: a loss that a later read does not show was in flight;
    each switch keeps its least, and a settled input path is not read again."""
    import emulator.fidelity as fidelity
    monkeypatch.setattr(fidelity, "INPUT_PATH_REREAD_S", 0.0)
    reads = iter([{"spine1": 5, "spine2": 9, "leaf1": 0},       # at the start
                  {"spine1": 8, "spine2": 21, "leaf1": 0},      # at the verdict: 3 and 12 more
                  {"spine1": 5, "spine2": 22, "leaf1": 1},      # spine1's 3 were in flight; spine2 lost 12
                  {"spine1": 6, "spine2": 21, "leaf1": 0}] + [{"spine1": 5, "spine2": 21, "leaf1": 0}] * 5)
    mon = FidelityMonitor(input_path=lambda: next(reads), period_s=0.05).start()
    v = mon.verdict()
    assert v.input_path == {"spine2": 12}
    assert len(list(reads)) == 9 - 2 - INPUT_PATH_REREADS       # the start, the verdict, the reads again

    settled = iter([{"s1": 0}, {"s1": 0}])                      # nothing grew: no second read
    assert FidelityMonitor(input_path=lambda: next(settled), period_s=0.05).start().verdict().input_path == {}


def test_the_report_is_loud_only_about_violated_cases():
    ok, bad = judge(None, {}), judge(None, {"leaf1": 2})
    assert report({"a": ok, "b": ok}) == "fidelity: every run faithful (2 of 2)"
    text = report({"a": ok, "b": bad}, what="case")
    assert text.splitlines()[0].startswith("!!! fidelity: 1 of 2 cases violated an invariant")
    assert "b: violated: input_path: 2 frames" in text and "a:" not in text


def test_a_switch_killed_during_a_case_leaves_its_kernel_drops_out(monkeypatch):
    """Its interfaces drop what reaches them once no process reads: the
    failure the case injected, not the machine falling behind."""
    import emulator.fidelity as fidelity
    drops = iter([{"kernel:s1": 0, "kernel:s2": 0, "kernel:softnet": 0},
                  {"kernel:s1": 0, "kernel:softnet": 0}])
    asked = []

    def kernel_drops(ifaces):
        asked.append(sorted(ifaces))
        return next(drops)
    monkeypatch.setattr(fidelity, "kernel_drops", kernel_drops)
    paths = iter([{"s1": 0, "s2": 0}, {"s1": 0}])        # s2 killed: the input path no longer reads it
    mon = FidelityMonitor(input_path=lambda: next(paths), ifaces={"s1": ["s1-eth1"], "s2": ["s2-eth1"]},
                          period_s=0.05).start()
    verdict = mon.verdict()
    assert asked == [["s1", "s2"], ["s1"]]
    assert verdict.input_path == {}


# -- departure spacing ----------------------------------------------------------

RATE = 800.0                  # packets/s: a 9.6 Mbit/s link's queue, 1.25 ms a packet
PERIOD = 1 / RATE


def backlog(n: int, start: float = 1.0, depth: int = 5) -> list[tuple[float, int]]:
    """n packets leaving a backlogged queue on time, 1/R apart."""
    return [(start + i * PERIOD + (2e-6 if i % 3 else -2e-6), depth) for i in range(n)]


def test_a_queue_draining_at_its_rate_keeps_the_invariant():
    s = departure_spacing(backlog(200), RATE, "leaf2:4")
    assert (s.backlogged, s.off) == (199, 0) and abs(s.median - 1.0) < 0.01
    assert judge(None, {}, departures=[s]).ok


def test_departures_after_an_empty_queue_are_not_judged():
    """A packet that found the queue empty leaves when it comes."""
    idle = [(1.0 + 0.1 * i, 0) for i in range(100)]          # 100 ms apart, each alone in the queue
    assert departure_spacing(idle, RATE, "q").backlogged == 0


def test_reports_lost_leave_whole_packet_times_on_the_grid():
    kept = [d for i, d in enumerate(backlog(300)) if i % 7 != 3]   # every seventh record lost
    s = departure_spacing(kept, RATE, "q")
    assert s.off == 0 and s.backlogged == len(kept) - 1


def test_an_egress_thread_running_late_is_flagged():
    """A 20.6 ms stall, then the packets whose times passed leave back to back."""
    on_time = backlog(100)
    t = on_time[-1][0] + 0.0206
    late = [(t + i * 0.00005, 9) for i in range(15)]          # catching up: 50 us apart
    after = backlog(100, start=late[-1][0] + PERIOD)
    s = departure_spacing(on_time + late + after, RATE, "leaf2:4")
    assert s.early == 14 and s.off_grid == 1 and s.backlogged == 214
    v = judge(None, {}, departures=[s])
    assert not v.ok
    assert str(v).startswith("violated: departures: leaf2:4: 15 of 214 backlogged departures off the 1/R grid "
                             "(14 early, 1 late; median gap 1.00/R at R = 800 packets/s)")


def test_a_hosts_32_bit_microsecond_departures_unwrap_across_the_wrap():
    """INT's tx time at the last hop, as the receiving host records it: a
    backlog that crosses 2^32 us stays 1/R apart."""
    start = (1 << 32) - 5 * 1250                             # five packet times before the wrap
    records = [((start + i * 1250) % (1 << 32), 4) for i in range(100)]
    departures = departures_from_us(records)
    assert departures[0] == (start / 1e6, 4) and departures[-1][0] == pytest.approx((start + 99 * 1250) / 1e6)
    s = departure_spacing(departures, RATE, "leaf2:4")
    assert (s.backlogged, s.off) == (99, 0)


def test_too_few_backlogged_departures_are_not_judged():
    stalled = [(1.0 + i * 0.5 * PERIOD, 3) for i in range(20)]   # all early, but only 19 gaps
    assert judge(None, {}, departures=[departure_spacing(stalled, RATE, "q")]).ok


def test_only_samples_from_the_traffic_on_judge_the_cpu():
    start_up = CpuSample(2.0, [0.0, 0.0], [0.0, 0.0], None, end=102.0)       # 100-102: the ranks importing
    during = [CpuSample(0.5, [0.5, 0.5], [0.0, 0.0], None, end=102.0 + 0.5 * k) for k in (1, 2, 3)]
    assert traffic_samples([start_up, *during], since=101.5) == during, "begun before the traffic: not the run"
    assert traffic_samples([start_up, *during], since=102.03) == during, "a sample begun just before still counts"
    # a run shorter than a period: the samples that ended after it started, as before
    assert traffic_samples([start_up], since=101.5) == [start_up]
    assert traffic_samples([start_up], since=103.0) == []


def test_each_watched_group_of_processes_reports_the_cores_it_used():
    before, after = {10: 1.0, 11: 2.0, 12: 5.0}, {10: 1.5, 11: 2.5, 13: 0.25}      # 12 gone; 13 new
    assert groups_cores({"switches": [10, 11], "ranks": [12, 13]}, before, after, 2.0) == \
        {"switches": 0.5, "ranks": 0.0}, "a process seen once adds nothing; one gone leaves the interval"
    a = CpuSample(1.0, [0.5, 0.5], [0, 0], None, groups={"switches": 0.9, "ranks": 0.3})
    b = CpuSample(3.0, [0.5, 0.5], [0, 0], None, groups={"switches": 0.5})
    cpu = summarise_cpu([a, b])
    assert cpu.groups == pytest.approx({"switches": 0.6, "ranks": 0.075}), "time-weighted, absent counts 0"
    assert "switches 0.60 cores, ranks 0.07 cores" in str(cpu)


def test_the_monitor_reports_the_cores_of_the_processes_it_watches():
    monitor = FidelityMonitor(period_s=0.05).start()
    monitor.watch("this test", [os.getpid()])
    end = time.monotonic() + 0.4
    while time.monotonic() < end:        # busy: this process takes most of a core
        pass
    cpu = monitor.verdict().cpu
    assert cpu is not None and cpu.groups["this test"] > 0.3
