"""How many identities and generations a paired comparison of two methods needs (``fpr plan``).

The planned run is judged by the test ``fpr compare`` reports (:func:`fpr.metrics.summary.paired_comparison`):
the two-sided Wilcoxon signed-rank test on the paired differences a - b, zero differences dropped, with
SciPy's choice of method per sample (:func:`wilcoxon_pvalues` reproduces it for a batch of samples; a
test pins it to ``scipy.stats.wilcoxon``). A difference counts as *detected* when the p-value is below
the level and the mean difference has the planned sign.

Power is estimated by simulating the planned run many times:

* from a **pilot** (:class:`Pilot`, the per-query values of two methods of a stored run), by a two-stage
  paired bootstrap: identities are drawn with replacement (the same identity for both methods), then
  the identity's generations within it: first without replacement while the pilot identity has some
  left, then with replacement (so a planned run with the pilot's generations per identity resamples
  whole identities, the classic cluster bootstrap). The pairs are made as ``fpr compare`` makes them:
  where every pilot identity has one pairing key (one prompt: the built-in world) the generations of an
  identity are averaged per method into one pair; otherwise each drawn key (prompt) is a pair, its
  value the pilot's pair difference for that key. The planned difference is imposed by shifting the pilot's
  non-zero pairs so their mean is ``difference`` (no shift when it is not given; :func:`judge`). The
  planned generations per identity may not exceed the pilot's;
* from **stated assumptions** (:func:`assumed_power`): pair differences ``difference + u_i + e_ij`` with
  ``u_i ~ N(0, icc sd^2)`` per identity and ``e_ij ~ N(0, (1 - icc) sd^2)`` per generation, where ``sd``
  is the standard deviation of one generation's paired AP difference and ``icc`` its correlation
  within identity.

The *false-alarm rate* is the same simulation with the methods swapped at random per identity (no
difference): above the level when pairs of one identity are correlated, because the test treats pairs
as independent.
The *interval width* is the expected width of ``fpr compare``'s 95% paired-bootstrap interval of the
mean difference, ``2 z_0.975 sd_plugin(d) / sqrt(n_pairs)`` averaged over the simulated runs (the
percentile bootstrap's width to within its resampling noise; benchmarks/results/plan_power.md).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy.stats import norm

from fpr.errors import InputError
from fpr.keys import keyed_rng

N_SIM = 1000  # simulated planned runs per evaluated design
MAX_IDENTITIES = 50_000
CHUNK_VALUES = 1 << 21  # simulated values drawn at once (16 MiB of float64), whatever the design
PAIR_ON = ("group", "identity", "prompt")  # fpr compare's pairing keys (paired_comparison's default)
IDENTITY = ("group", "identity")


# ---------------------------------------------------------------- the test fpr compare reports

def _ranks_nonzero(d: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Average ranks of |d| among a row's non-zero values (0 where d == 0), the count of non-zero values,
    and sum(t^3 - t) over the rows' tie blocks of non-zero |d|."""
    from scipy.stats import rankdata

    a = np.abs(d)
    zero = a == 0
    masked = np.where(zero, np.inf, a)  # zeros last: the non-zero values keep ranks 1..count
    r = rankdata(masked, method="average", axis=1)
    r[zero] = 0.0
    count = (~zero).sum(axis=1)
    s = np.sort(masked, axis=1)
    new = np.ones(s.shape, dtype=bool)
    new[:, 1:] = s[:, 1:] != s[:, :-1]
    block = np.cumsum(new, axis=1) - 1  # tie block of each sorted value within its row
    rows, width = s.shape
    flat = (np.arange(rows)[:, None] * width + block).ravel()
    t = np.bincount(flat, weights=np.isfinite(s).ravel(), minlength=rows * width)  # zeros (inf) weigh nothing
    ties = (t ** 3 - t).reshape(rows, width).sum(axis=1)
    return r, count, ties


def _exact_sf_cdf(count: int, r_plus: np.ndarray) -> np.ndarray:
    """Two-sided exact p-value of the signed-rank statistic (no ties, no zeros), as SciPy computes it."""
    from scipy.stats._wilcoxon import WilcoxonDistribution

    dist = WilcoxonDistribution(np.asarray(count))
    p = 2 * np.minimum(dist.sf(np.floor(r_plus)), dist.cdf(np.ceil(r_plus)))
    return np.clip(p, 0, 1)


def _permutation_p(d: np.ndarray, ranks: np.ndarray, r_plus: np.ndarray) -> np.ndarray:
    """SciPy's deterministic sign-flip permutation test for n <= 13 (every 2^n flip), two-sided."""
    n = d.shape[1]
    flips = ((np.arange(2 ** n)[:, None] >> np.arange(n)[None, :]) & 1).astype(np.float64)  # (2^n, n)
    out = np.empty(len(d))
    for i in range(len(d)):
        nz = d[i] != 0
        # a flip changes the sign of each value; the statistic is the rank sum of the positive ones
        pos = np.where(flips.astype(bool), d[i] < 0, d[i] > 0) & nz
        null = (pos * ranks[i]).sum(axis=1)
        gamma = abs(np.finfo(np.float64).eps * 100 * r_plus[i])  # SciPy's tolerance for equal statistics
        less = np.mean(null <= r_plus[i] + gamma)
        greater = np.mean(null >= r_plus[i] - gamma)
        out[i] = min(1.0, 2 * min(less, greater))
    return out


def wilcoxon_pvalues(d: np.ndarray) -> np.ndarray:
    """Two-sided Wilcoxon signed-rank p-values of each row of ``d`` (zeros dropped), each row as
    ``scipy.stats.wilcoxon(row, zero_method="wilcox")`` computes it: exact for <= 50 values without ties or
    zeros, the sign-flip permutation test for <= 13 values with ties or zeros, else the normal
    approximation with the tie correction (SciPy's default: no continuity correction). NaN where a row has no non-zero value."""
    d = np.atleast_2d(np.asarray(d, dtype=np.float64))
    n = d.shape[1]
    ranks, count, ties = _ranks_nonzero(d)
    r_plus = (ranks * (d > 0)).sum(axis=1)
    mn = count * (count + 1.0) * 0.25
    se = np.sqrt((count * (count + 1.0) * (2.0 * count + 1.0) - ties / 2) / 24)
    with np.errstate(divide="ignore", invalid="ignore"):
        z = (r_plus - mn) / se
        p = 2 * norm.sf(np.abs(z))
    p = np.where(count == 0, np.nan, np.minimum(p, 1.0))
    if n <= 50:
        clean = (count == n) & (ties == 0)
        if clean.any():
            p[clean] = _exact_sf_cdf(n, r_plus[clean])
        if n <= 13:
            small = ~clean & (count > 0)
            if small.any():
                p[small] = _permutation_p(d[small], ranks[small], r_plus[small])
    return p


# ---------------------------------------------------------------- pilots

@dataclass(frozen=True)
class Pilot:
    """Paired values of two methods, by identity.

    ``pairing == "identity"`` (every identity has one pairing key): ``a[i]``, ``b[i]`` are the identity's
    per-query values of each method; a planned identity is one pair. ``pairing == "prompt"``: ``d[i]`` are
    the identity's pair differences, one per key (prompt); a planned identity has one pair per generation.
    """

    pairing: str
    a: tuple[np.ndarray, ...]
    b: tuple[np.ndarray, ...]
    d: tuple[np.ndarray, ...]
    method_a: str = "a"
    method_b: str = "b"

    @property
    def n_identities(self) -> int:
        return len(self.d)

    @property
    def pairs(self) -> np.ndarray:
        """The pilot's own pair differences (as ``fpr compare`` pairs them)."""
        return np.concatenate(self.d)

    @property
    def difference(self) -> float:
        return float(self.pairs.mean())

    @property
    def difference_se(self) -> float:
        """Standard error of the pilot's difference, by identity (the identities' mean pair differences,
        weighted by their pairs): how far a pilot's own difference is from the one a planned run meets."""
        n = np.array([len(x) for x in self.d], dtype=np.float64)
        if len(n) < 2:
            return float("nan")
        means = np.array([x.mean() for x in self.d])
        resid = n * (means - self.difference)  # the ratio estimator's linearisation
        return float(np.sqrt((resid ** 2).sum() / (len(n) - 1) / len(n)) / n.mean())

    @property
    def per_identity_min(self) -> int:
        """The fewest generations (queries or keys) any identity of the pilot has for both methods."""
        groups = self.a + self.b if self.pairing == "identity" else self.d
        return int(min(len(x) for x in groups))

    @property
    def per_identity(self) -> int:
        """Generations per identity and method (median over identities): queries, or keys (prompts)."""
        sizes = [len(x) for x in self.a] if self.pairing == "identity" else [len(x) for x in self.d]
        return int(np.median(sizes))

    def describe(self) -> dict:
        pairs = self.pairs
        out = {"method_a": self.method_a, "method_b": self.method_b, "pairing": self.pairing,
               "identities": self.n_identities, "per_identity": self.per_identity, "pairs": int(len(pairs)),
               "difference": self.difference, "difference_se": self.difference_se,
               "pair_sd": float(pairs.std(ddof=1)) if len(pairs) > 1 else float("nan")}
        if self.pairing == "identity":
            out["mean_a"] = float(np.concatenate(self.a).mean())
            out["mean_b"] = float(np.concatenate(self.b).mean())
        return out


def pilot_from_frame(per_query: pd.DataFrame, method_a: str, method_b: str, *, metric: str = "ap") -> Pilot:
    """The pilot of two methods of a run's per-query rows (status ``ok``), paired as ``fpr compare`` pairs."""
    df = per_query[per_query["status"] == "ok"] if "status" in per_query else per_query
    keys = [k for k in PAIR_ON if k in df.columns]
    ident = [k for k in IDENTITY if k in df.columns]
    if "identity" not in ident:
        raise InputError("a pilot needs an 'identity' column", hint="plan from a run's per-query rows")
    df = df[df["method"].isin([method_a, method_b])].dropna(subset=[metric])
    per_key = df.groupby(keys + ["method"])[metric].mean().unstack("method")
    if method_a not in per_key or method_b not in per_key:
        raise InputError(f"the pilot has no queries of '{method_a if method_a not in per_key else method_b}'")
    per_key = per_key.dropna(subset=[method_a, method_b])  # keys both methods answered
    if per_key.empty:
        raise InputError(f"methods '{method_a}' and '{method_b}' share no (identity, prompt) pair",
                         hint="plan from a run where both methods generated for the same identities and prompts")
    per_key["d"] = per_key[method_a] - per_key[method_b]
    by_ident = per_key.groupby(level=ident)
    one_key = bool((by_ident.size() == 1).all())
    d = tuple(g["d"].to_numpy(dtype=np.float64) for _, g in by_ident)
    if not one_key:
        return Pilot("prompt", (), (), d, method_a, method_b)
    order = [k for k, _ in by_ident]  # the identities of d, in its order
    values = {m: {k: g[metric].to_numpy(dtype=np.float64) for k, g in df[df["method"] == m].groupby(ident)}
              for m in (method_a, method_b)}
    a = tuple(values[method_a][k] for k in order)
    b = tuple(values[method_b][k] for k in order)
    return Pilot("identity", a, b, d, method_a, method_b)


# ---------------------------------------------------------------- simulation

def _padded(groups: tuple[np.ndarray, ...]) -> tuple[np.ndarray, np.ndarray]:
    counts = np.array([len(g) for g in groups])
    out = np.zeros((len(groups), counts.max()))
    for i, g in enumerate(groups):
        out[i, :len(g)] = g
    return out, counts


def _draw_within(rng: np.random.Generator, values: np.ndarray, counts: np.ndarray, idx: np.ndarray,
                 m: int) -> np.ndarray:
    """``(B, n, m)`` values of the drawn identities ``idx`` (B, n): without replacement while an identity has
    values left, then with replacement."""
    c = counts[idx]  # (B, n)
    width = values.shape[1]
    u = rng.random(idx.shape + (width,))
    u[np.arange(width)[None, None, :] >= c[..., None]] = np.inf  # padding sorts last
    perm = np.argsort(u, axis=-1)
    if m <= width:
        perm = perm[..., :m]
    else:
        perm = np.concatenate([perm, np.zeros(idx.shape + (m - width,), dtype=perm.dtype)], axis=-1)
    extra = np.floor(rng.random(idx.shape + (m,)) * c[..., None]).astype(np.int64)
    pos = np.where(np.arange(m)[None, None, :] < c[..., None], perm, extra)
    return values[idx[..., None], pos]


def simulate_pairs(pilot: Pilot, identities: int, per_identity: int, *, n_sim: int = N_SIM,
                   seed: int = 0, chunk: int = 0) -> np.ndarray:
    """``(n_sim, identities, pairs per identity)`` pair differences of simulated planned runs, unshifted (the
    pilot's difference). ``per_identity`` may not exceed the pilot's: beyond it a with-replacement draw would
    repeat the pilot's generations and understate the spread within identity."""
    most = pilot.per_identity_min
    if per_identity > most:
        raise InputError(f"this pilot plans up to {most} generations per identity, not {per_identity}",
                         hint=f"plan with at most {most}, or pilot with more generations per identity")
    rng = keyed_rng(seed, "plan", pilot.pairing, identities, per_identity, *((chunk,) if chunk else ()))
    idx = rng.integers(0, pilot.n_identities, size=(n_sim, identities))
    if pilot.pairing == "identity":
        va, ca = _padded(pilot.a)
        vb, cb = _padded(pilot.b)
        return (_draw_within(rng, va, ca, idx, per_identity).mean(-1)
                - _draw_within(rng, vb, cb, idx, per_identity).mean(-1))[..., None]
    vd, cd = _padded(pilot.d)
    return _draw_within(rng, vd, cd, idx, per_identity)


def assumed_pairs(sd: float, icc: float, identities: int, per_identity: int, *, pairing: str = "prompt",
                  n_sim: int = N_SIM, seed: int = 0, chunk: int = 0) -> np.ndarray:
    """``(n_sim, identities, pairs per identity)`` pair differences (mean 0) of the normal model of stated
    assumptions."""
    rng = keyed_rng(seed, "plan-assumed", pairing, identities, per_identity, *((chunk,) if chunk else ()))
    u = rng.normal(0.0, sd * np.sqrt(icc), size=(n_sim, identities, 1))
    e = rng.normal(0.0, sd * np.sqrt(1.0 - icc), size=(n_sim, identities, per_identity))
    x = u + e
    return x.mean(-1, keepdims=True) if pairing == "identity" else x


def judge(pairs: np.ndarray, shift: float, difference: float, *, alpha: float, seed: int = 0,
          chunk: int = 0) -> dict:
    """Detection rate of ``pairs`` (``(B, identities, per identity)``) moved by ``shift``, the false-alarm rate
    at no difference and the expected interval width.

    The shift moves the non-zero pairs only, by ``shift / share of non-zero pairs`` so the mean moves by
    ``shift``: a pair where both methods scored the same (both AP = 1: saturation) stays a zero difference,
    which the test drops. The false alarm is the same runs with each identity's pairs multiplied by a random
    sign: the methods swapped per identity, which keeps the zeros and the correlation within identity."""
    b = pairs.shape[0]
    nonzero = pairs != 0
    share = float(nonzero.mean())
    moved = pairs + (shift / share) * nonzero if shift and share else pairs
    d = moved.reshape(b, -1)
    p = wilcoxon_pvalues(d)
    detected = (p < alpha) & (np.sign(d.mean(axis=1)) == np.sign(difference))
    flips = keyed_rng(seed, "plan-null", *pairs.shape, *((chunk,) if chunk else ())).choice([-1.0, 1.0], size=pairs.shape[:2] + (1,))
    null = wilcoxon_pvalues((pairs * flips).reshape(b, -1))
    width = 2 * norm.ppf(0.975) * d.std(axis=1, ddof=0) / np.sqrt(d.shape[1])
    return {"power": float(np.mean(detected)), "false_alarm": float(np.mean(null < alpha)),
            "interval_width": float(np.mean(width))}


def judged(make, n_sim: int, values_per_run: int, shift: float, difference: float, *, alpha: float,
           seed: int = 0) -> dict:
    """:func:`judge` over chunks of simulated runs (``make(n_runs, chunk) -> pairs``), so memory stays about
    :data:`CHUNK_VALUES` values whatever the design; the first chunk is the unchunked stream."""
    step = max(1, CHUNK_VALUES // max(values_per_run, 1))
    total = {"power": 0.0, "false_alarm": 0.0, "interval_width": 0.0}
    for c, start in enumerate(range(0, n_sim, step)):
        b = min(step, n_sim - start)
        r = judge(make(b, c), shift, difference, alpha=alpha, seed=seed, chunk=c)
        for k in total:
            total[k] += r[k] * b
    return {k: v / n_sim for k, v in total.items()}


def _width(pilot: Pilot, per_identity: int) -> int:
    groups = pilot.a + pilot.b if pilot.pairing == "identity" else pilot.d
    return max(per_identity, max(len(x) for x in groups))


def _check(power: float, alpha: float, per_identity) -> None:
    if not 0.0 < power < 1.0:
        raise InputError(f"power must be within (0, 1), got {power:g}", hint="e.g. --power 0.8")
    if not 0.0 < alpha < 1.0:
        raise InputError(f"level must be within (0, 1), got {alpha:g}", hint="e.g. --alpha 0.05")
    bad = [m for m in per_identity if int(m) < 1]
    if bad:
        raise InputError(f"generations per identity must be >= 1, got {bad[0]}")


@dataclass(frozen=True)
class Design:
    per_identity: int
    identities: int
    pairs: int
    generations: int  # per method
    power: float
    false_alarm: float
    interval_width: float

    def as_json(self) -> dict:
        return {"per_identity": self.per_identity, "identities": self.identities, "pairs": self.pairs,
                "generations_per_method": self.generations, "power": self.power,
                "false_alarm": self.false_alarm, "interval_width": self.interval_width}


def smallest_design(evaluate, per_identity: int, target: float, *, pairs_per_identity: int,
                    max_identities: int = MAX_IDENTITIES) -> Design:
    """The fewest identities (at ``per_identity`` generations each) whose simulated power reaches ``target``:
    doubling, then bisection. ``evaluate(identities) -> judge() dict``."""
    seen: dict[int, dict] = {}

    def power(n: int) -> float:
        if n not in seen:
            seen[n] = evaluate(n)
        return seen[n]["power"]

    lo, hi = 1, 2
    while power(hi) < target:
        lo, hi = hi, hi * 2
        if hi > max_identities:
            raise InputError(f"{max_identities} identities of {per_identity} generations do not reach power "
                             f"{target:g}", hint="plan for a larger difference or a lower power")
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if power(mid) >= target:
            hi = mid
        else:
            lo = mid
    r = seen[hi]
    return Design(per_identity, hi, hi * pairs_per_identity, hi * per_identity, r["power"], r["false_alarm"],
                  r["interval_width"])


def default_per_identity(most: int) -> tuple[int, ...]:
    """1, 2, 4, ... up to ``most``, and ``most`` itself: the generations per identity a plan shows by default."""
    return tuple(sorted({2 ** k for k in range(most.bit_length()) if 2 ** k <= most} | {most}))


def cheapest(rows: list[dict]) -> int:
    """Generations per identity of the design with the fewest generations per method (ties: fewer per identity)."""
    return min(rows, key=lambda r: (r["generations_per_method"], r["per_identity"]))["per_identity"]


def plan_from_pilot(pilot: Pilot, *, difference: float | None = None, power: float = 0.8, alpha: float = 0.05,
                    per_identity: tuple[int, ...] | None = None, n_sim: int = N_SIM, seed: int = 0) -> dict:
    """Designs (one per generations-per-identity value; default :func:`default_per_identity` of the pilot's)
    reaching ``power`` for ``difference`` (default: the pilot's own), by the pilot's two-stage paired bootstrap.
    ``cheapest``: the design with the fewest generations per method (the first such)."""
    per_identity = tuple(per_identity or default_per_identity(pilot.per_identity_min))
    _check(power, alpha, per_identity)
    delta = pilot.difference if difference is None else float(difference)
    if delta == 0:
        raise InputError("the difference to detect must not be 0", hint="e.g. --difference 0.02")
    shift = delta - pilot.difference
    rows = []
    for m in per_identity:
        m = int(m)
        per = 1 if pilot.pairing == "identity" else m
        rows.append(smallest_design(
            lambda n, m=m: judged(lambda b, c: simulate_pairs(pilot, n, m, n_sim=b, seed=seed, chunk=c), n_sim,
                                  n * _width(pilot, m), shift, delta, alpha=alpha, seed=seed),
            m, power, pairs_per_identity=per).as_json())
    return {"source": "pilot", "pilot": pilot.describe(), "difference": delta, "power": power, "alpha": alpha,
            "n_sim": n_sim, "seed": seed, "designs": rows, "cheapest": cheapest(rows)}


def assumed_power(*, sd: float, icc: float, difference: float, power: float = 0.8, alpha: float = 0.05,
                  per_identity: tuple[int, ...] = (1,), pairing: str = "prompt", n_sim: int = N_SIM,
                  seed: int = 0) -> dict:
    """Designs reaching ``power`` under stated assumptions (the normal model of the module docstring)."""
    _check(power, alpha, per_identity)
    if not sd > 0:
        raise InputError(f"the standard deviation of a paired AP difference must be > 0, got {sd:g}")
    if not 0.0 <= icc < 1.0:
        raise InputError(f"the within-identity correlation must be within [0, 1), got {icc:g}")
    if difference == 0:
        raise InputError("the difference to detect must not be 0", hint="e.g. --difference 0.02")
    if pairing not in ("prompt", "identity"):
        raise InputError(f"unknown pairing '{pairing}'", hint="valid: prompt, identity")
    rows = []
    for m in per_identity:
        m = int(m)
        per = 1 if pairing == "identity" else m
        rows.append(smallest_design(
            lambda n, m=m: judged(lambda b, c: assumed_pairs(sd, icc, n, m, pairing=pairing, n_sim=b, seed=seed,
                                                             chunk=c), n_sim, n * m, difference, difference,
                                  alpha=alpha, seed=seed),
            m, power, pairs_per_identity=per).as_json())
    return {"source": "assumptions", "assumptions": {"sd": sd, "icc": icc, "pairing": pairing},
            "difference": float(difference), "power": power, "alpha": alpha, "n_sim": n_sim, "seed": seed,
            "designs": rows, "cheapest": cheapest(rows)}


def power_at(pilot: Pilot, identities: int, per_identity: int, *, difference: float | None = None,
             alpha: float = 0.05, n_sim: int = N_SIM, seed: int = 0) -> dict:
    """Predicted power, false-alarm rate and interval width of one planned design (a point of the power curve)."""
    delta = pilot.difference if difference is None else float(difference)
    return judged(lambda b, c: simulate_pairs(pilot, identities, per_identity, n_sim=b, seed=seed, chunk=c), n_sim,
                  identities * _width(pilot, per_identity), delta - pilot.difference, delta, alpha=alpha, seed=seed)
