"""Faults: data-plane failover on heartbeats, controller rerouting, and
`fault diagnose`.

data_plane.py  the failover: section, each ECMP slot's backup, the switch entries
heartbeat.py   heartbeats on every link and path, from a process of their own
rerouting.py   the controller routing around what the heartbeats call dead, and back
diagnose.py    two counter snapshots -> the most likely faulty link or switch

Switch restart (emulator/supervisor.py) and controller high availability
(election ids, control/controller.py) are the control plane's, for every network.
"""
from __future__ import annotations

from control.feature import CliCommand, Command, FeatureSpec, Pieces, in_background, one_mode
from features.failover import data_plane, diagnose, heartbeat
from features.failover.rerouting import Rerouter


def _fault_command(shell, arg: str) -> None:
    """fault diagnose [seconds]: read every switch's counters twice and name
    the most likely faulty link or switch, with the evidence."""
    words = arg.split()
    if not words or words[0] != "diagnose" or len(words) > 2:
        print("usage: fault diagnose [seconds between the two readings, default 2]")
        return
    try:
        interval = float(words[1]) if len(words) == 2 else 2.0
    except ValueError:
        print(f"fault diagnose: {words[1]!r} is not a number of seconds")
        return
    findings, took = diagnose.run(shell.ctl, interval)
    if not findings:
        print(f"no fault found ({took:.1f} s)")
        return
    print(f"most likely: {findings[0]}  ({took:.1f} s)")
    for f in findings[1:5]:
        print(f"  also: {f}")


def _background(topo, controller, lock, say):
    """With a failover section: heartbeats on every link, and the
    controller routing around what they call dead (and back)."""
    cfg = topo.features.get(data_plane.SECTION)
    if cfg is None:
        return []
    say(f"failover on: heartbeats every {cfg.heartbeat_ms:g} ms on every switch link, "
        f"a port silent {cfg.timeout_ms:g} ms is dead")
    rerouter = Rerouter(controller, cfg.timeout_ms, lock, on_change=lambda m: say(f"\n[reroute] {m}"))
    return [heartbeat.running_heartbeats(topo, cfg.heartbeat_ms / 1000), in_background(rerouter.run)]


FEATURE = FeatureSpec(
    name="failover", section=data_plane.SECTION,
    summary="heartbeats, per-slot backups in the data plane, controller rerouting, fault diagnose",
    pieces=Pieces.of("failover", package=True, experiments=("failover_timeline", "failover_diagnosis")),
    parse_section=data_plane.parse_section, switch_state=data_plane.switch_state,
    bench_states=one_mode(data_plane.bench_state),
    background=_background,
    commands={"fault": Command(_fault_command, _fault_command.__doc__ or "")},
    cli={"diagnose": CliCommand("name the most likely faulty link or switch of a running network",
                                diagnose.add_arguments, diagnose.run_cli),
         "heartbeats": CliCommand("send heartbeats on every link of a running network",
                                  heartbeat.add_arguments, heartbeat.run_cli)})
