"""Time dilation: the same network, D times slower, so that this machine
keeps up with it (DieCast, SELENA: slow the virtual network's clock rather
than leave the emulator behind it).

Under a dilation D every rate is divided by D and every time constant
multiplied by it: link bandwidths (so BMv2's queue rates), host line rates,
hold rates, the congestion controls' rates and timers, retransmission
timeouts. What is counted in packets or bytes (queue thresholds, windows,
headroom, message sizes) is unchanged, and so is every dimensionless result
(utilisation, fairness, a queue in packets, a drop count). A time measured
in the dilated run (a completion time, a step) is D times the one the
undilated network would show; a rate, 1/D.

Parameters follow the project's unit suffixes, which say what to scale: a
field or key ending in `_s`, `_ms` or `_us` is a time, one ending in `_pps`
or `_mbps` a rate; anything else is left as it is. The factor is what the
budget asks for (emulator/calibration.py: Plan.dilation) or given by hand;
the emulator's own per-packet cost does not dilate, and that is the point.

A topology section may say which dilation its numbers are already in (a
`dilation:` key, as `fabric tune --validate` writes the congestion
controls' constants it derived on a dilated fabric): it is rescaled from
that dilation to the run's, never dilated twice (DILATION_KEY).
"""
from __future__ import annotations

import copy
import dataclasses
import math
from typing import Any, TypeVar

from control.link_defaults import DEFAULT_LINK

TIME_SUFFIXES = ("_s", "_ms", "_us")
RATE_SUFFIXES = ("_pps", "_mbps")
DILATION_KEY = "dilation"       # a section's: the dilation its numbers are in (1: the undilated network's)

P = TypeVar("P")


class DilationError(ValueError):
    pass


def kind(name: str) -> str | None:
    """"time", "rate", or None: what a parameter's name says it is."""
    if name.endswith(TIME_SUFFIXES):
        return "time"
    if name.endswith(RATE_SUFFIXES):
        return "rate"
    return None


def rescaled(name: str, value: float, given_at: float, wanted_at: float) -> float:
    """`value` of the parameter `name`, in the units of a network dilated
    `given_at` times, in those of one dilated `wanted_at` times (a time x
    wanted/given, a rate / it; anything else as it is)."""
    what = kind(name)
    if what == "time":
        return value * wanted_at / given_at
    if what == "rate":
        return value * given_at / wanted_at
    return value


def section_dilation(section: Any) -> float | None:
    """The dilation a section says its numbers are in (its `dilation:` key),
    or None: it says none, or not as a number >= 1 (its loader names that)."""
    if not isinstance(section, dict) or DILATION_KEY not in section:
        return None
    given = section[DILATION_KEY]
    if isinstance(given, bool) or not isinstance(given, (int, float)) or not (math.isfinite(given) and given >= 1):
        return None
    return float(given)


@dataclasses.dataclass(frozen=True)
class Dilation:
    """The factor D >= 1 (1: none)."""
    factor: float = 1.0

    def __post_init__(self) -> None:
        if not (math.isfinite(self.factor) and self.factor >= 1.0):
            raise DilationError(f"a dilation factor is a number >= 1 (1: none), got {self.factor!r}")

    @classmethod
    def rounded_up(cls, factor: float, step: float = 0.25) -> "Dilation":
        """The factor a budget asks for, up to the next `step` (a margin, and
        a number that reads well in a result row); at least 1."""
        return cls(max(1.0, math.ceil(factor / step - 1e-9) * step))

    def __str__(self) -> str:
        return "none" if self.factor == 1.0 else f"x{self.factor:g}"

    def value(self, name: str, value: float) -> float:
        """`value` of the parameter called `name`, dilated."""
        what = kind(name)
        if what == "time":
            return value * self.factor
        if what == "rate":
            return value / self.factor
        return value

    def params(self, cls: type[P], **given: Any) -> P:
        """An instance of the parameter dataclass `cls`: its defaults
        dilated, then `given` (already in the dilated network's units, e.g. a
        line rate taken from a dilated link) set as they are."""
        defaults: Any = cls()
        values = {f.name: getattr(defaults, f.name) for f in dataclasses.fields(defaults) if f.init}
        dilated = {name: self.value(name, v) for name, v in values.items()
                   if kind(name) and isinstance(v, (int, float)) and not isinstance(v, bool)}
        out: P = dataclasses.replace(defaults, **{**dilated, **given})
        return out

    def topology(self, raw: dict) -> dict:
        """A topology file's mapping (as yaml loads it) with every link's
        bandwidth and delay dilated, the defaults' included, and any
        section's `..._pps`/`..._s`/`..._ms` numbers (a hold rate, a
        heartbeat period; whole numbers stay whole); a copy. A section that
        says the dilation its numbers are in (`dilation: D`, e.g. derived on
        a fabric dilated D times) is rescaled from D to this factor instead
        (fractions kept) and then says this factor: never dilated twice."""
        out = copy.deepcopy(raw)
        for key, section in out.items():
            given = section_dilation(section)
            if given is not None and given != self.factor:
                self._rescale(section, given)
                section[DILATION_KEY] = int(self.factor) if float(self.factor).is_integer() else self.factor
        if self.factor == 1.0:
            return out
        links = out.setdefault("defaults", {}).setdefault("link", {})
        links.setdefault("bandwidth_mbps", DEFAULT_LINK["bandwidth_mbps"])
        for entry in [links, *(link for link in out.get("links", []) if isinstance(link, dict))]:
            self._dilate(entry, whole=False)
        for key, section in out.items():
            if key not in ("defaults", "links", "switches", "hosts") and isinstance(section, dict) \
                    and section_dilation(section) is None:
                self._dilate(section, whole=True)
        return out

    def undilated(self, section: Any) -> Any:
        """A copy of a section whose numbers are this dilated network's
        (and that says no dilation), in the undilated network's units, as a
        topology file states them: times / D, rates x D; a whole number
        stays whole (rounded, at least 1). What `fabric tune --validate`
        derived on a dilated fabric is written so; a run at any dilation then
        dilates it as it does the topology's own sections."""
        out = copy.deepcopy(section)
        Dilation()._rescale(out, self.factor, whole=True)
        return out

    def _rescale(self, value: Any, given_at: float, whole: bool = False) -> None:
        """Rescale the numbers in `value` (mappings and lists, in place)
        from a network dilated `given_at` times to this one; with `whole`, a
        whole number stays whole (rounded, at least 1)."""
        items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
        for key, item in list(items):
            if isinstance(item, (dict, list)):
                self._rescale(item, given_at, whole)
            elif isinstance(item, (int, float)) and not isinstance(item, bool) and isinstance(key, str) \
                    and key != DILATION_KEY:
                back = rescaled(key, item, given_at, self.factor)
                value[key] = max(1, round(back)) if whole and isinstance(item, int) and item and kind(key) else back

    def _dilate(self, mapping: dict, whole: bool) -> None:
        """Dilate `mapping`'s numbers in place; with `whole`, a whole number
        stays whole (a section's hold rate in packets/s or period in ms:
        rounded, at least 1). A link's bandwidth and delay may be fractions."""
        for key, value in mapping.items():
            if isinstance(value, dict):
                self._dilate(value, whole)
            elif isinstance(value, (int, float)) and not isinstance(value, bool) and kind(key):
                dilated = self.value(key, value)
                mapping[key] = max(1, round(dilated)) if whole and isinstance(value, int) and value else dilated
