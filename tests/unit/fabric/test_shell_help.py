"""The fabric shell's `help`: a feature's command is documented with its own
help text, and Ctrl-D's EOF is no command to list."""
from __future__ import annotations

from types import SimpleNamespace

from fabric.shell import FabricCLI


def shell() -> FabricCLI:
    fault = SimpleNamespace(help="fault <link|switch> ...: break something", run=lambda cli, arg: None)
    feature = SimpleNamespace(commands={"fault": fault})
    return FabricCLI(SimpleNamespace(topo=SimpleNamespace(known_features=[feature])), None)  # type: ignore[arg-type]


def test_help_lists_every_command_as_documented(capsys):
    shell().onecmd("help")
    out = capsys.readouterr().out
    assert "Undocumented" not in out and "EOF" not in out
    assert "fault" in out.split() and "pingall" in out.split()


def test_help_of_a_features_command_is_its_help(capsys):
    shell().onecmd("help fault")
    assert capsys.readouterr().out == "fault <link|switch> ...: break something\n"


def test_ctrl_d_still_leaves():
    assert shell().onecmd("EOF") is True
