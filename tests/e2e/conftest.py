"""End-to-end tests run on the real toolchain. Without it they fail loudly,
never skip (`make test` also checks first and says how to get it). They
keep the toolchain they find: the front door's switch to a fast BMv2
(emulator/toolchain.py, use_fast_bmv2) is for experiments a user runs, so
the first directory found is pinned in $P4_TOOLCHAIN_BIN for every command
the tests start."""
import os
from pathlib import Path

import pytest

from emulator.toolchain import ENV_VAR, HOW_TO_GET, find_tool, missing_tools

_found = find_tool("simple_switch_grpc")
if _found.path and not os.environ.get(ENV_VAR):
    os.environ[ENV_VAR] = str(Path(_found.path).parent)


@pytest.fixture(autouse=True)
def _require_toolchain_and_root():
    missing = missing_tools()
    if missing:
        pytest.fail(f"end-to-end tests need p4c and BMv2; missing {', '.join(missing)}.\n{HOW_TO_GET}", pytrace=False)
    if os.geteuid() != 0:
        pytest.fail("end-to-end tests need root (network namespaces, veths, tc)", pytrace=False)


@pytest.fixture
def failover_network(tmp_path, request):
    """A live leaf-spine (or the topology named by indirect parametrisation)
    with data-plane failover (heartbeats every 20 ms, 100 ms timeout),
    programmed, heartbeats running: (topo, net, ctl)."""
    from pathlib import Path

    import yaml

    from emulator.build import compile_p4
    from control.controller import FabricController
    from emulator.network import Network
    from features import topology_from_dict
    from features.failover.heartbeat import running_heartbeats
    name = getattr(request, "param", "leaf-spine")
    raw = yaml.safe_load((Path(__file__).resolve().parents[2] / "topologies" / f"{name}.yaml").read_text())
    raw["failover"] = {"heartbeat_ms": 20, "timeout_ms": 100}
    topo = topology_from_dict(raw, f"{name} + failover")
    compile_p4()
    with Network(topo, tmp_path / "net", log_level="warn") as net, FabricController(topo) as ctl:
        ctl.program()
        with running_heartbeats(topo, 0.02):
            yield topo, net, ctl
