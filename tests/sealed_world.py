"""A small world gallery whose images carry distinctive names and folder (so a leak of a path, a file stem or an
image is findable in any text), imported and indexed as a sealed benchmark's gallery would be."""
from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd

INDEX = "sealed-fpr-world-v1"
SECRET = "secret-gallery-7f3a"
STEM = "sealedimg"


def sealed_world(root: Path, ws: Path) -> tuple[dict[str, list[dict]], list[Path]]:
    """Render 3 species x 2 identities (64 px, 2 generations per identity and method), copy the gallery under
    ``SECRET``/``STEM``-named files, import it into ``ws`` and build ``INDEX``; returns (query rows per method,
    gallery image files)."""
    from fpr import api
    from fpr.galleries.curate import GallerySpec
    from fpr.galleries.world import World, WorldConfig

    build = World(WorldConfig(seed=0, identities=2, gallery=2, references=1, queries=2,
                              methods=("faithful", "generic"), size=64)).write(root / "sealed-world")
    records, files = [], []
    for i, rec in enumerate(build.records):
        dest = root / SECRET / f"{STEM}-{rec.role}-{i:03d}.png"
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(rec.path, dest)
        records.append(type(rec)(**{**rec.__dict__, "path": str(dest)}))
        files.append(dest)
    api.import_gallery("sealed", records, GallerySpec(seed=0), workspace=ws, source="world")
    api.build_index("sealed", "fpr-world-v1", name=INDEX, workspace=ws, device="cpu")
    by_method: dict[str, list[dict]] = {}
    for q in build.queries:
        by_method.setdefault(q["method"], []).append(q)
    return by_method, files


def submission_folder(rows: list[dict], folder: Path) -> Path:
    """The images as a submitter holds them (``group/file.png``) and ``queries.csv`` naming them (no method)."""
    out = []
    for r in rows:
        name = f"{r['group']}/{Path(r['path']).name}"
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(r["path"], folder / name)
        out.append({"query_id": r["query_id"], "path": name, "identity": r["identity"], "group": r["group"]})
    pd.DataFrame(out).to_csv(folder / "queries.csv", index=False)
    return folder / "queries.csv"


def leaks(text: str | bytes, files: list[Path]) -> list[str]:
    """What of the sealed gallery ``text`` shows: its folder, a file's path or stem, an image's bytes (raw or
    base64, as an HTML report would embed it)."""
    import base64

    data = text.encode("utf-8", "replace") if isinstance(text, str) else text
    found = [SECRET] if SECRET.encode() in data else []
    found += [STEM] if STEM.encode() in data else []
    for f in files:
        raw = f.read_bytes()
        for needle in (str(f).encode(), f.stem.encode(), raw, base64.b64encode(raw)):
            if needle in data:
                found.append(f"{f.name} ({'bytes' if needle in (raw, base64.b64encode(raw)) else 'name'})")
    return found
