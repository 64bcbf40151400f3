"""Which p4c and BMv2 a result came from (emulator/toolchain.py), and a
pipeline compiled again when another p4c is chosen (emulator/build.py)."""
import json
import os
import stat
from pathlib import Path

import pytest

from emulator import build, toolchain

FAKE_P4C = """#!/bin/sh
# Prints its version as p4c does (its path first); compiles by writing both outputs.
if [ "$1" = "--version" ]; then echo "$0"; echo "Version {version} (SHA: 0123abcd BUILD: Release)"; exit 0; fi
while [ $# -gt 1 ]; do
  case "$1" in -o) out="$2"; shift;; --p4runtime-files) info="$2"; shift;; esac; shift
done
echo '{{"program": "{version}"}}' > "$out"; echo 'tables {{}}' > "$info"; echo x >> "${{out%/*}}/runs"
"""


def toolchain_dir(root: Path, version: str) -> Path:
    """A toolchain directory: a p4c that says `version`, and a BMv2."""
    bin_dir = root / version / "bin"
    bin_dir.mkdir(parents=True)
    tools = {"p4c-bm2-ss": FAKE_P4C.format(version=version),
             "simple_switch_grpc": "#!/bin/sh\necho 1.15.5-9674187f\n"}
    for name, text in tools.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(stat.S_IRWXU)
    return bin_dir


@pytest.fixture
def only(monkeypatch):
    """Choose the toolchain directory the project finds (nothing else on the search path)."""
    monkeypatch.setattr(toolchain, "DEFAULT_PREFIX_BIN", "/nonexistent/bin")
    monkeypatch.setenv("PATH", "/nonexistent")

    def choose(bin_dir: Path | None) -> None:
        if bin_dir is None:
            monkeypatch.delenv(toolchain.ENV_VAR, raising=False)
        else:
            monkeypatch.setenv(toolchain.ENV_VAR, str(bin_dir))
    return choose


def test_p4c_version_is_its_version_line_not_its_path(tmp_path, only):
    only(toolchain_dir(tmp_path, "1.2.5.16"))
    p4c, bmv2 = toolchain.versions()["p4c"], toolchain.versions()["bmv2"]
    assert p4c == f"1.2.5.16 (SHA: 0123abcd) {tmp_path / '1.2.5.16' / 'bin' / 'p4c-bm2-ss'}"
    assert bmv2.startswith("1.15.5-9674187f ")


def test_a_linked_p4c_is_named_by_where_it_is(tmp_path, only):
    """A toolchain directory linking another's p4c (the fast BMv2's does)
    is the same compiler: the pipeline is not compiled again for it."""
    real = toolchain_dir(tmp_path, "1.2.4.9")
    linked = tmp_path / "fast"
    linked.mkdir()
    (linked / "p4c-bm2-ss").symlink_to(real / "p4c-bm2-ss")
    only(real)
    direct = toolchain.compiler()
    only(linked)
    assert toolchain.compiler() == direct


def test_results_record_the_toolchain(tmp_path, only):
    only(toolchain_dir(tmp_path, "1.2.4.9"))
    record = json.loads(toolchain.record(tmp_path / "results").read_text())
    assert record["p4c"].startswith("1.2.4.9 ") and record["bmv2"].startswith("1.15.5-9674187f ")
    assert record["date"]


def test_another_p4c_compiles_the_pipeline_again(tmp_path, only):
    source = tmp_path / "src" / "prog.p4"
    source.parent.mkdir()
    source.write_text("// a program\n")
    out = tmp_path / "out"
    old, new = toolchain_dir(tmp_path, "1.2.4.9"), toolchain_dir(tmp_path, "1.2.5.16")

    def runs() -> int:
        return len((out / "runs").read_text().split()) if (out / "runs").exists() else 0

    only(old)
    pipeline = build.compile_p4(source, out)
    build.compile_p4(source, out)
    assert runs() == 1 and build.compiled_by(pipeline).startswith("1.2.4.9 ")
    only(new)
    build.compile_p4(source, out)
    assert runs() == 2 and build.compiled_by(pipeline).startswith("1.2.5.16 ")
    assert json.loads(pipeline.bmv2_json.read_text()) == {"program": "1.2.5.16"}
    build.compile_p4(source, out, defines=("WITHOUT_INT",))
    assert runs() == 3


def test_without_a_p4c_the_compiled_pipeline_stands(tmp_path, only):
    """A controller given the pipeline (a Kathara lab's) has no p4c: the
    outputs are used as they are, not compiled again."""
    source = tmp_path / "prog.p4"
    source.write_text("// a program\n")
    only(toolchain_dir(tmp_path, "1.2.4.9"))
    pipeline = build.compile_p4(source, tmp_path / "out")
    only(None)
    assert build.compile_p4(source, tmp_path / "out") == pipeline
    assert os.path.exists(pipeline.bmv2_json)
