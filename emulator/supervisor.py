"""Recovery of switches whose process died: the launcher starts the switch
again, and the controller pushes the pipeline and writes its whole state in
one reconciliation (nothing duplicated: reconcile writes only what is
missing, and a restarted switch is empty).

`make run` runs a Supervisor in the background for as long as the network
is up; it shares a lock with the CLI, so a recovery never interleaves with
a command.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from control.controller import FabricController, SwitchResult
from emulator.network import Network


@dataclass
class Recovery:
    switch: str
    result: SwitchResult
    seconds: float

    def __str__(self) -> str:
        r = self.result
        return (f"{self.switch} died and was restarted: pipeline {'pushed' if r.pipeline_pushed else 'in place'}, "
                f"{r.report} ({self.seconds:.1f} s)")


class Supervisor:
    def __init__(self, net: Network, ctl: FabricController, lock: threading.Lock | None = None,
                 on_recovery=print):
        self.net, self.ctl = net, ctl
        self.lock = lock or threading.Lock()
        self.on_recovery = on_recovery
        self.recoveries: list[Recovery] = []

    def check_once(self) -> list[Recovery]:
        """Restart and reprogram every switch whose process died."""
        done = []
        with self.lock:
            for name in self.net.dead_switches():
                start = time.monotonic()
                self.net.restart_switch(name)
                result = self.ctl.recover_switch(name)
                rec = Recovery(name, result, time.monotonic() - start)
                done.append(rec)
                self.recoveries.append(rec)
                self.on_recovery(rec)
        return done

    def run(self, stop: threading.Event, period_s: float = 0.5) -> None:
        while not stop.wait(period_s):
            try:
                self.check_once()
            except Exception as exc:          # keep supervising; say what failed
                self.on_recovery(f"recovery failed: {exc}")
