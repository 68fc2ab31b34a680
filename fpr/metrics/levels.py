"""AUROC of a metric between adjacent judge levels (e.g. drift 0.25 vs 0.5), pooled and within identity,
with cluster-bootstrap intervals: how well a metric separates what the judge separates.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd

from fpr.metrics.pair_bootstrap import PAIR_WITHIN, percentile_interval, safe_ratio, weighted_pair_sums

MAX_LEVELS = 12  # a judge with more distinct values is treated as continuous: no per-level AUROC


def _within_pairs(better: np.ndarray, worse: np.ndarray, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every (better, worse) pair of query positions sharing a key (one stratum at a time: no |B| x |W| array)."""
    pairs = [(np.repeat(b, len(w)), np.tile(w, len(b)))
             for k in np.intersect1d(keys[better], keys[worse])
             for b, w in [(better[keys[better] == k], worse[keys[worse] == k])]]
    if not pairs:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    return np.concatenate([p[0] for p in pairs]), np.concatenate([p[1] for p in pairs])


def _pooled_auroc(b: np.ndarray, w: np.ndarray, counts: np.ndarray | None, chunk: int = 128
                  ) -> tuple[float, np.ndarray | None]:
    """AUROC of values ``b`` over ``w`` (ties 1/2) in O((|b| + |w|) log |w|), and per resample with ``counts``
    (copies of each ``b`` and ``w`` query: resamples x (|b| + |w|)), without forming the |b| x |w| pairs.

    With ``w`` sorted, the ``w`` below a ``b`` value and those equal to it are fixed index ranges; a resample
    only changes the weights, so its sums are cumulative sums of the ``w`` copies read at those indices."""
    order = np.argsort(w, kind="stable")
    ws = w[order]
    lo, hi = np.searchsorted(ws, b, side="left"), np.searchsorted(ws, b, side="right")
    point = float((lo + 0.5 * (hi - lo)).sum() / (len(b) * len(w)))
    if counts is None:
        return point, None
    cb, cw = counts[:, :len(b)], counts[:, len(b):][:, order]
    boot = np.empty(counts.shape[0])
    for start in range(0, counts.shape[0], chunk):
        cum = np.concatenate([np.zeros((len(cw[start:start + chunk]), 1)), np.cumsum(cw[start:start + chunk], axis=1)],
                             axis=1)
        below, upto = cum[:, lo], cum[:, hi]
        num = (cb[start:start + chunk] * (below + 0.5 * (upto - below))).sum(axis=1)
        boot[start:start + chunk] = safe_ratio(num, cb[start:start + chunk].sum(axis=1) * cum[:, -1])
    return point, boot


def _level_aurocs(m: np.ndarray, better: np.ndarray, worse: np.ndarray, keys: np.ndarray | None,
                  counts: np.ndarray | None) -> dict:
    """Pooled and within-key AUROC of ``m`` between two sets of query positions, with bootstrap intervals."""
    nan = float("nan")
    row = {"n_pairs_pooled": len(better) * len(worse), "auroc_pooled": nan, "auroc_pooled_lo": nan,
           "auroc_pooled_hi": nan}
    if len(better) and len(worse):
        point, boot = _pooled_auroc(m[better], m[worse],
                                    None if counts is None else counts[:, np.concatenate([better, worse])])
        row["auroc_pooled"] = point
        if boot is not None:
            row["auroc_pooled_lo"], row["auroc_pooled_hi"] = percentile_interval(boot)
    if keys is None:  # no keys: "within" is everything
        return {**row, **{k.replace("pooled", "within"): v for k, v in row.items()}}
    i, j = _within_pairs(better, worse, keys)
    win = np.where(m[i] > m[j], 1.0, np.where(m[i] == m[j], 0.5, 0.0))
    row.update({"n_pairs_within": len(i), "auroc_within": float(win.mean()) if len(i) else nan,
                "auroc_within_lo": nan, "auroc_within_hi": nan})
    if counts is not None and len(i):
        sums = weighted_pair_sums(counts, i, j, np.column_stack([win, np.ones_like(win)]))
        row["auroc_within_lo"], row["auroc_within_hi"] = percentile_interval(safe_ratio(sums[:, 0], sums[:, 1]))
    return row


def level_auroc(per_query: pd.DataFrame, values: dict[str, np.ndarray], truth: np.ndarray, *,
                lower_better: bool = True, within: Sequence[str] = PAIR_WITHIN,
                counts: np.ndarray | None = None, max_levels: int = MAX_LEVELS) -> list[dict]:
    """Per metric and per two adjacent levels of ``truth`` (NaN: left out): AUROC pooled and within ``within``.

    ``values`` are oriented higher-is-better. AUROC = P(S(better) > S(worse)) + P(tie) / 2 over the
    (better-level query, worse-level query) pairs where both values are finite: all of them (pooled) or
    those sharing the ``within`` keys. ``counts`` (resamples x queries) gives cluster-bootstrap intervals.
    Empty when the truth has fewer than 2 or more than ``max_levels`` distinct values.
    """
    truth = np.asarray(truth, dtype=np.float64)
    levels = np.unique(truth[np.isfinite(truth)])
    if not 2 <= len(levels) <= max_levels:
        return []
    if not lower_better:
        levels = levels[::-1]
    keys = per_query[list(within)].astype(str).agg("\x1f".join, axis=1).to_numpy() if within else None
    out = []
    for name, m in values.items():
        fin = np.isfinite(m)
        for lb, lw in zip(levels, levels[1:]):
            better, worse = np.flatnonzero((truth == lb) & fin), np.flatnonzero((truth == lw) & fin)
            # + 0.0: a negated truth of 0 is -0.0, shown as "-0"
            row = {"metric": name, "better": float(lb) + 0.0, "worse": float(lw) + 0.0, "n_better": len(better),
                   "n_worse": len(worse)}
            row.update(_level_aurocs(m, better, worse, keys, counts))
            out.append(row)
    return out
