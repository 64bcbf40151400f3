"""The controller's work on many switches at once (control/controller.py):
results in order, every call run to its end, what succeeded kept, the first
error raised; the P4Info parsed once per file version."""
import threading
import time
from pathlib import Path

import pytest

from control.controller import FabricController, each_switch, first_error
from control.switch import Pipeline, SwitchConnection, SwitchError
from features import load_topology

REPO = Path(__file__).resolve().parents[3]


def test_each_switch_keeps_order_and_runs_every_call_whatever_the_others_did():
    started = []

    def work(i: int) -> int:
        started.append(i)
        time.sleep(0.01 * (5 - i))       # finish out of order
        if i == 2:
            raise SwitchError("s2: no P4Runtime server")
        return i * 10

    results = each_switch(work, [0, 1, 2, 3, 4])
    assert sorted(started) == [0, 1, 2, 3, 4]
    assert results[:2] == [0, 10] and results[3:] == [30, 40] and isinstance(results[2], SwitchError)
    with pytest.raises(SwitchError, match="s2"):
        first_error(results)
    assert first_error([1, 2]) == [1, 2]


def test_each_switch_runs_the_calls_at_once():
    inside, most = [0], [0]
    lock = threading.Lock()

    def work(_):
        with lock:
            inside[0] += 1
            most[0] = max(most[0], inside[0])
        time.sleep(0.05)
        with lock:
            inside[0] -= 1

    each_switch(work, range(6))
    assert most[0] > 1


def test_connect_keeps_the_switches_that_answered_and_names_the_one_that_did_not(monkeypatch, tmp_path):
    topo = load_topology(REPO / "topologies" / "leaf-spine.yaml")
    ctl = FabricController.__new__(FabricController)
    ctl.topo, ctl.connections = topo, {}
    dead = sorted(topo.switches)[0]

    def connection(sw, timeout):
        if sw.name == dead:
            raise SwitchError(f"{sw.name}: no P4Runtime server at {sw.grpc_addr}")
        return SwitchConnection.__new__(SwitchConnection)

    monkeypatch.setattr(ctl, "_connection", connection)
    with pytest.raises(SwitchError, match=dead):
        ctl.connect()
    assert set(ctl.connections) == set(topo.switches) - {dead}


def test_the_p4info_is_parsed_once_per_version_of_its_file(tmp_path):
    text = 'pkg_info { arch: "v1model" }\n'
    p4info, bmv2 = tmp_path / "p.p4info.txt", tmp_path / "p.json"
    p4info.write_text(text)
    bmv2.write_text("{}")
    pipeline = Pipeline(bmv2, p4info)
    first, second = pipeline.p4info(), pipeline.p4info()
    assert first == second and first is not second      # copies: a caller's change stays its own
    first.pkg_info.arch = "psa"
    assert pipeline.p4info().pkg_info.arch == "v1model"
    cookie = pipeline.cookie()
    time.sleep(0.01)
    p4info.write_text(text.replace("v1model", "v1model2"))
    assert pipeline.p4info().pkg_info.arch == "v1model2" and pipeline.cookie() != cookie
