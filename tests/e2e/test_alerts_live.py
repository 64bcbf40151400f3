"""The alerting rules on a live fabric, through the real chain: BMv2
switches, the switch exporter, Prometheus with telemetry/alerts.yml,
Debian's Alertmanager, the project's receiver (docs/operations.md).

Dumbbell (h1, h2 on s1; h3, h4 on s2; one s1-s2 link), class 3 lossless
with the PFC watchdog (detect 200 ms, drop), traffic h1 -> h3 throughout.
Healthy for 26 s, the fabric holds no rule pending, let alone firing, though a
second flow (h2 -> h4, over the s1 -> s2 link) starts and stops twice in
it: the link and input-path rules compare counters of one instant, so a
traffic change makes none of them true, and a rule that is never pending
never fires, whatever its `for`. Then, together: a client with a higher
election id takes s2 (ControllerNotPrimary: for 30s), s1's port to s2 is
black-holed (LinkFramesLost: for 1m), s1's port to h1 is saturated (h2
offers 400 packets/s to a queue served at 250; PortQueueCongested: for 1m,
from the queue depth the fabric records with every feature but lossless
off), and h4's NIC is stuck pausing class 3 while h3 sends to it in that
class, within s2 (PfcWatchdogStormActive: for 0s). Each must reach the
receiver within its `for` plus SLACK_S: the rule's window filling, a
scrape and an evaluation a second apart, Alertmanager's group_wait (2 s)."""
from __future__ import annotations

import subprocess
import time
from dataclasses import replace
from pathlib import Path

import pytest

from emulator.bmv2_thrift import Bmv2Thrift
from emulator.build import compile_p4
from control.controller import FabricController
from emulator.impairments import blackhole
from emulator.network import Network
from control.switch import CONTROLLER_ELECTION_ID, SwitchConnection
from experiments.common import agent_python, roce_agent
from experiments.lossless import DSCP, TCLASS, dumbbell_without_delay, section
from features.lossless import Watchdog
from telemetry import prometheus_config
from telemetry.alert_receiver import AlertReceiver
from telemetry.alertmanager import AlertmanagerProcess, write_config
from telemetry.prometheus import PrometheusProcess
from telemetry.switch_exporter import Bmv2Reader, SwitchExporter

REPO = Path(__file__).resolve().parents[2]
ON_OFF_S = ((3, 8), (11, 16))    # h2 -> h4 in the healthy phase: on and off twice (s after the traffic starts)
HEALTHY_S = 26              # the healthy phase: 10 s after the last change, a rule it made true would be pending
SLACK_S = 25                # beyond a rule's `for`: its rate window filling, scrape, evaluation, group_wait
TRAFFIC_PPS = 100           # h1 -> h3: above LinkFramesLost's 10 packets/s floor, far below the 833 of s1 -> s2
ON_OFF_PPS = 300            # h2 -> h4 while on (400 of s1 -> s2's 833 with h1's)
SATURATED_PPS, OFFERED_PPS = 250, 400    # s1's port to h1 served at 250 packets/s, offered 400 by h2


def fired(receiver: AlertReceiver, name: str, since: float) -> list:
    return [a for a in receiver.store.alerts(firing_only=False)
            if a.name == name and a.status == "firing" and a.received_at >= since]


def wait_for_alert(receiver: AlertReceiver, name: str, since: float, within_s: float) -> float:
    """Seconds from `since` until `name` reached the receiver firing; fails after within_s."""
    deadline = since + within_s
    while time.time() < deadline:
        got = fired(receiver, name, since)
        if got:
            return min(a.received_at for a in got) - since
        time.sleep(0.5)
    every = [(a.name, a.status, a.labels.get("switch")) for a in receiver.store.alerts(firing_only=False)]
    pytest.fail(f"{name} did not reach the receiver within {within_s:.0f} s; received: {every}")


@pytest.fixture
def live(tmp_path):
    compile_p4()
    topo = dumbbell_without_delay()
    topo.features["lossless"] = section(True)
    with Network(topo, tmp_path / "net", log_level="warn") as net, FabricController(topo) as ctl:
        ctl.program()
        net.apply_queue_rates()
        ctl.feature("lossless").apply(replace(section(True), watchdog=Watchdog(detect_ms=200, restore_ms=400,
                                                                                  action="drop")))
        with AlertReceiver(port=0, log=tmp_path / "alerts.jsonl") as receiver:
            am = AlertmanagerProcess(write_config(tmp_path / "alertmanager.yml", receiver.webhook_url),
                                     tmp_path / "am-data", log=tmp_path / "alertmanager.log").start()
            exporter = SwitchExporter(topo, Bmv2Reader(REPO / "build" / "main.p4info.txtpb"), interval=0.5).start(port=0)
            prom = None
            try:
                config = prometheus_config.write(tmp_path / "prometheus.yml",
                                                 {"switch-exporter": [exporter.server.target]},
                                                 scrape_interval="1s", alertmanagers=[am.target])
                prom = PrometheusProcess(config, tmp_path / "tsdb", log=tmp_path / "prometheus.log").start()
                prom.wait_targets_up({"switch-exporter"}, timeout=60)
                yield net, ctl, topo, receiver, prom, tmp_path
            finally:
                if prom is not None:
                    prom.stop()
                exporter.stop()
                am.stop()


def test_faults_fire_their_alerts_and_a_healthy_fabric_none(live):
    net, ctl, topo, receiver, prom, tmp = live
    h1, h2, h3, h4 = (topo.hosts[h] for h in ("h1", "h2", "h3", "h4"))
    start_at = time.time() + 3.0
    duration = HEALTHY_S + 60 + SLACK_S + 30
    traffic = [roce_agent(h3, "receive", start_at=start_at, out_dir=tmp, extra=["--duration", str(duration + 2)]),
               roce_agent(h1, "send", start_at=start_at, out_dir=tmp, extra=[
                   "--duration", str(duration), "--dst-ip", h3.ip, "--qp", "1", "--line-rate-pps", str(TRAFFIC_PPS),
                   "--fixed-rate", "--not-ect"])]
    # Two starts and two stops in the healthy phase, on the link LinkFramesLost watches
    on_off = [roce_agent(h4, "receive", start_at=start_at, out_dir=tmp, extra=["--duration", str(HEALTHY_S - 5)])]
    on_off += [roce_agent(h2, "send", start_at=start_at + on_s, out_dir=tmp / f"on-{on_s}", extra=[
        "--duration", str(off_s - on_s), "--dst-ip", h4.ip, "--qp", str(3 + i), "--line-rate-pps", str(ON_OFF_PPS),
        "--fixed-rate", "--not-ect"]) for i, (on_s, off_s) in enumerate(ON_OFF_S)]
    traffic += on_off
    try:
        time.sleep(max(0.0, start_at - time.time()) + HEALTHY_S)
        # every rule evaluated each second of the phase: any series of ALERTS in it was a rule pending or firing
        window_s = int(time.time() - start_at) + 1
        held = prom.query(f"count_over_time(ALERTS[{window_s}s])")
        assert receiver.store.notifications == 0 and not held, (
            f"a healthy fabric held a rule pending or fired: "
            f"{[a.line() for a in receiver.store.alerts(firing_only=False)]} {[r['metric'] for r in held]}")

        # s2's controller demoted, s1 -> s2 black-holed, s1's port to h1 saturated and a storm on s2, together:
        # faults of the control plane and of the data plane, each with its own alert, in one minute
        since = time.time()
        s2 = topo.switches["s2"]
        (s1_to_s2,) = [p for p in topo.switches["s1"].ports.values() if p.peer == "s2"]
        usurper = SwitchConnection("s2", s2.grpc_addr, s2.device_id, election_id=(CONTROLLER_ELECTION_ID[0] + 1, 0))
        undo = blackhole(s1_to_s2.iface)
        (s1_to_h1,) = [n for n, p in topo.switches["s1"].ports.items() if p.peer == "h1"]
        with Bmv2Thrift(topo.switches["s1"].thrift_port) as thrift:
            thrift.set_queue_rate(s1_to_h1, SATURATED_PPS)
        flood_at = time.time() + 3.0
        flood = [roce_agent(h1, "receive", start_at=flood_at, out_dir=tmp / "flood", extra=["--duration", "92"]),
                 roce_agent(h2, "send", start_at=flood_at, out_dir=tmp / "flood", extra=[
                     "--duration", "90", "--dst-ip", h1.ip, "--qp", "5", "--line-rate-pps", str(OFFERED_PPS),
                     "--fixed-rate", "--not-ect"])]
        # h3 -> h4 in the lossless class, both on s2 (clear of the black hole), h4 pausing it from 2 s on
        storm_at = flood_at
        flood += [roce_agent(h4, "receive", start_at=storm_at, out_dir=tmp / "storm", extra=["--duration", "32"]),
                  roce_agent(h3, "send", start_at=storm_at, out_dir=tmp / "storm", extra=[
                      "--duration", "30", "--dst-ip", h4.ip, "--qp", "2", "--line-rate-pps", "300", "--fixed-rate",
                      "--not-ect", "--dscp", str(DSCP), "--tclass", str(TCLASS), "--link-mbps", "100"]),
                  subprocess.Popen(["ip", "netns", "exec", h4.name, agent_python(), "-m", "hostagent.lossless",
                                    "pause", "--iface", h4.iface, "--src-mac", h4.mac, "--tclass", str(TCLASS),
                                    "--every-ms", "100", "--duration", "25", "--start-at", str(storm_at + 2.0)],
                                   cwd=REPO, stdout=subprocess.DEVNULL)]
        try:
            took = wait_for_alert(receiver, "PfcWatchdogStormActive", storm_at, 2 + 5 + SLACK_S)
            got = fired(receiver, "PfcWatchdogStormActive", since)
            assert {a.labels["switch"] for a in got} == {"s2"}, [a.line() for a in got]
            print(f"PfcWatchdogStormActive reached the receiver {took:.1f} s after the storm's agents started "
                  f"(h4's pauses 2 s in)")
            took = wait_for_alert(receiver, "ControllerNotPrimary", since, 30 + SLACK_S)
            assert {a.labels["switch"] for a in fired(receiver, "ControllerNotPrimary", since)} == {"s2"}
            print(f"ControllerNotPrimary reached the receiver {took:.1f} s after s2's demotion")
            took = wait_for_alert(receiver, "LinkFramesLost", since, 60 + SLACK_S)
            assert {(a.labels["switch"], a.labels["peer"]) for a in fired(receiver, "LinkFramesLost", since)} \
                == {("s1", "s2")}
            print(f"LinkFramesLost reached the receiver {took:.1f} s after s1 -> s2 was black-holed")
            took = wait_for_alert(receiver, "PortQueueCongested", flood_at, 60 + SLACK_S)
            assert {(a.labels["switch"], a.labels["peer"], a.labels["queue"])
                    for a in fired(receiver, "PortQueueCongested", since)} == {("s1", "h1", "0")}
            print(f"PortQueueCongested reached the receiver {took:.1f} s after h2 began offering {OFFERED_PPS} "
                  f"packets/s to s1's port to h1 (served at {SATURATED_PPS})")
        finally:
            for p in flood:
                p.terminate()
                p.wait(timeout=15)
            net.apply_queue_rates()
            undo()
            usurper.close()
    finally:
        for p in traffic:
            p.terminate()
            p.wait(timeout=15)
    net.check_alive()
