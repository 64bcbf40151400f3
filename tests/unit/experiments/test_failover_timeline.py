"""The failure-timeline experiment's dilation, which needs no network: the
topology it runs dilated, and a bad factor refused by name."""
import pytest

from emulator.dilation import Dilation
from experiments.failover_timeline import HEARTBEAT_MS, TIMEOUT_MS, fabric, main


def test_a_dilated_fabric_has_slower_links_and_longer_failover_timers():
    plain, slow = fabric("dual-plane", "data plane"), fabric("dual-plane", "data plane", Dilation(4))
    assert (slow.features["failover"].heartbeat_ms, slow.features["failover"].timeout_ms) == \
        (4 * HEARTBEAT_MS, 4 * TIMEOUT_MS)
    assert [link.bandwidth_mbps / 4 for link in plain.links] == [link.bandwidth_mbps for link in slow.links]
    assert "dilated x4" in slow.source and "dilated" not in plain.source


def test_host_protection_has_no_failover_section_to_dilate():
    assert "failover" not in fabric("dual-plane", "host", Dilation(3)).features


@pytest.mark.parametrize("factor", ["0.5", "nan", "-2"])
def test_a_dilation_below_one_is_refused_by_name(factor, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--dilation", factor])
    assert exc.value.code == 2
    assert "--dilation" in capsys.readouterr().err

