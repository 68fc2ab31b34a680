"""tests/patience.py: a polling deadline stated for an idle machine, stretched by the load per core."""
from __future__ import annotations

from tests import patience


def _machine(monkeypatch, load: float, cores: int = 2, factor: str | None = None):
    monkeypatch.setattr(patience.os, "getloadavg", lambda: (load, 0.0, 0.0))
    monkeypatch.setattr(patience.os, "cpu_count", lambda: cores)
    if factor is None:
        monkeypatch.delenv("FPR_TEST_PATIENCE", raising=False)
    else:
        monkeypatch.setenv("FPR_TEST_PATIENCE", factor)


def test_the_load_factor_is_the_load_per_core_at_least_1_times_the_patience(monkeypatch):
    for load, cores, factor, want in [(0.5, 2, None, 1.0), (2.0, 2, None, 1.0), (10.0, 2, None, 5.0),
                                      (27.0, 2, None, 13.5), (10.0, 4, "2", 5.0), (1.0, 2, "3", 3.0)]:
        _machine(monkeypatch, load, cores, factor)
        assert patience.load_factor() == want, (load, cores, factor)


def test_a_deadline_stretches_with_the_load_while_polling(monkeypatch):
    now = [1000.0]
    monkeypatch.setattr(patience.time, "monotonic", lambda: now[0])
    _machine(monkeypatch, 1.0)
    d = patience.Deadline(90)
    now[0] += 90
    assert not d.passed()  # exactly at the deadline: not yet
    now[0] += 1
    assert d.passed()
    _machine(monkeypatch, 10.0)  # the load rose during the wait: 90 s x 5
    assert not d.passed()
    now[0] += 450 - 91
    assert not d.passed()
    now[0] += 1
    assert d.passed()
    assert d.describe() == "451 s (90 s idle x load factor 5.0)"
