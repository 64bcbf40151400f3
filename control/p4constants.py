"""Constants the control plane shares with the P4 program, read from
p4src/include/defines.p4 so they are defined once."""
from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

DEFINES = Path(__file__).resolve().parent.parent / "p4src" / "include" / "defines.p4"
_CONST_RE = re.compile(r"^\s*const\s+[\w<>]+\s+(\w+)\s*=\s*(0x[0-9a-fA-F]+|\d+)\s*;", re.M)
_DEFINE_RE = re.compile(r"^\s*#define\s+(\w+)\s+(0x[0-9a-fA-F]+|\d+)\b", re.M)  # widths P4 needs as macros


@lru_cache(maxsize=None)
def constants(path: Path = DEFINES) -> dict[str, int]:
    text = path.read_text()
    return {name: int(value, 0) for name, value in _CONST_RE.findall(text) + _DEFINE_RE.findall(text)}


def drop_reasons() -> dict[str, int]:
    """{"PARSER_ERROR": 1, ...}: index of each reason in drop_counter."""
    return {name[len("DROP_"):]: v for name, v in constants().items()
            if name.startswith("DROP_") and name != "DROP_REASON_COUNT"}
