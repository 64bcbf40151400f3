"""Run inside a Kathara lab's controller container (tests/kathara/test_labs.py
puts it in the controller's /tmp/monitor): what the `monitor` role may do on a switch
behind the authorizing proxy, over the management network.

    python monitor_write.py ADDRESS DEVICE_ID CA CERT KEY

Prints one JSON object: for each attempt, "ok" or the gRPC status and its
details. A Write and a primacy grab (election id above the controller's)
must come back PERMISSION_DENIED; Capabilities must answer.
"""
import json
import sys
from pathlib import Path

import grpc
from p4.v1 import p4runtime_pb2, p4runtime_pb2_grpc

GRAB = p4runtime_pb2.Uint128(high=10 ** 6)     # above the controller's (1000, 0)


def attempt(call) -> str:
    try:
        call()
        return "ok"
    except grpc.RpcError as exc:
        return f"{exc.code().name}: {exc.details()}"


def main(address: str, device_id: str, ca: str, cert: str, key: str) -> int:
    creds = grpc.ssl_channel_credentials(*(Path(p).read_bytes() for p in (ca, key, cert)))
    stub = p4runtime_pb2_grpc.P4RuntimeStub(grpc.secure_channel(address, creds))
    device = int(device_id)
    write = p4runtime_pb2.WriteRequest(device_id=device, election_id=GRAB)
    grab = p4runtime_pb2.StreamMessageRequest(
        arbitration=p4runtime_pb2.MasterArbitrationUpdate(device_id=device, election_id=GRAB))
    print(json.dumps({
        "Write": attempt(lambda: stub.Write(write, timeout=10)),
        "primacy": attempt(lambda: list(stub.StreamChannel(iter([grab]), timeout=10))),
        "Capabilities": attempt(lambda: stub.Capabilities(p4runtime_pb2.CapabilitiesRequest(), timeout=10)),
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
