"""The host side of lossless classes: a NIC that honours PFC per class, and
one that sends pauses (a slow receiver pausing its uplink; a stuck NIC's storm).

    PauseState                     per-class pause deadlines from received PFC frames
    ReceiveBuffer                  a slow receiver: a NIC buffer drained at the host's rate,
                                   pausing its uplink at XOFF, resuming at XON
                                   (hostagent/ecn/roce.py `receive --drain-pps 150 --pfc-tclass 3`)
    python -m hostagent.lossless pause --iface h4-eth0 --src-mac .. --tclass 3 \
        --quanta 65535 --every-ms 100 --duration 5          # pauses, again and again (a storm)

A sender (hostagent/ecn/roce.py `send --tclass 3`) feeds every frame it
reads to PauseState.on_frame and sends only while its class is not paused,
as a RoCE NIC does. Pause times are quanta of 512 bit times of the host's
link (wire.lossless.pause_us), the same scale the switches use.
"""
from __future__ import annotations

import argparse
import sys
import time

from hostagent.sender import RawSender
from wire.lossless import CLASSES, MAX_PAUSE_QUANTA, decode_pfc, encode_pfc, pause_us


class PauseState:
    """When each class may send again, from the PFC frames the NIC received,
    and how long each class has been paused. `now` is any monotonic clock in
    seconds (the caller's), never going back."""

    def __init__(self, link_mbps: float):
        if not link_mbps > 0:
            raise ValueError(f"the link's rate must be > 0 Mbit/s, got {link_mbps}")
        self.link_mbps = link_mbps
        self.until = [0.0] * CLASSES
        self.frames = 0           # PFC frames received
        self.pauses = [0] * CLASSES
        self.resumes = [0] * CLASSES
        self.malformed = 0        # MAC control frames that are not whole PFC frames
        self._since: list[float | None] = [None] * CLASSES    # when the class's current pause began
        self._ended_s = [0.0] * CLASSES                          # seconds of the class's pauses that are over

    def on_frame(self, frame: bytes, now: float) -> bool:
        """Take a received frame: True if it was PFC (acted on); non-PFC
        frames are left alone, broken MAC control frames counted."""
        if len(frame) < 14 or frame[12:14] != b"\x88\x08":
            return False
        times = decode_pfc(frame)
        if times is None:
            self.malformed += 1
            return True
        self.frames += 1
        for c, quanta in times.items():
            since = self._since[c]
            if since is not None and (self.until[c] <= now or not quanta):    # over: ran out, or resumed now
                self._ended_s[c] += min(self.until[c], now) - since
                self._since[c] = None
            self.until[c] = now + pause_us(quanta, self.link_mbps) / 1e6     # 0: resume now
            if quanta:
                self.pauses[c] += 1
                if self._since[c] is None:
                    self._since[c] = now
            else:
                self.resumes[c] += 1
        return True

    def paused(self, tclass: int, now: float) -> bool:
        return self.until[tclass] > now

    def paused_s(self, tclass: int, now: float) -> float:
        """Seconds class `tclass` has been paused until `now` (pauses that
        overlap, a refresh before the last ran out, counted once; a resume
        ends a pause early)."""
        since = self._since[tclass]
        return self._ended_s[tclass] + (max(0.0, min(self.until[tclass], now) - since) if since is not None else 0.0)

    def summary(self) -> dict:
        return {"pfc_frames": self.frames, "pauses": self.pauses, "resumes": self.resumes,
                "malformed": self.malformed}


class ReceiveBuffer:
    """A slow receiver's NIC: packets of class `tclass` wait in a buffer of
    `capacity` packets that the host drains at `drain_pps`. At `xoff` it
    pauses its uplink for the class (refreshed at half the pause until it
    drains to XON, 802.1Qbb's XOFF state), at `xon` it resumes; a packet finding the buffer full is
    dropped (a NIC without PFC, or with too small a headroom, loses it).
    on_packet() and tick() return the PFC frame to send now, if any."""

    def __init__(self, src_mac: str, tclass: int, drain_pps: float, link_mbps: float, *, xoff: int = 16,
                 xon: int = 8, capacity: int = 64, quanta: int = MAX_PAUSE_QUANTA):
        if not 0 <= tclass < CLASSES:
            raise ValueError(f"class {tclass} is not 0..{CLASSES - 1}")
        if drain_pps <= 0:
            raise ValueError(f"drain rate must be > 0 packets/s, got {drain_pps}")
        if not 0 <= xon < xoff <= capacity:
            raise ValueError(f"need 0 <= xon < xoff <= capacity, got xon {xon}, xoff {xoff}, capacity {capacity}")
        self.drain_pps, self.xoff, self.xon, self.capacity = drain_pps, xoff, xon, capacity
        self.refresh_s = pause_us(quanta, link_mbps) / 2e6
        self._pause = encode_pfc(src_mac, {tclass: quanta})
        self._resume = encode_pfc(src_mac, {tclass: 0})
        self.occupancy = 0.0
        self.last: float | None = None    # when the buffer was last drained
        self.paused_at: float | None = None   # when the last pause went out; None: not pausing
        self.pauses = self.resumes = self.dropped = 0

    def _drain(self, now: float) -> None:
        if self.last is not None:
            self.occupancy = max(0.0, self.occupancy - (now - self.last) * self.drain_pps)
        self.last = now

    def on_packet(self, now: float) -> tuple[bool, bytes | None]:
        """A packet of the class arrived: (kept, frame to send). A packet
        finding the buffer full is not kept."""
        self._drain(now)
        if self.occupancy + 1 > self.capacity:
            self.dropped += 1
            return False, self.tick(now)
        self.occupancy += 1
        return True, self.tick(now)

    def tick(self, now: float) -> bytes | None:
        """Called often (between packets too): a pause, refresh or resume due now."""
        self._drain(now)
        # XOFF state (802.1Qbb): a pause at XOFF, refreshed until the buffer drains to XON
        if ((self.paused_at is None and self.occupancy >= self.xoff)
                or (self.paused_at is not None and self.occupancy > self.xon
                    and now >= self.paused_at + self.refresh_s)):
            self.paused_at = now
            self.pauses += 1
            return self._pause
        if self.paused_at is not None and self.occupancy <= self.xon:
            self.paused_at = None
            self.resumes += 1
            return self._resume
        return None

    def summary(self) -> dict:
        return {"drain_pps": self.drain_pps, "pauses_sent": self.pauses, "resumes_sent": self.resumes,
                "dropped": self.dropped}


def run_pauser(a) -> dict:
    """Send a pause for a.tclass every a.every_ms for a.duration seconds (a
    stuck NIC's storm, or a slow receiver), then a resume."""
    pause = encode_pfc(a.src_mac, {a.tclass: a.quanta})
    sent = 0
    with RawSender(a.iface) as tx:
        if a.start_at:
            time.sleep(max(0.0, a.start_at - time.time()))
        t0 = time.monotonic()
        while time.monotonic() - t0 < a.duration:
            tx.send(pause)
            sent += 1
            time.sleep(a.every_ms / 1000)
        if a.resume:
            tx.send(encode_pfc(a.src_mac, {a.tclass: 0}))
    return {"role": "pauser", "tclass": a.tclass, "quanta": a.quanta, "pauses_sent": sent, "resumed": a.resume}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("pause", help="send PFC pauses for one class, periodically")
    p.add_argument("--iface", required=True)
    p.add_argument("--src-mac", required=True)
    p.add_argument("--tclass", type=int, required=True, help=f"the class to pause (0..{CLASSES - 1})")
    p.add_argument("--quanta", type=int, default=MAX_PAUSE_QUANTA, help="pause time, in quanta of 512 bit times")
    p.add_argument("--every-ms", type=float, default=100.0)
    p.add_argument("--duration", type=float, default=5.0)
    p.add_argument("--start-at", type=float, default=0.0, help="wall-clock start time")
    p.add_argument("--no-resume", dest="resume", action="store_false", help="do not send a resume at the end")
    a = ap.parse_args(argv)
    try:
        encode_pfc(a.src_mac, {a.tclass: a.quanta})        # bad class or time: say so before starting
        import json
        print(json.dumps(run_pauser(a)))
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0
