"""Compiling fpr's numba kernels into numba's cache ahead of their first use (``python -m fpr.workflows.kernels``).

A first ``fpr demo`` on a new machine spent 28 of its 41 s (idle, 2 cores) in numba compiling kernels on one
core while the other idled: about 8 s the metric engine's and the exact recheck's, right after the first
embedding, and 20 s copy-paste's, before its few seconds of matching. Two ways keep that off the wait:

* :func:`compiling_ahead`: while the demo renders, embeds and compiles the metric kernels itself, a forked
  process compiles copy-paste's into numba's cache; copy-paste's first use waits for that process
  (:func:`fpr.compiled.wait_ahead`) and loads them from the cache;
* ``python -m fpr.workflows.kernels`` (``make demo``'s install step, as pip compiles ``.pyc`` files):
  every kernel set compiled into numba's cache once, both sets at a time on two cores.

Each set is compiled by running its own code on a tiny input with the argument types a real run passes
(numba compiles a kernel per signature), so what lands in the cache is what a run loads. Where numba cannot
cache (no writable place: :mod:`fpr.compiled`), nothing is compiled ahead and each process compiles in memory
as before, said once.
"""
from __future__ import annotations

import multiprocessing as mp
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import numpy as np

from fpr import compiled, progress

METRICS, COPY_PASTE = "metrics", "copy-paste"  # COPY_PASTE: fpr.scorers.copy_paste.kernels.KERNEL_SET
KERNEL_SETS = (METRICS, COPY_PASTE)


def _metrics() -> None:
    """The metric engine's and the exact recheck's kernels: one small block of queries through the recheck path
    (:meth:`fpr.eval.recheck.RecheckedGallery.block`, as :func:`fpr.eval.scoring.score_blocks` calls it)."""
    from fpr.eval import recheck

    if not recheck.available():  # FPR_EXACT_PATH=full: this path never runs here
        return
    rng = np.random.default_rng(0)
    gallery = recheck.RecheckedGallery(rng.standard_normal((24, 8)).astype(np.float32))
    keys = recheck.KeyIndex(np.arange(24) % 6)
    gallery.block(rng.standard_normal((10, 8)).astype(np.float32), keys.of(np.arange(10) % 6), 5)


def _copy_paste() -> None:
    """copy-paste's kernels (``kernels``, ``exact``, ``align``): the scorer's own warm-up, a noise image matched
    against itself, which it runs before forking its matching processes."""
    from fpr.scorers.copy_paste.match import compile_kernels as copy_paste_kernels

    copy_paste_kernels()


_SETS = {METRICS: _metrics, COPY_PASTE: _copy_paste}


def compile_kernels(sets: Sequence[str] = KERNEL_SETS) -> dict[str, float]:
    """Compile the kernel ``sets`` here (loaded from numba's cache where they are in it): seconds per set."""
    out = {}
    for name in sets:
        t = time.perf_counter()
        _SETS[name]()
        out[name] = round(time.perf_counter() - t, 2)
    return out


def can_compile_ahead() -> bool:
    """Whether another process's compile reaches this one: numba caches here and this process may fork."""
    from fpr.galleries.world import fork_safe

    return fork_safe() and compiled.cacheable()


def _ahead(sets: Sequence[str]) -> None:
    """The forked process: compile ``sets`` into numba's cache; a failure is said, and leaves them to the parent."""
    stop_with_parent()
    compiled.forget_ahead()
    try:
        compile_kernels(sets)
    except Exception as exc:  # the parent compiles them itself on first use, as without this process
        progress.warn(f"compiling the {', '.join(sets)} kernels ahead failed ({type(exc).__name__}: {exc}); "
                      "they compile on first use instead")
        sys.exit(1)


def stop_with_parent() -> None:
    """In a forked background process: stopped with the process that started it (killed by a time limit, say)
    rather than working on for nobody. Linux only (prctl); elsewhere it runs to its end."""
    import ctypes
    import signal

    if sys.platform.startswith("linux"):
        PR_SET_PDEATHSIG = 1
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


@contextmanager
def compiling_ahead(sets: Sequence[str]) -> Iterator[bool]:
    """While the body runs, one forked process compiles the kernel ``sets`` into numba's cache, and each set's
    first use in this process waits for it (True); False where nothing is compiled ahead (numba cannot cache
    here, or this process may not fork): the body compiles them on first use, as without this.

    Fork it first, before this process loads a model, starts a thread or compiles a kernel (as the demo's other
    background process). Leaving the body stops the process if it still runs (numba writes each cache file
    whole, under a temporary name first)."""
    if not sets or not can_compile_ahead():
        yield False
        return
    process = mp.get_context("fork").Process(target=_ahead, args=(tuple(sets),), daemon=True,
                                             name="fpr-kernels-ahead")
    process.start()
    for name in sets:
        compiled.compile_ahead(name, process)
    try:
        yield True
    finally:
        compiled.forget_ahead(sets)  # a set the body never used waits for nobody later
        if process.is_alive():
            process.terminate()
        process.join()


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m fpr.workflows.kernels``: every kernel set into numba's cache (two at a time), one line."""
    t0 = time.perf_counter()
    progress.set_enabled(False)  # one line: this one's, below
    if not compiled.cacheable():
        print("fpr: numba cannot cache compiled kernels here (set NUMBA_CACHE_DIR to a writable folder): nothing "
              "compiled ahead; each run compiles them in memory", file=sys.stderr)
        return 0
    with compiling_ahead([COPY_PASTE]):  # copy-paste's first use below waits for it, then loads them
        compile_kernels(KERNEL_SETS)
    print(f"fpr: numba kernels compiled into its cache ({', '.join(KERNEL_SETS)}; {time.perf_counter() - t0:.0f} s; "
          "a first fpr demo loads them from there)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
