"""Headroom: AP = 1 share, the AP tie share of within-identity pairs, the oracle's share, the warning line."""
from __future__ import annotations

import math
from itertools import combinations

import pandas as pd

from fpr.metrics.headroom import SATURATED, ap_one_share, headroom, headroom_warnings, tie_pairs


def _rows() -> pd.DataFrame:
    # method a: identity x -> APs 1, 1, 0.5 (one tie of 3 pairs); identity y -> 1, 0.25 (no tie); one skipped query
    # method b: identity x -> 0.5, 0.5 (a tie), y -> 0.2 (no pair); oracle: 1, 1, 0.9 over x, x, y
    return pd.DataFrame([
        ("a", "g", "x", 1.0, "ok"), ("a", "g", "x", 1.0, "ok"), ("a", "g", "x", 0.5, "ok"),
        ("a", "g", "y", 1.0, "ok"), ("a", "g", "y", 0.25, "ok"), ("a", "g", "y", float("nan"), "unreadable"),
        ("b", "g", "x", 0.5, "ok"), ("b", "g", "x", 0.5, "ok"), ("b", "g", "y", 0.2, "ok"),
        ("b", "h", "x", 0.5, "ok"),  # same identity name in another group: no pair with g/x
        ("oracle", "g", "x", 1.0, "ok"), ("oracle", "g", "x", 1.0, "ok"), ("oracle", "g", "y", 0.9, "ok"),
    ], columns=["method", "group", "identity", "ap", "status"])


def _loop(df: pd.DataFrame, method: str) -> tuple[int, int]:
    ok = df[(df["method"] == method) & (df["status"] == "ok")]
    n = t = 0
    for (_, r), (_, s) in combinations(ok.iterrows(), 2):
        if (r["group"], r["identity"]) == (s["group"], s["identity"]):
            n += 1
            t += r["ap"] == s["ap"]
    return n, t


def test_shares_and_tie_pairs_against_hand_counts_and_loops():
    df = _rows()
    assert ap_one_share(df) == {"oracle": 2 / 3, "a": 3 / 5, "b": 0.0}
    assert tie_pairs(df[df["method"] == "a"]) == (4, 1) == _loop(df, "a")
    assert tie_pairs(df[df["method"] == "b"]) == (1, 1) == _loop(df, "b")
    rows = {r["method"]: r for r in headroom(df, encoder="enc")}
    assert rows["a"] == {"encoder": "enc", "method": "a", "n_queries": 5, "ap_one_share": 0.6, "n_pairs": 4,
                         "ap_tie_share": 0.25, "oracle_ap_one_share": 2 / 3}
    assert rows["b"]["ap_tie_share"] == 1.0 and rows["b"]["n_queries"] == 4


def test_pairs_stay_within_a_seed_and_an_encoder():
    df = pd.concat([_rows().assign(seed=0, encoder="e1"), _rows().assign(seed=1, encoder="e1"),
                    _rows().assign(seed=0, encoder="e2", ap=lambda d: d["ap"] * 0.5)], ignore_index=True)
    rows = {(r["encoder"], r["method"]): r for r in headroom(df)}
    assert rows[("e1", "a")]["n_pairs"] == 8 and rows[("e1", "a")]["ap_tie_share"] == 0.25
    assert rows[("e2", "a")]["ap_one_share"] == 0.0 and rows[("e2", "oracle")]["ap_one_share"] == 0.0


def test_a_method_without_pairs_has_no_tie_share():
    df = pd.DataFrame({"method": ["m", "m"], "group": "g", "identity": ["x", "y"], "ap": [1.0, 1.0]})
    (row,) = headroom(df)
    assert row["n_pairs"] == 0 and math.isnan(row["ap_tie_share"]) and row["oracle_ap_one_share"] is None


def test_the_warning_names_saturated_methods_and_what_to_do_and_never_the_oracle():
    rows = headroom(_rows(), encoder="enc")
    (line,) = headroom_warnings(rows)
    assert SATURATED == 0.5
    assert line.startswith("headroom under enc: AP is exactly 1 for at least 50% of the queries of a (60%) "
                           "(oracle 67%): this gallery cannot tell apart methods at or above it; use a harder gallery")
    assert "--per-identity" in line and "--impostors" in line and "--world paper" in line and "docs/reports.md" in line
    assert headroom_warnings(rows, threshold=0.61) == []
    assert headroom_warnings([r for r in rows if r["method"] == "oracle"], threshold=0.0) == []
