"""Progress: bars on a terminal only; off a terminal plain lines (every 10 s of a phase and at its end); -q silences
both, not warnings."""
from __future__ import annotations

import io
import re

import pytest

from fpr import progress


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture
def stderr(monkeypatch):
    def use(stream: io.StringIO) -> io.StringIO:
        monkeypatch.setattr("sys.stderr", stream)
        return stream
    monkeypatch.setattr(progress, "_enabled", True)
    return use


def test_off_a_terminal_each_phase_is_one_line(stderr):
    err = stderr(io.StringIO())
    assert [x for x in progress.bar(range(5), desc="embedding queries", unit="img")] == [0, 1, 2, 3, 4]
    with progress.bar(total=10, desc="matching", unit="query") as b:
        b.update(4)
        b.update(6)
    with progress.bar(total=10, desc="cut short", unit="query") as b:
        b.update(3)
    lines = err.getvalue().splitlines()
    assert len(lines) == 3 and "\r" not in err.getvalue(), lines
    assert re.fullmatch(r"fpr: embedding queries: 5 img in \d+\.\d s", lines[0]), lines
    assert re.fullmatch(r"fpr: matching: 10 queries in \d+\.\d s", lines[1]), lines
    assert re.fullmatch(r"fpr: cut short: 3/10 queries in \d+\.\d s", lines[2]), lines


class _FakeClock:
    def __init__(self):
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_off_a_terminal_a_running_phase_prints_a_line_every_10_s_of_updates(stderr):
    err = stderr(io.StringIO())
    clock = _FakeClock()
    line = progress.PhaseLine(total=40, desc="copy-paste: matching", unit="query", clock=clock, timer=False)
    for dt in (4, 5.9, 0.2, 9.9, 0.1, 25):  # updates at 4, 9.9, 10.1, 20, 20.1, 45.1 s
        clock.t += dt
        line.update(2)
    line.close()
    assert err.getvalue().splitlines() == ["fpr: copy-paste: matching: 6/40 queries, 10 s so far",
                                           "fpr: copy-paste: matching: 10/40 queries, 20 s so far",
                                           "fpr: copy-paste: matching: 12/40 queries, 45 s so far",
                                           "fpr: copy-paste: matching: 12/40 queries in 45.1 s"]


def test_the_timer_speaks_when_one_step_takes_minutes(stderr):
    """No update for 35 s: the timer's waits end at 10, 20 and 30 s (each as long as the next line is
    due), then the phase closes during the fourth."""
    err = stderr(io.StringIO())
    clock = _FakeClock()
    line = progress.PhaseLine(range(3), desc="rendering", unit="img", clock=clock, timer=False)
    waits = []

    def wait(seconds: float) -> bool:  # Event.wait: True once the phase closed
        waits.append(seconds)
        if len(waits) == 2:
            line.update(1)  # a step 10 s in, just after the first line: no line of its own
        clock.t += min(seconds, 5.0) if len(waits) == 4 else seconds
        return len(waits) == 4

    clock.t += 3.0  # the timer starts 3 s into the phase: its first wait is 7 s
    line._run(wait)
    assert waits == [7.0, 10.0, 10.0, 10.0]
    assert err.getvalue().splitlines() == ["fpr: rendering: 0/3 img, 10 s so far",
                                           "fpr: rendering: 1/3 img, 20 s so far",
                                           "fpr: rendering: 1/3 img, 30 s so far"]


def test_the_timer_thread_lives_from_the_first_step_to_the_end(stderr):
    stderr(io.StringIO())
    import threading

    def timers():
        return [t for t in threading.enumerate() if t.name.startswith("fpr-progress")]

    before = len(timers())
    it = progress.bar(range(3), desc="a phase", unit="img")
    assert len(timers()) == before  # built but not started: nothing runs yet
    for _ in it:
        assert len(timers()) == before + 1
    assert len(timers()) == before
    with progress.bar(total=2, desc="another") as b:
        assert len(timers()) == before + 1
        b.update(2)
    assert len(timers()) == before
    with pytest.raises(ZeroDivisionError):
        for _ in progress.bar(range(3), desc="failing"):
            1 / 0
    assert len(timers()) == before


def test_on_a_terminal_a_bar_is_drawn(stderr):
    err = stderr(_Terminal())
    list(progress.bar(range(3), desc="rendering", unit="img"))
    assert "rendering" in err.getvalue() and "\r" in err.getvalue()


def test_quiet_silences_bars_and_lines_but_not_warnings(stderr, monkeypatch):
    err = stderr(io.StringIO())
    monkeypatch.setattr(progress, "_enabled", False)
    list(progress.bar(range(3), desc="x"))
    progress.log("hidden")
    progress.warn("asked for 10, got 8")
    assert err.getvalue() == "fpr: warning: asked for 10, got 8\n"


def test_counts_read_in_the_plural(stderr):
    """"1080 query" (issue #33): a count other than one takes the plural; abbreviations stay as they are."""
    assert [progress.units("query", n) for n in (0, 1, 2, 1080)] == ["queries", "query", "queries", "queries"]
    assert (progress.units("batch", 3), progress.units("identity", 2), progress.units("img", 5),
            progress.units("variant", 2), progress.units("setting", 1)) == \
        ("batches", "identities", "img", "variants", "setting")
    err = stderr(io.StringIO())
    list(progress.bar(range(1), desc="one", unit="query"))
    assert re.fullmatch(r"fpr: one: 1 query in \d+\.\d s", err.getvalue().strip())
