"""The congestion controls' constants as a topology section: what `fabric
tune --out` writes (features/tuning.py), and what `fabric train` and the
rdma experiment give every RDMA agent of the congestion control it names
(hostagent/rdma/agent.py --cc-param NAME=VALUE). A host section
(control/feature.py HostSection): nothing for the switches.

    congestion_control:
      dilation: 1                   # the dilation the values are in (1: the topology's own units)
      dcqcn:                        # DcqcnParams' fields (hostagent/ecn/dcqcn.py)
        cnp_interval_s: 0.018
        alpha_timer_s: 0.0198
        rate_timer_s: 0.0198
        at_line_rate:               # the fields that depend on the NIC's line rate, per line rate
        - {line_rate_pps: 833, byte_counter_bytes: 1800000, r_ai_pps: 0.833}
      hpcc: {base_rtt_s: 0.0036, eta: 0.95, max_stage: 5, expected_flows: 3}
      timely: {min_rtt_s: 0.0036, t_low_s: 0.0048, t_high_s: 0.0420}
      swift: {hops: 3, per_hop_s: 0.0012, base_target_s: 0.0013}
      nscc: {base_rtt_s: 0.0036, target_qdelay_s: 0.0018}
      rccc: {base_rtt_s: 0.0036}

Every field is a field of the congestion control's Params dataclass, a
number >= 0 (an integer where the field is one); `line_rate_pps` and
`mtu_bytes` are the agent's own options (--line-rate-pps, --mtu), set only
as an `at_line_rate` entry's key. An agent at line rate L gets the
congestion control's fields and those of its entry at L (within
LINE_RATE_TOLERANCE: a dilated rate is rounded to whole packets/s), if there
is one. `dilation` is required: the values of a section derived on a fabric
dilated D times are that fabric's; a run at another dilation rescales them
(emulator/dilation.py: a section that says its dilation is never dilated
twice). What else a Params dataclass requires of its values (TIMELY's T_low
below T_high) its agent checks, and the launchers before anything starts.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

from control.feature import Fail, HostSection, check_mapping
from emulator.dilation import DILATION_KEY, rescaled

SECTION = "congestion_control"
AT_LINE_RATE = "at_line_rate"
LINE_RATE = "line_rate_pps"
LINE_RATE_TOLERANCE = 0.01        # an entry applies to an agent's line rate within 1% of its own
# Each congestion control's Params fields the section may set, with their type: the dataclasses'
# (hostagent/ecn/dcqcn.py DcqcnParams, hostagent/rdma/cc/{hpcc,timely,swift,nscc,rccc}.py; the features layer
# imports no host agent, so tests/unit/features/test_congestion_control.py checks these are theirs)
# without line_rate_pps and mtu_bytes, which the agent's own options set.
FIELDS: dict[str, dict[str, type]] = {
    "dcqcn": {"min_rate_pps": float, "g": float, "alpha_timer_s": float, "rate_timer_s": float,
              "byte_counter_bytes": int, "fast_recovery_steps": int, "r_ai_pps": float, "r_hai_pps": float,
              "cnp_interval_s": float},
    "hpcc": {"base_rtt_s": float, "eta": float, "max_stage": int, "expected_flows": int, "min_window_packets": float},
    "timely": {"min_rate_pps": float, "t_low_s": float, "t_high_s": float, "min_rtt_s": float, "delta_pps": float,
               "alpha": float, "beta": float, "hai_after": int},
    "swift": {"base_target_s": float, "per_hop_s": float, "hops": int, "fs_range_s": float, "fs_min_cwnd": float,
              "fs_max_cwnd": float, "ai": float, "beta": float, "max_mdf": float, "min_cwnd": float,
              "max_cwnd": float, "init_cwnd": float, "retx_reset_threshold": int},
    "nscc": {"base_rtt_s": float, "target_qdelay_s": float, "pi_gain": float, "fi_packets": float, "md_gain": float,
             "max_md": float, "delay_gain": float, "min_cwnd": float, "init_cwnd": float},
    "rccc": {"base_rtt_s": float, "initial_credit_packets": float},
}
# The Params fields an agent's own options set: not in the section (an entry's line_rate_pps is its key).
AGENT_OPTIONS = ("line_rate_pps", "mtu_bytes")


@dataclass(frozen=True)
class AtLineRate:
    """A congestion control's fields for agents at one NIC line rate (packets/s)."""
    line_rate_pps: float
    values: Mapping[str, float]


@dataclass(frozen=True)
class CongestionControlConstants:
    """The parsed section: per congestion control its fields (`values`) and
    those per line rate (`at_line_rate`), in the units of a network dilated
    `dilation` times."""
    dilation: float
    values: Mapping[str, Mapping[str, float]]
    at_line_rate: Mapping[str, tuple[AtLineRate, ...]]

    def entry(self, cc: str, line_rate_pps: float, dilation: float = 1.0) -> AtLineRate | None:
        """`cc`'s entry for an agent at `line_rate_pps` (a network dilated
        `dilation` times), rescaled to it; None if it has none."""
        for e in self.at_line_rate.get(cc, ()):
            rate = rescaled(LINE_RATE, e.line_rate_pps, self.dilation, dilation)
            if abs(rate - line_rate_pps) <= LINE_RATE_TOLERANCE * rate:
                return AtLineRate(rate, {k: rescaled(k, v, self.dilation, dilation) for k, v in e.values.items()})
        return None

    def params(self, cc: str, line_rate_pps: float, dilation: float = 1.0) -> dict[str, float]:
        """What an agent running `cc` at `line_rate_pps` on a network
        dilated `dilation` times is given (field -> value, in that
        network's units): the congestion control's fields and its entry's
        at that line rate; empty for a congestion control the section has
        nothing for."""
        out = {k: rescaled(k, v, self.dilation, dilation) for k, v in self.values.get(cc, {}).items()}
        at = self.entry(cc, line_rate_pps, dilation)
        return {**out, **(dict(at.values) if at is not None else {})}

    def unmatched(self, cc: str, line_rate_pps: float, dilation: float = 1.0) -> str:
        """Why an agent at `line_rate_pps` gets none of `cc`'s per-line-rate
        fields ("" when it gets them or there are none)."""
        entries = self.at_line_rate.get(cc, ())
        if not entries or self.entry(cc, line_rate_pps, dilation) is not None:
            return ""
        rates = ", ".join(f"{rescaled(LINE_RATE, e.line_rate_pps, self.dilation, dilation):g}" for e in entries)
        fields = sorted({k for e in entries for k in e.values})
        return (f"{SECTION}.{cc}.{AT_LINE_RATE} has no entry at the agents' line rate {line_rate_pps:g} packets/s "
                f"(entries at {rates}): {', '.join(fields)} left at their defaults")


def _number(where: str, value: Any, kind: type, fail: Fail) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        fail(where, f"expected a number, got {value!r}")
    if not math.isfinite(value) or value < 0:
        fail(where, f"expected a finite number >= 0, got {value!r}")
    if kind is int:
        if not float(value).is_integer():
            fail(where, f"expected a whole number (the field is an integer), got {value!r}")
        return int(value)
    return float(value)


def _fields(where: str, raw: dict, cc: str, fail: Fail) -> dict[str, float]:
    out: dict[str, float] = {}
    for name, value in raw.items():
        out[str(name)] = _number(f"{where}.{name}", value, FIELDS[cc][str(name)], fail)
    return out


def parse_section(raw: Any, topo: Any, fail: Fail) -> CongestionControlConstants:
    """The section, checked whole: a known congestion control, its known
    fields, numbers (whole where the field is), its per-line-rate entries
    each with a distinct line rate; `dilation` given, a number >= 1."""
    ccs = sorted(FIELDS)
    check_mapping(raw, SECTION, {DILATION_KEY, *ccs}, fail,
                  what=f"of {DILATION_KEY} and congestion controls ({', '.join(ccs)})")
    if DILATION_KEY not in raw:
        fail(f"{SECTION}.{DILATION_KEY}", "missing: the dilation the values are in (1: the topology's own, "
                                          "undilated units; fabric tune writes it)")
    dilation = raw[DILATION_KEY]
    if isinstance(dilation, bool) or not isinstance(dilation, (int, float)) or not (
            math.isfinite(dilation) and dilation >= 1):
        fail(f"{SECTION}.{DILATION_KEY}", f"expected a number >= 1 (1: undilated), got {dilation!r}")
    values: dict[str, dict[str, float]] = {}
    at_line_rate: dict[str, tuple[AtLineRate, ...]] = {}
    for cc in ccs:
        if cc not in raw:
            continue
        where = f"{SECTION}.{cc}"
        given = check_mapping(raw[cc] if raw[cc] is not None else {}, where, {*FIELDS[cc], AT_LINE_RATE}, fail,
                              what=f"of {cc}'s parameters")
        values[cc] = _fields(where, {k: v for k, v in given.items() if k != AT_LINE_RATE}, cc, fail)
        entries: list[AtLineRate] = []
        items = given.get(AT_LINE_RATE)
        if items is None:
            continue
        if not isinstance(items, list):
            fail(f"{where}.{AT_LINE_RATE}", f"expected a list of mappings, each with {LINE_RATE}, got {items!r}")
        for i, item in enumerate(items):
            at = f"{where}.{AT_LINE_RATE}[{i}]"
            check_mapping(item, at, {LINE_RATE, *FIELDS[cc]}, fail, what=f"of {LINE_RATE} and {cc}'s parameters")
            if LINE_RATE not in item:
                fail(f"{at}.{LINE_RATE}", "missing: the NIC line rate (packets/s) these values are for")
            rate = _number(f"{at}.{LINE_RATE}", item[LINE_RATE], float, fail)
            if not rate > 0:
                fail(f"{at}.{LINE_RATE}", f"expected a rate > 0, got {item[LINE_RATE]!r}")
            if any(e.line_rate_pps == rate for e in entries):
                fail(f"{at}.{LINE_RATE}", f"a second entry at {rate:g} packets/s")
            entries.append(AtLineRate(rate, _fields(at, {k: v for k, v in item.items() if k != LINE_RATE}, cc, fail)))
        at_line_rate[cc] = tuple(entries)
    return CongestionControlConstants(float(dilation), values, at_line_rate)


HOST_SECTION = HostSection(SECTION, "the congestion controls' constants the RDMA agents are given (fabric tune "
                                    "derives them)", parse_section)
