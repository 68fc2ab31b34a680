"""Version folders of an index: ``indices/<name>/<version>/``.

A build writes a complete new version folder, then the store moves the index's
pointer row to it in one transaction, so a reader loads either the old version or
the new one. Folders no pointer names (older versions, builds that lost a race or
crashed before the pointer moved, temp folders) are removed later by
:func:`collect_garbage`, once they are older than a grace period that lets a
reader who read the old pointer finish loading it.
"""
from __future__ import annotations

import shutil
import time
from pathlib import Path

from fpr import keys, settings

GRACE_S = settings.get("FPR_INDEX_GRACE_S")
LEGACY_FILES = ("index.faiss", "card.json", "item_ids.npy", "references.npy", "reference_ids.npy")


def new_version() -> str:
    return "v" + keys.utc_stamp("%Y%m%dT%H%M%S") + "-" + keys.random_hex(8)


def remove_version(root: Path, version: str) -> None:
    shutil.rmtree(Path(root) / version, ignore_errors=True)


def collect_garbage(root: Path, keep: set[str], *, grace_s: float | None = None) -> list[str]:
    """Remove version and temp folders under ``root`` not in ``keep`` and older than the grace period.

    ``''`` in ``keep`` stands for a 0.1.0 index whose files sit in ``root`` itself.
    Returns what was removed.
    """
    root = Path(root)
    if not root.is_dir():
        return []
    grace = GRACE_S if grace_s is None else grace_s
    now = time.time()
    removed = []
    for entry in root.iterdir():
        if entry.name in keep or now - entry.stat().st_mtime < grace:
            continue
        if entry.is_dir() and (entry.name.startswith("v") or entry.name.startswith(".tmp")):
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry.name)
        elif entry.is_file() and "" not in keep and entry.name in LEGACY_FILES:
            entry.unlink(missing_ok=True)
            removed.append(entry.name)
    if not keep and not any(root.iterdir()):
        root.rmdir()
    return removed
