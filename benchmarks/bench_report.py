"""How fast does a large HTML report open? (``python benchmarks/bench_report.py [--queries 2000]``)

Builds a synthetic run -- N queries, each its own image, over a gallery of 100
identities x 5 images in 4 groups, 3 methods, top-10 rankings -- renders the
report with :func:`fpr.render.html.render`, and opens it in headless
Chromium (no network) over the DevTools protocol: seconds from navigation to the
page's ready flag (cards built, filters wired). Anchor in the same run, timed the
same way: the same page with every image set at once (no lazy loading). The two pages
open in interleaved rounds (one browser each, the order rotated each round,
benchmarks/_timing.py): median [min - max] seconds, the ratio taken round by round,
the load average before and after. No physical limit applies (a browser's layout work).
The target is under 3 s for 2,000 queries.

    python benchmarks/bench_report.py [--queries 2000] [--repeats 5]
"""
from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fpr.render import html as html_report  # noqa: E402
from fpr.render import paper as rep  # noqa: E402
from fpr.galleries.records import GalleryItem  # noqa: E402
from tests.browser import Browser, find_chromium  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _timing as T  # noqa: E402


def image(path: Path, rng: np.random.Generator) -> str:
    arr = np.clip(rng.integers(0, 256, 3) + rng.normal(0, 40, (128, 128, 3)), 0, 255).astype("uint8")
    Image.fromarray(arr).save(path, quality=90)
    return str(path)


def synthetic(n_queries: int, root: Path, seed: int = 0):
    rng = np.random.default_rng(seed)
    groups = [f"group{g}" for g in range(4)]
    items, gid = {}, 0
    identities = [(g, f"{g}-id{i}") for g in groups for i in range(25)]
    for g, ident in identities:
        for k in range(6):
            role = "reference" if k == 0 else "gallery"
            items[gid] = GalleryItem(gid, image(root / f"item{gid}.jpg", rng), "", ident, g, role)
            gid += 1
    gallery = [it for it in items.values() if it.role == "gallery"]
    rows, ranks = [], []
    for q in range(n_queries):
        g, ident = identities[q % len(identities)]
        ap = float(rng.random())
        rows.append({"run_id": "bench", "query_id": f"q{q:05d}", "row_number": q, "path": image(root / f"q{q}.jpg", rng),
                     "method": f"m{q % 3}", "identity": ident, "group": g, "status": "ok", "ap": ap,
                     "sim": float(rng.random()), "reference_paths": "", "encoder": "bench-encoder"})
        cand = [it for it in gallery if it.group == g]
        picks = rng.choice(len(cand), 10, replace=False)
        for r, j in enumerate(picks):
            ranks.append({"run_id": "bench", "query_id": f"q{q:05d}", "rank": r + 1, "item_id": cand[j].item_id,
                          "score": 1.0 - r / 20, "relevant": cand[j].identity == ident})
    per_query = pd.DataFrame(rows)
    rankings = pd.DataFrame(ranks)
    ident = {("bench", i): it.identity for i, it in items.items()}
    per_query = per_query.merge(rep.drift_from_rankings(per_query, rankings, ident), on=["run_id", "query_id"])
    aux = pd.DataFrame({"run_id": "bench", "query_id": per_query["query_id"], "scorer": "ext", "metric": "score",
                        "value": rng.random(n_queries), "note": None})
    return per_query, aux, rankings, {"bench": items}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--queries", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=5, help="interleaved rounds")
    args = ap.parse_args()
    print(f"before: {T.machine()}")
    exe = find_chromium()
    if exe is None:
        sys.exit("chromium is not installed (apt-get install chromium)")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        t = time.perf_counter()
        per_query, aux, rankings, items = synthetic(args.queries, root)
        print(f"synthetic data: {args.queries} queries, {len(items['bench'])} gallery items "
              f"({time.perf_counter() - t:.1f} s)")
        summary = rep.encoder_summaries(per_query, aux)
        p = rep.pivot(summary)
        t = time.perf_counter()
        text = html_report.render(per_query, aux, rankings, items, summary, p, runs=["bench"])
        render_s = time.perf_counter() - t
        lazy = root / "report.html"
        lazy.write_text(text)
        eager = root / "eager.html"
        eager.write_text(text.replace(f"cards.length<={html_report.EAGER_LIMIT}", "true"))
        print(f"render: {render_s:.2f} s, {lazy.stat().st_size / 1e6:.1f} MB")
        pages = {"report (lazy images)": lazy, "anchor: all images at once": eager}
        with contextlib.ExitStack() as stack:
            browsers = {name: stack.enter_context(Browser(exe)) for name in pages}

            def opener(name: str):
                def run() -> float:
                    b = browsers[name]
                    seconds = b.open(pages[name], timeout=120)
                    if b.eval("document.querySelectorAll('.card').length") != args.queries or b.errors:
                        raise SystemExit(f"{name}: wrong card count or page errors {b.errors}")
                    return seconds
                return run

            opened: dict[str, list[float]] = {name: [] for name in pages}
            T.interleaved({name: opener(name) for name in pages}, args.repeats,
                          check=lambda name, seconds: opened[name].append(seconds))
        for name, times in opened.items():
            print(f"{name}: opens in {T.spread(times).fmt('.2f')} s (median [min - max] of {args.repeats} "
                  f"interleaved rounds; navigation to the ready flag)")
        a, b = (opened[n] for n in pages)
        print(f"ratio anchor / report per round: {T.ratios(b, a).fmt('.2f')}; target < 3 s: "
              f"{'met' if T.spread(a).median < 3 else 'NOT met'}")
    print(f"load average after: {T.load()}")


if __name__ == "__main__":
    main()
