"""A communicator's ranks from a topology: which host NIC each rank is, in
rank order. On a rail-optimized fabric (NIC i of every server on rail i's
leaf), a rank is one NIC (one GPU's), and the order decides which hops a
ring takes:

  rail-aware   rail by rail: the NICs of rail 0 of every server, then rail 1, ...: a ring's
               neighbours share a leaf except where it moves to the next rail (once per rail)
  host-major   server by server, each server's NICs in order: consecutive ranks sit on
               different rails, so nearly every hop crosses a spine (what placing ranks
               without looking at the fabric gives)

On a fabric without rails both give the hosts' primary NICs in file order.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

from control.topology import Nic, Topology

RAIL_AWARE, HOST_MAJOR = "rail-aware", "host-major"
PLACEMENTS = (RAIL_AWARE, HOST_MAJOR)


@dataclass(frozen=True)
class Rank:
    """A rank's NIC: what its endpoint binds and addresses."""
    host: str
    nic: str
    ip: str
    mac: str
    iface: str
    gateway_mac: str
    rail: Optional[int]

    @classmethod
    def of(cls, nic: Nic) -> "Rank":
        return cls(nic.host, nic.name, nic.ip, nic.mac, nic.iface, nic.gateway_mac, nic.rail)


def ranks(topology: Topology, hosts: Optional[Sequence[str]] = None, placement: str = RAIL_AWARE) -> list[Rank]:
    """The ranks of a job on `hosts` (default: every host with role worker,
    or every host), ordered by `placement`."""
    if placement not in PLACEMENTS:
        raise ValueError(f"placement must be one of {', '.join(PLACEMENTS)}, got {placement!r}")
    if hosts is None:
        workers = [h.name for h in topology.hosts.values() if h.role == "worker"]
        hosts = workers or list(topology.hosts)
    unknown = [h for h in hosts if h not in topology.hosts]
    if unknown:
        raise ValueError(f"no host named {', '.join(unknown)} in topology {topology.name}")
    if len(set(hosts)) != len(hosts):
        raise ValueError(f"hosts must be distinct, got {list(hosts)}")
    chosen = [topology.hosts[h] for h in hosts]
    rails = sorted({nic.rail for h in chosen for nic in h.nics.values() if nic.rail is not None})
    if not rails:
        return [Rank.of(h.primary) for h in chosen]
    if placement == HOST_MAJOR:
        return [Rank.of(nic) for h in chosen for nic in h.nics.values() if nic.rail is not None]
    return [Rank.of(nic) for rail in rails for h in chosen for nic in h.nics.values() if nic.rail == rail]


def ring_hops_across_rails(order: Sequence[Rank]) -> int:
    """How many of a ring's hops join NICs on different rails (each crosses a spine)."""
    n = len(order)
    return sum(1 for i in range(n) if order[i].rail != order[(i + 1) % n].rail) if n > 1 else 0
