"""Stanford Cars (196 make/model/year classes) in its devkit layout and common re-distributions.

Layouts recognised under ``root`` (first match wins):

1. **devkit** (the original): ``devkit/cars_meta.mat`` (``class_names``),
   ``devkit/cars_train_annos.mat`` + ``cars_train/``, and the labelled test
   annotations ``cars_test_annos_withlabels.mat`` (in ``root`` or ``devkit/``) +
   ``cars_test/``. Each ``annotations`` struct has ``bbox_x1 bbox_y1 bbox_x2
   bbox_y2 class fname``; ``class`` is 1-based into ``class_names``. Either
   split alone is enough.
2. **cars_annos.mat** (the all-in-one release): ``annotations`` with
   ``relative_im_path ... class test`` plus ``class_names``, images in ``car_ims/``.
3. **CSV**: a ``.csv`` in ``root`` with a header holding a path column (``path``,
   ``filepath``, ``image``, ``fname`` or ``filename``) and a class column
   (``class_name``, ``class``, ``label`` or ``model``); numeric classes are 1-based
   into a ``names.csv`` or ``cars_meta.mat`` beside it.
4. **folder per class**: ``[train|test]/<class name>/<image>`` (e.g. the Kaggle
   "by classes folder" mirror), optionally one level down (``car_data/``), or
   ``<class name>/<image>`` directly.

Identity = car model (the class name, e.g. ``Audi S6 Sedan 2011``).
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterable

import numpy as np

from fpr.errors import InputError
from fpr.galleries.datasets._common import check_files_exist, require_dir
from fpr.galleries.records import ImageRecord
from fpr.images import IMAGE_SUFFIXES

ANNOTATION_FIELDS = ("bbox_x1", "bbox_y1", "bbox_x2", "bbox_y2", "class", "fname")
PATH_COLUMNS = ("path", "filepath", "image", "fname", "filename")
CLASS_COLUMNS = ("class_name", "class", "label", "model")
LAYOUT_HINT = ("expected devkit/cars_meta.mat + devkit/cars_train_annos.mat + cars_train/ (and/or "
               "cars_test_annos_withlabels.mat + cars_test/), or cars_annos.mat + car_ims/, or "
               "[train|test]/<class name>/ folders, or a CSV with path and class columns")


def _loadmat(path: Path) -> dict:
    from scipy.io import loadmat

    try:
        return loadmat(str(path), squeeze_me=True, struct_as_record=True)
    except Exception as exc:
        raise InputError(f"unreadable .mat file ({type(exc).__name__}: {exc})", where=str(path)) from None


def _struct_rows(mat: dict, path: Path, needed: Iterable[str]) -> np.ndarray:
    if "annotations" not in mat:
        raise InputError("annotation file has no 'annotations' struct", where=str(path))
    ann = np.atleast_1d(mat["annotations"])
    names = ann.dtype.names or ()
    missing = [f for f in needed if f not in names]
    if missing:
        raise InputError(f"annotations lack field(s) {', '.join(missing)}", where=str(path),
                         hint="the labelled test file is cars_test_annos_withlabels.mat (the devkit's "
                              "cars_test_annos.mat has no classes)")
    return ann


def read_class_names(meta_path: Path) -> list[str]:
    mat = _loadmat(meta_path)
    if "class_names" not in mat:
        raise InputError("no 'class_names' in the meta file", where=str(meta_path))
    return [str(n).strip() for n in np.atleast_1d(mat["class_names"])]


def _class_of(names: list[str], value, where: Path) -> str:
    idx = int(value)
    if not 1 <= idx <= len(names):
        raise InputError(f"class index {idx} is outside 1..{len(names)} of class_names", where=str(where))
    return names[idx - 1]


def _find_images_dir(root: Path, name: str) -> Path | None:
    for cand in (root / name / name, root / name):  # Kaggle mirrors nest cars_train/cars_train/
        if cand.is_dir():
            return cand
    return None


def _devkit(root: Path) -> list[ImageRecord] | None:
    meta = next((p for p in (root / "devkit" / "cars_meta.mat", root / "cars_meta.mat") if p.is_file()), None)
    train_annos = next((p for p in (root / "devkit" / "cars_train_annos.mat", root / "cars_train_annos.mat")
                        if p.is_file()), None)
    test_annos = next((p for p in (root / "cars_test_annos_withlabels.mat",
                                   root / "devkit" / "cars_test_annos_withlabels.mat") if p.is_file()), None)
    if meta is None and train_annos is None and test_annos is None:
        return None
    if meta is None:
        raise InputError("Stanford Cars devkit found but cars_meta.mat (class names) is missing",
                         where=str(root / "devkit"), hint="extract car_devkit.tgz into this folder")
    names = read_class_names(meta)
    records: list[ImageRecord] = []
    pairs = [("train", train_annos, "cars_train"), ("test", test_annos, "cars_test")]
    problems = []
    for split, annos, folder_name in pairs:
        if annos is None:
            continue
        images = _find_images_dir(root, folder_name)
        if images is None:
            problems.append(f"{folder_name}/ (images for {annos.name})")
            continue
        ann = _struct_rows(_loadmat(annos), annos, ("class", "fname"))
        for row in ann:
            cls = _class_of(names, row["class"], annos)
            records.append(ImageRecord(path=str(images / str(row["fname"])), identity=cls, group="car", split=split,
                                       extra={"class_id": int(row["class"])}))
    if problems:
        raise InputError(f"Stanford Cars annotations found but image folder(s) missing: {', '.join(problems)}",
                         where=str(root), hint="extract cars_train.tgz / cars_test.tgz here")
    if not records:
        raise InputError("Stanford Cars devkit has class names but no labelled annotations: need "
                         "devkit/cars_train_annos.mat and/or cars_test_annos_withlabels.mat", where=str(root))
    check_files_exist(records, root, "Stanford Cars", "the annotation .mat files")
    return records


def _all_in_one(root: Path) -> list[ImageRecord] | None:
    annos = root / "cars_annos.mat"
    if not annos.is_file():
        return None
    mat = _loadmat(annos)
    if "class_names" not in mat:
        raise InputError("cars_annos.mat has no 'class_names'", where=str(annos))
    names = [str(n).strip() for n in np.atleast_1d(mat["class_names"])]
    ann = _struct_rows(mat, annos, ("relative_im_path", "class"))
    has_test = "test" in (ann.dtype.names or ())
    records = [ImageRecord(path=str(root / str(r["relative_im_path"])), identity=_class_of(names, r["class"], annos),
                           group="car", split=("test" if int(r["test"]) else "train") if has_test else None,
                           extra={"class_id": int(r["class"])}) for r in ann]
    check_files_exist(records, root, "Stanford Cars", "cars_annos.mat")
    return records


def _images_in(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)


def _folder_per_class(root: Path) -> list[ImageRecord] | None:
    for base in (root, *(d for d in sorted(root.iterdir()) if d.is_dir())):
        split_dirs = [(s, base / s) for s in ("train", "test") if (base / s).is_dir()]
        if split_dirs:
            records = []
            for split, d in split_dirs:
                for cls in sorted(c for c in d.iterdir() if c.is_dir() and not c.name.startswith(".")):
                    records += [ImageRecord(str(p), cls.name, "car", split=split) for p in _images_in(cls)]
            if records:
                return records
    class_dirs = [c for c in sorted(root.iterdir()) if c.is_dir() and not c.name.startswith(".") and _images_in(c)]
    if class_dirs and not _images_in(root):
        return [ImageRecord(str(p), c.name, "car") for c in class_dirs for p in _images_in(c)]
    return None


def _csv(root: Path) -> list[ImageRecord] | None:
    import pandas as pd

    for csv_path in sorted(root.glob("*.csv")):
        if csv_path.name == "names.csv":
            continue
        try:
            df = pd.read_csv(csv_path, dtype=str)
        except (OSError, ValueError, pd.errors.ParserError) as exc:  # not an annotation table: say so, go on
            from fpr import progress

            progress.log(f"skipping {csv_path.name}: not a readable CSV ({str(exc).splitlines()[0]})")
            continue
        cols = {c.lower().strip(): c for c in df.columns}
        pcol = next((cols[c] for c in PATH_COLUMNS if c in cols), None)
        ccol = next((cols[c] for c in CLASS_COLUMNS if c in cols), None)
        if pcol is None or ccol is None:
            continue
        names = None
        values = df[ccol].fillna("").astype(str).str.strip()
        if len(values) and values.str.fullmatch(r"\d+").all():
            names = _names_beside(csv_path)
        split_col = cols.get("split")
        records = []
        for i, (rel, cls) in enumerate(zip(df[pcol].astype(str), values)):
            identity = _class_of(names, cls, csv_path) if names is not None else cls
            p = Path(rel) if Path(rel).is_absolute() else csv_path.parent / rel
            records.append(ImageRecord(str(p), identity, "car",
                                       split=str(df[split_col].iloc[i]) if split_col else None))
        if records:
            check_files_exist(records, root, "Stanford Cars", csv_path.name)
            return records
    return None


def _names_beside(csv_path: Path) -> list[str]:
    names_csv = csv_path.parent / "names.csv"
    if names_csv.is_file():
        return [ln.strip() for ln in names_csv.read_text(encoding="utf-8").splitlines() if ln.strip()]
    for meta in (csv_path.parent / "cars_meta.mat", csv_path.parent / "devkit" / "cars_meta.mat"):
        if meta.is_file():
            return read_class_names(meta)
    raise InputError(f"{csv_path.name} has numeric classes but no names.csv or cars_meta.mat beside it",
                     where=str(csv_path.parent))


def read_stanford_cars(root: str | Path, *, classes: Iterable[str] | None = None,
                       group: str = "car") -> list[ImageRecord]:
    """Records of Stanford Cars images (all, or of the given class names), all in ``group``."""
    base = require_dir(root, "Stanford Cars")
    records = None
    for reader in (_devkit, _all_in_one, _csv, _folder_per_class):
        records = reader(base)
        if records is not None:
            break
    if not records:
        raise InputError("not a Stanford Cars folder", where=str(base), hint=LAYOUT_HINT)
    if classes is not None:
        wanted = list(dict.fromkeys(classes))
        have = {r.identity for r in records}
        absent = [c for c in wanted if c not in have]
        if absent:
            raise InputError(f"class(es) not in this Stanford Cars copy: {', '.join(absent[:5])}", where=str(base))
        keep = set(wanted)
        records = [r for r in records if r.identity in keep]
    for r in records:
        r.group = group
    return records


def class_names(records: list[ImageRecord]) -> list[str]:
    return sorted({r.identity for r in records})
