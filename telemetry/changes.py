"""Send only changes for slow-moving values: which tracked-flow reports the
collector passes on (reports.csv, change listeners) and which it keeps back.

A flow's report is sent when, since the last report sent for that flow,
its path (node and ports of every hop) changed, any hop's queue occupancy
bucket or hop latency bucket changed, whether its packet was ECN-marked
(CE) changed, or `refresh_s` passed; a flow's first report is always sent. The buckets are the switches' own
(features/int_telemetry.py ReportSettings, int_telemetry_egress.p4): a
queue bucket is `occupancy >> queue_bucket_shift`, a latency bucket
`hop_latency >> latency_bucket_shift` with the latency in microseconds;
here the latency is first converted from the reports' time unit, so the
bucket is the same whatever that unit. Drop and congestion reports, and
anything that is not a tracked flow's path report, are never kept back
(the caller decides which reports are offered).

Prometheus metrics do not go through this: they are updated from every
report (they are pulled, not sent).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence

from wire.int_telemetry import TIMESTAMP_UNIT_NS, HopMetadata
from features.int_telemetry import IntConfigError, ReportSettings

DEFAULT_QUEUE_BUCKET = 4          # packets, as the switches' default (ReportSettings.queue_bucket)
DEFAULT_LATENCY_BUCKET_US = 16    # as the switches' default (ReportSettings.latency_bucket_us)
DEFAULT_REFRESH_S = 1.0

# One hop as compared: node id, ingress port, egress port, queue bucket, latency bucket.
HopSignature = tuple[Optional[int], Optional[int], Optional[int], Optional[int], Optional[int]]
Signature = tuple[HopSignature, ...]


def check_bucket(name: str, value: int) -> int:
    """`value` if it is a valid bucket width for `name` ("queue_bucket" or
    "latency_bucket_us": a power of two, the switches' rule), else
    ValueError naming both."""
    try:
        ReportSettings(**{name: value})
    except IntConfigError as exc:
        raise ValueError(str(exc)) from None
    return value


def check_refresh(value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value) \
            or not 0 <= value < math.inf:
        raise ValueError(f"refresh_s: expected seconds >= 0 (0: send every report), got {value!r}")
    return float(value)


@dataclass(frozen=True)
class ChangeSettings:
    queue_bucket: int = DEFAULT_QUEUE_BUCKET            # packets, a power of two
    latency_bucket_us: int = DEFAULT_LATENCY_BUCKET_US  # microseconds, a power of two
    refresh_s: float = DEFAULT_REFRESH_S                # send an unchanged flow again after this; 0: always

    def __post_init__(self) -> None:
        check_bucket("queue_bucket", self.queue_bucket)
        check_bucket("latency_bucket_us", self.latency_bucket_us)
        object.__setattr__(self, "refresh_s", check_refresh(self.refresh_s))

    @property
    def queue_shift(self) -> int:
        """The switches' shift (ReportSettings.port_params()["queue_bucket_shift"])."""
        return self.queue_bucket.bit_length() - 1

    def as_dict(self) -> dict[str, float]:
        return {"queue_bucket": self.queue_bucket, "latency_bucket_us": self.latency_bucket_us,
                "refresh_s": self.refresh_s}


@dataclass
class _Sent:
    signature: Signature
    at: float
    marked: bool = False


class ChangeFilter:
    """Per flow, the last sent report's signature and time. `offer()`
    answers whether a tracked-flow report is sent, and remembers it if so.
    At most `max_flows` flows are remembered; when full, flows whose last
    sent report is older than refresh_s are forgotten (their next report
    would be sent anyway), and a new flow that still finds no room is sent
    every time: the table can only add rows, never hide a change."""

    def __init__(self, settings: Optional[ChangeSettings] = None, *, time_unit_ns: int = TIMESTAMP_UNIT_NS,
                 max_flows: int = 10000):
        self.settings = settings if settings is not None else ChangeSettings()
        self.unit_ns = time_unit_ns
        self.latency_bucket_ns = self.settings.latency_bucket_us * 1000
        self.max_flows = max_flows
        self.last: dict[str, _Sent] = {}

    def signature(self, hops: Sequence[HopMetadata]) -> Signature:
        """What is compared, hops source first."""
        qshift = self.settings.queue_shift
        return tuple((h.node_id, h.ingress_port, h.egress_port,
                      None if h.queue_occupancy is None else h.queue_occupancy >> qshift,
                      None if h.hop_latency is None else h.hop_latency * self.unit_ns // self.latency_bucket_ns)
                     for h in hops)

    def offer(self, flow: str, signature: Signature, now: float, marked: bool = False) -> bool:
        """True: send this report (first of its flow, something changed,
        `marked` (CE) differs from the last sent one's, or refresh_s passed
        since the flow's last sent report)."""
        last = self.last.get(flow)
        if last is not None and last.signature == signature and last.marked == marked \
                and now - last.at < self.settings.refresh_s:
            return False
        if last is not None:
            last.signature, last.at, last.marked = signature, now, marked
        elif self._room(now):
            self.last[flow] = _Sent(signature, now, marked)
        return True

    def _room(self, now: float) -> bool:
        if len(self.last) < self.max_flows:
            return True
        refresh = self.settings.refresh_s
        for flow in [f for f, s in self.last.items() if now - s.at >= refresh]:
            del self.last[flow]
        return len(self.last) < self.max_flows
