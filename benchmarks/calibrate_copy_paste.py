"""Calibrate and validate the copy-paste scorer's default threshold; measure its throughput.

    PYTHONPATH=. python benchmarks/calibrate_copy_paste.py            # the built-in world
    PYTHONPATH=. python benchmarks/calibrate_copy_paste.py --queries mine.csv --label-column is_copy

Built-in world: worlds on the *calibration* seeds pick the threshold (the lowest
score that flags at most --max-fpr of ``faithful`` generations, between the
highest such faithful score and the next copy-like score); worlds on *other*
seeds validate it: per method flag rate and mean score, and
AUROC(copy-like vs faithful), copy-like = paste, paste-mirror, paste-rescale,
edit. Throughput is measured on the same queries against the scorer of a
baseline git revision (``--baseline-rev``, read with ``git show``), in the same
run, and printed as a ratio.

Your own data: a queries CSV (path, identity, group, reference_paths) with a 0/1
column saying which rows are copies; the same threshold rule runs on it and
prints the value to pass as ``--scorer-option copy-paste.threshold=T``.

The markdown table is written to --out (default
benchmarks/results/copy_paste_calibration.md) and printed.
"""
from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

COPY_LIKE = ("paste", "paste-mirror", "paste-rescale", "edit")
V2_METHODS = ("faithful", "drift-0.1", "drift-0.25", "drift-0.5", "generic", *COPY_LIKE, "near-copy")
ROOT = Path(__file__).resolve().parents[1]


def world_queries(seed: int, identities: int, folder: Path) -> pd.DataFrame:
    from fpr.galleries.world import World, WorldConfig

    # world version 2's method set and paired views (the shared_view control renders its faithful, drift
    # levels and generic bit-identically; the copies are unchanged), so the calibration reproduces
    build = World(WorldConfig(seed=seed, identities=identities, gallery=1, references=3, queries=3,
                              methods=V2_METHODS, shared_view=True)).write(folder / f"world-{seed}",
                                                                           progress_desc=f"world seed {seed}")
    q = pd.DataFrame(build.queries)
    q["seed"] = seed
    return q


def score(q: pd.DataFrame, scorer_module=None, options: dict | None = None) -> tuple[pd.DataFrame, float]:
    """Wide frame of copy-paste metrics per query, and queries per second."""
    from fpr.scorers import QueryBatch

    batch = QueryBatch(list(q["query_id"]), list(q["path"]), list(q["identity"]), list(q["group"]),
                       [None] * len(q), [str(r).split(";") if str(r) else [] for r in q["reference_paths"]],
                       device="cpu", options=dict(options or {}))
    if scorer_module is None:
        from fpr.scorers import get_scorer

        scorer = get_scorer("copy-paste")
    else:
        scorer = scorer_module.CopyPaste()
    t = time.perf_counter()
    long = scorer.score(batch)
    qps = len(q) / (time.perf_counter() - t)
    wide = long.pivot_table(index="query_id", columns="metric", values="value", aggfunc="first")
    return q.set_index("query_id").join(wide), qps


def pick_threshold(neg: np.ndarray, pos: np.ndarray, max_fpr: float) -> float:
    """Lowest threshold flagging at most ``max_fpr`` of ``neg``: halfway between the highest negative score that
    must stay unflagged and the next score above it (negative or positive)."""
    neg = np.sort(neg[np.isfinite(neg)])
    allowed = int(np.floor(len(neg) * max_fpr))
    keep = neg[len(neg) - allowed - 1]
    above = np.concatenate([neg, pos[np.isfinite(pos)]])
    above = np.sort(above[above > keep])
    return float((keep + above[0]) / 2) if len(above) else float(keep + 1e-6)


def auroc(neg: np.ndarray, pos: np.ndarray) -> float:
    from sklearn.metrics import roc_auc_score

    y = np.r_[np.zeros(len(neg)), np.ones(len(pos))]
    return float(roc_auc_score(y, np.r_[neg, pos]))


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, check=True, capture_output=True, text=True).stdout


def baseline_module(rev: str):
    """The copy-paste scorer module of git revision ``rev``, with the modules it imports of that revision, as the
    package ``copy_paste_baseline`` (another name: no registration clash). Either layout: the family package
    ``fpr/scorers/copy_paste/`` (issue #36; the scorer is its ``scorer`` module) or the earlier flat
    ``fpr/scorers/copy_paste.py`` beside its ``copy_paste_*.py`` support modules."""
    try:
        names = _git("ls-tree", "--name-only", rev, "fpr/scorers/", "fpr/scorers/copy_paste/").split()
        files = {}
        for name in names:
            stem = Path(name).stem
            if name.startswith("fpr/scorers/copy_paste/") and name.endswith(".py") and stem != "__init__":
                files[stem] = _git("show", f"{rev}:{name}")
            elif name == "fpr/scorers/copy_paste.py" or (stem.startswith("copy_paste_") and name.endswith(".py")):
                files["scorer" if stem == "copy_paste" else stem] = _git("show", f"{rev}:{name}")
        if "scorer" not in files:
            raise OSError(f"no copy-paste scorer at {rev}")
    except (OSError, subprocess.CalledProcessError) as exc:
        print(f"baseline {rev} not available ({exc}); skipping the throughput ratio", file=sys.stderr)
        return None
    folder = Path(tempfile.mkdtemp()) / "copy_paste_baseline"
    folder.mkdir()
    (folder / "__init__.py").write_text("")
    for stem, src in files.items():
        src = src.replace("register_scorer(CopyPaste())", "").replace("fpr.scorers.copy_paste.", "copy_paste_baseline.")
        src = src.replace("from fpr.scorers import copy_paste_", "from copy_paste_baseline import copy_paste_")
        (folder / f"{stem}.py").write_text(src.replace("fpr.scorers.copy_paste_", "copy_paste_baseline.copy_paste_"))
    sys.path.insert(0, str(folder.parent))
    return importlib.import_module("copy_paste_baseline.scorer")


def method_table(df: pd.DataFrame, threshold: float) -> pd.DataFrame:
    from fpr.galleries.world import METHODS

    df = df.assign(flagged=df["score"] >= threshold)
    rows = []
    for m in [m for m in METHODS if m in set(df["method"])]:
        g = df[df["method"] == m]
        rows.append({"method": m, "n": len(g), "flag_rate": g["flagged"].mean(), "mean_score": g["score"].mean(),
                     "median_score": g["score"].median(), "max_score": g["score"].max(),
                     "min_score": g["score"].min()})
    return pd.DataFrame(rows)


def md(df: pd.DataFrame) -> str:
    cols = list(df.columns)
    out = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for _, r in df.iterrows():
        out.append("| " + " | ".join(f"{v:.3f}" if isinstance(v, float) else str(v) for v in r) + " |")
    return "\n".join(out)


def run_world(args) -> str:
    folder = Path(tempfile.mkdtemp(prefix="fpr-cp-calib-"))
    cal = pd.concat([world_queries(s, args.identities, folder) for s in args.calibration_seeds])
    val = pd.concat([world_queries(s, args.identities, folder) for s in args.validation_seeds])
    cal_s, qps_cal = score(cal)
    val_s, qps_new = score(val)
    t = pick_threshold(cal_s.loc[cal_s["method"] == "faithful", "score"].to_numpy(float),
                       cal_s.loc[cal_s["method"].isin(COPY_LIKE), "score"].to_numpy(float), args.max_fpr)
    neg = val_s.loc[val_s["method"] == "faithful", "score"].to_numpy(float)
    pos = val_s.loc[val_s["method"].isin(COPY_LIKE), "score"].to_numpy(float)
    a = auroc(neg, pos)
    cal_tab, val_tab = method_table(cal_s, t), method_table(val_s, t)
    sub = val.groupby("method", group_keys=False).head(args.speed_queries // 10 + 1).head(args.speed_queries)
    _, qps_after = score(sub)
    base = baseline_module(args.baseline_rev)
    qps_before = score(sub, base)[1] if base is not None else float("nan")
    from fpr.scorers.copy_paste.patches import DEFAULTS

    lines = [
        "# copy-paste calibration and validation (built-in world)",
        "",
        f"Command: `PYTHONPATH=. python benchmarks/calibrate_copy_paste.py --identities {args.identities} "
        f"--calibration-seeds {' '.join(map(str, args.calibration_seeds))} "
        f"--validation-seeds {' '.join(map(str, args.validation_seeds))}`",
        "",
        f"World: 3 species x {args.identities} identities x 3 references; 3 queries per identity and method.",
        f"Threshold rule: lowest score flagging at most {args.max_fpr:.1%} of `faithful` on the calibration seeds, "
        "halfway to the next copy-like score.",
        "",
        f"**Calibrated threshold: {t:.3f}** (the `copy-paste.threshold` default in "
        f"`fpr/scorers/copy_paste/scorer.py` must be this value; it was {DEFAULTS['threshold']} when this ran)",
        "",
        f"**Validation AUROC(copy-like vs faithful): {a:.4f}** "
        f"(copy-like = {', '.join(COPY_LIKE)}; {len(pos)} vs {len(neg)} queries)",
        "",
        f"## Validation seeds {', '.join(map(str, args.validation_seeds))} (flag at score >= {t:.3f})",
        "",
        md(val_tab),
        "",
        f"## Calibration seeds {', '.join(map(str, args.calibration_seeds))}",
        "",
        md(cal_tab),
        "",
        "## Throughput (same queries, same run, this machine)",
        "",
        f"{len(sub)} queries: {qps_after:.1f} queries/s now vs {qps_before:.1f} queries/s at `{args.baseline_rev}` "
        f"(ratio {qps_after / qps_before:.2f}x); whole calibration set {qps_cal:.1f} q/s, validation set "
        f"{qps_new:.1f} q/s (reference patches cached per reference).",
    ]
    return "\n".join(lines) + "\n"


def run_own(args) -> str:
    q = pd.read_csv(args.queries)
    base = Path(args.queries).resolve().parent
    q["path"] = [str((base / p).resolve()) if not Path(p).is_absolute() else p for p in q["path"]]
    q["reference_paths"] = [";".join(str((base / r).resolve()) if not Path(r).is_absolute() else r
                                     for r in str(v).split(";") if r) for v in q["reference_paths"].fillna("")]
    if "query_id" not in q:
        q["query_id"] = [f"q{i:06d}" for i in range(len(q))]
    s, _ = score(q)
    y = s[args.label_column].astype(int).to_numpy()
    neg, pos = s["score"].to_numpy(float)[y == 0], s["score"].to_numpy(float)[y == 1]
    t = pick_threshold(neg, pos, args.max_fpr)
    return (f"threshold {t:.3f} (flags {np.mean(neg >= t):.1%} of {len(neg)} non-copies, "
            f"{np.mean(pos >= t):.1%} of {len(pos)} copies; AUROC {auroc(neg, pos):.4f})\n"
            f"use: --scorer-option copy-paste.threshold={t:.3f}\n")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--identities", type=int, default=6, help="identities per species per world")
    ap.add_argument("--calibration-seeds", type=int, nargs="+", default=[101, 102])
    ap.add_argument("--validation-seeds", type=int, nargs="+", default=[201, 202])
    ap.add_argument("--max-fpr", type=float, default=0.02, help="share of faithful the threshold may flag")
    ap.add_argument("--speed-queries", type=int, default=240)
    ap.add_argument("--baseline-rev", default="0d09812", help="git revision of the scorer to compare speed with")
    ap.add_argument("--queries", help="your own queries CSV (instead of the world)")
    ap.add_argument("--label-column", default="is_copy")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "copy_paste_calibration.md"))
    args = ap.parse_args(argv)
    if args.queries:
        print(run_own(args), end="")
        return
    text = run_world(args)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text)
    print(text, end="")


if __name__ == "__main__":
    main()
