#!/usr/bin/env python3
"""Run the PTF data-plane tests against a real simple_switch_grpc.

Creates veth pairs (switch side ptfsw<N>, test side ptfdp<N>), starts
simple_switch_grpc on the switch sides, runs `ptf` on the test sides, checks
the switch survived, and tears everything down (also on Ctrl-C and errors).

    ptf-tests/run_ptf.py [ptf test spec, e.g. forwarding.EcmpTest]
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

from emulator.bmv2 import DEFAULT_INTERACTIVE_LOG_LEVEL, LOG_LEVELS, switch_command, written_log
from emulator.build import compile_p4
from emulator.network import make_veth_pair, sh, tail
from control.switch import SwitchConnection, SwitchError
from control.tls import Pki
from emulator.toolchain import require

PORTS = [1, 2, 3, 4]
GRPC_ADDR = "127.0.0.1:9459"    # apart from the launcher's 9560+ / 9091+, below the ephemeral range
THRIFT_PORT = 9089
DEVICE_ID = 1
SWITCH_NAME = "ptf-switch"
PRIORITY_QUEUES = 8             # the lossless tests' classes; every other test uses queue 0


def make_veths() -> None:
    for p in PORTS:
        make_veth_pair(f"ptfsw{p}", f"ptfdp{p}", mtu=9500)


def remove_veths() -> None:
    for p in PORTS:
        sh("ip", "link", "del", f"ptfsw{p}", check=False)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("spec", nargs="*", help="PTF test spec(s) (default: all)")
    ap.add_argument("--log-level", default=DEFAULT_INTERACTIVE_LOG_LEVEL, choices=LOG_LEVELS,
                    help="BMv2 log level (default info, so a failing test can be read in build/ptf/switch.txt)")
    args = ap.parse_args()
    out = REPO / "build" / "ptf"
    out.mkdir(parents=True, exist_ok=True)
    pipeline = compile_p4()
    switch_bin = require("simple_switch_grpc")
    make_veths()
    log, stdout = written_log(out / "switch"), out / "switch.stdout"
    # Mutual TLS as on every switch the project starts; the tests connect with the controller's certificate.
    tls = Pki().ensure({SWITCH_NAME: [GRPC_ADDR.rsplit(":", 1)[0]]})[SWITCH_NAME]
    cmd = switch_command(switch_bin, device_id=DEVICE_ID, thrift_port=THRIFT_PORT, grpc_addr=GRPC_ADDR,
                         ports={p: f"ptfsw{p}" for p in PORTS}, log_level=args.log_level, log_file=out / "switch",
                         priority_queues=PRIORITY_QUEUES, tls=tls)
    with open(stdout, "w") as out_file:
        switch = subprocess.Popen(cmd, stdout=out_file, stderr=subprocess.STDOUT, start_new_session=True)
    rc = 1
    try:
        try:
            SwitchConnection(SWITCH_NAME, GRPC_ADDR, DEVICE_ID, connect_timeout=20).close()
        except SwitchError:
            if switch.poll() is not None:
                print(f"FAIL: simple_switch_grpc exited at start (code {switch.returncode})\n"
                      f"--- {stdout} ---\n{tail(stdout)}", file=sys.stderr)
                return 1
            raise
        params = ";".join(f"{k}={str(v)!r}" for k, v in {  # PTF exec()s each value
            "grpc_addr": GRPC_ADDR, "device_id": DEVICE_ID, "thrift_port": THRIFT_PORT,
            "bmv2_json": pipeline.bmv2_json, "p4info": pipeline.p4info_txt}.items())
        ptf = [str(Path(sys.executable).parent / "ptf"), "--test-dir", str(REPO / "ptf-tests" / "tests"),
               "--pypath", str(REPO / "ptf-tests"), "--pypath", str(REPO),
               "--log-file", str(out / "ptf.log"), "--fail-skipped", "--test-params", params,
               *[a for p in PORTS for a in ("--interface", f"{p}@ptfdp{p}")], *args.spec]
        print(f"ptf: switch log {log}, PTF log {out / 'ptf.log'}", flush=True)
        rc = subprocess.call(ptf, cwd=out)
        time.sleep(0.2)
        if switch.poll() is not None:
            print(f"FAIL: simple_switch_grpc died during the tests (exit {switch.returncode})\n"
                  f"--- {stdout} ---\n{tail(stdout)}\n--- {log} ---\n{tail(log)}", file=sys.stderr)
            rc = rc or 1
    finally:
        if switch.poll() is None:
            os.killpg(switch.pid, 15)
            try:
                switch.wait(timeout=5)
            except subprocess.TimeoutExpired:
                os.killpg(switch.pid, 9)
        remove_veths()
    return rc


if __name__ == "__main__":
    sys.exit(main())
