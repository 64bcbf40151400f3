"""`make build` on the real p4c: outputs, failures with p4c's own message,
and the unit tests' P4Info fixture being current."""
import subprocess
import sys
from pathlib import Path

import pytest

from control.p4info import P4Info, interface, interface_changes
from emulator.build import CompileError, compile_p4

REPO = Path(__file__).resolve().parents[2]


def test_build_writes_json_and_p4info(tmp_path):
    p = compile_p4(REPO / "p4src" / "main.p4", tmp_path)
    assert p.bmv2_json.stat().st_size > 0 and "tables" in p.p4info_txt.read_text()


def test_unit_test_p4info_fixture_is_current():
    """The fixture the unit tests build entries against has the compiled
    program's interface (names, IDs, match fields, actions, parameters,
    sizes), whichever p4c compiled it: not its text, which compilers differ in."""
    compiled = interface(P4Info.from_file(compile_p4().p4info_txt).proto)
    fixture = interface(P4Info.from_file(REPO / "tests" / "fixtures" / "main.p4info.txtpb").proto)
    changes = interface_changes(fixture, compiled)
    assert not changes, ("p4src changed: run `make fixtures` to refresh tests/fixtures/main.p4info.txtpb\n"
                         + "\n".join(changes))


def test_broken_program_fails_with_p4c_message(tmp_path):
    src = tmp_path / "broken.p4"
    src.write_text((REPO / "p4src" / "baseline" / "port_forward.p4").read_text().replace(
        "std_meta.egress_spec =", "std_meta.egress_spek ="))
    with pytest.raises(CompileError) as err:
        compile_p4(src, tmp_path / "out")
    assert "egress_spek" in str(err.value)
    assert not (tmp_path / "out" / "broken.json").exists()
    proc = subprocess.run([sys.executable, "-m", "emulator.build", str(src), "-o", str(tmp_path / "out")],
                          cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 1 and "egress_spek" in proc.stderr
