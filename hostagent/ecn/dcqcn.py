"""DCQCN end-host rate control (Zhu et al., "Congestion Control for
Large-Scale RDMA Deployments", SIGCOMM 2015), as pure logic with time passed
in, so it is unit-testable and the packet loops stay thin.

ReactionPoint (the sender, RP):
  on CNP:   Rt <- Rc;  Rc <- Rc (1 - alpha/2);  alpha <- (1 - g) alpha + g;
            timer and byte counter restart.
  alpha timer (period K, no CNP in the period):  alpha <- (1 - g) alpha
  rate-increase events, from a timer (period T) and a byte counter (every B bytes),
  counted since the last CNP as t and bc:
            max(t, bc) <  F: fast recovery     Rc <- (Rt + Rc) / 2
            min(t, bc) >  F: hyper increase    Rt <- Rt + i R_HAI, i = min(t, bc) - F;  Rc <- (Rt + Rc) / 2
            otherwise:       additive increase Rt <- Rt + R_AI;  Rc <- (Rt + Rc) / 2
NotificationPoint (the receiver, NP): at most one CNP per flow per interval N
when CE-marked packets arrive.

Scaling. The paper's constants are for 40 Gbit/s NICs: K = T = 55 us, N = 50 us,
B = 10 MB, g = 1/256, R_AI = 40 Mbit/s. Here a bottleneck serves ~800 packets/s
(BMv2 on a laptop), Python paces with ~0.1 ms resolution, and a marked packet
waits 10-20 ms in the queue before its CE reaches the receiver. DCQCN assumes
that feedback delay is shorter than N (one cut per congestion episode), so the
time constants are scaled up ~400x: K = T = N = 20 ms. B is 100 KB (about 100
packets), rates are in packets per second, and g is 1/32 so alpha tracks
congestion within the few hundred CNPs a run sees. With N = T = 5 ms instead
(~100x) the senders cut several times per episode, oscillate in lockstep and
leave the link ~20% idle (measured; see README). Every value is a field of
DcqcnParams and a flag of the agent.
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class DcqcnParams:
    line_rate_pps: float = 1000.0       # initial and maximum rate Rc
    min_rate_pps: float = 10.0
    g: float = 1.0 / 32                 # alpha gain (paper: 1/256)
    alpha_timer_s: float = 0.020        # K: alpha decay period (paper: 55 us)
    rate_timer_s: float = 0.020         # T: rate-increase timer (paper: 55 us)
    byte_counter_bytes: int = 100_000   # B: rate-increase byte counter (paper: 10 MB)
    fast_recovery_steps: int = 5        # F
    r_ai_pps: float = 5.0               # R_AI: additive increase step
    r_hai_pps: float = 50.0             # R_HAI: hyper increase step
    cnp_interval_s: float = 0.020       # N: NP sends at most one CNP per flow per N (paper: 50 us)

    def __post_init__(self):
        problems = []
        if not self.line_rate_pps > 0:
            problems.append(f"line_rate_pps must be > 0, got {self.line_rate_pps}")
        if not 0 < self.min_rate_pps <= self.line_rate_pps:
            problems.append(f"min_rate_pps must be within (0, line_rate_pps], got {self.min_rate_pps}")
        if not 0 < self.g <= 1:
            problems.append(f"g must be within (0, 1], got {self.g}")
        for name in ("alpha_timer_s", "rate_timer_s", "cnp_interval_s"):
            if not getattr(self, name) > 0:
                problems.append(f"{name} must be > 0, got {getattr(self, name)}")
        if self.byte_counter_bytes <= 0 or self.fast_recovery_steps < 1:
            problems.append("byte_counter_bytes must be > 0 and fast_recovery_steps >= 1")
        if self.r_ai_pps < 0 or self.r_hai_pps < 0:
            problems.append("r_ai_pps and r_hai_pps must be >= 0")
        if problems:
            raise ValueError("invalid DCQCN parameters: " + "; ".join(problems))


@dataclass
class ReactionPoint:
    params: DcqcnParams
    now: float = 0.0
    rate: float = field(init=False)          # Rc, packets/s
    target: float = field(init=False)        # Rt
    alpha: float = 1.0
    timer_events: int = 0                    # t
    byte_events: int = 0                     # bc
    cnps: int = 0
    _bytes: int = 0
    _next_alpha: float = field(init=False)
    _next_rate: float = field(init=False)
    _cnp_in_period: bool = False

    def __post_init__(self):
        self.rate = self.target = self.params.line_rate_pps
        self._next_alpha = self.now + self.params.alpha_timer_s
        self._next_rate = self.now + self.params.rate_timer_s

    def on_cnp(self, now: float) -> None:
        self.advance(now)
        p = self.params
        self.cnps += 1
        self.target = self.rate
        self.rate = max(p.min_rate_pps, self.rate * (1 - self.alpha / 2))
        self.alpha = (1 - p.g) * self.alpha + p.g
        self._cnp_in_period = True
        self.timer_events = self.byte_events = self._bytes = 0
        self._next_rate = now + p.rate_timer_s

    def on_sent(self, nbytes: int, now: float) -> None:
        self.advance(now)
        self._bytes += nbytes
        while self._bytes >= self.params.byte_counter_bytes:
            self._bytes -= self.params.byte_counter_bytes
            self.byte_events += 1
            self._increase()

    def advance(self, now: float) -> None:
        """Run the alpha and rate-increase timers up to `now`."""
        p = self.params
        while self._next_alpha <= now:
            if not self._cnp_in_period:
                self.alpha *= 1 - p.g
            self._cnp_in_period = False
            self._next_alpha += p.alpha_timer_s
        while self._next_rate <= now:
            self._next_rate += p.rate_timer_s
            self.timer_events += 1
            self._increase()
        self.now = max(self.now, now)

    def _increase(self) -> None:
        p = self.params
        t, bc, f = self.timer_events, self.byte_events, p.fast_recovery_steps
        if max(t, bc) < f:
            pass                                   # fast recovery: towards Rt
        elif min(t, bc) > f:
            self.target += (min(t, bc) - f) * p.r_hai_pps
        else:
            self.target += p.r_ai_pps
        self.target = min(self.target, p.line_rate_pps)
        self.rate = min(p.line_rate_pps, (self.target + self.rate) / 2)


@dataclass
class NotificationPoint:
    params: DcqcnParams
    _last_cnp: dict = field(default_factory=dict)

    def should_send_cnp(self, flow, now: float) -> bool:
        """Called for each CE-marked packet of `flow`; True when a CNP is due."""
        last = self._last_cnp.get(flow)
        if last is not None and now - last < self.params.cnp_interval_s:
            return False
        self._last_cnp[flow] = now
        return True
