"""The price-list benchmark's programs after p4c: each variant of
basic_router really holds its copies of the construct (none optimised away,
nothing else changed). Compiles P4, hence here and not in tests/unit
(tests/unit/benchmarks/test_construct_costs.py has the arithmetic)."""
import json
from collections import Counter

import pytest

from benchmarks import construct_costs as cc
from benchmarks.cases import compile_case

COPIES = 4


def _shape(case) -> dict[str, int]:
    """What BMv2 will do per packet with `case`'s program, counted in its JSON."""
    program = json.loads(compile_case(case).bmv2_json.read_text())
    types = {t["name"]: t for t in program["header_types"]}
    headers = [h for h in program["headers"] if not h["metadata"]]
    scalars = next(h for h in program["headers"] if h["name"] == "scalars")
    ops = Counter(p["op"] for a in program["actions"] for p in a["primitives"])
    ingress = next(p for p in program["pipelines"] if p["name"] == "ingress")
    return {"headers": len(headers), "fields": len(types[scalars["header_type"]]["fields"]),
            "assign": ops["assign"], "add_header": ops["add_header"], "remove_header": ops["remove_header"],
            "tables": len(ingress["tables"]), "conditionals": len(ingress["conditionals"])}


@pytest.fixture(scope="module")
def shapes() -> dict[str, dict[str, int]]:
    return {c.name.removeprefix("constructs-"): _shape(c) for c in cc.cases(COPIES, cc.OUT_DIR / "constructs-test")}


def test_each_variant_holds_its_copies_and_nothing_else(shapes):
    base = shapes["base"]

    def grown(name: str) -> dict[str, int]:
        return {k: v - base[k] for k, v in shapes[name].items() if v != base[k]}

    assert grown("header") == {"headers": COPIES}
    assert grown("metadata_field") == {"fields": COPIES}
    # One action holding the assignments, called from a table p4c makes for the call.
    assert grown("assignment") == {"fields": COPIES, "assign": COPIES, "tables": 1}
    # Each `if` body is a table of its own (never applied: the condition is never true).
    assert grown("condition") == {"fields": COPIES, "conditionals": COPIES, "tables": COPIES}
    assert grown("set_valid") == {"headers": COPIES, "add_header": COPIES, "remove_header": COPIES, "tables": 1}
    assert grown("keyless_table") == {"tables": COPIES}
    assert grown("table_miss") == {"tables": COPIES}
