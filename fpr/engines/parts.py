"""The one resumable parts folder: work cut into numbered parts, each written atomically and marked done.

A killed run resumes from the parts marked done; the folder records a fingerprint of the
work, and a folder written for different work is emptied before use.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd

from fpr import keys, progress
from fpr.files import atomic_write_path, ensure_dir


class PartsFolder:
    """``<root>/part-NNNNNN*``: one part's files; ``part-NNNNNN.done``, written last, marks it complete.

    ``state.json`` holds the fingerprint of the work; a folder holding another work's parts is
    emptied first, so a resumed run never mixes parts of two different inputs."""

    def __init__(self, root: Path, fingerprint: dict):
        self.root = Path(root)
        self.fingerprint = keys.fingerprint(fingerprint, length=24)
        state = self.root / "state.json"
        if state.exists():
            try:
                old = json.loads(state.read_text()).get("fingerprint")
            except (OSError, ValueError):
                old = None
            if old != self.fingerprint:
                progress.log(f"found the shards of a different run in {self.root}; starting over")
                shutil.rmtree(self.root, ignore_errors=True)
        if not state.exists():
            ensure_dir(self.root)
            atomic_write_path(state, lambda tmp: Path(tmp).write_text(json.dumps({"fingerprint": self.fingerprint})))

    def path(self, k: int, suffix: str) -> Path:
        return self.root / f"part-{k:06d}{suffix}"

    def done(self) -> set[int]:
        return {int(p.name[5:11]) for p in self.root.glob("part-*.done")}

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


def discard_parts(folder: str | Path) -> None:
    """Remove a parts folder once its results are stored (a rerun then computes afresh, as a local run
    does: parts are the unit of resume, not a second store)."""
    shutil.rmtree(folder, ignore_errors=True)
