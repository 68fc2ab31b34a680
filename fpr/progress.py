"""Progress bars and log lines: always on stderr, never on stdout (stdout is for results).

Bars are drawn only when stderr is a terminal; redirected to a file or a CI log, each
phase is one plain line when it ends (what, how many, how long) instead of hundreds of
carriage-return frames. ``-q`` (``FPR_QUIET=1``) silences both, but not warnings.
"""
from __future__ import annotations

import sys
import time
from typing import Iterable, Iterator, TypeVar

from fpr import settings

T = TypeVar("T")
_enabled = not settings.flag("FPR_QUIET")


def set_enabled(flag: bool) -> None:
    global _enabled
    _enabled = flag


def enabled() -> bool:
    return _enabled


def log(message: str) -> None:
    if _enabled:
        print(f"fpr: {message}", file=sys.stderr, flush=True)


def warn(message: str) -> None:
    """One line on stderr that ``-q`` does not silence: the result differs from what was asked."""
    print(f"fpr: warning: {message}", file=sys.stderr, flush=True)


class PhaseLine:
    """Stands in for a bar off a terminal: counts, and prints ``DESC: N/TOTAL UNIT in S s`` once, at the end."""

    def __init__(self, iterable: Iterable[T] | None = None, *, total: int | None = None, desc: str = "",
                 unit: str = "it"):
        self._it, self.desc, self.unit, self.n = iterable, desc, unit, 0
        self.total = total if total is not None else (len(iterable) if hasattr(iterable, "__len__") else None)
        self._start, self._closed = time.perf_counter(), False

    def update(self, n: int = 1) -> None:
        self.n += n

    def __iter__(self) -> Iterator[T]:
        for x in self._it or ():
            yield x
            self.n += 1
        self.close()

    def __enter__(self) -> "PhaseLine":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        of = f"/{self.total}" if self.total is not None and self.total != self.n else ""
        log(f"{self.desc or 'done'}: {self.n}{of} {self.unit} in {time.perf_counter() - self._start:.1f} s")


def bar(iterable: Iterable[T] | None = None, *, total: int | None = None, desc: str = "", unit: str = "it"):
    if _enabled and not sys.stderr.isatty():
        return PhaseLine(iterable, total=total, desc=desc, unit=unit)
    from tqdm import tqdm

    return tqdm(iterable, total=total, desc=desc, unit=unit, file=sys.stderr, disable=not _enabled,
                leave=False, dynamic_ncols=True, mininterval=0.5)
