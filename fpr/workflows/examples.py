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
from fpr.files import ensure_dir, new_temp_dir, replace_file, swap_in_dir
from fpr.tables import write_table

GENERATED_METHODS = ("new-scene@0", "new-scene@0.5", "paste")
SECOND_METHODS = ("new-scene@0.1", "new-scene@1")  # textual-inversion.csv: a second run over other methods
# the world of `fpr demo --quick` (fpr.workflows.demo.QUICK at seed 0): its files come from the same cache entry
WORLD = dict(identities=5, gallery=6, references=2, queries=2, size=96)
FILES = ("data/animals", "generations", "generated.csv", "textual-inversion.csv", "queries.csv", "a.png", "b.png")
QUERY_COLUMNS = ["query_id", "path", "identity", "group", "method", "prompt", "reference_paths", "drift"]


@dataclass
class Examples:
    """What :func:`write_examples` wrote (paths relative to ``root``)."""

    root: Path
    files: list[str] = field(default_factory=list)
    n_gallery_images: int = 0
    n_generations: int = 0


def write_examples(out: str | Path = ".", *, seed: int = 0, overwrite: bool = False) -> Examples:
    """Write the documents' example inputs into ``out`` (see the module docstring). Files already there with
    the same bytes are kept (the command can be run again); different ones are refused unless ``overwrite``.
    Everything is built in a hidden folder beside them first, then moved in."""
    from fpr.galleries.world import World, WorldConfig

    root = ensure_dir(Path(out).expanduser().resolve())
    methods = GENERATED_METHODS + SECOND_METHODS
    stage = new_temp_dir(root / "examples")
    try:
        with tempfile.TemporaryDirectory(prefix="fpr-examples-") as tmp:
            build = World(WorldConfig(seed=seed, methods=methods, **WORLD)).write(tmp, cache=True)
            _stage(build, Path(tmp).resolve(), stage)
        differ = [name for name in FILES if (root / name).exists() and not _same(stage / name, root / name)]
        if differ and not overwrite:
            raise ConflictError(f"{', '.join(differ)} already exist(s) with other content", where=str(root),
                                hint="choose an empty folder or pass --overwrite")
        kept = [name for name in FILES if (root / name).exists() and name not in differ]
        for name in FILES:
            if name in kept:
                continue
            if (stage / name).is_dir():
                swap_in_dir(stage / name, ensure_dir((root / name).parent) / Path(name).name)
            else:
                replace_file(stage / name, root / name)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    if kept:
        progress.log(f"kept {', '.join(kept)} (already there, the same bytes)")
    progress.log(f"{len(build.records)} gallery images under data/animals, {len(build.queries)} generations under "
                 f"generations/ in {root}")
    return Examples(root, list(FILES), len(build.records), len(build.queries))


def _stage(build, world: Path, stage: Path) -> None:
    """Every example file of a rendered world into ``stage``."""
    moved = _gallery(build.records, world, stage) | _generations(build.queries, world, stage)
    queries = pd.DataFrame(build.queries)
    queries["path"] = [moved[str(Path(p).resolve())] for p in queries["path"]]
    queries["reference_paths"] = [";".join(moved[str(Path(r).resolve())] for r in refs.split(";") if r)
                                  for refs in queries["reference_paths"]]
    write_table(queries[queries["method"].isin(GENERATED_METHODS)][QUERY_COLUMNS], stage / "generated.csv")
    write_table(queries[queries["method"].isin(SECOND_METHODS)][QUERY_COLUMNS], stage / "textual-inversion.csv")
    _upload(queries, stage)


def _same(new: Path, old: Path) -> bool:
    """Whether ``old`` holds exactly ``new``'s files and bytes (a folder: the same relative paths)."""
    if new.is_dir() != old.is_dir():
        return False
    if not new.is_dir():
        return new.read_bytes() == old.read_bytes()
    files = {p.relative_to(new) for p in new.rglob("*") if p.is_file()}
    return files == {p.relative_to(old) for p in old.rglob("*") if p.is_file()} and all(
        (new / f).read_bytes() == (old / f).read_bytes() for f in files)


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
