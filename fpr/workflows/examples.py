"""``fpr examples DIR``: the example inputs every document names, written from the built-in world.

The world is ``fpr demo --quick``'s (seed 0, two species x 5 identities, 2 references and 6 gallery images
each), rendered once (the world cache keeps it) and laid out as a user's own images would be:

- ``data/animals/<group>/<identity>/`` the gallery folder (``rNN.png`` the world's reference images,
  ``gNN.png`` its gallery images), as ``fpr gallery import --folder`` and ``fpr evaluate`` read it;
- ``generations/<method>/<group>/<identity>/<k>.png``: three methods' generations (``new-scene@0``
  faithful, ``new-scene@0.5`` half the markings redrawn, ``paste`` a copy of a reference), the layout
  ``fpr evaluate`` reads;
- ``generated.csv``: the same generations as a queries table (``path,identity,group,method,prompt,
  reference_paths,query_id`` and the world's ``drift``); ``textual-inversion.csv``: two more methods
  (``new-scene@0.1``, ``new-scene@1``; their images under ``generations/`` too);
- ``queries.csv`` with ``a.png`` and ``b.png``: two faithful generations, the serve example's upload.
"""
from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from fpr import progress
from fpr.errors import ConflictError
from fpr.files import ensure_dir
from fpr.tables import write_table

GENERATED_METHODS = ("new-scene@0", "new-scene@0.5", "paste")
SECOND_METHODS = ("new-scene@0.1", "new-scene@1")  # textual-inversion.csv: a second run over other methods
# the world of `fpr demo --quick` (fpr.workflows.demo.QUICK at seed 0): its files come from the same cache entry
WORLD = dict(identities=5, gallery=6, references=2, queries=2, size=96)
FILES = ("data", "generations", "generated.csv", "textual-inversion.csv", "queries.csv", "a.png", "b.png")
QUERY_COLUMNS = ["query_id", "path", "identity", "group", "method", "prompt", "reference_paths", "drift"]


@dataclass
class Examples:
    """What :func:`write_examples` wrote (paths relative to ``root``)."""

    root: Path
    files: list[str] = field(default_factory=list)
    n_gallery_images: int = 0
    n_generations: int = 0


def write_examples(out: str | Path = ".", *, seed: int = 0, overwrite: bool = False) -> Examples:
    """Write the documents' example inputs into ``out`` (see the module docstring); an existing one of them is
    refused unless ``overwrite``."""
    from fpr.galleries.world import World, WorldConfig

    root = ensure_dir(Path(out).expanduser().resolve())
    taken = [name for name in FILES if (root / name).exists()]
    if taken and not overwrite:
        raise ConflictError(f"{', '.join(taken)} already exist(s)", where=str(root),
                            hint="choose an empty folder or pass --overwrite")
    methods = GENERATED_METHODS + SECOND_METHODS
    with tempfile.TemporaryDirectory(prefix="fpr-examples-") as tmp:
        build = World(WorldConfig(seed=seed, methods=methods, **WORLD)).write(tmp, cache=True)
        world = Path(tmp).resolve()
        for name in ("data/animals", "generations"):
            if (root / name).exists():
                shutil.rmtree(root / name)
        moved = _gallery(build.records, world, root) | _generations(build.queries, world, root)
        queries = pd.DataFrame(build.queries)
        queries["path"] = [moved[str(Path(p).resolve())] for p in queries["path"]]
        queries["reference_paths"] = [";".join(moved[str(Path(r).resolve())] for r in refs.split(";") if r)
                                      for refs in queries["reference_paths"]]
        write_table(queries[queries["method"].isin(GENERATED_METHODS)][QUERY_COLUMNS], root / "generated.csv")
        write_table(queries[queries["method"].isin(SECOND_METHODS)][QUERY_COLUMNS], root / "textual-inversion.csv")
        _upload(queries, root)
    n_gal = len(build.records)
    progress.log(f"wrote {n_gal} gallery images under data/animals and {len(build.queries)} generations under "
                 f"generations/ in {root}")
    return Examples(root, list(FILES), n_gal, len(build.queries))


def _gallery(records, world: Path, root: Path) -> dict[str, str]:
    """data/animals/<group>/<identity>/{r,g}NN.png; world path -> path relative to ``root``."""
    moved: dict[str, str] = {}
    for r in records:
        rel = Path("data/animals") / r.group / r.identity / f"{r.role[0]}{Path(r.path).stem}.png"
        _copy(r.path, root / rel)
        moved[str(Path(r.path).resolve())] = rel.as_posix()
    return moved


def _generations(queries: list[dict], world: Path, root: Path) -> dict[str, str]:
    """generations/<method>/<group>/<identity>/<k>.png (the world's query id is method/identity/k)."""
    moved: dict[str, str] = {}
    for q in queries:
        k = q["query_id"].rsplit("/", 1)[1]
        rel = Path("generations") / q["method"] / q["group"] / q["identity"] / f"{k}.png"
        _copy(q["path"], root / rel)
        moved[str(Path(q["path"]).resolve())] = rel.as_posix()
    return moved


def _upload(queries: pd.DataFrame, root: Path) -> None:
    """queries.csv, a.png and b.png: two faithful generations of two identities."""
    two = queries[queries["method"] == "new-scene@0"].drop_duplicates("identity").head(2).copy()
    for name, src in zip(("a.png", "b.png"), two["path"]):
        _copy(root / src, root / name)
    two["path"] = ["a.png", "b.png"]
    write_table(two[["path", "identity", "group", "method"]], root / "queries.csv")


def _copy(src: str | Path, dest: Path) -> None:
    ensure_dir(dest.parent)
    shutil.copyfile(src, dest)


__all__ = ["Examples", "GENERATED_METHODS", "SECOND_METHODS", "write_examples"]
