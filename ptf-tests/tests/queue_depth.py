"""PTF tests of the queue depth record (p4src/include/queue_depth.p4): every
packet leaving a queue writes the depth it met and the time it left into
the cell of its (port, queue), with every feature off; a queue no packet
left has no sample; an empty queue reads depth 0 at a later time. (Per
class: lossless.DscpToClassAndQueueTest.)

A queue is built as in the ECN tests: the egress port is served at 20
packets/s over Thrift and a burst arrives much faster, so packet i of the
burst joins behind about i others."""
from __future__ import annotations

from ptf_lib.base_test import HOST_MAC, SWITCH_MAC, P4RuntimeTest

from emulator import queue_depth
from emulator.bmv2_thrift import Bmv2Thrift
from hostagent.sender import RawSender
from wire.roce import roce_data

IN_PORT, OUT_PORT = 1, 2
UNLIMITED_PPS = 10_000_000


def data_packet(seq: int) -> bytes:
    return bytes(roce_data(HOST_MAC, SWITCH_MAC, "10.9.0.1", "10.0.0.2", qp=7, psn=seq, payload=200))


class QueueDepthTest(P4RuntimeTest):
    def setUp(self):
        super().setUp()
        self.dataplane.set_qlen(10_000)
        self.thrift = Bmv2Thrift(self.thrift_port)
        self.route_all_to(OUT_PORT)      # forwarding entries only: every feature off
        for queue in range(queue_depth.QUEUES):
            for port in (IN_PORT, OUT_PORT):
                queue_depth.clear(self.thrift, port, queue)

    def tearDown(self):
        try:
            self.thrift.set_queue_rate(OUT_PORT, UNLIMITED_PPS)
            self.thrift.close()
        finally:
            super().tearDown()

    def send(self, count: int, rate_pps: int) -> None:
        self.thrift.set_queue_rate(OUT_PORT, rate_pps)
        with RawSender(self.iface(IN_PORT)) as tx:
            for seq in range(count):
                tx.send(data_packet(seq))
        frames = self.receive_all(OUT_PORT, timeout=max(1.0, 3.0 / rate_pps))
        self.assertEqual(len(frames), count, "nothing may be lost")


class DepthRecordedWithEveryFeatureOffTest(QueueDepthTest):
    def runTest(self):
        self.assertIsNone(queue_depth.read(self.thrift, OUT_PORT), "cleared: no sample")
        self.send(12, rate_pps=20)
        burst = queue_depth.read(self.thrift, OUT_PORT)
        self.assertIsNotNone(burst)
        # The last packet of a 12-packet burst into a slow port waited behind most of the burst.
        self.assertGreaterEqual(burst.depth, 8, f"{burst}")
        self.assertGreater(burst.time_us, 0)
        others = {(p, q): queue_depth.read(self.thrift, p, q) for p in (IN_PORT, OUT_PORT)
                  for q in range(queue_depth.QUEUES) if (p, q) != (OUT_PORT, 0)}
        self.assertEqual({k: s for k, s in others.items() if s is not None}, {},
                         "only the queue the packets left has a sample")

        self.send(1, rate_pps=UNLIMITED_PPS)
        idle = queue_depth.read(self.thrift, OUT_PORT)
        self.assertEqual(idle.depth, 0, "a packet into an empty queue met depth 0")
        self.assertGreater(idle.time_us, burst.time_us, "a new sample: its time moved on")
