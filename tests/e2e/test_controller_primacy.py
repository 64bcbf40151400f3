"""The controller stays primary on a live switch, and says so when it is not.

p4runtime-shell, run as a user would with its defaults (election id 1,0)
and the operator's certificate (mutual TLS, control/tls.py), reads a switch the controller programs: the controller is still primary and
still writes. A client with a higher election id demotes it: the controller
logs it at once, names the new primary, refuses writes with an error that
says why, the exporter's reading shows it (fabric_controller_primary 0),
and when that client leaves the controller is primary again."""
import logging
import subprocess
import sys
from pathlib import Path

import pytest
from p4.v1 import p4runtime_pb2

from emulator.build import compile_p4
from control.controller import FabricController
from emulator.network import Network
from control.switch import CONTROLLER_ELECTION_ID, SwitchConnection, SwitchError, update
from control.tls import Pki
from features import load_topology
from telemetry.switch_exporter import Bmv2Reader
from test_int_live import wait_for

REPO = Path(__file__).resolve().parents[2]
OPERATOR = tuple(str(p) for p in (lambda c: (c.ca, c.cert, c.key))(Pki().client_credentials("operator")))

SHELL_READ = """
import p4runtime_sh.shell as sh
from p4runtime_sh.p4runtime import SSLOptions
# every setting its default but the operator's certificate (docs/operations.md)
sh.setup(device_id={device_id}, grpc_addr={addr!r}, verbose=False, ssl_options=SSLOptions(False, *{creds!r}))
print(len(list(sh.TableEntry("FabricIngress.forwarding.ipv4_lpm").read())))
sh.teardown()
"""


@pytest.fixture
def net(tmp_path):
    compile_p4()
    with Network(load_topology(REPO / "topologies" / "star.yaml"), tmp_path / "net", log_level="warn") as network:
        yield network


def route(ctl: FabricController) -> p4runtime_pb2.TableEntry:
    return ctl.p4info.table_entry("ipv4_lpm", {"hdr.ipv4.dst_addr": "10.99.0.0/16"},
                                  action="set_next_id", params={"next_id": 1})


def test_p4runtime_shell_with_its_defaults_reads_without_demoting_the_controller(net):
    sw = net.topo.switches["s1"]
    with FabricController(net.topo) as ctl:
        ctl.program()
        shell = subprocess.run([sys.executable, "-c", SHELL_READ.format(device_id=sw.device_id, addr=sw.grpc_addr, creds=OPERATOR)],
                               capture_output=True, text=True, timeout=60)
        assert shell.returncode == 0, shell.stderr
        assert int(shell.stdout.split()[-1]) > 0, "p4runtime-shell read the routes"
        assert ctl.primary_of() == {"s1": True}
        conn = ctl.connections["s1"]
        conn.write([update(p4runtime_pb2.Update.INSERT, table_entry=route(ctl))])
        conn.write([update(p4runtime_pb2.Update.DELETE, table_entry=route(ctl))])


def test_a_client_with_a_higher_election_id_demotes_the_controller_and_that_is_reported(net, caplog):
    sw = net.topo.switches["s1"]
    higher = (CONTROLLER_ELECTION_ID[0] + 1, 0)
    reader = Bmv2Reader(REPO / "build" / "main.p4info.txtpb", read_qdepth=False)
    with FabricController(net.topo) as ctl:
        ctl.program()
        assert reader.read(sw).controller_primary is True
        conn = ctl.connections["s1"]
        caplog.set_level(logging.WARNING, logger="control.switch")
        usurper = SwitchConnection("s1", sw.grpc_addr, sw.device_id, election_id=higher)
        try:
            assert usurper.is_primary()
            assert wait_for(lambda: not conn.is_primary()), "the controller learns from its stream"
            assert conn.primary_election_id == higher
            assert conn.demotions == 1
            assert any("no longer primary" in r.getMessage() and f"({higher[0]},0)" in r.getMessage()
                       for r in caplog.records if r.levelno == logging.ERROR), caplog.text
            assert ctl.primacy() == {"s1": (False, higher)}
            with pytest.raises(SwitchError, match="not the primary controller"):
                conn.write([update(p4runtime_pb2.Update.INSERT, table_entry=route(ctl))])
            assert wait_for(lambda: reader.read(sw).controller_primary is False), "the exporter shows it"
        finally:
            usurper.close()
        assert wait_for(lambda: conn.is_primary()), "primary again once the other client left"
        assert any("primary again" in r.getMessage() for r in caplog.records)
        assert wait_for(lambda: reader.read(sw).controller_primary is True)
        conn.write([update(p4runtime_pb2.Update.INSERT, table_entry=route(ctl))])
    reader.close()
