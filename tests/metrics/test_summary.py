from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from fpr.metrics.summary import bootstrap_ci, paired_comparison, summarize


def frame() -> pd.DataFrame:
    rows = []
    for method, base in (("good", 0.8), ("bad", 0.3)):
        for group, n in (("g1", 4), ("g2", 2)):
            for i in range(n):
                rows.append({"method": method, "group": group, "identity": f"{group}-{i}", "prompt": "p",
                             "status": "ok", "ap": base + 0.01 * i, "cmc1": 1.0, "cmc5": 1.0, "cmc10": 1.0,
                             "inp": 0.5, "sim": 0.6})
    return pd.DataFrame(rows)


def test_overall_row_is_mean_over_queries_and_group_mean_reported():
    rows = summarize(frame())
    good = {r["group"]: r for r in rows if r["method"] == "good"}
    assert good["g1"]["map"] == pytest.approx(np.mean([0.80, 0.81, 0.82, 0.83]))
    assert good["*"]["n_queries"] == 6
    assert good["*"]["map"] == pytest.approx(np.mean([0.80, 0.81, 0.82, 0.83, 0.80, 0.81]))
    assert good["*"]["map_group_mean"] == pytest.approx((good["g1"]["map"] + good["g2"]["map"]) / 2)
    # 6 queries: fewer than MIN_QUERIES_FOR_INTERVAL, so no interval, and the row says why
    assert np.isnan(good["*"]["map_lo"]) and np.isnan(good["*"]["map_hi"]) and np.isnan(good["*"]["sim_lo"])
    assert good["*"]["no_interval"] == "6 queries, fewer than 10: no 95% interval"
    assert good["g2"]["no_interval"] == "2 queries, fewer than 10: no 95% interval"


def test_bootstrap_is_seeded_and_brackets_the_mean():
    v = np.random.default_rng(0).random(50)
    a, b = bootstrap_ci(v, seed=3, key=("x",)), bootstrap_ci(v, seed=3, key=("x",))
    assert a == b
    assert a[0] < v.mean() < a[1]
    assert bootstrap_ci(np.array([0.4]))[0] == 0.4


def test_skipped_queries_are_not_averaged():
    df = frame()
    df.loc[0, "status"] = "skipped:no-relevant"
    df.loc[0, "ap"] = np.nan
    rows = summarize(df)
    g1 = [r for r in rows if r["method"] == "good" and r["group"] == "g1"][0]
    assert g1["n_queries"] == 3 and g1["map"] == pytest.approx(np.mean([0.81, 0.82, 0.83]))


def test_paired_comparison_on_shared_keys():
    out = paired_comparison(frame(), "good", "bad", pair_on=("group", "identity"))
    assert out["n_pairs"] == 6 and out["mean_diff"] == pytest.approx(0.5)
    assert out["ci_lo"] == pytest.approx(0.5) and out["p_value"] < 0.05


def test_bootstrap_chunks_keep_the_resample_stream(monkeypatch):
    """Chunked resampling (bounded memory) draws exactly the resamples of resample_indices."""
    import fpr.metrics.summary as S

    for n in (1, 7, 333):
        v = np.random.default_rng(n).random(n)
        whole = v[S.resample_indices(n, seed=2, key=("k",), n_boot=101)].mean(axis=1)
        monkeypatch.setattr(S, "BOOT_CHUNK_ELEMENTS", 50)  # chunks of 50 // n resamples (at least 1)
        np.testing.assert_array_equal(S.bootstrap_means(v, seed=2, key=("k",), n_boot=101), whole)
        monkeypatch.undo()


def _queries(n: int, group: str = "g", method: str = "m", seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame({"query_id": [f"{method}/{group}/{i:03d}" for i in range(n)], "method": method,
                         "group": group, "status": "ok", "ap": rng.beta(5, 1.5, n), "sim": rng.random(n),
                         "cmc1": 1.0, "cmc5": 1.0, "cmc10": 1.0, "inp": 0.5})


def test_the_same_queries_get_the_same_interval_wherever_they_appear():
    from fpr.keys import keyed_rng, query_set_key

    df = _queries(30)
    rows = {r["group"]: r for r in summarize(df, seed=4)}
    # one group: its row and the '*' row hold the same 30 queries (was: two different intervals)
    assert (rows["g"]["map_lo"], rows["g"]["map_hi"]) == (rows["*"]["map_lo"], rows["*"]["map_hi"])
    assert rows["g"]["no_interval"] is None
    # rows in another order, beside another method's queries: the same interval
    mixed = pd.concat([_queries(12, method="other", seed=1), df.iloc[::-1]], ignore_index=True)
    again = {(r["method"], r["group"]): r for r in summarize(mixed, seed=4)}
    assert (again[("m", "*")]["map_lo"], again[("m", "*")]["map_hi"]) == (rows["*"]["map_lo"], rows["*"]["map_hi"])
    # an independent computation: 1000 resamples of the values in query-id order from the stream keyed by
    # (seed, metric, set of query ids), 2.5% and 97.5% percentiles of their means
    v = df.sort_values("query_id")["ap"].to_numpy()
    idx = keyed_rng(4, "map", query_set_key(df["query_id"])).integers(0, 30, size=(1000, 30))
    want = np.quantile(v[idx].mean(axis=1), [0.025, 0.975])
    assert (rows["*"]["map_lo"], rows["*"]["map_hi"]) == pytest.approx(tuple(want), abs=1e-15)
    assert rows["*"]["map_lo"] < v.mean() < rows["*"]["map_hi"]


def test_a_group_below_the_minimum_prints_no_interval_and_says_why():
    from fpr.defaults import MIN_QUERIES_FOR_INTERVAL
    from fpr.render.cells import interval_footnote

    assert MIN_QUERIES_FOR_INTERVAL == 10  # chosen in benchmarks/results/interval_coverage.md
    df = pd.concat([_queries(1, group="solo"), _queries(9, group="nine", seed=2),
                    _queries(10, group="ten", seed=3)], ignore_index=True)
    rows = {r["group"]: r for r in summarize(df)}
    assert rows["solo"]["map"] == pytest.approx(df["ap"].iloc[0])
    assert np.isnan(rows["solo"]["map_lo"]) and np.isnan(rows["solo"]["map_hi"])  # was: [0.66,0.66]
    assert rows["solo"]["no_interval"] == "1 query, fewer than 10: no 95% interval"
    assert rows["nine"]["no_interval"] == "9 queries, fewer than 10: no 95% interval"
    assert rows["ten"]["no_interval"] is None and rows["ten"]["map_lo"] < rows["ten"]["map_hi"]
    assert rows["*"]["no_interval"] is None  # 20 queries
    # Sim counts its own values: 8 of the ten-query group's Sim values missing
    df.loc[df["group"] == "ten", "sim"] = [np.nan] * 8 + [0.5, 0.7]
    ten = next(r for r in summarize(df) if r["group"] == "ten")
    assert ten["no_interval"] == "sim: 2 queries, fewer than 10: no 95% interval" and np.isfinite(ten["map_lo"])
    assert interval_footnote(summarize(df)) == ("(3 rows without a 95% interval: fewer than 10 queries, too few "
                                                "for a bootstrap interval to cover the mean 95% of the time)")
    assert interval_footnote([rows["ten"]]) is None
