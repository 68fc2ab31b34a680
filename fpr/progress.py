"""Progress bars and log lines: always on stderr, never on stdout (stdout is for results).

Bars are drawn only when stderr is a terminal; redirected to a file or a CI log, each
phase is plain lines instead of hundreds of carriage-return frames: one every
:data:`EVERY_S` seconds while it runs (how many so far, how long; a timer thread, so a
phase whose single step is long still speaks) and one when it ends (what, how many, how
long). ``-q`` (``FPR_QUIET=1``) silences both, but not warnings.
"""
from __future__ import annotations

import os
import sys
import threading
import time
from typing import Iterable, Iterator, TypeVar

from fpr import settings

T = TypeVar("T")
_enabled = not settings.flag("FPR_QUIET")
EVERY_S = 10.0  # off a terminal, a running phase prints a line at least this often

# Held while a line is written, and across a fork: a forked worker never inherits stderr's lock
# from a timer thread caught in the middle of a line.
_write_lock = threading.Lock()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_write_lock.acquire, after_in_parent=_write_lock.release,
                        after_in_child=_write_lock.release)


def set_enabled(flag: bool) -> None:
    global _enabled
    _enabled = flag


def enabled() -> bool:
    return _enabled


def log(message: str) -> None:
    if _enabled:
        with _write_lock:
            print(f"fpr: {message}", file=sys.stderr, flush=True)


def warn(message: str) -> None:
    """One line on stderr that ``-q`` does not silence: the result differs from what was asked."""
    with _write_lock:
        print(f"fpr: warning: {message}", file=sys.stderr, flush=True)


class PhaseLine:
    """Stands in for a bar off a terminal: counts; prints ``DESC: N/TOTAL UNIT, S s so far`` at least every
    :data:`EVERY_S` seconds while the phase runs, and ``DESC: N/TOTAL UNIT in S s`` once, at the end.

    A daemon timer thread prints the lines in between when no update comes (one step of the phase can
    take minutes on a loaded machine); it runs from ``with`` or the first step of the iteration to
    :meth:`close` (the end of either, also on an exception). ``clock`` and ``timer=False`` are for tests
    (a fake clock drives :meth:`_run` instead of the thread).
    """

    def __init__(self, iterable: Iterable[T] | None = None, *, total: int | None = None, desc: str = "",
                 unit: str = "it", clock=time.perf_counter, timer: bool = True):
        self._it, self.desc, self.unit, self.n = iterable, desc, unit, 0
        self.total = total if total is not None else (len(iterable) if hasattr(iterable, "__len__") else None)
        self._clock = clock
        self._start = self._last = clock()
        self._closed = False
        self._stop = threading.Event()
        self._timer, self._thread = timer, None

    def _start_timer(self) -> None:
        if self._timer and self._thread is None and not self._closed:
            self._thread = threading.Thread(target=self._run, args=(self._stop.wait,), daemon=True,
                                            name=f"fpr-progress {self.desc}")
            self._thread.start()

    def _counts(self) -> str:
        of = f"/{self.total}" if self.total is not None and self.total != self.n else ""
        return f"{self.desc or 'done'}: {self.n}{of} {units(self.unit, self.n if self.total is None else self.total)}"

    def _beat(self) -> None:
        """A line if :data:`EVERY_S` seconds passed since the phase began or the last line."""
        now = self._clock()
        if not self._closed and now - self._last >= EVERY_S:
            self._last = now
            of = f"/{self.total}" if self.total is not None else ""
            count = self.n if self.total is None else self.total
            log(f"{self.desc or 'working'}: {self.n}{of} {units(self.unit, count)}, {now - self._start:.0f} s so far")

    def _run(self, wait) -> None:
        """The timer: ``wait(seconds)`` until the next line is due (True once the phase closed), then a line."""
        while not wait(max(0.0, EVERY_S - (self._clock() - self._last))):
            self._beat()

    def update(self, n: int = 1) -> None:
        self.n += n
        self._beat()

    def __iter__(self) -> Iterator[T]:
        self._start_timer()
        try:
            for x in self._it or ():
                yield x
                self.n += 1
                self._beat()
        finally:
            self.close()

    def __enter__(self) -> "PhaseLine":
        self._start_timer()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()
        log(f"{self._counts()} in {self._clock() - self._start:.1f} s")


_PLURALS = {"query": "queries", "identity": "identities", "batch": "batches"}
_INVARIANT = {"it", "img", "B", "MB", "GB"}  # abbreviations read the same for any count


def units(unit: str, n: int) -> str:
    """``unit`` for ``n`` of it: ``1 query``, ``1080 queries`` (abbreviations such as ``img`` unchanged)."""
    if n == 1 or unit in _INVARIANT or unit.endswith("s"):
        return unit
    return _PLURALS.get(unit, unit + "s")


def bar(iterable: Iterable[T] | None = None, *, total: int | None = None, desc: str = "", unit: str = "it"):
    if _enabled and not sys.stderr.isatty():
        return PhaseLine(iterable, total=total, desc=desc, unit=unit)
    from tqdm import tqdm

    return tqdm(iterable, total=total, desc=desc, unit=unit, file=sys.stderr, disable=not _enabled,
                leave=False, dynamic_ncols=True, mininterval=0.5)
