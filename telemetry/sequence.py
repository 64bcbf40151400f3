"""Lost, reordered and duplicate telemetry reports, per report stream.

A stream is what Telemetry Report v2.0 numbers: the reports of one
(node id, hw_id) to this collector, with a 22-bit sequence number that
wraps at SEQ_MODULUS (4,194,304). Definitions, exact for every stream:

- Each 22-bit number is placed on an unbounded line at the position
  nearest to the highest number seen so far (a distance d in
  (-M/2, M/2]); so 4194303 followed by 0 is the next report, not a jump back.
- received: distinct reports accepted (duplicates not counted).
- lost: sequence numbers between the lowest and the highest received that
  have not been received. A late report fills its gap, so `lost` can go
  down (it is a gauge, not a counter): at any moment
  lost == (highest - lowest + 1) - received, summed over epochs.
- reordered: reports that arrived after a report with a higher sequence
  number of the same stream, and were not duplicates (each counted once).
- duplicates: a sequence number already received.
- resets: a jump of `window` or more either way (a switch restarted, or a
  burst of losses too large to tell from one). It starts a new epoch:
  numbers missing in the old epoch stay lost, and the jump itself is not
  counted as loss.

Gaps are remembered only within `window` numbers below the highest; a gap
older than that is final (still counted in `lost`, never filled), and a
report that old is a reset, not a late arrival.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

from wire.int_telemetry import SEQ_MODULUS

DEFAULT_WINDOW = 1 << 16


@dataclass
class StreamStats:
    received: int = 0
    lost: int = 0
    reordered: int = 0
    duplicates: int = 0
    resets: int = 0

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


@dataclass
class _Stream:
    stats: StreamStats = field(default_factory=StreamStats)
    highest: int = 0              # on the unbounded line
    lowest: int = 0               # lowest received in the current epoch
    missing: set[int] = field(default_factory=set)


class SequenceTracker:
    """observe(seq) for every report of one stream; `stats` says what happened.
    Verdicts: "first", "in-order", "gap", "reordered", "duplicate", "reset"."""

    def __init__(self, modulus: int = SEQ_MODULUS, window: int = DEFAULT_WINDOW):
        if not 1 <= window <= modulus // 2:
            raise ValueError(f"window must be within 1..{modulus // 2} (half the sequence space), got {window}")
        self.modulus = modulus
        self.window = window
        self._s: _Stream | None = None

    @property
    def stats(self) -> StreamStats:
        return self._s.stats if self._s is not None else StreamStats()

    def observe(self, seq: int) -> str:
        if not 0 <= seq < self.modulus:
            raise ValueError(f"sequence number {seq} outside 0..{self.modulus - 1}")
        s = self._s
        if s is None:
            self._s = _Stream(StreamStats(received=1), seq, seq)
            return "first"
        st = s.stats
        d = (seq - s.highest) % self.modulus
        if d > self.modulus // 2:
            d -= self.modulus
        e = s.highest + d
        if abs(d) >= self.window:
            st.resets += 1
            st.received += 1
            s.highest = s.lowest = e
            s.missing.clear()
            return "reset"
        if d > 0:
            gap = d - 1
            if gap:
                s.missing.update(range(s.highest + 1, e))
                st.lost += gap
            s.highest = e
            if len(s.missing) > self.window:  # some gaps fell out of the window: final, forget them
                floor = e - self.window
                s.missing = {x for x in s.missing if x > floor}
            st.received += 1
            return "gap" if gap else "in-order"
        if d == 0:
            st.duplicates += 1
            return "duplicate"
        if e in s.missing:
            s.missing.remove(e)
            st.lost -= 1
            st.reordered += 1
            st.received += 1
            return "reordered"
        if e < s.lowest:  # late, from before the first report this epoch saw
            s.missing.update(range(e + 1, s.lowest))
            st.lost += s.lowest - e - 1
            s.lowest = e
            st.reordered += 1
            st.received += 1
            return "reordered"
        st.duplicates += 1
        return "duplicate"


class StreamTable:
    """One SequenceTracker per (node_id, hw_id)."""

    def __init__(self, window: int = DEFAULT_WINDOW):
        self.window = window
        self.trackers: dict[tuple[int, int], SequenceTracker] = {}

    def observe(self, node_id: int, hw_id: int, seq: int) -> str:
        key = (node_id, hw_id)
        tracker = self.trackers.get(key)
        if tracker is None:
            tracker = self.trackers[key] = SequenceTracker(window=self.window)
        return tracker.observe(seq)

    def stats(self) -> dict[tuple[int, int], StreamStats]:
        return {key: t.stats for key, t in sorted(self.trackers.items())}
