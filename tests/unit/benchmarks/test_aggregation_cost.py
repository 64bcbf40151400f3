"""The aggregated element's price list: each block size is measured against
plain UDP frames of exactly the aggregation frames' length, and an
element's cost is what summing adds to forwarding those bytes, per element."""
from scapy.layers.l2 import Ether

from benchmarks import aggregation_cost as ac
from wire import aggregation as ah


def test_each_block_size_is_measured_against_plain_udp_of_the_same_length():
    sizes = ac.size_cases()
    assert [n for n, _, _ in sizes] == list(ah.BLOCK_SIZES)
    for n, agg, udp in sizes:
        assert {len(f) for f in agg.frames} == {len(f) for f in udp.frames} == {ac.frame_bytes(n)}
        parsed = Ether(agg.frames[0])[ah.Aggregation]
        assert len(parsed.elements) == n
        assert ah.Aggregation not in Ether(udp.frames[0])
        assert agg.source == udp.source and agg.defines == udp.defines == ()


def test_an_elements_cost_is_what_summing_adds_per_element():
    sizes = ac.size_cases((64, 256))
    counts = {sizes[0][1].name: 200_000.0, sizes[0][2].name: 136_000.0,
              sizes[1][1].name: 250_000.0, sizes[1][2].name: 140_000.0}
    rows = ac.rows(counts, sizes)
    assert [(r["block_elements"], r["per_element"], r["vs_plain_udp"]) for r in rows] == [(64, 1000, 1.47),
                                                                                          (256, 430, 1.79)]
    assert "| 256 | 1078 B | 250.0k | 140.0k | 1.79x | 430 | 977 |" in ac.table(rows)
