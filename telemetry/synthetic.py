"""Synthetic telemetry reports, built with the reference model of
wire/int_telemetry.py (source -> transit -> sink -> report) along real
paths of a topology: to try the collector and the dashboards without the
P4 data plane, and to feed the tests known values.

    python -m telemetry.synthetic --topology topologies/leaf-spine.yaml \\
        [--to 127.0.0.1:32766] [--rate 20] [--duration 30]

sends, every round, one tracked-flow report per host pair (alternating
ECMP paths), plus drop and congestion reports, with sequence numbers per
reporting switch as a switch would number them.
"""
from __future__ import annotations

import argparse
import socket
import sys
import time
from dataclasses import dataclass
from typing import Iterator, Optional

from scapy.layers.inet import IP, TCP, UDP
from scapy.packet import Raw

from wire.int_telemetry import (DS_LINK_RATE, DS_TX_BYTES, DS_TX_TIMESTAMP, FABRIC_DS_ID, INS_EGRESS_TS,
                                   INS_HOP_LATENCY, INS_INGRESS_TS, INS_L1_PORTS, INS_NODE_ID, INS_QUEUE,
                                   REPORT_UDP_PORT, SEQ_MODULUS, HopMetadata, int_report, int_source, int_transit)
from control.topology import TopologyError
from features import load_topology

FLOW_INSTRUCTIONS = INS_NODE_ID | INS_L1_PORTS | INS_HOP_LATENCY | INS_QUEUE | INS_INGRESS_TS | INS_EGRESS_TS
HPCC_DS = DS_TX_BYTES | DS_TX_TIMESTAMP | DS_LINK_RATE
PAYLOAD = 64  # bytes of the data packets' payload, cut from the reports


@dataclass(frozen=True)
class Hop:
    node_id: int
    ingress_port: int
    egress_port: int


@dataclass(frozen=True)
class Flow:
    src_ip: str
    dst_ip: str
    sport: int
    dport: int
    proto: str = "udp"   # "udp" | "tcp"

    @property
    def label(self) -> str:
        """The collector's flow label (telemetry.decode.InnerPacket.flow)."""
        return f"{self.src_ip}:{self.sport}>{self.dst_ip}:{self.dport}/{self.proto}"

    def packet(self, payload: int = 0):
        l4 = UDP(sport=self.sport, dport=self.dport) if self.proto == "udp" else \
            TCP(sport=self.sport, dport=self.dport, flags="A")
        return IP(src=self.src_ip, dst=self.dst_ip) / l4 / Raw(b"\x00" * payload)


def hop_metadata(hop: Hop, *, ingress_ts: int, latency: int, queue: int, tx_bytes: Optional[int] = None,
                 link_rate_mbps: Optional[int] = None) -> HopMetadata:
    return HopMetadata(node_id=hop.node_id, ingress_port=hop.ingress_port, egress_port=hop.egress_port,
                       hop_latency=latency, queue_id=0, queue_occupancy=queue, ingress_ts=ingress_ts,
                       egress_ts=ingress_ts + latency, tx_bytes=tx_bytes,
                       tx_timestamp=None if tx_bytes is None else (ingress_ts + latency) % (1 << 32),
                       link_rate_mbps=link_rate_mbps)


def flow_report(flow: Flow, path: list[Hop], *, seq_no: int, start_ts: int, latencies: list[int],
                queues: list[int], link_delay: int = 5, tx_bytes: Optional[list[int]] = None,
                hw_id: int = 0) -> bytes:
    """The sink's (path[-1]) report of one packet of `flow` along `path`:
    path[0] is the source, the middle hops transit, the sink puts its own
    metadata in the report (a one-switch path: source and sink are one node,
    its metadata on the stack). Timestamps advance by each hop's latency plus
    `link_delay`; e2e latency = sum(latencies) + link_delay * (len(path) - 1)."""
    if not path or len(latencies) != len(path) or len(queues) != len(path):
        raise ValueError("a path needs at least one switch, and one latency and queue value per hop")
    metas, ts = [], start_ts
    for i, hop in enumerate(path):
        metas.append(hop_metadata(hop, ingress_ts=ts, latency=latencies[i], queue=queues[i],
                                  tx_bytes=None if tx_bytes is None else tx_bytes[i],
                                  link_rate_mbps=None if tx_bytes is None else 100))
        ts += latencies[i] + link_delay
    ds_id, ds_instruction = (FABRIC_DS_ID, HPCC_DS) if tx_bytes is not None else (0, 0)   # 0: int_source's defaults
    pkt = int_source(flow.packet(PAYLOAD), metas[0], instructions=FLOW_INSTRUCTIONS, max_hops=8,
                     ds_id=ds_id, ds_instruction=ds_instruction)
    for meta in metas[1:-1]:
        pkt = int_transit(pkt, meta)
    sink = metas[-1]
    return bytes(int_report(pkt, node_id=path[-1].node_id, seq_no=seq_no % SEQ_MODULUS, hw_id=hw_id,
                            metadata=HopMetadata(ingress_port=sink.ingress_port, egress_port=sink.egress_port,
                                                 hop_latency=sink.hop_latency, queue_id=sink.queue_id,
                                                 queue_occupancy=sink.queue_occupancy,
                                                 ingress_ts=sink.ingress_ts, egress_ts=sink.egress_ts,
                                                 tx_bytes=sink.tx_bytes, tx_timestamp=sink.tx_timestamp,
                                                 link_rate_mbps=sink.link_rate_mbps),
                            truncate=len(pkt) - PAYLOAD))  # the report keeps headers and INT, not the payload


def drop_report(flow: Flow, *, node_id: int, seq_no: int, reason: int, queue_id: int = 0, hw_id: int = 0) -> bytes:
    """A drop report (D=1, RepMdBits bit 15) for a packet of `flow`."""
    return bytes(int_report(flow.packet(), node_id=node_id, seq_no=seq_no % SEQ_MODULUS, hw_id=hw_id,
                            dropped=True, tracked_flow=False,
                            metadata=HopMetadata(drop_queue_id=queue_id, drop_reason=reason)))


def congestion_report(flow: Flow, *, node_id: int, seq_no: int, queue_id: int, occupancy: int,
                      egress_port: int, hw_id: int = 0) -> bytes:
    """A queue congestion report (Q=1) with the queue's id and occupancy."""
    return bytes(int_report(flow.packet(), node_id=node_id, seq_no=seq_no % SEQ_MODULUS, hw_id=hw_id,
                            congested=True, tracked_flow=False,
                            metadata=HopMetadata(ingress_port=0, egress_port=egress_port, queue_id=queue_id,
                                                 queue_occupancy=occupancy)))


def topology_path(topo, src: str, dst: str, choice: int = 0) -> list[Hop]:
    """The switches from host `src` to host `dst`, taking ECMP member
    `choice` (mod the set size) at every switch; node id = device id."""
    routes = topo.routes()
    host_src, host_dst = topo.hosts[src], topo.hosts[dst]
    sw, in_port, hops = host_src.switch, host_src.switch_port, []
    for _ in range(len(topo.switches) + 1):
        route = next(r for r in routes[sw] if r.host == dst)
        nh = route.next_hops[choice % len(route.next_hops)]
        hops.append(Hop(topo.switches[sw].device_id, in_port, nh.port))
        if nh.peer == host_dst.name:
            return hops
        port = topo.switches[sw].ports[nh.port]
        sw, in_port = port.peer, port.peer_port
    raise ValueError(f"no loop-free path from {src} to {dst}")


class SyntheticFabric:
    """Rounds of reports over a topology: every host pair's flow, drops at
    the first switch with reason NO_ROUTE, congestion at a spine/second hop."""

    def __init__(self, topo, drop_reason: int = 4):
        self.topo = topo
        self.drop_reason = drop_reason
        self.seq: dict[int, int] = {}
        self.round = 0
        hosts = list(topo.hosts.values())
        self.pairs = [(a, b) for a in hosts for b in hosts if a.name != b.name]

    def _seq(self, node_id: int) -> int:
        n = self.seq.get(node_id, 0)
        self.seq[node_id] = n + 1
        return n

    def next_round(self) -> Iterator[bytes]:
        r = self.round
        self.round += 1
        for i, (a, b) in enumerate(self.pairs):
            path = topology_path(self.topo, a.name, b.name, choice=r + i)
            flow = Flow(a.ip, b.ip, 49152 + i, 4791)
            queues = [(r * 3 + i + k) % 20 for k in range(len(path))]
            latencies = [20 + 5 * q for q in queues]
            tx = [(r * 150_000 + k * 1000) % (1 << 32) for k in range(len(path))]
            yield flow_report(flow, path, seq_no=self._seq(path[-1].node_id), start_ts=1_000_000 + r * 10_000,
                              latencies=latencies, queues=queues, tx_bytes=tx)
            if (r + i) % 7 == 0:
                yield drop_report(flow, node_id=path[0].node_id, seq_no=self._seq(path[0].node_id),
                                  reason=self.drop_reason)
            if (r + i) % 5 == 0 and len(path) > 1:
                yield congestion_report(flow, node_id=path[1].node_id, seq_no=self._seq(path[1].node_id),
                                        queue_id=0, occupancy=queues[1] + 30, egress_port=path[1].egress_port)


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m telemetry.synthetic", description=__doc__.split("\n\n")[0])
    ap.add_argument("--topology", "-t", required=True, help="topology YAML")
    ap.add_argument("--to", default=f"127.0.0.1:{REPORT_UDP_PORT}", help="collector host:port (default: %(default)s)")
    ap.add_argument("--rate", type=float, default=5.0, help="rounds per second (default: %(default)s)")
    ap.add_argument("--duration", type=float, default=30.0, help="seconds (default: %(default)s)")
    args = ap.parse_args(argv)
    try:
        topo = load_topology(args.topology)
    except TopologyError as exc:
        print(f"synthetic: error: {exc}", file=sys.stderr)
        return 2
    host, _, port = args.to.rpartition(":")
    fabric = SyntheticFabric(topo)
    sent = 0
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        end = time.monotonic() + args.duration
        while time.monotonic() < end:
            for data in fabric.next_round():
                sock.sendto(data, (host, int(port)))
                sent += 1
            time.sleep(1.0 / args.rate)
    print(f"synthetic: sent {sent} reports in {fabric.round} rounds to udp {host}:{port}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
