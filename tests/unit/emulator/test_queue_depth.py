"""The queue depth registers' layout (p4src/include/queue_depth.p4) and how
a reader tells a fresh measurement from an old one or from none."""
import pytest

from emulator import queue_depth as qd
from emulator.queue_depth import QueueSample


def test_queue_0_is_indexed_by_port_the_class_queues_by_priority_then_port():
    assert qd.where(3) == (qd.DEPTH, qd.TIME, 3)
    assert qd.where(3, 5) == (qd.CLASS_DEPTH, qd.CLASS_TIME, 5 * 512 + 3)     # priority ++ port
    assert qd.cell(511, 7) == 8 * 512 - 1
    with pytest.raises(ValueError, match="port 512"):
        qd.where(512)
    with pytest.raises(ValueError, match="queue 8"):
        qd.where(1, 8)
    with pytest.raises(ValueError, match="queue 0 is indexed by port"):
        qd.cell(1, 0)


def test_a_cell_without_a_time_was_never_written():
    assert qd.decode(48, 1_000_000) == QueueSample(1_000_000, 48)
    assert qd.decode(0, 7) == QueueSample(7, 0), "an empty queue at a time is a measurement: depth 0"
    assert qd.decode(0, 0) is None, "a cell never written is no measurement"


def test_decode_all_keys_written_cells_by_port_and_queue():
    depths, times = [0] * 512, [0] * 512
    class_depths, class_times = [0] * 4096, [0] * 4096
    depths[2], times[2] = 6, 10
    times[4] = 12                                   # queue 0 of port 4: empty when measured
    class_depths[qd.cell(2, 3)], class_times[qd.cell(2, 3)] = 9, 11
    class_depths[2], class_times[2] = 99, 99      # priority 0's class cells: never written by the pipeline
    assert qd.decode_all(depths, times, class_depths, class_times) == {
        (2, 0): QueueSample(10, 6), (4, 0): QueueSample(12, 0), (2, 3): QueueSample(11, 9)}


def test_fresh_is_what_a_packet_wrote_since_the_previous_read():
    before = {(1, 0): QueueSample(100, 5), (2, 0): QueueSample(100, 60)}
    now = {(1, 0): QueueSample(100, 5), (2, 0): QueueSample(250, 61), (3, 1): QueueSample(240, 0)}
    assert qd.fresh(now, before) == {(2, 0): QueueSample(250, 61), (3, 1): QueueSample(240, 0)}, \
        "queue (1, 0) saw no packet since: idle, not measured"
    assert qd.fresh(now, None) == {}, "a first read cannot tell a recent sample from an old one"


def test_a_clock_that_went_back_is_a_restarted_switch_and_all_its_samples_are_new():
    before = {(1, 0): QueueSample(5_000_000, 5), (2, 0): QueueSample(5_000_000, 3)}
    now = {(1, 0): QueueSample(2_000, 1), (2, 0): QueueSample(5_000_000, 3)}
    assert qd.fresh(now, before) == now


class FakeThrift:
    """BMv2's registers as Thrift shows them: whole arrays or one cell."""

    def __init__(self):
        self.registers = {qd.DEPTH: [0] * 512, qd.TIME: [0] * 512, qd.CLASS_DEPTH: [0] * 4096,
                          qd.CLASS_TIME: [0] * 4096}

    def register_read(self, name, index=None):
        return list(self.registers[name]) if index is None else self.registers[name][index]

    def register_write(self, name, index, value):
        self.registers[name][index] = value


def test_read_clear_and_read_all_address_each_queue():
    thrift = FakeThrift()
    assert qd.read(thrift, 4, 3) is None
    thrift.register_write(qd.CLASS_DEPTH, qd.cell(4, 3), 12)
    thrift.register_write(qd.CLASS_TIME, qd.cell(4, 3), 9)
    thrift.register_write(qd.TIME, 4, 8)
    assert qd.read(thrift, 4, 3) == QueueSample(9, 12)
    assert qd.read(thrift, 4, 0) == QueueSample(8, 0)
    assert qd.read_all(thrift) == {(4, 3): QueueSample(9, 12), (4, 0): QueueSample(8, 0)}
    qd.clear(thrift, 4, 3)
    assert qd.read(thrift, 4, 3) is None


def test_a_switch_with_queue_0_alone_reads_two_registers_not_the_class_ones():
    thrift = FakeThrift()
    thrift.register_write(qd.TIME, 4, 8)
    reads = []
    plain = thrift.register_read
    thrift.register_read = lambda name, index=None: reads.append(name) or plain(name, index)
    assert qd.read_all(thrift, queues=1) == {(4, 0): QueueSample(8, 0)}
    assert reads == [qd.TIME, qd.DEPTH]                   # time first, as every read
