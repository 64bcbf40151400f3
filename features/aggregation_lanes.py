"""Writes p4src/include/aggregation_lanes.p4: the element lanes of the
aggregation control, packed several to a register word.

An aggregation packet carries its block's int32 elements in chunks of
AGG_CHUNK_ELEMENTS (defines.p4): one chunk, or AGG_CHUNKS (the job declares
which). The first chunk ends the aggregation header (agg_t); a full
block's other chunks are one more header (agg_rest_t): two header instances
whatever the size, as before sizes, so the feature costs a packet no more
while it is off. A chunk is AGG_WORD_BITS-wide words, each holding
AGG_WORD_BITS / 32 elements as they are on the wire (contiguous big-endian
int32), and each word has a register of the same width: one register read,
one add, one overflow check and one register write sum a whole word
(SIMD within a register). BMv2 charges per primitive, nearly whatever its
width (docs/benchmark.md, the price list), so the wide word is what makes an
element cheap.

The add is lane-wise, with no carry between lanes: with H the top bit of
every lane,

    s        = ((a & ~H) + (b & ~H)) ^ ((a ^ b) & H)
    overflow = (a ^ s) & (b ^ s) & H

the low 31 bits of each lane add without reaching the next lane's, and the
top bit is the sum of the two top bits and the carry into it (xor). A lane
overflowed (signed) when both addends' signs differ from the sum's.

p4c v1.2.4.9 has no loops for BMv2, so the chunks and words are unrolled
here. The generated file is committed; `fabric generate` rewrites it (with
every other generated file) and tests/unit/fabric/test_generate.py fails
when it is out of date.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

INCLUDE = Path(__file__).resolve().parent.parent / "p4src" / "include"
OUTPUT = INCLUDE / "aggregation_lanes.p4"
LANE_BITS = 32
# The lane-wise add and its overflow lanes, as the switch computes them (A, B:
# the addends, S: the sum, H: the lanes' top bits); rendered into P4 and
# evaluated on Python integers by tests/unit/features/test_aggregation_lanes.py.
LANE_SUM = "(((A & ~H) + (B & ~H)) ^ ((A ^ B) & H))"
LANE_OVERFLOW = "((A ^ S) & (B ^ S) & H)"


@dataclass(frozen=True)
class Lanes:
    chunk_elements: int      # AGG_CHUNK_ELEMENTS: int32 elements in a chunk header
    chunks: int              # AGG_CHUNKS: chunks a packet may carry
    word_bits: int           # AGG_WORD_BITS: width of a header word and of a sum register

    def __post_init__(self) -> None:
        if self.word_bits % LANE_BITS or self.word_bits < LANE_BITS:
            raise ValueError(f"AGG_WORD_BITS must be a multiple of {LANE_BITS}, got {self.word_bits}")
        if (self.chunk_elements * LANE_BITS) % self.word_bits:
            raise ValueError(f"AGG_WORD_BITS ({self.word_bits}) must divide a chunk's "
                             f"{self.chunk_elements * LANE_BITS} bits")
        if not 1 <= self.chunks:
            raise ValueError(f"AGG_CHUNKS must be at least 1, got {self.chunks}")

    @property
    def lanes_per_word(self) -> int:
        return self.word_bits // LANE_BITS

    @property
    def words(self) -> int:
        """Words per chunk."""
        return self.chunk_elements * LANE_BITS // self.word_bits

    @property
    def tops(self) -> int:
        """H: the top bit of every lane of a word."""
        return sum(1 << (LANE_BITS * i + LANE_BITS - 1) for i in range(self.lanes_per_word))


def _define(name: str, text: str) -> int:
    m = re.search(rf"^#define {name} (\d+)", text, re.M)
    if not m:
        raise SystemExit(f"defines.p4 has no #define {name}")
    return int(m.group(1))


def lanes() -> Lanes:
    text = (INCLUDE / "defines.p4").read_text()
    return Lanes(_define("AGG_CHUNK_ELEMENTS", text), _define("AGG_CHUNKS", text), _define("AGG_WORD_BITS", text))


def _expr(template: str, **names: str) -> str:
    """`template` with its one-letter names replaced (H: AGG_LANE_TOPS)."""
    return re.sub(r"\b[ABSH]\b", lambda m: {**names, "H": "AGG_LANE_TOPS"}[m.group(0)], template)


def lane_add(lanes: Lanes, a: int, b: int) -> tuple[int, int]:
    """(sum word, overflow lanes' top bits) of words a and b, by the same
    expressions the switch runs, on Python integers of the word's width."""
    mask = (1 << lanes.word_bits) - 1
    env = {"A": a, "B": b, "H": lanes.tops}
    s = eval(LANE_SUM, {}, env) & mask
    return s, eval(LANE_OVERFLOW, {}, {**env, "S": s}) & mask


def _word(c: int, k: int) -> str:
    """Word k of chunk c in the packet: the first chunk ends the aggregation
    header (hdr.agg), the others are the optional hdr.agg_rest."""
    return f"hdr.agg.w{k}" if c == 0 else f"hdr.agg_rest.c{c}w{k}"


def _actions(lanes: Lanes, name: str, chunks: range) -> list[str]:
    """start_NAME, add_NAME, read_NAME over the words of `chunks`."""
    lines = [f"    action start_{name}() {{ \\"]
    lines += [f"        agg_sum_{c}_{k}.write(meta.agg.cell, {_word(c, k)}); \\"
              for c in chunks for k in range(lanes.words)]
    lines += ["    } \\", f"    action add_{name}() {{ \\"]
    for c in chunks:
        for k in range(lanes.words):
            b = _word(c, k)
            s = _expr(LANE_SUM, A="meta.agg.sum", B=b)
            overflow = _expr(LANE_OVERFLOW, A="meta.agg.sum", B=b, S=s)
            lines += [f"        agg_sum_{c}_{k}.read(meta.agg.sum, meta.agg.cell); \\",
                      f"        meta.agg.overflow = meta.agg.overflow | {overflow}; \\",
                      f"        {b} = {s}; \\",
                      f"        agg_sum_{c}_{k}.write(meta.agg.cell, {b}); \\"]
    lines += ["    } \\", f"    action read_{name}() {{ \\"]
    lines += [f"        agg_sum_{c}_{k}.read({_word(c, k)}, meta.agg.cell); \\"
              for c in chunks for k in range(lanes.words)]
    lines += ["    } \\"]
    return lines


def render(lanes: Lanes) -> str:
    w, words = lanes.word_bits, lanes.words
    tops = f"{w}w0x{lanes.tops:0{w // 4}x}"
    lines = [
        f"// GENERATED by features/aggregation_lanes.py (fabric generate) from AGG_CHUNK_ELEMENTS = "
        f"{lanes.chunk_elements},",
        f"// AGG_CHUNKS = {lanes.chunks}, AGG_WORD_BITS = {w} (defines.p4). Do not edit: change the "
        "generator and run it.",
        "#ifndef AGGREGATION_LANES_P4",
        "#define AGGREGATION_LANES_P4",
        "",
        f"// The block's elements, int32 big-endian, {lanes.lanes_per_word} to a {w}-bit word: the first chunk "
        f"of {lanes.chunk_elements}",
        "// ends the aggregation header (agg_t); a full block's other chunks are agg_rest_t.",
        "#define AGG_HEAD_WORDS \\",
    ]
    lines += [f"    bit<{w}> w{k}; \\" for k in range(words)]
    lines += ["", "", "header agg_rest_t {"]
    lines += [f"    bit<{w}> c{c}w{k};" for c in range(1, lanes.chunks) for k in range(words)]
    lines += ["}", "",
              "// The top bit of every lane of a word.",
              f"#define AGG_LANE_TOPS {tops}",
              "",
              "// One register per word of each chunk, one cell per (slot, shadow set).",
              "#define AGG_SUM_REGISTERS \\"]
    lines += [f"    register<bit<{w}>, bit<32>>(AGG_CELLS) agg_sum_{c}_{k}; \\"
              for c in range(lanes.chunks) for k in range(words)]
    lines += ["", "",
              "// For the first chunk (head) and the rest of a full block (rest): start_ (a cell's first",
              "// contribution: the words become the sums), add_ (another contribution: each word adds",
              "// lane-wise, the packet carries the new sums, meta.agg.overflow collects the top bit of",
              "// every lane that overflowed; the sum is computed twice rather than kept in a field: BMv2",
              "// writes a field's bytes out at every assignment, which costs more at this width) and",
              "// read_ (a completed cell's sums into the packet).",
              "#define AGG_LANE_ACTIONS \\"]
    lines += _actions(lanes, "head", range(0, 1))
    if lanes.chunks > 1:
        lines += _actions(lanes, "rest", range(1, lanes.chunks))
    lines += ["", ""]
    for name, call in (("AGG_LANES_START", "start"), ("AGG_LANES_ADD", "add"), ("AGG_LANES_READ", "read")):
        lines.append(f"#define {name} \\")
        lines.append(f"    {call}_head(); \\")
        if lanes.chunks > 1:
            lines.append(f"    if (hdr.agg_rest.isValid()) {{ {call}_rest(); }} \\")
        lines += ["", ""]
    lines += ["#endif", ""]
    return "\n".join(lines)
