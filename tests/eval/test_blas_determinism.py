"""Scores, AP, first-hit rank and top-k equal an exact reference, whatever BLAS does: any thread count, block
size or batch split, the recheck and the full exact path, an index or gallery vectors, scope all and group.

The reference is computed here from the definitions, without BLAS: a score is float32 of the correctly
rounded float64 of the exact dot product (the products of float32 numbers are exact in float64, and
``math.fsum`` rounds their sum once), AP is exact rational arithmetic over the scoped ranking (ties at the
end of their block), top-k is score descending then gallery row ascending. No OPENBLAS_* variable is set
or changed: the machine's BLAS, whatever kernel it runs, is pinned to 1 and 2 threads (threadpoolctl), and
a plain float32 ``q @ v.T`` is shown to move with the thread count or the block, so the runs did take
different summation orders.
"""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest
from threadpoolctl import threadpool_limits

from fpr.eval import pipeline as P
from fpr.eval import recheck, relevance, scoring
from fpr.index import faiss_index as F

pytestmark = pytest.mark.determinism

K = 10


def _data(seed: int = 7, g: int = 400, q: int = 37, d: int = 128):
    """Unit vectors, queries near some gallery rows, exact duplicates (ties at and around the k-th place),
    three groups, 40 identities."""
    rng = np.random.default_rng(seed)
    v = rng.normal(size=(g, d)).astype(np.float32)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    qv = (v[:q] + 0.3 * rng.normal(size=(q, d)).astype(np.float32)).astype(np.float32)
    v[5::17] = v[5]  # one vector 24 times: a wide tie for the queries near it
    v[q + 1] = v[1]
    groups = np.array([f"g{j % 3}" for j in range(g)], object)
    idents = np.array([f"i{j % 40}" for j in range(g)], object)
    labels = relevance.GalleryLabels(np.arange(g), groups, idents, np.zeros((0, d), np.float32),
                                     np.array([], object), np.array([], object), [], [f"p{j}" for j in range(g)])
    qdf = pd.DataFrame({"group": groups[:q], "identity": idents[:q]})
    return labels, qdf, qv, v, groups, idents


def _reference_scores(qv: np.ndarray, v: np.ndarray) -> list[list[float]]:
    q64, g64 = qv.astype(np.float64), v.astype(np.float64)
    return [[float(np.float32(math.fsum((qr * gr).tolist())) + np.float32(0)) for gr in g64] for qr in q64]


def _reference_row(scores: list[float], in_scope: list[bool], relevant: list[bool]):
    """(AP as a Fraction or None, first-hit rank, top-k rows, top-k scores, relevant items in scope, top margin)
    of one query, from the definitions (the top margin: fsum of the relevant scores / their count, minus the best
    impostor's score; NaN without either)."""
    items = [(s, j) for j, (s, ok) in enumerate(zip(scores, in_scope)) if ok]
    rel_scores = [s for (s, j) in items if relevant[j]]
    ap, first = None, 0
    if rel_scores:
        at_or_above = [sum(1 for s, _ in items if s >= r) for r in rel_scores]
        rel_at_or_above = [sum(1 for s in rel_scores if s >= r) for r in rel_scores]
        ap = sum(Fraction(a, b) for a, b in zip(rel_at_or_above, at_or_above)) / len(rel_scores)
        first = min(at_or_above)
    top = sorted(items, key=lambda x: (-x[0], x[1]))[:K]
    impostors = [s for (s, j) in items if not relevant[j]]
    margin = (math.fsum(rel_scores) / len(rel_scores) - max(impostors)) if rel_scores and impostors else math.nan
    return ap, first, [j for _, j in top], [s for s, _ in top], len(rel_scores), margin


@pytest.fixture(scope="module")
def case():
    labels, qdf, qv, v, groups, idents = _data()
    ref = _reference_scores(qv, v)
    qg, qi = qdf["group"].tolist(), qdf["identity"].tolist()
    want = {}
    for scope in ("all", "group"):
        rows = []
        for i, row in enumerate(ref):
            in_scope = [scope == "all" or groups[j] == qg[i] for j in range(len(v))]
            relevant = [groups[j] == qg[i] and idents[j] == qi[i] for j in range(len(v))]
            rows.append(_reference_row(row, in_scope, relevant))
        want[scope] = rows
    return labels, qdf, qv, v, groups, idents, ref, want


def _close_to(value: float, exact: Fraction, n_terms: int) -> bool:
    """``value`` is a float64 sum of ``n_terms`` correctly rounded positive ratios, then divided: within
    (n_terms + 1) units of roundoff (2^-53, relative) of the exact rational value."""
    return abs(Fraction(value) - exact) <= Fraction(n_terms + 1, 2 ** 53) * exact


def _check(got: scoring.Scored, want: list) -> None:
    for r, (ap, first, top_rows, top_scores, n_rel, margin) in enumerate(want):
        got_ap = got.values["ap"][r]
        if ap is None:
            assert np.isnan(got_ap), r
        else:
            assert _close_to(float(got_ap), ap, n_rel), (r, got_ap, ap)
        assert got.values["first_hit_rank"][r] == first, r
        got_margin = float(got.values["top_margin"][r])
        assert got_margin == margin or (math.isnan(got_margin) and math.isnan(margin)), (r, got_margin, margin)
        width = len(top_rows)
        assert got.top_rows[r, :width].tolist() == top_rows, r
        assert (got.top_rows[r, width:] == -1).all(), r
        assert got.top_scores[r, :width].tolist() == top_scores, r  # float32 -> Python float is exact


def _bits(s: scoring.Scored) -> tuple:
    return (s.values["ap"].tobytes(), s.values["first_hit_rank"].tobytes(), s.values["top_margin"].tobytes(),
            s.top_rows.tobytes(),
            s.top_scores.tobytes())


@pytest.mark.parametrize("scope", ["all", "group"])
@pytest.mark.parametrize("source", ["index", "vectors"])
@pytest.mark.parametrize("path", ["auto", "full"])
def test_scores_ap_and_top_k_equal_the_exact_reference_on_any_threads_blocks_and_splits(case, scope, source, path,
                                                                                         monkeypatch):
    labels, qdf, qv, v, _, _, _, want = case
    d = v.shape[1]
    card = F.IndexCard(name="ix", gallery="g", gallery_fingerprint="f", encoder="e", weights_checksum="w",
                       preprocessing="{}", dim=d, n_items=0, n_references=0)
    src = F.build(v, labels.item_ids, np.zeros((0, d), np.float32), np.zeros(0, np.int64), card) \
        if source == "index" else v
    monkeypatch.setattr(recheck, "PATH", path)
    codes = labels.codes(qdf)
    q = len(qv)
    split_at = [0, 1, 12, q]  # a query alone, a batch of 11, the rest: what different callers or Ray shards see
    seen = set()
    for threads in (1, 2):
        with threadpool_limits(limits=threads, user_api="blas"):
            for block in (1, 5, None):
                whole = scoring.score_blocks(qv, np.arange(q), codes, scope, src, K, block=block)
                _check(whole, want[scope])
                seen.add(_bits(whole))
                for a, b in zip(split_at, split_at[1:]):
                    part = scoring.score_blocks(qv, np.arange(a, b), codes, scope, src, K, block=block)
                    _check(part, want[scope][a:b])
    assert len(seen) == 1  # every run the same bits, AP included


def test_the_exact_reference_is_not_what_float32_blas_gives(case):
    """The configurations above really sum in different orders: a plain float32 product moves with the
    block height or the thread count (and misses the reference) where the exact scores do not."""
    _, _, qv, v, _, _, ref, _ = case
    ref32 = np.array(ref, dtype=np.float32)
    plain = []
    for threads in (1, 2):
        with threadpool_limits(limits=threads, user_api="blas"):
            plain.append(qv @ v.T)
            plain.append(np.concatenate([qv[i:i + 1] @ v.T for i in range(len(qv))]))
    assert any(not np.array_equal(p, ref32) for p in plain)


def test_leave_one_out_map_equals_the_exact_reference_on_1_and_2_threads(case):
    _, _, _, v, groups, idents, _, _ = case
    ref = _reference_scores(v, v)
    n = len(v)
    aps: dict[str, list[Fraction]] = {}
    terms = 0
    for i in range(n):
        in_scope = [groups[j] == groups[i] and j != i for j in range(n)]
        relevant = [in_scope[j] and idents[j] == idents[i] for j in range(n)]
        ap, *_ = _reference_row(ref[i], in_scope, relevant)
        if ap is not None:
            aps.setdefault(groups[i], []).append(ap)
            terms = max(terms, sum(relevant))
    want = {g: sum(a) / len(a) for g, a in aps.items()}
    want["*"] = sum(a for x in aps.values() for a in x) / sum(len(x) for x in aps.values())
    got = []
    for threads in (1, 2):
        with threadpool_limits(limits=threads, user_api="blas"):
            got.append(P.leave_one_out_map(v, idents, groups))
    assert got[0] == got[1]  # the same floats
    assert got[0].keys() == want.keys()
    for g, value in got[0].items():
        # each AP within (R + 1) ulps of its exact value, then a float64 mean of up to n of them
        assert _close_to(value, want[g], terms + n), g


def test_no_test_or_ci_step_sets_an_openblas_variable():
    """Machines that set OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE do so because their OpenBLAS needs it: the
    suite and CI run under whatever the machine has and never set, override or drop them."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    name = "OPEN" + "BLAS_"  # split so this file does not match itself
    setting = re.compile(rf"{name}\w+\s*=|[\"']{name}\w*[\"']\s*[:\]),]|setenv\(\s*[\"']{name}|startswith\([\"']{name}")
    files = [*sorted((root / "tests").rglob("*.py")), root / ".ci" / "run", root / "Makefile"]
    found = [f"{p.relative_to(root)}:{i}" for p in files if p.is_file()
             for i, line in enumerate(p.read_text().splitlines(), 1) if setting.search(line)]
    assert not found, found
