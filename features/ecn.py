"""Control-plane side of p4src/include/ecn.p4: ECN marking profiles per
egress port, and per priority queue (a traffic class's, lossless.md).

In a topology file (validated with the rest of it, before anything starts):

    ecn:
      - {switch: s1, towards: h5, mode: step, k: 10}
      - {switch: s1, port: 2, mode: wred, kmin: 5, kmax: 30, pmax: 0.1}
      - {switch: leaf1, port: all, mode: step, k: 20}
      - {switch: s1, port: all, queue: 3, mode: step, k: 5}

k, kmin and kmax are egress queue depths in packets (BMv2's enq_qdepth);
pmax is the marking probability reached at kmax (0..1). Ports without a
profile never mark, at the cost of one table miss. Queue depths are
recorded on every queue with or without a profile
(p4src/include/queue_depth.p4, read with emulator/queue_depth.py).

`queue` gives a profile to one priority queue of the port (the queue of a
traffic class of the `lossless:` section: per-class ECN); without it the
profile is the port's, for every queue it has. A queue's own profile wins
over its port's.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Optional

from control.feature import CounterMetric, Fail, FeatureSpec, Pieces, one_mode, priority_queues, section_items
from control.p4info import EntryError, P4Info
from control.sync import SwitchState
from emulator.queue_depth import QUEUES     # standard_metadata.priority: 3 bits

SECTION = "ecn"
TABLE = "ecn_profile"
MARKED_COUNTER = "ecn_marked_counter"
QDEPTH_MAX = (1 << 19) - 1       # enq_qdepth is 19 bits
PPM = 1_000_000
FIELDS = {"switch", "port", "towards", "queue", "mode", "k", "kmin", "kmax", "pmax"}


@dataclass(frozen=True)
class EcnProfile:
    mode: str                 # "step" or "wred"
    k: int = 0                # step threshold
    kmin: int = 0
    kmax: int = 0
    pmax: float = 0.0

    @classmethod
    def step(cls, k: int) -> "EcnProfile":
        return cls.from_mapping({"mode": "step", "k": k})

    @classmethod
    def wred(cls, kmin: int, kmax: int, pmax: float) -> "EcnProfile":
        return cls.from_mapping({"mode": "wred", "kmin": kmin, "kmax": kmax, "pmax": pmax})

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any], fail: Fail | None = None) -> "EcnProfile":
        def bad(field: str, what: str):
            if fail:
                fail(field, what)
            raise ValueError(f"{field}: {what}")

        def depth(field: str) -> int:
            if field not in raw:
                bad("", f"mode {raw.get('mode')} needs {field}")
            v = raw[field]
            if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= QDEPTH_MAX:
                bad(field, f"expected a queue depth in packets, 0..{QDEPTH_MAX}, got {v!r}")
            return v

        mode = raw.get("mode")
        if mode == "step":
            extra = {"kmin", "kmax", "pmax"} & set(raw)
            if extra:
                bad(sorted(extra)[0], "not a parameter of mode step (it takes k)")
            return cls("step", k=depth("k"))
        if mode == "wred":
            if "k" in raw:
                bad("k", "not a parameter of mode wred (it takes kmin, kmax, pmax)")
            kmin, kmax = depth("kmin"), depth("kmax")
            if kmin >= kmax:
                bad("kmin", f"kmin ({kmin}) must be below kmax ({kmax})")
            if "pmax" not in raw:
                bad("", "mode wred needs pmax")
            pmax = raw["pmax"]
            if isinstance(pmax, bool) or not isinstance(pmax, (int, float)) or not 0 <= pmax <= 1:
                bad("pmax", f"expected a probability within 0..1, got {pmax!r}")
            return cls("wred", kmin=kmin, kmax=kmax, pmax=float(pmax))
        if mode == "monitor":
            bad("mode", "mode monitor is gone: every queue's depth is recorded without a profile "
                        "(p4src/include/queue_depth.p4); remove this entry")
        bad("mode", f"expected 'step' or 'wred', got {mode!r}")
        raise AssertionError("unreachable")

    def action(self) -> tuple[str, dict]:
        if self.mode == "step":
            return "mark_step", {"k": self.k}
        return "mark_wred", {"wred_kmin": self.kmin, "wred_kmax": self.kmax,
                             "wred_pmax_ppm": round(self.pmax * PPM)}

    def __str__(self) -> str:
        if self.mode == "step":
            return f"step K={self.k}"
        return f"WRED Kmin={self.kmin} Kmax={self.kmax} Pmax={self.pmax:g}"


ProfileKey = tuple[str, int, Optional[int]]      # (switch, port, queue); queue None: every queue of the port


def parse_section(raw: Any, topo, fail: Fail) -> dict[ProfileKey, EcnProfile]:
    """Validate a topology's `ecn:` list -> {(switch, port, queue or None): profile}.
    `fail(field, what)` raises the loader's error naming file and field."""
    profiles: dict[ProfileKey, EcnProfile] = {}
    for where, item, name in section_items(raw, SECTION, FIELDS, topo, fail,
                                           what="{switch, port|towards, queue, mode, ...}"):
        sw = topo.switches[name]
        if ("port" in item) == ("towards" in item):
            fail(where, "give exactly one of port (a number or 'all') and towards (a neighbour's name)")
        if "towards" in item:
            ports = [p.number for p in sw.ports.values() if p.peer == item["towards"]]
            if not ports:
                fail(f"{where}.towards", f"{name} has no link to {item['towards']!r}")
        elif item["port"] == "all":
            ports = sorted(sw.ports)
        else:
            if item["port"] not in sw.ports:
                fail(f"{where}.port", f"{name} has no port {item['port']!r} (ports: {sorted(sw.ports)})")
            ports = [item["port"]]
        queue = item.get("queue")
        if queue is not None and (isinstance(queue, bool) or not isinstance(queue, int) or not 0 <= queue < QUEUES):
            fail(f"{where}.queue", f"expected a priority queue 0..{QUEUES - 1}, got {queue!r}")
        profile = EcnProfile.from_mapping({k: v for k, v in item.items() if k != "queue"},
                                          lambda field, what: fail(f"{where}.{field}" if field else where, what))
        for port in ports:
            if (name, port, queue) in profiles:
                fail(where, f"{name} port {port}{'' if queue is None else f' queue {queue}'} already has an ECN profile")
            profiles[(name, port, queue)] = profile
    return profiles


def ecn_state(p4info: P4Info, profiles: Mapping[int, EcnProfile], *, queues: int = 1,
              queue_profiles: Mapping[tuple[int, int], EcnProfile] | None = None) -> SwitchState:
    """Entities for one switch with `queues` priority queues per port:
    {egress port: profile} for every queue of the port, and {(port, queue):
    profile} for one queue (winning over its port's). Others never mark."""
    state = SwitchState(managed_tables={p4info.table(TABLE).preamble.id})
    per_queue = {(port, q): p for port, p in profiles.items() for q in range(queues)}
    per_queue.update(queue_profiles or {})
    for (port, queue), profile in sorted(per_queue.items()):
        action, params = profile.action()
        state.table_entries.append(p4info.table_entry(TABLE, {"std_meta.egress_port": port,
                                                              "std_meta.priority": queue},
                                                      action=action, params=params))
    return state


def switch_state(p4info: P4Info, topo, switch: str, *, forwarding: "SwitchState | None" = None) -> SwitchState:
    """The ECN profiles the topology file gives `switch` (feature interface)."""
    mine = [(port, q, p) for (sw, port, q), p in topo.features.get(SECTION, {}).items() if sw == switch]
    return ecn_state(p4info, {port: p for port, q, p in mine if q is None}, queues=priority_queues(topo, switch),
                     queue_profiles={(port, q): p for port, q, p in mine if q is not None})


def bench_state(p4info: P4Info, port: int) -> SwitchState:
    """ECN at its most expensive for `make bench`: WRED on `port` from depth 0,
    so every ECN-capable packet takes the marking path and draws a random number."""
    return ecn_state(p4info, {port: EcnProfile.wred(0, QDEPTH_MAX, 1.0)})


class EcnRuntime:
    """controller.feature("ecn"): ECN profiles changed at runtime."""

    def __init__(self, controller):
        self.ctl = controller

    def set_profile(self, switch: str, port: int, profile: "EcnProfile | None", *, queue: Optional[int] = None):
        """Change (or remove, with None) the ECN profile of one egress port,
        or of one priority queue of it."""
        return self.set_profiles({(switch, port, queue): profile})[switch]

    def set_profiles(self, changes: Mapping[tuple[str, int, Optional[int]], "EcnProfile | None"]) -> dict:
        """set_profile for each (switch, port, queue) -> profile of `changes`,
        every one checked before any is applied, each switch programmed once
        (a switch's sync reads and compares its whole state: once per port
        and queue, 160 of them took 6 s on fat-tree-k4). The switches' sync
        reports."""
        topo = self.ctl.topo
        for switch, port, queue in changes:
            if switch not in topo.switches:
                raise EntryError(f"no switch {switch!r}")
            if port not in topo.switches[switch].ports:
                raise EntryError(f"{switch} has no port {port}")
            if queue is not None and not 0 <= queue < priority_queues(topo, switch):
                raise EntryError(f"{switch} has queues 0..{priority_queues(topo, switch) - 1}, not {queue}")
        profiles = topo.features.setdefault(SECTION, {})
        for key, profile in changes.items():
            if profile is None:
                profiles.pop(key, None)
            else:
                profiles[key] = profile
        return {switch: self.ctl.program_switch(switch) for switch in dict.fromkeys(sw for sw, _, _ in changes)}


FEATURE = FeatureSpec(
    name="ecn", section=SECTION, summary="ECN marking (step or WRED) per egress port, for DCQCN senders",
    pieces=Pieces.of("ecn", experiments=("ecn_incast",)),
    parse_section=parse_section, switch_state=switch_state, bench_states=one_mode(bench_state),
    runtime=EcnRuntime,
    counters=(CounterMetric("fabric_ecn_marked", "ecn_marked_counter: packets marked CE", (MARKED_COUNTER,)),))
