"""Collectives over UET's transport (hostagent/rdma/uet_endpoint.py): n ranks,
each a UetEndpoint in its own thread, joined by test_communicator's hub,
which loses, duplicates and delays (reorders) frames. Every result equals
numpy's, though a connection's packets, and its messages, complete in any
order: the endpoint hands each connection's messages up in the order they
were posted. A dead rank is named within the retry limit."""
from __future__ import annotations

import numpy as np
import pytest

from hostagent.collectives import schedule as sc
from hostagent.collectives.communicator import CollectiveError, Communicator, open_communicator
from hostagent.rdma.cc.nscc import Nscc, NsccParams
from hostagent.rdma.cc.rccc import Rccc, RcccParams
from hostagent.rdma.endpoint import Received
from hostagent.rdma.uet import UetParams
from hostagent.rdma.uet_endpoint import UetEndpoint
from tests.unit.hostagent.collectives.test_communicator import Hub, run_all
from tests.unit.hostagent.collectives.test_schedule import expected


def group(n: int, hub: Hub, cc: str = "nscc", timeout_s: float = 30.0, channels: int = 1) -> list[Communicator]:
    ips = [f"10.0.{r + 1}.1" for r in range(n)]
    params = UetParams(mtu_bytes=256, rto_s=0.02, rto_max_s=0.1, ack_delay_s=0.001)
    comms = []
    for r, ip in enumerate(ips):
        make = (lambda: Nscc(NsccParams(line_rate_pps=200_000, base_rtt_s=0.001, mtu_bytes=256))) if cc == "nscc" \
            else (lambda: Rccc(RcccParams(line_rate_pps=200_000, base_rtt_s=0.001, mtu_bytes=256)))
        ep = UetEndpoint(hub.link(ip), ip, f"02:00:00:00:00:{r + 1:02x}", "02:00:00:00:00:fe", params, make,
                         credit_pps=200_000 if cc == "rccc" else None)
        comms.append(Communicator(ep, ips, r, channels=channels, timeout_s=timeout_s))
    return comms


@pytest.mark.parametrize("collective,algorithm", sorted(sc.ALGORITHMS))
def test_each_collective_equals_numpy_over_uet(collective, algorithm):
    n = 3
    xs = [np.random.default_rng([7, r]).integers(-99, 99, 90).astype(np.int32) for r in range(n)]
    out = run_all(group(n, Hub()), lambda c: c.run(collective, algorithm, xs[c.rank]))
    for got, want in zip(out, expected(collective, xs)):
        assert np.array_equal(got, want)


@pytest.mark.parametrize("cc", ["nscc", "rccc"])
@pytest.mark.parametrize("seed", [1, 2])
def test_a_ring_all_reduce_is_exact_under_loss_duplication_and_reordering(cc, seed):
    n = 4
    xs = [np.random.default_rng([seed, r]).integers(-999, 999, 4000).astype(np.int32) for r in range(n)]
    hub = Hub(loss=0.03, dup=0.03, jitter=0.003, seed=seed)
    comms = group(n, hub, cc=cc, channels=2)
    out = run_all(comms, lambda c: (c.run("all-reduce", "ring", xs[c.rank]), c.transport_stats())[0])
    for got in out:
        assert np.array_equal(got, np.sum(xs, axis=0))
    assert hub.lost > 0


def test_messages_that_complete_out_of_order_go_up_in_the_order_posted():
    ep = UetEndpoint(Hub().link("10.0.1.1"), "10.0.1.1", "02:00:00:00:00:01", "02:00:00:00:00:fe", UetParams(),
                     lambda: Nscc())
    got: list[Received] = []
    for msg_id in (1, 2, 0, 4, 3):
        ep._deliver(("10.0.2.1", 0x100), msg_id, Received("10.0.2.1", 0x100, bytes([msg_id]), 0.0), got)
    assert [m.data[0] for m in got] == [0, 1, 2, 3, 4]


def test_a_dead_rank_is_named_within_the_retry_limit():
    hub = Hub(dead={"10.0.3.1"})
    comms = group(3, hub, timeout_s=20.0)
    with pytest.raises(CollectiveError, match=r"rank 2 \(10\.0\.3\.1\)"):
        run_all(comms[:2], lambda c: c.run("all-reduce", "ring", np.ones(64, np.int32)), join_s=30)
    for c in comms:
        c.close()


def test_uet_takes_no_traffic_class_and_rccc_only_on_uet():
    with pytest.raises(ValueError, match="control_dscp is UET's control class"):
        open_communicator(0, ["10.0.1.1", "10.0.2.1"], "lo", "10.0.1.1", "02:00:00:00:00:01", "02:00:00:00:00:fe",
                          mode="go-back-n", control_dscp=46)
    with pytest.raises(ValueError, match="UET is lossy"):
        open_communicator(0, ["10.0.1.1", "10.0.2.1"], "lo", "10.0.1.1", "02:00:00:00:00:01", "02:00:00:00:00:fe",
                          cc="nscc", mode="uet", tclass=3)
    with pytest.raises(ValueError, match="congestion control must be one of .* with mode go-back-n, got 'rccc'"):
        open_communicator(0, ["10.0.1.1", "10.0.2.1"], "lo", "10.0.1.1", "02:00:00:00:00:01", "02:00:00:00:00:fe",
                          cc="rccc", mode="go-back-n")
