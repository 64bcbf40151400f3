"""The price-list benchmark's arithmetic: a construct's cost is its variant
minus its reference, per copy, and a variant is made at the construct's
anchor in basic_router. That each compiled variant holds its copies and
nothing else needs p4c: tests/e2e/test_construct_costs.py."""
import pytest

from benchmarks import construct_costs as cc


def test_a_construct_costs_its_variant_minus_its_reference_per_copy():
    counts = {"constructs-base": 50_000.0, **{f"constructs-{c.name}": 50_000.0 for c in cc.CONSTRUCTS}}
    counts["constructs-metadata_field"] = 50_000.0 + 16 * 600
    counts["constructs-assignment"] = counts["constructs-metadata_field"] + 16 * 1000
    rows = {r["construct"]: r for r in cc.costs(counts, 16)}
    assert rows["metadata_field"]["each"] == 600          # against the base
    assert rows["assignment"]["each"] == 1000             # against the variant with its fields
    assert rows["assignment"]["measured_against"] == "metadata_field"
    assert "| `assignment` | meta.f = hdr.ipv4.src_addr in an action | 75.6k | 1000 | metadata_field |" \
        in cc.table(list(rows.values()), 50_000.0, 16)


def test_a_moved_anchor_in_basic_router_is_named(monkeypatch, tmp_path):
    moved = tmp_path / "basic_router.p4"
    moved.write_text(cc.BASE.read_text().replace(cc.ANCHORS["emit"], ""))
    monkeypatch.setattr(cc, "BASE", moved)
    with pytest.raises(RuntimeError, match="packet.emit"):
        cc.variant_source(cc.CONSTRUCTS[0], 2)
