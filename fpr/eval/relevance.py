"""Gallery labels, scope and relevance: which gallery rows a query is ranked against and which are its
identity's; the index a run opens (checked against the stored gallery); the "no relevant image" check.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pandas as pd

from fpr.defaults import SCOPES  # re-exported (fpr.api.SCOPES)
from fpr.errors import InputError
from fpr.galleries.records import GalleryItem
from fpr.index import faiss_index
from fpr.store import records as db
from fpr.store.workspace import Workspace



SKIP_NO_RELEVANT = "skipped:no-relevant"


_KEY_SEP = "\x1f"


@dataclass
class GalleryItemLabel:
    item_id: int
    path: str
    identity: str
    group: str


@dataclass
class GalleryLabels:
    """Labels of an index's gallery rows (FAISS order) and of its reference vectors."""

    item_ids: np.ndarray  # (G,) gallery item id per FAISS row
    groups: np.ndarray  # (G,) object
    identities: np.ndarray  # (G,) object
    ref_vectors: np.ndarray  # (R, dim)
    ref_groups: np.ndarray
    ref_identities: np.ndarray
    ref_paths: list[str]
    paths: list[str]

    @classmethod
    def from_items(cls, item_ids: np.ndarray, ref_ids: np.ndarray, ref_vectors: np.ndarray,
                   items: Sequence) -> "GalleryLabels":
        """``items``: objects with item_id, path, identity, group (e.g. stored gallery items)."""
        by_id = {int(it.item_id): it for it in items}
        rows = [by_id[int(i)] for i in item_ids]
        refs = [by_id[int(i)] for i in ref_ids]
        return cls(np.asarray(item_ids, dtype=np.int64), np.array([r.group for r in rows], dtype=object),
                   np.array([r.identity for r in rows], dtype=object), np.asarray(ref_vectors, np.float32),
                   np.array([r.group for r in refs], dtype=object), np.array([r.identity for r in refs], dtype=object),
                   [r.path for r in refs], [r.path for r in rows])

    def keys(self) -> np.ndarray:
        return identity_keys(self.groups, self.identities)

    def codes(self, qdf: pd.DataFrame) -> "LabelCodes":
        """Integer codes of the gallery's and the queries' groups and (group, identity) keys.

        Labels are compared as codes: string comparison over a (Q, G) grid costs more than
        the retrieval itself, and the streamed evaluation builds its masks per block from them.
        """
        n = len(self.groups)
        group_codes = pd.factorize(pd.Series(list(self.groups) + qdf["group"].tolist(), dtype=object))[0]
        key_codes = pd.factorize(pd.Series(list(self.keys()) + list(identity_keys(qdf["group"], qdf["identity"])),
                                           dtype=object))[0]
        return LabelCodes(group_codes[:n], key_codes[:n], group_codes[n:], key_codes[n:])

    def has_relevant(self, qdf: pd.DataFrame) -> np.ndarray:
        """(Q,) whether each query has a relevant gallery item (same group and identity, so in
        either scope); O(Q + G), no (Q, G) mask."""
        c = self.codes(qdf)
        counts = np.bincount(c.g_key, minlength=int(max(c.g_key.max(initial=-1), c.q_key.max(initial=-1))) + 1)
        return counts[c.q_key] > 0

    def candidates(self, qdf: pd.DataFrame, scope: str) -> np.ndarray:
        """(Q,) how many gallery rows each query is ranked against in ``scope``; O(Q + G)."""
        check_scope(scope)
        if scope == "all":
            return np.full(len(qdf), len(self.groups), dtype=np.int64)
        c = self.codes(qdf)
        counts = np.bincount(c.g_group, minlength=int(max(c.g_group.max(initial=-1), c.q_group.max(initial=-1))) + 1)
        return counts[c.q_group].astype(np.int64)

    def relevance(self, qdf: pd.DataFrame, scope: str) -> tuple[np.ndarray, np.ndarray]:
        """(Q, G) boolean masks: items in each query's scope, and relevant items in scope.

        Relevant = same (group, identity). The in-memory definition (tests and small inputs);
        :func:`evaluate` builds the same masks block by block from :meth:`codes`.
        """
        check_scope(scope)
        c = self.codes(qdf)
        scope_mask = np.ones((len(c.q_group), len(c.g_group)), dtype=bool) if scope == "all" \
            else c.q_group[:, None] == c.g_group[None, :]
        return scope_mask, (c.q_key[:, None] == c.g_key[None, :]) & scope_mask

    def references_by_key(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for k, p in zip(identity_keys(self.ref_groups, self.ref_identities), self.ref_paths):
            out.setdefault(k, []).append(p)
        return out


@dataclass
class LabelCodes:
    """Label codes of one gallery (G rows) and one set of queries (Q rows)."""

    g_group: np.ndarray
    g_key: np.ndarray
    q_group: np.ndarray
    q_key: np.ndarray


@dataclass
class OpenIndex:
    """An index's current version, its pointer row, and its gallery's items and labels."""

    index: faiss_index.GalleryIndex
    row: db.IndexRow
    items: list[GalleryItem]
    labels: GalleryLabels


def gallery_items(ws: Workspace, name: str) -> list[GalleryItem]:
    return [GalleryItem(*r) for r in db.gallery_item_rows(ws, name)]


def open_index(ws: Workspace, name: str, *, encoder: str | None = None) -> OpenIndex:
    """Load the version an index's pointer names, checked against its stored gallery."""
    row = db.get_index(ws, name)
    gallery = db.get_gallery(ws, row.gallery)
    gi = faiss_index.load(ws.absolute(row.path), encoder=encoder, gallery_fingerprint=gallery.fingerprint)
    items = gallery_items(ws, row.gallery)
    labels = GalleryLabels.from_items(gi.item_ids, gi.ref_ids, gi.ref_vectors, items)
    return OpenIndex(gi, row, items, labels)


def index_change(run: db.RunRow, current: db.IndexRow | None) -> str | None:
    """Why a run's index is no longer what it ran against (None when it still is)."""
    if current is None:
        return "no longer exists"
    if run.index_version is not None and run.index_version != current.version:
        return f"has been rebuilt since (version {run.index_version or 'of fpr 0.1'} -> {current.version})"
    if run.gallery_fingerprint and run.gallery_fingerprint != current.gallery_fingerprint:
        return "now indexes a different gallery content"
    if run.weights_checksum and run.weights_checksum != current.weights_checksum:
        return "now uses different encoder weights"
    return None


def identity_keys(groups, identities) -> np.ndarray:
    """One key per (group, identity): relevance is equality of keys."""
    return np.array([f"{g}{_KEY_SEP}{i}" for g, i in zip(groups, identities)], dtype=object)


def check_scope(scope: str) -> str:
    if scope not in SCOPES:
        raise InputError(f"unknown scope '{scope}'", hint=f"valid: {', '.join(SCOPES)}")
    return scope


def missing_identities(qdf: pd.DataFrame, has_relevant: np.ndarray, *, skip: bool, where: str) -> np.ndarray:
    """Status per query: "ok", or ``skipped:no-relevant`` when skipping; raises listing them otherwise.

    ``has_relevant[q]``: the query has at least one gallery image of its identity in scope.
    """
    status = np.array(["ok"] * len(qdf), dtype=object)
    no_rel = ~np.asarray(has_relevant, dtype=bool)
    if no_rel.any():
        if not skip:
            missing = sorted({f"{g}/{i}" for g, i in zip(qdf["group"][no_rel], qdf["identity"][no_rel])})
            n = int(no_rel.sum())
            raise InputError(f"{n} quer{'y has' if n == 1 else 'ies have'} no gallery image of their identity in "
                             f"scope: {', '.join(missing[:8])}" + (" ..." if len(missing) > 8 else ""), where=where,
                             hint="fix the identity/group labels, add those identities to the gallery, or pass "
                                  "--skip-missing-identities")
        status[no_rel] = SKIP_NO_RELEVANT
    return status
