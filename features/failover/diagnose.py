"""Fault localisation: name the most likely faulty link or switch of a
running network, with the evidence.

    fabric diagnose --topology leaf-spine [--interval 2]

Reads every switch's counters twice, --interval seconds apart, over
P4Runtime, and compares what moved in between:

- every switch-to-switch link, both directions: packets the sending port
  counted out (egress_port_counter) against packets the receiving port
  counted in (ingress_port_counter). A direction that loses a share of
  what it carries is a lossy or dead link (or a dead receiver);
- a switch that does not answer P4Runtime, or whose counters did not move
  while its neighbours sent it packets, is a dead switch;
- every switch port: frames the kernel delivered to the port's interface
  (its rx_packets, where the switch runs on this machine) against what the
  P4 pipeline counted in. BMv2 reads its ports through packet sockets and
  queues what it read before ingress; when its ingress falls behind (an
  incast, a busy machine), frames are lost there, before any P4 counter,
  drop counter or buffer model sees them. That is the switch's input path,
  not the link: a link is judged by what reached the far interface;
- drops by reason (drop_counter): a switch dropping for want of a route or
  a live member, or counting malformed packets, points at itself or at a
  neighbour; failover to backups (backup_packets) shows which members its
  data plane gave up on.

Candidates are ranked by how much traffic the evidence concerns (a link
losing 30% of 10 packets ranks below one losing 5% of 10000); the first is
the diagnosis. The ranking is a pure function of two snapshots
(`diagnose()`), so it is tested without a network.
"""
from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass, field
from typing import Optional

from concurrent.futures import ThreadPoolExecutor

from control.controller import FabricController
from emulator.network import interface_rx_packets
from control.p4constants import drop_reasons
from features.failover.data_plane import backup_packets

MIN_PACKETS = 20             # a direction carrying fewer packets says nothing
LOSS_THRESHOLD = 0.005       # below this share, a direction is healthy (counters race in-flight packets)
DROP_REASONS_OF_A_FAULT = ("NO_ROUTE", "NO_LIVE_MEMBER", "PARSER_ERROR", "BAD_IPV4_CHECKSUM")


@dataclass
class Snapshot:
    """Counters of every switch at one time; None for a switch that did not answer."""
    taken_at: float
    ingress: dict[str, Optional[dict[int, int]]] = field(default_factory=dict)    # switch -> port -> packets
    egress: dict[str, Optional[dict[int, int]]] = field(default_factory=dict)
    drops: dict[str, Optional[dict[str, int]]] = field(default_factory=dict)      # switch -> reason -> packets
    backups: dict[str, Optional[int]] = field(default_factory=dict)               # switch -> packets to backups
    # switch -> port -> frames the kernel delivered to the port's interface (absent: not readable here)
    interface_rx: dict[str, dict[int, int]] = field(default_factory=dict)


@dataclass
class Finding:
    kind: str                 # "link", "switch"
    name: str                 # "leaf1:3->spine2:1", or a switch
    score: float              # packets the evidence concerns
    evidence: list[str]

    def __str__(self) -> str:
        return f"{self.kind} {self.name} (score {self.score:.0f}): " + "; ".join(self.evidence)


SILENT = "does not answer P4Runtime"      # the evidence against a switch that does not answer


def _delta(after: Optional[dict], before: Optional[dict], key) -> int:
    if after is None or before is None:
        return 0
    return after.get(key, 0) - before.get(key, 0)


def switch_links(topo) -> list[tuple[str, int, str, int]]:
    """(a, a's port, b, b's port) for every directed switch-to-switch link."""
    out = []
    for sw in topo.switches.values():
        for port in sw.ports.values():
            if port.peer in topo.switches and port.peer_port is not None:
                out.append((sw.name, port.number, port.peer, port.peer_port))
    return sorted(out)


def diagnose(topo, before: Snapshot, after: Snapshot) -> list[Finding]:
    """Candidates for the fault, most likely first."""
    findings: dict[tuple[str, str], Finding] = {}

    def add(kind: str, name: str, score: float, evidence: str) -> None:
        f = findings.setdefault((kind, name), Finding(kind, name, 0.0, []))
        f.score += score
        f.evidence.append(evidence)

    dead = {s for s in topo.switches if after.ingress.get(s) is None}
    for s in sorted(dead):
        add("switch", s, 1e9, SILENT)

    def delivered(s: str, p: int) -> Optional[int]:
        """Frames the kernel delivered to switch s's port p in the interval (None: unknown)."""
        if p not in after.interface_rx.get(s, {}) or p not in before.interface_rx.get(s, {}):
            return None
        return after.interface_rx[s][p] - before.interface_rx[s][p]

    for a, pa, b, pb in switch_links(topo):
        if a in dead or b in dead:
            continue
        sent = _delta(after.egress[a], before.egress[a], pa)
        received = _delta(after.ingress[b], before.ingress[b], pb)
        if sent < MIN_PACKETS:
            continue
        arrived = delivered(b, pb)
        lost = sent - (received if arrived is None else arrived)
        if lost > LOSS_THRESHOLD * sent:
            name = f"{a}:{pa}->{b}:{pb}"
            at_b = f"{b} port {pb} received {received}" if arrived is None else \
                f"{b} port {pb}'s interface received {arrived}"
            add("link", name, lost, f"{a} port {pa} sent {sent}, {at_b} ({lost / sent:.1%} lost)")
    for s in topo.switches:
        if s in dead:
            continue
        for p in sorted(topo.switches[s].ports):
            arrived = delivered(s, p)
            if arrived is None or arrived < MIN_PACKETS:
                continue
            counted = _delta(after.ingress[s], before.ingress[s], p)
            lost = arrived - counted
            if lost > LOSS_THRESHOLD * arrived:
                add("input", f"{s}:{p}", lost, f"the kernel delivered {arrived} frames to "
                                               f"{topo.switches[s].ports[p].iface}, {s}'s pipeline counted {counted} "
                                               f"({lost / arrived:.1%} lost in BMv2's input path, or still queued there: "
                                               f"its CPU is behind)")
    # A switch that received nothing at all while its neighbours sent it a lot
    # is dead even if it still answers (a hung data plane).
    for s in topo.switches:
        if s in dead:
            continue
        got = sum(_delta(after.ingress[s], before.ingress[s], p) for p in topo.switches[s].ports)
        offered = sum(_delta(after.egress[a], before.egress[a], pa)
                      for a, pa, b, _ in switch_links(topo) if b == s and a not in dead)
        if got == 0 and offered >= MIN_PACKETS:
            add("switch", s, 2 * offered, f"neighbours sent it {offered} packets, it counted none in")
    reasons = drop_reasons()
    for s in topo.switches:
        if s in dead:
            continue
        for reason in DROP_REASONS_OF_A_FAULT:
            n = _delta(after.drops[s], before.drops[s], reason)
            if n >= MIN_PACKETS and reason in reasons:
                add("switch", s, n / 2, f"dropped {n} packets as {reason}")
        moved = (after.backups.get(s) or 0) - (before.backups.get(s) or 0)
        if moved >= MIN_PACKETS:
            add("switch", s, 0.0, f"its data plane failed {moved} packets over to backups")
    # A link whose receiving end is a switch that lost everything: the switch, not the link.
    ranked = sorted(findings.values(), key=lambda f: -f.score)
    return ranked


def snapshot(ctl) -> Snapshot:
    """Every switch's counters now (a switch that does not answer: None),
    read from all switches at once: read one after another, the two ends of
    a link are counted tens of ms apart, and a change in that skew between
    two snapshots looks like a few packets lost on a healthy link."""

    names = {v: k for k, v in drop_reasons().items()}

    def read(s: str):
        try:
            conn = ctl.connections.get(s)
            if conn is None:
                raise ConnectionError("not connected")
            ing = conn.counter(ctl.p4info.counter_entry("ingress_port_counter"))
            eg = conn.counter(ctl.p4info.counter_entry("egress_port_counter"))
            drops = conn.counter(ctl.p4info.counter_entry("drop_counter"))
            return ({p: v[0] for p, v in ing.items()}, {p: v[0] for p, v in eg.items()},
                    {names[i]: v[0] for i, v in drops.items() if i in names},
                    sum(backup_packets(conn, ctl.p4info).values()),
                    interface_rx_packets(ctl.topo.switches[s]))      # with the counters: no skew between them
        except Exception:               # any failure to read is the evidence: the switch does not answer
            return None, None, None, None, {}

    snap = Snapshot(time.monotonic())
    switches = list(ctl.topo.switches)
    with ThreadPoolExecutor(max_workers=len(switches)) as pool:
        for s, (ing, eg, drops, backups, rx) in zip(switches, pool.map(read, switches)):
            snap.ingress[s], snap.egress[s], snap.drops[s], snap.backups[s], snap.interface_rx[s] = \
                ing, eg, drops, backups, rx
    return snap


def nothing_answers(topo, findings: list[Finding]) -> bool:
    """Every switch silent: nothing to tell apart, no network to diagnose."""
    silent = {f.name for f in findings if f.kind == "switch" and SILENT in f.evidence}
    return silent == set(topo.switches)


def run(ctl, interval_s: float = 2.0) -> tuple[list[Finding], float]:
    """(findings, seconds it took) on a live network."""
    start = time.monotonic()
    ctl.connect_what_answers(timeout=1.0)      # a live BMv2 answers in milliseconds; a dead one never
    before = snapshot(ctl)
    time.sleep(interval_s)
    after = snapshot(ctl)
    return diagnose(ctl.topo, before, after), time.monotonic() - start


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--interval", type=float, default=2.0, help="seconds between the two counter readings")


def run_cli(args: argparse.Namespace, topo) -> int:
    """`fabric diagnose --topology T`: name the most likely fault of a running network."""
    with FabricController(topo) as ctl:
        print(f"reading counters of {len(topo.switches)} switches twice, {args.interval:g} s apart...", flush=True)
        findings, took = run(ctl, args.interval)
    if not findings:
        print(f"no fault found ({took:.1f} s): every link delivered what it carried, every switch answers")
        return 0
    if nothing_answers(topo, findings):
        print(f"fabric diagnose: none of the {len(topo.switches)} switches of {topo.name} answers P4Runtime: "
              f"the network is not running, or every switch is down (`fabric run --topology {topo.name}` "
              f"starts it)", file=sys.stderr)
        return 2
    print(f"most likely: {findings[0]}  ({took:.1f} s)")
    for f in findings[1:5]:
        print(f"  also: {f}")
    return 0
