"""The world cache on the demo's primary world (seed 0, 1,380 images): rendered without the cache, rendered and
stored (a first run), and read back (a hit), interleaved in one process; the same bytes each way.

    PYTHONPATH=. python benchmarks/world_cache_speed.py [--rounds 3]     # writes results/world_cache_speed.md

Each round renders with ``cache=False`` (the anchor: what ``World.write`` did before) and with ``cache=True``
into a fresh ``FPR_CACHE_DIR`` (a miss: render + store), then once more from that cache (a hit): a fixed
order, since a hit needs its miss first. Wall and CPU seconds (this process and its render workers); median
[min, max] over the rounds (``_timing.spread``), the ratio to the anchor round by round; load printed. The
limit of a hit is reading and hashing the files: its bytes per second beside SHA-256's on one core here.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "world_cache_speed.md"
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _timing import load as load_now  # this folder's shared timing protocol
from _timing import machine, ratios, spread


def cpu() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def digest(root: Path) -> tuple[str, int]:
    """sha256 over every PNG (path and bytes), and their total size."""
    h, size = hashlib.sha256(), 0
    for p in sorted(root.rglob("*.png")):
        data = p.read_bytes()
        h.update(p.relative_to(root).as_posix().encode() + data)
        size += len(data)
    return h.hexdigest(), size


def sha256_mbps(mib: int = 64) -> float:
    data = os.urandom(mib << 20)
    t = time.perf_counter()
    hashlib.sha256(data).digest()
    return mib * 1.048576 / (time.perf_counter() - t)


def main() -> None:
    from fpr.workflows.demo import FULL
    from fpr.galleries.world import World, WorldConfig

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    config = WorldConfig(seed=0, **FULL)
    times: dict[str, list[tuple[float, float]]] = {"render (no cache)": [], "render + store (miss)": [],
                                                    "from the cache (hit)": []}
    header = machine()
    digests = set()
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for name, cache, folder in (("render (no cache)", False, "off"), ("render + store (miss)", True, "miss"),
                                        ("from the cache (hit)", True, "hit")):
                os.environ["FPR_CACHE_DIR"] = str(Path(tmp) / f"cache-{r}")
                dest = Path(tmp) / f"{folder}-{r}"
                t, c = time.perf_counter(), cpu()
                World(config).write(dest, workers=0, cache=cache)
                times[name].append((time.perf_counter() - t, cpu() - c))
                digests.add(digest(dest))
                shutil.rmtree(dest)
    assert len(digests) == 1, "the cache changed a file"
    size = digests.pop()[1]
    anchor = [w for w, _ in times["render (no cache)"]]
    lines = ["| world (1,380 images, `World.write(workers=0)`) | wall s | cpu s | anchor wall / wall |",
             "|---|---|---|---|"]
    lines += [f"| {name} | {spread([w for w, _ in v]).fmt('.2f')} | {spread([c for _, c in v]).fmt('.2f')} | "
              f"{ratios(anchor, [w for w, _ in v]).fmt('.1f')} |" for name, v in times.items()]
    hit = spread([size / 1e6 / w for w, _ in times["from the cache (hit)"]])
    text = ("\n".join(lines) + f"\n\nA hit reads and hashes {size / 1e6:.1f} MB at {hit.fmt('.0f')} MB/s and links "
            f"the files; SHA-256 alone runs at {sha256_mbps():.0f} MB/s on one core here.\n\n"
            f"{args.rounds} rounds (no cache, miss, hit in that order), median [min, max]; every way wrote the same "
            f"bytes. Before: {header}; after: load average {load_now()}. "
            f"`PYTHONPATH=. python benchmarks/world_cache_speed.py --rounds {args.rounds}`.\n")
    OUT.write_text("# The world cache on the demo's primary world\n\n" + text)
    print(text)


if __name__ == "__main__":
    main()
