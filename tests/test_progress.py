"""Progress: bars on a terminal only; off a terminal one plain line per phase; -q silences both, not warnings."""
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
    assert re.fullmatch(r"fpr: matching: 10 query in \d+\.\d s", lines[1]), lines
    assert re.fullmatch(r"fpr: cut short: 3/10 query in \d+\.\d s", lines[2]), lines


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
