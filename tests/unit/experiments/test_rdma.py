"""The RDMA experiment's budget: a run asks for the cost of the phases it
runs, not of the largest incast whatever it runs."""
from __future__ import annotations

from experiments import rdma
from emulator.calibration import demand

TOPO = rdma.with_int_to_host(rdma.REPO / "topologies" / "incast-leaf-spine.yaml")


def cost(phases, senders=16) -> float:
    return demand(TOPO, rdma.phase_demand(TOPO, phases, senders), ack_share=0.25).traversals_pps


def test_the_loss_and_spray_phases_ask_for_one_flow_at_the_bottleneck_rate():
    (flow,) = rdma.phase_demand(TOPO, ["loss", "spray"], 16)
    assert (flow.src, flow.dst, flow.pps) == ("h1", rdma.RECEIVER, rdma.bottleneck_pps(TOPO))


def test_the_most_demanding_phase_sets_the_demand():
    assert cost(["loss"]) < cost(["mix"]) < cost(["converge"]) < cost(["incast"])
    assert cost(["loss", "incast"]) == cost(["incast"]) > cost(["incast"], senders=4)
    assert cost(["spray", "mix"]) == cost(["mix"])
