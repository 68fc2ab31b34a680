"""Small helpers shared by the dataset importers."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

from fpr.errors import InputError
from fpr.galleries.curate import GallerySpec
from fpr.galleries.records import ImageRecord


def require_dir(root: str | Path, what: str) -> Path:
    p = Path(root).expanduser().resolve()
    if not p.exists():
        raise InputError(f"{what} folder not found", where=str(p))
    if not p.is_dir():
        raise InputError(f"{what} root must be a folder", where=str(p))
    return p


def find_root(root: Path, marker: str, subfolders: Iterable[str]) -> Path:
    """``root`` itself when it holds ``marker``, else the first named (or only) sub-folder that does."""
    if (root / marker).exists():
        return root
    for name in subfolders:
        if (root / name / marker).exists():
            return root / name
    subs = [d for d in root.iterdir() if d.is_dir() and (d / marker).exists()]
    return subs[0] if len(subs) == 1 else root


def check_files_exist(records: list[ImageRecord], root: Path, what: str, listed_in: str) -> None:
    missing = [r.path for r in records if not Path(r.path).is_file()]
    if missing:
        shown = str(Path(missing[0]).relative_to(root)) if Path(missing[0]).is_relative_to(root) else missing[0]
        raise InputError(f"{len(missing)} {what} image file(s) listed in {listed_in} are missing, e.g. {shown}",
                         where=str(root), hint="extract the full archive (images and annotations) into this folder")


def read_lines(path: Path, n_fields: int, what: str) -> list[list[str]]:
    """Whitespace-separated lines of ``n_fields`` fields (the last one may contain spaces)."""
    rows = []
    for i, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), start=1):
        if not line.strip():
            continue
        parts = line.strip().split(maxsplit=n_fields - 1)
        if len(parts) != n_fields:
            raise InputError(f"{what}: line {i} has {len(parts)} field(s), expected {n_fields}", where=str(path))
        rows.append(parts)
    if not rows:
        raise InputError(f"{what} is empty", where=str(path))
    return rows








@dataclass
class PresetResult:
    name: str  # the preset
    records: list[ImageRecord]
    spec: GallerySpec
    groups: dict[str, list[str]] = field(default_factory=dict)  # group -> identities
    notes: list[str] = field(default_factory=list)

    @property
    def default_gallery(self) -> str:
        return self.name


