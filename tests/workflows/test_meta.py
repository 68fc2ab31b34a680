"""Meta-evaluation: PPA (strict, VISTAR; ties-half), tau-b within identity and per-level AUROC against loops
over pairs, scikit-learn and scipy; Spearman/Kendall against scipy, Krippendorff's alpha against a
hand computation (and the ``krippendorff`` package when installed), bootstrap and paired tests, ``fpr meta``."""
from __future__ import annotations

import json
from itertools import combinations

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner
from scipy.stats import kendalltau, spearmanr

import fpr.api as api
from fpr.cli.main import cli
from fpr.errors import InputError, NotFoundError
from fpr.galleries.curate import GallerySpec
from fpr.metrics import agreement as A
from fpr.metrics import correlation as C
from fpr.metrics.summary import resample_indices
from fpr.workflows import meta
from tests.conftest import make_tree


def _per_query(values: dict[str, list[float]], n: int | None = None) -> pd.DataFrame:
    n = n or len(next(iter(values.values())))
    df = pd.DataFrame({"query_id": [f"q{i}" for i in range(n)], "status": "ok", "group": "g",
                       "identity": "i"})
    for k, v in values.items():
        df[k] = v
    return df


def _pairs(rows) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["query_id_a", "query_id_b", "winner"]).assign(n_votes=1)


# --------------------------------------------------------------------------- Krippendorff's alpha

def test_alpha_interval_matches_a_hand_computation():
    # raters x units; values 1,1 | 2,2 | 3,4: D_o = (2 / 1) / 6 = 1/3; over the 6 values sum_{i<j} (vi-vj)^2 = 41,
    # D_e = 2 * 41 / (6 * 5) = 82/30; alpha = 1 - (1/3) / (82/30) = 72/82.
    data = np.array([[1.0, 2.0, 3.0], [1.0, 2.0, 4.0]])
    assert C.krippendorff_alpha_interval(data) == pytest.approx(72 / 82, abs=1e-12)
    # a unit rated once is not pairable and changes nothing
    with_single = np.array([[1.0, 2.0, 3.0, 5.0], [1.0, 2.0, 4.0, np.nan]])
    assert C.krippendorff_alpha_interval(with_single) == pytest.approx(72 / 82, abs=1e-12)
    # perfect agreement is 1
    assert C.krippendorff_alpha_interval(np.array([[1.0, 2, 3], [1.0, 2, 3]])) == pytest.approx(1.0)


def test_alpha_interval_matches_the_krippendorff_package():
    rng = np.random.default_rng(3)
    truth = rng.integers(1, 6, size=40).astype(float)
    data = np.clip(truth + rng.normal(0, 1, size=(3, 40)).round(), 1, 5)
    data[rng.random(data.shape) < 0.2] = np.nan
    ours = C.krippendorff_alpha_interval(data)
    try:
        import krippendorff
    except ImportError:  # pragma: no cover - the package is in the test extra
        pytest.skip("krippendorff not installed")
    assert ours == pytest.approx(krippendorff.alpha(reliability_data=data, level_of_measurement="interval"),
                                 abs=1e-10)


# --------------------------------------------------------------------------- PPA, Spearman, Kendall

def test_ppa_excludes_human_ties_and_is_strict_with_a_ties_half_variant():
    df = _per_query({"m": [0.9, 0.5, 0.5, 0.1]})
    pairs = _pairs([("q0", "q1", "a"),   # metric right
                    ("q1", "q3", "b"),   # metric wrong (0.5 > 0.1)
                    ("q1", "q2", "a"),   # metric tie: wrong (VISTAR: S(A) > S(B)); 1/2 in ppa_ties_half
                    ("q0", "q3", "tie")])  # human tie: excluded
    res = A.agreement(df, ["m"], A.Judgments(pairs, A._empty_ratings()), n_boot=50)
    row = res.rows[0]
    assert row["n_pairs"] == 3 and row["n_metric_ties"] == 1
    assert row["ppa"] == pytest.approx(1 / 3, abs=1e-12)
    assert row["ppa_ties_half"] == pytest.approx((1 + 0 + 0.5) / 3, abs=1e-12)
    assert row["metric_tie_share"] == pytest.approx(1 / 3, abs=1e-12)
    assert res.info["n_pairs_tied_excluded"] == 1
    # tau-b over all 4 judged pairs: x*y = +1, -1, 0, 0 -> C - D = 0
    assert row["kendall_within"] == pytest.approx(0.0, abs=1e-12) and row["n_pairs_all"] == 4
    # lower-better flips the metric's direction
    flipped = A.agreement(df, ["m"], A.Judgments(pairs, A._empty_ratings()), lower_better=["m"], n_boot=50)
    assert flipped.rows[0]["ppa"] == pytest.approx(1 / 3, abs=1e-12)
    assert flipped.rows[0]["ppa_ties_half"] == pytest.approx((0 + 1 + 0.5) / 3, abs=1e-12)


# Independent computations: plain loops over the pairs of queries that share (group, identity).

def independent_pair_stats(df: pd.DataFrame, metric: str, truth: str, lower_better_truth: bool = True) -> dict:
    """Strict PPA, ties-half PPA, metric tie share and tau-b within identity (pooled), by loops over pairs."""
    right = ties = preferred = concordant = discordant = n_pairs = metric_tied = truth_tied = 0
    for _, g in df.groupby(["group", "identity"]):
        recs = list(zip(g[metric].astype(float), g[truth].astype(float)))
        for (ma, ta), (mb, tb) in combinations(recs, 2):
            if not (np.isfinite(ma) and np.isfinite(mb) and np.isfinite(ta) and np.isfinite(tb)):
                continue
            if lower_better_truth:
                ta, tb = -ta, -tb
            n_pairs += 1
            metric_tied += ma == mb
            truth_tied += ta == tb
            if (ma - mb) * (ta - tb) > 0:
                concordant += 1
            elif (ma - mb) * (ta - tb) < 0:
                discordant += 1
            if ta == tb:
                continue
            preferred += 1
            better, worse = (ma, mb) if ta > tb else (mb, ma)
            right += better > worse
            ties += better == worse
    return {"n_pairs": preferred, "ppa": right / preferred, "ppa_ties_half": (right + 0.5 * ties) / preferred,
            "metric_tie_share": ties / preferred, "n_metric_ties": ties, "n_pairs_all": n_pairs,
            "kendall_within": (concordant - discordant) / np.sqrt((n_pairs - metric_tied) * (n_pairs - truth_tied))}


def independent_level_auroc(df: pd.DataFrame, metric: str, truth: str, better: float, worse: float) -> dict:
    """P(S(better) > S(worse)) + P(tie)/2 by loops: over all cross pairs and within (group, identity)."""
    b = df[df[truth].astype(float) == better]
    w = df[df[truth].astype(float) == worse]
    out = {}
    for label, same in (("pooled", lambda x, y: True),
                        ("within", lambda x, y: (x["group"], x["identity"]) == (y["group"], y["identity"]))):
        wins = []
        for _, x in b.iterrows():
            for _, y in w.iterrows():
                if same(x, y) and np.isfinite(float(x[metric])) and np.isfinite(float(y[metric])):
                    wins.append(1.0 if x[metric] > y[metric] else 0.5 if x[metric] == y[metric] else 0.0)
        out[f"auroc_{label}"], out[f"n_pairs_{label}"] = (sum(wins) / len(wins) if wins else float("nan")), len(wins)
    return out


def _tied_world() -> pd.DataFrame:
    """Two groups x three identities; a drift truth with ties; an AP-like metric with many 1.0 ties."""
    rng = np.random.default_rng(7)
    rows = []
    for g in ("zebra", "leopard"):
        for ident in range(3):
            for k, drift in enumerate([0.0, 0.0, 0.1, 0.1, 0.25, 0.5, 1.0]):
                ap = 1.0 if rng.random() < 0.6 - drift / 2 else round(float(rng.uniform(0.2, 1.0)), 1)
                rows.append({"query_id": f"{g}-{ident}-{k}", "status": "ok", "group": g, "identity": f"{g}{ident}",
                             "drift": drift, "ap": ap, "sim": float(rng.normal(1 - drift, 0.3))})
    df = pd.DataFrame(rows)
    df.loc[3, "ap"] = np.nan  # a metric missing on one query drops its pairs
    return df


def test_pair_statistics_equal_loops_over_pairs_with_ties_in_metric_and_truth():
    df = _tied_world()
    assert (df["ap"] == 1.0).sum() >= 10  # ties in the metric, and in the truth (two queries per drift level)
    res = A.agreement(df, ["ap", "sim"], A.truth_judgments(df, "drift"), n_boot=20)
    for row in res.rows:
        want = independent_pair_stats(df, row["metric"], "drift")
        for key, v in want.items():
            assert row[key] == pytest.approx(v, abs=1e-12), (row["metric"], key)
        assert row["ppa_ties_half"] == pytest.approx(row["ppa"] + row["metric_tie_share"] / 2, abs=1e-12)
    assert res.rows[0]["n_metric_ties"] > 0 and res.rows[1]["n_metric_ties"] == 0


def test_kendall_within_one_identity_is_scipys_tau_b():
    df = _tied_world()
    one = df[df["identity"] == "zebra1"].reset_index(drop=True)
    res = A.agreement(one, ["ap"], A.truth_judgments(one, "drift"), n_boot=20)
    ok = one["ap"].notna()
    assert res.rows[0]["kendall_within"] == pytest.approx(
        kendalltau(one["ap"][ok], -one["drift"][ok]).statistic, abs=1e-12)


def test_level_auroc_equals_loops_and_sklearn():
    from sklearn.metrics import roc_auc_score

    df = _tied_world()
    res = A.agreement(df, ["ap", "sim"], A.truth_judgments(df, "drift"), n_boot=20)
    levels = [0.0, 0.1, 0.25, 0.5, 1.0]
    got = {(r["metric"], r["better"], r["worse"]): r for r in res.levels}
    assert set(got) == {(m, a, b) for m in ("ap", "sim") for a, b in zip(levels, levels[1:])}
    for (metric, better, worse), row in got.items():
        want = independent_level_auroc(df, metric, "drift", better, worse)
        for key, v in want.items():
            assert row[key] == pytest.approx(v, abs=1e-12, nan_ok=True), (metric, better, key)
        sub = df[df["drift"].isin([better, worse]) & df[metric].notna()]
        assert row["auroc_pooled"] == pytest.approx(
            roc_auc_score(sub["drift"] == better, sub[metric]), abs=1e-12)
        assert row["auroc_pooled_lo"] <= row["auroc_pooled"] <= row["auroc_pooled_hi"]
    # the intervals are the cluster bootstrap: every (copy of a better, copy of a worse query) pair counts
    n_boot = 40
    res = A.agreement(df, ["ap"], A.truth_judgments(df, "drift"), n_boot=n_boot, seed=3)
    idx = resample_indices(len(df), seed=3, key=("meta",), n_boot=n_boot)
    ap, drift = df["ap"].to_numpy(float), df["drift"].to_numpy(float)
    ident = (df["group"] + df["identity"]).to_numpy()
    for row in res.levels:
        b = np.flatnonzero((drift == row["better"]) & np.isfinite(ap))
        w = np.flatnonzero((drift == row["worse"]) & np.isfinite(ap))
        for label, same in (("pooled", lambda i, j: True), ("within", lambda i, j: ident[i] == ident[j])):
            boots = []
            for sample in idx:
                copies = np.bincount(sample, minlength=len(df))
                num = den = 0.0
                for i in b:
                    for j in w:
                        if same(i, j):
                            wt = copies[i] * copies[j]
                            num += wt * (1.0 if ap[i] > ap[j] else 0.5 if ap[i] == ap[j] else 0.0)
                            den += wt
                boots.append(num / den if den else np.nan)
            assert (row[f"auroc_{label}_lo"], row[f"auroc_{label}_hi"]) == pytest.approx(
                tuple(np.nanquantile(boots, [0.025, 0.975])), abs=1e-12), (row["better"], label)
    # without --pair-within keys, "within" is every pair: the pooled figures
    res = A.agreement(df, ["sim"], A.truth_judgments(df, "drift", within=()), n_boot=20)
    assert all(r["auroc_within"] == r["auroc_pooled"] and r["n_pairs_within"] == r["n_pairs_pooled"]
               for r in res.levels)
    # a continuous judge (more than MAX_LEVELS distinct values) has no per-level rows
    cont = df.assign(drift=np.linspace(0, 1, len(df)))
    assert A.agreement(cont, ["sim"], A.truth_judgments(cont, "drift"), n_boot=5).levels == []


def test_kendall_within_bootstrap_is_the_cluster_bootstrap():
    df = _tied_world()
    n_boot = 30
    res = A.agreement(df, ["ap"], A.truth_judgments(df, "drift"), n_boot=n_boot, seed=4)
    idx = resample_indices(len(df), seed=4, key=("meta",), n_boot=n_boot)
    pos = {q: i for i, q in enumerate(df["query_id"])}
    pairs = [(pos[a], pos[b]) for _, g in df.groupby(["group", "identity"]) for a, b in combinations(g["query_id"], 2)]
    ap, drift = df["ap"].to_numpy(float), df["drift"].to_numpy(float)
    taus, ppas = [], []
    for sample in idx:
        copies = np.bincount(sample, minlength=len(df))
        cd = n = tx = ty = right = pref = 0.0
        for i, j in pairs:
            if not (np.isfinite(ap[i]) and np.isfinite(ap[j])):
                continue
            w = copies[i] * copies[j]
            x, y = np.sign(ap[i] - ap[j]), np.sign(drift[j] - drift[i])
            cd, n, tx, ty = cd + w * x * y, n + w, tx + w * (x == 0), ty + w * (y == 0)
            right, pref = right + w * (x * y > 0), pref + w * (y != 0)
        taus.append(cd / np.sqrt((n - tx) * (n - ty)) if (n - tx) * (n - ty) > 0 else np.nan)
        ppas.append(right / pref if pref else np.nan)
    row = res.rows[0]
    assert (row["kendall_within_lo"], row["kendall_within_hi"]) == pytest.approx(
        tuple(np.nanquantile(taus, [0.025, 0.975])), abs=1e-12)
    assert (row["ppa_lo"], row["ppa_hi"]) == pytest.approx(tuple(np.nanquantile(ppas, [0.025, 0.975])), abs=1e-12)


def test_pair_votes_are_pooled_in_either_order():
    raw = pd.DataFrame({"query_id_a": ["q0", "q1", "q0", "q2"], "query_id_b": ["q1", "q0", "q1", "q3"],
                        "winner": ["a", "a", "a", "tie"]})
    agg = meta._aggregate_pairs(raw, "x").set_index(["query_id_a", "query_id_b"])
    assert agg.loc[("q0", "q1"), "winner"] == "a" and agg.loc[("q0", "q1"), "n_votes"] == 3  # +1 -1 +1
    assert agg.loc[("q2", "q3"), "winner"] == "tie"
    with pytest.raises(InputError, match="winner"):
        meta._aggregate_pairs(raw.assign(winner=["a", "left", "a", "b"]), "x")


def test_spearman_kendall_match_scipy_and_the_bootstrap_is_the_seeded_one():
    rng = np.random.default_rng(0)
    m = rng.integers(0, 6, size=30).astype(float)  # many ties
    rating = m + rng.normal(0, 2, size=30).round()
    df = _per_query({"m": m})
    ratings = pd.DataFrame({"query_id": df["query_id"], "rater": "r", "rating": rating})
    res = A.agreement(df, ["m"], A.Judgments(A._empty_pairs(), ratings), n_boot=200, seed=5)
    row = res.rows[0]
    assert row["spearman"] == pytest.approx(spearmanr(m, rating).statistic, abs=1e-12)
    assert row["kendall"] == pytest.approx(kendalltau(m, rating).statistic, abs=1e-12)
    idx = resample_indices(30, seed=5, key=("meta-rated",), n_boot=200)
    boots = np.array([spearmanr(m[i], rating[i]).statistic for i in idx])
    lo, hi = np.nanquantile(boots, [0.025, 0.975])
    assert (row["spearman_lo"], row["spearman_hi"]) == pytest.approx((lo, hi), abs=1e-12)


def test_ppa_bootstrap_is_a_cluster_bootstrap_over_queries():
    rng = np.random.default_rng(1)
    n = 12
    m = rng.normal(size=n)
    truth = m + rng.normal(0, 1, size=n)
    df = _per_query({"m": m})
    pairs = _pairs([(f"q{i}", f"q{j}", "a" if truth[i] > truth[j] else "b") for i, j in combinations(range(n), 2)])
    res = A.agreement(df, ["m"], A.Judgments(pairs, A._empty_ratings()), n_boot=100, seed=2)
    # direct: expand each resample into copies and count every (copy of a, copy of b) pair
    idx = resample_indices(n, seed=2, key=("meta",), n_boot=100)
    boots = []
    for sample in idx:
        copies = np.bincount(sample, minlength=n)
        num = den = 0.0
        for i, j in combinations(range(n), 2):
            w = copies[i] * copies[j]
            right = (m[i] > m[j]) == (truth[i] > truth[j])
            num, den = num + w * right, den + w
        boots.append(num / den if den else np.nan)
    lo, hi = np.nanquantile(boots, [0.025, 0.975])
    assert (res.rows[0]["ppa_lo"], res.rows[0]["ppa_hi"]) == pytest.approx((lo, hi), abs=1e-12)


def test_alpha_metric_as_rater_and_among_raters():
    r1 = np.array([1.0, 2, 3, 4, 5])
    r2 = np.array([1.0, 3, 3, 4, 4])
    df = _per_query({"m": [0.0, 0.25, 0.5, 0.75, 1.0]})  # rescaled onto the ratings' range: 1..5 = r1
    ratings = pd.concat([pd.DataFrame({"query_id": df["query_id"], "rater": name, "rating": r})
                         for name, r in (("a", r1), ("b", r2))])
    res = A.agreement(df, ["m"], A.Judgments(A._empty_pairs(), ratings), n_boot=50)
    assert res.rows[0]["alpha"] == pytest.approx(C.krippendorff_alpha_interval(np.vstack([r1, r2, r1])))
    assert res.rows[1]["metric"] == "(raters)"
    assert res.rows[1]["alpha"] == pytest.approx(C.krippendorff_alpha_interval(np.vstack([r1, r2])))


def test_mcnemar_and_paired_comparison():
    assert C.mcnemar_exact(5, 0) == pytest.approx(2 * 0.5 ** 5)
    assert C.mcnemar_exact(0, 0) == 1.0
    df = _per_query({"good": [4.0, 3, 2, 1], "bad": [1.0, 2, 3, 4]})
    pairs = _pairs([(f"q{i}", f"q{j}", "a") for i, j in combinations(range(4), 2)])
    ratings = pd.DataFrame({"query_id": df["query_id"], "rater": "r", "rating": [4.0, 3, 2, 1]})
    res = A.agreement(df, ["good", "bad"], A.Judgments(pairs, ratings), compare=("good", "bad"), n_boot=100)
    c = res.comparison
    assert (c["a_right_b_wrong"], c["a_wrong_b_right"]) == (6, 0)
    assert c["mcnemar_p"] == pytest.approx(2 * 0.5 ** 6)
    assert c["ppa_diff"] == pytest.approx(1.0) and c["spearman_diff"] == pytest.approx(2.0)
    # the PPA difference is of strict PPA: a metric tying everything scores 0, not 1/2
    flat = df.assign(bad=1.0)
    c = A.agreement(flat, ["good", "bad"], A.Judgments(pairs, ratings), compare=("good", "bad"), n_boot=20).comparison
    assert c["ppa_diff"] == pytest.approx(1.0)


def test_unknown_judged_queries_are_one_line_errors():
    df = _per_query({"m": [1.0, 2.0]})
    with pytest.raises(NotFoundError, match="not evaluated queries"):
        A.agreement(df, ["m"], A.Judgments(_pairs([("q0", "zz", "a")]), A._empty_ratings()))


# --------------------------------------------------------------------------- fpr meta end to end

@pytest.fixture
def drift_run(tmp_path, workspace):
    tree = make_tree(tmp_path / "tree", identities=2, images=4, groups=("cats",))
    api.import_gallery("g", api.read_folder(tree), GallerySpec(references_per_identity=1), workspace=workspace)
    api.build_index("g", "pixels-16", workspace=workspace)
    items = [it for it in api.gallery_items("g", workspace=workspace) if it.role == "gallery"]
    rows = []
    for k, it in enumerate(items):
        for drift, other in ((0.0, it), (1.0, items[(k + 3) % len(items)])):
            rows.append({"query_id": f"{it.item_id}-{drift}", "path": other.path, "identity": it.identity,
                         "group": it.group, "method": f"d{drift}", "drift": drift})
    api.run_query("g-pixels-16", pd.DataFrame(rows), run="r", workspace=workspace)
    return workspace


def test_fpr_meta_truth_and_human_files(tmp_path, drift_run):
    runner = CliRunner()
    base = ["--workspace", str(drift_run), "meta", "--run", "r"]
    r = runner.invoke(cli, base + ["--truth", "drift", "--format", "json", "--n-boot", "100", "--compare", "ap,sim",
                                   "--plot", str(tmp_path / "meta.png")])
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    res = api.load_run("r", workspace=drift_run)
    pq = res.per_query
    rows = {row["metric"]: row for row in out["rows"]}
    assert set(rows) == {"ap", "sim", "cmc1", "cmc5", "cmc10", "inp", "top_margin", "ap10", "r_precision"}
    drift = pq["drift"].astype(float).to_numpy()
    assert rows["sim"]["spearman"] == pytest.approx(spearmanr(pq["sim"], -drift).statistic, abs=1e-9)
    # pairs: all pairs within (group, identity) with different drift; higher sim on the lower drift = right
    right = total = 0
    for _, g in pq.groupby("identity"):
        for (_, a), (_, b) in combinations(g.iterrows(), 2):
            if a["drift"] != b["drift"]:
                total += 1
                better, worse = (a, b) if float(a["drift"]) < float(b["drift"]) else (b, a)
                right += 1.0 if better["sim"] > worse["sim"] else 0.0
    assert rows["sim"]["n_pairs"] == total and rows["sim"]["ppa"] == pytest.approx(right / total, abs=1e-12)
    for metric in ("ap", "sim", "inp"):
        for key, v in independent_pair_stats(pq[pq["status"] == "ok"], metric, "drift").items():
            assert rows[metric][key] == pytest.approx(v, abs=1e-12), (metric, key)
    assert [(r["better"], r["worse"]) for r in out["levels"] if r["metric"] == "ap"] == [(0.0, 1.0)]
    assert out["comparison"]["metric_a"] == "ap" and (tmp_path / "meta.png").stat().st_size > 0

    # the same judgments as a human ratings file from two raters give the same Spearman
    ratings = pd.concat([pd.DataFrame({"query_id": pq["query_id"], "rating": -drift, "rater": name})
                         for name in ("x", "y")])
    ratings.to_csv(tmp_path / "ratings.csv", index=False)
    r = runner.invoke(cli, base + ["--human", str(tmp_path / "ratings.csv"), "--format", "csv", "--n-boot", "50"])
    assert r.exit_code == 0, r.output
    table = pd.read_csv(pd.io.common.StringIO(r.output)).set_index("metric")
    assert table.loc["sim", "spearman"] == pytest.approx(rows["sim"]["spearman"], abs=1e-9)
    assert table.loc["(raters)", "alpha"] == pytest.approx(1.0)

    # --methods judges only those methods' queries: here one method, so no pair has two drift levels
    r = runner.invoke(cli, base + ["--truth", "drift", "--format", "json", "--n-boot", "20", "--methods", "d0.0",
                                   "--metrics", "sim"])
    assert r.exit_code == 0, r.output
    one = json.loads(r.output)
    assert one["rows"][0]["n_pairs"] == 0 and one["rows"][0]["ppa"] is None
    assert one["rows"][0]["n_rated"] == int(((pq["method"] == "d0.0") & (pq["status"] == "ok")).sum())
    assert one["info"]["methods"] == ["d0.0"] and one["levels"] == []
    r = runner.invoke(cli, base + ["--truth", "drift", "--methods", "d0.0,nope"])
    assert r.exit_code == 2 and "nope" in r.output and "d1.0" in r.output

    # a file with neither layout, and both --human and --truth, are one-line errors
    (tmp_path / "bad.csv").write_text("a,b\n1,2\n")
    r = runner.invoke(cli, base + ["--human", str(tmp_path / "bad.csv")])
    assert r.exit_code == 2 and "query_id_a" in r.output
    r = runner.invoke(cli, base + ["--human", str(tmp_path / "bad.csv"), "--truth", "drift"])
    assert r.exit_code == 2 and "exactly one" in r.output
