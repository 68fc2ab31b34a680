"""Embedding cache: lookup and insert cost at 0, 100k and 1M cached vectors.

Each measurement is a fresh process-level cache object (as a new ``fpr`` command sees it):
lookup = ``get_many`` of 64 cached hashes; insert = ``add`` of 64 new vectors. Baseline in the
same run: the cache of ``--baseline`` (the 0.1 sharded-npz cache, loaded whole per process),
filled to the same sizes with one shard written directly.

    python benchmarks/bench_cache.py [--sizes 0,100000,1000000] [--dim 512] [--baseline /work/main]
"""
from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from fpr.encoders.cache import EmbeddingCache  # noqa: E402


def load_baseline(root: Path):
    spec = importlib.util.spec_from_file_location("baseline_cache", root / "fpr" / "encoders" / "cache.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.EmbeddingCache


def hashes(start: int, n: int) -> list[str]:
    return [f"{i:064x}" for i in range(start, start + n)]


def fill_new(folder: Path, n: int, dim: int) -> None:
    c = EmbeddingCache("k", dim, root=folder)
    rng = np.random.default_rng(0)
    for s in range(0, n, 100_000):
        m = min(100_000, n - s)
        c.add(hashes(s, m), rng.standard_normal((m, dim)).astype(np.float32))
    c.compact()
    c.close()


def fill_old(folder: Path, n: int, dim: int) -> None:
    d = folder / "k"
    d.mkdir(parents=True, exist_ok=True)
    if n:
        rng = np.random.default_rng(0)
        np.savez(d / "shard-0.npz", hashes=np.asarray(hashes(0, n), dtype="S64"),
                 vectors=rng.standard_normal((n, dim)).astype(np.float32))


def measure(cls, folder: Path, n: int, dim: int, rounds: int) -> tuple[float, float]:
    look, ins = [], []
    rng = np.random.default_rng(1)
    for r in range(rounds):
        probe = [f"{i:064x}" for i in rng.choice(max(n, 1), 64)] if n else hashes(10**9, 64)
        c = cls("k", dim, root=folder)
        t = time.perf_counter()
        got = c.get_many(probe)
        look.append(time.perf_counter() - t)
        assert len(got) == (64 if n else 0) or len(set(probe)) < 64
        c = cls("k", dim, root=folder)
        t = time.perf_counter()
        c.add(hashes(2 * 10**9 + 64 * r, 64), rng.standard_normal((64, dim)).astype(np.float32))
        ins.append(time.perf_counter() - t)
    return statistics.median(look), statistics.median(ins)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="0,100000,1000000")
    ap.add_argument("--dim", type=int, default=512)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--baseline", default=None)
    args = ap.parse_args()
    old = load_baseline(Path(args.baseline)) if args.baseline else None
    print(f"dim {args.dim}; per fresh cache object: lookup of 64 cached vectors, insert of 64 new ones "
          f"(median of {args.rounds})")
    print(f"{'cached':>9} {'lookup ms':>10} {'insert ms':>10} {'fill s':>7}" +
          (f" {'old lookup ms':>14} {'old insert ms':>14} {'x lookup':>9} {'x insert':>9}" if old else ""))
    for n in [int(x) for x in args.sizes.split(",")]:
        with tempfile.TemporaryDirectory() as tmp:
            t = time.perf_counter()
            fill_new(Path(tmp) / "new", n, args.dim)
            fill_s = time.perf_counter() - t
            lk, ins = measure(EmbeddingCache, Path(tmp) / "new", n, args.dim, args.rounds)
            line = f"{n:9d} {lk * 1e3:10.2f} {ins * 1e3:10.2f} {fill_s:7.1f}"
            if old:
                fill_old(Path(tmp) / "old", n, args.dim)
                olk, oins = measure(old, Path(tmp) / "old", n, args.dim, args.rounds)
                line += f" {olk * 1e3:14.2f} {oins * 1e3:14.2f} {olk / lk:9.1f} {oins / ins:9.1f}"
            print(line, flush=True)


if __name__ == "__main__":
    main()
