"""What the collector knows, built from decoded reports: per report stream
sequence accounting, per flow path / latency / queues, drops with reasons,
congestion events, HPCC tx rates; mirrored into Prometheus metrics.

Which report updates what:
- every accepted report packet: its stream (node id, hw id) sequence stats.
  A duplicate packet is counted and otherwise ignored.
- an individual report with F=1, D=0, I=0 and an INT stack in its inner
  packet (the sink's report of a tracked flow): the flow's path (hops
  source first; the sink appended from the report's own metadata unless it
  pushed itself on the stack), per-hop latency and queue occupancy, the
  end-to-end latency (sink egress timestamp - source ingress timestamp, when
  both are there), and the per-node metrics of every hop on it.
- D=1: a drop, by node and reason (RepMdBits bit 15); Q=1: a congestion
  event, by node and queue id, with its occupancy. A D=1 report whose reason
  is "trimmed" (NOT_DROPS) is a trim: the packet was cut to its headers and
  forwarded. It is counted by node as a trim (kind "trim", int_drop_reports
  with reason="trimmed"), never as a drop (drops, a flow's drops).

Given change settings (telemetry/changes.py), a tracked flow's report that
is neither a drop nor a congestion report is marked sent (Outcome.sent)
only when its path, a hop's queue or latency bucket, or whether the packet
was ECN-marked changed since the flow's last sent report, or the refresh
period passed; the others are
counted as kept back. Metrics are updated from every report either way.

Timestamps and hop latency are in `time_unit_ns` units (BMv2: microseconds).
End-to-end latency compares two switches' clocks: it means something only
when the nodes share a time base.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Any, Optional

from prometheus_client import CollectorRegistry

from wire.ecn import CE
from wire.int_telemetry import TIMESTAMP_UNIT_NS, HopMetadata
from telemetry import metrics as m
from telemetry.changes import ChangeFilter, ChangeSettings
from telemetry.decode import IndividualReport, ReportPacket
from telemetry.sequence import DEFAULT_WINDOW, StreamTable
from control.p4constants import drop_reasons

TX_COUNTER_MODULUS = 1 << 32
# Reasons a drop report may carry that are not drops: a packet cut to its
# headers by trimming (DROP_TRIMMED), its header forwarded.
NOT_DROPS = ("trimmed",)


def drop_reason_names() -> dict[int, str]:
    """Drop reason codes -> names, from p4src/include/defines.p4 (DROP_*),
    the codes the data plane reports; {} when the file cannot be read."""
    try:
        return {code: name.lower() for name, code in drop_reasons().items()}
    except (ImportError, OSError):
        return {}


@dataclass(frozen=True)
class PathHop:
    node_id: Optional[int]
    ingress_port: Optional[int]
    egress_port: Optional[int]

    def label(self, names: dict[int, str]) -> str:
        node = "?" if self.node_id is None else names.get(self.node_id, str(self.node_id))
        port = lambda p: "?" if p is None else str(p)  # noqa: E731
        return f"{node}[{port(self.ingress_port)}>{port(self.egress_port)}]"


@dataclass
class LatencyStats:
    count: int = 0
    last: float = 0.0
    min: float = float("inf")
    max: float = 0.0
    total: float = 0.0

    def add(self, value: float) -> None:
        self.count += 1
        self.last = value
        self.min = min(self.min, value)
        self.max = max(self.max, value)
        self.total += value

    def as_dict(self) -> dict[str, float]:
        if not self.count:
            return {"count": 0}
        return {"count": self.count, "last": self.last, "min": self.min, "max": self.max,
                "mean": self.total / self.count}


@dataclass
class FlowState:
    flow: str
    reports: int = 0
    drops: int = 0
    kept_back: int = 0                                                   # reports not sent: nothing changed
    path: tuple[PathHop, ...] = ()
    path_changes: int = 0
    e2e: LatencyStats = field(default_factory=LatencyStats)
    hop_latency: dict[int, LatencyStats] = field(default_factory=dict)   # hop index -> seconds
    hop_queue: dict[int, int] = field(default_factory=dict)              # hop index -> last occupancy
    hop_labels: set[tuple[str, ...]] = field(default_factory=set)        # per-hop metric labels in use


@dataclass
class Outcome:
    """What one individual report contributed (a CSV row)."""
    kinds: list[str]
    flow: str = ""
    path: str = ""
    hops: int = 0
    e2e_latency_s: Optional[float] = None
    hop_latencies_s: list[Optional[float]] = field(default_factory=list)
    queue_occupancies: list[Optional[int]] = field(default_factory=list)
    drop_reason: str = ""
    congestion_queue: Optional[int] = None
    congestion_occupancy: Optional[int] = None
    sent: bool = True        # False: a tracked flow's report with nothing changed (kept back from the CSV)


class TelemetryState:
    def __init__(self, registry: Optional[CollectorRegistry] = None, *, node_names: Optional[dict[int, str]] = None,
                 time_unit_ns: int = TIMESTAMP_UNIT_NS, window: int = DEFAULT_WINDOW, max_flows: int = 10000,
                 changes: Optional[ChangeSettings] = None):
        self.registry = registry if registry is not None else CollectorRegistry()
        self.metric = {spec.name: m.make_metric(spec, self.registry) for spec in m.COLLECTOR_METRICS}
        self.names = dict(node_names or {})
        self.unit_s = time_unit_ns / 1e9
        self.streams = StreamTable(window)
        self.flows: dict[str, FlowState] = {}
        self.max_flows = max_flows
        self.untracked_flow_reports = 0
        self.reasons = drop_reason_names()
        self.packets = 0
        self.malformed: dict[str, int] = {}
        self.drops: dict[tuple[int, str], int] = {}
        self.trims: dict[int, int] = {}       # node -> trim reports (a D=1 report of reason "trimmed")
        self.congestion: dict[tuple[int, int], dict[str, int]] = {}
        self.tx_rate: dict[tuple[int, int], float] = {}
        self._tx_last: dict[tuple[int, int], tuple[int, int]] = {}
        # None: every report is sent; else only changes (telemetry/changes.py).
        self.changes = None if changes is None else ChangeFilter(changes, time_unit_ns=time_unit_ns,
                                                                 max_flows=max_flows)
        self.sent = 0            # individual reports sent (reports.csv rows, change listeners)
        self.kept_back = 0       # tracked-flow reports with nothing changed
        self.started = time.time()

    # -- labels ---------------------------------------------------------------

    def switch(self, node_id: Optional[int]) -> str:
        if node_id is None:
            return "?"
        return self.names.get(node_id, f"node{node_id}")

    def _node(self, node_id: Optional[int]) -> tuple[str, str]:
        return ("?" if node_id is None else str(node_id)), self.switch(node_id)

    def reason_name(self, code: Optional[int]) -> str:
        if code is None:
            return "unknown"
        return self.reasons.get(code, f"reason_{code}")

    # -- input ----------------------------------------------------------------

    def malformed_datagram(self, reason: str) -> None:
        self.malformed[reason] = self.malformed.get(reason, 0) + 1
        self.metric[m.INT_REPORT_MALFORMED.name].labels(reason).inc()

    def handle(self, pkt: ReportPacket, now: Optional[float] = None) -> tuple[str, list[Outcome]]:
        """Account one decoded report packet received at `now` (default:
        the current time); returns the stream verdict and one Outcome per
        individual report (none for a duplicate)."""
        now = time.time() if now is None else now
        self.packets += 1
        verdict = self.streams.observe(pkt.node_id, pkt.hw_id, pkt.seq_no)
        stream = (*self._node(pkt.node_id), str(pkt.hw_id))
        self.metric[m.INT_REPORT_PACKETS.name].labels(*stream).inc()
        stats = self.streams.trackers[(pkt.node_id, pkt.hw_id)].stats
        self.metric[m.INT_REPORT_LOST.name].labels(*stream).set(stats.lost)
        for name, when in ((m.INT_REPORT_REORDERED.name, "reordered"), (m.INT_REPORT_DUPLICATES.name, "duplicate"),
                           (m.INT_REPORT_RESETS.name, "reset")):
            counter = self.metric[name].labels(*stream)
            counter.inc(1 if verdict == when else 0)   # creates the series at 0, so dashboards see it
        if verdict == "duplicate":
            return verdict, []
        return verdict, [self._individual(pkt, r, now) for r in pkt.reports]

    def _individual(self, pkt: ReportPacket, r: IndividualReport, now: float) -> Outcome:
        node = self._node(pkt.node_id)
        meta = r.metadata or HopMetadata()
        reason = self.reason_name(meta.drop_reason) if r.d else ""
        trim = reason in NOT_DROPS
        kinds = [k for k, flag in (("tracked_flow", r.f), ("trim" if trim else "drop", r.d), ("congestion", r.q),
                                   ("intermediate", r.i)) if flag] or ["other"]
        for kind in kinds:
            self.metric[m.INT_REPORTS.name].labels(*node, kind).inc()
        out = Outcome(kinds, flow=r.inner.flow if r.inner else "", drop_reason=reason)
        flow = self._flow(out.flow) if out.flow else None
        if r.d:
            self.metric[m.INT_DROP_REPORTS.name].labels(*node, reason).inc()
            if trim:
                self.trims[pkt.node_id] = self.trims.get(pkt.node_id, 0) + 1
            else:
                key = (pkt.node_id, reason)
                self.drops[key] = self.drops.get(key, 0) + 1
                if flow is not None:
                    flow.drops += 1
        if r.q:
            queue = meta.queue_id if meta.queue_id is not None else meta.drop_queue_id
            out.congestion_queue, out.congestion_occupancy = queue, meta.queue_occupancy
            qlabel = "?" if queue is None else str(queue)
            entry = self.congestion.setdefault((pkt.node_id, -1 if queue is None else queue),
                                               {"events": 0, "last_occupancy": -1})
            entry["events"] += 1
            self.metric[m.INT_CONGESTION_REPORTS.name].labels(*node, qlabel).inc()
            if meta.queue_occupancy is not None:
                entry["last_occupancy"] = meta.queue_occupancy
                self.metric[m.INT_CONGESTION_QUEUE.name].labels(*node, qlabel).set(meta.queue_occupancy)
        stack = r.inner.int_stack if r.inner else None
        if r.f and not r.d and not r.i and stack is not None:
            hops = self._path(pkt, meta, stack.hops, flow, out)
            if self.changes is not None and out.kinds == ["tracked_flow"] and out.flow:
                marked = r.inner is not None and r.inner.ecn == CE
                out.sent = self.changes.offer(out.flow, self.changes.signature(hops), now, marked)
                # Counted per reporting switch; a sent report creates the series at 0, so dashboards see it.
                self.metric[m.INT_REPORTS_UNCHANGED.name].labels(*node).inc(0 if out.sent else 1)
        if out.sent:
            self.sent += 1
        else:
            self.kept_back += 1
            if flow is not None:
                flow.kept_back += 1
        return out

    def _flow(self, key: str) -> Optional[FlowState]:
        flow = self.flows.get(key)
        if flow is None:
            if len(self.flows) >= self.max_flows:
                self.untracked_flow_reports += 1
                return None
            flow = self.flows[key] = FlowState(key)
        return flow

    def _path(self, pkt: ReportPacket, sink_meta: HopMetadata, stack: list[HopMetadata],
              flow: Optional[FlowState], out: Outcome) -> list[HopMetadata]:
        """The flow's path and per-hop values into `out` and the metrics;
        returns the hops, source first."""
        hops = list(reversed(stack))                        # source first
        if not hops or hops[-1].node_id != pkt.node_id:     # the sink reported its own metadata in the report
            hops.append(replace(sink_meta, node_id=pkt.node_id))
        path = tuple(PathHop(h.node_id, h.ingress_port, h.egress_port) for h in hops)
        out.path = " ".join(p.label(self.names) for p in path)
        out.hops = len(path)
        src_ts, sink_ts = hops[0].ingress_ts, hops[-1].egress_ts
        if src_ts is not None and sink_ts is not None and sink_ts >= src_ts:
            out.e2e_latency_s = (sink_ts - src_ts) * self.unit_s
        out.hop_latencies_s = [None if h.hop_latency is None else h.hop_latency * self.unit_s for h in hops]
        out.queue_occupancies = [h.queue_occupancy for h in hops]
        for h, latency in zip(hops, out.hop_latencies_s):
            node = self._node(h.node_id)
            if latency is not None:
                self.metric[m.INT_HOP_LATENCY.name].labels(*node).observe(latency)
            if h.queue_occupancy is not None:
                self.metric[m.INT_QUEUE_OCCUPANCY.name].labels(
                    *node, "?" if h.egress_port is None else str(h.egress_port),
                    "?" if h.queue_id is None else str(h.queue_id)).set(h.queue_occupancy)
            self._tx(h)
        if flow is not None:
            self._flow_metrics(flow, path, hops, out)
        return hops

    def _flow_metrics(self, flow: FlowState, path: tuple[PathHop, ...], hops: list[HopMetadata],
                      out: Outcome) -> None:
        f = flow.flow
        flow.reports += 1
        self.metric[m.INT_FLOW_REPORTS.name].labels(f).inc()
        if path != flow.path:
            if flow.path:
                flow.path_changes += 1
                self.metric[m.INT_FLOW_PATH.name].remove(f, " ".join(p.label(self.names) for p in flow.path))
            self.metric[m.INT_FLOW_PATH_CHANGES.name].labels(f).inc(1 if flow.path else 0)
            self.metric[m.INT_FLOW_PATH.name].labels(f, out.path).set(1)
            flow.path = path
        self.metric[m.INT_FLOW_HOPS.name].labels(f).set(len(path))
        if out.e2e_latency_s is not None:
            flow.e2e.add(out.e2e_latency_s)
            self.metric[m.INT_FLOW_E2E_LATENCY.name].labels(f).observe(out.e2e_latency_s)
            self.metric[m.INT_FLOW_E2E_LATENCY_LAST.name].labels(f).set(out.e2e_latency_s)
        labels_now: set[tuple[str, ...]] = set()
        for i, (h, latency) in enumerate(zip(hops, out.hop_latencies_s)):
            labels = (f, str(i), *self._node(h.node_id))
            if latency is not None:
                flow.hop_latency.setdefault(i, LatencyStats()).add(latency)
                self.metric[m.INT_FLOW_HOP_LATENCY.name].labels(*labels).set(latency)
                labels_now.add(labels)
            if h.queue_occupancy is not None:
                flow.hop_queue[i] = h.queue_occupancy
                self.metric[m.INT_FLOW_HOP_QUEUE.name].labels(*labels).set(h.queue_occupancy)
                labels_now.add(labels)
        for stale in flow.hop_labels - labels_now:     # hops of an old path
            for spec in (m.INT_FLOW_HOP_LATENCY, m.INT_FLOW_HOP_QUEUE):
                try:
                    self.metric[spec.name].remove(*stale)
                except KeyError:
                    pass
        flow.hop_labels = labels_now

    def _tx(self, h: HopMetadata) -> None:
        """HPCC-style egress rate: tx bytes over the time between two reports."""
        if h.tx_bytes is None or h.tx_timestamp is None or h.egress_port is None or h.node_id is None:
            return
        key = (h.node_id, h.egress_port)
        last = self._tx_last.get(key)
        if last is None:                             # the first sample: nothing to compare with yet
            self._tx_last[key] = (h.tx_bytes, h.tx_timestamp)
            return
        ticks = (h.tx_timestamp - last[1]) % TX_COUNTER_MODULUS
        if ticks == 0 or ticks >= TX_COUNTER_MODULUS // 2:
            return                                   # same instant, or an older sample (reordered report)
        self._tx_last[key] = (h.tx_bytes, h.tx_timestamp)
        rate = (h.tx_bytes - last[0]) % TX_COUNTER_MODULUS * 8 / (ticks * self.unit_s)
        self.tx_rate[key] = rate
        self.metric[m.INT_PORT_TX_RATE.name].labels(*self._node(h.node_id), str(h.egress_port)).set(rate)

    # -- output ---------------------------------------------------------------

    def summary(self) -> dict[str, Any]:
        """Everything above as JSON-ready data."""
        return {
            "uptime_s": round(time.time() - self.started, 3),
            "report_packets": self.packets,
            "malformed": dict(sorted(self.malformed.items())),
            "reports_sent": self.sent,
            "reports_kept_back": self.kept_back,
            "changes_only": None if self.changes is None else self.changes.settings.as_dict(),
            "streams": [{"node_id": node, "switch": self.switch(node), "hw_id": hw, **st.as_dict()}
                        for (node, hw), st in self.streams.stats().items()],
            "flows": {key: {
                "reports": fl.reports,
                "drops": fl.drops,
                "kept_back": fl.kept_back,
                "path": [{"node_id": p.node_id, "switch": self.switch(p.node_id), "ingress_port": p.ingress_port,
                          "egress_port": p.egress_port} for p in fl.path],
                "path_changes": fl.path_changes,
                "e2e_latency_s": fl.e2e.as_dict(),
                "hop_latency_s": {str(i): s.as_dict() for i, s in sorted(fl.hop_latency.items())},
                "hop_queue_occupancy": {str(i): q for i, q in sorted(fl.hop_queue.items())},
            } for key, fl in sorted(self.flows.items())},
            "untracked_flow_reports": self.untracked_flow_reports,
            "drops": [{"node_id": node, "switch": self.switch(node), "reason": reason, "reports": n}
                      for (node, reason), n in sorted(self.drops.items())],
            "trims": [{"node_id": node, "switch": self.switch(node), "reports": n}
                      for node, n in sorted(self.trims.items())],
            "congestion": [{"node_id": node, "switch": self.switch(node), "queue_id": None if q < 0 else q, **v}
                           for (node, q), v in sorted(self.congestion.items())],
            "tx_rate_bps": [{"node_id": node, "switch": self.switch(node), "egress_port": port, "rate": rate}
                            for (node, port), rate in sorted(self.tx_rate.items())],
        }

    def totals(self) -> dict[str, int]:
        """The headline numbers, for progress lines."""
        stats = self.streams.stats().values()
        return {"packets": self.packets, "lost": sum(s.lost for s in stats),
                "reordered": sum(s.reordered for s in stats), "duplicates": sum(s.duplicates for s in stats),
                "malformed": sum(self.malformed.values()), "flows": len(self.flows),
                "drops": sum(self.drops.values()), "trims": sum(self.trims.values()),
                "congestion": sum(v["events"] for v in self.congestion.values()),
                "sent": self.sent, "kept_back": self.kept_back}
