"""Non-minimal routing on live BMv2 networks: with Valiant on, every host
pair of a Dragonfly (intermediates: its groups) and of a torus
(intermediates: its switches) answers, and so with dimension-order routing
on the torus; every tag pushed is removed on the way, and the routing
switched back to minimal at runtime still reaches them;
the experiment, shortened, has the paper's shape on the Dragonfly (under the
group shift Valiant and UGAL-L accept more than minimal; under uniform
traffic Valiant's longer paths cost delay that UGAL-L does not pay)."""
import csv
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from emulator.build import compile_p4
from control.controller import FabricController
from emulator.network import Network
from features import topology_from_dict
from features.nonminimal_routing import SECTION

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name, modes", [("dragonfly-small", ("ugal", "valiant")),
                                         ("torus-3x3", ("valiant", "dimension_order"))])
def test_every_pair_answers_and_every_tag_is_removed(name, modes, tmp_path):
    """Each mode in turn (the first from the file's section, the next set at
    runtime), then minimal: every host pair answers, every tag pushed is
    removed. (UGAL-L, dragonfly-small's own routing, pushes tags only under
    load: pings leave the queues empty. These are the small Dragonfly's and
    torus' all-pairs checks; test_make_run.py runs the Slim Fly's.)"""
    raw = yaml.safe_load((REPO / "topologies" / f"{name}.yaml").read_text())
    raw[SECTION] = {"mode": modes[0]}
    topo = topology_from_dict(raw, f"{name} + {modes[0]}")
    compile_p4()
    with Network(topo, tmp_path / "net", log_level="warn") as net, FabricController(topo) as ctl:
        ctl.program()
        handle = ctl.feature("nonminimal_routing")

        def totals() -> tuple[int, int]:
            counts = handle.packets()
            return sum(c["pushed"] for c in counts.values()), sum(c["reached"] for c in counts.values())

        for mode in modes:
            if mode != modes[0]:
                handle.set_mode(mode)
            before = totals()
            replies = net.ping_nics(count=2, timeout_s=3)
            assert all(replies.values()), (mode, [pair for pair, ok in replies.items() if not ok])
            pushed, reached = (a - b for a, b in zip(totals(), before))
            assert reached == pushed and (pushed > 0 or mode == "ugal"), (mode, pushed, reached)
        handle.set_mode("minimal")
        before = totals()
        replies = net.ping_nics(count=1, timeout_s=3)
        assert all(replies.values()), [pair for pair, ok in replies.items() if not ok]
        assert totals()[0] == before[0], "minimal pushes no tag"


def test_nonminimal_routing_experiment(tmp_path):
    out = tmp_path / "nm"
    proc = subprocess.run([sys.executable, "-m", "experiments.nonminimal_routing", "--loads", "0.8",
                           "--duration", "5", "--out", str(out)],
                          cwd=REPO, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"results: {out}/summary.csv" in proc.stdout
    rows = {(r["pattern"], r["routing"]): r for r in csv.DictReader(open(out / "summary.csv"))}
    assert len(rows) == 6
    # every case states what its rates cost this machine before it starts, and keeps it in its row
    assert proc.stdout.count("budget: ") >= 6 and all(re.fullmatch(r"within|over x[0-9.]+|unknown", r["budget"]) for r in rows.values())
    accepted = {k: float(r["accepted"]) for k, r in rows.items()}
    delay = {k: float(r["delay_p50_ms"]) for k, r in rows.items()}
    assert accepted["shift", "valiant"] > accepted["shift", "minimal"], accepted
    assert accepted["shift", "ugal"] > accepted["shift", "minimal"], accepted
    assert delay["uniform", "valiant"] > delay["uniform", "minimal"], delay
    assert delay["uniform", "ugal"] < delay["uniform", "valiant"], delay
    for pattern in ("shift", "uniform"):
        assert int(rows[pattern, "minimal"]["tags_pushed"]) == 0
        assert int(rows[pattern, "valiant"]["tags_pushed"]) > 0
        assert int(rows[pattern, "ugal"]["ugal_minimal"]) > 0
    assert (out / "throughput.png").stat().st_size > 10_000
