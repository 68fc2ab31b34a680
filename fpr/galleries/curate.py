"""Curation: from a pool of labelled images to a reference set and a gallery.

Rules (the paper's protocol): a reference image is never in the gallery; each
group keeps N identities and each identity M gallery images, sampled ``random``
or by ``kmeans`` (k-means with k=M on embeddings, keep the image nearest each
centroid); exact duplicates (same content hash) are removed and reported.
Sampling is seeded per (seed, group, identity), so adding an identity does not
reshuffle the others.
"""
from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from typing import Callable, Sequence

import numpy as np

from fpr import keys
from fpr.defaults import SAMPLINGS  # re-exported
from fpr.errors import InputError
from fpr.galleries.records import GalleryItem, ImageRecord
from fpr.keys import keyed_rng

EmbedFn = Callable[[Sequence[str]], np.ndarray]


@dataclass(frozen=True)
class GallerySpec:
    references_per_identity: int = 0  # for images without a role: how many become references
    gallery_per_identity: int | None = None  # M (None: keep all)
    identities_per_group: int | None = None  # N (None: keep all)
    sampling: str = "random"
    seed: int = 0
    min_identities_per_group: int = 2

    def __post_init__(self) -> None:
        if self.sampling not in SAMPLINGS:
            raise InputError(f"unknown sampling '{self.sampling}'", hint=f"valid: {', '.join(SAMPLINGS)}")
        for name in ("references_per_identity", "gallery_per_identity", "identities_per_group"):
            v = getattr(self, name)
            if v is not None and v < (0 if name == "references_per_identity" else 1):
                raise InputError(f"{name.replace('_', '-')} must be positive, got {v}")

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)


@dataclass
class CurationReport:
    duplicates: list[tuple[str, str]] = field(default_factory=list)  # (dropped path, kept path)
    conflicting_duplicates: int = 0  # duplicates whose labels disagreed
    identities_without_gallery: list[str] = field(default_factory=list)
    groups_short_of_identities: list[str] = field(default_factory=list)
    gallery_asked: int | None = None  # --per-identity
    short_of_gallery: dict[str, int] = field(default_factory=dict)  # group/identity -> gallery images it got
    references_asked: int = 0  # --references (images without a role)
    short_of_references: dict[str, int] = field(default_factory=dict)  # group/identity -> references it got
    n_identities: int = 0  # identities kept

    def warnings(self) -> list[str]:
        """One line per way the gallery differs from what was asked (fewer images than requested)."""
        out = []
        for what, asked, short in (("gallery images", self.gallery_asked, self.short_of_gallery),
                                   ("reference images", self.references_asked, self.short_of_references)):
            if asked and short:
                worst = min(short, key=lambda k: (short[k], k))
                out.append(f"asked for {asked} {what} per identity; {len(short)} of {self.n_identities} "
                           f"identities have fewer (as few as {short[worst]}: {worst}); they keep all they have")
        return out

    def lines(self) -> list[str]:
        out = []
        if self.duplicates:
            out.append(f"removed {len(self.duplicates)} exact duplicate image(s)"
                       + (f", {self.conflicting_duplicates} with conflicting labels" if self.conflicting_duplicates
                          else "") + f"; e.g. {self.duplicates[0][0]} == {self.duplicates[0][1]}")
        if self.identities_without_gallery:
            out.append(f"dropped {len(self.identities_without_gallery)} identit(y/ies) with no gallery image left: "
                       + ", ".join(self.identities_without_gallery[:5]))
        if self.groups_short_of_identities:
            out.append("group(s) with fewer identities than requested (kept all): "
                       + ", ".join(self.groups_short_of_identities))
        return out




def dedupe(records: list[ImageRecord], report: CurationReport) -> list[ImageRecord]:
    kept: dict[str, ImageRecord] = {}
    out = []
    for r in records:
        assert r.content_hash, "hash records before curating"
        first = kept.get(r.content_hash)
        if first is None:
            kept[r.content_hash] = r
            out.append(r)
            continue
        report.duplicates.append((r.path, first.path))
        if (first.identity, first.group) != (r.identity, r.group):
            report.conflicting_duplicates += 1
    return out


def kmeans_pick(vectors: np.ndarray, k: int, seed: int) -> list[int]:
    """Indices of the rows nearest each of k centroids (distinct rows)."""
    from sklearn.cluster import KMeans
    from threadpoolctl import threadpool_limits

    if k >= len(vectors):
        return list(range(len(vectors)))
    # One identity's images are few: BLAS threads cost more than they save (160 ms vs 12 ms measured).
    with threadpool_limits(1):
        km = KMeans(n_clusters=k, n_init=10, random_state=seed).fit(vectors)
    d = ((vectors[:, None, :] - km.cluster_centers_[None, :, :]) ** 2).sum(-1)  # (n, k)
    chosen: list[int] = []
    for c in range(k):
        for i in np.argsort(d[:, c], kind="stable"):
            if int(i) not in chosen:
                chosen.append(int(i))
                break
    return sorted(chosen)


def curate(records: list[ImageRecord], spec: GallerySpec, *, embed: EmbedFn | None = None,
           where: str = "gallery") -> tuple[list[GalleryItem], CurationReport]:
    report = CurationReport()
    records = dedupe(records, report)
    by_group: dict[str, dict[str, list[ImageRecord]]] = defaultdict(lambda: defaultdict(list))
    for r in records:
        by_group[r.group][r.identity].append(r)

    chosen: list[tuple[ImageRecord, str]] = []
    for group in sorted(by_group):
        identities = sorted(by_group[group])
        if spec.identities_per_group is not None:
            if len(identities) < spec.identities_per_group:
                report.groups_short_of_identities.append(f"{group} ({len(identities)})")
            else:
                pick = keyed_rng(spec.seed, group).choice(len(identities), spec.identities_per_group, replace=False)
                identities = [identities[i] for i in sorted(pick)]
        kept_identities = 0
        for ident in identities:
            items = _split_identity(by_group[group][ident], spec, group, ident, embed)
            if not any(role == "gallery" for _, role in items):
                report.identities_without_gallery.append(f"{group}/{ident}")
                continue
            kept_identities += 1
            chosen.extend(items)
            _count_short(report, f"{group}/{ident}", items, by_group[group][ident], spec)
        if kept_identities < spec.min_identities_per_group:
            raise InputError(f"group '{group}' has {kept_identities} identit{'y' if kept_identities == 1 else 'ies'} "
                             f"with gallery images; at least {spec.min_identities_per_group} are needed to rank",
                             where=where, hint="add identities to the group or remove the group")
    chosen.sort(key=lambda t: (t[0].group, t[0].identity, t[1] != "reference", t[0].path))
    items = [GalleryItem(i, r.path, r.content_hash or "", r.identity, r.group, role)
             for i, (r, role) in enumerate(chosen)]
    return items, report


def _count_short(report: CurationReport, key: str, items: list[tuple[ImageRecord, str]],
                 records: list[ImageRecord], spec: GallerySpec) -> None:
    """Note an identity that got fewer gallery images (or, from images without a role, fewer references)
    than the spec asks for."""
    report.n_identities += 1
    report.gallery_asked, report.references_asked = spec.gallery_per_identity, spec.references_per_identity
    n_gallery = sum(role == "gallery" for _, role in items)
    if spec.gallery_per_identity is not None and n_gallery < spec.gallery_per_identity:
        report.short_of_gallery[key] = n_gallery
    n_refs = sum(role == "reference" for _, role in items)
    given = any(r.role == "reference" for r in records)  # references named by the data are taken as they are
    if not given and n_refs < spec.references_per_identity:
        report.short_of_references[key] = n_refs


def _split_identity(recs: list[ImageRecord], spec: GallerySpec, group: str, ident: str,
                    embed: EmbedFn | None) -> list[tuple[ImageRecord, str]]:
    recs = sorted(recs, key=lambda r: r.path)
    rng = keyed_rng(spec.seed, group, ident)
    refs = [r for r in recs if r.role == "reference"]
    pool = [r for r in recs if r.role != "reference"]
    unassigned = [r for r in pool if r.role is None]
    if not refs and spec.references_per_identity and unassigned:
        n = min(spec.references_per_identity, max(0, len(unassigned) - 1))  # leave at least one for the gallery
        pick = set(rng.choice(len(unassigned), n, replace=False).tolist()) if n else set()
        refs = [r for i, r in enumerate(unassigned) if i in pick]
        ref_paths = {r.path for r in refs}
        pool = [r for r in pool if r.path not in ref_paths]
    m = spec.gallery_per_identity
    if m is not None and len(pool) > m:
        if spec.sampling == "kmeans":
            if embed is None:
                raise InputError("k-means sampling needs an encoder", hint="pass --encoder")
            vecs = np.asarray(embed([r.path for r in pool]), dtype=np.float64)
            pool = [pool[i] for i in kmeans_pick(vecs, m, spec.seed)]
        else:
            pool = [pool[i] for i in sorted(rng.choice(len(pool), m, replace=False).tolist())]
    return [(r, "reference") for r in refs] + [(r, "gallery") for r in pool]


def gallery_fingerprint(items: list[GalleryItem]) -> str:
    h = keys.hasher()
    for it in sorted(items, key=lambda i: i.item_id):
        h.update(f"{it.item_id}|{it.content_hash}|{it.identity}|{it.group}|{it.role}\n".encode())
    return "sha256:" + h.hexdigest()
