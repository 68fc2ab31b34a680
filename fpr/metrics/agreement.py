"""Agreement of per-query metrics with judgments (meta-evaluation statistics; no IO).

Given a run's per-query values (``ap``, ``sim``, ``cmc*``, ``inp`` and every auxiliary
``scorer.metric``) and human judgments -- pairwise preferences
(``query_id_a, query_id_b, winner`` with winner ``a|b|tie``) and/or ratings
(``query_id, rating[, rater]``) -- compute for every metric:

- **PPA** (pairwise prediction accuracy), VISTAR's definition: over the judged pairs with
  a preference (judge ties excluded), the share where the preferred query scores strictly
  higher, ``S(A) > S(B)``; a pair the metric ties is a wrong prediction.
- **PPA, ties half** (``ppa_ties_half``): the same, a metric tie counting 1/2 (the expected
  accuracy of breaking it at random) -- not the paper's; ``metric_tie_share`` is the share of
  those pairs the metric ties, so ``ppa_ties_half = ppa + metric_tie_share / 2``.
- **Kendall tau-b over the judged pairs** (``kendall_within``): every judged pair, judge ties
  included, ``(C - D) / sqrt((P - T_metric) (P - T_judge))`` with ``C``/``D`` the pairs the
  metric orders like / against the judge, ``P`` the pairs, ``T_metric``/``T_judge`` the pairs
  each side ties. With a truth column or ratings the pairs are those within ``pair_within``
  (default the same group and identity): tau-b within identity, pooled over identities. On
  one identity it is scipy's ``kendalltau``.
- **AUROC per adjacent level** (:func:`level_auroc`, when the judge has at most
  ``MAX_LEVELS`` distinct rating values, e.g. the demo world's drift): for each two
  neighbouring levels, the probability that a query of the better level scores higher than
  one of the worse level, ties 1/2 (Mann-Whitney; scikit-learn's ``roc_auc_score``), pooled
  over all queries of the two levels and within ``pair_within``.
- **Spearman** and **Kendall** (tau-b) between the metric and the mean rating per query,
  pooled over all rated queries.
- **Krippendorff's alpha** (interval metric) of the human raters plus the metric as one
  more rater, the metric rescaled linearly onto the ratings' observed range; and, as its
  own row ``(raters)``, alpha among the human raters alone.

Every figure has a seeded 95% percentile bootstrap interval over queries: a resample
draws queries with replacement, and a pair counts once per copy of each of its queries
(a cluster bootstrap). A paired test compares two metrics: McNemar's exact test on the
pairs one metric orders strictly right and the other does not, and a paired bootstrap
(the same resamples) of the difference in PPA and in Spearman.

Judgments pooled over several raters: a pair's votes are summed (a = +1, b = -1, tie = 0)
over its rows in either order, and the sign decides (0 is a tie); ratings are averaged.
When only ratings are given, pairs are formed from mean ratings among queries that share
``pair_within`` keys (default: the same group and identity).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import pandas as pd

from fpr.errors import InputError, NotFoundError
from fpr.metrics.correlation import (
    _alpha_from_sums,
    _alpha_unit_sums,
    _pearson_rows,
    _rank_rows,
    kendall,
    mcnemar_exact,
    spearman,
)
from fpr.metrics.levels import level_auroc
from fpr.metrics.pair_bootstrap import (
    LEVEL,
    PAIR_WITHIN,
    percentile_interval,
    resample_counts,
    safe_ratio,
    weighted_pair_sums,
)
from fpr.metrics.specs import PER_QUERY_METRICS
from fpr.metrics.summary import N_BOOT, resample_indices

# The per-query metrics that are summarised (fpr/metrics/specs.py), the headline pair first.
BASE_METRICS = tuple(sorted((m.column for m in PER_QUERY_METRICS if m.summary),
                            key=lambda c: (c not in ("ap", "sim"), c != "ap")))
WINNERS = ("a", "b", "tie")


# --------------------------------------------------------------------------- statistics


@dataclass
class PairStats:
    """Sums over judged pairs that every pair statistic is a ratio of (weighted by copies in a resample)."""

    n_judge_nontied: np.ndarray  # pairs with a preference
    strict: np.ndarray  # ... that the metric orders strictly the same way
    metric_ties: np.ndarray  # ... that the metric ties
    concordance: np.ndarray  # sum over all judged pairs of sign(metric diff) * sign(judge)
    n_pairs: np.ndarray  # all judged pairs, judge ties included
    metric_tied_all: np.ndarray  # ... that the metric ties
    judge_tied_all: np.ndarray  # ... that the judge ties

    COLUMNS = 7

    @classmethod
    def columns(cls, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        """Per pair: the indicator each sum adds up; ``x``, ``y`` the signs of the metric and judge differences."""
        pref = y != 0
        return np.column_stack([pref, pref & (x * y > 0), pref & (x == 0), x * y, np.ones_like(x),
                                x == 0, ~pref]).astype(np.float64)

    @classmethod
    def from_sums(cls, sums: np.ndarray) -> "PairStats":
        return cls(*(sums[..., k] for k in range(cls.COLUMNS)))

    def ppa(self):
        return safe_ratio(self.strict, self.n_judge_nontied)

    def ppa_ties_half(self):
        return safe_ratio(self.strict + 0.5 * self.metric_ties, self.n_judge_nontied)

    def metric_tie_share(self):
        return safe_ratio(self.metric_ties, self.n_judge_nontied)

    def kendall_tau_b(self):
        return safe_ratio(self.concordance, np.sqrt((self.n_pairs - self.metric_tied_all)
                                                * (self.n_pairs - self.judge_tied_all)))


# --------------------------------------------------------------------------- judgments

@dataclass
class Judgments:
    """Human (or ground-truth) judgments: aggregated pairs and per-rater ratings."""

    pairs: pd.DataFrame  # query_id_a, query_id_b, winner (a|b|tie), n_votes
    ratings: pd.DataFrame  # query_id, rater, rating
    source: str = "human"
    within: tuple[str, ...] = PAIR_WITHIN  # keys pairs were formed within (per-level AUROC "within")
    rating_sign: float = 1.0  # -1: ratings are a lower-is-better truth negated (labels show the truth's values)


def _empty_pairs() -> pd.DataFrame:
    return pd.DataFrame({"query_id_a": pd.Series(dtype=str), "query_id_b": pd.Series(dtype=str),
                         "winner": pd.Series(dtype=str), "n_votes": pd.Series(dtype=int)})


def _empty_ratings() -> pd.DataFrame:
    return pd.DataFrame({"query_id": pd.Series(dtype=str), "rater": pd.Series(dtype=str),
                         "rating": pd.Series(dtype=float)})


def pairs_from_scores(per_query: pd.DataFrame, score: pd.Series, within: Sequence[str] = PAIR_WITHIN
                      ) -> pd.DataFrame:
    """All pairs of queries sharing ``within`` keys, the higher ``score`` winning (equal: tie)."""
    df = per_query[["query_id", *within]].copy()
    df["score"] = score.to_numpy(dtype=np.float64)
    df = df[np.isfinite(df["score"])]
    frames = []
    groups = df.groupby(list(within), sort=True) if within else [((), df)]
    for _, g in groups:
        q, s = g["query_id"].astype(str).to_numpy(), g["score"].to_numpy()
        i, j = np.triu_indices(len(g), k=1)
        if len(i) == 0:
            continue
        frames.append(pd.DataFrame({"query_id_a": q[i], "query_id_b": q[j],
                                    "winner": np.select([s[i] > s[j], s[i] < s[j]], ["a", "b"], "tie"),
                                    "n_votes": 1}))
    return pd.concat(frames, ignore_index=True) if frames else _empty_pairs()


def truth_judgments(per_query: pd.DataFrame, column: str = "drift", *, lower_better: bool = True,
                    within: Sequence[str] = PAIR_WITHIN) -> Judgments:
    """A ground-truth column as the judge: rating = the value (negated when lower is better), pairs from it."""
    if column not in per_query.columns:
        raise InputError(f"the run's queries have no '{column}' column to use as the truth",
                         hint="--truth needs a per-query column in the queries file, e.g. the demo world's drift")
    val = pd.to_numeric(per_query[column], errors="coerce")
    if val.notna().sum() == 0:
        raise InputError(f"the truth column '{column}' has no numeric values")
    score = -val if lower_better else val
    ok = score.notna().to_numpy()
    ratings = pd.DataFrame({"query_id": per_query["query_id"].astype(str)[ok], "rater": f"truth:{column}",
                            "rating": score[ok].astype(float)})
    return Judgments(pairs_from_scores(per_query, score, within), ratings.reset_index(drop=True),
                     source=f"truth:{column}" + (" (lower is better)" if lower_better else ""),
                     within=tuple(within), rating_sign=-1.0 if lower_better else 1.0)


# --------------------------------------------------------------------------- agreement

@dataclass
class MetaResult:
    rows: list[dict]
    comparison: dict | None = None
    info: dict = field(default_factory=dict)
    levels: list[dict] = field(default_factory=list)  # AUROC per adjacent judge level (level_auroc)

    def as_json(self) -> dict:
        return {"info": self.info, "rows": self.rows, "comparison": self.comparison, "levels": self.levels}


def metric_columns(per_query: pd.DataFrame, aux_cols: Sequence[str] = ()) -> list[str]:
    """The stored per-query values meta-evaluation looks at, in a stable order."""
    return [c for c in BASE_METRICS if c in per_query.columns] + [c for c in aux_cols if c in per_query.columns]


def _pair_index(pairs: pd.DataFrame, qpos: dict[str, int], where: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    a, b = pairs["query_id_a"].astype(str), pairs["query_id_b"].astype(str)
    unknown = sorted((set(a) | set(b)) - set(qpos))
    if unknown:
        raise NotFoundError(f"{len(unknown)} judged query id(s) are not evaluated queries of the run, e.g. "
                            f"{', '.join(unknown[:3])}", where=where,
                            hint="judgments must use the run's query_id values ('fpr export' lists them)")
    sign = pairs["winner"].map({"a": 1.0, "b": -1.0, "tie": 0.0}).to_numpy()
    return (a.map(qpos).to_numpy(dtype=np.int64), b.map(qpos).to_numpy(dtype=np.int64),
            sign.astype(np.float64))


def _mean_ratings(ratings: pd.DataFrame, qpos: dict[str, int], where: str) -> tuple[np.ndarray, np.ndarray]:
    """(mean rating per query position, raters x queries matrix), NaN where unrated."""
    n = len(qpos)
    unknown = sorted(set(ratings["query_id"]) - set(qpos))
    if unknown:
        raise NotFoundError(f"{len(unknown)} rated query id(s) are not evaluated queries of the run, e.g. "
                            f"{', '.join(unknown[:3])}", where=where,
                            hint="ratings must use the run's query_id values ('fpr export' lists them)")
    raters = sorted(ratings["rater"].unique())
    mat = np.full((len(raters), n), np.nan)
    per = ratings.groupby(["rater", "query_id"])["rating"].mean()
    for (rater, qid), v in per.items():
        mat[raters.index(rater), qpos[qid]] = v
    # queries no rater rated stay NaN (np.nanmean would warn about their empty columns)
    rated = np.isfinite(mat).sum(axis=0)
    mean = np.full(n, np.nan)
    mean[rated > 0] = np.nansum(mat[:, rated > 0], axis=0) / rated[rated > 0]
    return mean, mat


def _rescale(v: np.ndarray, lo: float, hi: float) -> np.ndarray:
    vmin, vmax = np.nanmin(v), np.nanmax(v)
    if not np.isfinite(vmin) or vmax == vmin:
        return np.full_like(v, (lo + hi) / 2.0)
    return lo + (v - vmin) * (hi - lo) / (vmax - vmin)


def _signs(m: np.ndarray, ia: np.ndarray, ib: np.ndarray) -> np.ndarray:
    """sign(m[a] - m[b]) per pair: +1, 0 (a metric tie) or -1."""
    return np.sign(m[ia] - m[ib])


def _rating_agreement(m: np.ndarray, mean_rating: np.ndarray, rater_mat: np.ndarray, rating_range: tuple,
                      counts: np.ndarray, seed: int, n_boot: int) -> dict:
    """Spearman and Kendall of a metric with the mean rating, and Krippendorff's alpha with the metric as one more
    rater (rescaled onto the ratings' range), each with its bootstrap interval."""
    rated = np.isfinite(mean_rating)
    both = rated & np.isfinite(m)
    out: dict = {"n_rated": int(both.sum())}
    xr, yr = m[both], mean_rating[both]
    out["spearman"] = spearman(xr, yr) if both.sum() >= 3 else float("nan")
    out["kendall"] = kendall(xr, yr) if both.sum() >= 3 else float("nan")
    sp_boot = np.full(n_boot, np.nan)
    kt_boot = np.full(n_boot, np.nan)
    if both.sum() >= 3:
        bidx = resample_indices(int(both.sum()), seed=seed, key=("meta-rated",), n_boot=n_boot)
        sp_boot = _pearson_rows(_rank_rows(xr[bidx]), _rank_rows(yr[bidx]))
        kt_boot = np.array([kendall(xr[b], yr[b]) for b in bidx])
    out["spearman_lo"], out["spearman_hi"] = percentile_interval(sp_boot)
    out["kendall_lo"], out["kendall_hi"] = percentile_interval(kt_boot)
    metric_as_rater = np.where(np.isfinite(m), _rescale(m, *rating_range), np.nan)
    sums = _alpha_unit_sums(np.vstack([rater_mat, metric_as_rater[None, :]]))
    out["alpha"] = _alpha_from_sums(*(s.sum() for s in sums)) if rated.any() else float("nan")
    alpha_boot = _alpha_from_sums(*(counts @ s for s in sums)) if rated.any() else np.full(n_boot, np.nan)
    out["alpha_lo"], out["alpha_hi"] = percentile_interval(alpha_boot)
    return out


def agreement(per_query: pd.DataFrame, metrics: Sequence[str], judgments: Judgments, *,
              lower_better: Sequence[str] = (), compare: tuple[str, str] | None = None, seed: int = 0,
              n_boot: int = N_BOOT, where: str = "judgments") -> MetaResult:
    """PPA (strict and ties-half), tau-b over pairs, Spearman, Kendall and alpha of each metric (rows), the
    AUROC per adjacent judge level (``levels``) and a paired test."""
    df = per_query[per_query["status"] == "ok"] if "status" in per_query else per_query
    qids = df["query_id"].astype(str).to_numpy()
    qpos = {q: i for i, q in enumerate(qids)}
    n = len(qids)
    unknown = sorted(set(lower_better) - set(metrics))
    if unknown:
        raise InputError(f"--lower-better names metric(s) the run does not have: {', '.join(unknown)}",
                         hint=f"metrics: {', '.join(metrics)}")
    ia_all, ib_all, sign_all = _pair_index(judgments.pairs, qpos, where)
    nontied = sign_all != 0
    mean_rating, rater_mat = _mean_ratings(judgments.ratings, qpos, where)
    rated = np.isfinite(mean_rating)
    if not nontied.any() and not rated.any():
        raise InputError("no usable judgments: every pair is a tie and no query is rated", where=where)
    idx = resample_indices(n, seed=seed, key=("meta",), n_boot=n_boot) if n else np.zeros((n_boot, 0), int)
    counts = resample_counts(idx, n)
    values = {}
    for name in metrics:
        v = pd.to_numeric(df[name], errors="coerce").to_numpy(dtype=np.float64)
        values[name] = -v if name in lower_better else v

    r_lo, r_hi = (float(np.nanmin(rater_mat)), float(np.nanmax(rater_mat))) if rated.any() else (0.0, 1.0)
    rows: list[dict] = []
    cache: dict[str, dict] = {}
    for name in metrics:
        m = values[name]
        row: dict = {"metric": name, "direction": "lower" if name in lower_better else "higher"}
        ok_pair = np.isfinite(m[ia_all]) & np.isfinite(m[ib_all])
        pa, pb, ps = ia_all[ok_pair], ib_all[ok_pair], sign_all[ok_pair]
        x = _signs(m, pa, pb)
        cols = PairStats.columns(x, ps)
        st = PairStats.from_sums(cols.sum(axis=0))
        boot = PairStats.from_sums(weighted_pair_sums(counts, pa, pb, cols)) if len(pa) else \
            PairStats.from_sums(np.zeros((n_boot, PairStats.COLUMNS)))
        row["n_pairs"] = int(st.n_judge_nontied)
        row["n_metric_ties"] = int(st.metric_ties)
        for key in ("ppa", "ppa_ties_half", "metric_tie_share"):
            row[key] = getattr(st, key)()
            row[f"{key}_lo"], row[f"{key}_hi"] = percentile_interval(getattr(boot, key)())
        row["n_pairs_all"] = int(st.n_pairs)
        row["kendall_within"] = st.kendall_tau_b()
        row["kendall_within_lo"], row["kendall_within_hi"] = percentile_interval(boot.kendall_tau_b())
        row.update(_rating_agreement(m, mean_rating, rater_mat, (r_lo, r_hi), counts, seed, n_boot))
        rows.append(row)
        pref = ps != 0
        cache[name] = {"pairs": (pa[pref], pb[pref], (x * ps)[pref] > 0), "ppa": row["ppa"],
                       "ppa_boot": boot.ppa()}

    info = {"source": judgments.source, "n_queries": n, "n_pairs_judged": int(len(judgments.pairs)),
            "n_pairs_tied_excluded": int((~nontied).sum()), "n_pairs_used": int(nontied.sum()),
            "n_rated_queries": int(rated.sum()), "n_raters": int(rater_mat.shape[0]), "n_boot": n_boot,
            "seed": seed, "level": LEVEL}
    if rater_mat.shape[0] >= 2:
        sums = _alpha_unit_sums(rater_mat)
        lo, hi = percentile_interval(_alpha_from_sums(*(counts @ s for s in sums)))
        info["alpha_raters"] = _alpha_from_sums(*(s.sum() for s in sums))
        rows.append({"metric": "(raters)", "direction": "", "n_rated": int(((np.isfinite(rater_mat)).sum(0) >= 2).sum()),
                     "alpha": info["alpha_raters"], "alpha_lo": lo, "alpha_hi": hi})
    comparison = _compare(compare, metrics, values, cache, mean_rating, rated, seed, n_boot) if compare else None
    levels = level_auroc(df, values, judgments.rating_sign * mean_rating, lower_better=judgments.rating_sign < 0,
                         within=judgments.within, counts=counts)
    info["n_levels"] = len({r["better"] for r in levels} | {r["worse"] for r in levels})
    return MetaResult(rows, comparison, info, levels)


# --------------------------------------------------------------------------- AUROC per adjacent level


def _compare(compare: tuple[str, str], metrics: Sequence[str], values: dict, cache: dict, mean_rating: np.ndarray,
             rated: np.ndarray, seed: int, n_boot: int) -> dict:
    a, b = compare
    for name in (a, b):
        if name not in metrics:
            raise InputError(f"--compare names an unknown metric '{name}'", hint=f"metrics: {', '.join(metrics)}")
    if a == b:
        raise InputError("--compare needs two different metrics", hint="e.g. --compare ap,sim")
    out: dict = {"metric_a": a, "metric_b": b}
    # Pair outcomes (strictly right or not) on the preference pairs both metrics are defined on.
    pa, pb, strict_a = cache[a]["pairs"]
    qa, qb, strict_b = cache[b]["pairs"]
    key_a = dict(zip(zip(pa.tolist(), pb.tolist()), strict_a.tolist()))
    common = [(k, key_a[k], sb) for k, sb in zip(zip(qa.tolist(), qb.tolist()), strict_b.tolist()) if k in key_a]
    ra = np.array([c[1] for c in common], dtype=bool)
    rb = np.array([c[2] for c in common], dtype=bool)
    n_ab, n_ba = int((ra & ~rb).sum()), int((~ra & rb).sum())
    out.update({"n_pairs": len(common), "a_right_b_wrong": n_ab, "a_wrong_b_right": n_ba,
                "mcnemar_p": mcnemar_exact(n_ab, n_ba)})
    # strict PPA (the paper's) of each on its own pairs, as in the rows
    out["ppa_diff"] = cache[a]["ppa"] - cache[b]["ppa"]
    out["ppa_diff_lo"], out["ppa_diff_hi"] = percentile_interval(cache[a]["ppa_boot"] - cache[b]["ppa_boot"])
    # Paired bootstrap of Spearman on queries rated and defined under both metrics.
    both = rated & np.isfinite(values[a]) & np.isfinite(values[b])
    if both.sum() >= 3:
        xa, xb, y = values[a][both], values[b][both], mean_rating[both]
        bidx = resample_indices(int(both.sum()), seed=seed, key=("meta-compare", a, b), n_boot=n_boot)
        ry = _rank_rows(y[bidx])
        diff = _pearson_rows(_rank_rows(xa[bidx]), ry) - _pearson_rows(_rank_rows(xb[bidx]), ry)
        out["spearman_diff"] = spearman(xa, y) - spearman(xb, y)
        out["spearman_diff_lo"], out["spearman_diff_hi"] = percentile_interval(diff)
        fin = diff[np.isfinite(diff)]
        # two-sided bootstrap p, floored at 1 / resamples (it cannot resolve smaller values)
        out["spearman_diff_p"] = float(min(1.0, max(1.0 / len(fin), 2 * min((fin <= 0).mean(), (fin >= 0).mean())))) \
            if len(fin) \
            else float("nan")
    return out
