"""The run sanity checks (fpr/eval/sanity.py) on real against random weights, on two world seeds.

For each world seed (0: calibration, 1: check) the shipped world encoders (verified weights) and
the fpr-world-v3 architecture with random-initialised weights in the same file layout (a
placeholder: ``mismatch``) run the same queries with ``--oracle``. The table gives the queries'
mean pairwise cosine (the constant-embedding statistic, threshold 0.999), the oracle mAP, its
chance mAP and two standard errors (the oracle-at-chance test), the verification status and the
warnings the run printed. Expected: no warning for the shipped encoders; the oracle warning (and
'mismatch') for the random weights.

    PYTHONPATH=$PWD python benchmarks/bench_sanity.py > benchmarks/results/sanity.md
"""
from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

os.environ.setdefault("FPR_QUIET", "1")


def _random_like(shipped: Path, out: Path, seed: int) -> Path:
    """The shipped state dict's keys and shapes, values drawn at random (BatchNorm stats kept sane)."""
    from safetensors.torch import load_file, save_file

    g = torch.Generator().manual_seed(seed)
    state = load_file(str(shipped))
    rnd = {}
    for k, v in state.items():
        if not v.is_floating_point():
            rnd[k] = v.clone()
        elif k.endswith("running_var"):
            rnd[k] = torch.ones_like(v)
        elif k.endswith("running_mean"):
            rnd[k] = torch.zeros_like(v)
        else:
            rnd[k] = torch.randn(v.shape, generator=g) * 0.05
    save_file(rnd, str(out))
    return out


def _row(api, sanity, ws, build, encoder: str, weights: str | None, label: str, run: str) -> str:
    from fpr.eval.oracle import ORACLE_METHOD

    api.build_index("g", encoder, name=run, workspace=ws, weights=weights)
    res = api.run_query(run, build.queries_csv, workspace=ws, run=run, oracle=True, weights=weights)
    pq = res.per_query[res.per_query["status"] == "ok"]
    from fpr.eval.relevance import open_index
    from fpr.store.workspace import Workspace

    opened = open_index(Workspace.open(ws), run)
    orc = pq[pq["method"] == ORACLE_METHOD]
    n = opened.labels.candidates(orc, "group")
    chance = sanity.chance_ap(orc["n_relevant"].to_numpy(), n)
    diff = orc["ap"].to_numpy(float) - chance
    se2 = 2 * diff.std(ddof=1) / np.sqrt(len(diff))
    # the constant-embedding statistic over the generated queries' vectors, re-embedded here
    from fpr.encoders.embed import embed_paths
    from fpr.encoders.registry import load_encoder

    enc = load_encoder(encoder, weights=weights, device="cpu")
    gen = pq[pq["method"] != ORACLE_METHOD]
    cos = sanity.mean_pairwise_cosine(embed_paths(enc, gen["path"].tolist()).vectors)
    verified = res.provenance.get("weights_verification", {}).get("status", "verified")
    warned = ", ".join(_kind(w) for w in res.provenance.get("warnings", [])) or "none"
    return (f"| {label} | {verified} | {cos:.4f} | {orc['ap'].mean():.3f} | {chance.mean():.3f} | {se2:.3f} | "
            f"{len(orc)} | {warned} |")


def _kind(warning: str) -> str:
    for needle, kind in (("nearly constant", "constant embeddings"), ("within noise of chance", "oracle at chance"),
                         ("for all", "constant scorer")):
        if needle in warning:
            return kind
    return warning[:40]


def main() -> None:
    from fpr import api
    from fpr.encoders.world import PACKAGE_WEIGHTS
    from fpr.eval import sanity
    from fpr.galleries.world import build_world
    from importlib import resources

    shipped = Path(str(resources.files("fpr").joinpath(PACKAGE_WEIGHTS)))
    print("| world seed | encoder | weights | mean pairwise cos (queries) | oracle mAP | chance mAP | 2 SE | "
          "oracle queries | warnings |")
    print("|---|---|---|---|---|---|---|---|---|")
    for seed in (0, 1):
        with tempfile.TemporaryDirectory() as tmp:
            tmp = Path(tmp)
            os.environ["FPR_CACHE_DIR"] = str(tmp / "cache")
            ws = tmp / "ws"
            build = build_world(tmp / "w", seed=seed, identities=4, gallery=3, references=3, queries=1,
                                species=["zebra", "giraffe"], methods=["faithful", "drift-0.5", "generic"], size=64)
            api.import_gallery("g", build.records, workspace=ws, source="world")
            rnd = _random_like(shipped, tmp / "fpr-world-v3.safetensors", seed)
            for label, encoder, weights in [("fpr-world-v3", "fpr-world-v3", None),
                                            ("fpr-world-v1", "fpr-world-v1", None),
                                            ("fpr-world-v3, random weights", "fpr-world-v3", str(rnd))]:
                run = f"s{seed}-{len(label)}-{encoder}".replace(",", "")
                print(f"| {seed} " + _row(api, sanity, ws, build, encoder, weights, label, run), flush=True)


if __name__ == "__main__":
    sys.exit(main())
