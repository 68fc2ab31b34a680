"""Embedding cache: lookup and insert cost at 0, 100k and 1M cached vectors.

Production path: :class:`fpr.encoders.cache.EmbeddingCache`, a fresh object per measurement (as a new
``fpr`` command sees it): lookup = ``get_many`` of 64 random cached hashes; insert = ``add`` of 64 new
vectors. Anchor in the same rounds, timed the same way: the floor of any on-disk store, 64 random rows of
the same vectors from a memory-mapped ``.npy`` (``np.load(mmap_mode='r')`` then fancy indexing: open +
page-in, no lookup structure). Optional second anchor: the cache of ``--baseline`` (a tree with the 0.1
sharded-npz cache, e.g. ``git archive 1b0d38a``, loaded whole per process), filled to the same sizes with
one shard written directly. Interleaved rounds, order rotated (benchmarks/_timing.py), milliseconds
median [min - max], ratios round by round, load printed. Physical limit: the fill's bytes per second
against a large memcpy's bandwidth in the same run (the fill writes every vector once).

Verification (issue #35, ``--verify-rows N``, ``--sizes ''`` to run it alone): every row carries the key of
the code that made it and a checksum (:class:`fpr.cache.SqliteStore`); reading N cached rows of one store
with the checks (the production path: code key compared, checksum recomputed, value decoded) and without
them (``verify=False``: the value decoded only), on the same filled stores, interleaved rounds, ratio
per round: the embedding cache (512-d float32 vectors) and the score cache (4 metrics per query).

    python benchmarks/bench_cache.py [--sizes 0,100000,1000000] [--dim 512] [--rounds 7] [--baseline TREE]
                                     [--verify-rows 10000]
"""
from __future__ import annotations

import argparse
import importlib.util
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from fpr.encoders.cache import EmbeddingCache  # noqa: E402
import _timing as T  # noqa: E402


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


def fill_floor(path: Path, n: int, dim: int) -> None:
    rng = np.random.default_rng(0)
    np.save(path, rng.standard_normal((max(n, 1), dim)).astype(np.float32))


def contenders(folders: dict[str, tuple[type, Path]], floor: Path, n: int, dim: int) -> dict:
    """Per store: a lookup of 64 random cached hashes and an insert of 64 new vectors, each on a fresh
    object; the floor: 64 random rows of a memory-mapped .npy."""
    rng = np.random.default_rng(1)
    fresh = iter(range(10 ** 6))
    out = {}

    def lookup(cls, folder):
        def run():
            probe = [f"{i:064x}" for i in rng.choice(max(n, 1), 64)] if n else hashes(10 ** 9, 64)
            got = cls("k", dim, root=folder).get_many(probe)
            if len(got) != (len(set(probe)) if n else 0):
                raise SystemExit(f"{folder.name}: {len(got)} of {len(set(probe))} cached vectors found")
        return run

    def insert(cls, folder):
        def run():
            cls("k", dim, root=folder).add(hashes(2 * 10 ** 9 + 64 * next(fresh), 64),
                                           rng.standard_normal((64, dim)).astype(np.float32))
        return run

    def floor_rows():
        rows = np.load(floor, mmap_mode="r")[np.sort(rng.choice(max(n, 1), 64))]
        return float(rows.sum())  # touch the pages

    for name, (cls, folder) in folders.items():
        out[f"{name} lookup"] = lookup(cls, folder)
        out[f"{name} insert"] = insert(cls, folder)
    out["floor: mmap rows"] = floor_rows
    return out


def verify_table(n: int, dim: int, rounds: int) -> None:
    """Reading ``n`` rows with and without the checks, per store, same filled stores, interleaved rounds."""
    from fpr.scorers.cache import ScoreCache, decode_rows

    with tempfile.TemporaryDirectory() as tmp:
        emb = EmbeddingCache("k", dim, root=Path(tmp))
        emb.add(hashes(0, n), np.random.default_rng(0).standard_normal((n, dim)).astype(np.float32))
        emb.compact()
        scores = ScoreCache(Path(tmp) / "scores.sqlite")
        scores.put_many({h: [["ratio", 0.1 * i, None], ["scaled", 0.2 * i, "x2"], ["missing", float("nan"),
                                                                                    "no such signal"],
                             ["sum", 0.1 + 0.2, None]] for i, h in enumerate(hashes(0, n))}, "v")
        wanted = hashes(0, n)

        def read(store, code, decode, verify):
            def run():
                got = store.get_many(wanted, code, decode, verify=verify)
                if len(got) != n:
                    raise SystemExit(f"{len(got)} of {n} rows read")
            return run

        t = T.interleaved({"embeddings checked": read(emb.store, "k", emb._decode, True),
                           "embeddings unchecked": read(emb.store, "k", emb._decode, False),
                           "scores checked": read(scores.store, "v", decode_rows, True),
                           "scores unchecked": read(scores.store, "v", decode_rows, False)}, rounds)
        print(f"\nreading {n} cached rows in one get_many, with the checks (code key, checksum) and without; "
              f"milliseconds, median [min - max] of {rounds} interleaved rounds\n")
        print("| store | rows | checked ms | unchecked ms | checked / unchecked per round | checked us per row |")
        print("|---|---|---|---|---|---|")
        for name in ("embeddings", "scores"):
            a, b = t[f"{name} checked"], t[f"{name} unchecked"]
            print(f"| {name} | {n} | {T.spread(a).fmt('.1f', scale=1e3)} | {T.spread(b).fmt('.1f', scale=1e3)} | "
                  f"{T.ratios(a, b).fmt('.2f')} | {T.spread(a).median * 1e6 / n:.2f} |", flush=True)
        emb.close()
        scores.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="0,100000,1000000")
    ap.add_argument("--dim", type=int, default=512)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--baseline", default=None)
    ap.add_argument("--verify-rows", type=int, default=0, help="also time reading this many rows with and "
                                                                "without the checks (issue #35)")
    args = ap.parse_args()
    old = load_baseline(Path(args.baseline)) if args.baseline else None
    bw = T.copy_gbps()
    print(f"before: {T.machine()}")
    if not args.sizes:
        verify_table(args.verify_rows or 10_000, args.dim, args.rounds)
        print(f"\nload average after: {T.load()}")
        return
    print(f"dim {args.dim}; per fresh cache object: lookup of 64 cached vectors, insert of 64 new ones; "
          f"milliseconds, median [min - max] of {args.rounds} interleaved rounds; memcpy {bw.fmt('.2f')} GB/s\n")
    cols = ["cached", "lookup ms", "insert ms", "floor: mmap rows ms", "lookup / floor per round", "fill s",
            "fill GB/s / memcpy"] + (["0.1 lookup ms", "0.1 insert ms", "0.1 / this lookup"] if old else [])
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for n in [int(x) for x in args.sizes.split(",")]:
        with tempfile.TemporaryDirectory() as tmp:
            dt, _ = T.timed(lambda: fill_new(Path(tmp) / "new", n, args.dim))
            fill_floor(Path(tmp) / "floor.npy", n, args.dim)
            folders = {"this": (EmbeddingCache, Path(tmp) / "new")}
            if old:
                fill_old(Path(tmp) / "old", n, args.dim)
                folders["0.1"] = (old, Path(tmp) / "old")
            t = T.interleaved(contenders(folders, Path(tmp) / "floor.npy", n, args.dim), args.rounds)
            ms = {k: T.spread(v).fmt(".2f", scale=1e3) for k, v in t.items()}
            fill_rate = n * args.dim * 4 / dt / 1e9
            cells = [f"{n}", ms["this lookup"], ms["this insert"], ms["floor: mmap rows"],
                     T.ratios(t["this lookup"], t["floor: mmap rows"]).fmt(".1f"), f"{dt:.1f}",
                     f"{fill_rate / bw.median:.3f}" if n else "-"]
            if old:
                cells += [ms["0.1 lookup"], ms["0.1 insert"], T.ratios(t["0.1 lookup"], t["this lookup"]).fmt(".1f")]
            print("| " + " | ".join(cells) + " |", flush=True)
    if args.verify_rows:
        verify_table(args.verify_rows, args.dim, args.rounds)
    print(f"\nload average after: {T.load()}")


if __name__ == "__main__":
    main()
