"""The workspace folder: ``fpr.duckdb`` and ``indices/<name>/<version>/``.

Concurrency: DuckDB allows one writing process. Every access opens the database
only for the duration of one transaction, under a file lock, so long work
(embedding, searching) never holds it and a second fpr process waits (up to
``FPR_LOCK_TIMEOUT`` seconds, default 120) instead of failing or corrupting
anything. Every write is one transaction: an interrupted command leaves the
previous state intact.

Schema: opening for writing migrates an older workspace to
:data:`fpr.store.schema.SCHEMA_VERSION` (one transaction); opening for reading
checks the version, migrates first when it is older and the folder is writable,
and refuses a workspace written by a newer fpr. A workspace whose folder cannot
be written is still readable (no lock is taken then: nobody can write it).

Paths of things inside the workspace (index folders, and images such as the demo's
world that live in it) are stored relative to it, so a moved or copied workspace
works from any directory.
"""
from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import duckdb
from filelock import FileLock, Timeout

from fpr import settings
from fpr.cards import utf8_path
from fpr.errors import BusyError, ConflictError, InputError, NotFoundError
from fpr.store.schema import MIGRATIONS, SCHEMA_VERSION, TABLES, VIEWS, view_ddl

DB_NAME = "fpr.duckdb"
LOCK_NAME = ".fpr.lock"
# The settings of a connection that runs users' SQL: it cannot write the database, touch any
# other file, load or install extensions, or change these settings back.
USER_SQL_CONFIG = {
    "enable_external_access": False,
    "autoload_known_extensions": False,
    "autoinstall_known_extensions": False,
    "allow_community_extensions": False,
    "lock_configuration": True,
}


def resolve_workspace(workspace: str | Path | None) -> Path:
    if workspace is None:
        workspace = settings.get("FPR_WORKSPACE")
    return Path(workspace).expanduser()


@dataclass
class Workspace:
    root: Path

    @classmethod
    def open(cls, workspace: str | Path | None = None) -> "Workspace":
        root = resolve_workspace(workspace)
        # DuckDB takes its file's path as UTF-8 text: a folder name that is not fails inside it (std::bad_cast)
        utf8_path(root.absolute(), what="workspace path",
                  hint="choose a workspace folder whose path is UTF-8 text (--workspace or FPR_WORKSPACE)")
        if root.exists() and not root.is_dir():
            raise InputError("workspace path exists and is not a folder", where=str(root),
                             hint="pass --workspace with a folder (it is created when missing)")
        return cls(root)

    # ------------------------------------------------------------------ places

    @property
    def db_path(self) -> Path:
        return self.root / DB_NAME

    @property
    def indices_dir(self) -> Path:
        return self.root / "indices"

    def index_dir(self, name: str) -> Path:
        return self.indices_dir / name

    def relative(self, path: str | Path) -> str:
        """A path inside the workspace as stored: relative to the workspace, with '/' separators."""
        p = Path(path)
        try:
            return p.resolve().relative_to(self.root.resolve()).as_posix()
        except ValueError:
            raise ValueError(f"{p} is not inside the workspace {self.root}") from None

    def absolute(self, stored: str) -> Path:
        """A stored workspace path back to a usable one (relative paths are relative to the workspace)."""
        p = Path(stored)
        return p if p.is_absolute() else self.root / p

    def portable(self, path: str) -> str:
        """An image path as stored: relative (with '/') when it lies inside the workspace, else absolute.

        A user's own image folders stay absolute (a relative path is taken from the current
        directory, as when it was read), while images fpr put in the workspace (the demo's
        world) move with it."""
        if not path:
            return path
        full = os.path.abspath(path)
        for root in self._roots():
            rel = os.path.relpath(full, root)
            if rel != os.pardir and not rel.startswith(os.pardir + os.sep):
                return Path(rel).as_posix()
        return full

    def located(self, stored: str) -> str:
        """A stored image path back to a usable one (see :meth:`portable`)."""
        if not stored or os.path.isabs(stored):
            return stored
        return str(self.root.absolute() / stored)

    def _roots(self) -> tuple[str, ...]:
        """The workspace as given and with links resolved (a path may be written either way)."""
        plain, real = os.path.abspath(self.root), os.path.realpath(self.root)
        return (plain,) if plain == real else (plain, real)

    @property
    def exists(self) -> bool:
        return self.db_path.exists()

    @property
    def writable(self) -> bool:
        folder = self.root if self.root.exists() else self._existing_parent()
        return os.access(folder, os.W_OK | os.X_OK)

    def _existing_parent(self) -> Path:
        p = self.root.absolute()
        while not p.exists() and p != p.parent:
            p = p.parent
        return p

    # ------------------------------------------------------------------ locking

    @contextlib.contextmanager
    def _locked(self, *, for_write: bool) -> Iterator[None]:
        if not for_write and not self.writable:
            yield  # a read-only folder: no writer can exist, and no lock file can be made
            return
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            lock = FileLock(str(self.root / LOCK_NAME))
        except OSError as exc:
            raise InputError(f"cannot create the workspace folder: {exc.strerror or exc}", where=str(self.root),
                             hint="pass --workspace with a folder you can write") from None
        timeout = settings.get("FPR_LOCK_TIMEOUT")
        try:
            lock.acquire(timeout=timeout)
        except Timeout:
            raise BusyError(f"workspace is busy: another fpr process has been writing for over {timeout:.0f}s",
                            where=str(self.root), hint="wait for it to finish, or raise FPR_LOCK_TIMEOUT") from None
        except OSError as exc:
            if for_write:
                raise InputError(f"workspace is not writable: {exc.strerror or exc}", where=str(self.root),
                                 hint="fix its permissions or pass --workspace with a writable folder") from None
            yield
            return
        try:
            yield
        finally:
            lock.release()

    # ------------------------------------------------------------------ connections

    @contextlib.contextmanager
    def write(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """One write transaction: committed on success, rolled back on any error or interrupt."""
        if self.root.exists() and not self.writable:
            raise InputError("workspace is not writable", where=str(self.root),
                             hint="reading still works; to change it, fix its permissions or copy it elsewhere")
        with self._locked(for_write=True):
            con = self._connect(read_only=False)
            try:
                self._migrate(con)
                con.execute("BEGIN TRANSACTION")
                yield con
                con.execute("COMMIT")
            except BaseException:
                with contextlib.suppress(duckdb.Error):
                    con.execute("ROLLBACK")
                raise
            finally:
                con.close()

    @contextlib.contextmanager
    def read(self, *, config: dict | None = None) -> Iterator[duckdb.DuckDBPyConnection]:
        """A read-only connection (held only while the block runs); migrates an older workspace first."""
        if not self.exists:
            raise NotFoundError("no fpr workspace here yet", where=str(self.root),
                                hint="run 'fpr gallery import' or 'fpr demo' first, or pass --workspace")
        for attempt in (0, 1):
            with self._locked(for_write=False):
                con = self._connect(read_only=True, config=config)
                try:
                    version = self._check_version(con)
                    if version == SCHEMA_VERSION or attempt == 1:
                        yield con
                        return
                finally:
                    con.close()
            if not self.writable:
                raise ConflictError(f"workspace schema version {version} is older than this fpr's "
                                    f"({SCHEMA_VERSION}) and the folder is read-only", where=str(self.root),
                                    hint="open it once with write access (any fpr command migrates it), or "
                                         "copy it to a writable folder")
            with self.write():
                pass  # migrates

    @contextlib.contextmanager
    def user_sql(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """A connection for users' SQL: read-only, no file system, no network, settings locked."""
        with self.read(config=USER_SQL_CONFIG) as con:
            yield con

    def _connect(self, read_only: bool, config: dict | None = None) -> duckdb.DuckDBPyConnection:
        if read_only or self.exists:
            _check_database_file(self.db_path)
        try:
            return duckdb.connect(str(self.db_path), read_only=read_only, config=config or {})
        except duckdb.IOException as exc:
            msg = str(exc).splitlines()[0]
            if "lock" in msg.lower():
                raise BusyError("the workspace database is held open by another program",
                                where=str(self.db_path), hint="close it (e.g. a duckdb shell) and retry") from None
            if "permission" in msg.lower() or "read-only" in msg.lower():
                raise InputError(f"cannot open the workspace database: {msg}", where=str(self.db_path),
                                 hint="fix its permissions or pass --workspace with a writable folder") from None
            raise _damaged(self.db_path, msg) from None
        except duckdb.Error as exc:
            raise _damaged(self.db_path, str(exc).splitlines()[0]) from None

    # ------------------------------------------------------------------ schema

    def _check_version(self, con: duckdb.DuckDBPyConnection) -> int:
        version = _stored_version(con, self.db_path)
        if version > SCHEMA_VERSION:
            raise ConflictError(f"workspace schema version {version} is newer than this fpr supports "
                                f"({SCHEMA_VERSION})", where=str(self.db_path),
                                hint="upgrade fpr (pip install -U fpr) to open it")
        return version

    def _migrate(self, con: duckdb.DuckDBPyConnection) -> None:
        """Create a new workspace at the newest schema, or migrate an older one (one transaction)."""
        version = self._check_version(con)
        if version == SCHEMA_VERSION:
            return
        con.execute("BEGIN TRANSACTION")
        try:
            if version == 0:
                for table in TABLES.values():
                    con.execute(table.ddl())
                for view in VIEWS:
                    con.execute(view_ddl(view))
                con.execute("INSERT INTO meta VALUES ('schema_version', ?)", [str(SCHEMA_VERSION)])
            else:
                for m in MIGRATIONS:
                    if m.to_version <= version:
                        continue
                    for step in m.steps:
                        for stmt in step.statements():
                            con.execute(stmt)
                    if m.python is not None:
                        m.python(con)
                    con.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", [str(m.to_version)])
            con.execute("COMMIT")
        except BaseException:
            with contextlib.suppress(duckdb.Error):
                con.execute("ROLLBACK")
            raise


def _stored_version(con: duckdb.DuckDBPyConnection, where: Path) -> int:
    """0 for an empty database; the recorded version otherwise."""
    tables = {r[0] for r in con.execute("SELECT table_name FROM information_schema.tables "
                                        "WHERE table_schema = 'main'").fetchall()}
    if not tables:
        return 0
    if "meta" not in tables:
        raise _damaged(where, "it has tables but no 'meta' table (not an fpr workspace?)")
    row = con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    try:
        return int(row[0]) if row else 0
    except ValueError:
        raise _damaged(where, f"unreadable schema version {row[0]!r}") from None


def _check_database_file(path: Path) -> None:
    if path.exists() and path.stat().st_size == 0:
        raise _damaged(path, "the file is empty (0 bytes)")


def _damaged(path: Path, detail: str) -> ConflictError:
    return ConflictError(f"the workspace database is damaged or not a DuckDB file: {detail}", where=str(path),
                         hint="restore it from a backup, or move it away and rebuild with a new workspace")


def insert_df(con: duckdb.DuckDBPyConnection, table: str, df) -> None:
    """Insert a DataFrame into a declared table by column name (absent columns get their defaults)."""
    if len(df) == 0:
        return
    declared = set(TABLES[table].names)
    unknown = [c for c in df.columns if c not in declared]
    if unknown:
        raise ValueError(f"table {table} declares no column(s) {unknown}")
    cols = ", ".join(f'"{c}"' for c in df.columns)
    con.register("_fpr_insert", df)
    try:
        con.execute(f"INSERT INTO {table} ({cols}) SELECT {cols} FROM _fpr_insert")
    finally:
        con.unregister("_fpr_insert")
