"""The depth of every egress queue, as p4src/include/queue_depth.p4 records
it: every packet that leaves a queue writes the depth it met on joining and
the time it left, queue 0 in `queue_depth[port]` / `queue_time[port]`,
queues 1..7 in `class_queue_depth[cell]` / `class_queue_time[cell]` with
cell = priority ++ port. Read over BMv2 Thrift (PI serves no register reads).

    sample = read(thrift, port=3, queue=0)   # QueueSample(time_us, depth) or None: no packet yet

A cell that was never written (time 0) decodes to None, never to depth 0:
a queue no packet has used was not measured. A reader that polls tells a
fresh measurement from an old one by its time (`fresh`). Depth and time are
two registers read one after the other, time first: a packet leaving
between the two reads pairs an older time with its own depth, so a time
that moved always comes with a depth at least as recent (the worst case is
a sample one read late, never a new time with an old depth).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

from control.p4constants import constants

DEPTH, TIME = "queue_depth", "queue_time"                          # queue 0, index = port
CLASS_DEPTH, CLASS_TIME = "class_queue_depth", "class_queue_time"  # queues 1..7, index = cell()
QUEUES = 8                        # standard_metadata.priority: 3 bits
PORTS = constants()["PORT_COUNT"]  # 9-bit port numbers: one cell each

QueueKey = tuple[int, int]        # (port, priority queue)


@dataclass(frozen=True)
class QueueSample:
    """What the last packet to leave one queue recorded: when it left (us
    on the switch's clock, since it started) and the depth it met on joining
    (packets, its own priority queue's, itself not counted)."""
    time_us: int
    depth: int


def cell(port: int, queue: int) -> int:
    """The class registers' index of (port, priority queue 1..7): queue ++ port."""
    if not 1 <= queue < QUEUES:
        raise ValueError(f"queue {queue} is not a class queue 1..{QUEUES - 1} (queue 0 is indexed by port)")
    return queue * PORTS + where(port)[2]


def where(port: int, queue: int = 0) -> tuple[str, str, int]:
    """(depth register, time register, index) of one queue."""
    if not 0 <= port < PORTS:
        raise ValueError(f"port {port} is not a 9-bit port number")
    return (DEPTH, TIME, port) if queue == 0 else (CLASS_DEPTH, CLASS_TIME, cell(port, queue))


def decode(depth: int, time_us: int) -> Optional[QueueSample]:
    """One cell's two values -> its sample, or None for a cell never written."""
    return None if time_us == 0 else QueueSample(int(time_us), int(depth))


def decode_all(depths: Sequence[int], times: Sequence[int], class_depths: Sequence[int] = (),
               class_times: Sequence[int] = ()) -> dict[QueueKey, QueueSample]:
    """The four registers (as Thrift reads them whole) -> {(port, queue):
    sample} for every cell that was written."""
    cells = [((port, 0), d, t) for port, (d, t) in enumerate(zip(depths, times))]
    cells += [(divmod(index, PORTS)[::-1], d, t) for index, (d, t) in enumerate(zip(class_depths, class_times))
              if index >= PORTS]          # cells of priority 0 are never written: queue 0 is by port
    return {key: sample for key, d, t in cells if (sample := decode(d, t)) is not None}


def fresh(now: dict[QueueKey, QueueSample],
          before: Optional[dict[QueueKey, QueueSample]]) -> dict[QueueKey, QueueSample]:
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
    depth, time, index = where(port, queue)
    time_us = int(thrift.register_read(time, index))        # time first: see above
    return decode(int(thrift.register_read(depth, index)), time_us)


def read_all(thrift, queues: int = QUEUES) -> dict[QueueKey, QueueSample]:
    """Every queue's last sample of one switch with `queues` priority queues
    per port: four register reads (times first: see above), two when it has
    only queue 0 (the class registers, 8 x 512 cells, are then never written
    and cost most of the read)."""
    if queues <= 1:
        times = thrift.register_read(TIME)
        return decode_all(thrift.register_read(DEPTH), times)
    times, class_times = thrift.register_read(TIME), thrift.register_read(CLASS_TIME)
    return decode_all(thrift.register_read(DEPTH), times, thrift.register_read(CLASS_DEPTH), class_times)


def clear(thrift, port: int, queue: int = 0) -> None:
    """Forget one queue's sample (an experiment's clean start)."""
    depth, time, index = where(port, queue)
    thrift.register_write(depth, index, 0)      # depth first: a packet between the two writes is lost, not
    thrift.register_write(time, index, 0)       # turned into an empty queue at its time
