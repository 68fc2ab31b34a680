"""Deadlines of the tests that poll for a state (a server's workers ready, a run done): generous under load.

A poll returns as soon as the state is reached, so a long deadline costs nothing on a healthy run; it only
decides when a hung one fails. On a shared 2-core machine at load 10-30 a worker's imports alone can take
minutes, so a deadline is scaled by the load per core (1-minute load average / cores, at least 1; the
deadline is read again while polling, so load that builds up during the wait extends it) and
``FPR_TEST_PATIENCE`` (a factor, default 1) on top.
"""
from __future__ import annotations

import os
import time


def load_factor() -> float:
    """max(1, 1-minute load average per core) x FPR_TEST_PATIENCE."""
    try:
        per_core = os.getloadavg()[0] / (os.cpu_count() or 1)
    except OSError:  # no load average on this platform
        per_core = 1.0
    return max(1.0, per_core) * float(os.environ.get("FPR_TEST_PATIENCE", "1"))


class Deadline:
    """``seconds`` of an idle machine, stretched by :func:`load_factor` (checked at each poll)."""

    def __init__(self, seconds: float):
        self.seconds, self.start = seconds, time.monotonic()

    def passed(self) -> bool:
        return time.monotonic() - self.start > self.seconds * load_factor()

    def describe(self) -> str:
        return f"{time.monotonic() - self.start:.0f} s ({self.seconds:.0f} s idle x load factor {load_factor():.1f})"
