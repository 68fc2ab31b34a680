"""Cost of a gallery-ablation sweep relative to a single evaluation (target: 20 variants <= 1.3x one).

Both are measured in the same process, each with a cold embedding cache: the
single evaluation is ``ablate`` with one variant and one repeat (embed pool +
references + queries once, rank once); the sweep is 4 gallery sizes x 5 repeats
= 20 variant evaluations (random sampling), which must reuse the one embedding
pass. A second sweep adds k-means sampling (k-means runs on the stored
embeddings; its cost is sklearn's, per identity). The encoder is a random-init
``resnet18`` (timm, 224 px): realistic CPU embedding cost, no download.

    python benchmarks/bench_ablate.py [--identities 10] [--pool 12] [--encoder bench-resnet18|pixels-16]

Each configuration runs ``--rounds`` times, interleaved with the order rotated each round
(benchmarks/_timing.py): median [min - max] seconds, the sweep/single ratio taken round by
round, the load average before and after. The line also shows the cost beyond the embedding
pass (similarities + all variants). Physical limit: the embedding pass's compute rate (the
encoder's counted FLOPs x images / its seconds) against a 2048^3 float32 matmul on torch,
measured in the same run.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("FPR_QUIET", "1")

import fpr.api as api  # noqa: E402
from fpr.encoders.preprocess import Preprocessing  # noqa: E402
from fpr.encoders.registry import EncoderSpec, register  # noqa: E402
from fpr.encoders.weights import WeightsSource  # noqa: E402
from fpr.workflows.ablate import ablate  # noqa: E402
from fpr.galleries.curate import GallerySpec  # noqa: E402
import _timing as T  # noqa: E402


def _resnet18():
    import timm
    import torch

    torch.manual_seed(0)
    return timm.create_model("resnet18", pretrained=False, num_classes=0)


def resnet18_gflop() -> float:
    """GFLOP of one 224 px image through the benchmark's resnet18 (counted, about 3.6)."""
    import torch

    return T.model_gflop(_resnet18().eval(), torch.zeros(1, 3, 224, 224))


def register_resnet18() -> None:
    def build(_):
        return _resnet18()

    register(EncoderSpec(id="bench-resnet18", family="timm", dim=512,
                         preprocessing=Preprocessing(name="bench-224", size=224), weights=WeightsSource(kind="none"),
                         build=build, description="random-init resnet18 (benchmark only)"), replace=True)


def make_data(root: Path, n_groups: int, n_ident: int, n_pool: int, n_refs: int, n_queries: int) -> Path:
    rng = np.random.default_rng(0)
    rows, qrows = [], []
    for g in range(n_groups):
        for i in range(n_ident):
            base = rng.uniform(0, 255, size=3)
            for k in range(n_pool + n_refs):
                arr = np.clip(base + rng.normal(0, 50, size=(96, 96, 3)), 0, 255).astype(np.uint8)
                p = root / "real" / f"g{g}" / f"i{i}" / f"{k}.jpg"
                p.parent.mkdir(parents=True, exist_ok=True)
                Image.fromarray(arr).save(p, quality=90)
                rows.append({"path": str(p), "identity": f"i{i}", "group": f"g{g}",
                             "role": "reference" if k < n_refs else "gallery"})
            for k in range(n_queries):
                arr = np.clip(base + rng.normal(0, 70, size=(96, 96, 3)), 0, 255).astype(np.uint8)
                p = root / "gen" / f"g{g}-i{i}-{k}.jpg"
                p.parent.mkdir(parents=True, exist_ok=True)
                Image.fromarray(arr).save(p, quality=90)
                qrows.append({"path": str(p), "identity": f"i{i}", "group": f"g{g}", "method": f"m{k % 2}"})
    pd.DataFrame(rows).to_csv(root / "gallery.csv", index=False)
    pd.DataFrame(qrows).to_csv(root / "queries.csv", index=False)
    return root


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--groups", type=int, default=2)
    ap.add_argument("--identities", type=int, default=10)
    ap.add_argument("--pool", type=int, default=12)
    ap.add_argument("--refs", type=int, default=2)
    ap.add_argument("--queries", type=int, default=4, help="generated images per identity")
    ap.add_argument("--encoder", default="bench-resnet18")
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    if args.encoder == "bench-resnet18":
        register_resnet18()
    import torch

    print(f"load average before: {T.load()}; {os.cpu_count()} cores; torch threads {torch.get_num_threads()}")
    with tempfile.TemporaryDirectory() as tmp:
        root = make_data(Path(tmp), args.groups, args.identities, args.pool, args.refs, args.queries)
        ws = root / "ws"
        api.import_gallery("bench", api.read_manifest(root / "gallery.csv"), GallerySpec(), workspace=ws)
        n_img = args.groups * args.identities * (args.pool + args.refs + args.queries)
        common = dict(workspace=ws, store=False, workers=args.workers)
        configs = {
            "single": dict(per_identity="10", identities="10", sampling="random", repeats=1),
            "sweep20": dict(per_identity="1,2,5,10", identities="10", sampling="random", repeats=5),
            "sweep_km": dict(per_identity="1,2,5,10", identities="2,5,10", sampling="random,kmeans", repeats=3),
        }
        results: dict[str, list] = {name: [] for name in configs}
        calls = iter(range(10 ** 6))

        def contender(name: str, cfg: dict):
            def run():
                os.environ["FPR_CACHE_DIR"] = str(root / f"cache{next(calls)}")  # cold cache for every call
                return ablate("bench", args.encoder, root / "queries.csv", **cfg, **common)
            return run

        times = T.interleaved({name: contender(name, cfg) for name, cfg in configs.items()}, args.rounds,
                              check=lambda name, res: results[name].append(res))
        peak = T.sgemm_gflops(backend="torch")
        gflop = resnet18_gflop() if args.encoder == "bench-resnet18" else None
        r1 = results["single"][0]
        print(f"images: {n_img} ({r1.n_images} embedded per sweep); encoder {args.encoder}; seconds, median "
              f"[min - max] of {args.rounds} interleaved rounds, cold embedding cache each")
        print(f"single evaluation (1 variant, the anchor): {T.spread(times['single'])} s  "
              f"{_fmt(_median_timings(results['single']))}")
        for name in ("sweep20", "sweep_km"):
            res = results[name][0]
            n = res.rows[res.rows["method"] == "*"].shape[0]
            extra = [(r.timings["similarities"] + r.timings["variants"]) / s
                     for r, s in zip(results[name], times["single"])]
            print(f"{name}: {n} variant evaluations: {T.spread(times[name])} s  ratio to single per round "
                  f"{T.ratios(times[name], times['single'])}  (beyond the embedding pass, x single: "
                  f"{T.spread(extra)})  {_fmt(_median_timings(results[name]))}")
        print(f"physical limit: torch sgemm 2048^3 {peak.fmt('.1f')} GFLOP/s (this run)")
        if gflop:
            rates = [r1.n_images * gflop / r.timings["embed"] for rs in results.values() for r in rs]
            print(f"embedding pass: {gflop:.2f} GFLOP/image x {r1.n_images} images: {T.spread(rates).fmt('.1f')} "
                  f"GFLOP/s = {T.spread(rates).median / peak.median:.2f} of the sgemm rate (medians)")
    print(f"load average after: {T.load()}")


def _median_timings(results: list) -> dict:
    return {k: T.spread([r.timings[k] for r in results]).median for k in results[0].timings}


def _fmt(t: dict) -> str:
    return ", ".join(f"{k} {v:.2f}s" for k, v in t.items())

if __name__ == "__main__":
    main()
