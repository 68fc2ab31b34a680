"""The workspace: ``fpr.duckdb`` (galleries, indices, runs, per-query results, auxiliary
scores, rankings) and ``indices/<name>/`` (FAISS file + card).

Concurrency: DuckDB allows one writing process. Every access opens the database
only for the duration of one transaction, under a file lock, so long work
(embedding, searching) never holds it and a second fpr process waits (up to
``FPR_LOCK_TIMEOUT`` seconds, default 120) instead of failing or corrupting
anything. Every write is one transaction: an interrupted command leaves the
previous state intact.
"""
from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import duckdb
from filelock import FileLock, Timeout

from fpr.errors import BusyError, InputError, NotFoundError

SCHEMA_VERSION = "1"

SCHEMA = [
    "CREATE TABLE IF NOT EXISTS meta (key VARCHAR PRIMARY KEY, value VARCHAR)",
    """CREATE TABLE IF NOT EXISTS galleries (
        name VARCHAR PRIMARY KEY, source VARCHAR, spec JSON, fingerprint VARCHAR,
        n_items INTEGER, n_reference INTEGER, n_gallery INTEGER, n_identities INTEGER, n_groups INTEGER,
        report JSON, created_at TIMESTAMP DEFAULT current_timestamp)""",
    """CREATE TABLE IF NOT EXISTS gallery_items (
        gallery VARCHAR, item_id INTEGER, path VARCHAR, content_hash VARCHAR, identity VARCHAR,
        group_name VARCHAR, role VARCHAR, PRIMARY KEY (gallery, item_id))""",
    """CREATE TABLE IF NOT EXISTS indices (
        name VARCHAR PRIMARY KEY, gallery VARCHAR, encoder VARCHAR, weights_checksum VARCHAR,
        gallery_fingerprint VARCHAR, dim INTEGER, n_items INTEGER, path VARCHAR, card JSON,
        created_at TIMESTAMP DEFAULT current_timestamp)""",
    """CREATE TABLE IF NOT EXISTS runs (
        run_id VARCHAR PRIMARY KEY, index_name VARCHAR, gallery VARCHAR, encoder VARCHAR, scope VARCHAR,
        n_queries INTEGER, n_evaluated INTEGER, n_skipped INTEGER, queries_file VARCHAR, params JSON,
        provenance JSON, created_at TIMESTAMP DEFAULT current_timestamp)""",
    """CREATE TABLE IF NOT EXISTS query_results (
        run_id VARCHAR, query_id VARCHAR, row_number INTEGER, path VARCHAR, content_hash VARCHAR,
        method VARCHAR, identity VARCHAR, group_name VARCHAR, prompt VARCHAR, reference_paths VARCHAR,
        status VARCHAR, ap DOUBLE, first_hit_rank INTEGER, last_hit_rank INTEGER, n_relevant INTEGER,
        n_scope INTEGER, cmc1 DOUBLE, cmc5 DOUBLE, cmc10 DOUBLE, inp DOUBLE, sim DOUBLE, n_references INTEGER,
        extra JSON, PRIMARY KEY (run_id, query_id))""",
    """CREATE TABLE IF NOT EXISTS aux_scores (
        run_id VARCHAR, query_id VARCHAR, scorer VARCHAR, metric VARCHAR, value DOUBLE,
        PRIMARY KEY (run_id, query_id, scorer, metric))""",
    """CREATE TABLE IF NOT EXISTS rankings (
        run_id VARCHAR, query_id VARCHAR, rank INTEGER, item_id INTEGER, score DOUBLE, relevant BOOLEAN)""",
    # One row per (ablation, variant, repeat, method): written by fpr.eval.ablate.
    """CREATE TABLE IF NOT EXISTS ablations (
    ablation VARCHAR, variant VARCHAR, gallery VARCHAR, encoder VARCHAR, per_identity INTEGER,
    identities INTEGER, sampling VARCHAR, "repeat" INTEGER, seed INTEGER, method VARCHAR,
    oracle_map DOUBLE, oracle_sim DOUBLE, oracle_n INTEGER, generated_map DOUBLE, generated_sim DOUBLE,
    generated_n INTEGER, gallery_images INTEGER, params JSON, created_at TIMESTAMP DEFAULT current_timestamp,
    PRIMARY KEY (ablation, variant, "repeat", method))""",
]


def resolve_workspace(workspace: str | Path | None) -> Path:
    if workspace is None:
        workspace = os.environ.get("FPR_WORKSPACE", "fpr-workspace")
    return Path(workspace).expanduser()


@dataclass
class Workspace:
    root: Path

    @classmethod
    def open(cls, workspace: str | Path | None = None) -> "Workspace":
        root = resolve_workspace(workspace)
        if root.exists() and not root.is_dir():
            raise InputError("workspace path exists and is not a folder", where=str(root))
        return cls(root)

    @property
    def db_path(self) -> Path:
        return self.root / "fpr.duckdb"

    @property
    def indices_dir(self) -> Path:
        return self.root / "indices"

    def index_dir(self, name: str) -> Path:
        return self.indices_dir / name

    @property
    def exists(self) -> bool:
        return self.db_path.exists()

    def _lock(self) -> FileLock:
        self.root.mkdir(parents=True, exist_ok=True)
        return FileLock(str(self.root / ".fpr.lock"))

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        timeout = float(os.environ.get("FPR_LOCK_TIMEOUT", "120"))
        lock = self._lock()
        try:
            lock.acquire(timeout=timeout)
        except Timeout:
            raise BusyError(f"workspace is busy: another fpr process has been writing for over {timeout:.0f}s",
                            where=str(self.root), hint="wait for it to finish, or raise FPR_LOCK_TIMEOUT") from None
        try:
            yield
        finally:
            lock.release()

    @contextlib.contextmanager
    def write(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """One write transaction: committed on success, rolled back on any error or interrupt."""
        with self._locked():
            con = self._connect(read_only=False)
            try:
                con.execute("BEGIN TRANSACTION")
                yield con
                con.execute("COMMIT")
            except BaseException:
                with contextlib.suppress(Exception):
                    con.execute("ROLLBACK")
                raise
            finally:
                con.close()

    @contextlib.contextmanager
    def read(self) -> Iterator[duckdb.DuckDBPyConnection]:
        if not self.exists:
            raise NotFoundError("no fpr workspace here yet", where=str(self.root),
                                hint="run 'fpr gallery import' or 'fpr demo' first, or pass --workspace")
        with self._locked():
            con = self._connect(read_only=True)
            try:
                yield con
            finally:
                con.close()

    def _connect(self, read_only: bool) -> duckdb.DuckDBPyConnection:
        try:
            if read_only:
                return duckdb.connect(str(self.db_path), read_only=True)
            self.root.mkdir(parents=True, exist_ok=True)
            con = duckdb.connect(str(self.db_path))
        except duckdb.IOException as exc:
            raise BusyError("cannot open the workspace database: " + str(exc).splitlines()[0],
                            where=str(self.db_path), hint="another program may hold it open; close it and retry") \
                from None
        self._migrate(con)
        return con

    def _migrate(self, con: duckdb.DuckDBPyConnection) -> None:
        for stmt in SCHEMA:
            con.execute(stmt)
        row = con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        if row is None:
            con.execute("INSERT INTO meta VALUES ('schema_version', ?)", [SCHEMA_VERSION])
        elif row[0] != SCHEMA_VERSION:
            raise InputError(f"workspace schema version {row[0]} is not supported by this fpr "
                             f"(expects {SCHEMA_VERSION})", where=str(self.db_path))


def insert_df(con: duckdb.DuckDBPyConnection, table: str, df) -> None:
    """Insert a pandas DataFrame by column name (columns not in the frame get defaults)."""
    if len(df) == 0:
        return
    cols = ", ".join(f'"{c}"' for c in df.columns)
    con.register("_fpr_insert", df)
    try:
        con.execute(f"INSERT INTO {table} ({cols}) SELECT {cols} FROM _fpr_insert")
    finally:
        con.unregister("_fpr_insert")
