"""WildlifeReID-10k: ``metadata.csv`` plus the image folders it points to.

The CSV (as published on Kaggle, ``wildlifedatasets/wildlifereid-10k``, and read
by the ``wildlife-datasets`` package) has one row per image with at least
``identity``, ``path`` and ``species``; ``dataset``, ``split``, ``orientation``
and ``date`` are kept as provenance when present. ``path`` is relative to the
folder holding ``metadata.csv`` (older releases: relative to its ``images/``).

Identity = individual. When the same identity string occurs in more than one
source dataset, every identity is prefixed with its dataset (``<dataset>_<identity>``)
so that individuals never merge across datasets.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Iterable

import pandas as pd

from fpr.errors import InputError
from fpr.galleries.datasets._common import check_files_exist, find_root, require_dir
from fpr.galleries.records import ImageRecord

REQUIRED_COLUMNS = ("identity", "path", "species")
OPTIONAL_COLUMNS = ("dataset", "split", "orientation", "date")


def normalize_species(value: str) -> str:
    return re.sub(r"[^a-z0-9]+", " ", str(value).lower()).strip()


WILDLIFE_SPECIES: dict[str, tuple[str, ...]] = {  # group -> accepted species values (normalised), besides the name
    "cow": ("cow", "cows", "cattle", "holstein friesian cattle", "friesian cattle"),
    "zebra": ("zebra", "plains zebra", "grevy s zebra", "grevys zebra"),
    "tiger": ("tiger", "amur tiger", "bengal tiger"),
    "giraffe": ("giraffe", "masai giraffe", "reticulated giraffe"),
    "leopard": ("leopard", "african leopard", "amur leopard"),
}


# species whose names contain a group's word but are other animals
NOT_THE_SPECIES = ("snow leopard", "leopard seal", "leopard shark", "tiger shark", "sea cow", "zebra shark",
                   "zebra finch", "tiger snake")


def species_group(value: str, species: dict[str, tuple[str, ...]] = WILDLIFE_SPECIES) -> str | None:
    """Raw species value -> preset group: an alias, or the group name as a word of it (not :data:`NOT_THE_SPECIES`)."""
    norm = normalize_species(value)
    words = set(norm.split())
    for group, aliases in species.items():
        if norm == group or norm in aliases or (group in words and norm not in NOT_THE_SPECIES):
            return group
    return None


def species_groups(values: Iterable[str], species: dict[str, tuple[str, ...]] = WILDLIFE_SPECIES
                   ) -> dict[str, str]:
    """Raw species values -> group (values of no group are left out)."""
    out = {}
    for v in sorted({str(v) for v in values}):
        group = species_group(v, species)
        if group is not None:
            out[v] = group
    return out


def find_wildlife_root(root: str | Path) -> Path:
    base = require_dir(root, "WildlifeReID-10k")
    found = find_root(base, "metadata.csv", ("WildlifeReID-10k", "wildlifereid-10k", "WildlifeReID-10K"))
    if not (found / "metadata.csv").is_file():
        raise InputError("not a WildlifeReID-10k folder: missing metadata.csv", where=str(base),
                         hint="give the folder extracted from the Kaggle archive (metadata.csv + images/)")
    return found


def read_metadata(root: str | Path) -> tuple[Path, pd.DataFrame]:
    folder = find_wildlife_root(root)
    path = folder / "metadata.csv"
    try:
        df = pd.read_csv(path, low_memory=False, dtype={"identity": str, "path": str, "species": str})
    except (ValueError, OSError, pd.errors.ParserError) as exc:
        raise InputError(f"unreadable metadata.csv ({exc})", where=str(path)) from None
    missing = [c for c in REQUIRED_COLUMNS if c not in df.columns]
    if missing:
        raise InputError(f"metadata.csv lacks column(s) {', '.join(missing)}", where=str(path),
                         hint=f"WildlifeReID-10k's metadata.csv has {', '.join(REQUIRED_COLUMNS + OPTIONAL_COLUMNS)}")
    bad = df[list(REQUIRED_COLUMNS)].isna().any(axis=1)
    if bad.any():
        row = int(bad.idxmax())
        raise InputError(f"metadata.csv has {int(bad.sum())} row(s) with an empty identity/path/species "
                         f"(first: data row {row + 1})", where=str(path))
    return folder, df


def _image_path(folder: Path, rel: str) -> str:
    p = folder / rel
    if not p.exists() and (folder / "images" / rel).exists():
        p = folder / "images" / rel
    return str(p)


def records_from_frame(folder: Path, df: pd.DataFrame, group_of: dict[str, str] | None = None,
                       check_files: bool = True) -> list[ImageRecord]:
    """Rows -> records; ``group_of`` maps raw species values to group names (default: the normalised species)."""
    ident = df["identity"].astype(str)
    if "dataset" in df.columns:
        per_identity = df.groupby(ident)["dataset"].nunique()
        if (per_identity > 1).any():
            ident = df["dataset"].astype(str) + "_" + ident
    records = []
    for i, row in enumerate(df.itertuples(index=False)):
        d = row._asdict()
        species = str(d["species"])
        extra = {c: (None if pd.isna(d.get(c)) else str(d.get(c))) for c in OPTIONAL_COLUMNS if c in d}
        extra["species"] = species
        records.append(ImageRecord(
            path=_image_path(folder, str(d["path"])), identity=ident.iloc[i],
            group=(group_of or {}).get(species, normalize_species(species).replace(" ", "_")),
            split=extra.get("split"), extra=extra))
    if check_files:
        check_files_exist(records, folder, "WildlifeReID-10k", "metadata.csv")
    return records


def read_wildlife_reid10k(root: str | Path, *, species: Iterable[str] | None = None,
                          check_files: bool = True) -> list[ImageRecord]:
    """All images (or those of the given raw species values); group = species."""
    folder, df = read_metadata(root)
    if species is not None:
        wanted = {normalize_species(s) for s in species}
        df = df[df["species"].map(normalize_species).isin(wanted)]
        if df.empty:
            raise InputError("no WildlifeReID-10k images of the requested species",
                             where=str(folder / "metadata.csv"))
    return records_from_frame(folder, df.reset_index(drop=True), check_files=check_files)
