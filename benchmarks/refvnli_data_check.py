"""Checks of `fpr refvnli data` on the built-in world: the rules on a calibration seed and a check seed.

For each seed it builds the triplets and verifies, from the files written (not from the
builder's memory):

- counts: every set of 2 scenes x 2 frames gives 12 scene pairs (4 positive, 8 negative)
  and 8 corruption pairs (4 + 4), each with 3 prompts: 60 triplets per set;
- prompts: a positive prompt is the one prompt that target has; a swapped prompt is another
  frame's positive prompt of the same species and differs from the target's; a changed-detail
  prompt differs from the positive one in exactly one comma-separated detail;
- corruptions: the corrupted target differs from its frame within one patch (side <= 0.3 x
  96 px), and the MSE written lies between the bounds the changed pixels give (the region
  holds them and at most side^2 pixels);
- how hard the pairs are for the shipped encoder (fpr-world-v3, cosine of crop vs target):
  AUROC of sp within scene pairs and within corruption pairs, mean cosine per pair kind.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/refvnli_data_check.py [--sets 10] [--out /tmp/refvnli-check]
"""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
from PIL import Image


def check(folder: Path, table: pd.DataFrame, sets: int, species: int, side: int) -> dict:
    pk = table.groupby(["pair_kind", "prompt_kind"]).size()
    n_sets = sets * species
    expect = {"scene-positive": 4, "scene-negative": 8, "corruption-positive": 4, "corruption-negative": 4}
    for kind, per_set in expect.items():
        for prompt_kind in ("positive", "swapped", "changed-detail"):
            assert pk[(kind, prompt_kind)] == per_set * n_sets, (kind, prompt_kind, pk[(kind, prompt_kind)])
    positive = table[table.prompt_kind == "positive"].groupby("target_frame").prompt.unique()
    own = {t.split("#")[0]: p[0] for t, p in positive.items() if len(p) == 1}
    assert len(own) == 4 * n_sets
    for row in table.itertuples():
        base = row.target_frame.split("#")[0]
        if row.prompt_kind == "swapped":
            src = row.prompt_source
            assert own[src] == row.prompt and row.prompt != own[base]
            assert src.split("-set")[0] == base.split("-set")[0]  # same species (entity)
        elif row.prompt_kind == "changed-detail":
            a, b = own[base].split(", "), row.prompt.split(", ")
            assert len(a) == len(b) and sum(x != y for x, y in zip(a, b)) == 1
    neg = table[table.pair_kind == "corruption-negative"].drop_duplicates("target_frame")
    for row in neg.itertuples():
        frame = np.asarray(Image.open(folder / row.target_path.replace("corrupted/", "frames/")), float)
        bad = np.asarray(Image.open(folder / row.target_path), float)
        changed = np.abs(frame - bad).max(axis=2) > 0
        ys, xs = np.nonzero(changed)
        assert ys.max() - ys.min() < side and xs.max() - xs.min() < side  # one patch, nothing else touched
        d2 = ((frame - bad) ** 2)[changed].mean()
        # written MSE = mean over the inpainted region, which holds the changed pixels and at most side^2 pixels
        assert d2 * changed.sum() / side ** 2 - 1e-3 <= row.corruption_mse <= d2 + 1e-3
    return {"triplets": len(table), "mse_median": float(neg.corruption_mse.median()),
            "mse_min": float(neg.corruption_mse.min()), "mse_max": float(neg.corruption_mse.max())}


def hardness(folder: Path, table: pd.DataFrame) -> dict:
    from sklearn.metrics import roc_auc_score

    from fpr.encoders.embed import embed_paths
    from fpr.encoders.registry import load_encoder

    pairs = table.drop_duplicates(["reference_path", "target_path"])
    paths = sorted(set(pairs.reference_path) | set(pairs.target_path))
    vecs = embed_paths(load_encoder("fpr-world-v3", device="cpu"), [str(folder / p) for p in paths],
                       cache=False).vectors
    index = {p: i for i, p in enumerate(paths)}
    cos = np.array([float(vecs[index[r]] @ vecs[index[t]]) for r, t in zip(pairs.reference_path, pairs.target_path)])
    pairs = pairs.assign(cos=cos)
    out = {f"cos[{k}]": round(float(v), 3) for k, v in pairs.groupby("pair_kind").cos.mean().items()}
    for kind in ("scene", "corruption"):
        sub = pairs[pairs.pair_kind.str.startswith(kind)]
        out[f"auroc[{kind}]"] = round(float(roc_auc_score(sub.sp, sub.cos)), 3)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sets", type=int, default=10)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    from fpr.scorers.refvnli.data import Settings
    from fpr.workflows.refvnli import WorldFrames, build_refvnli_data

    root = Path(args.out or tempfile.mkdtemp(prefix="refvnli-check-"))
    rows = []
    for role, seed in (("calibration", 0), ("check", 1)):
        start = time.perf_counter()
        res = build_refvnli_data(root / f"seed{seed}", world=WorldFrames(sets=args.sets, seed=seed),
                                 settings=Settings(seed=seed), overwrite=True)
        seconds = time.perf_counter() - start
        table = pd.read_parquet(res.manifest)
        rows.append({"seed": seed, "role": role, "frames": res.frames, "seconds": round(seconds, 1),
                     **check(res.out, table, args.sets, 3, side=int(np.ceil(0.3 * 96))), **hardness(res.out, table)})
    print(pd.DataFrame(rows).T.to_string(header=False))


if __name__ == "__main__":
    main()
