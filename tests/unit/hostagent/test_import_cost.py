"""What a host agent's process imports before it can send: no Scapy (about
0.2 s of CPU) and no gRPC, which experiments pay once per agent, and
many agents start at once on a case's two cores. The agents build and
parse their frames with wire/'s struct codecs (wire/*_codec.py, which
import no Scapy; wire/roce.py and wire/lossless.py import it only when a
Scapy layer is asked for)."""
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
