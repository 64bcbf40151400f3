from benchmarks.flakiness import pytest_outcomes

SUMMARY = """\
..F.E                                                                    [100%]
==================================== ERRORS ====================================
=========================== short test summary info ============================
PASSED tests/e2e/test_int_live.py::test_probes_cover_every_directed_switch_link
PASSED tests/e2e/test_failover_live.py::test_a_dead_spine_is_routed_around_in_the_data_plane[dual-plane]
FAILED tests/e2e/test_multihomed.py::test_make_run_dual_plane_reaches_each_plane_and_keeps_planes_apart - AssertionError: x
PASSED tests/e2e/test_build.py::test_compiles
ERROR tests/e2e/test_build.py::test_compiles - RuntimeError: teardown
2 failed, 3 passed in 10.00s
"""


def test_pytest_outcomes_reads_the_short_summary():
    assert pytest_outcomes(SUMMARY) == {
        "tests/e2e/test_int_live.py::test_probes_cover_every_directed_switch_link": True,
        "tests/e2e/test_failover_live.py::test_a_dead_spine_is_routed_around_in_the_data_plane[dual-plane]": True,
        "tests/e2e/test_multihomed.py::test_make_run_dual_plane_reaches_each_plane_and_keeps_planes_apart": False,
        "tests/e2e/test_build.py::test_compiles": False,     # passed, then its teardown errored
    }


def test_no_summary_no_outcomes():
    assert pytest_outcomes("no tests ran in 0.01s") == {}


def test_busy_process_is_a_program_of_its_own():
    """--busy's processes lead sessions of their own (one autogroup each),
    as unrelated programs would, instead of sharing the test's."""
    import multiprocessing
    import os
    import time

    from benchmarks.flakiness import _busy
    hog = multiprocessing.Process(target=_busy, daemon=True)
    hog.start()
    try:
        deadline = time.monotonic() + 5
        while os.getsid(hog.pid) != hog.pid and time.monotonic() < deadline:
            time.sleep(0.01)
        assert os.getsid(hog.pid) == hog.pid != os.getsid(0)
    finally:
        hog.terminate()
        hog.join()


def test_cpu_seconds_counts_a_busy_process():
    import multiprocessing
    import time

    from benchmarks.flakiness import _busy, cpu_seconds
    hog = multiprocessing.Process(target=_busy, daemon=True)
    hog.start()
    try:
        time.sleep(0.5)
        assert 0.05 < cpu_seconds(hog.pid) <= 0.6
    finally:
        hog.terminate()
        hog.join()
