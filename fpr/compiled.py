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

:func:`prefetch` gives kernels LLVM's prefetch hint, which numba does not expose (a numba intrinsic): a kernel that streams one
row while the next waits in memory asks for the next one's cache lines as it goes (no fault, no wait).
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


__all__ = ["njit", "prefetch"]
