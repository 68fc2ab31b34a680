"""VISTAR's role-weighted scores, per-aspect scores, Core/Hard scores and the robustness drop.

Pure numbers over the evaluation tensor S[R x A x G x N] (paper 004, sec. 3.1) given as
long rows ``role, aspect, model, prompt_id, split, score``: a prompt routed ``[r|a]``
fills the cell (r, a) for every model that generated an image for it. Definitions:

- aspect score A(a, g, split) = mean over the split's prompts routed to aspect a (any role)
  of their scores (NaN scores are left out and counted as missing). Every metric here is
  the same from any role's viewpoint, so the tensor's cell (r, a, g, n) holds the prompt's
  score for every role r; the routing role says which pair a prompt was written for;
- role score R(r, g) = mean of A(a, g, core) over the aspects with M[r, a] = 1 -- the binary
  relevance mask, so irrelevant aspects do not count (the paper's "role-weighted score";
  it gives no weights beyond M). NaN when a relevant aspect has no score for g: scores of
  two models are comparable only over the same aspects. ``role_score_measured`` (fpr's
  variant, its own name) is the mean over the relevant aspects that were measured;
- Core (Hard) = mean of the aspect scores on the Core (Hard) split, over the aspects
  measured in both; with all nine aspects this is Table 3's Core (its Core column is the
  mean of its nine aspect columns, e.g. SD 3.5 88.0);
- robustness drop = (Core - Hard) / Core (Table 3, as a fraction; the paper prints x 100).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

TENSOR_COLUMNS = ("role", "aspect", "model", "prompt_id", "split", "score")
SPLITS = ("core", "hard")


def robustness_drop(core: float, hard: float) -> float:
    """(Core - Hard) / Core; NaN when Core is 0 or either is NaN."""
    if not np.isfinite(core) or not np.isfinite(hard) or core == 0:
        return float("nan")
    return float((core - hard) / core)


def _mean(group: pd.Series) -> pd.Series:
    v = group.to_numpy(float)
    ok = np.isfinite(v)
    return pd.Series({"score": float(v[ok].mean()) if ok.any() else float("nan"),
                      "n": int(ok.sum()), "n_missing": int((~ok).sum())})


def _rank(values: pd.Series) -> pd.Series:
    """1 = best; ties share the best rank of the tie; NaN stays unranked (<NA>)."""
    return values.rank(method="min", ascending=False).astype("Int64")


def role_scores(aspects: pd.DataFrame, mask: pd.DataFrame, models: list[str] | None = None) -> pd.DataFrame:
    """Rows ``role, model, role_score, role_score_measured, n_relevant, n_measured, rank, rank_measured``.

    ``aspects`` has rows ``model, aspect, score`` (one split: :func:`aspect_scores` filtered to Core);
    ``mask`` has rows ``role, aspect, relevant``; every role of the mask gets a row per model.
    """
    models = sorted(set(aspects["model"])) if models is None else list(models)
    got = {(r.aspect, r.model): r.score for r in aspects.itertuples() if np.isfinite(r.score)}
    rows = []
    for role, m in mask.groupby("role", sort=False):
        relevant = list(m.loc[m["relevant"] == 1, "aspect"])
        for g in models:
            vals = [got[(a, g)] for a in relevant if (a, g) in got]
            rows.append({"role": role, "model": g,
                         "role_score": float(np.mean(vals)) if len(vals) == len(relevant) else float("nan"),
                         "role_score_measured": float(np.mean(vals)) if vals else float("nan"),
                         "n_relevant": len(relevant), "n_measured": len(vals)})
    out = pd.DataFrame(rows, columns=["role", "model", "role_score", "role_score_measured", "n_relevant",
                                      "n_measured"])
    out["rank"] = out.groupby("role", sort=False)["role_score"].transform(_rank).astype("Int64")
    out["rank_measured"] = out.groupby("role", sort=False)["role_score_measured"].transform(_rank).astype("Int64")
    return out


def aspect_scores(tensor: pd.DataFrame) -> pd.DataFrame:
    """A(a, g, split): rows ``model, split, aspect, score, n, n_missing`` pooled over roles."""
    if tensor.empty:
        return pd.DataFrame(columns=["model", "split", "aspect", "score", "n", "n_missing"])
    out = tensor.groupby(["model", "split", "aspect"], sort=True)["score"].apply(_mean).unstack().reset_index()
    return out.astype({"n": int, "n_missing": int})


def split_scores(aspects: pd.DataFrame) -> pd.DataFrame:
    """Per model: ``core, hard, drop, n_aspects`` (aspects with a finite score on both splits).

    A model without Hard prompts gets ``core`` over its Core aspects and NaN ``hard``/``drop``.
    """
    rows = []
    for g, m in aspects.groupby("model", sort=True):
        by = {s: {r.aspect: r.score for r in m[m["split"] == s].itertuples() if np.isfinite(r.score)}
              for s in SPLITS}
        both = sorted(set(by["core"]) & set(by["hard"]))
        if both:
            core = float(np.mean([by["core"][a] for a in both]))
            hard = float(np.mean([by["hard"][a] for a in both]))
        else:
            core = float(np.mean(list(by["core"].values()))) if by["core"] else float("nan")
            hard = float("nan")
        rows.append({"model": g, "core": core, "hard": hard, "drop": robustness_drop(core, hard),
                     "n_aspects": len(both) if both else len(by["core"])})
    return pd.DataFrame(rows, columns=["model", "core", "hard", "drop", "n_aspects"])
