"""``score_blocks`` through the recheck path (float32 proposals + exact rechecks, the default) gives the
same bits as the full exact path (``FPR_EXACT_PATH=full``): every metric column, top-k rows, scores and
relevance, for an index and for gallery vectors, scope all and group, any block size."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from fpr.errors import InputError
from fpr.eval import recheck, relevance, scoring
from fpr.index import faiss_index as F

pytestmark = pytest.mark.determinism


def _setup(seed: int, g: int = 600, q: int = 50, d: int = 48):
    """Clustered unit vectors (many near scores), exact duplicates (ties), three groups, 25 identities."""
    rng = np.random.default_rng(seed)
    ids = 25
    centers = rng.standard_normal((ids, d)).astype(np.float32)
    gl = rng.integers(0, ids, g)
    v = centers[gl] + rng.standard_normal((g, d)).astype(np.float32)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    v[::13] = v[2]
    ql = rng.integers(0, ids, q)
    qv = centers[ql] + rng.standard_normal((q, d)).astype(np.float32)
    qv /= np.linalg.norm(qv, axis=1, keepdims=True)
    groups = np.array([f"g{j % 3}" for j in range(g)], object)
    labels = relevance.GalleryLabels(np.arange(g), groups, np.array([f"i{x}" for x in gl], object),
                                     np.zeros((0, d), np.float32), np.array([], object), np.array([], object), [],
                                     [f"p{j}" for j in range(g)])
    qdf = pd.DataFrame({"group": [f"g{x % 3}" for x in ql], "identity": [f"i{x}" for x in ql]})
    card = F.IndexCard(name="ix", gallery="g", gallery_fingerprint="f", encoder="e", weights_checksum="w",
                       preprocessing="{}", dim=d, n_items=0, n_references=0)
    gi = F.build(v, labels.item_ids, np.zeros((0, d), np.float32), np.zeros(0, np.int64), card)
    return labels, qdf, qv, v, gi


def _run(path: str, monkeypatch, *args, **kw):
    monkeypatch.setattr(recheck, "PATH", path)
    monkeypatch.setattr(scoring, "faiss_search_for_flat", lambda: False)
    return scoring.score_blocks(*args, **kw)


def _same_bits(a: scoring.Scored, b: scoring.Scored) -> None:
    assert a.values.keys() == b.values.keys()
    for key in a.values:
        np.testing.assert_array_equal(a.values[key].view(np.int64), b.values[key].view(np.int64), err_msg=key)
    np.testing.assert_array_equal(a.top_rows, b.top_rows)
    np.testing.assert_array_equal(a.top_scores.view(np.int32), b.top_scores.view(np.int32))
    np.testing.assert_array_equal(a.top_relevant, b.top_relevant)


@pytest.mark.parametrize("scope", ["all", "group"])
@pytest.mark.parametrize("source", ["index", "vectors"])
@pytest.mark.parametrize("seed", [0, 1])
def test_the_recheck_path_gives_the_full_paths_bits(scope, source, seed, monkeypatch):
    labels, qdf, qv, v, gi = _setup(seed)
    codes = labels.codes(qdf)
    ok = np.arange(len(qdf))[::-1][: len(qdf) - 3]  # an order and a subset, as the pipeline passes them
    src = gi if source == "index" else v
    full = _run("full", monkeypatch, qv, ok, codes, scope, src, 10, block=7)
    stats = recheck.RecheckStats()
    for block in (1, 7, None):
        _same_bits(_run("recheck", monkeypatch, qv, ok, codes, scope, src, 10, block=block, stats=stats), full)
    assert stats.elements > 0 and 0 < stats.rechecked < stats.elements


def test_a_gpu_or_approximate_search_keeps_the_full_path(monkeypatch):
    """Where FAISS gives the top-k candidates the block's exact scores are needed: no recheck path."""
    labels, qdf, qv, v, gi = _setup(0, g=80, q=6)
    monkeypatch.setattr(scoring, "faiss_search_for_flat", lambda: True)
    assert scoring._ScoreSource(gi, len(v)).part(None).rechecked is None
    monkeypatch.setattr(scoring, "faiss_search_for_flat", lambda: False)
    assert scoring._ScoreSource(gi, len(v)).part(None).rechecked is not None
    monkeypatch.setattr(recheck, "PATH", "full")
    assert scoring._ScoreSource(gi, len(v)).part(None).rechecked is None


def test_an_unknown_path_name_is_a_one_line_input_error(monkeypatch):
    monkeypatch.setattr(recheck, "PATH", "fast")
    with pytest.raises(InputError) as err:
        recheck.available()
    assert err.value.one_line().startswith("unknown FPR_EXACT_PATH 'fast'") and "auto, recheck or full" in \
        err.value.one_line()
