"""The queue_depth register's layout (p4src/include/queue_depth.p4) and how
a reader tells a fresh measurement from an old one or from none."""
import pytest

from emulator import queue_depth as qd
from emulator.queue_depth import QueueSample


def test_a_cell_is_port_then_queue():
    assert qd.cell(0, 0) == 0
    assert qd.cell(3, 5) == 3 * 8 + 5
    assert qd.cell(511, 7) == qd.CELLS - 1
    with pytest.raises(ValueError, match="port 512"):
        qd.cell(512)
    with pytest.raises(ValueError, match="queue 8"):
        qd.cell(1, 8)


def test_the_value_is_time_then_depth_as_the_pipeline_concatenates_them():
    # timestamp[44:0] ++ enq_qdepth (19 bits)
    assert qd.encode(QueueSample(time_us=1_000_000, depth=48)) == (1_000_000 << 19) | 48
    assert qd.decode((1_000_000 << 19) | 48) == QueueSample(1_000_000, 48)
    assert qd.decode(7 << 19) == QueueSample(7, 0), "an empty queue at a time is a measurement: depth 0"
    assert qd.decode(0) is None, "a cell never written is no measurement"
    big = QueueSample((1 << 45) - 1, (1 << 19) - 1)
    assert qd.decode(qd.encode(big)) == big and qd.encode(big) < 1 << 64
    with pytest.raises(ValueError):
        qd.encode(QueueSample(1, 1 << 19))


def test_decode_all_keys_written_cells_by_port_and_queue():
    values = [0] * qd.CELLS
    values[qd.cell(2, 0)] = qd.encode(QueueSample(10, 6))
    values[qd.cell(2, 3)] = qd.encode(QueueSample(11, 0))
    assert qd.decode_all(values) == {(2, 0): QueueSample(10, 6), (2, 3): QueueSample(11, 0)}


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
    def __init__(self):
        self.cells = {}

    def register_read(self, name, index=None):
        assert name == qd.REGISTER
        return self.cells.get(index, 0)

    def register_write(self, name, index, value):
        assert name == qd.REGISTER
        self.cells[index] = value


def test_read_and_clear_address_one_queue():
    thrift = FakeThrift()
    assert qd.read(thrift, 4, 3) is None
    thrift.register_write(qd.REGISTER, qd.cell(4, 3), qd.encode(QueueSample(9, 12)))
    assert qd.read(thrift, 4, 3) == QueueSample(9, 12)
    assert qd.read(thrift, 4, 0) is None
    qd.clear(thrift, 4, 3)
    assert qd.read(thrift, 4, 3) is None
