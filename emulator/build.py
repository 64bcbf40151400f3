"""Compile a P4 program with p4c-bm2-ss into BMv2 JSON + P4Info text.

    python -m emulator.build [p4src/main.p4] [-o build/]

Fails with p4c's own message (and p4c's exit code) when compilation fails.
Skips the compiler when the outputs are newer than every source file and
were compiled with the same defines by the same p4c (its version and path,
kept in build/<program>.defines: `compiled_by`).
"""
from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path
from typing import Sequence

from control.switch import Pipeline
from emulator.toolchain import ToolchainMissing, compiler, identify, require

REPO = Path(__file__).resolve().parent.parent


class CompileError(RuntimeError):
    pass


def pipeline_paths(source: Path, out_dir: Path) -> Pipeline:
    return Pipeline(out_dir / f"{source.stem}.json", out_dir / f"{source.stem}.p4info.txtpb")


def compile_p4(source: Path = REPO / "p4src" / "main.p4", out_dir: Path = REPO / "build",
               force: bool = False, defines: Sequence[str] = ()) -> Pipeline:
    """`source` compiled for BMv2 into `out_dir` (kept while no source is newer);
    `defines` are preprocessor symbols (-D), e.g. the benchmarks' WITHOUT_<feature>."""
    source, out_dir = Path(source), Path(out_dir)
    pipeline = pipeline_paths(source, out_dir)
    sources = [source, *source.parent.glob("include/*.p4")]
    outputs = [pipeline.bmv2_json, pipeline.p4info_txt]
    stamp = out_dir / f"{source.stem}.defines"       # what the outputs were compiled with, and by which p4c
    p4c = identify("p4c-bm2-ss")
    if stamp.exists():
        kept_defines, _, kept_p4c = stamp.read_text().partition("\n")
        # other defines, or another p4c found: compile again. No p4c at all (a controller
        # given the pipeline): the outputs stand if their defines match.
        if kept_defines != " ".join(defines) or (p4c is not None and kept_p4c != p4c):
            force = True
    if not force and all(o.exists() for o in outputs):
        newest_source = max(s.stat().st_mtime for s in sources)
        if min(o.stat().st_mtime for o in outputs) > newest_source:
            return pipeline
    out_dir.mkdir(parents=True, exist_ok=True)
    cmd = [require("p4c-bm2-ss"), "--arch", "v1model", "--std", "p4-16",
           "-o", str(pipeline.bmv2_json), "--p4runtime-files", str(pipeline.p4info_txt),
           *(f"-D{d}" for d in defines), str(source)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        for o in outputs:  # never leave a half-written pair behind
            o.unlink(missing_ok=True)
        raise CompileError(f"p4c-bm2-ss failed on {source} (exit {proc.returncode}):\n"
                           f"{proc.stderr.strip() or proc.stdout.strip()}")
    if proc.stderr.strip():
        print(proc.stderr.strip(), file=sys.stderr)  # warnings
    stamp.write_text(f"{' '.join(defines)}\n{compiler()}")
    return pipeline


def compiled_by(pipeline: Pipeline) -> str:
    """The p4c (version and path) that compiled `pipeline`, as compile_p4
    recorded it; "unknown" for outputs it did not write."""
    stamp = pipeline.bmv2_json.with_suffix(".defines")
    lines = stamp.read_text().split("\n") if stamp.exists() else []
    return lines[1] if len(lines) > 1 else "unknown"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="fabric build", description="Compile a P4 program for BMv2 (v1model).")
    ap.add_argument("source", nargs="?", default=str(REPO / "p4src" / "main.p4"))
    ap.add_argument("-o", "--out-dir", default=str(REPO / "build"))
    ap.add_argument("--force", action="store_true", help="compile even if outputs are up to date")
    args = ap.parse_args(argv)
    try:
        p = compile_p4(Path(args.source), Path(args.out_dir), args.force)
    except (CompileError, ToolchainMissing) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"build: {p.bmv2_json} and {p.p4info_txt}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
