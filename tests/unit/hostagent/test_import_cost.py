"""What a host agent's process imports before it can send: no Scapy (about
0.2 s of CPU) and no gRPC, which experiments pay once per agent, and
many agents start at once on a case's two cores. The agents build and
parse their frames with wire/'s struct codecs; Scapy's layers are made
only where a Scapy packet is asked for (wire/rdma.py, wire/uet.py,
wire/aggregation.py, wire/roce.py, wire/lossless.py)."""
import subprocess
import sys

import pytest

AGENTS = ("hostagent.ecn.roce", "hostagent.rdma.agent", "hostagent.collectives.communicator",
          "hostagent.aggregation.allreduce", "hostagent.aggregation.parameter_server",
          "hostagent.aggregation.ring_allreduce")


@pytest.mark.parametrize("module", AGENTS)
def test_an_agent_imports_neither_scapy_nor_grpc(module):
    code = (f"import sys, {module}; "
            "print(sorted({m.split('.')[0] for m in sys.modules if m.split('.')[0] in ('scapy', 'grpc')}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]", f"{module} imports {out.strip()}"
