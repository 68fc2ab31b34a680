"""Summaries of per-query results: means with seeded 95% bootstrap intervals, paired comparisons.

Rows are per (method, group) plus an overall row per method (group ``*``): its
``map`` is the mean over all of the method's queries and ``map_group_mean`` the
mean of its group means (both are reported because groups can differ in size).

A row's interval is a percentile bootstrap over its queries, its random stream keyed
by the seed, the metric and the *set* of query ids (:func:`fpr.keys.query_set_key`),
with the values in query-id order: the same queries give the same interval wherever
they appear (a one-group run's group row and its ``*`` row, merged runs, a report
read again). A row with fewer than :data:`MIN_QUERIES_FOR_INTERVAL` values has no
interval, and its ``no_interval`` field says why.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from fpr.defaults import MIN_QUERIES_FOR_INTERVAL
from fpr.keys import keyed_rng, query_set_key
from fpr.metrics.specs import interval_summaries, summary_columns

N_BOOT = 1000
# Below this many queries a percentile-bootstrap "95%" interval covers the true mean far less
# often than 95% (benchmarks/bench_interval_coverage.py, benchmarks/results/interval_coverage.md).


def metric_columns() -> dict[str, str]:
    """Summary name -> per-query column (declared in :mod:`fpr.metrics.specs`)."""
    return summary_columns()


def interval_metrics() -> tuple[str, ...]:
    """Summary names that carry a bootstrap 95% interval."""
    return interval_summaries()


def aux_columns(aux: pd.DataFrame | None) -> list[str]:
    """``scorer.metric`` names of a long auxiliary-scores table."""
    if aux is None or aux.empty:
        return []
    return sorted({f"{s}.{m}" for s, m in zip(aux["scorer"], aux["metric"])})


def with_aux(per_query: pd.DataFrame, aux: pd.DataFrame | None) -> pd.DataFrame:
    """Per-query rows with one column per ``scorer.metric`` (joined on the query id)."""
    if aux is None or aux.empty:
        return per_query
    wide = aux.assign(col=aux["scorer"] + "." + aux["metric"]).pivot_table(
        index="query_id", columns="col", values="value", aggfunc="first", dropna=False)
    wide.columns = [str(c) for c in wide.columns]
    return per_query.merge(wide, left_on="query_id", right_index=True, how="left")




def resample_indices(n: int, *, seed: int = 0, key: tuple[str, ...] = (), n_boot: int = N_BOOT) -> np.ndarray:
    """``(n_boot, n)`` indices of seeded bootstrap resamples of ``n`` units (the same stream as :func:`bootstrap_ci`)."""
    return keyed_rng(seed, *key).integers(0, n, size=(n_boot, n))


BOOT_CHUNK_ELEMENTS = 1 << 20  # resample indices drawn at once (8 MiB), whatever n_boot x n is


def bootstrap_means(values: np.ndarray, *, seed: int = 0, key: tuple[str, ...] = (), n_boot: int = N_BOOT
                    ) -> np.ndarray:
    """Means of ``n_boot`` seeded resamples of ``values``, drawn in chunks of resamples so memory
    stays ~``BOOT_CHUNK_ELEMENTS`` instead of n_boot x n. The chunks continue one generator, so the
    resamples are exactly those of :func:`resample_indices` (pinned by a test)."""
    v = np.asarray(values, dtype=np.float64)
    n = len(v)
    rng = keyed_rng(seed, *key)
    step = max(1, BOOT_CHUNK_ELEMENTS // max(n, 1))
    means = np.empty(n_boot)
    for s in range(0, n_boot, step):
        c = min(step, n_boot - s)
        means[s:s + c] = v[rng.integers(0, n, size=(c, n))].mean(axis=1)
    return means


def bootstrap_ci(values: np.ndarray, *, seed: int = 0, key: tuple[str, ...] = (), n_boot: int = N_BOOT,
                 level: float = 0.95) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean over queries; NaNs are ignored."""
    v = np.asarray(values, dtype=np.float64)
    v = v[np.isfinite(v)]
    if len(v) == 0:
        return float("nan"), float("nan")
    if len(v) == 1:
        return float(v[0]), float(v[0])
    means = bootstrap_means(v, seed=seed, key=key, n_boot=n_boot)
    a = (1.0 - level) / 2.0
    lo, hi = np.quantile(means, [a, 1.0 - a])
    return float(lo), float(hi)


def _mean(x: pd.Series) -> float:
    v = pd.to_numeric(x, errors="coerce").to_numpy(dtype=np.float64)
    v = v[np.isfinite(v)]
    return float(v.mean()) if len(v) else float("nan")


def no_interval_reason(n: int) -> str | None:
    """Why a row of ``n`` queries has no interval (None when it has one)."""
    if n >= MIN_QUERIES_FOR_INTERVAL:
        return None
    return f"{n} quer{'y' if n == 1 else 'ies'}, fewer than {MIN_QUERIES_FOR_INTERVAL}: no 95% interval"


def _row(method: str, group: str, df: pd.DataFrame, seed: int, aux_cols: list[str]) -> dict:
    row: dict = {"method": method, "group": group, "n_queries": int(len(df))}
    with_interval = interval_metrics()
    if "query_id" in df:  # the stream and the order of the values follow the queries, not the row
        df = df.sort_values("query_id", kind="stable")
        queries = query_set_key(df["query_id"])
    reasons: dict[str, str] = {}
    measured = 0  # interval metrics with at least one value
    for name, col in metric_columns().items():
        row[name] = _mean(df[col]) if col in df else float("nan")
        if name in with_interval and col in df:
            values = pd.to_numeric(df[col], errors="coerce").to_numpy(dtype=np.float64)
            n = int(np.isfinite(values).sum())
            reason = no_interval_reason(n) if n else None  # no value at all: nothing to explain
            measured += n > 0
            key = (name, queries) if "query_id" in df else (name, method, group)
            lo, hi = (float("nan"), float("nan")) if reason else bootstrap_ci(values, seed=seed, key=key)
            row[f"{name}_lo"], row[f"{name}_hi"] = lo, hi
            if reason:
                reasons[name] = reason
    distinct = set(reasons.values())
    row["no_interval"] = (distinct.pop() if len(distinct) == 1 and len(reasons) == measured  # the same for all
                          else "; ".join(f"{k}: {v}" for k, v in reasons.items()) or None)
    for col in aux_cols:
        row[col] = _mean(df[col])
    return row


def summarize(per_query: pd.DataFrame, *, seed: int = 0, aux_cols: list[str] | None = None) -> list[dict]:
    """Summary rows for evaluated queries (status == 'ok')."""
    df = per_query[per_query["status"] == "ok"] if "status" in per_query else per_query
    aux_cols = aux_cols or []
    rows: list[dict] = []
    for method in sorted(df["method"].unique()):
        dm = df[df["method"] == method]
        group_means = []
        for group in sorted(dm["group"].unique()):
            r = _row(method, group, dm[dm["group"] == group], seed, aux_cols)
            group_means.append(r["map"])
            rows.append(r)
        overall = _row(method, "*", dm, seed, aux_cols)
        overall["map_group_mean"] = float(np.nanmean(group_means)) if group_means else float("nan")
        rows.append(overall)
    return rows


def paired_comparison(per_query: pd.DataFrame, method_a: str, method_b: str, *, metric: str = "ap",
                      pair_on: tuple[str, ...] = ("group", "identity", "prompt"), seed: int = 0) -> dict:
    """Paired difference a - b on queries that share ``pair_on`` keys (mean of duplicates per key).

    Returns both methods' means over the pairs, the mean difference, its paired-bootstrap 95%
    interval, the Wilcoxon signed-rank p-value, the number of pairs and ``n_repeats``: how many
    keys had several queries of one method (averaged before pairing).
    """
    from scipy.stats import wilcoxon

    df = per_query[per_query["status"] == "ok"] if "status" in per_query else per_query
    keys = [k for k in pair_on if k in df.columns]
    ga = df[df["method"] == method_a].groupby(keys)[metric]
    gb = df[df["method"] == method_b].groupby(keys)[metric]
    a, b = ga.mean(), gb.mean()
    joined = pd.concat([a.rename("a"), b.rename("b")], axis=1, join="inner").dropna()
    d = (joined["a"] - joined["b"]).to_numpy(dtype=np.float64)
    repeats = set(ga.size()[ga.size() > 1].index) | set(gb.size()[gb.size() > 1].index)
    out = {"method_a": method_a, "method_b": method_b, "metric": metric, "n_pairs": int(len(d)),
           "pair_on": ",".join(keys), "n_repeats": len(repeats & set(joined.index)),
           "mean_a": float(joined["a"].mean()) if len(d) else float("nan"),
           "mean_b": float(joined["b"].mean()) if len(d) else float("nan")}
    if len(d) == 0:
        return {**out, "mean_diff": float("nan"), "ci_lo": float("nan"), "ci_hi": float("nan"), "p_value": float("nan")}
    lo, hi = bootstrap_ci(d, seed=seed, key=("paired", method_a, method_b, metric))
    p = float("nan")
    if len(d) >= 2 and np.any(d != 0):
        p = float(wilcoxon(d, zero_method="wilcox").pvalue)
    return {**out, "mean_diff": float(d.mean()), "ci_lo": lo, "ci_hi": hi, "p_value": p}
