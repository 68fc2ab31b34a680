"""Synthetic clustered retrieval data for the scale benchmarks: unit vectors around ``ids`` identity
centres (noise 1.2), a flat FAISS index over the gallery, one group, scope-all label codes.

Imported by the subprocesses of bench_scale_memory.py and bench_topk_block.py (the same data for both,
seed 0), which put this folder on ``sys.path``.
"""
from __future__ import annotations

import numpy as np
import pandas as pd


def clustered(q: int, g: int, d: int, ids: int):
    """(query vectors, gallery vectors, GalleryIndex, GalleryLabels, query frame), seeded."""
    from fpr.eval import relevance
    from fpr.index import faiss_index as F

    rng = np.random.default_rng(0)
    centers = rng.standard_normal((ids, d)).astype(np.float32)
    gl = np.arange(g) % ids
    v = centers[gl] + 1.2 * rng.standard_normal((g, d)).astype(np.float32)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    ql = rng.integers(0, ids, q)
    qv = centers[ql] + 1.2 * rng.standard_normal((q, d)).astype(np.float32)
    qv /= np.linalg.norm(qv, axis=1, keepdims=True)
    card = F.IndexCard(name="big", gallery="g", gallery_fingerprint="f", encoder="synthetic", weights_checksum="-",
                       preprocessing="{}", dim=d, n_items=0, n_references=0)
    gi = F.build(v, np.arange(g), np.zeros((0, d), np.float32), np.zeros(0, np.int64), card)
    labels = relevance.GalleryLabels(np.arange(g), np.array(["grp"] * g, object),
                                     np.array([f"i{x}" for x in gl], object), np.zeros((0, d), np.float32),
                                     np.array([], object), np.array([], object), [], [""] * g)
    qdf = pd.DataFrame({"group": ["grp"] * q, "identity": [f"i{x}" for x in ql]})
    return qv, v, gi, labels, qdf
