"""Faults the experiments inject (files starting with _ are not experiments).
Each returns the function that undoes it."""
from __future__ import annotations

import contextlib
import threading


def kill_switch(net, ctl, name: str, lock: threading.Lock | None = None):
    """Kill switch `name`'s process and drop the controller's connection to
    it; undo: restart it and let the controller recover it (under `lock`)."""
    net.switches[name].proc.kill()
    net.switches[name].proc.wait()
    conn = ctl.connections.pop(name, None)
    if conn is not None:
        with contextlib.suppress(Exception):        # its channel is already gone
            conn.close()

    def undo():
        with lock or contextlib.nullcontext():
            net.restart_switch(name)
            ctl.recover_switch(name)
    return undo
