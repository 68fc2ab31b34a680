"""The timing protocol every benchmark in this folder follows (issue #22 item 6), in one place.

* **Interleaved rounds**: each round runs every contender once, the order rotated round by round, so a
  load change on this shared machine hits all of them alike (:func:`interleaved`).
* **Median and range**: a figure is the median over the rounds with its min and max
  (:func:`spread`); a ratio is taken round by round, then summarised the same way (:func:`ratios`).
* **Load printed**: the 1/5/15-minute load average before and after (:func:`load`, :func:`machine`).
* **Physical limits measured in the same run**: a large float32 matmul's FLOP/s (:func:`sgemm_gflops`,
  on the BLAS the timed code uses: NumPy's or torch's) and a large copy's memory bandwidth
  (:func:`copy_gbps`), so a figure can be printed as a fraction of what the machine can do right now.

Imported by the scripts, which put this folder on ``sys.path``. Standard library and NumPy only
(torch is imported only when asked for its matmul).
"""
from __future__ import annotations

import os
import statistics
import sys
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np


def load() -> str:
    """The 1, 5 and 15-minute load averages, e.g. ``3.15 3.67 5.19``."""
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def machine() -> str:
    """One line for a results file's header: cores, Python, load average now."""
    return f"{os.cpu_count()} cores; python {sys.version.split()[0]}; load average {load()}"


@dataclass(frozen=True)
class Spread:
    """Median and range of one figure over the rounds."""

    median: float
    lo: float
    hi: float
    n: int

    def fmt(self, spec: str = ".3f", scale: float = 1.0) -> str:
        return (f"{self.median * scale:{spec}} [{self.lo * scale:{spec}} - {self.hi * scale:{spec}}]")

    def __str__(self) -> str:
        return self.fmt()


def spread(xs: list[float]) -> Spread:
    if not xs:
        raise ValueError("spread of no values")
    return Spread(statistics.median(xs), min(xs), max(xs), len(xs))


def ratios(a: list[float], b: list[float]) -> Spread:
    """a/b round by round (the rounds are paired: both ran under the same load), as a spread."""
    if len(a) != len(b):
        raise ValueError(f"ratios of {len(a)} and {len(b)} rounds")
    return spread([x / y for x, y in zip(a, b)])


def timed(fn: Callable[[], object]) -> tuple[float, object]:
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


def interleaved(contenders: dict[str, Callable[[], object]], rounds: int,
                check: Callable[[str, object], None] | None = None) -> dict[str, list[float]]:
    """Seconds per contender per round; round r starts with contender r mod k (rotation), so no contender
    always runs first (cold caches, a load spike at the start of a round). ``check(name, result)`` sees
    every result (e.g. that the anchor and the path under test computed the same thing)."""
    names = list(contenders)
    times: dict[str, list[float]] = {n: [] for n in names}
    for r in range(rounds):
        order = names[r % len(names):] + names[:r % len(names)]
        for name in order:
            dt, out = timed(contenders[name])
            if check is not None:
                check(name, out)
            times[name].append(dt)
    return times


def sgemm_gflops(n: int = 2048, rounds: int = 3, backend: str = "numpy") -> Spread:
    """GFLOP/s of an n x n x n float32 matmul (2 n^3 flops) on NumPy's BLAS or torch's, with the threads the
    process has now: the compute ceiling of whatever this process runs on the same BLAS, measured now."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    if backend == "torch":
        import torch

        ta, tb = torch.from_numpy(a), torch.from_numpy(b)
        fn: Callable[[], object] = lambda: torch.mm(ta, tb)  # noqa: E731
    elif backend == "numpy":
        fn = lambda: a @ b  # noqa: E731
    else:
        raise ValueError(f"backend {backend!r}: numpy or torch")
    fn()  # warm-up: thread pool start, first-touch of the output
    return spread([2 * n ** 3 / timed(fn)[0] / 1e9 for _ in range(rounds)])


def copy_gbps(mib: int = 256, rounds: int = 3) -> Spread:
    """GB/s of a large array copy, counting the bytes read plus the bytes written (2 x size): the memory
    bandwidth a streaming pass over data of that size can reach."""
    src = np.ones(mib * 2 ** 20 // 8, dtype=np.float64)
    dst = np.empty_like(src)
    np.copyto(dst, src)  # first touch of dst
    return spread([2 * src.nbytes / timed(lambda: np.copyto(dst, src))[0] / 1e9 for _ in range(rounds)])


def model_gflop(model, example) -> float:
    """GFLOP of one forward of a torch ``model`` on ``example`` (torch's own FLOP counter: 2 per
    multiply-add of its convolutions and matmuls): with a measured rate it gives the fraction of the
    sgemm ceiling a pipeline reaches."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        model(example)
    return counter.get_total_flops() / 1e9
