"""The benchmark's reporting: medians, ratios to both references, feature
cost, the saturation flag, the README table it rewrites, and how it finds
the load to offer."""
import time
from pathlib import Path

import pytest

from benchmarks import forwarding_rate as bench
from benchmarks.cases import Case

NAMES = ["port_forward", "basic_router", "fabric", "fabric-ecn", "fabric+ecn"]


def rows(forwarded: dict, offered: dict, runs: int = 3) -> list[dict]:
    return [{"run": r, "program": n, "forwarded_pps": forwarded[n] + (r - 2) * 10, "offered_pps": offered[n]}
            for r in range(1, runs + 1) for n in NAMES]


def test_medians_ratios_and_feature_cost():
    summary = {s["program"]: s for s in bench.summarise(
        rows({"port_forward": 1000, "basic_router": 500, "fabric": 400, "fabric-ecn": 500, "fabric+ecn": 360},
             {"port_forward": 2000, "basic_router": 1000, "fabric": 800, "fabric-ecn": 800, "fabric+ecn": 800}),
        NAMES)}
    assert summary["fabric"]["forwarded_pps"] == 400  # median of 390, 400, 410
    assert summary["fabric"]["vs_basic_router"] == 0.8
    assert summary["fabric"]["vs_port_forward"] == 0.4
    assert summary["fabric+ecn"]["feature_cost"] == "on: 10.0%"     # the fabric loses 10% with it on
    assert summary["fabric-ecn"]["feature_cost"] == "off: 20.0%"    # 400 shipped vs 500 without it
    assert summary["fabric"]["feature_cost"] == ""
    assert all(s["saturated"] for s in summary.values())


def test_a_program_that_forwarded_nearly_all_it_was_offered_is_not_saturated():
    summary = {s["program"]: s for s in bench.summarise(
        rows({"port_forward": 1000, "basic_router": 500, "fabric": 400, "fabric-ecn": 500, "fabric+ecn": 360},
             {"port_forward": 1005, "basic_router": 1000, "fabric": 800, "fabric-ecn": 800, "fabric+ecn": 800}),
        NAMES)}
    assert not summary["port_forward"]["saturated"]
    table = bench.readme_table(list(summary.values()), 1234.0, {n: n for n in NAMES})
    assert "| 1000 (not saturated) |" in table and table.count("not saturated") == 1


def test_readme_table_is_replaced_between_the_markers(tmp_path, monkeypatch):
    """The table, then the toolchain it was measured with."""
    monkeypatch.setattr(bench.toolchain, "described", lambda: "p4c 9.9 /x/p4c-bm2-ss, BMv2 1.0 /x/ss")
    readme = tmp_path / "README.md"
    readme.write_text(f"before\n{bench.README_START}\nold table\n{bench.README_END}\nafter\n")
    bench.update_readme(readme, "| new |")
    measured = f"Measured {time.strftime('%Y-%m-%d')} with p4c 9.9 /x/p4c-bm2-ss, BMv2 1.0 /x/ss."
    assert readme.read_text() == f"before\n{bench.README_START}\n| new |\n\n{measured}\n{bench.README_END}\nafter\n"


def test_readme_without_markers_is_refused(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("no markers here\n")
    with pytest.raises(SystemExit, match="no <!-- bench:start -->"):
        bench.update_readme(readme, "| new |")
    assert readme.read_text() == "no markers here\n"


def test_calibration_raises_the_offered_load_until_bmv2_falls_behind(monkeypatch):
    """A probe at PROBE_PPS leaves BMv2 little CPU (the sender shares it):
    here it forwards a quarter of its capacity, and calibration must still
    end up offering more than BMv2 forwards."""
    capacity = 40_000.0

    def switch(case, pipeline, duration, offered):
        if offered == bench.PROBE_PPS:
            return capacity / 4, offered
        return min(offered, capacity), offered

    monkeypatch.setattr(bench, "measure", switch)
    case = Case("fabric", Path("main.p4"), "every feature off")
    assert bench.calibrate(case, None) > capacity
