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

A set of kernels may be compiled ahead, by another process, into numba's cache (``fpr demo`` does, on
the core its own work leaves idle: :mod:`fpr.workflows.kernels`): :func:`compile_ahead` registers that
process, and the set's first use here calls :func:`wait_ahead`, which waits for it and then loads the
set from the cache instead of compiling the same kernels a second time beside it.

:func:`prefetch` gives kernels LLVM's prefetch hint, which numba does not expose (a numba intrinsic): a kernel that streams one
row while the next waits in memory asks for the next one's cache lines as it goes (no fault, no wait).
"""
from __future__ import annotations

import os
import time
from typing import Any, Callable, Iterable

from fpr import cache, progress, settings

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


def cacheable() -> bool:
    """Whether numba can keep compiled kernels here: the same test :func:`njit` meets (a writable place for
    fpr's sources' cache), on a function of this module; nothing is compiled."""
    from numba import njit as numba_njit

    try:
        numba_njit(cache=True)(_probe)
    except RuntimeError as exc:
        if "cannot cache function" not in str(exc):
            raise
        return False
    return True


def _probe() -> None:
    """What :func:`cacheable` decorates (never called)."""


# kernel set -> (the process that registered it, the process compiling the set into numba's cache)
_AHEAD: dict[str, tuple[int, Any]] = {}


def compile_ahead(name: str, process: Any) -> None:
    """Say that ``process`` (a started child of this process) compiles kernel set ``name`` into numba's cache."""
    _AHEAD[name] = (os.getpid(), process)


def wait_ahead(name: str) -> None:
    """Before this process compiles kernel set ``name``: if a child compiles it into numba's cache, wait for
    the child to end, so the set loads from the cache here. A child that failed or was stopped leaves the
    set to this process, as without it. A forked process inherits the table but waits for no one's child."""
    owner, process = _AHEAD.pop(name, (None, None))
    if process is None or owner != os.getpid():
        return
    t0 = time.perf_counter()
    process.join(1.0)
    if process.exitcode is None:  # said only when the wait is felt
        progress.log(f"waiting for the {name} kernels, compiling in the background into numba's cache")
        process.join()
        progress.log(f"{name} kernels compiled in the background: waited {time.perf_counter() - t0:.1f} s")


def forget_ahead(names: Iterable[str] | None = None) -> None:
    """Wait for no process compiling the sets ``names`` (None: any; a child that compiles ahead itself)."""
    for name in list(_AHEAD) if names is None else names:
        _AHEAD.pop(name, None)


def prefetch() -> Any:
    """A numba intrinsic ``hint(array, i)`` for kernels (``hint = prefetch()`` at import): asks for the cache
    line holding ``array[i]`` (a read, into L2 and up) and goes on. ``i`` must be in range (the address is
    computed unchecked; a hint never faults)."""
    from llvmlite import ir
    from numba.core import cgutils, types
    from numba.extending import intrinsic

    @intrinsic
    def hint(typingctx, array, index):
        def codegen(context, builder, signature, args):
            array_type = signature.args[0]
            view = context.make_array(array_type)(context, builder, args[0])
            pointer = cgutils.get_item_pointer(context, builder, array_type, view, [args[1]], wraparound=False)
            byte_pointer = ir.IntType(8).as_pointer()
            i32 = ir.IntType(32)
            function = cgutils.get_or_insert_function(
                builder.module, ir.FunctionType(ir.VoidType(), [byte_pointer, i32, i32, i32]), "llvm.prefetch.p0i8")
            # read (0), locality 2 (L2 and up: the current row keeps L1), data cache (1)
            builder.call(function, [builder.bitcast(pointer, byte_pointer), i32(0), i32(2), i32(1)])
            return context.get_dummy_value()

        return types.void(array, index), codegen

    return hint


__all__ = ["cacheable", "compile_ahead", "forget_ahead", "njit", "prefetch", "wait_ahead"]
