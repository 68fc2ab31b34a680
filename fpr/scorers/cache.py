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

The store is :class:`fpr.cache.SqliteStore` (one shared SQLite table, as the embedding cache), with
:mod:`fpr.cache`'s one failure policy: a database SQLite cannot read is reported once, set aside as
``*.damaged`` and replaced; a row that fails its checks (its checksum, the scorer version that made it,
its shape: a list of ``[metric, value, note]``) is reported, deleted and recomputed, a row of the format
before issue #35 (no checksum) is a quiet miss; a cache that
cannot be written is one line on stderr and the values are computed as without it. ``FPR_SCORE_CACHE=0``
turns it off.

Not the model judges' cache (:mod:`fpr.scorers.judges.cache`): that one keeps each request's *reply*
(sampled, from a remote model, not reproducible) in the workspace, as the record of what the judge said,
and a rerun must reuse it to give the same values; deleting it changes results. This one holds values that
can be recomputed exactly at any time, so it lives in the user's cache folder and may be deleted freely.
"""
from __future__ import annotations

import functools
import json
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from fpr import keys, progress, settings
from fpr.cache import SqliteStore, content_key
from fpr.files import cache_root
from fpr.registry import import_module
from fpr.images import content_hash

if TYPE_CHECKING:
    from fpr.scorers import QueryBatch, Scorer

PROTOCOL = "fpr-score-cache/1"  # bump when the key or the stored rows change meaning
ENV = "FPR_SCORE_CACHE"
DB_NAME = "results.sqlite"
HINT = f"set FPR_CACHE_DIR to a writable folder, or {ENV}=0 to score without the cache"
COLUMNS = ["query_id", "metric", "value", "note"]


def enabled() -> bool:
    return settings.flag(ENV)


@functools.cache
def _module_digest(module: str) -> str:
    path = Path(import_module(module).__file__)
    return keys.sha256_hex(f"{module}\0".encode() + path.read_bytes())


def version_modules(scorer: Scorer) -> tuple[str, ...]:
    """The modules whose source decides the scorer's values: those it declares (``version_modules``) and
    the module of every scorer class in its class's MRO, whichever package it lives in (a third-party
    subclass of a built-in scorer inherits its ``version_modules``; before issue #35 an edit of the
    subclass's own module was not a new version and hit the rows of its old code)."""
    from fpr.scorers import Scorer as Base

    mro = [c.__module__ for c in type(scorer).__mro__ if isinstance(c, type) and issubclass(c, Base) and c is not Base]
    return tuple(dict.fromkeys([*(getattr(scorer, "version_modules", ()) or ()), *mro]))


def scorer_version(scorer: Scorer) -> str | None:
    """The sha256 of the source of the modules that decide the scorer's values (:func:`version_modules`);
    None when it does not declare itself deterministic (then it is never cached)."""
    if not getattr(scorer, "deterministic", False):
        return None
    return keys.sha256_hex("\0".join(_module_digest(m) for m in version_modules(scorer)))


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
        out.append(content_key({**common, "query": own}))
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
    found = cache.get_many([k for k in keys if k is not None], version)
    missed = [i for i, k in enumerate(keys) if k not in found]
    if not found:
        df = scorer.score(batch)
        cache.put_many(_rows_by_key(df, batch, keys, missed), version)
        return df
    progress.log(f"{scorer.name}: {len(batch) - len(missed)} of {len(batch)} queries from the score cache")
    fresh = scorer.score(subset(batch, missed)) if missed else pd.DataFrame(columns=COLUMNS)
    computed = _rows_by_key(fresh, batch, keys, missed)
    cache.put_many(computed, version)
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
    """``get_many``/``put_many`` of per-query rows by key: a :class:`fpr.cache.SqliteStore` (its failure
    policy: an unusable cache is one warning and scoring goes on without it)."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.store = SqliteStore(self.path, what="score cache", hint=HINT, table="results", key="key", value="rows",
                                 value_type="TEXT", going_on="scoring without it",
                                 recompute="their queries are scored again")

    @classmethod
    def default(cls) -> ScoreCache:
        return cls(cache_root() / "scores" / DB_NAME)

    def close(self) -> None:
        self.store.close()

    def get_many(self, wanted: list[str], code: str = "") -> dict[str, list]:
        """The verified rows of ``wanted`` made by the scorer version ``code`` (see :class:`SqliteStore`)."""
        return self.store.get_many(wanted, code, decode_rows)

    def put_many(self, rows: dict[str, list], code: str = "") -> None:
        self.store.put_many(((k, json.dumps(v, allow_nan=True)) for k, v in rows.items()), code)


def decode_rows(text) -> list:
    """A stored query's rows, ``[[metric, value, note], ...]`` (metric text, value a number or null, note
    text, null or a number: pandas gives a missing note as NaN); ValueError or TypeError for anything else
    (the row is damaged)."""
    if not isinstance(text, str):
        raise TypeError(f"a {type(text).__name__}, not JSON text")
    rows = json.loads(text)
    if not isinstance(rows, list):
        raise ValueError(f"a JSON {type(rows).__name__}, not a list of rows")
    for row in rows:
        if not (isinstance(row, list) and len(row) == 3 and isinstance(row[0], str)
                and all(v is None or isinstance(v, str) or (isinstance(v, (int, float)) and not isinstance(v, bool))
                        for v in row[1:]) and not isinstance(row[1], str)):
            raise ValueError("a row not [metric, value, note]")
    return rows
