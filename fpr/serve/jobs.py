"""Durable job records: one JSON file per run under ``<workspace>/serve/jobs/``.

Job state lives outside the workspace database on purpose: the database holds
results, these files hold the service's queue. Every write goes through
:func:`fpr.files.atomic_write` (a temporary file renamed over the old one), so a
reader or a crash never sees half a record.

Statuses: ``queued`` -> ``running`` -> ``done`` | ``failed``.
"""
from __future__ import annotations

import json
import os
import threading
from datetime import datetime, timezone
from pathlib import Path

from fpr.files import atomic_write

QUEUED, RUNNING, DONE, FAILED = "queued", "running", "done", "failed"
ACTIVE = (QUEUED, RUNNING)


def now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def write_json_atomic(path: Path, obj: dict, *, sync: bool = True) -> None:
    """Write ``obj`` as JSON atomically (:func:`fpr.files.atomic_write`); ``sync`` also flushes it to the disk."""
    data = json.dumps(obj, indent=1, sort_keys=True).encode()

    def write(fp) -> None:
        fp.write(data)
        if sync:
            fp.flush()
            os.fsync(fp.fileno())

    atomic_write(path, write)


class JobStore:
    """Job records, read and written under one in-process lock (the server is the only writer)."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.folder.mkdir(parents=True, exist_ok=True)
        self.lock = threading.RLock()

    def _path(self, run: str) -> Path:
        return self.folder / f"{run}.json"

    def get(self, run: str) -> dict | None:
        try:
            return json.loads(self._path(run).read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None

    def put(self, job: dict, *, sync: bool = True) -> dict:
        with self.lock:
            job = dict(job, updated_at=now())
            write_json_atomic(self._path(job["run"]), job, sync=sync)
            return job

    def update(self, run: str, *, sync: bool = True, **changes) -> dict | None:
        """Merge ``changes`` into a record; None if it was deleted meanwhile. Progress updates pass
        ``sync=False`` (still atomic, not flushed to the disk each time)."""
        with self.lock:
            job = self.get(run)
            if job is None:
                return None
            job.update(changes)
            return self.put(job, sync=sync)

    def delete(self, run: str) -> None:
        with self.lock:
            self._path(run).unlink(missing_ok=True)

    def all(self) -> list[dict]:
        jobs = []
        for p in sorted(self.folder.glob("*.json")):
            job = self.get(p.stem)
            if job is not None:
                jobs.append(job)
        return sorted(jobs, key=lambda j: j.get("created_at", ""))

    def active_for(self, user: str) -> int:
        return sum(1 for j in self.all() if j.get("user") == user and j.get("status") in ACTIVE)
