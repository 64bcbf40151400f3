"""What the topology generators share: errors that name the parameter, the
limits of the topology format, and writing a file like the shipped ones."""
from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Sequence

MAX_HOSTS = 254      # control/topology.py: 10.<nic>.<host>.0/24
MAX_PORTS = 99       # control/topology.py: ports per switch ("<switch>-eth<NN>")


@dataclass(frozen=True)
class Graph:
    """A generated topology before it becomes a file: switches (name, role),
    hosts, links (host-switch and switch-switch, by name). Unbounded by the
    file format's limits, so costs can be counted at any size."""
    switches: list[tuple[str, str]]
    hosts: list[str]
    links: list[tuple[str, str]]

    def switch_links(self) -> list[tuple[str, str]]:
        names = {s for s, _ in self.switches}
        return [(a, b) for a, b in self.links if a in names and b in names]

    def ports_by_switch(self) -> dict[str, int]:
        """Switch -> ports in use: every link end on it, host links included."""
        names = {s for s, _ in self.switches}
        out = dict.fromkeys(names, 0)
        for a, b in self.links:
            for end in (a, b):
                if end in names:
                    out[end] += 1
        return out


class GeneratorError(ValueError):
    """A parameter a generator cannot build from: `param` names it."""

    def __init__(self, param: str, what: str):
        super().__init__(f"--{param.replace('_', '-')}: {what}")
        self.param = param


def at_least(param: str, value: int, low: int) -> None:
    if value < low:
        raise GeneratorError(param, f"must be at least {low}, got {value}")


def check_sizes(switches: Sequence[tuple[str, str]], hosts: Sequence[str], links: Sequence[tuple[str, str]],
                hosts_param: str) -> None:
    """The topology format's limits: hosts (named by `hosts_param`, the
    parameter that sets their number) and ports per switch."""
    if len(hosts) > MAX_HOSTS:
        raise GeneratorError(hosts_param, f"{len(hosts)} hosts; the topology format numbers hosts "
                                          f"10.<nic>.<host>.0/24, at most {MAX_HOSTS}")
    ports = Counter(end for link in links for end in link)
    busiest = max((ports[name], name) for name, _ in switches)
    if busiest[0] > MAX_PORTS:
        raise GeneratorError(hosts_param, f"switch {busiest[1]} would have {busiest[0]} ports, at most {MAX_PORTS}")


def render(name: str, description: str, comments: Sequence[str], switches: Sequence[tuple[str, str]],
           hosts: Sequence[str], links: Sequence[tuple[str, str]], bandwidth_mbps: float = 100,
           groups: Optional[dict[str, int]] = None) -> str:
    """A topology file: `comments` (how it was built) on top, then the
    fields, every switch with its role (and its group, when `groups` gives
    one), hosts as workers."""
    groups = groups or {}

    def switch(s: str, role: str) -> str:
        return f"  - {{name: {s}, role: {role}" + (f", group: {groups[s]}}}" if s in groups else "}")

    return "\n".join([
        *(f"# {line}".rstrip() for line in comments),
        f"name: {name}",
        f"description: {json.dumps(description)}",    # a JSON string is a YAML one
        "defaults:", f"  link: {{bandwidth_mbps: {bandwidth_mbps:g}}}",
        "switches:", *(switch(s, role) for s, role in switches),
        "hosts:", *(f"  - {{name: {h}, role: worker}}" for h in hosts),
        "links:", *(f"  - [{a}, {b}]" for a, b in links), ""])


def parser(prog: str, doc: str) -> argparse.ArgumentParser:
    """A generator's parser: its module docstring's first paragraph as the
    description, the rest as the epilog (--help shows how it builds)."""
    return argparse.ArgumentParser(prog=prog, description=doc.split("\n\n")[0],
                                   epilog="\n\n".join(doc.split("\n\n")[1:]),
                                   formatter_class=argparse.RawDescriptionHelpFormatter)


def run(prog: str, ap: argparse.ArgumentParser, build: Callable[[argparse.Namespace], str],
        argv: Optional[list[str]]) -> int:
    """A generator's command: parse, build, write to -o or stdout; a bad
    parameter is an error naming it (exit 2)."""
    ap.add_argument("-o", "--output", type=Path, help="file to write (default: standard output)")
    args = ap.parse_args(argv)
    try:
        text = build(args)
    except GeneratorError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2
    if args.output is None:
        sys.stdout.write(text)
    else:
        args.output.write_text(text)
        print(f"{prog}: wrote {args.output}", file=sys.stderr)
    return 0
