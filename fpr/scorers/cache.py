"""Per-query results of deterministic scorers, kept across runs: ``$FPR_CACHE_DIR/scores/results.sqlite``.

A scorer opts in by declaring ``deterministic = True`` (its values are a pure function of what the key
below covers) and, where its values depend on more code than its own module, ``version_modules``. A
query's key is the sha256 of :data:`PROTOCOL`, the scorer's name, its version (the sha256 of those
modules' source: editing the scorer is a new version, never a stale hit), its resolved options (defaults
filled), the kind of device it runs on, the run's encoder id, what the scorer adds (``cache_inputs``: the
embedding key of a model it loads, say), and the query's own inputs: the sha256 of its
image's bytes and of each of its references' bytes in order, its prompt, and the fields the scorer
declares in ``query_fields`` (its identity, group, or other columns of the queries table). No path is in
the key, nor the query id: the same images in another workspace or run, under other names, or against
another gallery, hit. A scorer that reads the run's gallery (``uses_gallery``) is never cached.

What is stored per key is the scorer's rows for that query (metric, value, note) as JSON: a float's
``repr`` reads back as the same float, NaN included, so a hit returns the values bit for bit. Only the
missed queries are scored, as one smaller batch (a deterministic scorer's values do not depend on its
batch-mates); a batch that misses everywhere returns the scorer's own table unchanged.

Why SQLite (as the embedding cache, :mod:`fpr.encoders.cache`): several processes write at once (the demo
and its background process, two runs), WAL and a busy timeout serialise them, ``INSERT OR IGNORE`` makes
racing writers of one key agree, and a transaction commits whole or not at all, so a killed process
leaves the cache readable. A database SQLite cannot read is reported once, set aside as ``*.damaged`` and
replaced; a row that does not parse is reported, deleted and recomputed. A cache that cannot be written is
one line on stderr and the values are computed as without it. ``FPR_SCORE_CACHE=0`` turns it off.

Not the model judges' cache (:mod:`fpr.scorers.judges.cache`): that one keeps each request's *reply*
(sampled, from a remote model, not reproducible) in the workspace, as the record of what the judge said,
and a rerun must reuse it to give the same values; deleting it changes results. This one holds values that
can be recomputed exactly at any time, so it lives in the user's cache folder and may be deleted freely.
"""
from __future__ import annotations

import functools
import importlib
import json
import os
import sqlite3
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from fpr import keys, progress, settings
from fpr.files import cache_root, open_shared_db
from fpr.images import content_hash

if TYPE_CHECKING:
    from fpr.scorers import QueryBatch, Scorer

PROTOCOL = "fpr-score-cache/1"  # bump when the key or the stored rows change meaning
ENV = "FPR_SCORE_CACHE"
OFF_VALUES = ("0", "off", "no", "false")
DB_NAME = "results.sqlite"
BUSY_TIMEOUT_S = 60.0
LOOKUP_CHUNK = 500
HINT = f"set FPR_CACHE_DIR to a writable folder, or {ENV}=0 to score without the cache"
_SCHEMA = "CREATE TABLE IF NOT EXISTS results (key TEXT PRIMARY KEY, rows TEXT NOT NULL) WITHOUT ROWID"
COLUMNS = ["query_id", "metric", "value", "note"]


def enabled() -> bool:
    return settings.flag(ENV)


@functools.cache
def _module_digest(module: str) -> str:
    path = Path(importlib.import_module(module).__file__)
    return keys.sha256_hex(f"{module}\0".encode() + path.read_bytes())


def scorer_version(scorer: Scorer) -> str | None:
    """The sha256 of the source of the modules that decide the scorer's values; None when it does not
    declare itself deterministic (then it is never cached)."""
    if not getattr(scorer, "deterministic", False):
        return None
    modules = tuple(getattr(scorer, "version_modules", ()) or (type(scorer).__module__,))
    return keys.sha256_hex("\0".join(_module_digest(m) for m in modules))


@functools.cache
def _library_versions() -> dict[str, str]:
    """The versions of the libraries every image scorer's values pass through (decoding, resizing, array
    arithmetic): a new release may move a last bit, so it is a new key, never a stale hit."""
    from importlib.metadata import version

    return {name: version(name) for name in ("numpy", "Pillow")}


def _device_kind(device: str) -> str:
    """The kind of device ``device`` runs on here (``auto`` resolved: cpu, cuda, mps): a model's last bits
    differ between kinds, so their results are kept apart."""
    from fpr.encoders.registry import pick_device  # torch: imported only when a cached scorer runs

    return pick_device(device).type


def _file_digests(paths: list[str]) -> dict[str, str | None]:
    """Each distinct path's content sha256 (None where it cannot be read: that query is scored, not cached)."""
    out: dict[str, str | None] = {}
    for p in dict.fromkeys(paths):
        try:
            out[p] = content_hash(Path(p).read_bytes())
        except OSError:  # the scorer reports a missing image its own way (a NaN and its reason)
            out[p] = None
    return out


def query_keys(scorer: Scorer, version: str, batch: QueryBatch) -> list[str | None]:
    """Per query of ``batch``: its cache key, or None when one of its files cannot be read."""
    common = {"protocol": PROTOCOL, "scorer": scorer.name, "version": version, "libraries": _library_versions(),
              "options": scorer.option_values(batch.options), "device": _device_kind(batch.device),
              "encoder": batch.encoder_id, "inputs": scorer.cache_inputs(batch)}
    digests = _file_digests([*batch.paths, *(r for refs in batch.reference_paths for r in refs)])
    out: list[str | None] = []
    for i in range(len(batch)):
        files = [digests[batch.paths[i]], *(digests[r] for r in batch.reference_paths[i])]
        if None in files:
            out.append(None)
            continue
        own = {"image": files[0], "references": files[1:], "prompt": batch.prompts[i],
               **{f: _field(batch, i, f) for f in scorer.query_fields}}
        out.append(keys.json_digest({**common, "query": own}))
    return out


def _field(batch: QueryBatch, i: int, name: str):
    """Query ``i``'s value of a declared field: its identity, group, or a column of the queries table."""
    if name in ("identity", "group"):
        return (batch.identities if name == "identity" else batch.groups)[i]
    return (batch.extras[i] if batch.extras is not None else {}).get(name)


def subset(batch: QueryBatch, rows: list[int]) -> QueryBatch:
    """The queries ``rows`` of ``batch`` as a batch of their own (the gallery and options unchanged)."""
    def pick(values):
        return None if values is None else [values[i] for i in rows]

    return replace(batch, query_ids=pick(batch.query_ids), paths=pick(batch.paths), identities=pick(batch.identities),
                   groups=pick(batch.groups), prompts=pick(batch.prompts), reference_paths=pick(batch.reference_paths),
                   query_vectors=None if batch.query_vectors is None else batch.query_vectors[rows],
                   extras=pick(batch.extras), explicit_references=pick(batch.explicit_references))


def score_with_cache(scorer: Scorer, batch: QueryBatch, cache: ScoreCache | None = None) -> pd.DataFrame:
    """``scorer.score(batch)``, taking each query's rows from the cache where it holds them and storing the
    rest; the scorer alone where it is not deterministic, reads the gallery, or the cache is off."""
    version = scorer_version(scorer)
    if version is None or not enabled() or scorer.uses_gallery(dict(batch.options or {})) or not len(batch):
        return scorer.score(batch)
    cache = cache or ScoreCache.default()
    keys = query_keys(scorer, version, batch)
    found = cache.get_many([k for k in keys if k is not None])
    missed = [i for i, k in enumerate(keys) if k not in found]
    if not found:
        df = scorer.score(batch)
        cache.put_many(_rows_by_key(df, batch, keys, missed))
        return df
    progress.log(f"{scorer.name}: {len(batch) - len(missed)} of {len(batch)} queries from the score cache")
    fresh = scorer.score(subset(batch, missed)) if missed else pd.DataFrame(columns=COLUMNS)
    computed = _rows_by_key(fresh, batch, keys, missed)
    cache.put_many(computed)
    rows_of = {**found, **computed}
    by_id = _group(fresh)
    out = []
    for i, qid in enumerate(batch.query_ids):
        rows = rows_of.get(keys[i]) if keys[i] is not None else None
        out += [[qid, *r] for r in (rows if rows is not None else by_id.get(qid, []))]
    return pd.DataFrame(out, columns=COLUMNS)


def _group(df: pd.DataFrame) -> dict[str, list[list]]:
    """The scorer's rows per query id, in its order: [metric, value, note]."""
    notes = df["note"] if "note" in df else [None] * len(df)
    out: dict[str, list[list]] = {}
    for qid, metric, value, note in zip(df["query_id"], df["metric"], df["value"], notes):
        out.setdefault(str(qid), []).append([str(metric), _plain(value), _plain(note)])
    return out


def _plain(x):
    """A JSON-able scalar that reads back as the same value (numpy floats as Python floats, NaN kept)."""
    if x is None or isinstance(x, str):
        return x
    if isinstance(x, float) or hasattr(x, "__float__"):
        return float(x)
    return x


def _rows_by_key(df: pd.DataFrame, batch: QueryBatch, keys: list[str | None], rows: list[int]) -> dict[str, list]:
    by_id = _group(df)
    return {keys[i]: by_id.get(batch.query_ids[i], []) for i in rows if keys[i] is not None}


class ScoreCache:
    """``get_many``/``put_many`` of per-query rows by key, in one SQLite database."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self._con: sqlite3.Connection | None = None
        self._broken = False  # an unwritable cache: reported once, then bypassed

    @classmethod
    def default(cls) -> ScoreCache:
        return cls(cache_root() / "scores" / DB_NAME)

    def _connect(self) -> sqlite3.Connection | None:
        if self._con is None and not self._broken:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                try:
                    self._con = open_shared_db(self.path, _SCHEMA, "results", BUSY_TIMEOUT_S)
                except sqlite3.DatabaseError as exc:
                    if isinstance(exc, sqlite3.OperationalError):  # locked, unwritable: not damage
                        raise
                    self._set_aside(_reason(exc))  # not a database: set aside, start afresh
                    self._con = open_shared_db(self.path, _SCHEMA, "results", BUSY_TIMEOUT_S)
            except (sqlite3.DatabaseError, OSError) as exc:
                self._fail(exc)
        return self._con

    def _fail(self, exc: BaseException) -> None:
        self._broken = True
        progress.warn(f"the score cache {self.path} cannot be used ({_reason(exc)}); scoring without it ({HINT})")

    def _set_aside(self, reason: str) -> None:
        target = self.path.with_name(self.path.name + ".damaged")
        try:
            os.replace(self.path, target)
        except FileNotFoundError:  # another process set it aside first (and reported it)
            return
        for suffix in ("-wal", "-shm"):
            Path(str(self.path) + suffix).unlink(missing_ok=True)
        progress.warn(f"damaged score cache {self.path} ({reason}); moved aside to {target.name}; "
                      "its queries are scored again")

    def close(self) -> None:
        if self._con is not None:
            self._con.close()
            self._con = None

    def get_many(self, keys: list[str]) -> dict[str, list]:
        con = self._connect() if keys and (self.path.exists() or self._con is not None) else None
        if con is None:
            return {}
        out: dict[str, list] = {}
        bad = []
        try:
            for s in range(0, len(keys), LOOKUP_CHUNK):
                part = keys[s:s + LOOKUP_CHUNK]
                for key, text in con.execute(f"SELECT key, rows FROM results WHERE key IN ({','.join('?' * len(part))})",
                                             part):
                    try:
                        rows = json.loads(text)
                    except ValueError:
                        bad.append(key)
                        continue
                    out[key] = rows
            if bad:
                con.executemany("DELETE FROM results WHERE key = ?", [(k,) for k in bad])
                progress.warn(f"{len(bad)} damaged score-cache entr{'y' if len(bad) == 1 else 'ies'} in {self.path}; "
                              "removed; their queries are scored again")
        except sqlite3.DatabaseError as exc:
            self._fail(exc)
            self.close()
            return {}
        return out

    def put_many(self, rows: dict[str, list]) -> None:
        con = self._connect() if rows else None
        if con is None:
            return
        try:
            con.execute("BEGIN IMMEDIATE")
            con.executemany("INSERT OR IGNORE INTO results (key, rows) VALUES (?, ?)",
                            [(k, json.dumps(v, allow_nan=True)) for k, v in rows.items()])
            con.execute("COMMIT")
        except sqlite3.DatabaseError as exc:
            if con.in_transaction:
                con.execute("ROLLBACK")
            self._fail(exc)
            self.close()


def _reason(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
