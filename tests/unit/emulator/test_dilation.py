"""Time dilation (emulator/dilation.py): rates divided, time constants
multiplied, by what their names say they are; counts left alone; what is
given taken as it is; a topology's links and sections slowed, a copy."""
import math

import pytest
import yaml

from emulator.dilation import Dilation, DilationError, kind
from hostagent.ecn.dcqcn import DcqcnParams
from hostagent.rdma.cc.hpcc import HpccParams
from hostagent.rdma.cc.swift import SwiftParams
from hostagent.rdma.transport import TransportParams


def test_a_name_says_what_a_parameter_is():
    assert [kind(n) for n in ("rto_s", "delay_ms", "hop_us", "line_rate_pps", "bandwidth_mbps", "eta",
                              "byte_counter_bytes", "queue_packets")] == \
        ["time", "time", "time", "rate", "rate", None, None, None]


def test_parameters_dilate_by_their_units_and_what_is_given_stays():
    d = Dilation(4)
    hpcc = d.params(HpccParams, line_rate_pps=208.25)
    assert hpcc.line_rate_pps == 208.25 and hpcc.base_rtt_s == 4 * HpccParams.base_rtt_s
    assert hpcc.eta == HpccParams.eta and hpcc.max_stage == HpccParams.max_stage
    # the window HPCC aims at is the same number of packets: rate / D x time x D
    assert math.isclose(hpcc.line_rate_pps * hpcc.base_rtt_s, 833 * HpccParams.base_rtt_s)
    dcqcn = d.params(DcqcnParams, line_rate_pps=200.0)
    assert (dcqcn.rate_timer_s, dcqcn.r_ai_pps, dcqcn.min_rate_pps) == \
        (4 * DcqcnParams.rate_timer_s, DcqcnParams.r_ai_pps / 4, DcqcnParams.min_rate_pps / 4)
    assert dcqcn.byte_counter_bytes == DcqcnParams.byte_counter_bytes and dcqcn.g == DcqcnParams.g
    swift = d.params(SwiftParams)
    assert (swift.base_target_s, swift.per_hop_s, swift.max_cwnd) == \
        (4 * SwiftParams.base_target_s, 4 * SwiftParams.per_hop_s, SwiftParams.max_cwnd)
    transport = d.params(TransportParams, mode="go-back-n", rto_s=0.5)
    assert transport.rto_s == 0.5 and transport.rto_max_s == 4 * TransportParams.rto_max_s
    assert transport.max_outstanding == TransportParams.max_outstanding


def test_no_dilation_changes_nothing():
    assert Dilation().params(HpccParams) == HpccParams()
    assert str(Dilation()) == "none" and str(Dilation(2.5)) == "x2.5"


@pytest.mark.parametrize("bad", [0.5, 0, -2, float("nan"), float("inf")])
def test_a_factor_below_one_or_not_a_number_is_refused(bad):
    with pytest.raises(DilationError, match="dilation factor"):
        Dilation(bad)


def test_a_budget_s_factor_is_rounded_up_to_a_quarter():
    assert [Dilation.rounded_up(f).factor for f in (0.3, 1.0, 1.01, 4.01, 2.5)] == [1.0, 1.0, 1.25, 4.25, 2.5]


def test_a_topology_s_links_and_sections_slow_down_and_the_original_is_left():
    raw = yaml.safe_load("""
name: t
defaults:
  link: {bandwidth_mbps: 10}
links:
  - [h1, s1]
  - {a: s1, b: s2, bandwidth_mbps: 100, delay_ms: 2}
lossless:
  queues: 8
  pfc: {xoff: 24, xon: 12, headroom: 64, watchdog_ms: 100}
  hold_rate_pps: 500
""")
    slow = Dilation(4).topology(raw)
    assert slow["defaults"]["link"]["bandwidth_mbps"] == 2.5
    assert slow["links"][0] == ["h1", "s1"]
    assert slow["links"][1] == {"a": "s1", "b": "s2", "bandwidth_mbps": 25.0, "delay_ms": 8}
    assert slow["lossless"]["hold_rate_pps"] == 125 and slow["lossless"]["pfc"] == \
        {"xoff": 24, "xon": 12, "headroom": 64, "watchdog_ms": 400}
    assert raw["defaults"]["link"]["bandwidth_mbps"] == 10 and raw["lossless"]["hold_rate_pps"] == 500
    # whole numbers stay whole: a hold rate of 500 packets/s at x7.5
    assert Dilation(7.5).topology(raw)["lossless"]["hold_rate_pps"] == 67
    # a file without defaults gets the default link rate, dilated
    assert Dilation(2).topology({"links": []})["defaults"]["link"]["bandwidth_mbps"] == 50.0


def test_a_dilated_fabric_s_section_is_stated_undilated_and_dilates_back_to_itself():
    """What fabric tune --validate derived at x4 is written as a topology
    file states it (times / 4, rates x 4, whole numbers whole); a run at x4
    dilates it back to what was validated."""
    at_4 = {"hold_rate_pps": 2083, "watchdog": {"detect_ms": 800.0, "restore_ms": 1600, "action": "drop"},
            "pfc": {"xoff": 6, "xon": 4, "headroom": 5}}
    stated = Dilation(4).undilated(at_4)
    assert stated == {"hold_rate_pps": 8332, "watchdog": {"detect_ms": 200.0, "restore_ms": 400, "action": "drop"},
                      "pfc": {"xoff": 6, "xon": 4, "headroom": 5}}
    assert at_4["watchdog"]["detect_ms"] == 800.0                       # a copy
    back = Dilation(4).topology({"links": [], "lossless": stated})["lossless"]
    assert back == at_4
    assert Dilation().undilated(at_4) == at_4
