"""Find the P4 toolchain (p4c and BMv2) and report what is there.

Tools are looked up, in order, in the directory named by $P4_TOOLCHAIN_BIN,
on $PATH, then in /opt/p4/bin. Nothing here installs them: see the README
for p4lang's Docker image and packages.

A second, fast BMv2 (built without logging macros, -O3: docs/toolchain.md)
is looked for in $P4_FAST_TOOLCHAIN_BIN, then /opt/p4-fast/bin; the
experiments, `fabric train` and the benchmarks run on it where it exists
(`use_fast_bmv2`), the tests on the toolchain they find.
"""
from __future__ import annotations

import functools
import glob
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ENV_VAR = "P4_TOOLCHAIN_BIN"
DEFAULT_PREFIX_BIN = "/opt/p4/bin"
FAST_ENV_VAR = "P4_FAST_TOOLCHAIN_BIN"
DEFAULT_FAST_BIN = "/opt/p4-fast/bin"

REQUIRED_TOOLS = {
    "p4c-bm2-ss": "p4c's BMv2 back end (compiles p4src/ to BMv2 JSON + P4Info)",
    "simple_switch_grpc": "BMv2 switch with the P4Runtime server",
    "simple_switch_CLI": "BMv2 Thrift CLI (queue rates, registers, mirroring)",
}

HOW_TO_GET = """\
How to get p4c and BMv2:
  * Docker: `make docker-run` / `make docker-test` run everything in an image
    built on p4lang's published p4lang/p4c image (it carries p4c and BMv2).
  * Packages: p4lang publishes p4c and BMv2 (with simple_switch_grpc) as
    Ubuntu packages (p4lang-p4c, p4lang-bmv2); see
    the p4c README "Installing packaged versions of p4c".
  * From source: build p4c, PI and behavioral-model from the p4lang
    repositories and install them into a prefix, e.g. /opt/p4.
Then put the tools on PATH, in /opt/p4/bin, or set {env}=/path/to/bin.""".format(env=ENV_VAR)


class ToolchainMissing(RuntimeError):
    pass


@dataclass(frozen=True)
class Tool:
    name: str
    path: str | None

    @property
    def found(self) -> bool:
        return self.path is not None


def search_dirs() -> list[str]:
    dirs = []
    if os.environ.get(ENV_VAR):
        dirs.append(os.environ[ENV_VAR])
    dirs.extend(p for p in os.environ.get("PATH", "").split(os.pathsep) if p)
    dirs.append(DEFAULT_PREFIX_BIN)
    return dirs


def find_tool(name: str) -> Tool:
    for d in search_dirs():
        candidate = Path(d) / name
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return Tool(name, str(candidate))
    return Tool(name, None)


def require(name: str) -> str:
    tool = find_tool(name)
    if not tool.found:
        raise ToolchainMissing(
            f"{name} not found ({REQUIRED_TOOLS.get(name, 'P4 tool')}).\n"
            f"Searched: ${ENV_VAR}, $PATH, {DEFAULT_PREFIX_BIN}.\n{HOW_TO_GET}")
    return tool.path  # type: ignore[return-value]


def fast_bmv2_dir() -> str | None:
    """The directory of the fast BMv2 build's simple_switch_grpc, if there is one."""
    for d in (os.environ.get(FAST_ENV_VAR), DEFAULT_FAST_BIN):
        if d and os.access(Path(d) / "simple_switch_grpc", os.X_OK):
            return d
    return None


def use_fast_bmv2() -> str | None:
    """Run this process and its children on the fast BMv2 where it exists
    (it goes first in the search: $P4_TOOLCHAIN_BIN), unless the user chose a
    toolchain with $P4_TOOLCHAIN_BIN already. Returns the directory used."""
    fast = fast_bmv2_dir()
    if fast and not os.environ.get(ENV_VAR):
        os.environ[ENV_VAR] = fast
        return fast
    return None


def missing_tools() -> list[str]:
    return [n for n in REQUIRED_TOOLS if not find_tool(n).found]


def bmv2_python_dirs() -> list[str]:
    """Directories holding BMv2's generated Thrift modules (bm_runtime,
    sswitch_runtime), found next to the installed simple_switch_CLI."""
    cli = find_tool("simple_switch_CLI")
    if not cli.found:
        return []
    prefix = Path(cli.path).resolve().parent.parent  # type: ignore[arg-type]
    found = []
    for pattern in ("lib/python3*/site-packages", "lib/python3*/dist-packages",
                    "lib/python3/dist-packages", "local/lib/python3*/*-packages"):
        for d in sorted(glob.glob(str(prefix / pattern))):
            if os.path.isdir(os.path.join(d, "sswitch_runtime")) and d not in found:
                found.append(d)
    return found


def tool_version(path: str) -> str:
    """What `path --version` says: p4c's "Version 1.2.4.9 (SHA: ...)" line
    without the word (p4c prints its own path first), else the first line."""
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"(cannot run: {exc})"
    text = [line.strip() for line in (out.stdout + "\n" + out.stderr).strip().splitlines() if line.strip()]
    for line in text:
        if line.startswith("Version "):
            return line.removeprefix("Version ").replace(" BUILD: Release", "")
    return text[0] if text else f"(exit {out.returncode}, no version printed)"


@functools.lru_cache(maxsize=None)
def _version_of(path: str, mtime: float) -> str:
    return tool_version(path)


def identify(name: str) -> str | None:
    """The tool found as `name`: its version and real path (a toolchain
    directory may link to another's tools), or None if there is none."""
    path = find_tool(name).path
    if path is None:
        return None
    path = os.path.realpath(path)
    return f"{_version_of(path, os.stat(path).st_mtime)} {path}"


def compiler() -> str:
    """The p4c-bm2-ss this process compiles with, as a compiled pipeline
    records it (emulator/build.py)."""
    return identify("p4c-bm2-ss") or require("p4c-bm2-ss")     # require: the error saying what is missing


def versions() -> dict[str, str]:
    """The p4c and BMv2 this process compiles and runs with, as results
    record them (`record`): each tool's version and path (the path tells
    the fast BMv2 from the standard one); "none" for a tool not found."""
    return {key: identify(name) or "none" for key, name in (("p4c", "p4c-bm2-ss"), ("bmv2", "simple_switch_grpc"))}


RECORD_FILE = "toolchain.json"


def record(directory: Path) -> Path:
    """Write which p4c and BMv2 produced a directory's results into it
    (toolchain.json: `versions()` and the date), as every experiment's and
    benchmark's outputs carry; return the file."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / RECORD_FILE
    entry = {**versions(), "date": time.strftime("%Y-%m-%d %H:%M:%S %Z")}
    path.write_text(json.dumps(entry, indent=2) + "\n")
    return path


def described() -> str:
    """One line naming the toolchain, for outputs and tables."""
    v = versions()
    return f"p4c {v['p4c']}, BMv2 {v['bmv2']}"


def doctor() -> int:
    """Print what was found, with versions, and how to get what is missing."""
    ok = True
    print("P4 toolchain (search order: $%s, $PATH, %s)" % (ENV_VAR, DEFAULT_PREFIX_BIN))
    for name, what in REQUIRED_TOOLS.items():
        tool = find_tool(name)
        if tool.path is not None:
            version = tool_version(tool.path) if name != "simple_switch_CLI" else "Thrift CLI"
            print(f"  [ok]      {name:20s} {tool.path}  ({version})")
        else:
            ok = False
            print(f"  [MISSING] {name:20s} {what}")
    pydirs = bmv2_python_dirs()
    if pydirs:
        print(f"  [ok]      {'BMv2 Thrift modules':20s} {pydirs[0]}")
    else:
        ok = False
        print(f"  [MISSING] {'BMv2 Thrift modules':20s} bm_runtime/sswitch_runtime next to simple_switch_CLI")
    try:
        import thrift  # noqa: F401
        print(f"  [ok]      {'python thrift':20s} {thrift.__file__}")
    except ImportError:
        ok = False
        print(f"  [MISSING] {'python thrift':20s} run `make setup` (thrift from PyPI, in .venv)")
    stamp = Path(__file__).resolve().parent.parent / "build" / "main.defines"   # emulator/build.py writes it
    compiled = stamp.read_text().split("\n")[1:2] if stamp.exists() else []
    if compiled and compiled[0]:
        print(f"  [--]      {'build/main.json':20s} compiled by p4c {compiled[0]}")
    fast = fast_bmv2_dir()
    if fast:
        print(f"  [ok]      {'fast BMv2':20s} {fast}/simple_switch_grpc  "
              f"({tool_version(str(Path(fast) / 'simple_switch_grpc'))}; experiments, train and bench use it)")
    else:
        print(f"  [--]      {'fast BMv2':20s} none in ${FAST_ENV_VAR} or {DEFAULT_FAST_BIN}: experiments run on the "
              f"build above (docs/toolchain.md, \"A faster BMv2\")")
    for name in ("ip", "tc", "ethtool", "ping"):
        path = shutil.which(name)
        tag = "[ok]     " if path else "[MISSING]"
        print(f"  {tag} {name:20s} {path or 'run `make setup` (iproute2, ethtool, iputils-ping)'}")
        ok = ok and bool(path)
    if os.geteuid() != 0:
        ok = False
        print("  [MISSING] root                 network namespaces, veths and tc need root")
    if not ok:
        print("\n" + HOW_TO_GET)
        return 1
    print("\nAll set: `make run` and `make test` will use this toolchain.")
    return 0


if __name__ == "__main__":
    sys.exit(doctor())
