"""Importing identity-labelled images from a manifest file or a folder tree."""
from __future__ import annotations

from pathlib import Path

from fpr.cards import utf8_path
from fpr.errors import InputError
from fpr.galleries.records import ROLES, ImageRecord
from fpr.images import IMAGE_SUFFIXES
from fpr.tables import read_table, resolve_path

MANIFEST_COLUMNS = ("path", "identity", "group")


def read_manifest(path: str | Path) -> list[ImageRecord]:
    """``path,identity,group[,role][,split]``; relative paths resolve against the manifest's folder."""
    p = Path(path)
    df = read_table(p, required=MANIFEST_COLUMNS, what="gallery manifest")
    base = p.resolve().parent
    roles = df["role"].str.lower() if "role" in df.columns else None
    if roles is not None:
        bad = roles[~roles.isin(("",) + ROLES)]
        if len(bad):
            raise InputError(f"gallery manifest has unknown role '{bad.iloc[0]}' in row {int(bad.index[0]) + 2}",
                             where=str(p), hint="role must be 'reference', 'gallery' or empty")
    records = []
    for i, row in enumerate(df.itertuples(index=False)):
        d = row._asdict()
        records.append(ImageRecord(
            path=resolve_path(d["path"], base), identity=d["identity"], group=d["group"],
            role=(roles.iloc[i] or None) if roles is not None else None,
            split=d.get("split") or None))
    return records


def read_folder(folder: str | Path) -> list[ImageRecord]:
    """A tree ``<folder>/<group>/<identity>/<image>``; other files are ignored, empty trees are an error."""
    root = Path(folder).expanduser().resolve()
    if not root.is_dir():
        raise InputError("gallery folder not found", where=str(root))
    records = []
    for group_dir in sorted(d for d in root.iterdir() if d.is_dir() and not d.name.startswith(".")):
        for ident_dir in sorted(d for d in group_dir.iterdir() if d.is_dir() and not d.name.startswith(".")):
            for img in sorted(ident_dir.iterdir()):
                if img.is_file() and img.suffix.lower() in IMAGE_SUFFIXES:
                    records.append(ImageRecord(utf8_path(img, what="gallery image name"), ident_dir.name,
                                               group_dir.name))
    if not records:
        raise InputError("no images found in the folder tree", where=str(root),
                         hint="expected <folder>/<group>/<identity>/<image>.jpg")
    return records
