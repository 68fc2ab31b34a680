"""Curation: from a pool of labelled images to a reference set and a gallery.

Rules (the paper's protocol): a reference image is never in the gallery; each
group keeps N identities and each identity M gallery images, sampled ``random``
or by ``kmeans`` (k-means with k=M on embeddings, keep the image nearest each
centroid); exact duplicates (same content hash) are removed and reported.
Sampling is seeded per (seed, group, identity), so adding an identity does not
reshuffle the others.

Nearest impostors (``impostors`` K, the paper's "visually similar" identities): instead of N
identities at random, a group keeps its identities of interest (``of_interest``: those the queries
name; default every identity) and, for each, the K other identities of the group whose centroid (the
mean of the identity's unit-normalised image embeddings) has the highest cosine with its own under the
curation's encoder, so the gallery is as hard as that encoder finds it. This module never loads a
model: the caller passes ``embed(paths) -> vectors`` (as for k-means sampling).
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
    impostors: int | None = None  # K nearest impostor identities kept per identity of interest (None: off)
    of_interest: tuple[str, ...] = ()  # identities of interest ("identity" or "group/identity"); () = all
    impostor_encoder: str | None = None  # the encoder the impostors are nearest under (recorded; the caller embeds)

    def __post_init__(self) -> None:
        object.__setattr__(self, "of_interest", tuple(self.of_interest))
        if self.impostors is not None and self.impostors < 1:
            raise InputError(f"impostors must be positive, got {self.impostors}")
        if self.impostors is not None and self.identities_per_group is not None:
            raise InputError("give --impostors or --identities-per-group, not both",
                             hint="--impostors keeps the identities of interest and their nearest impostors")
        if self.of_interest and self.impostors is None:
            raise InputError("identities of interest select nearest impostors: pass --impostors K too")
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
    impostors: dict[str, list[tuple[str, float]]] = field(default_factory=dict)  # group/identity -> (impostor, cos)

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
        if self.impostors:
            nearest = [imps[0][1] for imps in self.impostors.values() if imps]
            out.append(f"kept {len(self.impostors)} identit{'y' if len(self.impostors) == 1 else 'ies'} of interest "
                       f"and their nearest impostors ({self.n_identities} identities in all); cosine of an "
                       f"identity's nearest impostor: mean {np.mean(nearest):.3f}, max {np.max(nearest):.3f}"
                       if nearest else f"kept {len(self.impostors)} identities of interest (no impostor left)")
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


def identity_centroids(images: dict[str, list[str]], embed: EmbedFn) -> dict[str, np.ndarray]:
    """Per identity: the unit-normalised mean of its images' unit-normalised embeddings (one embed call)."""
    names = sorted(images)
    paths = [p for n in names for p in images[n]]
    vecs = np.asarray(embed(paths), dtype=np.float64)
    if vecs.shape[0] != len(paths):
        raise InputError(f"the embed function returned {vecs.shape[0]} vectors for {len(paths)} images")
    vecs = vecs / np.maximum(np.linalg.norm(vecs, axis=1, keepdims=True), 1e-12)
    out, start = {}, 0
    for n in names:
        c = vecs[start:start + len(images[n])].mean(0)
        out[n] = c / max(float(np.linalg.norm(c)), 1e-12)
        start += len(images[n])
    return out


def nearest_impostors(centroids: dict[str, np.ndarray], of_interest: Sequence[str], k: int
                      ) -> dict[str, list[tuple[str, float]]]:
    """Per identity of interest: its ``k`` other identities of highest centroid cosine, (name, cosine), best
    first (ties by name)."""
    names = sorted(centroids)
    mat = np.stack([centroids[n] for n in names])
    out = {}
    for i in of_interest:
        cos = mat @ centroids[i]
        order = sorted((j for j in range(len(names)) if names[j] != i), key=lambda j: (-cos[j], names[j]))
        out[i] = [(names[j], float(cos[j])) for j in order[:k]]
    return out


def _interest_in(group: str, identities: list[str], spec: GallerySpec) -> list[str]:
    """The group's identities of interest: every one when none are named."""
    if not spec.of_interest:
        return identities
    named = {x.split("/", 1)[1] if "/" in x else x for x in spec.of_interest
             if "/" not in x or x.split("/", 1)[0] == group}
    return [i for i in identities if i in named]


def _impostor_identities(group: str, identities: list[str], idents: dict[str, list[ImageRecord]],
                         spec: GallerySpec, embed: EmbedFn | None, report: CurationReport) -> list[str]:
    """The group's identities of interest and their ``spec.impostors`` nearest impostors (sorted)."""
    interest = _interest_in(group, identities, spec)
    if not interest:
        return []
    if embed is None:
        raise InputError("nearest-impostor curation needs an encoder", hint="pass --impostor-encoder")
    centroids = identity_centroids({i: [r.path for r in sorted(idents[i], key=lambda r: r.path)]
                                    for i in identities}, embed)
    picks = nearest_impostors(centroids, interest, spec.impostors)
    for i, imps in picks.items():
        report.impostors[f"{group}/{i}"] = imps
    return sorted(set(interest) | {j for imps in picks.values() for j, _ in imps})


def curate(records: list[ImageRecord], spec: GallerySpec, *, embed: EmbedFn | None = None,
           where: str = "gallery", impostor_embed: EmbedFn | None = None) -> tuple[list[GalleryItem], CurationReport]:
    """Curate records into gallery items. ``embed``: vectors for k-means sampling; ``impostor_embed``: vectors
    for nearest-impostor identity selection (``spec.impostors``)."""
    report = CurationReport()
    records = dedupe(records, report)
    by_group: dict[str, dict[str, list[ImageRecord]]] = defaultdict(lambda: defaultdict(list))
    for r in records:
        by_group[r.group][r.identity].append(r)
    if spec.of_interest:
        known = {i for g in by_group.values() for i in g} | {f"{g}/{i}" for g, v in by_group.items() for i in v}
        missing = [x for x in spec.of_interest if x not in known]
        if missing:
            raise InputError(f"identity of interest '{missing[0]}' is not in the pool ({len(missing)} missing)",
                             where=where, hint="name identities the pool has (identity or group/identity)")

    chosen: list[tuple[ImageRecord, str]] = []
    for group in sorted(by_group):
        identities = sorted(by_group[group])
        if spec.impostors is not None:
            identities = _impostor_identities(group, identities, by_group[group], spec, impostor_embed, report)
            if not identities:
                continue  # no identity of interest in this group
        elif spec.identities_per_group is not None:
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
