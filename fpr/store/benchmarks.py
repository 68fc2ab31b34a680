"""The SQL of sealed benchmarks: their rows, their submissions (withdrawn ones kept) and the daily quota.

Each write is one transaction; the quota is counted and raised in the same transaction as its check, so
two requests of one token cannot both take the last submission of a day.
"""
from __future__ import annotations

import json

from fpr.errors import ConflictError, NotFoundError
from fpr.store.records import _frame, _records
from fpr.store.workspace import Workspace, insert_df

JSON_COLUMNS = ("scorers", "card", "images", "results")


def _decoded(row: dict) -> dict:
    return {k: (json.loads(v) if k in JSON_COLUMNS and isinstance(v, str) else v) for k, v in row.items()}


def _encoded(row: dict) -> dict:
    return {k: (json.dumps(v) if k in JSON_COLUMNS and not isinstance(v, str) else v) for k, v in row.items()}


def store_benchmark(ws: Workspace, row: dict, *, overwrite: bool) -> None:
    with ws.write() as con:
        if con.execute("SELECT 1 FROM benchmarks WHERE name = ?", [row["name"]]).fetchone():
            if not overwrite:
                raise ConflictError(f"benchmark '{row['name']}' already exists", where=str(ws.root),
                                    hint="choose another name, or pass --overwrite (its submissions stay)")
            con.execute("DELETE FROM benchmarks WHERE name = ?", [row["name"]])
        insert_df(con, "benchmarks", _frame([_encoded(row)]))


def list_benchmarks(ws: Workspace) -> list[dict]:
    if not ws.exists:
        return []
    with ws.read() as con:
        cur = con.execute("SELECT b.*, CAST(b.created_at AS VARCHAR) AS created_at, "
                          "(SELECT count(*) FROM submissions s WHERE s.benchmark = b.name "
                          "AND s.withdrawn_at IS NULL) AS n_submissions FROM benchmarks b ORDER BY name")
        return [_decoded(r) for r in _records(cur)]


def get_benchmark(ws: Workspace, name: str) -> dict:
    found = [b for b in list_benchmarks(ws) if b["name"] == name]
    if not found:
        raise NotFoundError(f"no benchmark named '{name[:80]}'", hint="'fpr benchmark list' (GET /v1/benchmarks) "
                                                                       "lists them")
    return found[0]


def store_submission(ws: Workspace, row: dict) -> None:
    with ws.write() as con:
        if con.execute("SELECT 1 FROM submissions WHERE submission_id = ?", [row["submission_id"]]).fetchone():
            raise ConflictError(f"submission '{row['submission_id']}' already exists", where=str(ws.root))
        insert_df(con, "submissions", _frame([_encoded(row)]))


def submissions(ws: Workspace, benchmark: str | None = None, submission_id: str | None = None) -> list[dict]:
    """Submissions, oldest first, withdrawn ones included; of one benchmark, or the one ``submission_id``."""
    if not ws.exists:
        return []
    where, args = [], []
    if benchmark is not None:
        where.append("benchmark = ?")
        args.append(benchmark)
    if submission_id is not None:
        where.append("submission_id = ?")
        args.append(submission_id)
    sql = "SELECT * FROM submissions" + (" WHERE " + " AND ".join(where) if where else "") + \
          " ORDER BY created_at, submission_id"
    with ws.read() as con:
        return [_decoded(r) for r in _records(con.execute(sql, args))]


def withdraw_submission(ws: Workspace, submission_id: str, *, by: str, at: str, reason: str) -> None:
    with ws.write() as con:
        row = con.execute("SELECT withdrawn_at FROM submissions WHERE submission_id = ?", [submission_id]).fetchone()
        if row is None:
            raise NotFoundError(f"no submission named '{submission_id[:80]}'")
        if row[0] is not None:
            raise ConflictError(f"submission '{submission_id}' was already withdrawn at {row[0]}")
        con.execute("UPDATE submissions SET withdrawn_by = ?, withdrawn_at = ?, withdrawn_reason = ? "
                    "WHERE submission_id = ?", [by, at, reason, submission_id])


def quota_used(ws: Workspace, holder: str, day: str) -> int:
    if not ws.exists:
        return 0
    with ws.read() as con:
        row = con.execute("SELECT n FROM submission_quota WHERE holder = ? AND day = ?", [holder, day]).fetchone()
        return int(row[0]) if row else 0


def take_quota(ws: Workspace, holder: str, day: str, limit: int) -> int | None:
    """Count one submission of ``holder`` on ``day``; the new count, or None (nothing counted) at ``limit``."""
    with ws.write() as con:
        row = con.execute("SELECT n FROM submission_quota WHERE holder = ? AND day = ?", [holder, day]).fetchone()
        used = int(row[0]) if row else 0
        if used >= limit:
            return None
        if row:
            con.execute("UPDATE submission_quota SET n = n + 1 WHERE holder = ? AND day = ?", [holder, day])
        else:
            con.execute("INSERT INTO submission_quota VALUES (?, ?, 1)", [holder, day])
        return used + 1
