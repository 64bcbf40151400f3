"""The callgrind benchmark's reporting (each feature's cost while off and
on), and the programs it compares: one with every feature compiled out, and
the fabric minus each feature."""
from benchmarks import instructions_per_packet as ipp
from benchmarks.cases import MAIN, off_cases, without
from features import FEATURES


def test_off_cost_is_the_fabric_minus_the_fabric_without_the_feature():
    summary = {s["program"]: s for s in ipp.summarise([
        {"program": "basic_router", "instructions_per_packet": 50_000},
        {"program": "fabric", "instructions_per_packet": 100_000},
        {"program": "fabric-int", "instructions_per_packet": 80_000},
        {"program": "fabric+int", "instructions_per_packet": 250_000}])}
    assert summary["fabric"]["vs_basic_router"] == 2.0
    assert summary["fabric-int"]["feature_cost"] == "off: +20000 (+20.0% of fabric)"
    assert summary["fabric+int"]["feature_cost"] == "on: +150000 (+150.0%)"
    assert summary["basic_router"]["feature_cost"] == ""
    table = ipp.table(list(summary.values()), {n: n for n in summary})
    assert "| `fabric-int` | fabric-int | 80.0k | 1.6 | 0.8 | off: +20000 (+20.0% of fabric) |" in table


def test_each_feature_has_a_compile_out_switch_that_the_p4_source_knows():
    """WITHOUT_<FEATURE> for every registered feature appears in the P4
    sources, so a new feature cannot be benchmarked as 'compiled out' while
    still compiled in."""
    sources = "".join(p.read_text() for p in [MAIN, *MAIN.parent.glob("include/*.p4")])
    for feature in FEATURES:
        assert f"#ifndef {without(feature)}" in sources, without(feature)


def test_the_forwarding_only_case_compiles_every_feature_out_and_each_minus_case_one():
    named = {c.name: c for c in off_cases()}
    assert set(named["forwarding_only"].defines) == {without(f) for f in FEATURES}
    assert named["fabric"].defines == ()
    for f in FEATURES:
        assert named[f"fabric-{f.section}"].defines == (without(f),)
    # the queue depth recorder is no feature but is priced the same way, by its own switch
    assert named["fabric-queue_depth"].defines == ("WITHOUT_QUEUE_DEPTH",)
    assert "#ifndef WITHOUT_QUEUE_DEPTH" in MAIN.read_text()


def test_each_drop_case_offers_a_frame_dropped_for_its_reason():
    """The drop rows' frames are what their reason says, read back with
    Scapy, and each reason is one the switch counts (defines.p4)."""
    from scapy.layers.inet import IP
    from scapy.layers.l2 import Ether

    from benchmarks.cases import DST_IP, drop_cases
    from control.p4constants import drop_reasons

    named = {c.name: c for c in drop_cases()}
    assert set(named) == {"drop:no-route", "drop:ttl-expired", "drop:bad-checksum", "drop:parser-error"}
    for case in named.values():
        assert case.drop_reason in drop_reasons(), case.drop_reason
        assert case.defines == () and case.state is not None, "the fabric as shipped, routed, every feature off"
    ip = {name: Ether(c.frames[0])[IP] for name, c in named.items()}
    assert ip["drop:no-route"].dst != DST_IP and ip["drop:no-route"].ttl > 1
    assert ip["drop:ttl-expired"].ttl == 1 and ip["drop:ttl-expired"].dst == DST_IP
    bad = ip["drop:bad-checksum"]
    right = bad.copy()
    del right.chksum                        # Scapy computes it again
    assert bad.chksum != IP(bytes(right)).chksum and bad.dst == DST_IP
    assert ip["drop:parser-error"].ihl > 5, "IPv4 options: the parser refuses them"
