"""The one caching mechanism: a content key, one SQLite store shape, one failure policy.

fpr keeps four things across runs. Three are *caches*: values that can be recomputed exactly at any
time, kept in ``$FPR_CACHE_DIR`` and deletable freely:

- embeddings (:mod:`fpr.encoders.cache`): a :class:`SqliteStore` per embedding key;
- per-query scores of deterministic scorers (:mod:`fpr.scorers.cache`): one :class:`SqliteStore`;
- rendered worlds (:mod:`fpr.galleries.world.cache`): folders of PNGs (hard-linked into a run's folder,
  which a database cannot do), keyed and failing by the same rules.

The fourth, the model judges' replies (:mod:`fpr.scorers.judges.cache`), is a *record*: sampled from a
remote model, not reproducible, kept in the workspace; a run that cannot store it fails (its values could
not be given again). Its entries carry the same two checks as a store's rows (:func:`seal`).

Within one process, loaded models (encoders, OCR engines, depth, segmentation and RefVNLI networks) are
held by :data:`MODELS` (:func:`load_once`), the one in-process model cache with one keep-and-evict rule.

**Key.** :func:`content_key` of a dict of everything the value depends on (code versions, options,
library versions, input digests): :func:`fpr.keys.json_digest`; no path or name, so the same content hits
in any workspace.

**Store shape.** One table ``<table>(<key> TEXT PRIMARY KEY, <value> BLOB|TEXT NOT NULL, code TEXT,
checksum TEXT) WITHOUT ROWID``
in a SQLite file that several processes share (WAL journal, a busy timeout, ``INSERT OR IGNORE`` so racing
writers of one key agree, each batch one transaction: a killed process leaves it readable). The table and
column names are each store's own (the files written by earlier versions stay valid).

**Rows that verify themselves** (issue #35). Each row carries ``code``, the key of the code that made its
value (the embedding key; a scorer's version, covering its own module and its subclasses' wherever they
live), and ``checksum``, :func:`fpr.keys.row_checksum` of its key, that code key and its value's bytes. A
read returns a row only when both match (and the store's ``decode`` accepts it); any other row found is
one warning for the batch, deleted and recomputed, so an entry damaged in place (a number or an object
where a value belongs, flipped bytes, a row of another length, a row of older code) is never served.
Rows of the previous format (no ``checksum``: fpr before issue #35, or an older fpr sharing the file)
are *misses*, deleted without a warning and recomputed: nothing tells such a row from one damaged in
place, so serving it could serve a wrong value; the price is one recomputation. The two columns are
added to a table of the previous shape when it is opened (an older fpr still reads and writes it).

**Failure policy, the one rule:** a cache that cannot be written or read (an unwritable folder, a full
disk, a lock held too long) is one warning on stderr naming it and what to do, and the run goes on
without it, computing the values as it would without a cache; damage (a file that is not a database, an
entry that does not parse) is one warning, the damaged part set aside or deleted, and recomputed. Never a
failed run, never a silent skip. Only a cache that *is* the record (the judges') fails instead.
"""
from __future__ import annotations

import sqlite3
import threading
from pathlib import Path
from typing import Any, Callable, Hashable, Iterable, TypeVar

from fpr import keys, progress, settings
from fpr.files import replace_file

T = TypeVar("T")
BUSY_TIMEOUT_S = 60.0
LOOKUP_CHUNK = 500  # keys per SELECT (well under SQLite's bound-parameter limit)


def content_key(material: dict) -> str:
    """The cache key of ``material`` (everything the cached value depends on)."""
    return keys.json_digest(material)


def enabled(setting: str) -> bool:
    """Whether the cache switched by ``setting`` (a flag of :mod:`fpr.settings`, default on) is on."""
    return settings.flag(setting)


def reason(exc: BaseException) -> str:
    """``Type: first line`` of an exception, for a one-line warning."""
    return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"


_warned_unusable: set[tuple[str, str]] = set()  # (what, where) said once per process
_warned_lock = threading.Lock()


def warn_unusable(what: str, where: Any, exc: BaseException | str, hint: str, going_on: str) -> None:
    """The policy's one line: ``what`` at ``where`` cannot be used (why); the run goes on (``going_on``).
    Said once per process for a given cache and place: a command that opens the same cache twice (an index
    build embeds the gallery, then its references for the difficulty line) warns once."""
    with _warned_lock:
        if (what, str(where)) in _warned_unusable:
            return
        _warned_unusable.add((what, str(where)))
    why = exc if isinstance(exc, str) else reason(exc)
    progress.warn(f"the {what} {where} cannot be used ({why}); {going_on} ({hint})")


def set_aside(path: Path, what: str, why: str, then: str) -> bool:
    """Rename a damaged cache file to ``*.damaged`` (kept for inspection, never read again) and say so in one
    line; False when another process did it first (and reported it)."""
    target = path.with_name(path.name + ".damaged")
    try:
        replace_file(path, target)
        moved = f"moved aside to {target.name}"
    except FileNotFoundError:
        return False
    except OSError as exc:
        moved = f"could not move it aside ({exc.strerror})"
    for suffix in ("-wal", "-shm"):
        Path(str(path) + suffix).unlink(missing_ok=True)
    progress.warn(f"damaged {what} {path} ({why}); {moved}; {then}")
    return True


def open_shared_db(path: str | Path, schema: str, table: str, timeout_s: float = BUSY_TIMEOUT_S) -> sqlite3.Connection:
    """A SQLite database several processes read and write at once: WAL journal (readers never wait for a
    writer), ``synchronous=NORMAL`` (with WAL a killed process never corrupts it), autocommit (callers open
    their own ``BEGIN IMMEDIATE`` transactions), ``schema`` created and ``table`` read once. A file that is
    not a readable database raises :class:`sqlite3.DatabaseError` (the caller sets it aside)."""
    con = sqlite3.connect(path, timeout=timeout_s, isolation_level=None, check_same_thread=False)
    try:
        con.execute("PRAGMA journal_mode=WAL")
        con.execute("PRAGMA synchronous=NORMAL")
        con.execute(schema)
        con.execute(f"SELECT count(*) FROM (SELECT 1 FROM {table} LIMIT 1)").fetchone()
    except sqlite3.DatabaseError:
        con.close()
        raise
    return con


def seal(key: str, code: str, entry: dict) -> dict:
    """``entry`` (a JSON object kept as a file: a judge's reply) with its ``code`` key and ``checksum``: the
    file-entry form of a :class:`SqliteStore` row's two columns, checked by :func:`unsealed_damage`."""
    body = {k: v for k, v in entry.items() if k not in ("code", "checksum")}
    body["key"], body["code"] = key, code
    return {**body, "checksum": keys.row_checksum(key, code, keys.canonical_json(body))}


def unsealed_damage(key: str, code: str, entry: Any) -> str | None:
    """Why the file entry ``entry`` read for ``key`` cannot be served to ``code`` (None when it can): not an
    object, of another key, made by other code, or a checksum that differs from its content. An entry of the
    previous format (no checksum) is judged by its ``key`` field alone, where it has one (the caller checks
    its shape): such files are records that cannot be made again, so they are read, not dropped."""
    if not isinstance(entry, dict):
        return f"a JSON {type(entry).__name__}, not an object"
    if "checksum" not in entry:  # the previous format: a key field, where it has one, must be this key
        return None if entry.get("key", key) == key else "an entry of another request"
    if entry.get("key") != key:
        return "an entry of another request"
    if entry.get("code") != code:
        return "made by other code"
    body = {k: v for k, v in entry.items() if k != "checksum"}
    if entry["checksum"] != keys.row_checksum(key, code, keys.canonical_json(body)):
        return "checksum differs from its content"
    return None


class SqliteStore:
    """``get_many`` / ``put_many`` / ``delete`` of values by key in one shared SQLite table, under the
    failure policy above (thread-safe; one connection per store)."""

    def __init__(self, path: str | Path, *, what: str, hint: str, table: str = "entries", key: str = "key",
                 value: str = "value", value_type: str = "BLOB", going_on: str = "going on without it",
                 recompute: str = "its values are computed again"):
        self.path = Path(path)
        self.what, self.hint, self.going_on, self.recompute = what, hint, going_on, recompute
        self.table, self.key, self.value = table, key, value
        self.schema = (f"CREATE TABLE IF NOT EXISTS {table} ({key} TEXT PRIMARY KEY, {value} {value_type} NOT NULL,"
                       " code TEXT, checksum TEXT) WITHOUT ROWID")
        self._con: sqlite3.Connection | None = None
        self._broken = False  # cannot be used: reported once, then bypassed
        self.lock = threading.RLock()
        self._named = what.replace(" ", "-")  # "damaged score-cache entry"

    # ------------------------------------------------------------------ the policy

    def fail(self, exc: BaseException | str) -> None:
        """Report once that the store cannot be used, and bypass it from here on."""
        if not self._broken:
            warn_unusable(self.what, self.path, exc, self.hint, self.going_on)
        self._broken = True
        self.close()

    @property
    def usable(self) -> bool:
        return not self._broken

    def connect(self, *, create: bool) -> sqlite3.Connection | None:
        """The connection; None when the store is bypassed, or absent and ``create`` is false."""
        with self.lock:
            if self._con is not None or self._broken:
                return self._con
            if not create and not self.path.exists():
                return None
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                try:
                    self._con = open_shared_db(self.path, self.schema, self.table)
                except sqlite3.DatabaseError as exc:
                    if isinstance(exc, sqlite3.OperationalError):  # locked, unwritable: not damage
                        raise
                    set_aside(self.path, f"{self._named} database", reason(exc), self.recompute)
                    self._con = open_shared_db(self.path, self.schema, self.table)
                self._add_check_columns(self._con)
            except (sqlite3.DatabaseError, OSError) as exc:
                self.fail(exc)
            return self._con

    def _add_check_columns(self, con: sqlite3.Connection) -> None:
        """Give a table of the previous shape (key, value) the ``code`` and ``checksum`` columns."""
        have = {row[1] for row in con.execute(f"PRAGMA table_info({self.table})")}
        for column in ("code", "checksum"):
            if column not in have:
                try:
                    con.execute(f"ALTER TABLE {self.table} ADD COLUMN {column} TEXT")
                except sqlite3.OperationalError as exc:
                    if "duplicate column" not in str(exc):  # another process added it first: fine
                        raise

    def close(self) -> None:
        with self.lock:
            if self._con is not None:
                self._con.close()
                self._con = None

    # ------------------------------------------------------------------ reads and writes

    def get_many(self, wanted: Iterable[str], code: str = "", decode: Callable[[Any], Any] | None = None,
                 *, verify: bool = True) -> dict[str, Any]:
        """The verified values of ``wanted`` (those present); {} when bypassed or damaged (then reported).

        A row is returned (through ``decode``, which raises ValueError or TypeError on a value it rejects)
        only when it was made by ``code`` and its checksum matches; the other rows found are deleted: those
        of the previous format (no checksum) quietly, damaged ones in one warning. ``verify=False`` skips
        the checks (the benchmark's baseline only)."""
        wanted = list(dict.fromkeys(wanted))
        with self.lock:
            con = self.connect(create=False) if wanted else None
            if con is None:
                return {}
            rows: list[tuple] = []
            try:
                for s in range(0, len(wanted), LOOKUP_CHUNK):
                    part = wanted[s:s + LOOKUP_CHUNK]
                    rows += con.execute(f"SELECT {self.key}, {self.value}, code, checksum FROM {self.table} WHERE "
                                        f"{self.key} IN ({','.join('?' * len(part))})", part).fetchall()
            except sqlite3.DatabaseError as exc:
                self.close()
                if isinstance(exc, sqlite3.OperationalError):
                    self.fail(exc)
                else:
                    set_aside(self.path, f"{self._named} database", reason(exc), self.recompute)
                return {}
            out: dict[str, Any] = {}
            legacy: list[str] = []
            bad: dict[str, str] = {}
            for key, value, made_by, checksum in rows:
                if not verify:
                    out[key] = value if decode is None else decode(value)
                elif checksum is None:
                    legacy.append(key)
                elif made_by != code:
                    bad.setdefault(key, "made by other code")
                elif checksum != keys.row_checksum(key, code, value):
                    bad.setdefault(key, "checksum differs from its value")
                elif decode is None:
                    out[key] = value
                else:
                    try:
                        out[key] = decode(value)
                    except (ValueError, TypeError) as exc:
                        bad.setdefault(key, str(exc) or type(exc).__name__)
            if legacy:
                self._remove(legacy)
            if bad:
                self.delete(list(bad), "; ".join(dict.fromkeys(bad.values())))
            return out

    def _remove(self, gone: list[str]) -> None:
        con = self.connect(create=False)
        if con is None:
            return
        try:
            con.executemany(f"DELETE FROM {self.table} WHERE {self.key} = ?", [(k,) for k in gone])
        except sqlite3.DatabaseError as exc:
            self.fail(exc)

    def delete(self, bad: list[str], why: str) -> None:
        """Remove damaged entries (reported in one line; they are recomputed)."""
        if not bad:
            return
        with self.lock:
            self._remove(bad)
            if not self.usable:
                return
        progress.warn(f"{len(bad)} damaged {self._named} entr{'y' if len(bad) == 1 else 'ies'} in {self.path} "
                      f"({why}, e.g. {bad[0]}); removed; {self.recompute}")

    def put_many(self, items: Iterable[tuple[str, Any]], code: str = "") -> None:
        """Store ``(key, value)`` pairs made by ``code`` with their checksums, in one transaction (the first
        writer of a key wins)."""
        items = [(k, v, code, keys.row_checksum(k, code, v)) for k, v in items]
        with self.lock:
            con = self.connect(create=True) if items else None
            if con is None:
                return
            try:
                con.execute("BEGIN IMMEDIATE")
                con.executemany(f"INSERT OR IGNORE INTO {self.table} ({self.key}, {self.value}, code, checksum) "
                                "VALUES (?, ?, ?, ?)", items)
                con.execute("COMMIT")
            except sqlite3.DatabaseError as exc:
                if con.in_transaction:
                    con.execute("ROLLBACK")
                self.fail(exc)

    def count(self) -> int:
        with self.lock:
            con = self.connect(create=False)
            return 0 if con is None else int(con.execute(f"SELECT count(*) FROM {self.table}").fetchone()[0])

    def checkpoint(self) -> None:
        """Fold the write-ahead log into the database."""
        with self.lock:
            con = self.connect(create=False)
            if con is not None:
                con.execute("PRAGMA wal_checkpoint(TRUNCATE)")


__all__ = ["BUSY_TIMEOUT_S", "SqliteStore", "content_key", "enabled", "open_shared_db", "reason", "seal",
           "set_aside", "unsealed_damage", "warn_unusable"]


# --------------------------------------------------------------------------- loaded models (in process)

class LoadedModels:
    """The one in-process cache of loaded models (encoders, OCR engines, depth, segmentation and judge
    networks): each loader's results under its owner's name, the ``keep`` most recently used per owner
    (a filter scores chunk after chunk with the same few models; a long-lived worker that switches
    models must not keep every one in memory). Two threads asking for one model load it once; a model
    loading never blocks the lookup of another. A load that raises is not kept (the next call tries
    again); a loader that returns the *reason* a model is unavailable (a string) has that reason kept, so a missing model is looked for
    once per process. Nothing here outlives the process: weights on disk are the encoders' own cache."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # guards the tables; never held while a model loads
        self._owners: dict[str, dict[Hashable, Any]] = {}
        self._loading: dict[tuple[str, Hashable], threading.Lock] = {}

    def get(self, owner: str, key: Hashable, load: Callable[[], T], *, keep: int = 2) -> T:
        with self._lock:
            if self._held(owner, key):
                return self._owners[owner][key]
            slot = self._loading.setdefault((owner, key), threading.Lock())
        with slot:  # one loader per (owner, key); other models stay reachable meanwhile
            with self._lock:
                if self._held(owner, key):  # loaded by the thread this one waited for
                    return self._owners[owner][key]
            try:
                value = load()
            except BaseException:
                with self._lock:
                    self._loading.pop((owner, key), None)
                raise
            with self._lock:
                entries = self._owners.setdefault(owner, {})
                entries[key] = value
                while len(entries) > max(1, keep):
                    entries.pop(next(iter(entries)))
                self._loading.pop((owner, key), None)
            return value

    def _held(self, owner: str, key: Hashable) -> bool:
        """Whether (owner, key) is held, marking it most recently used (call with the lock held)."""
        entries = self._owners.get(owner, {})
        if key not in entries:
            return False
        entries[key] = entries.pop(key)
        return True

    def forget(self, owner: str | None = None) -> None:
        """Drop one owner's models (all owners' when None): tests, and a service reloading its models."""
        with self._lock:
            if owner is None:
                self._owners.clear()
            else:
                self._owners.pop(owner, None)

    def held(self, owner: str) -> list[Hashable]:
        """The keys one owner holds now, least recently used first."""
        with self._lock:
            return list(self._owners.get(owner, {}))


MODELS = LoadedModels()


def load_once(owner: str, key: Hashable, load: Callable[[], T], *, keep: int = 2) -> T:
    """``load()`` once per process for (``owner``, ``key``): :class:`LoadedModels`' one policy."""
    return MODELS.get(owner, key, load, keep=keep)
