"""fpr plan's statistics (fpr.metrics.power): the batch Wilcoxon equals scipy's per sample, the planned size on a
normal pilot matches the analytic normal approximation, the size moves the right way with difference and power,
and the pilot's pairing is fpr compare's."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy.stats import norm, wilcoxon

from fpr.errors import InputError
from fpr.metrics import power as pw
from fpr.metrics.summary import paired_comparison


@pytest.mark.parametrize("n", [6, 13, 14, 40, 50, 51, 120])
@pytest.mark.parametrize("ties", [False, True])
def test_batch_wilcoxon_p_values_equal_scipy_per_row(n, ties):
    rng = np.random.default_rng(n)
    d = rng.normal(0.03, 0.1, (4 if n <= 13 and ties else 12, n))  # scipy's permutation test is slow: fewer rows
    if ties:  # ties and zero differences: scipy's permutation test (n <= 13) or the normal approximation
        d = np.round(d, 1)
    want = [wilcoxon(r, zero_method="wilcox").pvalue if np.any(r != 0) else np.nan for r in d]
    np.testing.assert_allclose(pw.wilcoxon_pvalues(d), want, rtol=1e-12, atol=0)


def _normal_pilot(sd: float, n: int, seed: int) -> pw.Pilot:
    """A pilot of n identities with one prompt pair each (pairing per prompt, icc 0): d ~ N(0.05, sd)."""
    d = np.random.default_rng(seed).normal(0.0, sd, n)
    d = (d - d.mean()) / d.std(ddof=0) * sd + 0.05  # exactly the stated mean and SD (plug-in)
    return pw.Pilot("prompt", (), (), tuple(np.array([x]) for x in d))


def test_planned_size_on_a_normal_pilot_matches_the_analytic_wilcoxon_approximation():
    # n = ((z_{1-a/2} + z_power) sd / delta)^2 / (3/pi): the paired-t size over the signed-rank test's
    # asymptotic relative efficiency for normal data (Lehmann); sd 0.2, delta 0.05, power 0.8 -> 131.5
    pilot = _normal_pilot(0.2, 4000, seed=3)
    analytic = ((norm.ppf(0.975) + norm.ppf(0.8)) * 0.2 / 0.05) ** 2 / (3 / np.pi)
    out = pw.plan_from_pilot(pilot, power=0.8, per_identity=(1,))
    n = out["designs"][0]["identities"]
    assert abs(n - analytic) / analytic < 0.1, (n, analytic)
    assert out["designs"][0]["power"] >= 0.8
    # interval width of fpr compare's interval: 2 z sd / sqrt(n)
    assert out["designs"][0]["interval_width"] == pytest.approx(2 * norm.ppf(0.975) * 0.2 / np.sqrt(n), rel=0.03)
    # the same from stated assumptions (no pilot): the normal model itself
    told = pw.assumed_power(sd=0.2, icc=0.0, difference=0.05, power=0.8, per_identity=(1,))
    assert abs(told["designs"][0]["identities"] - analytic) / analytic < 0.1


def test_planned_size_falls_with_the_difference_and_rises_with_the_power():
    size = {(d, p): pw.assumed_power(sd=0.2, icc=0.2, difference=d, power=p, per_identity=(4,), n_sim=400)
            ["designs"][0]["identities"] for d in (0.03, 0.06) for p in (0.7, 0.9)}
    assert size[(0.06, 0.7)] < size[(0.03, 0.7)] and size[(0.06, 0.9)] < size[(0.03, 0.9)]
    assert size[(0.03, 0.7)] < size[(0.03, 0.9)] and size[(0.06, 0.7)] < size[(0.06, 0.9)]
    # halving the difference needs about four times the identities
    assert 3.0 < size[(0.03, 0.9)] / size[(0.06, 0.9)] < 5.0


def test_correlation_within_identity_raises_the_false_alarm_of_per_prompt_pairs():
    low = pw.assumed_power(sd=0.2, icc=0.0, difference=0.05, per_identity=(5,), n_sim=400)["designs"][0]
    high = pw.assumed_power(sd=0.2, icc=0.5, difference=0.05, per_identity=(5,), n_sim=400)["designs"][0]
    assert low["false_alarm"] < 0.08 and high["false_alarm"] > 0.2  # the test treats correlated pairs as independent
    one = pw.assumed_power(sd=0.2, icc=0.5, difference=0.05, per_identity=(5,), pairing="identity",
                           n_sim=400)["designs"][0]
    assert one["false_alarm"] < 0.1 < 0.2 < high["false_alarm"]  # one pair per identity: independent pairs


def _frame() -> pd.DataFrame:
    rows = []
    rng = np.random.default_rng(0)
    for i in range(6):
        for m, shift in (("x", 0.1), ("y", 0.0)):
            for k in range(3):
                rows.append({"query_id": f"{m}{i}{k}", "group": "g", "identity": f"id{i}", "prompt": "p",
                             "method": m, "status": "ok", "ap": float(np.clip(0.6 + shift + rng.normal(0, .1), 0, 1))})
    return pd.DataFrame(rows)


def test_pilot_pairs_as_fpr_compare_and_a_whole_pilot_resample_keeps_its_identities():
    df = _frame()
    pilot = pw.pilot_from_frame(df, "x", "y")
    ref = paired_comparison(df, "x", "y")
    assert pilot.pairing == "identity" and pilot.n_identities == 6 and pilot.per_identity == 3
    assert pw.default_per_identity(3) == (1, 2, 3) and pw.default_per_identity(8) == (1, 2, 4, 8)
    assert pw.cheapest([{"per_identity": 1, "generations_per_method": 50},
                        {"per_identity": 4, "generations_per_method": 48}]) == 4
    assert pilot.difference == pytest.approx(ref["mean_diff"], abs=1e-15)
    assert pilot.difference_se == pytest.approx(pilot.pairs.std(ddof=1) / np.sqrt(6), rel=1e-12)
    # planned at the pilot's generations per identity: every planned pair is one of the pilot's pairs exactly
    sims = pw.simulate_pairs(pilot, 6, 3, n_sim=50)
    assert np.isin(np.round(sims, 12), np.round(pilot.pairs, 12)).all()
    with pytest.raises(InputError, match="up to 3 generations per identity"):
        pw.simulate_pairs(pilot, 6, 4)
    # several prompts per identity: a pair per prompt
    df2 = df.assign(prompt=df["query_id"].str[-1])
    p2 = pw.pilot_from_frame(df2, "x", "y")
    assert p2.pairing == "prompt" and len(p2.pairs) == 18
    assert p2.difference == pytest.approx(paired_comparison(df2, "x", "y")["mean_diff"], abs=1e-15)
    # equal pairs per identity: the SE of the identities' mean differences
    ident = np.array([x.mean() for x in p2.d])
    assert p2.difference_se == pytest.approx(ident.std(ddof=1) / np.sqrt(6), rel=1e-12)


@pytest.mark.parametrize("kw, match", [(dict(power=1.0), "power must be within"),
                                       (dict(power=0.8, alpha=0.0), "level must be within"),
                                       (dict(difference=0.0), "must not be 0"),
                                       (dict(per_identity=(0,)), "must be >= 1")])
def test_bad_plans_are_one_line_errors(kw, match):
    with pytest.raises(InputError, match=match):
        pw.plan_from_pilot(pw.pilot_from_frame(_frame(), "x", "y"), **kw)


def test_a_chunked_simulation_gives_the_same_power_within_its_noise(monkeypatch):
    whole = pw.assumed_power(sd=0.2, icc=0.2, difference=0.05, per_identity=(4,), n_sim=400)["designs"][0]
    n = whole["identities"]
    monkeypatch.setattr(pw, "CHUNK_VALUES", n * 4 * 50)  # 8 chunks of 50 runs
    chunked = pw.judged(lambda b, c: pw.assumed_pairs(0.2, 0.2, n, 4, n_sim=b, chunk=c), 400, n * 4, 0.05, 0.05,
                        alpha=0.05)
    assert abs(chunked["power"] - whole["power"]) < 0.07  # two binomial SEs of 400 runs, twice
    assert chunked["interval_width"] == pytest.approx(whole["interval_width"], rel=0.02)
