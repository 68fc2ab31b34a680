"""The ``*-official`` presets: the selections of the paper's released code, rule for rule.

The released evaluation code (GitHub ``OSU-MLB/Finer-Personalization-Rank``, commit
``b4552a6``, ``data_load_scripts/``) builds each dataset's reference ("train") and
gallery sets with pandas and numpy draws. These presets apply the same rules with the
same seeds to the same rows, so on the same dataset copy they pick the same images.
What each rule is, and where fpr has to choose (documented in docs/real-data.md):

``cub-official`` (``load_cub_data.py``)
    All CUB-200-2011 images of classes 113-117 (group ``sparrow``), 143-147
    (``tern``) and 193-197 (``wren``), train and test split alike, rows in
    ``images.txt`` order. Per group, one ``numpy.random.RandomState(seed)`` (seed
    101) draws 10 gallery images per species, species in sorted name order (what
    ``groupby('name').sample(n=10, random_state=101)`` does); the gallery images are
    removed and a fresh ``RandomState(seed)`` draws the 10 references the same way.
``cars-official`` (``load_cars_data.py``)
    The *test* split of the Hugging Face copy ``Donghyun99/Stanford-Cars``, labels
    1, 2, 3, 4, 6, 11, 12, 13, 18, 19, 25, 27, 28, 33, 34 (0-based into the copy's
    class list; :data:`CARS_OFFICIAL_LABELS` gives the names). Per label, in the
    copy's row order, the first 10 images are the gallery and the next 10 the
    references. No randomness.
``wildlife-official`` (``load_data_reid.py``)
    WildlifeReID-10k rows of the chosen species (and source datasets), in
    ``metadata.csv`` order, grouped by the raw ``identity`` string. Identities with
    at least 9 images draw ``min(n - 5, 10)`` references (a fresh
    ``RandomState(seed)`` per identity, seed 42, identities in sorted order); per
    species value, the 10 identities with the most references are kept (ties:
    identity name); each keeps ``min(rest, 15)`` gallery images drawn from the
    images that are not references, again with a fresh ``RandomState(seed)``.
``wildlife-official-ablation`` (``load_data_reid_ablation.py``)
    ``wildlife-official`` plus what the released ablation adds to the gallery: every
    identity of the chosen species (selected or not) contributes up to 15 more of its
    remaining images (fresh ``RandomState(seed)`` each). The other identities are the
    distractors ``fpr ablate --protocol official`` draws from.
"""
from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np
import pandas as pd

from fpr.errors import InputError, choices_hint
from fpr.galleries.curate import GallerySpec
from fpr.galleries.datasets._common import PresetResult, check_files_exist, require_dir
from fpr.galleries.datasets.cars import read_stanford_cars
from fpr.galleries.datasets.cub import read_cub
from fpr.galleries.datasets.wildlife import (
    WILDLIFE_SPECIES,
    normalize_species,
    read_metadata,
    records_from_frame,
    species_groups,
)
from fpr.galleries.records import ImageRecord

RELEASED = "OSU-MLB/Finer-Personalization-Rank@b4552a6"
CUB_OFFICIAL_GROUPS: dict[str, tuple[int, ...]] = {  # the order load_cub_data.py loads them in
    "wren": (193, 194, 195, 196, 197),
    "tern": (143, 144, 145, 146, 147),
    "sparrow": (113, 114, 115, 116, 117),
}
CUB_SEED = 101
CARS_SPLIT = "test"
# Label id (0-based into the class list of Donghyun99/Stanford-Cars, which follows the devkit's
# cars_meta.mat order: label = devkit class - 1) -> class name.
CARS_OFFICIAL_LABELS: dict[int, str] = {
    1: "Acura RL Sedan 2012", 2: "Acura TL Sedan 2012", 3: "Acura TL Type-S 2008", 4: "Acura TSX Sedan 2012",
    6: "Acura ZDX Hatchback 2012",
    11: "Audi RS 4 Convertible 2008", 12: "Audi A5 Coupe 2012", 13: "Audi TTS Coupe 2012",
    18: "Audi TT Hatchback 2011", 19: "Audi S6 Sedan 2011",
    25: "BMW ActiveHybrid 5 Sedan 2012", 27: "BMW 1 Series Coupe 2012", 28: "BMW 3 Series Sedan 2012",
    33: "BMW M3 Coupe 2012", 34: "BMW M5 Sedan 2010",
}
WILDLIFE_SEED = 42
WILDLIFE_MIN_REFERENCES = 4  # --min_per_subject
WILDLIFE_MAX_REFERENCES = 10  # --max_per_subject
WILDLIFE_MIN_GALLERY = 5  # --min_gallery_per_subject
WILDLIFE_MAX_GALLERY = 15  # --max_gallery_per_subject
WILDLIFE_PER_SPECIES = 10  # --per_species
ABLATION_EXTRA_PER_IDENTITY = 15


def _spec(seed: int) -> GallerySpec:
    # Roles are decided here; curation keeps every image as it is (no further sampling).
    return GallerySpec(references_per_identity=0, gallery_per_identity=None, sampling="random", seed=seed)


def _check_sampling(name: str, sampling: str) -> None:
    if sampling != "random":
        raise InputError(f"{name} reproduces the released selection; it has no --sampling {sampling}",
                         hint="build the preset, then run 'fpr ablate --protocol official' for k-means galleries")


def _draw(n: int, k: int, state: np.random.RandomState) -> list[int]:
    """Positions pandas' ``sample(n=k, random_state=state)`` takes from ``n`` rows, in its order."""
    return [int(i) for i in state.choice(n, size=k, replace=False)]


# --------------------------------------------------------------------------- CUB

def cub_official(root: str | Path, *, seed: int | None = None, sampling: str = "random") -> "PresetResult":
    _check_sampling("cub-official", sampling)
    seed = CUB_SEED if seed is None else seed
    class_to_group = {cid: g for g, cids in CUB_OFFICIAL_GROUPS.items() for cid in cids}
    records = read_cub(root, classes=sorted(class_to_group), groups=class_to_group)  # images.txt order
    chosen: list[ImageRecord] = []
    groups: dict[str, list[str]] = {}
    notes = []
    for group in CUB_OFFICIAL_GROUPS:
        by_species: dict[str, list[ImageRecord]] = defaultdict(list)
        for r in records:
            if r.group == group:
                by_species[r.identity].append(r)
        names = sorted(by_species)
        short = [f"{n} ({len(by_species[n])})" for n in names if len(by_species[n]) < 20]
        if short:
            raise InputError(f"cub-official needs at least 20 images per species; {', '.join(short)}",
                             where=str(root), hint="the released loader samples 10 gallery + 10 references")
        state = np.random.RandomState(seed)
        rest: dict[str, list[ImageRecord]] = {}
        for name in names:
            recs = by_species[name]
            pick = _draw(len(recs), 10, state)
            for i in pick:
                recs[i].role = "gallery"
            rest[name] = [r for i, r in enumerate(recs) if i not in set(pick)]
            chosen.extend(recs[i] for i in pick)
        state = np.random.RandomState(seed)
        for name in names:
            pick = _draw(len(rest[name]), 10, state)
            for i in pick:
                rest[name][i].role = "reference"
            chosen.extend(rest[name][i] for i in pick)
        groups[group] = names
        notes.append(f"{group}: {', '.join(names)}")
    return PresetResult("cub-official", chosen, _spec(seed), groups,
                        notes=notes + [f"selection of {RELEASED} data_load_scripts/load_cub_data.py, seed {seed}"])


# --------------------------------------------------------------------------- Stanford Cars

def _hf_parquet_files(root: Path, split: str) -> list[Path]:
    files = sorted(root.glob(f"data/{split}-*.parquet")) or sorted(root.glob(f"{split}-*.parquet")) \
        or sorted(root.glob(f"data/{split}/*.parquet"))
    return files


def read_hf_class_names(readme: Path) -> dict[int, str]:
    """``'12': Audi A5 Coupe 2012`` lines of a Hugging Face dataset card's ``class_label`` names."""
    names = {}
    for line in readme.read_text(encoding="utf-8", errors="replace").splitlines():
        m = re.match(r"""^\s*['"]?(\d+)['"]?\s*:\s*(.+?)\s*$""", line)
        if m and not m.group(2).startswith(("{", "[")):
            names[int(m.group(1))] = m.group(2).strip("'\"")
    return names


def _sniff_suffix(data: bytes, fallback: str) -> str:
    if data[:8] == b"\x89PNG\r\n\x1a\n":
        return ".png"
    if data[:3] == b"\xff\xd8\xff":
        return ".jpg"
    return fallback or ".img"


def _cars_from_hf(root: Path, labels: dict[int, str]) -> tuple[list[ImageRecord], list[str]] | None:
    """The Hugging Face parquet snapshot: selected test rows, image bytes written once to ``fpr-images/``."""
    files = _hf_parquet_files(root, CARS_SPLIT)
    if not files:
        return None
    notes = []
    card = root / "README.md"
    names = read_hf_class_names(card) if card.is_file() else {}
    if not names:
        notes.append("no class list (README.md) in the Hugging Face copy: label ids resolved with the documented "
                     "mapping")
    try:
        frames = [pd.read_parquet(f, columns=["label"]) for f in files]
    except (OSError, ValueError, KeyError) as exc:
        raise InputError(f"unreadable parquet split ({type(exc).__name__}: {exc})", where=str(files[0])) from None
    differ = [f"{lab}: {names[lab]} (documented: {labels[lab]})" for lab in labels if lab in names
              and names[lab] != labels[lab]]
    if differ:
        notes.append("this copy's class list names label(s) differently: " + "; ".join(differ))
    out_dir = root / "fpr-images" / CARS_SPLIT
    records: list[ImageRecord] = []
    for f, frame in zip(files, frames):
        wanted_rows = [i for i, lab in enumerate(frame["label"].astype(int)) if lab in labels]
        if not wanted_rows:
            continue
        images = pd.read_parquet(f, columns=["image"])["image"]
        for i in wanted_rows:
            lab = int(frame["label"].iloc[i])
            cell = images.iloc[i]
            data = cell.get("bytes") if isinstance(cell, dict) else cell
            if not data:
                raise InputError(f"row {i} has no image bytes", where=str(f))
            src = cell.get("path") if isinstance(cell, dict) else None
            path = out_dir / f"{f.stem}-{i:06d}{_sniff_suffix(bytes(data), Path(src or '').suffix)}"
            if not path.is_file():
                try:
                    path.parent.mkdir(parents=True, exist_ok=True)
                    path.write_bytes(bytes(data))
                except OSError as exc:
                    raise InputError(f"cannot write the extracted images ({exc.strerror})", where=str(out_dir),
                                     hint="make the dataset folder writable (images are written once)") from None
            records.append(ImageRecord(str(path), names.get(lab, labels[lab]), "car", split=CARS_SPLIT,
                                       extra={"class_id": lab + 1, "label": lab, "row": i, "file": f.name}))
    return records, notes


def cars_official(root: str | Path, *, seed: int | None = None, sampling: str = "random") -> "PresetResult":
    _check_sampling("cars-official", sampling)
    base = require_dir(root, "Stanford Cars")
    labels = dict(CARS_OFFICIAL_LABELS)
    notes: list[str] = []
    hf = _cars_from_hf(base, labels)
    if hf is not None:
        records, notes = hf
        layout = "Hugging Face parquet (the copy the released code loads)"
    else:
        records = [r for r in read_stanford_cars(base) if r.split in (CARS_SPLIT, None)]
        if any(r.split is None for r in records):
            notes.append("this Stanford Cars copy has no train/test split: images of every split are used")
        layout = "local copy"
        by_id = [r for r in records if "class_id" in r.extra]
        if by_id:  # devkit / cars_annos.mat: the copy's own class list decides (devkit class = label + 1)
            records = [r for r in by_id if r.extra["class_id"] - 1 in labels]
            for r in records:
                r.extra["label"] = r.extra["class_id"] - 1
            resolved = {r.extra["label"]: r.identity for r in records}
            differ = [f"{lab}: {resolved[lab]} (documented: {labels[lab]})" for lab in sorted(resolved)
                      if resolved[lab] != labels[lab]]
            if differ:
                notes.append("this copy's class list names label(s) differently: " + "; ".join(differ))
        else:  # folders / CSV by class name
            name_to_label = {v: k for k, v in labels.items()}
            records = [r for r in records if r.identity in name_to_label]
            for r in records:
                r.extra["label"] = name_to_label[r.identity]
    by_label: dict[int, list[ImageRecord]] = defaultdict(list)
    for r in records:
        by_label[r.extra["label"]].append(r)
    missing = [f"{lab} ({labels[lab]})" for lab in labels if not by_label.get(lab)]
    if missing:
        raise InputError(f"cars-official: no {CARS_SPLIT} images of label(s) {', '.join(missing[:5])}",
                         where=str(base), hint="give the full Stanford Cars copy (with its test split)")
    chosen: list[ImageRecord] = []
    names = []
    for lab in labels:  # the released order; rows in the copy's order
        recs = by_label[lab]
        if len(recs) < 20:
            notes.append(f"label {lab} ({recs[0].identity}) has {len(recs)} {CARS_SPLIT} images (< 20)")
        for r in recs[:10]:
            r.role = "gallery"
        for r in recs[10:20]:
            r.role = "reference"
        chosen.extend(recs[:20])
        names.append(recs[0].identity)
    check_files_exist(chosen, base, "Stanford Cars", "the dataset")
    mapping = ", ".join(f"{lab}={name}" for lab, name in zip(labels, names))
    return PresetResult("cars-official", chosen, _spec(0), {"car": names},
                        notes=notes + [f"{layout}; labels {mapping}",
                                       f"selection of {RELEASED} data_load_scripts/load_cars_data.py (no randomness)"])


# --------------------------------------------------------------------------- WildlifeReID-10k

def _wanted_species(values: Iterable[str], species: Sequence[str] | None) -> dict[str, str]:
    """Raw species value -> group, for the groups asked for (default: the paper's five)."""
    wanted = {g: WILDLIFE_SPECIES.get(normalize_species(g), (normalize_species(g),))
              for g in (species or WILDLIFE_SPECIES)}
    return species_groups(values, wanted)


def official_wildlife_selection(df: pd.DataFrame, species_values: Sequence[str], *, seed: int = WILDLIFE_SEED,
                                ablation: bool = False) -> pd.DataFrame:
    """The released rules on a metadata frame (already filtered to the species and datasets), in CSV order.

    Returns the selected rows with a ``_role`` column (``reference`` / ``gallery``) and ``_selected``
    (the identity is one of the per-species top identities)."""
    df = df.reset_index(drop=True)
    ident = df["identity"].astype(str)
    rows_of: dict[str, list[int]] = defaultdict(list)
    for pos, name in enumerate(ident):
        rows_of[name].append(pos)
    need = WILDLIFE_MIN_REFERENCES + WILDLIFE_MIN_GALLERY
    refs: dict[str, list[int]] = {}
    for name in sorted(rows_of):  # groupby('name') order
        rows = rows_of[name]
        if len(rows) < need:
            continue
        k = min(len(rows) - WILDLIFE_MIN_GALLERY, WILDLIFE_MAX_REFERENCES)
        refs[name] = [rows[i] for i in _draw(len(rows), k, np.random.RandomState(seed))]
    selected: list[str] = []
    species = df["species"].astype(str)
    for value in species_values:  # per species value: most references first (ties: name)
        counts = {name: sum(1 for p in ps if species.iloc[p] == value) for name, ps in refs.items()}
        ranked = sorted((n for n, c in counts.items() if c > 0), key=lambda n: (-counts[n], n))
        selected.extend(n for n in ranked[:WILDLIFE_PER_SPECIES] if n not in selected)
    role = pd.Series([None] * len(df), dtype=object)
    for name in selected:
        role.iloc[refs[name]] = "reference"
    ref_paths = set(df["path"].iloc[[p for n in selected for p in refs[n]]])
    left = [p for p in range(len(df)) if df["path"].iloc[p] not in ref_paths]
    left_of: dict[str, list[int]] = defaultdict(list)
    for p in left:
        left_of[ident.iloc[p]].append(p)
    gallery_paths = set()
    for name in sorted(selected):
        rows = left_of.get(name, [])
        pick = [rows[i] for i in _draw(len(rows), min(len(rows), WILDLIFE_MAX_GALLERY),
                                       np.random.RandomState(seed))]
        role.iloc[pick] = "gallery"
        gallery_paths.update(df["path"].iloc[pick])
    if ablation:  # load_data_reid_ablation.py: up to 15 more images of every identity join the gallery
        rest_of: dict[str, list[int]] = defaultdict(list)
        for p in left:
            if df["path"].iloc[p] not in gallery_paths:
                rest_of[ident.iloc[p]].append(p)
        for name in sorted(rest_of):
            rows = rest_of[name]
            pick = [rows[i] for i in _draw(len(rows), min(len(rows), ABLATION_EXTRA_PER_IDENTITY),
                                           np.random.RandomState(seed))]
            role.iloc[pick] = "gallery"
    out = df.assign(_role=role.to_numpy(), _selected=ident.isin(selected).to_numpy())
    return out[out["_role"].notna()]


def wildlife_official(root: str | Path, *, seed: int | None = None, sampling: str = "random",
                      species: Sequence[str] | None = None, datasets: Sequence[str] | None = None,
                      ablation: bool = False) -> "PresetResult":
    name = "wildlife-official-ablation" if ablation else "wildlife-official"
    _check_sampling(name, sampling)
    seed = WILDLIFE_SEED if seed is None else seed
    folder, df = read_metadata(root)
    group_of = _wanted_species(df["species"].astype(str).unique(), species)
    keep = df["species"].astype(str).isin(group_of)
    if datasets is not None:
        if "dataset" not in df.columns:
            raise InputError("metadata.csv has no 'dataset' column to filter on", where=str(folder / "metadata.csv"))
        keep &= df["dataset"].astype(str).isin(list(datasets))
    df = df[keep]
    if df.empty:
        raise InputError("no WildlifeReID-10k images of the requested species"
                         + (" and datasets" if datasets is not None else ""), where=str(folder / "metadata.csv"),
                         hint=choices_hint(sorted(pd.read_csv(folder / "metadata.csv", usecols=["species"])
                                                  ["species"].astype(str).unique())[:20], "species values"))
    values = sorted(group_of, key=lambda v: (list(dict.fromkeys(group_of.values())).index(group_of[v]), v))
    sel = official_wildlife_selection(df, values, seed=seed, ablation=ablation)
    records = records_from_frame(folder, sel.drop(columns=["_role", "_selected"]), group_of=group_of,
                                 check_files=False)
    for r, role in zip(records, sel["_role"]):
        r.role = role
    check_files_exist(records, folder, "WildlifeReID-10k", "metadata.csv")
    groups: dict[str, list[str]] = {}
    notes = []
    for r, is_sel in zip(records, sel["_selected"]):
        if is_sel and r.identity not in groups.setdefault(r.group, []):
            groups[r.group].append(r.identity)
    for g in dict.fromkeys(group_of.values()):
        ids = groups.get(g, [])
        n_ref = [sum(1 for r in records if r.identity == i and r.role == "reference") for i in ids]
        notes.append(f"{g}: {len(ids)} individuals (references per individual {', '.join(map(str, n_ref))})")
        if len(ids) < WILDLIFE_PER_SPECIES:
            notes.append(f"{g}: only {len(ids)} individual(s) with >= 9 images")
    if ablation:
        n_extra = len({(r.group, r.identity) for r in records}) - sum(len(v) for v in groups.values())
        notes.append(f"{n_extra} distractor identit(y/ies) (gallery images only) for the identity ablation")
    notes.append(f"selection of {RELEASED} data_load_scripts/"
                 f"{'load_data_reid_ablation.py' if ablation else 'load_data_reid.py'}, seed {seed}")
    return PresetResult(name, records, _spec(seed), groups, notes)


def wildlife_official_ablation(root: str | Path, **options) -> "PresetResult":
    return wildlife_official(root, ablation=True, **options)
