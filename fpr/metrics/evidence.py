"""Where in a query image its identity evidence lies: occlusion maps and their localisation scores (pure numbers).

``fpr explain`` hides one square patch of the query at a time (:func:`occlusion_boxes`, :func:`occlude`),
embeds every occluded copy with the run's encoder and measures, per copy, the query's *identity margin*:

    margin(q) = evidence(q, true identity) - evidence(q, best impostor)
    evidence(q, c) = mean cosine of q to identity c's gallery vectors (the run's index, the query's scope)

The best impostor is the impostor identity of highest evidence for the unoccluded query, fixed for every copy.
A patch's value is ``margin(query) - margin(query with the patch hidden)``: positive where the patch carries
the true identity's evidence (hiding it costs margin), negative where it matches the impostor better than the
true identity (hiding it gains margin). A pixel's value is the mean over the patches that cover it
(:func:`patch_map`). The variant ``true`` uses the true identity's evidence alone (no impostor term).

Localisation against a known region (the world's redrawn markings): the pointing game (Zhang et al., 2016:
a hit when the map's extreme point lies within ``tolerance`` pixels of the region; 15 px at 224 px, scaled
to the image) and the IoU of the map's top region (the as many most impostor-like pixels as the region has)
with the region. Ties are broken by pixel order (row-major), so every figure is deterministic.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fpr.defaults import EXPLAIN_VARIANTS as EVIDENCE_VARIANTS  # true: the true identity alone; margin: vs impostor
FILLS = ("mean", "grey")  # what a hidden patch shows: the image's mean colour, or mid grey


@dataclass(frozen=True)
class Box:
    y0: int
    x0: int
    y1: int
    x1: int


def _starts(n: int, patch: int, stride: int) -> list[int]:
    if patch >= n:
        return [0]
    out = list(range(0, n - patch + 1, stride))
    if out[-1] != n - patch:  # the last patch flush with the edge, so every pixel is covered
        out.append(n - patch)
    return out


def occlusion_boxes(height: int, width: int, patch: int, stride: int) -> list[Box]:
    """Square patches of side ``patch`` every ``stride`` pixels (row-major), covering every pixel."""
    if patch < 1 or stride < 1:
        raise ValueError(f"patch and stride must be >= 1, got {patch}, {stride}")
    return [Box(y, x, min(y + patch, height), min(x + patch, width))
            for y in _starts(height, patch, stride) for x in _starts(width, patch, stride)]


def occlude(image: np.ndarray, boxes: list[Box], fill: str = "mean") -> np.ndarray:
    """(P, H, W, C) uint8: ``image`` (H, W, C uint8) with each box hidden by ``fill``."""
    if fill not in FILLS:
        raise ValueError(f"unknown fill '{fill}' (valid: {', '.join(FILLS)})")
    colour = (np.round(image.reshape(-1, image.shape[-1]).mean(0)) if fill == "mean"
              else np.full(image.shape[-1], 128.0)).astype(np.uint8)
    out = np.repeat(image[None], len(boxes), axis=0)
    for i, b in enumerate(boxes):
        out[i, b.y0:b.y1, b.x0:b.x1] = colour
    return out


def identity_evidence(vectors: np.ndarray, gallery: np.ndarray, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(N, K) mean inner product of each vector with each identity's gallery vectors, and the K identity keys
    (sorted). ``gallery`` (G, D) and ``vectors`` (N, D) are the index's normalised vectors (cosine)."""
    uniq, inv = np.unique(np.asarray(keys, dtype=object).astype(str), return_inverse=True)
    onehot = np.zeros((len(keys), len(uniq)), np.float64)
    onehot[np.arange(len(keys)), inv] = 1.0
    onehot /= onehot.sum(0, keepdims=True)
    scores = np.asarray(vectors, np.float64) @ np.asarray(gallery, np.float64).T
    return scores @ onehot, uniq


@dataclass
class EvidenceMap:
    """One query's map: ``values`` (H, W), positive = true identity's evidence, negative = impostor-better."""

    values: np.ndarray
    patch_values: np.ndarray  # (P,) one per box
    boxes: list[Box]
    true_identity: str
    impostor: str | None  # the best impostor identity (None when the scope has no other identity)
    margin: float  # the unoccluded query's evidence for its identity minus the best impostor's (NaN without one)
    true_evidence: float
    impostor_evidence: float | None
    variant: str


def evidence_map(query: np.ndarray, occluded: np.ndarray, boxes: list[Box], gallery: np.ndarray, keys: np.ndarray,
                 true_key: str, shape: tuple[int, int], variant: str = "true") -> EvidenceMap:
    """The occlusion map of one query: ``query`` (D,) its vector, ``occluded`` (P, D) the vectors of its
    occluded copies (one per box), ``gallery`` (G, D) and ``keys`` (G,) the gallery rows in its scope and their
    identity keys, ``true_key`` its identity's key; ``shape`` the image's (H, W)."""
    if variant not in EVIDENCE_VARIANTS:
        raise ValueError(f"unknown evidence variant '{variant}' (valid: {', '.join(EVIDENCE_VARIANTS)})")
    ev, ids = identity_evidence(np.vstack([np.asarray(query)[None], occluded]), gallery, keys)
    t = int(np.searchsorted(ids, str(true_key)))
    if t >= len(ids) or ids[t] != str(true_key):
        raise ValueError(f"identity '{true_key}' has no gallery vector in the query's scope")
    others = np.delete(np.arange(len(ids)), t)
    j = int(others[np.argmax(ev[0, others])]) if len(others) else None  # first of the highest (ids sorted)
    score = ev[:, t] - (ev[:, j] if (variant == "margin" and j is not None) else 0.0)
    patch_values = score[0] - score[1:]
    margin = float(ev[0, t] - ev[0, j]) if j is not None else float("nan")
    return EvidenceMap(patch_map(patch_values, boxes, shape), patch_values, boxes, str(ids[t]),
                       None if j is None else str(ids[j]), margin, float(ev[0, t]),
                       None if j is None else float(ev[0, j]), variant)


def patch_map(patch_values: np.ndarray, boxes: list[Box], shape: tuple[int, int]) -> np.ndarray:
    """(H, W) float64: each pixel the mean value of the boxes covering it (0 where none does)."""
    total = np.zeros(shape, np.float64)
    count = np.zeros(shape, np.float64)
    for v, b in zip(np.asarray(patch_values, np.float64), boxes):
        total[b.y0:b.y1, b.x0:b.x1] += v
        count[b.y0:b.y1, b.x0:b.x1] += 1
    return np.divide(total, count, out=np.zeros(shape), where=count > 0)


def pointing_tolerance(size: int) -> int:
    """The pointing game's tolerance: 15 px at 224 px (Zhang et al., 2016), scaled to a side of ``size``."""
    return int(round(15 * size / 224))


def _dilate(mask: np.ndarray, r: int) -> np.ndarray:
    """``mask`` grown by a disc of radius ``r`` pixels."""
    if r <= 0 or not mask.any():
        return mask.copy()
    h, w = mask.shape
    out = np.zeros_like(mask)
    for dy in range(-r, r + 1):
        for dx in range(-r, r + 1):
            if dy * dy + dx * dx > r * r:
                continue
            src = mask[max(0, -dy):h - max(0, dy), max(0, -dx):w - max(0, dx)]
            out[max(0, dy):h - max(0, -dy), max(0, dx):w - max(0, -dx)] |= src
    return out


def lowest_point(values: np.ndarray) -> tuple[int, int]:
    """(row, col) of the map's lowest value (most impostor-like); the first in row-major order on ties."""
    i = int(np.argmin(np.asarray(values).ravel()))
    return divmod(i, values.shape[1])


def pointing_hit(values: np.ndarray, region: np.ndarray, tolerance: int) -> bool:
    """Whether the map's lowest point lies within ``tolerance`` pixels of ``region`` (bool, same shape)."""
    y, x = lowest_point(values)
    return bool(_dilate(region, tolerance)[y, x])


def top_region(values: np.ndarray, n: int) -> np.ndarray:
    """The ``n`` lowest pixels of the map (bool mask); ties in row-major order."""
    order = np.argsort(np.asarray(values).ravel(), kind="stable")[:max(int(n), 0)]
    out = np.zeros(values.size, dtype=bool)
    out[order] = True
    return out.reshape(values.shape)


def region_iou(values: np.ndarray, region: np.ndarray) -> float:
    """IoU of the map's top region (as many lowest pixels as ``region`` has) with ``region``; NaN if it is empty."""
    n = int(region.sum())
    if n == 0:
        return float("nan")
    top = top_region(values, n)
    return float((top & region).sum() / (top | region).sum())
