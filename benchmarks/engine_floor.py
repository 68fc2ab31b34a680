"""The metric engine's cost per query x gallery pair against the memory floor and the per-query loop (#37 item 4).

Every contender runs once per round on the same matrices, the order rotated, interleaved rounds; wall and CPU
seconds (user + sys of this process: all its threads) per pair, median [min-max]; ratios per round. On a
loaded machine the wall times follow the process's share of the cores; the CPU seconds are the work.

- floor: ``scores.sum()`` (NumPy, one thread): the time to stream the score matrix once; floor+mask adds a
  pass over the relevance mask's bytes (as 8-byte words), the other input the kernel must read;
- kernel-1t / kernel-2t: ``retrieval_metrics(scores, rel)`` (the path ``run_query`` uses) on one and two
  threads (``fpr.metrics.ranking.THREADS``);
- anchor-1t: the kernel of ``--anchor`` (``git show <anchor>:fpr/metrics/_kernels.py``, compiled beside a
  copy in the temporary directory) on one thread; its AP, ranks, R, AP@10 and R-precision must be the same bits;
- loop: the paper-style per-query argsort loop (``bench_map.per_query_loop``), one thread.

``--compete`` starts one ``python -c 'while 1: pass'`` for the whole run (a competing process on a core).

    PYTHONPATH=. python benchmarks/engine_floor.py [--n 5000] [--rounds 5] [--anchor main] [--compete]
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
from bench_map import make_case, per_query_loop  # noqa: E402

from fpr.metrics import ranking as M  # noqa: E402


def anchor_kernel(commit: str, tmp: Path):
    """The anchor's compiled kernel module (its file only: it imports nothing of fpr)."""
    src = subprocess.run(["git", "-C", str(ROOT), "show", f"{commit}:fpr/metrics/_kernels.py"], check=True,
                         capture_output=True, text=True).stdout
    path = tmp / "anchor_kernels.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location("anchor_kernels", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def run_kernel(kernel, scores: np.ndarray, rel) -> tuple:
    q = scores.shape[0]
    out = (np.empty(q), np.empty(q, np.int64), np.empty(q, np.int64), np.empty(q, np.int64), np.empty(q), np.empty(q))
    kernel(scores, rel.view(np.uint8), *out, 0, q)
    return out


def engine(scores: np.ndarray, rel: np.ndarray, threads: int):
    M.THREADS = threads
    try:
        return M.retrieval_metrics(scores, rel)
    finally:
        M.THREADS = min(4, os.cpu_count() or 1)


def spread(xs: list[float], fmt: str = "{:.3f}") -> str:
    return f"{fmt.format(statistics.median(xs))} [{fmt.format(min(xs))}-{fmt.format(max(xs))}]"


def cpu_name() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines() if Path("/proc/cpuinfo").exists() else []:
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "?"


def measure(kind: str, n: int, rounds: int, anchor) -> None:
    scores, ql, gl = make_case("gaussian" if kind == "gaussian" else "embedding", n, n, 500, 0)
    if kind == "shuffled":  # the gallery's columns in random order: relevant items and candidates scattered
        perm = np.random.default_rng(1).permutation(n)
        scores, gl = np.ascontiguousarray(scores[:, perm]), gl[perm]
    rel = ql[:, None] == gl[None, :]
    words = rel.reshape(-1).view(np.uint64) if rel.size % 8 == 0 else rel.view(np.uint8)
    fns = {"floor": lambda: scores.sum(), "floor+mask": lambda: (scores.sum(), words.sum()),
           "kernel-1t": lambda: engine(scores, rel, 1), "kernel-2t": lambda: engine(scores, rel, 2),
           "loop": lambda: per_query_loop(scores, rel)}
    if anchor is not None:
        fns["anchor-1t"] = lambda: run_kernel(anchor.metrics_mask, scores, rel)
    ref = engine(scores, rel, 1)
    if anchor is not None:
        mine = (ref.ap, ref.first_hit_rank, ref.last_hit_rank, ref.n_relevant, ref.ap_at_k, ref.r_precision)
        for a, b in zip(run_kernel(anchor.metrics_mask, scores, rel), mine):
            np.testing.assert_array_equal(a, b)  # the same bits as the anchor's kernel, AP@k and R-precision too
    np.testing.assert_array_equal(engine(scores, rel, 2).ap, ref.ap)
    loop_d = float(np.abs(per_query_loop(scores, rel) - ref.ap).max())
    wall: dict[str, list[float]] = {k: [] for k in fns}
    cpu: dict[str, list[float]] = {k: [] for k in fns}
    names = list(fns)
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            t, c = time.perf_counter(), time.process_time()
            fns[name]()
            wall[name].append((time.perf_counter() - t) / scores.size * 1e9)
            cpu[name].append((time.process_time() - c) / scores.size * 1e9)
    print(f"\n{kind} Q=G={n} ({scores.dtype}), mAP {np.nanmean(ref.ap):.3f}, max |AP - loop| {loop_d:.1e}; "
          "ns per pair, median [min-max]")
    print(f"  {'contender':<11} {'wall ns/pair':>24} {'cpu ns/pair':>22} {'cpu / floor':>18} {'wall / floor':>20} "
          f"{'loop / this (wall)':>20}")
    for name in names:
        cpu_floor = [a / b for a, b in zip(cpu[name], cpu["floor"])]
        to_floor = [a / b for a, b in zip(wall[name], wall["floor"])]
        loop_over = [a / b for a, b in zip(wall["loop"], wall[name])]
        print(f"  {name:<11} {spread(wall[name]):>24} {spread(cpu[name]):>22} {spread(cpu_floor, '{:.2f}'):>18} "
              f"{spread(to_floor, '{:.2f}'):>20} {spread(loop_over, '{:.1f}'):>20}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=5000, help="Q = G")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--cases", default="embedding,shuffled,gaussian",
                    help="embedding: bench_map's realistic scores, gallery grouped by identity; shuffled: the same, "
                         "columns permuted; gaussian: i.i.d. scores (the worst case)")
    ap.add_argument("--anchor", default=None, help="a commit whose kernel runs beside this one (same bits)")
    ap.add_argument("--compete", action="store_true", help="one busy-looping process for the whole run")
    args = ap.parse_args()
    rival = subprocess.Popen([sys.executable, "-c", "while 1: pass"]) if args.compete else None
    try:
        with tempfile.TemporaryDirectory() as tmp:
            anchor = anchor_kernel(args.anchor, Path(tmp)) if args.anchor else None
            engine(np.zeros((2, 3), np.float32), np.zeros((2, 3), bool), 1)  # compile outside the timing
            print(f"{cpu_name()}, {os.cpu_count()} cores; load average before: "
                  f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}; competing busy process: "
                  f"{'yes' if rival else 'no'}; {args.rounds} interleaved rounds")
            for kind in args.cases.split(","):
                measure(kind, args.n, args.rounds, anchor)
    finally:
        if rival is not None:
            rival.kill()
            rival.wait()
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
