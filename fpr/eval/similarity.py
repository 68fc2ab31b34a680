"""Sim: mean cosine of a query to its references (its own, its conditioning images, or its identity's).
"""
from __future__ import annotations

import math
from typing import Callable

import numpy as np
import pandas as pd

from fpr.eval.relevance import GalleryLabels, identity_keys

# Sim references, in order of precedence (stored per query in ``sim_source``).
SIM_SOURCES = {
    "sim_reference": "the query's own sim_reference image (the released code's non-DreamBooth Sim)",
    "reference_paths": "mean cosine to the query's reference_paths (the images it was conditioned on)",
    "identity": "mean cosine to every reference image of the query's identity in the gallery",
}


EmbedFn = Callable[..., object]  # fpr.encoders.embed.embed_paths-compatible


def row_dots(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(n,) float64: the correctly rounded sum of each row's rounded products, fsum_k fl(a_ik b_ik).

    A function of the values alone: elementwise products are IEEE-rounded whatever the SIMD width,
    and ``math.fsum`` rounds their exact sum once, so Sim does not depend on how a vectorised dot
    product orders its additions (numpy's dispatch differs between CPU kinds and builds)."""
    return np.array([math.fsum(row) for row in (a * b).tolist()], dtype=np.float64)


def pairwise_sim(qdf: pd.DataFrame, qvecs: np.ndarray, gallery: GalleryLabels, embed: EmbedFn
                 ) -> tuple[np.ndarray, np.ndarray, list[str | None]]:
    """Sim per query: mean cosine to its Sim references (see :data:`SIM_SOURCES` for which).

    Vectorised: each distinct reference set is reduced once to its mean vector (float64;
    identity sets all at once with one scatter-add over the gallery's reference vectors),
    and Sim = q . mean(refs), one row-wise product for every query. Memory is Q x dim,
    never Q x references.
    """
    n = len(qdf)
    dim = qvecs.shape[1] if qvecs.ndim == 2 else 0
    explicit = sorted({p for refs in qdf["reference_list"] for p in refs} | {p for p in qdf["sim_reference"] if p})
    ex_pos: dict[str, int] = {p: i for i, p in enumerate(explicit)}
    ex_vecs = np.zeros((0, dim))
    if explicit:
        ex_vecs = np.asarray(embed(explicit, on_error="raise", desc="embedding references").vectors, np.float64)
    sim_ref = qdf["sim_reference"].to_numpy(dtype=object)
    ref_lists = qdf["reference_list"].tolist()
    use_ref = np.array([bool(p) for p in sim_ref], dtype=bool)
    use_list = ~use_ref & np.array([len(r) > 0 for r in ref_lists], dtype=bool)
    use_key = ~use_ref & ~use_list
    means = np.zeros((n, dim))
    nrefs = np.zeros(n, dtype=np.int64)
    # the query's own sim_reference: one vector
    rows = np.flatnonzero(use_ref)
    if len(rows):
        means[rows] = ex_vecs[[ex_pos[p] for p in sim_ref[rows]]]
        nrefs[rows] = 1
    # reference_paths: the mean of each distinct list, computed once per list
    rows = np.flatnonzero(use_list)
    if len(rows):
        codes, lists = pd.factorize(pd.Series([";".join(ref_lists[i]) for i in rows], dtype=object))
        first = np.unique(codes, return_index=True)[1]  # a query of each distinct list
        set_means = np.stack([ex_vecs[[ex_pos[p] for p in ref_lists[rows[j]]]].mean(axis=0) for j in first])
        means[rows] = set_means[codes]
        nrefs[rows] = [len(ref_lists[i]) for i in rows]
    # identity: every reference image of the query's (group, identity) in the gallery
    rows = np.flatnonzero(use_key)
    if len(rows) and len(gallery.ref_groups):
        all_keys = pd.Series(list(identity_keys(gallery.ref_groups, gallery.ref_identities))
                             + list(identity_keys(qdf["group"].to_numpy()[rows], qdf["identity"].to_numpy()[rows])),
                             dtype=object)
        codes = pd.factorize(all_keys)[0]
        r_codes, q_codes = codes[:len(gallery.ref_groups)], codes[len(gallery.ref_groups):]
        n_codes = int(codes.max()) + 1
        counts = np.bincount(r_codes, minlength=n_codes)
        sums = np.zeros((n_codes, dim))
        np.add.at(sums, r_codes, np.asarray(gallery.ref_vectors, np.float64))
        key_means = sums / np.maximum(counts, 1)[:, None]
        means[rows] = key_means[q_codes]
        nrefs[rows] = counts[q_codes]
    sims = row_dots(np.asarray(qvecs, np.float64), means)
    sims[nrefs == 0] = np.nan
    names = np.where(use_ref, "sim_reference", np.where(use_list, "reference_paths", "identity"))
    sources = [str(src) if k else None for src, k in zip(names, nrefs)]
    return sims, nrefs, sources
