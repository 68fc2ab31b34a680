"""Durable job records: one JSON file per run under ``<workspace>/serve/jobs/``.

Job state lives outside the workspace database on purpose: the database holds
results, these files hold the service's queue. Every write goes through
:func:`fpr.files.atomic_write` (a temporary file renamed over the old one), so a
reader or a crash never sees half a record.

Statuses: ``queued`` -> ``running`` -> ``done`` | ``failed``. A record that cannot be read (truncated,
not JSON, missing fields) is set aside as ``<run>.json.damaged``, like a damaged cache shard, and shows
as status ``damaged`` with the reason: one bad file never takes the service down.
"""
from __future__ import annotations

import json
import os
import threading
from pathlib import Path

from fpr import keys
from fpr.files import atomic_write, replace_file

QUEUED, RUNNING, DONE, FAILED, DAMAGED = "queued", "running", "done", "failed", "damaged"
ACTIVE = (QUEUED, RUNNING)
STATUSES = (QUEUED, RUNNING, DONE, FAILED)
REQUIRED_KEYS = ("run", "status", "created_at")
DAMAGED_SUFFIX = ".json.damaged"
PUBLIC_JOB_KEYS = ("run", "status", "user", "index", "scope", "scorers", "n_images", "created_at", "started_at",
                   "finished_at", "progress", "error", "benchmark", "submission")


def damage_reason(run: str, data: bytes) -> str | None:
    """Why the bytes of ``<run>.json`` are not a usable job record, or None if they are."""
    try:
        job = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:  # JSONDecodeError is a ValueError
        return f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}"
    if not isinstance(job, dict):
        return f"a JSON {type(job).__name__}, not an object"
    missing = [k for k in REQUIRED_KEYS if not isinstance(job.get(k), str)]
    if missing:
        return f"missing or non-text field(s) {', '.join(missing)}"
    if job["run"] != run:
        return f"its run field '{job['run'][:80]}' is not its file name '{run}'"
    if job["status"] not in STATUSES:
        return f"unknown status '{job['status'][:40]}'"
    return None


def damaged_job(run: str, reason: str) -> dict:
    """The stand-in record of a set-aside job file (never written back)."""
    return {"run": run, "status": DAMAGED, "created_at": "", "error": f"the service's record of this run is damaged "
            f"({reason}); it was set aside as <workspace>/serve/jobs/{run}{DAMAGED_SUFFIX}; DELETE the run and "
            "resubmit it"}


def now() -> str:
    return keys.utc_now_precise()


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

    def __init__(self, folder: Path, *, create: bool = True):
        self.folder = folder
        if create:  # the server creates it at start, under its lock
            self.folder.mkdir(parents=True, exist_ok=True)
        self.lock = threading.RLock()
        self.on_damaged = None  # called (run, reason) when a record is set aside: the server logs it

    def _path(self, run: str) -> Path:
        return self.folder / f"{run}.json"

    def _aside(self, run: str) -> Path:
        return self.folder / f"{run}{DAMAGED_SUFFIX}"

    def get(self, run: str) -> dict | None:
        """The record, a ``damaged`` stand-in for one set aside (now or before), or None."""
        try:
            data = self._path(run).read_bytes()
        except FileNotFoundError:
            return self._damaged(run)
        if damage_reason(run, data) is None:
            return json.loads(data)
        with self.lock:  # look again under the lock: a writer may have just replaced it, or a reader set it aside
            try:
                data = self._path(run).read_bytes()
            except FileNotFoundError:
                return self._damaged(run)
            reason = damage_reason(run, data)
            if reason is None:
                return json.loads(data)
            replace_file(self._path(run), self._aside(run))  # set aside, kept for inspection
        if self.on_damaged is not None:
            self.on_damaged(run, reason)
        return damaged_job(run, reason)

    def _damaged(self, run: str) -> dict | None:
        try:
            data = self._aside(run).read_bytes()
        except FileNotFoundError:
            return None
        return damaged_job(run, damage_reason(run, data) or "set aside earlier")

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
            if job is None or job["status"] == DAMAGED:
                return None
            job.update(changes)
            return self.put(job, sync=sync)

    def delete(self, run: str) -> None:
        with self.lock:
            self._path(run).unlink(missing_ok=True)
            self._aside(run).unlink(missing_ok=True)

    def all(self) -> list[dict]:
        """Every record, damaged ones (set aside now or before) included, oldest first."""
        runs = {p.stem for p in self.folder.glob("*.json")}
        runs |= {p.name[:-len(DAMAGED_SUFFIX)] for p in self.folder.glob(f"*{DAMAGED_SUFFIX}")}
        jobs = [job for run in sorted(runs) if (job := self.get(run)) is not None]
        return sorted(jobs, key=lambda j: j.get("created_at", ""))

    def active_for(self, user: str) -> int:
        return sum(1 for j in self.all() if j.get("user") == user and j.get("status") in ACTIVE)
