"""docs/tuning.md's table of hand-set values against derived ones is what
features/tuning.py derives today for each run that sets them (no shipped
topology file has a `lossless:` or `ecn:` section: the experiments and
`fabric train` add theirs), so the page cannot drift from the code.

    .venv/bin/python -m tests.unit.features.test_tuning_docs    # prints the table to paste
"""
from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import Any, Optional

from control.topology import Topology
from experiments import lossless, rdma, train
from features import load_topology
from features import tuning as tn
from features.ecn import EcnProfile
from features.lossless import Watchdog
from hostagent.ecn.dcqcn import DcqcnParams
from hostagent.rdma.cc.hpcc import HpccParams
from hostagent.rdma.cc.swift import SwiftParams
from hostagent.rdma.cc.timely import TimelyParams

REPO = Path(__file__).resolve().parents[3]
DOC = REPO / "docs" / "tuning.md"
BEGIN, END = "<!-- tuning-table:begin -->", "<!-- tuning-table:end -->"
MATERIAL = 1.5          # a derived value this many times the hand-set one (or its inverse) differs materially


def value(t: tn.Tuning, section: str, name: str, where: str = "") -> float:
    """The derived value of `name` (the section's, for PFC; the one for `where`'s ports otherwise)."""
    found = [d for d in t.sections[section] if d.name == name and (where in d.where if where else True)]
    if section == "lossless":
        found = [d for d in found if d.where == "section"]
    return found[0].value


def with_ecn(topo: Topology, profiles: dict[tuple[str, int, Optional[int]], EcnProfile]) -> Topology:
    topo.features["ecn"] = profiles
    return topo


def bottleneck(topo: Topology, host: str) -> tuple[str, int]:
    nic = topo.hosts[host].primary
    return nic.switch, nic.switch_port


def rows() -> list[tuple[str, str, str, Any, float]]:
    """(run, topology as it runs, parameter, hand-set, derived)."""
    out: list[tuple[str, str, str, Any, float]] = []

    def pfc(run: str, where: str, t: tn.Tuning, config) -> None:
        for key in ("xoff", "xon", "headroom"):
            out.append((run, where, f"lossless.pfc.{key}", getattr(config.pfc, key),
                        value(t, "lossless", f"lossless.pfc.{key}")))

    # the lossless experiment, phase incast: incast.yaml, XOFF 24 / XON 12 / headroom 32, step K 10 at s1 -> h5
    topo = load_topology("incast")
    topo.features["lossless"] = lossless.section(True)
    sw, port = bottleneck(topo, lossless.RECEIVER)
    t = tn.derive(with_ecn(topo, {(sw, port, None): lossless.INCAST_MARKING}))
    pfc("lossless, incast", "incast", t, topo.features["lossless"])
    out.append(("lossless, incast (pfc-dcqcn)", "incast", f"ecn.k at {sw} -> h5", 10, value(t, "ecn", "ecn.k")))
    # phase spreading: incast-leaf-spine at half its rates (its scale without a calibration), headroom 64, hold 500, step K 10 on leaf3 -> r1's class
    topo = lossless.spreading_topology(lossless.SPREADING_FALLBACK_SCALE)
    sw, port = bottleneck(topo, "r1")
    t = tn.derive(with_ecn(topo, {(sw, port, lossless.TCLASS): EcnProfile.step(10)}))
    pfc("lossless, spreading", "incast-leaf-spine x0.5", t, topo.features["lossless"])
    out.append(("lossless, spreading (pfc-dcqcn)", "incast-leaf-spine x0.5", f"ecn.k at {sw} -> r1, class 3", 10,
                value(t, "ecn", "ecn.k")))
    # phase storm: dumbbell without its delay, the watchdog at 200 / 400 ms
    topo = lossless.dumbbell_without_delay()
    topo.features["lossless"] = replace(lossless.section(True), watchdog=Watchdog(200, 400, "drop"))
    t = tn.derive(topo)
    out.append(("lossless, storm", "dumbbell, no delay", "lossless.watchdog.detect_ms", 200,
                value(t, "watchdog", "lossless.watchdog.detect_ms")))
    out.append(("lossless, storm", "dumbbell, no delay", "lossless.watchdog.restore_ms", 400,
                value(t, "watchdog", "lossless.watchdog.restore_ms")))
    # phase deadlock, the ring with the watchdog: headroom 64, two classes at half a link each
    case = next(c for c in lossless.DEADLOCK_CASES if c.name == "watchdog")
    topo = load_topology("ring")
    topo.features["lossless"] = lossless.deadlock_section(case, topo)
    t = tn.derive(topo)
    pfc("lossless, deadlock (ring)", "ring", t, topo.features["lossless"])
    for key, hand in (("detect_ms", 200), ("restore_ms", 400)):
        out.append(("lossless, deadlock (ring)", "ring", f"lossless.watchdog.{key}", hand,
                    value(t, "watchdog", f"lossless.watchdog.{key}")))
    # the ECN experiment: incast.yaml, step K 10 and WRED 5 / 30 / 0.2 at s1 -> h5
    topo = load_topology("incast")
    sw, port = bottleneck(topo, "h5")
    t = tn.derive(with_ecn(topo, {(sw, port, None): EcnProfile.wred(5, 30, 0.2)}))
    t_step = tn.derive(with_ecn(load_topology("incast"), {(sw, port, None): EcnProfile.step(10)}))
    out.append(("ecn_incast", "incast", f"ecn.k at {sw} -> h5", 10, value(t_step, "ecn", "ecn.k")))
    for key, hand in (("kmin", 5), ("kmax", 30), ("pmax", 0.2)):
        out.append(("ecn_incast", "incast", f"ecn.{key} at {sw} -> h5", hand, value(t, "ecn", f"ecn.{key}")))
    # the RDMA experiment: incast-leaf-spine with its lossless class, step K 10 on leaf3 -> r1, the agents' defaults
    topo = rdma.with_int_to_host(REPO / "topologies" / "incast-leaf-spine.yaml")
    sw, port = bottleneck(topo, rdma.RECEIVER)
    t = tn.derive(with_ecn(topo, {(sw, port, rdma.LOSSLESS_CLASS): EcnProfile.step(rdma.DCQCN_K)}))
    where = "incast-leaf-spine"
    pfc("rdma", where, t, topo.features["lossless"])
    out.append(("rdma (dcqcn)", where, f"ecn.k at {sw} -> r1, class 3", rdma.DCQCN_K, value(t, "ecn", "ecn.k")))
    nic = "NIC line rate 833"          # the hosts' 10 Mbit/s links
    dcqcn = DcqcnParams()
    for name, hand in (("cnp_interval_s", dcqcn.cnp_interval_s), ("alpha_timer_s", dcqcn.alpha_timer_s),
                       ("rate_timer_s", dcqcn.rate_timer_s)):
        out.append(("DCQCN defaults", where, f"dcqcn.{name}", hand, value(t, "dcqcn", f"dcqcn.{name}")))
    for name, hand in (("byte_counter_bytes", dcqcn.byte_counter_bytes), ("r_ai_pps", dcqcn.r_ai_pps)):
        out.append(("DCQCN defaults", where, f"dcqcn.{name}", hand, value(t, "dcqcn", f"dcqcn.{name}", nic)))
    hpcc, timely, swift = HpccParams(), TimelyParams(), SwiftParams()
    for section, params, names in (("hpcc", hpcc, ("base_rtt_s", "expected_flows")),
                                   ("timely", timely, ("min_rtt_s", "t_low_s", "t_high_s")),
                                   ("swift", swift, ("base_target_s", "per_hop_s", "hops"))):
        for name in names:
            out.append((f"{section.upper() if section != 'swift' else 'Swift'} defaults", where, f"{section}.{name}",
                        getattr(params, name), value(t, section, f"{section}.{name}")))
    # fabric train: its lossless section on leaf-spine and fat-tree-k4
    for name in ("leaf-spine", "fat-tree-k4"):
        topo, _ = train.composed_topology(name, train.Composition(), [h for h in load_topology(name).hosts])
        t = tn.derive(topo)
        pfc("fabric train", name, t, topo.features["lossless"])
    return out


def table() -> str:
    lines = ["| run | topology, as it runs | parameter | hand-set | derived | differs materially |",
             "|---|---|---|---|---|---|"]
    for run, where, name, hand, derived in rows():
        ratio = derived / hand if hand else float("inf")
        material = f"yes, x{tn.fmt(round(ratio, 2))}" if ratio > MATERIAL or ratio < 1 / MATERIAL else "no"
        lines.append(f"| {run} | {where} | `{name}` | {tn.fmt(hand)} | {tn.fmt(derived)} | {material} |")
    return "\n".join(lines)


def test_the_docs_table_is_what_the_code_derives():
    text = DOC.read_text()
    m = re.search(re.escape(BEGIN) + r"\n(.*?)\n" + re.escape(END), text, re.S)
    assert m, f"docs/tuning.md lacks the {BEGIN} / {END} markers"
    expected = table()
    assert m.group(1).strip() == expected, \
        "docs/tuning.md's table is stale: paste `.venv/bin/python -m tests.unit.features.test_tuning_docs`:\n" + expected


if __name__ == "__main__":
    print(table())
