"""The RDMA agents' loop grain (hostagent/rdma/grain.py): in the network's
time, so a dilated network's agents wake as many times less often."""
import pytest

from emulator.dilation import Dilation
from hostagent.rdma import agent
from hostagent.rdma.grain import LoopGrain


def test_undilated_is_the_loops_own_grain_and_a_dilated_one_scales_every_sleep():
    g = LoopGrain()
    assert (g.pace_s, g.idle_s, g.paused_s, g.receive_s) == (0.0005, 0.001, 0.0002, 0.0005)
    assert Dilation(1.0).params(LoopGrain) == g
    assert Dilation(16).params(LoopGrain) == LoopGrain(16 * g.pace_s, 16 * g.idle_s, 16 * g.paused_s,
                                                       16 * g.receive_s)


class _Socket:
    """A receiver's socket that records its timeout and stops the loop at the first read."""
    timeout = None

    def settimeout(self, value):
        self.timeout = value

    def recv(self, _n):
        raise KeyboardInterrupt


@pytest.mark.parametrize("dilation", [1.0, 8.0])
def test_the_receivers_socket_timeout_is_the_grain_at_its_dilation(dilation):
    a = agent.parser().parse_args(["receive", "--iface", "h1-eth0", "--src-ip", "10.0.1.1", "--src-mac",
                                   "02:00:00:00:00:01", "--gw-mac", "02:00:00:00:00:02", "--duration", "0.01",
                                   "--dilation", f"{dilation:g}"])
    sock = _Socket()
    with pytest.raises(KeyboardInterrupt):
        agent.run_receiver(a, sock=sock)
    assert sock.timeout == pytest.approx(LoopGrain().receive_s * dilation)
