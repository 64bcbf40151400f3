"""The features: each a P4 control switched on at runtime, and here its
control-plane side, a `Feature` (the contract: control/feature.py).

    FEATURES                 every feature, in the order the controller programs them
    SECTIONS                 the host sections: no feature's, what the hosts' agents are given
                             (congestion_control: the congestion controls' constants)
    by_name("ecn")           one of them
    load_topology(path)      a topology file with every feature's section parsed
                             (overlays=[file, ...]: feature sections applied over it)
    topology_from_dict(...)  the same from a mapping

Adding a feature is adding its module here (and its pieces: see
docs/architecture.md); `fabric features` prints the index.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from control import topology
from control.feature import Feature, HostSection, check_features, check_sections
from features import aggregation, central_routing, congestion_control, ecn, failover, int_telemetry, \
    load_balancing, lossless, nonminimal_routing, trimming

FEATURES: tuple[Feature, ...] = check_features((ecn.FEATURE, int_telemetry.FEATURE, load_balancing.FEATURE,
                                                aggregation.FEATURE, failover.FEATURE, lossless.FEATURE,
                                                nonminimal_routing.FEATURE, central_routing.FEATURE,
                                                trimming.FEATURE))     # after lossless: it reads its classes
SECTIONS: tuple[HostSection, ...] = (congestion_control.HOST_SECTION,)
check_sections(FEATURES, SECTIONS)


def by_name(name: str) -> Feature:
    for f in FEATURES:
        if f.name == name:
            return f
    raise KeyError(f"no feature {name!r} (features: {', '.join(f.name for f in FEATURES)})")


def load_topology(path: str | Path, overlays: Sequence[str | Path] = ()) -> topology.Topology:
    """A topology file (a name in topologies/ or a path), validated with every
    feature's section and every host section, with `overlays` (files of
    sections, e.g. what `fabric tune --out` writes) applied over it section by
    section."""
    return topology.load(path, FEATURES, overlays, SECTIONS)


def topology_from_dict(data: Any, source: str = "<topology>") -> topology.Topology:
    return topology.from_dict(data, source, FEATURES, sections=SECTIONS)
