"""The paper's two claims as verdicts (no IO): the 2x2 of Figure 3 and paired bootstrap differences.

Figure 3 of the Finer-Personalization Rank paper sets a general-purpose encoder's pairwise similarity
(Sim) against gallery mAP with a specialist encoder. With a ground truth per query (the demo world's
``drift``, lower is better) two claims can be checked:

(i)  specialist mAP agrees with the truth better than general-purpose Sim;
(ii) specialist mAP agrees with the truth better than specialist Sim.

Agreement is VISTAR's strict pairwise prediction accuracy (PPA: over pairs the truth orders, the share
the metric orders strictly the same way; a metric tie is wrong), on *cross-context pairs*: two queries
of the same identity (and world seed) whose ``context`` differs -- the comparison a metric must make
when the scene changes. Without a ``context`` column every pair of an identity's queries is used (the
result says so). The difference of the two PPAs on the same pairs has a percentile interval from a
cluster bootstrap over queries (:mod:`fpr.metrics.pair_bootstrap`, the same resamples for both metrics:
paired). The verdict is ``supports`` when the interval lies above 0, ``contradicts`` when below,
``inconclusive`` otherwise.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Sequence

import numpy as np
import pandas as pd

from fpr.metrics.pair_bootstrap import LEVEL, percentile_interval, resample_counts, safe_ratio, weighted_pair_sums
from fpr.metrics.summary import resample_indices

CROSS_CONTEXT = "cross-context pairs (same identity, different context)"
ALL_PAIRS = "all pairs of an identity's queries (no context column: cross-context pairs unavailable)"
# (claim, metric A, metric B): the columns of the 2x2 frame each claim compares
CLAIMS = (("specialist mAP vs general Sim", "specialist_map", "general_sim"),
          ("specialist mAP vs specialist Sim", "specialist_map", "specialist_sim"))
TWO_BY_TWO = ("general_sim", "general_map", "specialist_sim", "specialist_map")


@dataclass(frozen=True)
class Pairs:
    """Judged pairs: query positions ``a``, ``b`` and the truth's sign (+1: ``a`` is better)."""

    a: np.ndarray
    b: np.ndarray
    sign: np.ndarray
    basis: str


@dataclass(frozen=True)
class Verdict:
    claim: str
    metric_a: str
    metric_b: str
    n_pairs: int
    ppa_a: float
    ppa_b: float
    diff: float
    diff_lo: float
    diff_hi: float
    verdict: str
    basis: str
    level: float = LEVEL

    def as_row(self) -> dict:
        return asdict(self)


def judged_pairs(frame: pd.DataFrame, truth: str = "drift", *, lower_better: bool = True,
                 within: Sequence[str] = ("seed", "group", "identity")) -> Pairs:
    """Pairs of queries sharing ``within`` keys whose truth differs; cross-context when ``frame`` has ``context``."""
    t = pd.to_numeric(frame[truth], errors="coerce").to_numpy(np.float64)
    t = -t if lower_better else t
    has_context = "context" in frame.columns
    ctx = frame["context"].astype(str).to_numpy() if has_context else None
    keys = [k for k in within if k in frame.columns]
    ia, ib = [], []
    for idx in frame.groupby(keys, sort=True).indices.values() if keys else [np.arange(len(frame))]:
        i, j = np.triu_indices(len(idx), k=1)
        a, b = idx[i], idx[j]
        keep = np.isfinite(t[a]) & np.isfinite(t[b]) & (t[a] != t[b])
        if has_context:
            keep &= ctx[a] != ctx[b]
        ia.append(a[keep])
        ib.append(b[keep])
    a = np.concatenate(ia) if ia else np.zeros(0, int)
    b = np.concatenate(ib) if ib else np.zeros(0, int)
    return Pairs(a, b, np.sign(t[a] - t[b]), CROSS_CONTEXT if has_context else ALL_PAIRS)


def verdict_of(lo: float, hi: float) -> str:
    if not (np.isfinite(lo) and np.isfinite(hi)):
        return "inconclusive"
    return "supports" if lo > 0 else "contradicts" if hi < 0 else "inconclusive"


def paired_ppa_difference(x: np.ndarray, y: np.ndarray, pairs: Pairs, counts: np.ndarray
                          ) -> tuple[int, float, float, float, float, float]:
    """(pairs, PPA of x, PPA of y, PPA(x) - PPA(y), interval lo, hi) on the pairs both define; ``counts`` are the
    bootstrap copies of each query (``(n_boot, n_queries)``)."""
    ok = np.isfinite(x[pairs.a]) & np.isfinite(x[pairs.b]) & np.isfinite(y[pairs.a]) & np.isfinite(y[pairs.b])
    a, b, s = pairs.a[ok], pairs.b[ok], pairs.sign[ok]
    right_x = np.sign(x[a] - x[b]) * s > 0
    right_y = np.sign(y[a] - y[b]) * s > 0
    cols = np.column_stack([right_x, right_y, np.ones(len(a))]).astype(np.float64)
    tot = cols.sum(axis=0)
    ppa_x, ppa_y = safe_ratio(tot[0], tot[2]), safe_ratio(tot[1], tot[2])
    boot = weighted_pair_sums(counts, a, b, cols) if len(a) else np.full((counts.shape[0], 3), np.nan)
    lo, hi = percentile_interval(safe_ratio(boot[:, 0], boot[:, 2]) - safe_ratio(boot[:, 1], boot[:, 2]))
    return int(len(a)), ppa_x, ppa_y, ppa_x - ppa_y, lo, hi


def claim_verdicts(frame: pd.DataFrame, truth: str = "drift", *, seed: int = 0, n_boot: int = 1000,
                   lower_better: bool = True) -> list[Verdict]:
    """Both claims (:data:`CLAIMS`) on ``frame`` (one row per query: :data:`TWO_BY_TWO` columns, ``truth``,
    ``group``, ``identity``, ``seed`` and optionally ``context``)."""
    frame = frame.reset_index(drop=True)
    pairs = judged_pairs(frame, truth, lower_better=lower_better)
    n = len(frame)
    counts = resample_counts(resample_indices(n, seed=seed, key=("claims",), n_boot=n_boot), n) if n else \
        np.zeros((n_boot, 0))
    out = []
    for claim, ma, mb in CLAIMS:
        x = pd.to_numeric(frame[ma], errors="coerce").to_numpy(np.float64)
        y = pd.to_numeric(frame[mb], errors="coerce").to_numpy(np.float64)
        n_pairs, pa, pb, d, lo, hi = paired_ppa_difference(x, y, pairs, counts)
        out.append(Verdict(claim, ma, mb, n_pairs, pa, pb, d, lo, hi, verdict_of(lo, hi), pairs.basis))
    return out


def two_by_two(frame: pd.DataFrame, by: Sequence[str] = ("seed", "method")) -> pd.DataFrame:
    """Mean of each :data:`TWO_BY_TWO` column and the share of specialist AP exactly 1, per ``by`` keys."""
    g = frame.groupby(list(by), sort=False)
    out = g[list(TWO_BY_TWO)].mean()
    out["specialist_ap1_share"] = g["specialist_map"].apply(lambda v: float((v == 1.0).mean()))
    out["n"] = g.size()
    return out.reset_index()
