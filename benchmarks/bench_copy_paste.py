"""copy-paste per query, as production runs it, against its compute floor and SSIM, timed in the same run.

Measured (one process, one BLAS thread, interleaved rounds whose order rotates, the same repetitions):

* **scorer**: ``CopyPaste().score(batch)`` on a QueryBatch of built-in world queries with their
  reference images, matched in this process (``_match_processes`` forced to 1, as a batch below
  ``2 * CHUNK`` queries runs): loading, greyscale, patches and windows of queries and references
  (a fresh reference cache per call, as each production call starts), the appearance encoder, the
  search, the proposals, refinement and verification.
* **floor**: the NCC search products the scorer performed in that call, with the same shapes, each
  as one float32 matrix product (one BLAS sgemm call): ``templates (2n, 64) @ coarse windows (64, L2)``
  per ``pixel_match`` (n searched patches, their mirror images, L2 every-second-position query
  windows). That product is the floor because it is the one step whose work cannot shrink without
  changing the values: every searched patch must be compared with every coarse query window to find
  its best match, and it is the bulk of the arithmetic (verification's local NCCs touch 25 windows per
  patch, the search every coarse window). The shapes are recorded by wrapping ``pixel_match``
  once, outside the timed rounds.
* **ssim**: skimage ``structural_similarity`` on the same (query, reference) pairs the scorer was
  given (each query with each of its pixel-checked references), both loaded and converted to
  greyscale at the scorer's working size (128 px on the longer side), the reference resized to the
  query's shape.

* **prep**: the per-image preparation alone, as the scorer does it once per image and call: loading,
  greyscale at 128 px, the patches at six scales and the detrended windows, for each query and each
  distinct reference (both the patches and the windows of every image: an upper bound, the scorer skips
  a direction it does not try). Its bits are fixed by PIL (resize, blur) and the BLAS (detrending), so it
  can be moved but not compiled; it is not part of the floor, which is the search alone.
* **baseline** (``--baseline-rev``, default a6d1d2f: the commit before issue #22's copy-paste work): that
  revision's copy-paste modules loaded under another name, run the same way; its values must equal the
  scorer's bit for bit (checked once), except ``appearance``, now the correctly rounded dot product
  (its last bits differ from that revision's BLAS dot).

Printed: per query milliseconds, wall and CPU time (``process_time``: this process's, which a loaded
machine inflates far less), median [min-max] over rounds, the scorer / floor and scorer / ssim
ratios per round (median [min-max]), the Python-level calls per query (cProfile, one extra call),
and the load average before and after.

    PYTHONPATH=. python benchmarks/bench_copy_paste.py [--seed 11] [--identities 2] [--rounds 5] [--baseline-rev REV]
        [--queries N]

Results: benchmarks/results/copy_paste_speed.md.
"""
from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
from PIL import Image
from threadpoolctl import threadpool_limits

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from fpr.galleries.world import METHODS, World, WorldConfig  # noqa: E402
from fpr.images import load_rgb  # noqa: E402
from fpr.scorers import QueryBatch  # noqa: E402
from fpr.scorers.copy_paste import match as cp_match, patches as cp_patches  # noqa: E402
from fpr.scorers.copy_paste import scorer as cp  # noqa: E402


def world_batch(seed: int, identities: int, folder: Path, limit: int = 0) -> QueryBatch:
    """The world's queries with their references; ``limit`` > 0: every k-th query, about ``limit`` of them
    (every method and identity still represented), for a machine too loaded to time them all."""
    build = World(WorldConfig(seed=seed, identities=identities, gallery=1, references=3, queries=2,
                              methods=METHODS)).write(folder / f"world-{seed}")
    q = pd.DataFrame(build.queries)
    if limit > 0:
        q = q.iloc[::max(1, len(q) // limit)].reset_index(drop=True)
    return QueryBatch(list(q["query_id"]), list(q["path"]), list(q["identity"]), list(q["group"]),
                      [None] * len(q), [r.split(";") for r in q["reference_paths"]], device="cpu")


def search_shapes(batch: QueryBatch) -> list[tuple[int, int]]:
    """(rows, columns) of every search product one production call performs: (2n, L2)."""
    shapes: list[tuple[int, int]] = []
    original = cp_match.pixel_match

    def recording(query, ref):
        if len(ref.templates):
            shapes.append((2 * int((ref.rank < cp_patches.SEARCH_PATCHES).sum()), len(query.coarse)))
        return original(query, ref)

    cp_match.pixel_match = recording
    try:
        cp.CopyPaste().score(batch)
    finally:
        cp_match.pixel_match = original
    return shapes


def floor_operands(shapes: list[tuple[int, int]], seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    d = cp_patches.PATCH * cp_patches.PATCH
    return [(rng.standard_normal((k, d), dtype=np.float32), np.ascontiguousarray(
        rng.standard_normal((n, d), dtype=np.float32).T)) for k, n in shapes]


def run_floor(operands) -> None:
    for t, w in operands:
        t @ w  # one sgemm each, the scorer's search product


def ssim_pairs(batch: QueryBatch) -> list[tuple[str, str]]:
    # the references the scorer pixel-checks: at most max_refs of each query's (all of them here: 3 <= 5)
    return [(p, r) for p, refs in zip(batch.paths, batch.reference_paths) for r in refs[:cp_patches.DEFAULTS["max_refs"]]]


def grey(path: str) -> np.ndarray:
    im = load_rgb(path).convert("L")
    w, h = im.size
    s = cp_patches.WORK_SIDE / max(w, h)
    return np.asarray(im.resize((max(8, round(w * s)), max(8, round(h * s))), Image.BILINEAR), np.float32) / 255


def run_ssim(pairs) -> float:
    from skimage.metrics import structural_similarity

    total = 0.0
    for q, r in pairs:
        a, b = grey(q), grey(r)
        if b.shape != a.shape:
            b = np.asarray(Image.fromarray(b).resize(a.shape[::-1], Image.BILINEAR), np.float32)
        total += structural_similarity(a, b, data_range=1.0)
    return total


def run_prep(batch: QueryBatch) -> int:
    images = list(batch.paths) + sorted({r for refs in batch.reference_paths for r in refs[:cp_patches.DEFAULTS["max_refs"]]})
    total = 0
    for path in images:
        image = load_rgb(path)
        grey = cp_patches._grey(image, cp_patches.WORK_SIDE)
        total += len(cp_patches.ReferencePatches.of(image, grey).templates) + cp_patches.QueryWindows.of(image, grey).width
    return total


def run_scorer(batch: QueryBatch, module=cp) -> pd.DataFrame:
    return module.CopyPaste().score(batch)


def spread(xs: list[float], fmt: str = "{:.2f}") -> str:
    return f"{fmt.format(statistics.median(xs))} [{fmt.format(min(xs))}-{fmt.format(max(xs))}]"


def python_calls_per_query(batch: QueryBatch) -> float:
    prof = cProfile.Profile()
    prof.runcall(run_scorer, batch)
    return pstats.Stats(prof).total_calls / len(batch)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seed", type=int, default=11, help="built-in world seed")
    ap.add_argument("--identities", type=int, default=2, help="identities per species")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--queries", type=int, default=0, help="time about this many of the queries (0: all)")
    ap.add_argument("--baseline-rev", default="a6d1d2f", help="git revision of the scorer to compare with ('' none)")
    args = ap.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from calibrate_copy_paste import baseline_module

    base = baseline_module(args.baseline_rev) if args.baseline_rev else None
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    for module in (cp, base):  # one core: the per-query cost, not the fork pool's
        if module is not None:
            module._match_processes = lambda n: 1
    with tempfile.TemporaryDirectory() as tmp, threadpool_limits(1):
        batch = world_batch(args.seed, args.identities, Path(tmp), args.queries)
        n = len(batch)
        shapes = search_shapes(batch)
        operands = floor_operands(shapes, args.seed)
        pairs = ssim_pairs(batch)
        flops = sum(2 * k * 64 * c for k, c in shapes)
        print(f"world seed {args.seed}: {n} queries, {len(pairs)} (query, reference) pairs; {len(shapes)} search "
              f"products per call ({flops / n / 1e6:.2f} MFLOP per query)")
        run_scorer(batch), run_floor(operands), run_ssim(pairs), run_prep(batch)  # warm: imports, numba caches, encoder
        tasks = {"scorer": lambda: run_scorer(batch), "floor": lambda: run_floor(operands),
                 "ssim": lambda: run_ssim(pairs), "prep": lambda: run_prep(batch)}
        if base is not None:
            values = [run_scorer(batch, m).query("metric != 'appearance'")["value"].to_numpy().tobytes()
                      for m in (base, cp)]
            print(f"values (all but appearance) equal to {args.baseline_rev}'s bit for bit: {values[0] == values[1]}")
            tasks["baseline"] = lambda: run_scorer(batch, base)
        names = list(tasks)
        times: dict[str, list[float]] = {k: [] for k in names}
        cpu: dict[str, list[float]] = {k: [] for k in names}
        for r in range(args.rounds):
            for name in names[r % len(names):] + names[:r % len(names)]:  # rotate the order each round
                t, c = time.perf_counter(), time.process_time()
                tasks[name]()
                times[name].append((time.perf_counter() - t) / n * 1e3)
                cpu[name].append((time.process_time() - c) / n * 1e3)
        calls = python_calls_per_query(batch)
    # wall time is what a user waits; CPU time (this process) is what the work costs, and it moves far less
    # when other processes share the cores (a loaded machine inflates wall time by the run queue's length)
    for label, table in (("wall", times), ("CPU (process_time)", cpu)):
        print(f"\nper query, {label} ms, median [min-max] over {args.rounds} rounds (one BLAS thread, this process):")
        for name in names:
            print(f"  {name:7s} {spread(table[name])}")
        for other in [n for n in names if n != "scorer"]:
            ratio = [s / o for s, o in zip(table["scorer"], table[other])]
            print(f"  scorer / {other}: {spread(ratio)} (per round)")
    print(f"  Python-level calls per query (cProfile): {calls:.0f}")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
