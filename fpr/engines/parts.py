"""The one resumable parts folder: work cut into numbered parts, each written atomically and marked done.

``fpr filter`` (its chunks) and the Ray engine (its shards) keep their partial results here. A
killed run resumes from the parts marked done; the folder records a fingerprint of the work, and
a folder written for different work (or asked to restart) is emptied before use. When the work is
finished the folder is renamed aside in one step and then deleted, so a kill at any moment leaves
either the whole folder (the next run assembles its outputs from it) or nothing but trash that the
next run removes.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Sequence

import pandas as pd

from fpr import keys, progress
from fpr.files import atomic_write_path, ensure_dir, replace_file

TRASH_MARK = ".done-"  # <folder>.done-<hex>: a finished folder being deleted


class PartsFolder:
    """``<root>/part-NNNNNN*``: one part's files; ``part-NNNNNN.done``, written last, marks it complete.

    ``state.json`` holds the fingerprint of the work; a folder holding another work's parts is
    emptied first, so a resumed run never mixes parts of two different inputs."""

    def __init__(self, root: Path, fingerprint: dict, *, restart: bool = False):
        self.root = Path(root)
        self.fingerprint = keys.fingerprint(fingerprint, length=24)
        remove_trash(self.root)
        state = self.root / "state.json"
        if state.exists() and not restart and self._recorded_fingerprint(state) != self.fingerprint:
            progress.log(f"found the parts of different work in {self.root}; starting over")
            restart = True
        if restart:
            shutil.rmtree(self.root, ignore_errors=True)
        if not state.exists():
            ensure_dir(self.root)
            atomic_write_path(state, lambda tmp: Path(tmp).write_text(json.dumps({"fingerprint": self.fingerprint})))

    @staticmethod
    def _recorded_fingerprint(state: Path) -> str | None:
        try:
            return json.loads(state.read_text()).get("fingerprint")
        except (OSError, ValueError):  # a damaged state file: the work is redone
            return None

    def path(self, k: int, suffix: str) -> Path:
        return self.root / f"part-{k:06d}{suffix}"

    def done(self, required: Sequence[str] = ()) -> set[int]:
        """Parts marked done whose ``required`` files (suffixes) all exist; a part missing one is redone."""
        marked = {int(p.name[5:11]) for p in self.root.glob("part-*.done")}
        return {k for k in marked if all(self.path(k, s).exists() for s in required)}

    def mark_done(self, k: int) -> None:
        atomic_write_path(self.path(k, ".done"), lambda tmp: Path(tmp).write_text("done\n"))

    def write_parquet(self, k: int, suffix: str, df: pd.DataFrame) -> None:
        atomic_write_path(self.path(k, suffix), lambda tmp: df.to_parquet(tmp, index=False))

    def write_json(self, k: int, suffix: str, obj) -> None:
        atomic_write_path(self.path(k, suffix), lambda tmp: Path(tmp).write_text(json.dumps(obj, default=str)))

    def read_parquet(self, k: int, suffix: str) -> pd.DataFrame:
        return pd.read_parquet(self.path(k, suffix))

    def read_json(self, k: int, suffix: str):
        return json.loads(self.path(k, suffix).read_text())

    def discard(self) -> None:
        discard_parts(self.root)


def discard_parts(folder: str | Path) -> None:
    """Remove a parts folder once its results are stored: renamed aside first (one step), then deleted."""
    folder = Path(folder)
    trash = folder.with_name(f"{folder.name}{TRASH_MARK}{keys.random_hex(8)}")
    try:
        replace_file(folder, trash)
    except FileNotFoundError:
        return
    shutil.rmtree(trash, ignore_errors=True)  # a kill here leaves trash that the next run removes


def remove_trash(folder: str | Path) -> None:
    """Finished folders of ``folder``'s name that a killed run was deleting."""
    folder = Path(folder)
    for trash in folder.parent.glob(f"{folder.name}{TRASH_MARK}*"):
        shutil.rmtree(trash, ignore_errors=True)


__all__ = ["PartsFolder", "discard_parts", "remove_trash"]
