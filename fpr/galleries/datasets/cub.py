"""CUB-200-2011 in its official tarball layout.

``CUB_200_2011/`` holds ``images.txt`` (``<image_id> <relative path>``),
``image_class_labels.txt`` (``<image_id> <class_id>``), ``classes.txt``
(``<class_id> <nnn.Species_Name>``), ``train_test_split.txt`` (``<image_id>
<is_training_image>``) and ``images/<nnn.Species_Name>/*.jpg``. ``root`` may be
that folder or the folder the tarball was extracted in.

Identity = species (the class name without its number, e.g. ``Baird_Sparrow``);
the official split is kept on each record as ``train``/``test``.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Iterable, Mapping

from fpr.errors import InputError
from fpr.galleries.datasets._common import check_files_exist, find_root, read_lines, require_dir
from fpr.galleries.records import ImageRecord

CUB_FILES = ("images.txt", "image_class_labels.txt", "classes.txt", "train_test_split.txt")


def species_name(class_name: str) -> str:
    """``113.Baird_Sparrow`` -> ``Baird_Sparrow``."""
    return re.sub(r"^\d+\.", "", class_name.strip())


def find_cub_root(root: str | Path) -> Path:
    base = require_dir(root, "CUB-200-2011")
    cub = find_root(base, "images.txt", ("CUB_200_2011",))
    missing = [n for n in CUB_FILES if not (cub / n).is_file()]
    if not (cub / "images").is_dir():
        missing.append("images/")
    if missing:
        raise InputError(f"not a CUB-200-2011 folder: missing {', '.join(missing)}", where=str(cub),
                         hint="give the CUB_200_2011 folder extracted from CUB_200_2011.tgz")
    return cub


def read_classes(root: str | Path) -> dict[int, str]:
    cub = find_cub_root(root)
    return {int(cid): name for cid, name in read_lines(cub / "classes.txt", 2, "classes.txt")}


def read_cub(root: str | Path, *, classes: Iterable[int] | None = None, groups: Mapping[int, str] | None = None,
             default_group: str = "bird", check_files: bool = True) -> list[ImageRecord]:
    """Records of CUB images (all, or of the given class ids), grouped by ``groups`` (class id -> group)."""
    cub = find_cub_root(root)
    class_names = {int(cid): name for cid, name in read_lines(cub / "classes.txt", 2, "classes.txt")}
    images = {int(iid): rel for iid, rel in read_lines(cub / "images.txt", 2, "images.txt")}
    labels = {int(iid): int(cid) for iid, cid in read_lines(cub / "image_class_labels.txt", 2,
                                                           "image_class_labels.txt")}
    split = {int(iid): flag for iid, flag in read_lines(cub / "train_test_split.txt", 2, "train_test_split.txt")}
    unlabelled = sorted(set(images) - set(labels))
    if unlabelled:
        raise InputError(f"{len(unlabelled)} image(s) in images.txt have no line in image_class_labels.txt "
                         f"(e.g. image id {unlabelled[0]})", where=str(cub))
    unknown = sorted({c for c in labels.values() if c not in class_names})
    if unknown:
        raise InputError(f"image_class_labels.txt uses class id(s) missing from classes.txt: "
                         f"{', '.join(map(str, unknown[:5]))}", where=str(cub))
    wanted = None if classes is None else {int(c) for c in classes}
    if wanted is not None:
        absent = sorted(wanted - set(class_names))
        if absent:
            raise InputError(f"class id(s) {', '.join(map(str, absent))} are not in classes.txt "
                             f"(it has {len(class_names)} classes)", where=str(cub / "classes.txt"))
    groups = dict(groups or {})
    records = []
    for iid in sorted(images):
        cid = labels[iid]
        if wanted is not None and cid not in wanted:
            continue
        flag = split.get(iid)
        records.append(ImageRecord(
            path=str(cub / "images" / images[iid]), identity=species_name(class_names[cid]),
            group=groups.get(cid, default_group),
            split={"1": "train", "0": "test"}.get(flag, None) if flag is not None else None,
            extra={"class_id": cid, "image_id": iid, "class_name": class_names[cid]}))
    if not records:
        raise InputError("no CUB images selected", where=str(cub))
    if check_files:
        check_files_exist(records, cub, "CUB", "images.txt")
    return records
