"""The paper's two claims as verdicts (no IO): the 2x2 of Figure 3 and paired bootstrap differences.

Figure 3 of the Finer-Personalization Rank paper sets a general-purpose encoder's pairwise similarity
(Sim) against gallery mAP with a specialist encoder. With a ground truth per query (the demo world's
``drift``, lower is better) two claims can be checked:

(i)  specialist mAP agrees with the truth better than general-purpose Sim;
(ii) specialist mAP agrees with the truth better than specialist Sim.

Agreement is VISTAR's strict pairwise prediction accuracy (PPA: over pairs the truth orders, the share
the metric orders strictly the same way; a metric tie is wrong), on *cross-context pairs*: two queries
of the same identity (and world seed) whose ``context`` differs -- the comparison a metric must make
when the scene changes. Without a ``context`` column every pair of an identity's queries is used (the
result says so). The difference of the two PPAs on the same pairs has a percentile interval from a
cluster bootstrap over queries (:mod:`fpr.metrics.pair_bootstrap`, the same resamples for both metrics:
paired). The verdict is ``supports`` when the interval lies above 0, ``contradicts`` when below,
``inconclusive`` otherwise.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Sequence

import numpy as np
import pandas as pd

from fpr.metrics.pair_bootstrap import LEVEL, percentile_interval, resample_counts, safe_ratio, weighted_pair_sums
from fpr.metrics.summary import resample_indices

CROSS_CONTEXT = "cross-context pairs (same identity, different context)"
ALL_PAIRS = "all pairs of an identity's queries (no context column: cross-context pairs unavailable)"
# (claim, metric A, metric B): the columns of the 2x2 frame each claim compares
CLAIMS = (("specialist mAP vs general Sim", "specialist_map", "general_sim"),
          ("specialist mAP vs specialist Sim", "specialist_map", "specialist_sim"))
TWO_BY_TWO = ("general_sim", "general_map", "specialist_sim", "specialist_map")


@dataclass(frozen=True)
class Pairs:
    """Judged pairs: query positions ``a``, ``b`` and the truth's sign (+1: ``a`` is better)."""

    a: np.ndarray
    b: np.ndarray
    sign: np.ndarray
    basis: str


@dataclass(frozen=True)
class Verdict:
    claim: str
    metric_a: str
    metric_b: str
    n_pairs: int
    ppa_a: float
    ppa_b: float
    diff: float
    diff_lo: float
    diff_hi: float
    verdict: str
    basis: str
    level: float = LEVEL

    def as_row(self) -> dict:
        return asdict(self)


def judged_pairs(frame: pd.DataFrame, truth: str = "drift", *, lower_better: bool = True,
                 within: Sequence[str] = ("seed", "group", "identity")) -> Pairs:
    """Pairs of queries sharing ``within`` keys whose truth differs; cross-context when ``frame`` has ``context``."""
    t = pd.to_numeric(frame[truth], errors="coerce").to_numpy(np.float64)
    t = -t if lower_better else t
    has_context = "context" in frame.columns
    ctx = frame["context"].astype(str).to_numpy() if has_context else None
    keys = [k for k in within if k in frame.columns]
    ia, ib = [], []
    for idx in frame.groupby(keys, sort=True).indices.values() if keys else [np.arange(len(frame))]:
        i, j = np.triu_indices(len(idx), k=1)
        a, b = idx[i], idx[j]
        keep = np.isfinite(t[a]) & np.isfinite(t[b]) & (t[a] != t[b])
        if has_context:
            keep &= ctx[a] != ctx[b]
        ia.append(a[keep])
        ib.append(b[keep])
    a = np.concatenate(ia) if ia else np.zeros(0, int)
    b = np.concatenate(ib) if ib else np.zeros(0, int)
    return Pairs(a, b, np.sign(t[a] - t[b]), CROSS_CONTEXT if has_context else ALL_PAIRS)


def verdict_of(lo: float, hi: float) -> str:
    if not (np.isfinite(lo) and np.isfinite(hi)):
        return "inconclusive"
    return "supports" if lo > 0 else "contradicts" if hi < 0 else "inconclusive"


def paired_ppa_difference(x: np.ndarray, y: np.ndarray, pairs: Pairs, counts: np.ndarray
                          ) -> tuple[int, float, float, float, float, float]:
    """(pairs, PPA of x, PPA of y, PPA(x) - PPA(y), interval lo, hi) on the pairs both define; ``counts`` are the
    bootstrap copies of each query (``(n_boot, n_queries)``)."""
    ok = np.isfinite(x[pairs.a]) & np.isfinite(x[pairs.b]) & np.isfinite(y[pairs.a]) & np.isfinite(y[pairs.b])
    a, b, s = pairs.a[ok], pairs.b[ok], pairs.sign[ok]
    right_x = np.sign(x[a] - x[b]) * s > 0
    right_y = np.sign(y[a] - y[b]) * s > 0
    cols = np.column_stack([right_x, right_y, np.ones(len(a))]).astype(np.float64)
    tot = cols.sum(axis=0)
    ppa_x, ppa_y = safe_ratio(tot[0], tot[2]), safe_ratio(tot[1], tot[2])
    boot = weighted_pair_sums(counts, a, b, cols) if len(a) else np.full((counts.shape[0], 3), np.nan)
    lo, hi = percentile_interval(safe_ratio(boot[:, 0], boot[:, 2]) - safe_ratio(boot[:, 1], boot[:, 2]))
    return int(len(a)), ppa_x, ppa_y, ppa_x - ppa_y, lo, hi


def claim_verdicts(frame: pd.DataFrame, truth: str = "drift", *, seed: int = 0, n_boot: int = 1000,
                   lower_better: bool = True) -> list[Verdict]:
    """Both claims (:data:`CLAIMS`) on ``frame`` (one row per query: :data:`TWO_BY_TWO` columns, ``truth``,
    ``group``, ``identity``, ``seed`` and optionally ``context``): :func:`figure3`'s verdicts."""
    return figure3(frame, truth, seed=seed, n_boot=n_boot, lower_better=lower_better).verdicts


# The two effects Figure 3 mixes, each a paired strict-PPA difference on the judged pairs: the protocol effect
# (gallery mAP minus pairwise Sim, one encoder) and the encoder effect (specialist minus general, one protocol).
# (name, kind, held fixed, column A, column B). Claim (ii) *is* the protocol effect under the specialist; claim (i)
# is the encoder effect under mAP plus the protocol effect under the general encoder (DECOMPOSITION).
EFFECTS = (("protocol effect under the general encoder (general mAP - general Sim)", "protocol", "general",
            "general_map", "general_sim"),
           ("protocol effect under the specialist (specialist mAP - specialist Sim)", "protocol", "specialist",
            "specialist_map", "specialist_sim"),
           ("encoder effect under Sim (specialist Sim - general Sim)", "encoder", "Sim", "specialist_sim",
            "general_sim"),
           ("encoder effect under mAP (specialist mAP - general mAP)", "encoder", "mAP", "specialist_map",
            "general_map"))
# claim (i) = EFFECTS[3] + EFFECTS[0], term by term in right-pair counts (integers: exact)
DECOMPOSITION = (CLAIMS[0][0], (EFFECTS[3][0], EFFECTS[0][0]))
TIES_HALF_VARIANT = "claim (ii) ties-half (a metric tie counts 1/2; not VISTAR's)"


@dataclass(frozen=True)
class Cell:
    """One cell of the 2x2 judged on the pairs: strict PPA (VISTAR's) with its interval, right and tied pairs."""

    metric: str
    n_pairs: int
    n_right: int
    n_ties: int
    ppa: float
    ppa_lo: float
    ppa_hi: float
    ppa_ties_half: float
    tie_share: float

    def as_row(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Effect:
    """A paired difference of two cells' PPA on the same pairs (``n_right_diff``: right pairs of A minus of B)."""

    name: str
    kind: str
    fixed: str
    metric_a: str
    metric_b: str
    n_pairs: int
    n_right_diff: int
    diff: float
    diff_lo: float
    diff_hi: float
    level: float = LEVEL

    def as_row(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Figure3:
    """Figure 3 judged against a truth: the four cells, the two claims' verdicts, the four effects, and claim
    (ii)'s ties-half variant, all on the same pairs and bootstrap resamples."""

    cells: list[Cell]
    verdicts: list[Verdict]
    effects: list[Effect]
    variants: list[Verdict]
    basis: str

    def decomposition(self) -> dict:
        """Claim (i)'s difference as the encoder effect under mAP plus the protocol effect under the general
        encoder: in right-pair counts (exact) and in PPA."""
        claim = next(v for v in self.verdicts if v.claim == DECOMPOSITION[0])
        terms = [next(e for e in self.effects if e.name == name) for name in DECOMPOSITION[1]]
        cells = {c.metric: c for c in self.cells}
        n_right_diff = cells[claim.metric_a].n_right - cells[claim.metric_b].n_right
        return {"claim": claim.claim, "diff": claim.diff, "n_right_diff": n_right_diff,
                "terms": [{"name": t.name, "diff": t.diff, "n_right_diff": t.n_right_diff} for t in terms],
                "exact": n_right_diff == sum(t.n_right_diff for t in terms)}


def common_pairs(frame: pd.DataFrame, pairs: Pairs, columns: Sequence[str] = TWO_BY_TWO) -> Pairs:
    """The judged pairs on which every column of ``columns`` has a number at both queries (so that every cell
    and every difference is judged on the same pairs)."""
    ok = np.ones(len(pairs.a), dtype=bool)
    for c in columns:
        x = pd.to_numeric(frame[c], errors="coerce").to_numpy(np.float64)
        ok &= np.isfinite(x[pairs.a]) & np.isfinite(x[pairs.b])
    return Pairs(pairs.a[ok], pairs.b[ok], pairs.sign[ok], pairs.basis)


def figure3(frame: pd.DataFrame, truth: str = "drift", *, seed: int = 0, n_boot: int = 1000,
            lower_better: bool = True) -> Figure3:
    """The four cells (:data:`TWO_BY_TWO`), both claims, the four effects (:data:`EFFECTS`) and claim (ii)'s
    ties-half variant on ``frame``'s judged pairs (:func:`judged_pairs`) where all four cells have a value.

    Every interval comes from the same cluster-bootstrap resamples over queries (seeded by ``seed``): a cell's
    PPA per resample, a difference per resample, percentiles at :data:`LEVEL`."""
    frame = frame.reset_index(drop=True)
    pairs = common_pairs(frame, judged_pairs(frame, truth, lower_better=lower_better))
    n = len(frame)
    counts = resample_counts(resample_indices(n, seed=seed, key=("claims",), n_boot=n_boot), n) if n else \
        np.zeros((n_boot, 0))
    a, b, s = pairs.a, pairs.b, pairs.sign
    cols, right, tied = [], {}, {}
    for c in TWO_BY_TWO:
        x = pd.to_numeric(frame[c], errors="coerce").to_numpy(np.float64)
        right[c] = np.sign(x[a] - x[b]) * s > 0
        tied[c] = x[a] == x[b]
        cols += [right[c], tied[c]]
    cols = np.column_stack([*cols, np.ones(len(a))]).astype(np.float64) if len(a) else np.zeros((0, 9))
    boot = weighted_pair_sums(counts, a, b, cols) if len(a) else np.full((counts.shape[0], 9), np.nan)
    k = {c: 2 * i for i, c in enumerate(TWO_BY_TWO)}  # column of c's right pairs; +1: its ties
    m = len(a)

    def ppa(c: str, boots: bool = False, half: bool = False):
        src = boot if boots else cols.sum(axis=0)
        num = src[..., k[c]] + (0.5 * src[..., k[c] + 1] if half else 0.0)
        return safe_ratio(num, src[..., 8])

    cells = []
    for c in TWO_BY_TWO:
        lo, hi = percentile_interval(ppa(c, True))
        cells.append(Cell(c, m, int(right[c].sum()), int(tied[c].sum()), ppa(c), lo, hi, ppa(c, half=True),
                          safe_ratio(tied[c].sum(), m)))

    def difference(x: str, y: str, half: bool = False) -> tuple[float, float, float, float, float]:
        lo, hi = percentile_interval(ppa(x, True, half) - ppa(y, True, half))
        px, py = ppa(x, half=half), ppa(y, half=half)
        return px, py, px - py, lo, hi

    verdicts = []
    for claim, ma, mb in CLAIMS:
        pa, pb, d, lo, hi = difference(ma, mb)
        verdicts.append(Verdict(claim, ma, mb, m, pa, pb, d, lo, hi, verdict_of(lo, hi), pairs.basis))
    effects = []
    for name, kind, fixed, ma, mb in EFFECTS:
        _, _, d, lo, hi = difference(ma, mb)
        effects.append(Effect(name, kind, fixed, ma, mb, m, int(right[ma].sum() - right[mb].sum()), d, lo, hi))
    _, ma, mb = CLAIMS[1]
    pa, pb, d, lo, hi = difference(ma, mb, half=True)
    variants = [Verdict(TIES_HALF_VARIANT, ma, mb, m, pa, pb, d, lo, hi, verdict_of(lo, hi), pairs.basis)]
    return Figure3(cells, verdicts, effects, variants, pairs.basis)


def regime(frame: pd.DataFrame, truth: str = "drift", *, lower_better: bool = True,
           encoders: Sequence[str] = ("specialist", "general")) -> list[dict]:
    """Per encoder (the prefix of its ``<encoder>_map`` column): how much room the gallery leaves at the top of
    AP where the claims are judged -- the oracle's mAP (rows of method ``oracle``; None without), the share of
    the judged queries (those with a truth value) whose AP is exactly 1, that share per method
    (:func:`fpr.metrics.headroom.ap_one_share`), and the AP tie share of the judged pairs (:func:`figure3`'s
    pairs: both queries' APs equal, a pair strict PPA counts wrong)."""
    from fpr.metrics.headroom import ap_one_share

    frame = frame.reset_index(drop=True)
    has_truth = pd.to_numeric(frame[truth], errors="coerce").notna().to_numpy()
    judged = frame[has_truth].reset_index(drop=True)
    pairs = common_pairs(judged, judged_pairs(judged, truth, lower_better=lower_better))
    oracle = frame[frame["method"].astype(str) == "oracle"] if "method" in frame else frame.iloc[:0]
    out = []
    for enc in encoders:
        col = f"{enc}_map"
        ap = pd.to_numeric(judged[col], errors="coerce").to_numpy(np.float64)
        ok = np.isfinite(ap)
        o = pd.to_numeric(oracle[col], errors="coerce")
        by_method = ap_one_share(judged.assign(ap=ap)) if "method" in judged else {}
        out.append({"encoder": enc, "oracle_map": float(o.mean()) if o.notna().any() else None,
                    "n_oracle": int(o.notna().sum()), "n_queries": int(ok.sum()),
                    "ap_one_share": safe_ratio((ap[ok] == 1.0).sum(), ok.sum()),
                    "ap_one_share_by_method": by_method, "n_pairs": int(len(pairs.a)),
                    "ap_tie_share": safe_ratio((ap[pairs.a] == ap[pairs.b]).sum(), len(pairs.a))})
    return out


def two_by_two(frame: pd.DataFrame, by: Sequence[str] = ("seed", "method")) -> pd.DataFrame:
    """Mean of each :data:`TWO_BY_TWO` column and the share of specialist AP exactly 1, per ``by`` keys."""
    g = frame.groupby(list(by), sort=False)
    out = g[list(TWO_BY_TWO)].mean()
    out["specialist_ap1_share"] = g["specialist_map"].apply(lambda v: float((v == 1.0).mean()))
    out["n"] = g.size()
    return out.reset_index()
