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
    assert good["*"]["map_lo"] <= good["*"]["map"] <= good["*"]["map_hi"]


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
