"""Score world queries with the shipped specialist directly (no workspace): Sim and AP per query.

Sim is the mean cosine to the identity's reference images (fpr's default Sim references) and AP ranks the
query's group gallery, as ``fpr query`` does; kept small so the world's tests can afford three seeds.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class ProbeRow:
    method: str
    context: str
    drift: float
    species: str
    ident: int
    k: int
    sim: float
    ap: float


def auroc(pos, neg) -> float:
    """P(a positive scores above a negative), ties counted 1/2 (the Mann-Whitney statistic)."""
    p, n = np.asarray(pos, float)[:, None], np.asarray(neg, float)[None, :]
    return float(((p > n).sum() + 0.5 * (p == n).sum()) / (p.size * n.size))


def thumbnail(images) -> np.ndarray:
    """A context-sensitive stand-in: the 8x8 colour thumbnail, centred and unit-normalised (background dominates)."""
    x = np.stack([np.asarray(im.resize((8, 8)), np.float64).ravel() for im in images])
    x = x - x.mean(1, keepdims=True)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def embedder(encoder_id: str | None = None):
    """A shipped encoder (default: the specialist fpr-world-v3) on the CPU: images -> unit vectors."""
    import torch

    from fpr.encoders import registry
    from fpr.encoders.world import WORLD_ENCODER_ID

    enc = registry.load_encoder(encoder_id or WORLD_ENCODER_ID, device="cpu")

    def embed(images) -> np.ndarray:
        out = [enc.embed_batch(torch.stack([enc.preprocessing(im) for im in images[i:i + 64]]))
               for i in range(0, len(images), 64)]
        return np.concatenate(out).astype(np.float64)

    return embed


def probe(world, methods, embed, *, with_ap: bool = True) -> list[ProbeRow]:
    """Every query of ``methods`` (methods, old names or profiles) for every identity of ``world``.

    ``embed``: images -> unit vectors (rows); ``with_ap=False`` skips the gallery (AP is NaN), for Sim only.
    """
    from fpr.metrics.ranking import average_precision

    c = world.config
    rows = []
    for sp in c.species:
        ids = world.ids[sp]
        if with_ap:
            gal = embed([world.real_image(sp, i, "gallery", k) for i in ids for k in range(c.gallery)])
            labels = np.repeat(ids, c.gallery)
        refs = embed([world.real_image(sp, i, "reference", k) for i in ids for k in range(c.references)])
        ref_mean = refs.reshape(len(ids), c.references, -1).mean(1)
        jobs = [(m, i, k) for m in methods for i in ids for k in range(c.queries)]
        specs = [world.query_spec(m, sp, i, k) for m, i, k in jobs]
        q = embed([world._render_query(s, sp, i, k) for s, (m, i, k) in zip(specs, jobs)])
        for (m, i, k), s, v in zip(jobs, specs, q):
            sim = float(v @ ref_mean[ids.index(i)])
            ap = average_precision(gal @ v, labels == i) if with_ap else float("nan")
            rows.append(ProbeRow(m, s.context, s.drift, sp, i, k, sim, ap))
    return rows
