"""The demo speaks off a terminal while a seed's index and queries run, whatever runs inside (#37 item 3)."""
from __future__ import annotations

import io
import threading

from fpr import progress
from fpr.workflows import demo
from tests.patience import Deadline


def test_a_silent_stretch_inside_a_seed_still_prints_a_line_every_interval(monkeypatch):
    """A body that prints nothing (a first run's kernel compile) gets the phase's timer lines, then its end
    line; the body's result is untouched."""
    err = io.StringIO()
    monkeypatch.setattr("sys.stderr", err)
    monkeypatch.setattr(progress, "_enabled", True)
    monkeypatch.setattr(progress, "EVERY_S", 0.05)
    release = threading.Event()
    seen = []

    def body() -> None:
        with demo._speaking("world seed 0: index and queries (w)"):
            release.wait()  # silent until the test has seen two timer lines
            seen.append("done")

    t = threading.Thread(target=body)
    t.start()
    deadline = Deadline(20)
    while err.getvalue().count("so far") < 2 and not deadline.passed():
        release.wait(0.01)  # a poll, not a fixed sleep: it ends as soon as two lines are there
    release.set()
    t.join()
    lines = err.getvalue().splitlines()
    timer = [x for x in lines if x.endswith("s so far")]
    assert len(timer) >= 2, deadline.describe()
    assert all(x.startswith("fpr: world seed 0: index and queries (w): 0/1 step, ") for x in timer)
    assert lines[-1].startswith("fpr: world seed 0: index and queries (w): 1 step in ") and seen == ["done"]
