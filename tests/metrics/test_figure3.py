"""Figure 3 whole: the four cells, the protocol and encoder effects, claim (i)'s decomposition, claim (ii)'s ties-half
variant and the regime, each recomputed here by plain loops over the cross-context pairs and the resamples."""
from __future__ import annotations

from itertools import combinations

import numpy as np
import pandas as pd
import pytest

from fpr.metrics.claims import TIES_HALF_VARIANT, TWO_BY_TWO, figure3, regime
from fpr.metrics.pair_bootstrap import percentile_interval, resample_counts
from fpr.metrics.summary import resample_indices


def _frame() -> pd.DataFrame:
    """Two identities x (context A, B) x drift (0, 0.5): cross-context pairs of different drift per identity are
    (A0, B.5) and (A.5, B0): 2 per identity, 4 in all; plus an oracle row (no drift) per identity."""
    rows = []
    values = {  # per query: general_sim, general_map, specialist_sim, specialist_map
        ("i1", "A", 0.0): (0.2, 0.9, 0.8, 1.0), ("i1", "A", 0.5): (0.6, 0.3, 0.4, 0.7),
        ("i1", "B", 0.0): (0.5, 0.8, 0.9, 1.0), ("i1", "B", 0.5): (0.1, 0.4, 0.3, 1.0),
        ("i2", "A", 0.0): (0.7, 0.2, 0.6, 1.0), ("i2", "A", 0.5): (0.6, 0.6, 0.7, 0.9),
        ("i2", "B", 0.0): (0.4, 0.9, 0.8, 0.9), ("i2", "B", 0.5): (0.5, 0.5, 0.2, 0.9),
    }
    for (ident, ctx, drift), v in values.items():
        rows.append({"seed": 0, "group": "g", "identity": ident, "context": ctx, "drift": drift,
                     "method": f"{ctx}@{drift:g}", "query_id": f"{ident}/{ctx}/{drift}",
                     **dict(zip(("general_sim", "general_map", "specialist_sim", "specialist_map"), v))})
    for ident, ap in (("i1", 1.0), ("i2", 0.8)):
        rows.append({"seed": 0, "group": "g", "identity": ident, "context": "oracle", "drift": np.nan,
                     "method": "oracle", "query_id": f"{ident}/oracle", "general_sim": 0.9, "general_map": 0.5,
                     "specialist_sim": 0.9, "specialist_map": ap})
    return pd.DataFrame(rows)


def _loop_pairs(df: pd.DataFrame) -> list[tuple[int, int, int]]:
    """(i, j, +1 if i has less drift else -1) over an identity's queries of another context and another drift."""
    out = []
    for i, j in combinations(range(len(df)), 2):
        r, s = df.iloc[i], df.iloc[j]
        if r["identity"] == s["identity"] and r["context"] != s["context"] and r["drift"] != s["drift"]:
            out.append((i, j, 1 if r["drift"] < s["drift"] else -1))
    return out


def _loop_ppa(df, pairs, col, half=False, weights=None):
    num = den = 0.0
    for k, (i, j, s) in enumerate(pairs):
        w = 1.0 if weights is None else weights[k]
        x, y = df[col].iloc[i], df[col].iloc[j]
        num += w * (1.0 if (x - y) * s > 0 else (0.5 if half and x == y else 0.0))
        den += w
    return num / den if den else np.nan


def test_cells_effects_variant_and_decomposition_equal_loops():
    df = _frame()
    judged = df[df["drift"].notna()].reset_index(drop=True)
    fig = figure3(judged, n_boot=300, seed=5)
    pairs = _loop_pairs(judged)
    assert len(pairs) == 4
    # known answers: general_sim right on 2 of 4, general_map 3, specialist_sim 4, specialist_map 2 (two AP ties)
    known = {"general_sim": 0.5, "general_map": 0.75, "specialist_sim": 1.0, "specialist_map": 0.5}
    counts = resample_counts(resample_indices(len(judged), seed=5, key=("claims",), n_boot=300), len(judged))
    weights = [[c[i] * c[j] for i, j, _ in pairs] for c in counts]
    boot = {c: np.array([_loop_ppa(judged, pairs, c, weights=w) for w in weights]) for c in TWO_BY_TWO}
    boot_half = {c: np.array([_loop_ppa(judged, pairs, c, True, w) for w in weights]) for c in TWO_BY_TWO}
    for cell in fig.cells:
        assert cell.ppa == known[cell.metric] == _loop_ppa(judged, pairs, cell.metric)
        assert cell.n_pairs == 4 and cell.n_right == 4 * known[cell.metric]
        assert cell.ppa_ties_half == _loop_ppa(judged, pairs, cell.metric, half=True)
        assert (cell.ppa_lo, cell.ppa_hi) == pytest.approx(percentile_interval(boot[cell.metric]), abs=1e-12)
    assert {c.metric: c.n_ties for c in fig.cells} == {"general_sim": 0, "general_map": 0, "specialist_sim": 0,
                                                       "specialist_map": 2}
    for e in fig.effects:
        assert e.diff == pytest.approx(known[e.metric_a] - known[e.metric_b], abs=1e-15)
        assert (e.diff_lo, e.diff_hi) == pytest.approx(
            percentile_interval(boot[e.metric_a] - boot[e.metric_b]), abs=1e-12)
    by = {(e.kind, e.fixed): e for e in fig.effects}
    assert by[("protocol", "general")].diff == 0.25 and by[("encoder", "mAP")].diff == -0.25
    (claim1, claim2) = fig.verdicts
    assert claim1.diff == 0.0 and claim2.diff == -0.5
    assert claim2.diff == by[("protocol", "specialist")].diff  # claim (ii) is that effect
    dec = fig.decomposition()
    assert dec["exact"] and dec["n_right_diff"] == 0 == by[("encoder", "mAP")].n_right_diff + by[("protocol", "general")].n_right_diff
    assert dec["diff"] == pytest.approx(sum(t["diff"] for t in dec["terms"]), abs=1e-15)
    (var,) = fig.variants
    assert var.claim == TIES_HALF_VARIANT and var.ppa_a == 0.75 and var.diff == -0.25
    assert (var.diff_lo, var.diff_hi) == pytest.approx(
        percentile_interval(boot_half["specialist_map"] - boot_half["specialist_sim"]), abs=1e-12)


def test_decomposition_is_exact_in_counts_on_a_larger_random_frame():
    rng = np.random.default_rng(1)
    rows = [{"seed": s, "group": "g", "identity": f"i{i}", "context": c, "drift": d, "method": f"{c}@{d}",
             "general_sim": rng.random(), "general_map": rng.random(), "specialist_sim": rng.random(),
             "specialist_map": float(rng.choice([1.0, 0.5, rng.random()]))}
            for s in (0, 1) for i in range(8) for c in ("A", "B") for d in (0.0, 0.1, 0.25)]
    fig = figure3(pd.DataFrame(rows), n_boot=50)
    dec = fig.decomposition()
    assert dec["exact"] and dec["n_right_diff"] == sum(t["n_right_diff"] for t in dec["terms"])
    cells = {c.metric: c.n_right for c in fig.cells}
    assert dec["n_right_diff"] == cells["specialist_map"] - cells["general_sim"]


def test_a_missing_value_drops_the_pair_from_every_cell():
    df = _frame()
    judged = df[df["drift"].notna()].reset_index(drop=True)
    judged.loc[0, "general_map"] = np.nan  # i1/A/0 is in pair (A0, B.5) of i1
    fig = figure3(judged, n_boot=20)
    assert {c.n_pairs for c in fig.cells} == {3} and {v.n_pairs for v in fig.verdicts} == {3}


def test_regime_oracle_map_ap_one_share_and_tie_share_of_the_judged_pairs():
    df = _frame()
    spec, gen = regime(df)
    assert spec["encoder"] == "specialist" and spec["oracle_map"] == pytest.approx(0.9) and spec["n_oracle"] == 2
    assert spec["n_queries"] == 8 and spec["ap_one_share"] == 4 / 8
    # judged pairs: i1 (A0 1.0, B.5 1.0) tie, (A.5 0.7, B0 1.0); i2 (A0 1.0, B.5 0.9), (A.5 0.9, B0 0.9) tie
    assert spec["n_pairs"] == 4 and spec["ap_tie_share"] == 0.5
    assert spec["ap_one_share_by_method"] == {"A@0": 1.0, "A@0.5": 0.0, "B@0": 0.5, "B@0.5": 0.5}
    assert gen["oracle_map"] == 0.5 and gen["ap_one_share"] == 0.0 and gen["ap_tie_share"] == 0.0
    no_oracle = regime(df[df["method"] != "oracle"])
    assert no_oracle[0]["oracle_map"] is None
