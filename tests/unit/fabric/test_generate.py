"""Every generated file that is committed equals its generator's output
(`fabric generate` rewrites them)."""
from fabric import generate


def test_committed_generated_files_are_fresh():
    assert generate.stale() == [], "run `make generate`"


def test_check_mode_writes_nothing_and_names_stale_files(tmp_path, monkeypatch, capsys):
    target = tmp_path / "out.txt"
    target.write_text("old\n")
    monkeypatch.setattr(generate, "outputs", lambda: {target: lambda: "new\n"})
    monkeypatch.setattr(generate, "REPO", tmp_path)
    assert generate.main(["--check"]) == 1
    assert target.read_text() == "old\n" and "stale: out.txt" in capsys.readouterr().out
    assert generate.main([]) == 0 and target.read_text() == "new\n"
