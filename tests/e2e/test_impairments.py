"""Link impairments (emulator/impairments.py) on real veths, and the
launcher's link loss and delay: random loss drops about its share of raw
frames (what BMv2 sends), a black hole drops all with the link up, undoing
restores everything; a topology's loss_pct is applied (netem, or nftables
without it) and removed with the network; delay_ms without netem is refused
by name before anything is made."""
import socket
import subprocess
import time

import pytest

from emulator.impairments import ImpairmentError, blackhole, drop_fraction, netem_available
from emulator.network import Network, NetworkError
from features import topology_from_dict

FRAMES = 2000


@pytest.fixture
def veth():
    subprocess.run(["ip", "link", "add", "imp-a", "type", "veth", "peer", "name", "imp-b"], check=True)
    for dev in ("imp-a", "imp-b"):
        subprocess.run(["ip", "link", "set", dev, "up"], check=True)
    yield "imp-a", "imp-b"
    subprocess.run(["ip", "link", "del", "imp-a"], check=False)


def received_of(tx_dev: str, rx_dev: str, frames: int = FRAMES) -> int:
    rx = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x88B5))
    rx.bind((rx_dev, 0))
    rx.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 22)
    rx.settimeout(0.3)
    tx = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
    tx.bind((tx_dev, 0))
    frame = bytes.fromhex("020000000002" "020000000001" "88b5") + bytes(50)
    for _ in range(frames):
        try:
            tx.send(frame)
        except OSError:          # a dropped frame is reported to the sender (ENOBUFS): BMv2 ignores it too
            pass
    n = 0
    try:
        while True:
            rx.recv(2048)
            n += 1
    except socket.timeout:
        pass
    tx.close()
    rx.close()
    return n


def test_random_loss_drops_about_its_share(veth):
    a, b = veth
    undo = drop_fraction(a, 0.2)
    got = received_of(a, b)
    sigma = (FRAMES * 0.2 * 0.8) ** 0.5
    assert abs((FRAMES - got) - 0.2 * FRAMES) < 5 * sigma, f"{FRAMES - got} of {FRAMES} lost, expected ~20%"
    undo()
    assert received_of(a, b) == FRAMES


def test_a_blackhole_drops_everything_and_the_link_stays_up(veth):
    a, b = veth
    undo = blackhole(a)
    assert received_of(a, b, 200) == 0
    assert "state UP" in subprocess.run(["ip", "link", "show", a], capture_output=True, text=True).stdout
    assert received_of(b, a, 200) == 200, "one direction only"
    undo()
    assert received_of(a, b, 200) == 200


def test_a_bad_fraction_is_named(veth):
    with pytest.raises(ImpairmentError, match="loss fraction must be in"):
        drop_fraction(veth[0], 1.5)


def _two_hosts(link: dict) -> dict:
    return {"name": "imp", "switches": [{"name": "s1"}], "hosts": ["h1", "h2"],
            "links": [{"a": "h1", "b": "s1", **link}, ["h2", "s1"]]}


def test_link_loss_is_applied_and_removed_with_the_network(tmp_path):
    topo = topology_from_dict(_two_hosts({"loss_pct": 10}), "imp.yaml")
    switch_end = next(p.iface for p in topo.switches["s1"].ports.values() if p.peer == "h1")
    with Network(topo, tmp_path / "net", log_level="off"):
        if netem_available():
            shown = subprocess.run(["tc", "qdisc", "show", "dev", switch_end], capture_output=True, text=True).stdout
            assert "netem" in shown and "loss 10%" in shown
        else:
            shown = subprocess.run(["nft", "list", "tables"], capture_output=True, text=True).stdout
            assert f"impair_{switch_end.replace('-', '_')}" in shown
    if not netem_available():
        shown = subprocess.run(["nft", "list", "tables"], capture_output=True, text=True).stdout
        assert "impair_" not in shown, "removed with the network"


def test_link_delay_without_netem_is_refused_before_anything_is_made(tmp_path):
    topo = topology_from_dict(_two_hosts({"delay_ms": 2}), "imp.yaml")
    if netem_available():
        with Network(topo, tmp_path / "net", log_level="off"):
            end = next(p.iface for p in topo.switches["s1"].ports.values() if p.peer == "h1")
            assert "delay 2ms" in subprocess.run(["tc", "qdisc", "show", "dev", end], capture_output=True,
                                                 text=True).stdout
        return
    before = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    with pytest.raises(NetworkError, match=r"links h1-s1 have delay_ms, which needs the kernel's netem"):
        Network(topo, tmp_path / "net", log_level="off").start()
    time.sleep(0.1)
    assert subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout == before
