"""Data-plane failover on a live leaf-spine network: with heartbeats
running, a spine whose switch process dies (its ports stay up: the case a
port-state watch cannot see) stops receiving traffic from the leaves as soon
as they stop hearing it, without the controller; every flow between the
leaves is delivered again through the other spine. The packets lost in
between are printed (the detection bound is the timeout plus one period),
never asserted against a time."""
import struct
import threading
import time

from control import failover as fo
from telemetry.netns import socket_in_netns

PORT = 5201
FLOWS = 32
RATE_PPS = 300
SETTLE_S = 1.0


def test_a_dead_spine_is_routed_around_in_the_data_plane(failover_network):
    topo, net, ctl = failover_network
    stop = threading.Event()
    time.sleep(0.5)

    rx = socket_in_netns("h3")
    rx.bind(("0.0.0.0", PORT))
    rx.settimeout(0.2)
    got: set[int] = set()

    def receive():
        while not stop.is_set():
            try:
                data = rx.recv(64)
            except OSError:
                continue
            got.add(struct.unpack("!I", data[:4])[0])

    receiver = threading.Thread(target=receive, daemon=True)
    receiver.start()
    tx = socket_in_netns("h1")
    socks = []
    sent_at: dict[int, float] = {}
    try:
        for i in range(FLOWS):
            s = socket_in_netns("h1")
            s.bind(("0.0.0.0", 42000 + i))
            socks.append(s)
        seq, kill_at = 0, None
        start = time.monotonic()
        while time.monotonic() - start < 5.0:
            if kill_at is None and time.monotonic() - start > 1.5:
                net.switches["spine1"].proc.kill()         # a dead neighbour; leaf ports stay up
                kill_at = time.monotonic()
            socks[seq % FLOWS].sendto(struct.pack("!I", seq) + b"\0" * 28, (topo.hosts["h3"].ip, PORT))
            sent_at[seq] = time.monotonic()
            seq += 1
            time.sleep(1 / RATE_PPS)
        time.sleep(0.5)
    finally:
        stop.set()
        receiver.join()
        for s in socks + [tx, rx]:
            s.close()
    lost = [q for q in sent_at if q not in got]
    before = [q for q in lost if sent_at[q] < kill_at]
    window = [q for q in lost if kill_at <= sent_at[q] < kill_at + SETTLE_S]
    after = [q for q in lost if sent_at[q] >= kill_at + SETTLE_S]
    last_lost = max((sent_at[q] - kill_at for q in window), default=0.0)
    print(f"\nsent {len(sent_at)}, lost {len(before)} before the kill, {len(window)} in the second after it "
          f"(last one sent {last_lost * 1000:.0f} ms after; bound {topo.features['failover'].detection_bound_ms:g} "
          f"ms + queueing), {len(after)} after")
    assert not before, "lost packets before any fault"
    after_sent = [q for q in sent_at if sent_at[q] >= kill_at + SETTLE_S]
    assert len(after) <= 0.01 * len(after_sent), f"{len(after)} of {len(after_sent)} lost after failover"
    flows_after = {q % FLOWS for q in after_sent if q in got}
    assert flows_after == set(range(FLOWS)), "every flow is delivered again"
    assert window, "some packets were on the dead spine's slots: the failover had something to do"
    backed_up = fo.backup_packets(ctl.connections["leaf1"], ctl.p4info)
    assert sum(backed_up.values()) > 0, "leaf1 sent packets to backups"
