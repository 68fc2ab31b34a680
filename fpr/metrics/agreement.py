"""Agreement of per-query metrics with judgments (meta-evaluation statistics; no IO).

Given a run's per-query values (``ap``, ``sim``, ``cmc*``, ``inp`` and every auxiliary
``scorer.metric``) and human judgments -- pairwise preferences
(``query_id_a, query_id_b, winner`` with winner ``a|b|tie``) and/or ratings
(``query_id, rating[, rater]``) -- compute for every metric:

- **PPA** (pairwise prediction accuracy, VISTAR): the share of non-tied human-preferred
  pairs that the metric orders the same way. Human ties are excluded; a pair the metric
  ties counts one half (the expected accuracy of breaking the tie at random);
  ``n_metric_ties`` says how many there were.
- **Spearman** and **Kendall** (tau-b) between the metric and the mean rating per query.
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
from fpr.metrics.summary import N_BOOT, resample_indices

BASE_METRICS = ("ap", "sim", "cmc1", "cmc5", "cmc10", "inp")
WINNERS = ("a", "b", "tie")
PAIR_WITHIN = ("group", "identity")
LEVEL = 0.95


# --------------------------------------------------------------------------- statistics

def krippendorff_alpha_interval(data: np.ndarray) -> float:
    """Krippendorff's alpha with the interval metric; ``data`` is raters x units, NaN = missing.

    Only units with at least two values are pairable. ``alpha = 1 - D_o / D_e`` with
    ``D_o = (1/n) sum_u sum_{i != j in u} (v_i - v_j)^2 / (m_u - 1)`` and
    ``D_e = sum_{i != j over all pairable values} (v_i - v_j)^2 / (n (n - 1))``.
    """
    s = _alpha_unit_sums(np.asarray(data, dtype=np.float64))
    return _alpha_from_sums(*(x.sum() for x in s))


def _alpha_unit_sums(data: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per unit (column): m (values), sum, sum of squares, and within-unit disagreement / (m - 1)."""
    ok = np.isfinite(data)
    m = ok.sum(axis=0).astype(np.float64)
    v = np.where(ok, data, 0.0)
    s1, s2 = v.sum(axis=0), (v * v).sum(axis=0)
    pairable = m >= 2
    m, s1, s2 = np.where(pairable, m, 0), np.where(pairable, s1, 0), np.where(pairable, s2, 0)
    within = np.where(pairable, 2.0 * (m * s2 - s1 * s1) / np.maximum(m - 1, 1), 0.0)
    return m, s1, s2, within


def _alpha_from_sums(n, s1, s2, within):
    """alpha from totals (scalars or arrays over bootstrap resamples)."""
    n = np.asarray(n, dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        d_o = within / n
        d_e = 2.0 * (n * s2 - s1 * s1) / (n * (n - 1))
        alpha = 1.0 - d_o / d_e
    alpha = np.where((n >= 2) & (d_e > 0), alpha, np.nan)
    return float(alpha) if alpha.ndim == 0 else alpha


def _rank_rows(x: np.ndarray) -> np.ndarray:
    from scipy.stats import rankdata

    return rankdata(x, axis=-1)


def _pearson_rows(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    x = x - x.mean(axis=-1, keepdims=True)
    y = y - y.mean(axis=-1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        return (x * y).sum(axis=-1) / np.sqrt((x * x).sum(axis=-1) * (y * y).sum(axis=-1))


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    """Spearman's rho (average ranks for ties); NaN when either side is constant."""
    return float(_pearson_rows(_rank_rows(np.asarray(x, float)), _rank_rows(np.asarray(y, float))))


def kendall(x: np.ndarray, y: np.ndarray) -> float:
    """Kendall's tau-b; NaN when either side is constant."""
    from scipy.stats import kendalltau

    if len(x) < 2 or np.unique(x).size < 2 or np.unique(y).size < 2:
        return float("nan")
    return float(kendalltau(x, y).statistic)


def _ci(boots: np.ndarray) -> tuple[float, float]:
    b = np.asarray(boots, dtype=np.float64)
    b = b[np.isfinite(b)]
    if len(b) == 0:
        return float("nan"), float("nan")
    a = (1.0 - LEVEL) / 2.0
    lo, hi = np.quantile(b, [a, 1.0 - a])
    return float(lo), float(hi)


def _counts(idx: np.ndarray, n: int) -> np.ndarray:
    """Copies of each unit in each resample: ``(n_boot, n)``."""
    c = np.zeros((idx.shape[0], n), dtype=np.float64)
    np.add.at(c, (np.repeat(np.arange(idx.shape[0]), idx.shape[1]), idx.ravel()), 1.0)
    return c


def _weighted_pair_means(counts: np.ndarray, ia: np.ndarray, ib: np.ndarray, s: np.ndarray,
                         chunk: int = 128) -> np.ndarray:
    """Per resample: mean of pair scores ``s`` weighted by copies(a) * copies(b)."""
    out = np.empty(counts.shape[0])
    for start in range(0, counts.shape[0], chunk):
        c = counts[start:start + chunk]
        w = c[:, ia] * c[:, ib]
        tot = w.sum(axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            out[start:start + chunk] = np.where(tot > 0, (w * s).sum(axis=1) / tot, np.nan)
    return out


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value for discordant counts ``b`` and ``c`` (binomial, p = 1/2)."""
    from scipy.stats import binomtest

    if b + c == 0:
        return 1.0
    return float(binomtest(int(b), int(b + c), 0.5).pvalue)


# --------------------------------------------------------------------------- judgments

@dataclass
class Judgments:
    """Human (or ground-truth) judgments: aggregated pairs and per-rater ratings."""

    pairs: pd.DataFrame  # query_id_a, query_id_b, winner (a|b|tie), n_votes
    ratings: pd.DataFrame  # query_id, rater, rating
    source: str = "human"


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
                     source=f"truth:{column}" + (" (lower is better)" if lower_better else ""))


# --------------------------------------------------------------------------- agreement

@dataclass
class MetaResult:
    rows: list[dict]
    comparison: dict | None = None
    info: dict = field(default_factory=dict)

    def as_json(self) -> dict:
        return {"info": self.info, "rows": self.rows, "comparison": self.comparison}


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


def _pair_scores(m: np.ndarray, ia: np.ndarray, ib: np.ndarray, sign: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Over non-tied pairs where the metric is defined: score (1 right, 1/2 metric tie, 0 wrong), strict right."""
    d = np.sign(m[ia] - m[ib]) * sign
    return np.where(d > 0, 1.0, np.where(d == 0, 0.5, 0.0)), d > 0


def agreement(per_query: pd.DataFrame, metrics: Sequence[str], judgments: Judgments, *,
              lower_better: Sequence[str] = (), compare: tuple[str, str] | None = None, seed: int = 0,
              n_boot: int = N_BOOT, where: str = "judgments") -> MetaResult:
    """PPA, Spearman, Kendall and alpha of each metric against the judgments (rows), and a paired test."""
    df = per_query[per_query["status"] == "ok"] if "status" in per_query else per_query
    qids = df["query_id"].astype(str).to_numpy()
    qpos = {q: i for i, q in enumerate(qids)}
    n = len(qids)
    unknown = sorted(set(lower_better) - set(metrics))
    if unknown:
        raise InputError(f"--lower-better names metric(s) the run does not have: {', '.join(unknown)}",
                         hint=f"metrics: {', '.join(metrics)}")
    ia, ib, sign = _pair_index(judgments.pairs, qpos, where)
    nontied = sign != 0
    ia, ib, sign = ia[nontied], ib[nontied], sign[nontied]
    mean_rating, rater_mat = _mean_ratings(judgments.ratings, qpos, where)
    rated = np.isfinite(mean_rating)
    if not len(ia) and not rated.any():
        raise InputError("no usable judgments: every pair is a tie and no query is rated", where=where)
    idx = resample_indices(n, seed=seed, key=("meta",), n_boot=n_boot) if n else np.zeros((n_boot, 0), int)
    counts = _counts(idx, n)
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
        ok_pair = np.isfinite(m[ia]) & np.isfinite(m[ib])
        pa, pb, ps = ia[ok_pair], ib[ok_pair], sign[ok_pair]
        score, strict = _pair_scores(m, pa, pb, ps)
        row["n_pairs"] = int(len(score))
        row["n_metric_ties"] = int((score == 0.5).sum())
        row["ppa"] = float(score.mean()) if len(score) else float("nan")
        ppa_boot = _weighted_pair_means(counts, pa, pb, score) if len(score) else np.full(n_boot, np.nan)
        row["ppa_lo"], row["ppa_hi"] = _ci(ppa_boot)
        both = rated & np.isfinite(m)
        row["n_rated"] = int(both.sum())
        x, y = m[both], mean_rating[both]
        row["spearman"] = spearman(x, y) if both.sum() >= 3 else float("nan")
        row["kendall"] = kendall(x, y) if both.sum() >= 3 else float("nan")
        sp_boot = np.full(n_boot, np.nan)
        kt_boot = np.full(n_boot, np.nan)
        if both.sum() >= 3:
            sub = np.flatnonzero(both)
            bidx = resample_indices(len(sub), seed=seed, key=("meta-rated",), n_boot=n_boot)
            sp_boot = _pearson_rows(_rank_rows(x[bidx]), _rank_rows(y[bidx]))
            kt_boot = np.array([kendall(x[b], y[b]) for b in bidx])
        row["spearman_lo"], row["spearman_hi"] = _ci(sp_boot)
        row["kendall_lo"], row["kendall_hi"] = _ci(kt_boot)
        metric_as_rater = np.where(np.isfinite(m), _rescale(m, r_lo, r_hi), np.nan)
        sums = _alpha_unit_sums(np.vstack([rater_mat, metric_as_rater[None, :]]))
        row["alpha"] = _alpha_from_sums(*(s.sum() for s in sums)) if rated.any() else float("nan")
        alpha_boot = _alpha_from_sums(*(counts @ s for s in sums)) if rated.any() else np.full(n_boot, np.nan)
        row["alpha_lo"], row["alpha_hi"] = _ci(alpha_boot)
        rows.append(row)
        cache[name] = {"pairs": (pa, pb, ps, score, strict), "ppa_boot": ppa_boot, "sp_boot": sp_boot}

    info = {"source": judgments.source, "n_queries": n, "n_pairs_judged": int(len(judgments.pairs)),
            "n_pairs_tied_excluded": int((~nontied).sum()), "n_pairs_used": int(len(ia)),
            "n_rated_queries": int(rated.sum()), "n_raters": int(rater_mat.shape[0]), "n_boot": n_boot,
            "seed": seed, "level": LEVEL}
    if rater_mat.shape[0] >= 2:
        sums = _alpha_unit_sums(rater_mat)
        lo, hi = _ci(_alpha_from_sums(*(counts @ s for s in sums)))
        info["alpha_raters"] = _alpha_from_sums(*(s.sum() for s in sums))
        rows.append({"metric": "(raters)", "direction": "", "n_rated": int(((np.isfinite(rater_mat)).sum(0) >= 2).sum()),
                     "alpha": info["alpha_raters"], "alpha_lo": lo, "alpha_hi": hi})
    comparison = _compare(compare, metrics, values, cache, mean_rating, rated, seed, n_boot) if compare else None
    return MetaResult(rows, comparison, info)


def _compare(compare: tuple[str, str], metrics: Sequence[str], values: dict, cache: dict, mean_rating: np.ndarray,
             rated: np.ndarray, seed: int, n_boot: int) -> dict:
    a, b = compare
    for name in (a, b):
        if name not in metrics:
            raise InputError(f"--compare names an unknown metric '{name}'", hint=f"metrics: {', '.join(metrics)}")
    if a == b:
        raise InputError("--compare needs two different metrics", hint="e.g. --compare ap,sim")
    out: dict = {"metric_a": a, "metric_b": b}
    # Pair outcomes on the pairs both metrics are defined on.
    pa, pb, ps, _, strict_a = cache[a]["pairs"]
    qa, qb, qs, _, strict_b = cache[b]["pairs"]
    key_a = dict(zip(zip(pa.tolist(), pb.tolist()), strict_a.tolist()))
    common = [(k, key_a[k], sb) for k, sb in zip(zip(qa.tolist(), qb.tolist()), strict_b.tolist()) if k in key_a]
    ra = np.array([c[1] for c in common], dtype=bool)
    rb = np.array([c[2] for c in common], dtype=bool)
    n_ab, n_ba = int((ra & ~rb).sum()), int((~ra & rb).sum())
    out.update({"n_pairs": len(common), "a_right_b_wrong": n_ab, "a_wrong_b_right": n_ba,
                "mcnemar_p": mcnemar_exact(n_ab, n_ba)})
    d = cache[a]["ppa_boot"] - cache[b]["ppa_boot"]
    out["ppa_diff"] = float(cache[a]["pairs"][3].mean() - cache[b]["pairs"][3].mean()) if len(pa) and len(qa) \
        else float("nan")
    out["ppa_diff_lo"], out["ppa_diff_hi"] = _ci(d)
    # Paired bootstrap of Spearman on queries rated and defined under both metrics.
    both = rated & np.isfinite(values[a]) & np.isfinite(values[b])
    if both.sum() >= 3:
        xa, xb, y = values[a][both], values[b][both], mean_rating[both]
        bidx = resample_indices(int(both.sum()), seed=seed, key=("meta-compare", a, b), n_boot=n_boot)
        ry = _rank_rows(y[bidx])
        diff = _pearson_rows(_rank_rows(xa[bidx]), ry) - _pearson_rows(_rank_rows(xb[bidx]), ry)
        out["spearman_diff"] = spearman(xa, y) - spearman(xb, y)
        out["spearman_diff_lo"], out["spearman_diff_hi"] = _ci(diff)
        fin = diff[np.isfinite(diff)]
        # two-sided bootstrap p, floored at 1 / resamples (it cannot resolve smaller values)
        out["spearman_diff_p"] = float(min(1.0, max(1.0 / len(fin), 2 * min((fin <= 0).mean(), (fin >= 0).mean())))) \
            if len(fin) \
            else float("nan")
    return out


