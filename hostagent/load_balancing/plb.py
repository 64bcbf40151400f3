"""PLB-style repathing for the RoCEv2 sender (Protective Load Balancing:
Qureshi et al., "PLB: Congestion Signals are Simple and Effective for Network
Load Balancing", SIGCOMM 2022; Linux net/ipv4/tcp_plb.c), as pure logic with
time and randomness passed in, so tests check exact transitions.

The state machine (PlbState) follows tcp_plb.c, per flow. At the end of each
round, with the round's congestion fraction c (None: no information):

    c >= cong_thresh: consec_cong_rounds += 1 (stops at rehash_rounds)
    c <  cong_thresh: consec_cong_rounds = 0
    then repath if consec_cong_rounds >= rehash_rounds
         (or idle and consec_cong_rounds >= idle_rehash_rounds),
         unless paused; a repath resets consec_cong_rounds to 0.

Repath = a new UDP source port, drawn at random from sport_min..sport_max
(but not the current one). RoCEv2 puts its entropy in the UDP source port and
switches hash it for ECMP, as Linux PLB changes the IPv6 flow label
(sk_rethink_txhash). A new port is a new random path, which may be the old
one again: PLB relies on re-drawing, not on knowing the paths.

Linux defaults, kept: tcp_plb_cong_thresh 128/256 = 0.5 (cong_thresh),
tcp_plb_rehash_rounds 12, tcp_plb_idle_rehash_rounds 3,
tcp_plb_suspend_rto_sec 60 (rto_pause_s).

Pauses. Linux pauses PLB only after an RTO, which itself rehashes: for a time
drawn from [suspend, 2 suspend) = 60-120 s, so that PLB does not steer the
connection back onto a path the RTO just escaped (a black hole). After a
congestion repath Linux has no hold-down: resetting the counter spaces repaths
at least rehash_rounds rounds apart. Here:
  pause_s   hold-down after each congestion repath, drawn from
            [pause_s, pause_s (1 + pause_jitter)) as Linux draws its RTO pause;
            0 gives Linux's behaviour. During a pause the counter keeps
            counting (as in Linux): when the pause ends, a flow congested for
            the last rehash_rounds rounds repaths at once. Default 1 s, the
            time of one repath decision here (12 rounds x 80 ms): a flow that
            keeps meeting congestion repaths every 1-2 s, drawn, instead of
            every ~1 s in lock-step with the flows it collided with. The
            jitter is the point: of two flows that collided and repathed
            together, the first to move again may relieve the other, whose
            counter then resets.
  on_rto()  Linux's RTO rule with rto_pause_s (default 60 s, Linux's value: it
            is a wall-clock time for black-hole avoidance, not an RTT multiple,
            so it is not scaled). The RoCE agent never calls it: it has no
            retransmission timer.

What a round is, and its congestion fraction, for a RoCE sender. In DCTCP a
round is one RTT of ACKs and c the fraction of acknowledged bytes that carried
ECE. A RoCEv2 sender gets no per-packet echo: the receiver (DCQCN notification
point) answers CE with at most one CNP per flow per interval N
(cnp_interval_s). Per interval, the sender learns only whether some CE
arrived. So (CnpRounds):

    slot  = slot_s seconds of the sender's clock; slot_s should be the
            receiver's N (default 20 ms, DcqcnParams.cnp_interval_s)
    a slot is marked when a CNP of the flow arrived during it (the NP spaces
            CNPs >= N apart, so a slot holds at most one)
    round = round_slots consecutive slots (default 4: 80 ms, about the RTT of
            a congested path here, a 64-packet BMv2 queue served at 800
            packets/s; 12 rounds ~ 1 s of persistent congestion before a
            repath), or longer: to the end of the slot in which the sender
            sent its round_min_packets-th packet of the round (default 4)
    c     = marked slots / min(packets sent in the round, its slots), at most 1:
            the share of the CNPs the receiver could have sent that it did send.
            A round with CNPs but nothing sent counts 1; with neither, None.

Why min(packets, slots) and round_min_packets: a slot in which nothing was
sent cannot earn a CNP, and a CNP arrives a feedback delay after its packet.
Under DCQCN a flow on a path that marks every packet is cut to its floor (10
packets/s: one packet per 5 slots). Dividing by the slots would cap c at ~0.2;
with 80 ms rounds, a round often holds a packet whose CNP lands in the next
one, scores 0 and resets the count. Either way PLB would never move the flow
off that path. Measured with the agents in network namespaces, a relay
CE-marking one of two emulated paths, DCQCN on: with c = marked slots /
slots, 0 repaths in 13 s, every packet CE; with this rule, a repath 3.1 s
after the start, a second (the first drew the same path) 3.3 s later, then
DCQCN recovered on the clean path. Linux has the same need and the same answer: a DCTCP round ends
only when data sent in it is acknowledged, so every round carries feedback.
Here a round holds at least round_min_packets packets, of which at most one
CNP spills into the next round: at the floor c >= 0.75 (rounds of ~400 ms,
a repath after ~5 s). Below one packet per slot each CE-marked packet earns
its own CNP, so c is the packets' CE fraction; at many packets per slot it is
the share of slots that saw CE (below).

Time first, packets as a floor: the signal's resolution is one N of time. A
round of only a fixed number of packets would span a rate-dependent number of
slots (16 packets are 1 slot at 800 packets/s, 80 slots at DCQCN's 10
packets/s floor), so at high rates c would be read from a single slot.

Idle: Linux repaths after idle_rehash_rounds congested rounds when nothing is
in flight (a repath cannot reorder then). PlbState implements it; the agent's
sender never goes idle while it runs, so it never signals it.

Honest caveats. At several packets per slot c is not the CE fraction of
packets: with k packets per slot, each marked with probability p, a slot is
marked with probability 1 - (1 - p)^k >= p; c then measures how persistently
the path marks, in steps of 1/round_slots, and cong_thresh 0.5 means "CE in at
least half of the slots". The notification point restarts N at each CNP and
CE arrives at packet times, so a continuously marked flow gets a CNP every N
plus a packet gap: now and then a slot stays empty and c stays a little below
1. CNPs lag the packets that earned them by the queueing delay plus the
reverse path, so a round's CNPs partly answer the previous round's packets.
DCQCN drains what it is told about: in the incast experiment each flow got
~12 CNPs/s (README: 477 CNPs, 4 flows, 10 s), ~24% of 20 ms slots at ~4
packets per slot, below 0.5 (its CE fraction was 26%: PLB's 50% would not fire
either). The alternative, the receiver echoing per-round CE counts, needs a
message no RoCE NIC sends; this design uses only what a RoCE sender gets.
"""
from __future__ import annotations

import argparse
import math
import random
from dataclasses import asdict, dataclass, field
from typing import List, Optional

from hostagent.ecn.dcqcn import DcqcnParams

ROCE_SPORT_MIN = 0xC000     # RoCEv2 source ports: the dynamic range 49152..65535
ROCE_SPORT_MAX = 0xFFFF


@dataclass(frozen=True)
class PlbParams:
    cong_thresh: float = 0.5            # tcp_plb_cong_thresh (128/256)
    rehash_rounds: int = 12             # tcp_plb_rehash_rounds
    idle_rehash_rounds: int = 3         # tcp_plb_idle_rehash_rounds (0: never)
    pause_s: float = 1.0                # hold-down after a congestion repath (Linux: none)
    pause_jitter: float = 1.0           # pause drawn from [pause_s, pause_s (1 + jitter))
    rto_pause_s: float = 60.0           # tcp_plb_suspend_rto_sec: pause after an RTO
    slot_s: float = DcqcnParams.cnp_interval_s   # one CNP interval N of the receiver
    round_slots: int = 4                # slots per round (at least)
    round_min_packets: int = 4          # ... and until the sender sent this many in it (0: fixed)
    sport_min: int = ROCE_SPORT_MIN
    sport_max: int = ROCE_SPORT_MAX

    def __post_init__(self):
        problems = []
        if not 0 <= self.cong_thresh <= 1:
            problems.append(f"cong_thresh must be within 0..1, got {self.cong_thresh}")
        if not (isinstance(self.rehash_rounds, int) and self.rehash_rounds >= 1):
            problems.append(f"rehash_rounds must be an integer >= 1, got {self.rehash_rounds!r}")
        if not (isinstance(self.idle_rehash_rounds, int) and self.idle_rehash_rounds >= 0):
            problems.append(f"idle_rehash_rounds must be an integer >= 0, got {self.idle_rehash_rounds!r}")
        for name in ("pause_s", "pause_jitter", "rto_pause_s"):
            v = getattr(self, name)
            if not (v >= 0 and math.isfinite(v)):
                problems.append(f"{name} must be finite and >= 0, got {v}")
        if not (self.slot_s > 0 and math.isfinite(self.slot_s)):
            problems.append(f"slot_s must be finite and > 0, got {self.slot_s}")
        if not (isinstance(self.round_slots, int) and self.round_slots >= 1):
            problems.append(f"round_slots must be an integer >= 1, got {self.round_slots!r}")
        if not (isinstance(self.round_min_packets, int) and self.round_min_packets >= 0):
            problems.append(f"round_min_packets must be an integer >= 0, got {self.round_min_packets!r}")
        if not 1 <= self.sport_min < self.sport_max <= 0xFFFF:
            problems.append(f"need 1 <= sport_min < sport_max <= 65535, got {self.sport_min}..{self.sport_max}")
        if problems:
            raise ValueError("invalid PLB parameters: " + "; ".join(problems))


@dataclass(frozen=True)
class Repath:
    t_s: float
    old_sport: int
    new_sport: int
    reason: str          # "congestion", "idle" or "rto"
    round: int           # rounds seen when it happened


class PlbState:
    """Linux PLB's per-connection state machine (see the module docstring)."""

    def __init__(self, params: PlbParams, sport: int, rng: Optional[random.Random] = None):
        if not params.sport_min <= sport <= params.sport_max:
            raise ValueError(f"source port {sport} is outside {params.sport_min}..{params.sport_max}")
        self.params = params
        self.sport = sport
        self.rng = rng if rng is not None else random.Random()
        self.consec_cong_rounds = 0
        self.pause_until: Optional[float] = None
        self.rounds = 0
        self.congested_rounds = 0
        self.repaths: List[Repath] = []

    def paused(self, now: float) -> bool:
        if self.pause_until is not None and now >= self.pause_until:
            self.pause_until = None
        return self.pause_until is not None

    def on_round(self, now: float, fraction: Optional[float], idle: bool = False) -> Optional[Repath]:
        """A round ended at `now` with congestion fraction `fraction` (None: no
        information, the counter stays). Returns the repath it caused, if any."""
        p = self.params
        if fraction is not None:
            if not 0 <= fraction <= 1:
                raise ValueError(f"congestion fraction must be within 0..1, got {fraction}")
            if fraction < p.cong_thresh:
                self.consec_cong_rounds = 0
            else:
                self.congested_rounds += 1
                if self.consec_cong_rounds < p.rehash_rounds:
                    self.consec_cong_rounds += 1
        self.rounds += 1
        forced = self.consec_cong_rounds >= p.rehash_rounds
        idle_rehash = bool(p.idle_rehash_rounds) and idle and self.consec_cong_rounds >= p.idle_rehash_rounds
        if not (forced or idle_rehash) or self.paused(now):
            return None
        repath = self._repath(now, "congestion" if forced else "idle")
        if p.pause_s > 0:
            self.pause_until = now + p.pause_s * (1 + p.pause_jitter * self.rng.random())
        return repath

    def on_rto(self, now: float) -> Repath:
        """A retransmission timeout: rehash (as TCP does at an RTO), reset the counter,
        and pause PLB for [rto_pause_s, 2 rto_pause_s) (tcp_plb_update_state_upon_rto)."""
        repath = self._repath(now, "rto")
        pause = self.params.rto_pause_s
        self.pause_until = now + pause + pause * self.rng.random() if pause > 0 else None
        return repath

    def _repath(self, now: float, reason: str) -> Repath:
        p = self.params
        new = self.rng.randrange(p.sport_min, p.sport_max)   # one fewer: skip the current port
        if new >= self.sport:
            new += 1
        repath = Repath(now, self.sport, new, reason, self.rounds)
        self.sport = new
        self.consec_cong_rounds = 0
        self.repaths.append(repath)
        return repath


@dataclass(frozen=True)
class Round:
    index: int
    end_s: float
    marked_slots: int
    slots: int
    sent: int

    @property
    def fraction(self) -> Optional[float]:
        """Marked slots / min(packets sent, slots), at most 1 (1 if CNPs came but
        nothing was sent); None when neither happened."""
        if not self.sent and not self.marked_slots:
            return None
        chances = min(self.sent, self.slots)
        return 1.0 if chances == 0 else min(1.0, self.marked_slots / chances)


@dataclass
class CnpRounds:
    """Turns CNP arrivals into rounds, on the sender's clock from `start`: slots of
    slot_s; a round lasts round_slots slots, or longer, to the end of the slot in
    which the sender sent its min_packets-th packet of the round (0: fixed length)."""
    slot_s: float
    round_slots: int
    min_packets: int = 4
    start: float = 0.0
    _index: int = field(default=0, init=False)                 # the current round's number
    _first_slot: int = field(default=0, init=False)            # its first slot
    _end_slot: Optional[int] = field(default=None, init=False)  # its end, once min_packets were sent
    _marked: set = field(default_factory=set, init=False)
    _sent: int = field(default=0, init=False)
    _closed: List[Round] = field(default_factory=list, init=False)

    def __post_init__(self):
        if not (self.slot_s > 0 and math.isfinite(self.slot_s)) or not (
                isinstance(self.round_slots, int) and self.round_slots >= 1):
            raise ValueError(f"need slot_s > 0 and an integer round_slots >= 1, "
                             f"got {self.slot_s}, {self.round_slots!r}")
        if not (isinstance(self.min_packets, int) and self.min_packets >= 0):
            raise ValueError(f"min_packets must be an integer >= 0, got {self.min_packets!r}")
        if self.min_packets == 0:
            self._end_slot = self.round_slots

    def _slot(self, now: float) -> int:
        return math.floor((now - self.start) / self.slot_s)

    def _roll(self, now: float) -> None:
        slot = self._slot(now)
        while self._end_slot is not None and slot >= self._end_slot:
            end = self._end_slot
            self._closed.append(Round(self._index, self.start + end * self.slot_s, len(self._marked),
                                      end - self._first_slot, self._sent))
            self._index += 1
            self._first_slot, self._marked, self._sent = end, set(), 0
            self._end_slot = end + self.round_slots if self.min_packets == 0 else None

    def on_cnp(self, now: float) -> None:
        self._roll(now)
        self._marked.add(self._slot(now))

    def on_sent(self, now: float, packets: int = 1) -> None:
        self._roll(now)
        before = self._sent
        self._sent += packets
        if self.min_packets and before < self.min_packets <= self._sent:
            self._end_slot = max(self._first_slot + self.round_slots, self._slot(now) + 1)

    def advance(self, now: float) -> List[Round]:
        """The rounds that ended by `now` (not yet returned), oldest first."""
        self._roll(now)
        closed, self._closed = self._closed, []
        return closed


class PlbSender:
    """What the RoCE sender runs: CNPs -> rounds -> PlbState -> source port."""

    def __init__(self, params: PlbParams, sport: int, rng: Optional[random.Random] = None, now: float = 0.0):
        self.params = params
        self.state = PlbState(params, sport, rng)
        self.meter = CnpRounds(params.slot_s, params.round_slots, params.round_min_packets, start=now)
        self.cnps = 0

    @property
    def sport(self) -> int:
        return self.state.sport

    def on_cnp(self, now: float) -> None:
        self.cnps += 1
        self.meter.on_cnp(now)

    def on_sent(self, now: float) -> None:
        self.meter.on_sent(now)

    def advance(self, now: float) -> Optional[int]:
        """Close the rounds ended by `now`; returns the new source port if PLB repathed."""
        new = None
        for rnd in self.meter.advance(now):
            repath = self.state.on_round(rnd.end_s, rnd.fraction)
            if repath is not None:
                new = repath.new_sport
        return new

    def summary(self) -> dict:
        st = self.state
        return {"params": asdict(self.params), "rounds": st.rounds, "congested_rounds": st.congested_rounds,
                "cnps": self.cnps, "consec_cong_rounds": st.consec_cong_rounds, "sport": st.sport,
                "repaths": [asdict(r) for r in st.repaths]}


def add_plb_arguments(parser: argparse.ArgumentParser) -> None:
    """The sender's PLB flags (shared by hostagent.ecn.roce and hostagent.traffic)."""
    d = PlbParams()
    g = parser.add_argument_group("PLB repathing (hostagent/load_balancing/plb.py)")
    g.add_argument("--plb", action="store_true", help="repath (new UDP source port) on persistent congestion")
    g.add_argument("--plb-threshold", type=float, default=d.cong_thresh,
                   help=f"a round is congested when its share of CNP-marked slots >= this (default {d.cong_thresh})")
    g.add_argument("--plb-rehash-rounds", type=int, default=d.rehash_rounds,
                   help=f"consecutive congested rounds before a repath (default {d.rehash_rounds})")
    g.add_argument("--plb-round-slots", type=int, default=d.round_slots,
                   help=f"slots per round, at least (default {d.round_slots})")
    g.add_argument("--plb-round-packets", type=int, default=d.round_min_packets,
                   help=f"a round lasts until the sender sent this many packets in it (default "
                        f"{d.round_min_packets}; 0: fixed-length rounds)")
    g.add_argument("--plb-slot-s", type=float, default=d.slot_s,
                   help=f"slot length: the receiver's --cnp-interval-s (default {d.slot_s})")
    g.add_argument("--plb-pause-s", type=float, default=d.pause_s,
                   help=f"hold-down after a repath, drawn from [P, 2P) (default {d.pause_s}; 0: as Linux)")
    g.add_argument("--plb-seed", type=int, default=None, help="seed of the port choice (default: random)")


def plb_from_args(a: argparse.Namespace, sport: int, now: float = 0.0) -> Optional[PlbSender]:
    """A PlbSender from the flags of add_plb_arguments, or None without --plb."""
    if not getattr(a, "plb", False):
        return None
    params = PlbParams(cong_thresh=a.plb_threshold, rehash_rounds=a.plb_rehash_rounds,
                       round_slots=a.plb_round_slots, round_min_packets=a.plb_round_packets,
                       slot_s=a.plb_slot_s, pause_s=a.plb_pause_s)
    return PlbSender(params, sport, random.Random(a.plb_seed), now=now)
