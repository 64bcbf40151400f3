"""What this machine can emulate faithfully, and what a run asks of it.

A calibration (`fabric calibrate`, measured by benchmarks/calibration.py)
records, for one machine and one BMv2 build and pipeline:

- the CPU one BMv2 switch spends per packet it forwards, for the pipeline
  with every feature off (`fabric`) and with the training composition on
  (`training`: lossless class, INT for HPCC, failover heartbeats), as
  packets per second per core;
- the CPU an idle switch spends (cores): BMv2's threads with no traffic;
- the packets per second a host agent sends per core.

It is stored in build/calibration/<BMv2 version>-<hash>.json, one file a
BMv2 build (the tests' and the experiments' fast one each keep theirs),
with what identifies the measurement; one that is older than MAX_AGE or was taken on another CPU,
core count, BMv2 build or pipeline is not current, and is measured again.

The budget: a run's demand (packets per second through each switch, and
sent and received by hosts; `demand()` from flows over the topology's
shortest paths) costs cores by the calibration; a run is within budget when
that is at most `share` of the machine's cores (half by default: BMv2's
threads, the kernel's veths and the agents' own timing need the rest to
stay on time), and no switch asks for more than SWITCH_SHARE of one core
(BMv2's ingress pipeline is one thread: on this 2-core VM the ECN incast
lost frames before the pipeline with one switch at 1.37 cores by the
calibration, none at 0.34). `plan()` says what the rates cost and the time-dilation
factor that would bring them within budget: every rate divided by it (and
every time constant multiplied by it) emulates the same network, slower.
"""
from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import subprocess
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterable

from control.topology import Topology
from emulator.build import compile_p4
from emulator.toolchain import require

REPO = Path(__file__).resolve().parent.parent
CALIBRATION_DIR = REPO / "build" / "calibration"
MAX_AGE = dt.timedelta(days=7)
BUDGET_SHARE = 0.5          # of the machine's cores a faithful run may ask for
SWITCH_SHARE = 0.5          # of one core one switch may ask for: BMv2's ingress is one thread
COMPOSITIONS = ("fabric", "training")
AGENTS = ("roce", "rdma", "uet")   # the host agents a budget can count (plan(agents=))


class CalibrationError(RuntimeError):
    pass


@dataclass(frozen=True)
class Identity:
    """What a calibration was measured on: it holds only there."""
    cpu_model: str
    cores: int
    bmv2: str           # simple_switch_grpc's path, version and a hash of the binary
    pipeline: str       # the fabric pipeline's cookie (a hash of its JSON and P4Info)


def cpu_model(cpuinfo: str | None = None) -> str:
    text = cpuinfo if cpuinfo is not None else Path("/proc/cpuinfo").read_text()
    for line in text.splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown"


def bmv2_identity(binary: str) -> str:
    """'<path> <version> sha256:<12 hex>' of a simple_switch_grpc binary."""
    path = Path(binary).resolve()
    version = subprocess.run([str(path), "--version"], capture_output=True, text=True, timeout=10).stdout.strip()
    digest = hashlib.sha256(path.read_bytes()).hexdigest()[:12]
    return f"{path} {version or '?'} sha256:{digest}"


def machine_identity(binary: str, pipeline_cookie: int | str) -> Identity:
    return Identity(cpu_model(), os.cpu_count() or 1, bmv2_identity(binary), str(pipeline_cookie))


def this_machine() -> Identity:
    """This machine, the BMv2 the toolchain search finds, and the fabric pipeline (compiled if stale)."""
    return machine_identity(require("simple_switch_grpc"), compile_p4().cookie())


@dataclass(frozen=True)
class Calibration:
    identity: Identity
    measured_at: str                                   # ISO 8601, UTC
    switch_pps_per_core: dict[str, float]              # composition -> packets/s one core forwards
    switch_idle_cores: float                           # cores an idle switch process uses
    agent_pps_per_core: float                          # packets/s a host agent sends on one core
    rdma_agent_pps_per_core: float                     # packets the RDMA agents handle per core (sent or received)
    uet_agent_pps_per_core: float                      # the same for the UET transport's agents (--mode uet, NSCC)
    notes: dict[str, str] = field(default_factory=dict)

    def age(self, now: dt.datetime | None = None) -> dt.timedelta:
        now = now or dt.datetime.now(dt.timezone.utc)
        return now - dt.datetime.fromisoformat(self.measured_at)

    def stale_because(self, identity: Identity, now: dt.datetime | None = None) -> str | None:
        """Why this calibration does not hold for `identity` now (None: it does)."""
        for name, mine in asdict(self.identity).items():
            theirs = getattr(identity, name)
            if mine != theirs:
                return f"measured with another {name.replace('_', ' ')} ({mine!r}, now {theirs!r})"
        if self.age(now) > MAX_AGE:
            return f"measured {self.age(now).days} days ago (at most {MAX_AGE.days})"
        return None

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)

    @classmethod
    def from_json(cls, text: str) -> "Calibration":
        raw = json.loads(text)
        try:
            missing = [c for c in COMPOSITIONS if c not in raw["switch_pps_per_core"]]
            if missing:
                raise CalibrationError(f"no switch rate for {', '.join(missing)}")
            rates = {k: float(v) for k, v in raw["switch_pps_per_core"].items()}
            for key, what in (("rdma_agent_pps_per_core", "RDMA"), ("uet_agent_pps_per_core", "UET")):
                if key not in raw:
                    raise CalibrationError(f"no {what} agents' rate (measured by an older `fabric calibrate`)")
            agents = (float(raw["agent_pps_per_core"]), float(raw["rdma_agent_pps_per_core"]),
                      float(raw["uet_agent_pps_per_core"]))
            if any(v <= 0 for v in (*rates.values(), *agents)):
                raise CalibrationError("a rate is not positive")
            return cls(Identity(**raw["identity"]), raw["measured_at"], rates, float(raw["switch_idle_cores"]),
                       *agents, dict(raw.get("notes", {})))
        except (KeyError, TypeError, ValueError) as exc:
            raise CalibrationError(f"malformed calibration: {exc!r}") from None


def calibration_file(identity: Identity) -> Path:
    """Where the calibration of `identity`'s BMv2 build is kept: a file a
    build, so that runs on the default and the fast build, in turn, do not
    each measure the machine again (and size themselves by another
    measurement's noise)."""
    _path, version, digest = identity.bmv2.rsplit(" ", 2)
    return CALIBRATION_DIR / f"{version}-{digest.removeprefix('sha256:')}.json"


def store(cal: Calibration, path: Path | None = None) -> Path:
    path = path or calibration_file(cal.identity)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(cal.to_json())
    tmp.replace(path)
    return path


def load(path: Path) -> Calibration | None:
    """The stored calibration, None if there is none; CalibrationError if it is malformed."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    return Calibration.from_json(text)


def stored(identity: Identity | None = None) -> Calibration | None:
    """The calibration stored for the BMv2 build a run here uses
    (this_machine()'s unless given), current or not: what a run sizes
    itself and says it costs by; None if there is none, CalibrationError if
    it is malformed."""
    return load(calibration_file(identity or this_machine()))


def current(identity: Identity, path: Path | None = None) -> tuple[Calibration | None, str]:
    """(the stored calibration if it holds for `identity` now, else None; why not)."""
    path = path or calibration_file(identity)
    try:
        cal = load(path)
    except CalibrationError as exc:
        return None, str(exc)
    if cal is None:
        return None, f"no calibration ({path})"
    why = cal.stale_because(identity)
    return (None, why) if why else (cal, "")


# -- the budget ----------------------------------------------------------------

@dataclass(frozen=True)
class Flow:
    src: str            # host names, or "host.nic" for one NIC of a host with several
    dst: str
    pps: float


@dataclass(frozen=True)
class Demand:
    """What a run's traffic asks of the machine, per second."""
    switch_pps: dict[str, float]    # switch -> packets it forwards
    host_pps: float                 # packets hosts send and receive, all hosts
    switches: int                   # switch processes running (each costs its idle share)

    @property
    def traversals_pps(self) -> float:
        return sum(self.switch_pps.values())


def demand(topo: Topology, flows: Iterable[Flow], ack_share: float = 0.0) -> Demand:
    """Each flow's packets through every switch of a shortest path between
    its hosts (where there are several, split evenly: ECMP), plus
    `ack_share` x its packets back (a transport's ACKs or CNPs)."""
    per_switch = {name: 0.0 for name in topo.switches}
    host = 0.0
    for f in flows:
        for a, b, pps in ((f.src, f.dst, f.pps), (f.dst, f.src, f.pps * ack_share)):
            if pps <= 0:
                continue
            for sw, share in _path_shares(topo, a, b).items():
                per_switch[sw] += pps * share
            host += 2 * pps
    return Demand(per_switch, host, len(topo.switches))


def attached_switch(topo: Topology, endpoint: str) -> str:
    """The switch a host ("h1": its first NIC) or one NIC of it ("g1.eth2") is linked to."""
    host, _, nic = endpoint.partition(".")
    try:
        return topo.hosts[host].nics[nic].switch if nic else topo.hosts[host].switch
    except KeyError:
        raise ValueError(f"no host or NIC {endpoint!r} in {topo.name}") from None


def _path_shares(topo: Topology, src: str, dst: str) -> dict[str, float]:
    """{switch: share of src -> dst packets it forwards} over the shortest
    paths, split evenly at each switch among the next hops nearer dst."""
    first, last = attached_switch(topo, src), attached_switch(topo, dst)
    dist = topo.hops_from([last])
    shares = {first: 1.0}
    frontier = {first: 1.0}
    while frontier:
        nxt: dict[str, float] = {}
        for sw, share in frontier.items():
            if sw == last:
                continue
            nearer = [p.peer for p in topo.switch_neighbours(sw) if dist.get(p.peer, 1 << 30) == dist[sw] - 1]
            for peer in nearer:
                nxt[peer] = nxt.get(peer, 0.0) + share / len(nearer)
        for sw, share in nxt.items():
            shares[sw] = shares.get(sw, 0.0) + share
        frontier = nxt
    return shares


def fitting_rate(topo: Topology, pairs: Iterable[tuple[str, str]], cal: Calibration, composition: str = "fabric",
                 ack_share: float = 0.0, share: float = BUDGET_SHARE, agents: str = "roce") -> float:
    """The highest packets/s every (source, destination) of `pairs` may be
    sent at together for the run to stay within budget (0 when the idle
    switches alone exceed it), the hosts running `agents` (plan())."""
    unit = demand(topo, [Flow(a, b, 1.0) for a, b in pairs], ack_share)
    p = plan(unit, cal, composition, share, agents)
    fixed = unit.switches * cal.switch_idle_cores
    per_pps = p.needed_cores - fixed
    if per_pps <= 0:
        return float("inf")
    return max(0.0, min((p.budget_cores - fixed) / per_pps, SWITCH_SHARE / p.busiest_switch_cores))


@dataclass(frozen=True)
class Plan:
    """What a run's rates cost and what would bring them within budget."""
    needed_cores: float
    budget_cores: float
    dilation: float                  # >= 1: divide every rate by it (multiply time constants) to fit
    busiest_switch: str
    busiest_switch_cores: float      # the cores the busiest switch's traffic alone costs

    @property
    def within_budget(self) -> bool:
        return self.dilation <= 1.0

    def __str__(self) -> str:
        head = (f"needs {self.needed_cores:.2f} cores at its rates (budget {self.budget_cores:.2f}; "
                f"busiest switch {self.busiest_switch} {self.busiest_switch_cores:.2f})")
        if self.within_budget:
            return head + ": within budget"
        return head + f": over budget, rates / {self.dilation:.2f} would fit (time dilation x{self.dilation:.2f})"


def plan(need: Demand, cal: Calibration, composition: str = "fabric", share: float = BUDGET_SHARE,
         agents: str = "roce") -> Plan:
    """What `need` costs and the dilation that fits it; `agents` the hosts
    run: "roce" (the fast sender loop of hostagent.ecn, the collectives and
    the traffic tools), "rdma" (hostagent.rdma's RC transport, many times
    the work a packet) or "uet" (its UET mode, more again: per-packet
    entropies, SACK bitmaps, ACK spraying)."""
    if composition not in cal.switch_pps_per_core:
        raise ValueError(f"no calibration for composition {composition!r} "
                         f"(have: {', '.join(cal.switch_pps_per_core)})")
    if agents not in AGENTS:
        raise ValueError(f"no calibration for agents {agents!r} (have: {', '.join(AGENTS)})")
    per_core = cal.switch_pps_per_core[composition]
    switching = need.traversals_pps / per_core
    agent_per_core = {"roce": cal.agent_pps_per_core, "rdma": cal.rdma_agent_pps_per_core,
                      "uet": cal.uet_agent_pps_per_core}[agents]
    needed = switching + need.host_pps / agent_per_core + need.switches * cal.switch_idle_cores
    budget = share * cal.identity.cores
    busiest = max(need.switch_pps, key=lambda s: need.switch_pps[s], default="-")
    busiest_cores = need.switch_pps.get(busiest, 0.0) / per_core
    # the rate-dependent part scales with the dilation; the idle switches' part does not
    fixed = need.switches * cal.switch_idle_cores
    variable = needed - fixed
    room = budget - fixed
    if variable <= 0:
        dilation = 1.0
    elif room <= 0:
        dilation = float("inf")
    else:
        dilation = max(1.0, variable / room, busiest_cores / SWITCH_SHARE)
    return Plan(needed, budget, dilation, busiest, busiest_cores)
