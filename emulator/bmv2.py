"""How every part of the project starts BMv2's simple_switch_grpc.

The launcher, the PTF runner, the benchmark and the experiments all build the
command line here, so they agree on one thing that matters a great deal for
speed: the log level is always passed. simple_switch_grpc started without
`--log-level` logs at trace, formatting a line for every table, action and
primitive of every packet even when there is no log file; that made it
about 3x slower. "off" is passed as `--log-level off`, never as "no flag".

Defaults by use: experiments and the benchmark run with logging off; `make
run` logs at info (what a user debugging a topology reads); the PTF runner
logs at info so a failing test can be read in build/ptf/switch.txt.
"""
from __future__ import annotations

from pathlib import Path
from typing import Mapping

from control.tls import ServerCredentials

LOG_LEVELS = ("trace", "debug", "info", "warn", "error", "off")
DEFAULT_EXPERIMENT_LOG_LEVEL = "off"
DEFAULT_INTERACTIVE_LOG_LEVEL = "info"


def check_log_level(log_level: str) -> str:
    if log_level not in LOG_LEVELS:
        raise ValueError(f"BMv2 log level must be one of {', '.join(LOG_LEVELS)}, got {log_level!r}")
    return log_level


def written_log(log_file: Path) -> Path:
    """Where BMv2 really writes `--log-file log_file`: its (spdlog) rotating
    file sink appends ".txt" to the name it is given."""
    return Path(f"{log_file}.txt")


def switch_command(binary: str, *, device_id: int, thrift_port: int, grpc_addr: str,
                   ports: Mapping[int, str], log_level: str, log_file: Path | None = None,
                   pcap_dir: Path | None = None, priority_queues: int = 1,
                   tls: ServerCredentials | None = None) -> list[str]:
    """The simple_switch_grpc command line for one switch.

    `ports` maps BMv2 port numbers to interface names. The log level is
    always explicit; a `log_file` is passed whatever the level (at "off" it
    stays empty, which is how the tests prove logging is off); BMv2 writes
    it as written_log(log_file). The pipeline
    comes later over P4Runtime (`--no-p4`); P4Runtime listens on `grpc_addr`
    (loopback by default everywhere in the project). `priority_queues` > 1
    gives each port that many strict-priority queues (a target option).
    `tls`: P4Runtime over TLS, with a client certificate from its CA
    required of every client (control/tls.py); the project's launchers always
    pass it, None is plain gRPC.
    """
    cmd = [binary, "--device-id", str(device_id), "--thrift-port", str(thrift_port)]
    for number, iface in sorted(ports.items()):
        cmd += ["-i", f"{number}@{iface}"]
    cmd += ["--log-level", check_log_level(log_level)]
    if log_file is not None:
        cmd += ["--log-file", str(log_file), "--log-flush"]
    if pcap_dir is not None:
        cmd += ["--pcap", str(pcap_dir)]
    cmd += ["--no-p4", "--", "--grpc-server-addr", grpc_addr]
    if priority_queues != 1:
        if not 1 <= priority_queues <= 8:
            raise ValueError(f"BMv2 priority queues per port must be 1..8, got {priority_queues}")
        cmd += ["--priority-queues", str(priority_queues)]
    if tls is not None:
        cmd += tls.bmv2_args()
    return cmd
