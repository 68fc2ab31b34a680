"""Compiling kernels with numba, the one way: kept in numba's cache where it can write, else in memory.

``numba.njit(cache=True)`` needs a writable place for the compiled code: ``NUMBA_CACHE_DIR``, the
``__pycache__`` beside the sources, or the user's cache folder, tried in that order. A read-only
install (a system or container site-packages) with an unwritable or absent cache folder has none, and
numba then refuses the function itself (``cannot cache function 'round_checked': no locator
available``) when the module defining it is imported. fpr's kernels are pure functions of their
arguments, so the cache only saves compile time: here such a kernel is compiled in memory instead
(each process compiles it again), said once per process, and the run goes on.

Every numba kernel in fpr is compiled through :func:`njit` (``tests/test_ownership.py`` holds every
other module to that). numba's import stays inside the call: a module of kernels imports numba when
it decorates, so ``ImportError`` still tells its caller that numba is missing (the NumPy engines).
"""
from __future__ import annotations

from typing import Any, Callable

from fpr import cache, settings

_HINT = "set NUMBA_CACHE_DIR to a writable folder to keep compiled kernels between runs"


def njit(**options: Any) -> Callable[[Callable], Any]:
    """``numba.njit(cache=True, **options)`` where numba can cache; where it cannot, the same compiled in memory
    (one warning per process). Use as ``@njit(nogil=True)`` or ``njit(nogil=True)(function)``."""
    from numba import njit as numba_njit

    def decorate(function: Callable) -> Any:
        try:
            return numba_njit(cache=True, **options)(function)
        except RuntimeError as exc:
            if "cannot cache function" not in str(exc):
                raise
            where = settings.raw("NUMBA_CACHE_DIR") or "(NUMBA_CACHE_DIR unset; the package folder and ~/.cache)"
            cache.warn_unusable("numba kernel cache", where, "no writable place for compiled kernels", _HINT,
                                "compiling the kernels in memory, each run anew")
            return numba_njit(cache=False, **options)(function)

    return decorate


__all__ = ["njit"]
