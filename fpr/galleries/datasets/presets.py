"""The paper's curation presets: which identities, which groups, how many references and gallery images.

Each preset turns a dataset folder into records (identity, group, sometimes a
role) plus a :class:`~fpr.galleries.curate.GallerySpec`; ``fpr.api.import_gallery``
then de-duplicates, samples (seeded per group and identity) and stores them.
The paper (Sec. 4.1) separates every dataset into a reference set (5-10 images
per subject, used only to prompt generation) and a gallery (10 subjects per
group, ~10 images each), disjoint from the references.

``cub-paper``
    CUB-200-2011, identity = species, three groups of five similar species:
    ``sparrow`` = classes 113-117, ``tern`` = 143-147, ``wren`` = 193-197.
    10 reference + 10 gallery images per species, drawn at random (seeded)
    from all of the species' images (train and test).
``cars-paper``
    Stanford Cars, identity = car model, one group ``car`` of 15 similar luxury
    sedans. Selection rule (deterministic): class names containing the word
    ``Sedan`` whose make is one of :data:`LUXURY_MAKES`, sorted by name, first 15.
    On the full dataset that is the five Audi, three BMW, three Bentley, one
    Cadillac and three Mercedes-Benz sedans (:data:`CARS_PAPER_MODELS`). 10
    reference + 10 gallery images per model. Pass ``classes=`` to choose others.
``wildlife-paper``
    WildlifeReID-10k, identity = individual, one group per species
    (cow, zebra, tiger, giraffe, leopard). Per species the 10 individuals with
    the most images (ties: identity name) among those with at least 5; per
    individual with n images, ``clamp(n - 10, 4, 10)`` references drawn at random
    (seeded) and up to 10 gallery images drawn from the rest.

The ``*-official`` presets (:mod:`.official`) reproduce the selections of the paper's
released code instead (``cub-official``, ``cars-official``, ``wildlife-official`` and
``wildlife-official-ablation``); docs/real-data.md compares the two families.
"""
from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Callable, Iterable

from fpr.errors import InputError, choices_hint
from fpr.galleries.curate import GallerySpec
from fpr.galleries.datasets._common import PresetResult
from fpr.galleries.datasets.cars import read_stanford_cars
from fpr.galleries.datasets.cub import read_cub
from fpr.galleries.datasets.wildlife import WILDLIFE_SPECIES, read_metadata, records_from_frame, species_groups
from fpr.galleries.records import ImageRecord
from fpr.keys import keyed_rng

CUB_GROUPS: dict[str, tuple[int, ...]] = {
    "sparrow": (113, 114, 115, 116, 117),
    "tern": (143, 144, 145, 146, 147),
    "wren": (193, 194, 195, 196, 197),
}
LUXURY_MAKES = ("Audi", "BMW", "Bentley", "Cadillac", "Mercedes-Benz", "Rolls-Royce", "Jaguar", "Maybach")
CARS_N_MODELS = 15
# What the rule selects on the full 196-class dataset (documentation and a test pin).
CARS_PAPER_MODELS = (
    "Audi 100 Sedan 1994", "Audi S4 Sedan 2007", "Audi S4 Sedan 2012", "Audi S6 Sedan 2011", "Audi V8 Sedan 1994",
    "BMW 3 Series Sedan 2012", "BMW ActiveHybrid 5 Sedan 2012", "BMW M5 Sedan 2010",
    "Bentley Arnage Sedan 2009", "Bentley Continental Flying Spur Sedan 2007", "Bentley Mulsanne Sedan 2011",
    "Cadillac CTS-V Sedan 2012",
    "Mercedes-Benz C-Class Sedan 2012", "Mercedes-Benz E-Class Sedan 2012", "Mercedes-Benz S-Class Sedan 2012",
)
REFERENCES = 10
GALLERY = 10


# --------------------------------------------------------------------------- CUB

def cub_paper(root: str | Path, *, seed: int = 0, sampling: str = "random") -> PresetResult:
    class_to_group = {cid: g for g, cids in CUB_GROUPS.items() for cid in cids}
    records = read_cub(root, classes=sorted(class_to_group), groups=class_to_group)
    groups: dict[str, list[str]] = {}
    for r in records:
        groups.setdefault(r.group, [])
        if r.identity not in groups[r.group]:
            groups[r.group].append(r.identity)
    spec = GallerySpec(references_per_identity=REFERENCES, gallery_per_identity=GALLERY, sampling=sampling, seed=seed)
    return PresetResult("cub-paper", records, spec, groups,
                        notes=[f"{g}: {', '.join(ids)}" for g, ids in groups.items()])


# --------------------------------------------------------------------------- Stanford Cars

def select_sedans(class_names: Iterable[str], n: int = CARS_N_MODELS) -> list[str]:
    """The documented rule: 'Sedan' classes of a luxury make, sorted by name, first ``n``."""
    sedans = sorted(c for c in set(class_names) if re.search(r"\bSedan\b", c))
    luxury = [c for c in sedans if any(c.startswith(make + " ") for make in LUXURY_MAKES)]
    return luxury[:n]


def cars_paper(root: str | Path, *, seed: int = 0, sampling: str = "random",
               classes: Iterable[str] | None = None) -> PresetResult:
    notes = []
    if classes is None:
        all_records = read_stanford_cars(root)
        chosen = select_sedans(r.identity for r in all_records)
        if len(chosen) < CARS_N_MODELS:
            notes.append(f"only {len(chosen)} luxury sedan class(es) found (the paper uses {CARS_N_MODELS})")
        if len(chosen) < 2:
            raise InputError(f"cars-paper needs luxury sedan classes; found {len(chosen)}", where=str(root),
                             hint="check the class names (cars_meta.mat) or pass explicit classes")
        keep = set(chosen)
        records = [r for r in all_records if r.identity in keep]
    else:
        chosen = list(dict.fromkeys(classes))
        records = read_stanford_cars(root, classes=chosen)
    spec = GallerySpec(references_per_identity=REFERENCES, gallery_per_identity=GALLERY, sampling=sampling, seed=seed)
    return PresetResult("cars-paper", records, spec, {"car": chosen}, notes=notes + ["car: " + ", ".join(chosen)])


# --------------------------------------------------------------------------- WildlifeReID-10k



def n_references(n_images: int) -> int:
    return max(0, min(REFERENCES, max(4, n_images - GALLERY), n_images - 1))


def wildlife_paper(root: str | Path, *, seed: int = 0, sampling: str = "random",
                   species: Iterable[str] | None = None, identities: int = 10) -> PresetResult:
    folder, df = read_metadata(root)
    wanted = {g: WILDLIFE_SPECIES.get(g, (g,)) for g in (species or WILDLIFE_SPECIES)}
    df = df.copy()
    df["_group"] = df["species"].astype(str).map(species_groups(df["species"].astype(str).unique(), wanted))
    found = sorted(df["_group"].dropna().unique())
    absent = [g for g in wanted if g not in found]
    if absent:
        available = sorted(df["species"].astype(str).unique())[:20]
        raise InputError(f"WildlifeReID-10k has no images of {', '.join(absent)}", where=str(folder / "metadata.csv"),
                         hint=choices_hint(available, "species values"))
    df = df[df["_group"].notna()].reset_index(drop=True)
    group_of = dict(zip(df["species"], df["_group"]))
    records = records_from_frame(folder, df.drop(columns=["_group"]), group_of=group_of, check_files=False)

    by_identity: dict[tuple[str, str], list[ImageRecord]] = {}
    for r in records:
        by_identity.setdefault((r.group, r.identity), []).append(r)
    chosen: list[ImageRecord] = []
    groups: dict[str, list[str]] = {}
    notes = []
    for group in wanted:
        counts = Counter({ident: len(recs) for (g, ident), recs in by_identity.items() if g == group})
        eligible = sorted((ident for ident, n in counts.items() if n >= 5), key=lambda i: (-counts[i], i))
        top = eligible[:identities]
        if len(top) < identities:
            notes.append(f"{group}: only {len(top)} individual(s) with >= 5 images")
        groups[group] = top
        for ident in top:
            recs = sorted(by_identity[(group, ident)], key=lambda r: r.path)
            k = n_references(len(recs))
            pick = set(keyed_rng(seed, "wildlife-paper-references", group, ident)
                       .choice(len(recs), k, replace=False).tolist())
            for i, r in enumerate(recs):
                r.role = "reference" if i in pick else None
            chosen.extend(recs)
        notes.append(f"{group}: {len(top)} individuals, images per individual "
                     f"{', '.join(str(counts[i]) for i in top)}")
    from fpr.galleries.datasets._common import check_files_exist

    check_files_exist(chosen, folder, "WildlifeReID-10k", "metadata.csv")
    spec = GallerySpec(references_per_identity=0, gallery_per_identity=GALLERY, sampling=sampling, seed=seed)
    return PresetResult("wildlife-paper", chosen, spec, groups, notes)


# --------------------------------------------------------------------------- registry

PRESETS: dict[str, Callable[..., PresetResult]] = {
    "cub-paper": cub_paper,
    "cars-paper": cars_paper,
    "wildlife-paper": wildlife_paper,
}


def _official() -> dict[str, Callable[..., PresetResult]]:
    from fpr.galleries.datasets import official

    return {"cub-official": official.cub_official, "cars-official": official.cars_official,
            "wildlife-official": official.wildlife_official,
            "wildlife-official-ablation": official.wildlife_official_ablation}


PRESETS.update(_official())


def build_preset(name: str, root: str | Path, *, seed: int | None = None, sampling: str = "random",
                 **options) -> PresetResult:
    """Records + GallerySpec of a named preset (see the module docstring).

    ``seed=None``: the preset's default (0 for ``*-paper``, the released seeds for ``*-official``)."""
    if name not in PRESETS:
        raise InputError(f"unknown preset '{name}'", hint=choices_hint(list(PRESETS), "presets"))
    if seed is None and not name.endswith(("-official", "-official-ablation")):
        seed = 0
    return PRESETS[name](root, seed=seed, sampling=sampling, **options)
