"""The depth of every egress queue, as p4src/include/queue_depth.p4 records
it: register `queue_depth`, one cell per (port, priority queue), written by
every packet that leaves the queue with the depth it met on joining and the
time it left. Read over BMv2 Thrift (PI serves no register reads).

    sample = read(thrift, port=3, queue=0)   # QueueSample(time_us, depth) or None: no packet yet

A cell that was never written decodes to None, never to depth 0: a queue no
packet has used was not measured. A reader that polls tells a fresh
measurement from an old one by its time (`fresh`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Optional

REGISTER = "queue_depth"
QUEUES = 8                        # standard_metadata.priority: 3 bits
PORTS = 512                       # 9-bit port numbers (PORT_COUNT in defines.p4)
CELLS = PORTS * QUEUES
DEPTH_BITS = 19                   # enq_qdepth
DEPTH_MASK = (1 << DEPTH_BITS) - 1
TIME_BITS = 45                    # egress_global_timestamp[44:0], us: wraps after 407 days


@dataclass(frozen=True)
class QueueSample:
    """What the last packet to leave one queue recorded: when it left (us
    on the switch's clock, since it started) and the depth it met on joining
    (packets, its own priority queue's, itself not counted)."""
    time_us: int
    depth: int


def cell(port: int, queue: int = 0) -> int:
    """The register index of (port, priority queue): port ++ queue."""
    if not 0 <= port < PORTS:
        raise ValueError(f"port {port} is not a 9-bit port number")
    if not 0 <= queue < QUEUES:
        raise ValueError(f"queue {queue} is not a priority queue 0..{QUEUES - 1}")
    return port * QUEUES + queue


def encode(sample: QueueSample) -> int:
    """The cell value the pipeline writes for `sample` (tests and fakes)."""
    if not 0 <= sample.depth <= DEPTH_MASK or not 0 <= sample.time_us < 1 << TIME_BITS:
        raise ValueError(f"{sample} does not fit {TIME_BITS} + {DEPTH_BITS} bits")
    return sample.time_us << DEPTH_BITS | sample.depth


def decode(value: int) -> Optional[QueueSample]:
    """A cell's value -> its sample, or None for a cell never written."""
    if value == 0:
        return None
    return QueueSample(value >> DEPTH_BITS, value & DEPTH_MASK)


def decode_all(values: Iterable[int]) -> dict[tuple[int, int], QueueSample]:
    """The whole register (as Thrift reads it) -> {(port, queue): sample} for
    every cell that was written."""
    out = {}
    for index, value in enumerate(values):
        sample = decode(int(value))
        if sample is not None:
            out[divmod(index, QUEUES)] = sample
    return out


def fresh(now: dict[tuple[int, int], QueueSample],
          before: Optional[dict[tuple[int, int], QueueSample]]) -> dict[tuple[int, int], QueueSample]:
    """The samples of `now` that a packet wrote since `before` (an earlier
    read of the same switch): the queues measured in between. Without an
    earlier read nothing is known to be recent, so nothing is fresh. A time
    that went backwards is a restarted switch: its cells are all new."""
    if before is None:
        return {}
    restarted = any(key in before and s.time_us < before[key].time_us for key, s in now.items())
    return {key: s for key, s in now.items()
            if restarted or key not in before or s.time_us != before[key].time_us}


def read(thrift, port: int, queue: int = 0) -> Optional[QueueSample]:
    """One queue's last sample over `thrift` (emulator.bmv2_thrift.Bmv2Thrift)."""
    return decode(int(thrift.register_read(REGISTER, cell(port, queue))))


def clear(thrift, port: int, queue: int = 0) -> None:
    """Forget one queue's sample (an experiment's clean start)."""
    thrift.register_write(REGISTER, cell(port, queue), 0)
