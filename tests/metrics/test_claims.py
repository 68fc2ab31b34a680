"""The two claims' verdicts: cross-context pairs, the paired PPA difference and its bootstrap, hand-computed."""
from __future__ import annotations

import numpy as np
import pandas as pd

from fpr.metrics.claims import (ALL_PAIRS, CROSS_CONTEXT, claim_verdicts, judged_pairs, paired_ppa_difference,
                                two_by_two, verdict_of)
from fpr.metrics.pair_bootstrap import percentile_interval, resample_counts
from fpr.metrics.summary import resample_indices


def _frame(context: bool = True) -> pd.DataFrame:
    df = pd.DataFrame({"seed": 0, "group": "zebra", "identity": "z1", "query_id": ["q0", "q1", "q2", "q3"],
                       "drift": [0.0, 0.1, 0.0, 0.1]})
    if context:
        df["context"] = ["A", "A", "B", "B"]
    return df


def test_cross_context_pairs_are_an_identity_s_queries_of_other_context_and_other_truth():
    p = judged_pairs(_frame())
    # q0-q1 share context A, q0-q2 share drift, q1-q3 share drift, q2-q3 share context B
    assert sorted(zip(p.a.tolist(), p.b.tolist())) == [(0, 3), (1, 2)]
    assert p.sign.tolist() == [1.0, -1.0]  # lower drift is better: q0 beats q3, q2 beats q1
    assert p.basis == CROSS_CONTEXT


def test_without_a_context_column_every_pair_of_an_identity_counts_and_says_so():
    p = judged_pairs(_frame(context=False))
    assert sorted(zip(p.a.tolist(), p.b.tolist())) == [(0, 1), (0, 3), (1, 2), (2, 3)]
    assert p.basis == ALL_PAIRS


def test_pairs_never_cross_identities_or_seeds():
    df = pd.concat([_frame(False), _frame(False).assign(identity="z2", query_id=lambda d: d.query_id + "b"),
                    _frame(False).assign(seed=1, query_id=lambda d: d.query_id + "s")], ignore_index=True)
    p = judged_pairs(df)
    assert len(p.a) == 12 and (p.a // 4 == p.b // 4).all()


def test_paired_ppa_difference_values_and_bootstrap_against_a_direct_loop():
    p = judged_pairs(_frame(context=False))  # pairs (0,1)+ (0,3)+ (1,2)- (2,3)+
    x = np.array([0.9, 0.5, 0.8, 0.4])  # right on all four
    y = np.array([0.9, 0.9, 0.8, 0.4])  # (0,1) tie: wrong (strict); (0,3) right; (1,2) wrong; (2,3) right
    counts = resample_counts(resample_indices(4, seed=3, key=("t",), n_boot=300), 4)
    n, pa, pb, d, lo, hi = paired_ppa_difference(x, y, p, counts)
    assert (n, pa, pb, d) == (4, 1.0, 0.5, 0.5)
    right_x = np.array([1, 1, 1, 1.0])
    order = np.argsort(p.a * 10 + p.b)
    a, b = p.a[order], p.b[order]
    right_y = np.array([0, 1, 0, 1.0])
    diffs = []
    for c in counts:  # a pair counts copies(a) * copies(b) times
        w = c[a] * c[b]
        diffs.append(np.nan if w.sum() == 0 else (w @ right_x - w @ right_y) / w.sum())
    assert np.allclose((lo, hi), percentile_interval(np.array(diffs)))


def test_verdict_is_the_interval_s_side_of_zero():
    assert verdict_of(0.01, 0.2) == "supports"
    assert verdict_of(-0.3, -0.01) == "contradicts"
    assert verdict_of(-0.1, 0.1) == "inconclusive"
    assert verdict_of(0.0, 0.2) == "inconclusive"  # touching 0 is not above it
    assert verdict_of(float("nan"), 0.2) == "inconclusive"


def _world(n_ids: int, rng: np.random.Generator) -> pd.DataFrame:
    rows = []
    for i in range(n_ids):
        for k, drift in enumerate([0.0, 0.1, 0.25, 0.5, 1.0]):
            rows.append({"seed": 0, "group": "g", "identity": f"i{i}", "query_id": f"{i}/{k}", "drift": drift,
                         "method": f"m{k}", "specialist_map": 1.0 - drift,
                         "specialist_sim": rng.random(), "general_sim": rng.random(), "general_map": rng.random()})
    return pd.DataFrame(rows)


def test_a_metric_ordering_by_truth_supports_both_claims_and_its_reverse_contradicts():
    df = _world(30, np.random.default_rng(0))
    v = claim_verdicts(df, n_boot=200)
    assert [x.verdict for x in v] == ["supports", "supports"]
    assert v[0].ppa_a == 1.0 and v[0].n_pairs == 30 * 10
    rev = df.assign(specialist_map=df["drift"])  # higher for more drift: always wrong
    assert [x.verdict for x in claim_verdicts(rev, n_boot=200)] == ["contradicts", "contradicts"]


def test_two_by_two_means_and_ap1_share():
    df = pd.DataFrame({"seed": 0, "method": ["a", "a", "b"], "general_sim": [0.8, 0.6, 0.5],
                       "general_map": [0.2, 0.4, 0.1], "specialist_sim": [0.9, 0.7, 0.3],
                       "specialist_map": [1.0, 0.5, 1.0]})
    t = two_by_two(df).set_index("method")
    assert np.isclose(t.loc["a", "general_sim"], 0.7) and np.isclose(t.loc["a", "specialist_map"], 0.75)
    assert t.loc["a", "specialist_ap1_share"] == 0.5 and t.loc["b", "specialist_ap1_share"] == 1.0
    assert t.loc["a", "n"] == 2


def test_claims_frame_joins_the_two_runs_and_carries_the_context_into_cross_context_verdicts():
    """A world with a ``context`` column (the contexts x drift world): the verdicts use cross-context pairs only."""
    from fpr.workflows.meta import claims_frame, encoder_claims

    rows = []
    for i in range(12):
        for k, (ctx, drift) in enumerate([("new-scene", 0.0), ("new-scene", 0.5), ("ref-pose", 1.0), ("ref-pose", 0.0)]):
            rows.append({"query_id": f"{i}/{k}", "method": f"{ctx}@{drift:g}", "group": "g", "identity": f"i{i}",
                         "drift": drift, "context": ctx, "status": "ok", "ap": 1.0 - drift + 0.01 * (k == 3),
                         "sim": 0.5})
    spec = pd.DataFrame(rows)
    gen = spec[["query_id", "status"]].assign(ap=0.3, sim=np.linspace(0, 1, len(spec)))
    frame = claims_frame(spec, gen, seed=4)
    assert frame["query_id"].str.startswith("4:").all() and set(frame["seed"]) == {4}
    assert list(frame.columns[-4:]) == ["specialist_map", "specialist_sim", "general_map", "general_sim"]
    res = encoder_claims(frame, n_boot=100)
    assert res.info["pairs"] == CROSS_CONTEXT
    # per identity: new-scene {0, 0.5} x ref-pose {1, 0}, drift differing: (0,1), (0.5,1), (0.5,0) -> 3 pairs
    assert all(v["n_pairs"] == 12 * 3 for v in res.verdicts)
    assert res.verdicts[0]["ppa_a"] == 1.0  # specialist AP orders all three right
