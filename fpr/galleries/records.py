"""Records shared by every gallery source."""
from __future__ import annotations

from dataclasses import dataclass, field

ROLES = ("reference", "gallery")


@dataclass
class ImageRecord:
    """One identity-labelled real image from a source (manifest, folder, dataset, built-in world)."""

    path: str
    identity: str
    group: str
    role: str | None = None  # "reference" | "gallery" | None (let curation decide)
    content_hash: str | None = None
    split: str | None = None  # the source's own split label, kept for provenance (e.g. CUB train/test)
    extra: dict = field(default_factory=dict)


@dataclass
class GalleryItem:
    """An image as stored in a curated gallery."""

    item_id: int
    path: str
    content_hash: str
    identity: str
    group: str
    role: str  # "reference" | "gallery"
