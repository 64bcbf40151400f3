"""The Prometheus alerting rules, as Python: every expression is written
from the metric definitions in telemetry/metrics.py (like the dashboards,
telemetry/dashboards.py), and this writes the rule file Prometheus loads,
telemetry/alerts.yml (`fabric generate` rewrites it; `--check` finds it
stale). telemetry/prometheus_config.py lists it under `rule_files:`.

    python -m telemetry.alerts              # rewrite telemetry/alerts.yml

tests/unit/telemetry/test_alerts.py runs `promtool check rules` on the file
and `promtool test rules` with a case where each rule fires and one where it
does not; docs/operations.md describes every rule.

Scale: the fabric is BMv2 switches forwarding hundreds to a few thousand
packets/s each, read by the switch exporter every second and scraped every
SCRAPE_INTERVAL (telemetry/prometheus_config.py). Thresholds are packets/s
or shares of a port's traffic at that scale, each a named constant below
with the reason for its value. Annotations name the switch, port, class or
reason from the alert's labels (`{{ $labels.NAME }}` only, so the tests can
render them exactly).
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import yaml

from emulator.network import BMV2_QUEUE_DEPTH
from features.failover.diagnose import LOSS_THRESHOLD
from telemetry import metrics as m
from telemetry import prometheus_config
from telemetry.dashboards import WINDOW, total
from telemetry.state import drop_reason_names

OUTPUT = prometheus_config.RULE_FILE
SEVERITIES = ("critical", "warning")     # critical: traffic is lost or unmanaged now; warning: degraded or soon
# Series Prometheus makes itself (not an exporter's): `up` per scrape target.
PROMETHEUS_SERIES = ("up",)

SCRAPE_INTERVAL = prometheus_config.DEFAULT_SCRAPE_INTERVAL   # 5s: the exporter reads every switch each 1 s

# -- windows and durations ---------------------------------------------------
# Rates over the dashboards' window (1m: 12 scrapes at 5 s), so an alert and the
# panel that shows it agree; one poll of BMv2's counters is never a rate.
RATE_WINDOW = WINDOW
# Prometheus cannot scrape an exporter for a minute (12 scrapes): every other
# rule fed by it is blind. `fabric monitor` restarts nothing by itself.
TARGET_DOWN_FOR = "1m"
# A switch unread for 30 s (30 polls, 6 scrapes): longer than a supervised
# restart (emulator/supervisor.py: BMv2 again, pipeline and entries pushed, a few s).
SWITCH_DOWN_FOR = "30s"
# Read errors on a switch that answers P4Runtime (a Thrift register read, a
# counter the pipeline lacks) for 2 minutes: not one slow poll.
READ_ERRORS_FOR = "2m"
# The controller not primary for 30 s: a controller restart reconnects within
# seconds (control/controller.py); past that, writes (reroutes, restores) are refused.
CONTROLLER_FOR = "30s"

# -- drops -------------------------------------------------------------------
# Drop reasons that are not losses: a PFC frame the switch acted on and consumed;
# a trimmed packet, forwarded as its header (drop_counter never counts it: kept out anyway).
NOT_LOSSES = ("pfc_frame", "trimmed")
# Reasons with a rule of their own, at any rate (lossless headroom drops).
OWN_RULE = ("lossless_headroom",)
# 5 drops/s: 1% of the ~500 packets/s a BMv2 switch forwards here. RoCE's
# go-back-N resends a window per loss, so a sustained 1% is a throughput loss.
DROP_RATE_PER_S = 5.0
# Sustained for a minute (on top of the 1m rate): a failover's drops (NO_ROUTE,
# NO_LIVE_MEMBER) last timeout_ms + heartbeat_ms (~120 ms), a controller
# reroute a few seconds; a minute of them is a blackhole, not a transition.
DROPS_FOR = "1m"
# Trend: the drop rate's slope over the last 15 minutes (one point a minute),
# extrapolated 15 minutes ahead, crosses DROP_RATE_PER_S while the rate is still
# below it; held 5 minutes so one burst's slope does not fire it.
TREND_RANGE, TREND_STEP = "15m", "1m"
TREND_HORIZON_S = 15 * 60
TREND_FOR = "5m"
# Frames the kernel delivered to a port's interface that BMv2 never counted in
# (its input path behind: an incast, a busy machine): as lost as a drop, so the
# same budget.
INPUT_LOSS_PPS = DROP_RATE_PER_S
INPUT_LOSS_FOR = "1m"
# A link direction losing 1% of what it carries: twice `fault diagnose`'s
# healthy share (features/failover/diagnose.py, judged on 2 s windows, where
# packets in flight between two reads count as lost); over a 1m rate in-flight
# packets are a few out of thousands.
LINK_LOSS_SHARE = 2 * LOSS_THRESHOLD
# ...of a direction that carries at least 10 packets/s (600 a window): less says
# nothing (one loss in 60 is 1.7%); failover's heartbeats alone carry 50/s (every 20 ms).
LINK_MIN_PPS = 10.0
LINK_LOSS_FOR = "1m"

# -- congestion --------------------------------------------------------------
# 3/4 of BMv2's default egress queue (64 packets): a packet arriving there
# waits 48 packet times, and the queue has 16 left before tail drops.
QUEUE_DEPTH_HIGH = BMV2_QUEUE_DEPTH * 3 // 4
# High at every evaluation for a minute: fabric_queue_depth_packets is the depth
# the queue's last packet met, one sample per scrape, so a burst is one high
# sample; a queue no packet left since the previous read has no sample, so an
# idle queue is never high.
QUEUE_FOR = "1m"
# Half of a port's packets marked CE, for 5 minutes: DCQCN senders should have
# cut their rates to the point where few are marked; this many means they do not
# (traffic that is not ECN-capable, or a queue ECN cannot drain).
ECN_MARK_SHARE = 0.5
ECN_FOR = "5m"

# -- lossless classes ----------------------------------------------------------
# A storm is a class stalled, not congested: an incast at 2.5x its port's rate
# (docs/features/lossless.md's experiment) keeps its senders paused ~60% of the
# time; 90% of two minutes is a peer that (almost) never resumes.
PFC_STORM_PAUSED_SHARE = 0.9
PFC_WINDOW = "2m"          # the paused time is booked when the cell's next PFC frame arrives: a wider window
PFC_STORM_FOR = "1m"
# Lossless drops at any count: the class's contract is no loss at all.
LOSSLESS_DROPS_FOR = "0s"
WATCHDOG_FOR = "0s"        # the data plane's watchdog already waited detect_ms (200 ms)

# -- INT -----------------------------------------------------------------------
# 1% of a report stream's sequence numbers lost over 5 minutes: reports are
# sparse (sampled flows, rate-limited drop and congestion reports), so a 5m
# window; lost reports are events the collector never sees.
INT_LOSS_WINDOW = "5m"
INT_LOSS_SHARE = 0.01
INT_LOSS_FOR = "1m"


@dataclass(frozen=True)
class Rule:
    alert: str
    expr: str
    for_: str
    severity: str
    summary: str          # templates: `{{ $labels.NAME }}` and plain text
    description: str

    def model(self) -> dict:
        return {"alert": self.alert, "expr": self.expr, "for": self.for_, "labels": {"severity": self.severity},
                "annotations": {"summary": self.summary, "description": self.description}}


@dataclass(frozen=True)
class Group:
    name: str
    rules: tuple[Rule, ...]

    def model(self) -> dict:
        return {"name": self.name, "rules": [r.model() for r in self.rules]}


def label(name: str) -> str:
    """An annotation's reference to the alert's label `name`."""
    return "{{ $labels.%s }}" % name


SW, PORT, PEER, QUEUE, CLASS, REASON = (label(n) for n in ("switch", "port", "peer", "queue", "port_class", "reason"))


def labels(spec: m.MetricSpec, *names: str) -> str:
    """`names` as a PromQL label list, each a label of `spec`."""
    unknown = [n for n in names if n not in spec.labels]
    if unknown:
        raise ValueError(f"{spec.name} has no label {unknown} (its labels: {spec.labels})")
    return ", ".join(names)


def reasons(*names: str) -> str:
    """Drop reasons as a regex alternative, each one p4src/include/defines.p4 defines."""
    known = set(drop_reason_names().values())
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(f"no drop reason {unknown} in p4src/include/defines.p4 (known: {sorted(known)})")
    return "|".join(names)


def rate(spec: m.MetricSpec, window: str = RATE_WINDOW, matchers: str = "") -> str:
    return f"rate({total(spec)}{matchers}[{window}])"


def groups() -> list[Group]:
    f = m.FEATURE_METRICS
    port = labels(m.FABRIC_PORT_TX_PACKETS, *m.PORT)
    loss_reasons = f'{{reason!~"{reasons(*NOT_LOSSES, *OWN_RULE)}"}}'
    drop_rate = f"sum by ({labels(m.FABRIC_DROPS, 'switch', 'reason')}) ({rate(m.FABRIC_DROPS, matchers=loss_reasons)})"
    tx = rate(m.FABRIC_PORT_TX_PACKETS)

    switches = Group("fabric-switches", (
        Rule("ScrapeTargetDown", f"{PROMETHEUS_SERIES[0]} == 0", TARGET_DOWN_FOR, "critical",
             f"Prometheus cannot scrape {label('job')} at {label('instance')}",
             "The scrape of this target has failed for " + TARGET_DOWN_FOR + ": the rules fed by its metrics "
             "(the switch exporter's fabric_*, the collector's int_*) see nothing and cannot fire."),
        Rule("SwitchDown", f"{m.FABRIC_SWITCH_UP.name} == 0", SWITCH_DOWN_FOR, "critical",
             f"The exporter cannot read switch {SW}",
             f"{SW} has not answered the switch exporter's P4Runtime reads for {SWITCH_DOWN_FOR}: the switch or "
             "its gRPC server is down (a supervised restart takes seconds). Its counters are missing meanwhile."),
        Rule("ExporterReadErrors",
             f"sum by ({labels(m.FABRIC_READ_ERRORS, 'switch', 'source')}) ({rate(m.FABRIC_READ_ERRORS)}) > 0 "
             f"unless on ({labels(m.FABRIC_SWITCH_UP, 'switch')}) {m.FABRIC_SWITCH_UP.name} == 0",
             READ_ERRORS_FOR, "warning",
             f"Reads of {SW} over {label('source')} keep failing",
             f"The switch exporter's {label('source')} reads of {SW} have failed for {READ_ERRORS_FOR} while the "
             "switch answers P4Runtime: a Thrift register read (queue depths, lossless registers) or a counter "
             "the pipeline lacks. Those metrics are missing."),
        Rule("ControllerNotPrimary", f"{m.FABRIC_CONTROLLER_PRIMARY.name} == 0", CONTROLLER_FOR, "critical",
             f"The fabric controller is not primary on {SW}",
             f"{SW}'s primary P4Runtime client has not had the controller's election id for {CONTROLLER_FOR}: "
             "another client took over, and the controller's writes (reroutes, restores, feature changes) to "
             f"{SW} are refused."),
    ))

    drops = Group("fabric-drops", (
        Rule("SwitchDropsHigh", f"{drop_rate} > {DROP_RATE_PER_S:g}", DROPS_FOR, "warning",
             f"{SW} drops {REASON} packets",
             f"{SW} has dropped more than {DROP_RATE_PER_S:g} packets/s (a rate over {RATE_WINDOW}) for reason "
             f"{REASON}, for {DROPS_FOR}. Consumed PFC frames and trims are not counted; lossless headroom drops have their "
             "own alert. `fabric diagnose` names the most likely faulty link or switch."),
        Rule("SwitchDropRateRising",
             f"predict_linear(({drop_rate})[{TREND_RANGE}:{TREND_STEP}], {TREND_HORIZON_S}) > {DROP_RATE_PER_S:g} "
             f"and {drop_rate} > 0 and {drop_rate} <= {DROP_RATE_PER_S:g}",
             TREND_FOR, "warning",
             f"{SW}'s {REASON} drops are rising towards {DROP_RATE_PER_S:g}/s",
             f"The rate of {REASON} drops at {SW}, extrapolated from its last {TREND_RANGE}, crosses "
             f"{DROP_RATE_PER_S:g} packets/s within {TREND_HORIZON_S // 60} minutes (SwitchDropsHigh's "
             "threshold); it is still below it."),
        Rule("InputPathLoss",
             f"{rate(m.FABRIC_PORT_INTERFACE_RX_PACKETS)} - on ({port}) {rate(m.FABRIC_PORT_RX_PACKETS)} "
             f"> {INPUT_LOSS_PPS:g}",
             INPUT_LOSS_FOR, "warning",
             f"{SW} port {PORT} loses frames before its pipeline",
             f"Frames reach {SW} port {PORT}'s interface (from {PEER}) more than {INPUT_LOSS_PPS:g}/s faster than "
             "BMv2's ingress counts them: its input path is behind (an incast, a busy machine) and loses "
             "frames no P4 counter, drop counter or buffer model sees."),
        Rule("LinkFramesLost",
             f"({tx} - {rate(m.FABRIC_PORT_PEER_RX_PACKETS)}) / {tx} > {LINK_LOSS_SHARE:g} and {tx} > {LINK_MIN_PPS:g}",
             LINK_LOSS_FOR, "critical",
             f"Link {SW} port {PORT} -> {PEER} loses frames",
             f"More than {LINK_LOSS_SHARE:.0%} of the frames {SW} sends out of port {PORT} never reach {PEER}'s "
             "interface: a lossy or dead link (with failover on, its heartbeats are lost too, and the "
             "data plane fails over to backups). Needs the receiver's interface counters (a switch on the "
             "exporter's machine)."),
    ))

    congestion = Group("fabric-congestion", (
        Rule("PortQueueCongested",
             f"{m.FABRIC_QUEUE_DEPTH.name} > {QUEUE_DEPTH_HIGH}",
             QUEUE_FOR, "warning",
             f"{SW} port {PORT} (to {PEER}) queue {QUEUE}: above {QUEUE_DEPTH_HIGH} packets",
             f"Egress queue {QUEUE} of {SW} port {PORT} (to {PEER}) has been deeper than {QUEUE_DEPTH_HIGH} "
             f"packets (of BMv2's {BMV2_QUEUE_DEPTH}) at every scrape for {QUEUE_FOR}: persistent "
             "congestion, latency and soon tail drops."),
        Rule("PortEcnMarkingHigh",
             f"{rate(f['fabric_ecn_marked'])} / on ({port}) {tx} > {ECN_MARK_SHARE:g}",
             ECN_FOR, "warning",
             f"{SW} port {PORT} (to {PEER}) marks most packets CE",
             f"More than {ECN_MARK_SHARE:.0%} of the packets {SW} sends out of port {PORT} have been ECN-marked "
             f"for {ECN_FOR}: the senders are not slowing down enough (not ECN-capable, or DCQCN misconfigured)."),
    ))

    pfc_class = f"{SW} port/class {CLASS}"
    detected, restored = total(f["fabric_pfc_storms_detected"]), total(f["fabric_pfc_storms_restored"])
    lossless = Group("fabric-lossless", (
        Rule("PfcStorm",
             f"{rate(f['fabric_pfc_paused_seconds'], PFC_WINDOW)} > {PFC_STORM_PAUSED_SHARE:g}",
             PFC_STORM_FOR, "critical",
             f"PFC storm: {pfc_class} is paused most of the time",
             f"The peer of {pfc_class} has kept it paused more than {PFC_STORM_PAUSED_SHARE:.0%} of the time over "
             f"{PFC_WINDOW}, for {PFC_STORM_FOR}: the class is stalled there, and the pauses spread upstream "
             "(a stuck receiver, or a PFC deadlock)."),
        Rule("PfcWatchdogStormActive",
             f"{detected} > ({restored} or {detected} * 0)",
             WATCHDOG_FOR, "critical",
             f"PFC watchdog: storm on {pfc_class}",
             f"The data plane's PFC watchdog declared a storm on {pfc_class} (paused with nothing sent for "
             "detect_ms) and has not restored it: it is dropping, forwarding or only counting the class there, "
             "as its action says."),
        Rule("PfcWatchdogDrops",
             f"increase({total(f['fabric_pfc_storm_dropped'])}[{RATE_WINDOW}]) > 0",
             LOSSLESS_DROPS_FOR, "critical",
             f"PFC watchdog drops lossless packets on {pfc_class}",
             f"The PFC watchdog (action drop) dropped packets of the lossless class at {pfc_class} in the last "
             f"{RATE_WINDOW}: the storm there costs the class its no-loss contract."),
        Rule("LosslessHeadroomDrops",
             f"increase({total(f['fabric_pfc_headroom_dropped'])}[{RATE_WINDOW}]) > 0",
             LOSSLESS_DROPS_FOR, "critical",
             f"{pfc_class} drops lossless packets (headroom exceeded)",
             f"Lossless packets arriving at {pfc_class} were dropped beyond XOFF + headroom in the last "
             f"{RATE_WINDOW}: that cell's headroom is smaller than what its upstream had in flight after the "
             "pause (or the pause came late)."),
    ))

    stream = labels(m.INT_REPORT_LOST, *m.STREAM)
    int_reports = Group("int-telemetry", (
        Rule("IntReportLoss",
             f"delta({m.INT_REPORT_LOST.name}[{INT_LOSS_WINDOW}]) / on ({stream}) "
             f"increase({total(m.INT_REPORT_PACKETS)}[{INT_LOSS_WINDOW}]) > {INT_LOSS_SHARE:g}",
             INT_LOSS_FOR, "warning",
             f"INT reports of {SW} (hw_id {label('hw_id')}) are being lost",
             f"More than {INT_LOSS_SHARE:.0%} of the report sequence numbers of {SW}'s stream (hw_id "
             f"{label('hw_id')}) went missing over {INT_LOSS_WINDOW}: the collector misses the drops, congestion "
             "and flows they report (reports lost on the way, or the collector behind)."),
    ))
    return [switches, drops, congestion, lossless, int_reports]


def rules() -> list[Rule]:
    return [r for g in groups() for r in g.rules]


def render(gs: Optional[list[Group]] = None) -> str:
    body = yaml.safe_dump({"groups": [g.model() for g in (groups() if gs is None else gs)]}, sort_keys=False,
                          width=1 << 16, allow_unicode=True)
    return ("# Generated by telemetry/alerts.py (`fabric generate`); edit that, not this file.\n"
            "# Prometheus alerting rules of p4-ai-fabric: docs/operations.md describes each.\n" + body)


def write(path: Path = OUTPUT) -> Path:
    path.write_text(render())
    return path


def main(argv: Optional[list[str]] = None) -> int:
    print(f"alerts: wrote {write()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
