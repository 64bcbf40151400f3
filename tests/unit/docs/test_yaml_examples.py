"""Every YAML example in the documentation loads with the project's own loader.

The documentation is README.md, docs/**/*.md and topologies/README.md. Each
fenced ```yaml block there is one case (id: file:line of its fence):

- a mapping with `switches` is a whole topology: features.topology_from_dict;
- otherwise it is a section fragment: a mapping whose single key is a
  feature's section (ecn, int, load_balancing, aggregation, failover) or a
  host section's (congestion_control),
  merged into topologies/leaf-spine.yaml (replacing that section if the file
  has it) and loaded the same way, so its switch and host names must be
  leaf-spine's;
- a block that is neither (a docker-compose file, a Prometheus config) is
  marked by the HTML comment `<!-- yaml: not a topology -->` on the nearest
  non-blank line before its fence, and is only parsed with yaml.safe_load.
"""
from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from features import FEATURES, SECTIONS as HOST_SECTIONS, topology_from_dict

REPO = Path(__file__).resolve().parents[3]
BASE_TOPOLOGY = REPO / "topologies" / "leaf-spine.yaml"
NOT_A_TOPOLOGY = "<!-- yaml: not a topology -->"
SECTIONS = {f.section for f in FEATURES} | {s.section for s in HOST_SECTIONS}
FENCE_OPEN = re.compile(r"^(\s*)```yaml\s*$")
FENCE = re.compile(r"^\s*```")


def documents() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md")), REPO / "topologies" / "README.md"]


@dataclass(frozen=True)
class Block:
    path: Path
    line: int                  # 1-based line of the opening fence
    text: str
    marked: bool               # preceded by NOT_A_TOPOLOGY

    @property
    def id(self) -> str:
        return f"{self.path.relative_to(REPO)}:{self.line}"


def yaml_blocks(path: Path) -> list[Block]:
    lines = path.read_text().splitlines()
    blocks = []
    i = 0
    while i < len(lines):
        m = FENCE_OPEN.match(lines[i])
        if not m:
            i += 1
            continue
        start = i
        j = i + 1
        while j < len(lines) and not FENCE.match(lines[j]):
            j += 1
        if j == len(lines):
            raise AssertionError(f"{path.relative_to(REPO)}:{start + 1}: ```yaml block never closed")
        previous = next((lines[k].strip() for k in range(start - 1, -1, -1) if lines[k].strip()), "")
        text = textwrap.dedent("\n".join(lines[start + 1:j]))
        blocks.append(Block(path, start + 1, text, previous == NOT_A_TOPOLOGY))
        i = j + 1
    return blocks


BLOCKS = [b for doc in documents() if doc.exists() for b in yaml_blocks(doc)]


def test_the_documentation_has_yaml_examples():
    assert BLOCKS, "no ```yaml block found in README.md, docs/ or topologies/README.md"


def test_every_marker_precedes_a_yaml_block():
    """A `yaml: not a topology` comment that no ```yaml block follows is stale."""
    stale = []
    for doc in documents():
        if not doc.exists():
            continue
        lines = doc.read_text().splitlines()
        for n, line in enumerate(lines):
            if line.strip() != NOT_A_TOPOLOGY:
                continue
            following = next((lines[k] for k in range(n + 1, len(lines)) if lines[k].strip()), "")
            if not FENCE_OPEN.match(following):
                stale.append(f"{doc.relative_to(REPO)}:{n + 1}")
    assert not stale, f"{NOT_A_TOPOLOGY} not followed by a ```yaml block: {', '.join(stale)}"


@pytest.mark.parametrize("block", BLOCKS, ids=[b.id for b in BLOCKS])
def test_yaml_example_loads(block: Block):
    try:
        data = yaml.safe_load(block.text)
    except yaml.YAMLError as exc:
        pytest.fail(f"{block.id}: not valid YAML: {exc}")
    if block.marked:
        return                                  # parsing is all that is checked
    if isinstance(data, dict) and "switches" in data:
        topology_from_dict(data, block.id)
        return
    keys = sorted(data) if isinstance(data, dict) else None
    assert keys is not None and len(keys) == 1 and keys[0] in SECTIONS, (
        f"{block.id}: a YAML example must be a topology (a mapping with switches), a single feature "
        f"section ({', '.join(sorted(SECTIONS))}), or be marked {NOT_A_TOPOLOGY}; top-level keys: {keys}")
    base = yaml.safe_load(BASE_TOPOLOGY.read_text())
    base[keys[0]] = data[keys[0]]
    topology_from_dict(base, f"{block.id} (merged into {BASE_TOPOLOGY.relative_to(REPO)})")
