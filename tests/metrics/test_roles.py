"""Role-weighted scores, aspect and Core/Hard scores, the robustness drop: hand-computed and the paper's Table 3."""
import importlib.util
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fpr.metrics.roles import aspect_scores, robustness_drop, role_scores, split_scores
from fpr.scorers.vistar.roles import read_mask

ROOT = Path(__file__).resolve().parents[2]


def _benchmark():
    """VISTAR Table 3 is typed once, in the benchmark that reproduces it."""
    spec = importlib.util.spec_from_file_location("vistar_roles_bench", ROOT / "benchmarks" / "vistar_roles.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


ASPECTS, TABLE3 = _benchmark().ASPECTS, _benchmark().TABLE3  # Table 3 (0-100): 9 aspects, Core, Hard, Drop (%)


def table3_aspects():
    return pd.DataFrame([{"model": g, "aspect": a, "score": v} for g, (scores, *_r) in TABLE3.items()
                         for a, v in zip(ASPECTS, scores)])


@pytest.mark.parametrize("model", list(TABLE3))
def test_core_is_the_mean_of_the_nine_aspects_and_drop_matches_table3(model):
    scores, core, hard, drop = TABLE3[model]
    aspects = pd.DataFrame([{"model": model, "split": "core", "aspect": a, "score": s, "n": 1, "n_missing": 0}
                            for a, s in zip(ASPECTS, scores)]
                           + [{"model": model, "split": "hard", "aspect": a, "score": hard, "n": 1, "n_missing": 0}
                              for a in ASPECTS])
    out = split_scores(aspects).iloc[0]
    assert abs(out["core"] - core) < 0.05 + 1e-9
    assert out["n_aspects"] == 9
    assert round(100 * robustness_drop(core, hard), 1) == drop


def test_robustness_drop_edges():
    assert robustness_drop(0.8, 0.6) == pytest.approx(0.25)
    assert math.isnan(robustness_drop(0.0, 0.1))
    assert math.isnan(robustness_drop(0.5, float("nan")))
    assert robustness_drop(0.5, 0.6) == pytest.approx(-0.2)  # Hard better than Core: a negative drop


def test_roles_reorder_table3_models():
    mask = read_mask()
    rs = role_scores(table3_aspects(), mask).set_index(["role", "model"])
    # by hand from Table 3 and the packaged mask:
    # GD (TR, SF, GC, MA): SD 3.5 (89.5+89.1+86.2+87.0)/4 = 87.95, Imagen 3 (92.1+88.5+81.0+86.4)/4 = 87.0
    assert rs.loc[("GD", "SD 3.5"), "role_score"] == pytest.approx(87.95)
    assert rs.loc[("GD", "Imagen 3"), "role_score"] == pytest.approx(87.0)
    assert rs.loc[("GD", "SD 3.5"), "rank"] == 1
    # GA (SF, CPA, CSE): Imagen 3 (88.5+88.1+90.3)/3 = 88.967 beats SD 3.5 (89.1+87.5+88.6)/3 = 88.4
    assert rs.loc[("GA", "Imagen 3"), "role_score"] == pytest.approx(266.9 / 3)
    assert rs.loc[("GA", "SD 3.5"), "role_score"] == pytest.approx(88.4)
    assert rs.loc[("GA", "Imagen 3"), "rank"] == 1 and rs.loc[("GA", "SD 3.5"), "rank"] == 2
    # CH (CUL, TR, SF): Imagen 3 267.8/3 > SD 3.5 265.4/3 > HiDream 261.1/3
    assert [rs.loc[("CH", g), "rank"] for g in ("Imagen 3", "SD 3.5", "HiDream")] == [1, 2, 3]
    assert (rs["n_measured"] == rs["n_relevant"]).all()
    assert (rs["role_score"] == rs["role_score_measured"]).all()


def test_missing_relevant_aspect_is_nan_strict_and_measured_over_the_rest():
    mask = pd.DataFrame({"role": ["X"] * 3 + ["Y"] * 3, "aspect": ["TR", "LI", "GC"] * 2,
                         "relevant": [1, 1, 0, 0, 0, 1]})
    tensor = pd.DataFrame([
        ("X", "TR", "a", "p1", "core", 0.8), ("Y", "TR", "a", "p2", "core", 0.4),   # TR pooled over roles: 0.6
        ("X", "LI", "a", "p3", "core", 1.0), ("X", "LI", "a", "p4", "core", np.nan),  # 1.0, one missing
        ("Y", "GC", "a", "p5", "core", 0.0),
        ("X", "TR", "b", "p1", "core", 0.9), ("X", "LI", "b", "p3", "core", np.nan),  # LI never measured for b
        ("X", "TR", "b", "h1", "hard", 0.1),                                           # hard: not a Core aspect
    ], columns=["role", "aspect", "model", "prompt_id", "split", "score"])
    asp = aspect_scores(tensor)
    core = asp[asp["split"] == "core"]
    a = core.set_index(["aspect", "model"])
    assert a.loc[("TR", "a"), "score"] == pytest.approx(0.6)
    assert (a.loc[("LI", "a"), "n"], a.loc[("LI", "a"), "n_missing"]) == (1, 1)
    assert math.isnan(a.loc[("LI", "b"), "score"])
    rs = role_scores(core, mask).set_index(["role", "model"])
    assert rs.loc[("X", "a"), "role_score"] == pytest.approx(0.8)  # (0.6 + 1.0) / 2, GC not relevant to X
    assert rs.loc[("Y", "a"), "role_score"] == pytest.approx(0.0)
    assert math.isnan(rs.loc[("X", "b"), "role_score"])
    assert rs.loc[("X", "b"), "role_score_measured"] == pytest.approx(0.9)
    assert (rs.loc[("X", "b"), "n_relevant"], rs.loc[("X", "b"), "n_measured"]) == (2, 1)
    assert rs.loc[("X", "a"), "rank"] == 1 and pd.isna(rs.loc[("X", "b"), "rank"])
    assert [rs.loc[("X", g), "rank_measured"] for g in "ab"] == [2, 1]
    assert math.isnan(rs.loc[("Y", "b"), "role_score_measured"]) and rs.loc[("Y", "b"), "n_measured"] == 0


def test_split_scores_use_aspects_measured_on_both_splits():
    tensor = pd.DataFrame([
        ("X", "TR", "a", "p1", "core", 0.8), ("X", "LI", "a", "p2", "core", 0.6),
        ("Y", "TR", "a", "p3", "core", 0.4),                                      # TR core = (0.8+0.4)/2 = 0.6
        ("X", "TR", "a", "h1", "hard", 0.3),                                      # only TR on hard
        ("X", "TR", "b", "p1", "core", 0.5),                                      # no hard prompts for b
    ], columns=["role", "aspect", "model", "prompt_id", "split", "score"])
    a = aspect_scores(tensor)
    s = split_scores(a).set_index("model")
    assert s.loc["a", "core"] == pytest.approx(0.6) and s.loc["a", "hard"] == pytest.approx(0.3)
    assert s.loc["a", "drop"] == pytest.approx(0.5) and s.loc["a", "n_aspects"] == 1
    assert s.loc["b", "core"] == pytest.approx(0.5) and math.isnan(s.loc["b", "drop"])
