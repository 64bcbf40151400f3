"""The tests run in the project's own venv (scripts/setup.sh), isolated from the
distribution's Python packages: what runs is what pyproject.toml asks for,
whatever python3-* packages the machine has (Debian's python3-scapy 2.5 once
shadowed the venv's scapy). `make setup` recreates a venv made with
--system-site-packages."""
import importlib.util
import json
import site
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement

PREFIX = Path(sys.prefix).resolve()
FIX = "run `make setup` (it recreates .venv isolated) and the tests with .venv/bin/python"
# Python packages the project imports, by module name (pyproject.toml's dependencies).
MODULES = ("scapy", "numpy", "thrift", "grpc", "google.protobuf", "p4runtime_sh", "p4", "yaml", "matplotlib",
           "prometheus_client", "sklearn", "torch", "ptf", "mypy")


def _inside_venv(path: str) -> bool:
    return Path(path).resolve().is_relative_to(PREFIX)


def test_the_tests_run_in_a_venv_without_system_site_packages():
    assert sys.prefix != sys.base_prefix, f"{sys.executable} is not a venv's python: {FIX}"
    cfg_file = PREFIX / "pyvenv.cfg"
    cfg = {k.strip(): v.strip() for k, v in (line.split("=", 1) for line in cfg_file.read_text().splitlines()
                                             if "=" in line)}
    system = cfg.get("include-system-site-packages")
    assert system == "false", f"{cfg_file}: include-system-site-packages = {system}: {FIX}"
    assert not site.ENABLE_USER_SITE, f"the user's site-packages ({site.USER_SITE}) is visible: {FIX}"
    outside = [d for d in site.getsitepackages() if not _inside_venv(d)]
    assert not outside, f"site-packages outside the venv: {outside}: {FIX}"


def test_a_fresh_interpreter_sees_no_distribution_packages():
    """sys.path as the venv's python starts (emulator/bmv2_thrift.py appends BMv2's
    module directory later, behind everything else)."""
    path = json.loads(subprocess.run([sys.executable, "-c", "import sys, json; print(json.dumps(sys.path))"],
                                     capture_output=True, text=True, check=True).stdout)
    leaked = [p for p in path if "dist-packages" in p or (p.endswith("site-packages") and not _inside_venv(p))]
    assert not leaked, f"{sys.executable} sees {leaked}: {FIX}"


def test_the_projects_python_packages_come_from_the_venv():
    for name in MODULES:
        spec = importlib.util.find_spec(name)
        assert spec is not None, f"{name} is not installed: {FIX}"
        namespace = spec.origin in (None, "namespace")   # google: a namespace package
        where = next(iter(spec.submodule_search_locations or [])) if namespace else spec.origin
        assert _inside_venv(where), f"{name} comes from {where}, not from the venv {PREFIX}: {FIX}"


def test_every_requirement_of_the_project_is_met_in_the_venv():
    """The installed versions satisfy pyproject.toml (as installed: `make setup`
    reinstalls when pyproject.toml changes)."""
    unmet = []
    for line in metadata.requires("p4-ai-fabric") or []:
        req = Requirement(line)
        if req.marker is not None and not req.marker.evaluate({"extra": "test"}):
            continue
        try:
            version = metadata.version(req.name)
        except metadata.PackageNotFoundError:
            unmet.append(f"{req} (not installed)")
            continue
        if not req.specifier.contains(version, prereleases=True):
            unmet.append(f"{req} (installed: {version})")
    assert not unmet, f"unmet requirements: {unmet}: {FIX}"
