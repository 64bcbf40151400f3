"""What the benchmarks measure: the programs, the entries each is given, the
frames offered, and the veth pairs BMv2 sits between. Shared by
forwarding_rate.py (packets per second) and instructions_per_packet.py
(callgrind instruction counts)."""
from __future__ import annotations

import subprocess
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

REPO = Path(__file__).resolve().parent.parent

from scapy.layers.inet import IP, UDP, IPOption_EOL, IPOption_NOP
from scapy.layers.l2 import Ether

from emulator.bmv2 import switch_command
from emulator.build import compile_p4
from control.feature import Feature
from control.forwarding import forwarding_state
from emulator.network import make_veth_pair, sh
from control.p4info import P4Info
from control.switch import CONTROLLER_CREDENTIALS, Pipeline, SwitchConnection
from control.sync import SwitchState, reconcile
from control.tls import Pki
from emulator.toolchain import require
from control.topology import NextHop, Route
from features import FEATURES
from wire.ecn import ECT0

GRPC_ADDR, THRIFT_PORT, DEVICE_ID = "127.0.0.1:9458", 9088, 1  # apart from the launcher and PTF
SWITCH_NAME = "bench-switch"          # its TLS certificate's name
PAIRS = {1: ("benchsw1", "benchdp1"), 2: ("benchsw2", "benchdp2")}  # port: (switch side, traffic side)
IN_PORT, OUT_PORT = 1, 2
SWITCH_MAC, HOST_MAC = "0a:00:00:00:01:01", "0a:00:01:00:00:01"
SRC_IP, DST_NET, DST_IP = "10.0.1.1", "10.0.2.0/24", "10.0.2.1"
MAIN = REPO / "p4src" / "main.p4"


def frames(case: "Case | None" = None) -> list[bytes]:
    """What the bench offers: `case`'s own frames if its feature has
    bench_frames (control/feature.py), else 64-byte UDP frames of 8 flows,
    ECN-capable (so ECN takes its marking path)."""
    if case is not None and case.frames is not None:
        return case.frames
    return [bytes(Ether(dst=SWITCH_MAC, src=HOST_MAC)
                  / IP(src=SRC_IP, dst=DST_IP, tos=ECT0) / UDP(sport=5000 + i, dport=4791) / (b"\0" * 18))
            for i in range(8)]


def fabric_state(p4info: P4Info) -> SwitchState:
    """The fabric's forwarding as a leaf has it: a route to a 16-slot ECMP
    group (two next hops, both out of port 2 so every packet is counted)."""
    hops = (NextHop(OUT_PORT, "0a:00:00:00:02:01", "0a:00:02:00:00:01"),
            NextHop(OUT_PORT, "0a:00:00:00:02:01", "0a:00:02:00:00:02"))
    return forwarding_state(p4info, [Route(DST_NET, hops, host="h2")], seed=0x5A5B)


def router_state(p4info: P4Info) -> SwitchState:
    state = SwitchState(managed_tables={p4info.table("ipv4_lpm").preamble.id})
    state.table_entries.append(p4info.table_entry("ipv4_lpm", {"hdr.ipv4.dst_addr": DST_NET}, action="forward",
                                                  params={"port": OUT_PORT, "dst_mac": "0a:00:02:00:00:01"}))
    return state


@dataclass(frozen=True)
class Case:
    name: str
    source: Path
    what: str
    state: Callable[[P4Info], SwitchState] | None = None
    frames: list[bytes] | None = None     # None: the default UDP frames
    defines: tuple[str, ...] = ()         # preprocessor symbols: features compiled out
    drop_reason: str | None = None        # the frames are dropped for this reason (DROP_<reason>), not forwarded


def without(feature: Feature) -> str:
    """The preprocessor symbol that compiles `feature` out of the fabric
    (p4src/include/defines.p4): WITHOUT_ and the feature's name."""
    return f"WITHOUT_{feature.name.upper()}"


def compile_case(case: Case) -> Pipeline:
    """`case`'s program compiled for BMv2, in build/bench (one directory per
    program and set of features compiled out; kept while the sources are unchanged)."""
    tag = "".join(f"-{d.removeprefix('WITHOUT_').lower()}" for d in case.defines)
    return compile_p4(case.source, REPO / "build" / "bench" / f"{case.source.parent.name}-{case.source.stem}{tag}",
                      defines=case.defines)


def _feature_on(feature: Feature, mode: str) -> Callable[[P4Info], SwitchState]:
    """The entries of the fabric with `feature` on (in `mode`) for all traffic."""
    def state(p4info: P4Info) -> SwitchState:
        return fabric_state(p4info).merge(feature.bench_states(p4info, OUT_PORT)[mode])
    return state


def off_cases(fabric_source: Path = MAIN) -> list[Case]:
    """The references; the fabric with every feature compiled out
    (forwarding_only); the fabric as shipped with every feature off; and the
    fabric with one feature compiled out (fabric-<feature>: the difference to
    `fabric` is what that feature costs a packet while it is off)."""
    out = [Case("port_forward", REPO / "p4src" / "baseline" / "port_forward.p4", "no parsing, port 1 -> 2"),
           Case("basic_router", REPO / "p4src" / "baseline" / "basic_router.p4", "1 LPM table, TTL, checksum",
                router_state),
           Case("forwarding_only", fabric_source, "every feature compiled out", fabric_state,
                defines=tuple(without(f) for f in FEATURES)),
           Case("fabric", fabric_source, "every feature off", fabric_state)]
    out += [Case(f"fabric-{f.section}", fabric_source, f"{f.section} compiled out, the rest off", fabric_state,
                 defines=(without(f),)) for f in FEATURES]
    # Not a feature (always on), priced the same way: p4src/include/queue_depth.p4
    return out + [Case("fabric-queue_depth", fabric_source, "queue depth recorder compiled out, features off",
                       fabric_state, defines=("WITHOUT_QUEUE_DEPTH",))]


def cases(fabric_source: Path = MAIN) -> list[Case]:
    """off_cases(), then the fabric with each registered feature on: one row
    per mode of its bench_states(), with its bench_frames() if it has them
    (control/feature.py), then drop_cases(). The modes are known from the fabric's P4Info, so this
    compiles `fabric_source`."""
    out = off_cases(fabric_source)
    p4info = P4Info(compile_case(next(c for c in out if c.name == "fabric")).p4info())
    for feature in FEATURES:
        own = feature.bench_frames(SWITCH_MAC, HOST_MAC)
        for mode in feature.bench_states(p4info, OUT_PORT):    # "" when the feature has one mode
            if mode:
                name, what = f"fabric+{feature.section}:{mode}", f"{feature.section} {mode} for all traffic"
            else:
                name = f"fabric+{feature.section}"
                what = getattr(feature, "bench_what", "") or f"{feature.section} on for all traffic"
            out.append(Case(name, fabric_source, what, _feature_on(feature, mode), frames=own))
    return out + drop_cases(fabric_source)


def _udp(ip: IP) -> bytes:
    return bytes(Ether(dst=SWITCH_MAC, src=HOST_MAC) / ip / UDP(sport=5000, dport=4791) / (b"\0" * 18))


def _bad_checksum() -> bytes:
    frame = bytearray(_udp(IP(src=SRC_IP, dst=DST_IP)))
    frame[14 + 10] ^= 0xFF          # the IPv4 header checksum
    return bytes(frame)


def drop_cases(fabric_source: Path = MAIN) -> list[Case]:
    """The fabric, every feature off, given frames it drops, one reason a
    row (drop:<reason>): what a packet that is not forwarded costs, to set
    against `fabric`'s forwarded one."""
    drops = {
        "no-route": ("NO_ROUTE", "no route (LPM miss)", _udp(IP(src=SRC_IP, dst="10.9.9.9"))),
        "ttl-expired": ("TTL_EXPIRED", "TTL 1", _udp(IP(src=SRC_IP, dst=DST_IP, ttl=1))),
        "bad-checksum": ("BAD_IPV4_CHECKSUM", "wrong IPv4 checksum", _bad_checksum()),
        "parser-error": ("PARSER_ERROR", "IPv4 options (a parser error)",
                         _udp(IP(src=SRC_IP, dst=DST_IP, options=[IPOption_NOP(), IPOption_NOP(), IPOption_NOP(),
                                                                   IPOption_EOL()]))),
    }
    return [Case(f"drop:{name}", fabric_source, f"dropped: {what}, every feature off", fabric_state, frames=[frame],
                 drop_reason=reason) for name, (reason, what, frame) in drops.items()]


def select(all_cases: list[Case], only: list[str] | None) -> list[Case]:
    chosen = [c for c in all_cases if not only or c.name in only]
    if not chosen:
        raise SystemExit(f"--only matched nothing (programs: {', '.join(c.name for c in all_cases)})")
    return chosen


def make_veths() -> None:
    for sw, dp in PAIRS.values():
        make_veth_pair(sw, dp)


def remove_veths() -> None:
    for sw, _ in PAIRS.values():
        sh("ip", "link", "del", sw, check=False)


def rx_packets(iface: str) -> int:
    return int(Path(f"/sys/class/net/{iface}/statistics/rx_packets").read_text())


@contextmanager
def switch_process(ports: dict[int, str], wrapper: list[str] | None = None, tls: bool = True):
    """simple_switch_grpc at the bench's addresses on `ports`, logging off
    (optionally under a wrapper such as valgrind), no pipeline; stopped on exit.
    P4Runtime runs mutual TLS as everywhere (it is not on the packet path);
    `tls=False` for plain gRPC (under valgrind, BMv2's TLS handshake and
    arbitration answer outlast the client's 2 s wait)."""
    creds = Pki().ensure({SWITCH_NAME: [GRPC_ADDR.rsplit(":", 1)[0]]})[SWITCH_NAME] if tls else None
    cmd = switch_command(require("simple_switch_grpc"), device_id=DEVICE_ID, thrift_port=THRIFT_PORT,
                         grpc_addr=GRPC_ADDR, ports=ports, log_level="off", tls=creds)
    switch = subprocess.Popen([*(wrapper or []), *cmd], stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    try:
        yield switch
    finally:
        switch.terminate()
        try:
            switch.wait(timeout=60)
        except subprocess.TimeoutExpired:
            switch.kill()
            switch.wait()


@contextmanager
def running_switch(case: Case, pipeline: Pipeline, wrapper: list[str] | None = None, timeout: float = 20,
                   tls: bool = True):
    """switch_process between the bench veths, running `case`'s program and entries."""
    with switch_process({p: sw for p, (sw, _) in PAIRS.items()}, wrapper, tls) as switch:
        program(case, pipeline, timeout, tls)
        yield switch
        if switch.poll() is not None:
            raise RuntimeError(f"simple_switch_grpc died while measuring {case.name}")


def connect(case: Case, timeout: float = 20, tls: bool = True) -> SwitchConnection:
    """A P4Runtime connection to the bench's switch (started by running_switch with the same `tls`)."""
    return SwitchConnection(case.name, GRPC_ADDR, DEVICE_ID, connect_timeout=timeout,
                            credentials=CONTROLLER_CREDENTIALS if tls else None)


def program(case: Case, pipeline: Pipeline, timeout: float = 20, tls: bool = True) -> None:
    with connect(case, timeout, tls) as conn:
        conn.push_pipeline(pipeline, force=True)
        if case.state:
            reconcile(conn, case.state(P4Info(pipeline.p4info())))
