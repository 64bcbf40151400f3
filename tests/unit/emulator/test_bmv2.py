"""The one place that builds simple_switch_grpc's command line."""
import pytest

from emulator.bmv2 import LOG_LEVELS, switch_command


def command(**kw):
    args = dict(device_id=3, thrift_port=9093, grpc_addr="127.0.0.1:9562", ports={2: "s1-eth2", 1: "s1-eth1"})
    args.update(kw)
    return switch_command("simple_switch_grpc", **args)


@pytest.mark.parametrize("level", LOG_LEVELS)
def test_log_level_is_always_passed(level):
    cmd = command(log_level=level)
    assert cmd[cmd.index("--log-level") + 1] == level


def test_off_is_passed_as_off_not_left_out():
    # Leaving the flag out means trace: the slowest setting, not the fastest.
    cmd = command(log_level="off")
    assert ["--log-level", "off"] == cmd[cmd.index("--log-level"):cmd.index("--log-level") + 2]


def test_log_file_is_kept_at_every_level():
    cmd = command(log_level="off", log_file="/tmp/s1.log")
    assert cmd[cmd.index("--log-file") + 1] == "/tmp/s1.log"


def test_ports_in_order_grpc_on_the_given_address():
    cmd = command(log_level="info")
    assert cmd[:6] == ["simple_switch_grpc", "--device-id", "3", "--thrift-port", "9093", "-i"]
    assert [cmd[i + 1] for i, a in enumerate(cmd) if a == "-i"] == ["1@s1-eth1", "2@s1-eth2"]
    assert cmd[-4:] == ["--no-p4", "--", "--grpc-server-addr", "127.0.0.1:9562"]


def test_unknown_level_is_refused_by_name():
    with pytest.raises(ValueError, match="got 'verbose'"):
        command(log_level="verbose")
