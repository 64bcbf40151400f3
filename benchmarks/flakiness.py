#!/usr/bin/env python3
"""Runs test suites N times and reports each test's failures: do the tests
depend on the machine's speed?

    .venv/bin/python -m benchmarks.flakiness [--runs 10] [--suites ptf e2e] [--busy]
                                              [-k EXPR] [--ptf-tests ecn failover]

Each run calls the suites as `make test` does (ptf-tests/run_ptf.py, pytest
tests/e2e); --busy runs every round with one busy process per CPU beside it
(a loaded CI box or a laptop on battery). The table lists every test that
failed at least once, with its count, then the totals; the exit status is 1
when any test failed. Writes build/flakiness/<suite>.csv, and the output of
each round that failed as build/flakiness/<suite>-run<N>.log.
"""
from __future__ import annotations

import argparse
import csv
import multiprocessing
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
OUT_DIR = REPO / "build" / "flakiness"
PTF_RESULT = re.compile(r"^(\S+) \.\.\. (ok|FAIL|ERROR)\s*$", re.M)
PTF_SUBTEST = re.compile(r"^(FAIL|ERROR): (\S+) \((\S+)\)", re.M)
PYTEST_RESULT = re.compile(r"^(PASSED|FAILED|ERROR) (\S+::\S+)", re.M)   # -rA's short summary


def _busy() -> None:
    """A busy program of its own: its own session, so that the kernel's
    autogroup scheduling (Linux's default on desktops and most distributions'
    kernels) weighs it as one more program on the machine. A process forked
    from this one and left in its session would share one scheduling group
    with pytest and every host agent the tests start (the switches run in
    sessions of their own), and take its CPU from them alone. SIGTERM ends
    it whatever handler the process it was forked from had installed (a
    test that ran an agent's main() in pytest's process leaves one that only
    sets a flag)."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.setsid()
    while True:
        pass


def cpu_seconds(pid: int) -> float:
    """User and system CPU time a process has used (/proc/<pid>/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")   # utime, stime


def run_ptf(tests: list[str]) -> tuple[dict[str, bool], str]:
    proc = subprocess.run([sys.executable, "ptf-tests/run_ptf.py", *tests], cwd=REPO,
                          capture_output=True, text=True)
    text = proc.stdout + proc.stderr
    outcome = {name: status == "ok" for name, status in PTF_RESULT.findall(text)}
    for _, method, cls in PTF_SUBTEST.findall(text):       # a failed subtest: "FAIL: runTest (ecn.StepMarkingTest) (...)"
        outcome[cls.strip("()")] = False
    if not outcome:
        raise RuntimeError(f"PTF ran no test (exit {proc.returncode}):\n{text[-2000:]}")
    return outcome, text


def pytest_outcomes(text: str) -> dict[str, bool]:
    """Test id -> passed, from pytest's -rA short summary ("PASSED id",
    "FAILED id - reason"); a test that passed and then errored in its
    teardown failed."""
    outcome: dict[str, bool] = {}
    for status, name in PYTEST_RESULT.findall(text):
        outcome[name] = outcome.get(name, True) and status == "PASSED"
    return outcome


def run_e2e(expr: str | None) -> tuple[dict[str, bool], str]:
    cmd = [sys.executable, "-m", "pytest", "tests/e2e", "-rA", "-q", "-p", "no:cacheprovider"]
    if expr:
        cmd += ["-k", expr]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    outcome = pytest_outcomes(proc.stdout)
    if not outcome:
        raise RuntimeError(f"pytest ran no test (exit {proc.returncode}):\n{proc.stdout[-2000:]}")
    return outcome, proc.stdout + proc.stderr


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=10, help="rounds (default 10)")
    ap.add_argument("--suites", nargs="+", choices=("ptf", "e2e"), default=["ptf", "e2e"])
    ap.add_argument("--ptf-tests", nargs="*", default=[], help="PTF test names or modules (default: all)")
    ap.add_argument("-k", dest="expr", help="pytest -k expression for the e2e suite")
    ap.add_argument("--busy", action="store_true", help="one busy process per CPU beside every round")
    args = ap.parse_args(argv)
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    hogs = [multiprocessing.Process(target=_busy, daemon=True) for _ in range(os.cpu_count() or 1)] \
        if args.busy else []
    for h in hogs:
        h.start()
    started = time.monotonic()
    failures: dict[str, Counter[str]] = {s: Counter() for s in args.suites}
    seen: dict[str, set[str]] = {s: set() for s in args.suites}
    try:
        for i in range(1, args.runs + 1):
            for suite in args.suites:
                t0 = time.monotonic()
                outcome, text = run_ptf(args.ptf_tests) if suite == "ptf" else run_e2e(args.expr)
                seen[suite] |= set(outcome)
                failed = sorted(name for name, ok in outcome.items() if not ok)
                failures[suite].update(failed)
                log = ""
                if failed:                           # what the failures said
                    log_path = OUT_DIR / f"{suite}-run{i}.log"
                    log_path.write_text(text)
                    log = f" (output: {log_path})"
                print(f"[{i}/{args.runs}] {suite}: {len(outcome) - len(failed)}/{len(outcome)} passed "
                      f"in {time.monotonic() - t0:.0f} s{(': failed ' + ', '.join(failed)) if failed else ''}{log}",
                      flush=True)
    finally:
        if hogs:    # how loaded the machine was: what the busy processes got of it
            used = sum(cpu_seconds(h.pid) for h in hogs if h.pid is not None)
            print(f"busy processes: {len(hogs)}, {used / (time.monotonic() - started):.2f} CPUs of "
                  f"{os.cpu_count()} on average", flush=True)
        for h in hogs:
            h.terminate()
    any_failed = False
    for suite in args.suites:
        path = OUT_DIR / f"{suite}.csv"
        with open(path, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["test", "runs", "failures"])
            for name in sorted(seen[suite]):
                w.writerow([name, args.runs, failures[suite][name]])
        print(f"\n{suite}: {len(seen[suite])} tests, {args.runs} runs{' with the CPU loaded' if args.busy else ''}")
        for name, n in failures[suite].most_common():
            print(f"  {n:3d}/{args.runs} failed  {name}")
            any_failed = True
        if not failures[suite]:
            print("  every test passed every run")
        print(f"outputs: {path}")
    return 1 if any_failed else 0


if __name__ == "__main__":
    sys.exit(main())
