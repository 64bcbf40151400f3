"""The front door: the README's feature index is what `fabric features
--markdown` prints, and commands are found by name."""
import importlib
import re
from pathlib import Path

import pytest

from fabric import cli

REPO = Path(__file__).resolve().parents[3]


def test_readme_feature_index_is_current():
    readme = (REPO / "README.md").read_text()
    m = re.search(r"<!-- features:begin -->\n(.*?)\n<!-- features:end -->", readme, re.S)
    assert m, "README.md lacks the <!-- features:begin/end --> markers"
    assert m.group(1).strip() == cli.feature_index(markdown=True), \
        "README's feature table is stale: paste `fabric features --markdown`"


def test_every_experiment_is_a_module_with_main():
    names = cli.experiment_names()
    assert {"aggregation", "ecn_incast", "int_telemetry", "load_balancing", "failover_timeline",
            "failover_diagnosis"} <= set(names)
    for name in names:
        assert callable(importlib.import_module(f"experiments.{name}").main), name


def test_unknown_experiment_is_named(capsys):
    assert cli.main(["experiment", "nope"]) == 2
    assert "no experiment 'nope'" in capsys.readouterr().err


@pytest.mark.parametrize("argv, code", [(["experiment"], 2), (["experiment", "--help"], 0), (["experiment", "-h"], 0)])
def test_experiment_without_a_name_lists_every_experiment(argv, code, capsys):
    assert cli.main(argv) == code
    out = capsys.readouterr().out
    listed = re.findall(r"^  (\w+) +\S", out, re.M)
    assert listed == cli.experiment_names()
    assert "ECN + DCQCN" in out and "fabric experiment NAME --help" in out


def test_features_command_prints_every_feature(capsys):
    assert cli.main(["features"]) == 0
    out = capsys.readouterr().out
    for name in ("ecn", "int_telemetry", "load_balancing", "aggregation", "failover"):
        assert name in out


def test_feature_commands_are_subcommands():
    with pytest.raises(SystemExit) as exc:
        cli.main(["diagnose", "--help"])
    assert exc.value.code == 0


def test_calibrate_measures_the_build_the_experiments_run_on(tmp_path, monkeypatch, capsys):
    """`fabric calibrate` takes the fast BMv2 where there is one, as `fabric
    experiment` and `fabric train` do: the calibration they look for is of
    their own build (each build has its own file)."""
    from emulator import toolchain
    fast = tmp_path / "fast"
    fast.mkdir()
    (fast / "simple_switch_grpc").write_text("#!/bin/sh\n")
    (fast / "simple_switch_grpc").chmod(0o755)
    monkeypatch.setenv(toolchain.FAST_ENV_VAR, str(fast))
    monkeypatch.delenv(toolchain.ENV_VAR, raising=False)
    seen = []
    monkeypatch.setattr(cli.benchmarks.calibration, "main", lambda rest: seen.append(
        (rest, __import__("os").environ.get(toolchain.ENV_VAR))) or 0)
    assert cli.main(["calibrate", "--if-stale"]) == 0
    assert seen == [(["--if-stale"], str(fast))]
    assert f"fabric: on the fast BMv2 in {fast}" in capsys.readouterr().out
