"""All SQL of fpr: what is stored, read, replaced and deleted, one function each.

The layers above never write SQL; they call these functions with a
:class:`~fpr.store.workspace.Workspace`. Each write is one transaction.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

import duckdb

if TYPE_CHECKING:  # pandas is imported where a frame is built, so `fpr runs` starts without it
    import pandas as pd

from fpr import progress
from fpr.errors import ConflictError, InputError, NotFoundError
from fpr.store.schema import TABLES
from fpr.store.workspace import Workspace, insert_df

TABLE_LIST = ", ".join(t for t in TABLES if t != "meta")
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def _frame(rows: list[dict]) -> pd.DataFrame:
    import pandas as pd  # only writers build frames; listing reads rows without pandas

    return pd.DataFrame(rows)


def _records(cur: duckdb.DuckDBPyConnection) -> list[dict]:
    """The rows of an executed statement as dicts (column name -> Python value), without pandas."""
    names = [d[0] for d in cur.description]
    return [dict(zip(names, row)) for row in cur.fetchall()]


def check_name(name: str | None, what: str) -> str:
    """Names of galleries, indices, runs and ablations: safe as keys, folder names and in URLs."""
    if not NAME_RE.match(name or ""):
        raise InputError(f"invalid {what} name '{name}'",
                         hint="use letters, digits, '.', '_' or '-' (starting with a letter or digit, at most 128)")
    return str(name)


def check_run_id(run_id: str | None) -> str:
    """A run name, or a per-encoder run ``<run>@<encoder>`` (``@`` is not allowed in names, so the two
    never collide)."""
    base, sep, encoder = (run_id or "").partition("@")
    check_name(base, "run")
    if sep:
        check_name(encoder, "encoder part of run")
    return str(run_id)


def _names(con, table: str, column: str, order: str | None = None) -> list[str]:
    return [r[0] for r in con.execute(f"SELECT {column} FROM {table} ORDER BY {order or column}").fetchall()]


# --------------------------------------------------------------------------- galleries

@dataclass(frozen=True)
class GalleryRow:
    name: str
    fingerprint: str
    spec: dict


def gallery_exists(ws: Workspace, name: str) -> bool:
    if not ws.exists:
        return False
    with ws.read() as con:
        return con.execute("SELECT 1 FROM galleries WHERE name = ?", [name]).fetchone() is not None


def _gallery_row(con, ws: Workspace, name: str) -> GalleryRow:
    row = con.execute("SELECT name, fingerprint, spec FROM galleries WHERE name = ?", [name]).fetchone()
    if row is None:
        names = _names(con, "galleries", "name")
        raise NotFoundError(f"no gallery named '{name}'", where=str(ws.root),
                            hint=f"galleries here: {', '.join(names) or '(none)'}")
    return GalleryRow(row[0], row[1], json.loads(row[2]) if row[2] else {})


def get_gallery(ws: Workspace, name: str) -> GalleryRow:
    with ws.read() as con:
        return _gallery_row(con, ws, name)


def gallery_item_rows(ws: Workspace, name: str) -> list[tuple]:
    """(item_id, path, content_hash, identity, group, role) of a gallery, by item id."""
    with ws.read() as con:
        _gallery_row(con, ws, name)
        rows = con.execute("SELECT item_id, path, content_hash, identity, group_name, role FROM gallery_items "
                           "WHERE gallery = ? ORDER BY item_id", [name]).fetchall()
    return [(i, ws.located(path), *rest) for i, path, *rest in rows]


def store_gallery(ws: Workspace, row: dict, items: pd.DataFrame, *, overwrite: bool) -> None:
    """Insert (or replace) a gallery and its items in one transaction."""
    with ws.write() as con:
        if con.execute("SELECT 1 FROM galleries WHERE name = ?", [row["name"]]).fetchone() and not overwrite:
            raise ConflictError(f"gallery '{row['name']}' already exists", where=str(ws.root),
                                hint="choose another --name or pass --overwrite")
        con.execute("DELETE FROM galleries WHERE name = ?", [row["name"]])
        con.execute("DELETE FROM gallery_items WHERE gallery = ?", [row["name"]])
        insert_df(con, "galleries", _frame([row]))
        insert_df(con, "gallery_items", items.assign(path=[ws.portable(p) for p in items["path"]]))


def list_galleries(ws: Workspace) -> list[dict]:
    if not ws.exists:
        return []
    with ws.read() as con:
        return con.execute("SELECT name, source, n_groups, n_identities, n_reference, n_gallery, fingerprint, "
                           "CAST(created_at AS VARCHAR) AS created_at FROM galleries ORDER BY name").df() \
            .to_dict("records")


def gallery_dependents(ws: Workspace, name: str) -> dict[str, list[str]]:
    with ws.read() as con:
        indices = [r[0] for r in con.execute("SELECT name FROM indices WHERE gallery = ? ORDER BY name",
                                             [name]).fetchall()]
        runs = [r[0] for r in con.execute("SELECT run_id FROM runs WHERE gallery = ? ORDER BY run_id",
                                          [name]).fetchall()]
    return {"indices": indices, "runs": runs}


# --------------------------------------------------------------------------- indices

@dataclass(frozen=True)
class IndexRow:
    name: str
    gallery: str
    encoder: str
    weights_checksum: str
    gallery_fingerprint: str
    dim: int
    n_items: int
    path: str  # relative to the workspace
    card: dict
    version: str


_INDEX_COLS = "name, gallery, encoder, weights_checksum, gallery_fingerprint, dim, n_items, path, card, version"


def _index_row(r: tuple) -> IndexRow:
    return IndexRow(*r[:8], json.loads(r[8]) if r[8] else {}, r[9] or "")


def find_index(ws: Workspace, name: str) -> IndexRow | None:
    if not ws.exists:
        return None
    with ws.read() as con:
        r = con.execute(f"SELECT {_INDEX_COLS} FROM indices WHERE name = ?", [name]).fetchone()
    return _index_row(r) if r else None


def get_index(ws: Workspace, name: str) -> IndexRow:
    with ws.read() as con:
        r = con.execute(f"SELECT {_INDEX_COLS} FROM indices WHERE name = ?", [name]).fetchone()
        if r is None:
            names = _names(con, "indices", "name")
            raise NotFoundError(f"no index named '{name}'", where=str(ws.root),
                                hint=f"indices here: {', '.join(names) or '(none)'}; build one with "
                                     "'fpr index build'")
    return _index_row(r)


def commit_index(ws: Workspace, row: IndexRow, *, expected_version: str | None, overwrite: bool) -> None:
    """Point ``row.name`` at a new version folder (one transaction).

    ``expected_version`` is the version current when the build started (None: none existed).
    If another build committed in between, this one is refused rather than silently lost,
    unless ``overwrite``.
    """
    with ws.write() as con:
        cur = con.execute("SELECT version FROM indices WHERE name = ?", [row.name]).fetchone()
        current = None if cur is None else (cur[0] or "")
        if current is not None and not overwrite:
            if expected_version is None:
                raise ConflictError(f"index '{row.name}' was created by another process while this build ran",
                                    where=str(ws.root), hint="pass --overwrite to replace it with this build")
            raise ConflictError(f"index '{row.name}' already exists", where=str(ws.root),
                                hint="choose another --name or pass --overwrite")
        if current is not None and expected_version is not None and current != expected_version:
            progress.log(f"index '{row.name}' was rebuilt by another process while this build ran; "
                         "this build (--overwrite) replaces it")
        con.execute("DELETE FROM indices WHERE name = ?", [row.name])
        con.execute(f"INSERT INTO indices ({_INDEX_COLS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    [row.name, row.gallery, row.encoder, row.weights_checksum, row.gallery_fingerprint, row.dim,
                     row.n_items, row.path, json.dumps(row.card, sort_keys=True), row.version])


def list_indices(ws: Workspace) -> list[dict]:
    if not ws.exists:
        return []
    with ws.read() as con:
        return con.execute("SELECT name, gallery, encoder, dim, n_items, weights_checksum, version, "
                           "CAST(created_at AS VARCHAR) AS created_at FROM indices ORDER BY name").df() \
            .to_dict("records")


def index_versions_in_use(ws: Workspace, name: str) -> set[str]:
    with ws.read() as con:
        r = con.execute("SELECT version FROM indices WHERE name = ?", [name]).fetchone()
    return set() if r is None else {r[0] or ""}


def index_dependents(ws: Workspace, name: str) -> list[str]:
    with ws.read() as con:
        return [r[0] for r in con.execute("SELECT run_id FROM runs WHERE index_name = ? ORDER BY run_id",
                                          [name]).fetchall()]


def delete_index(ws: Workspace, name: str) -> None:
    with ws.write() as con:
        con.execute("DELETE FROM indices WHERE name = ?", [name])


def delete_gallery(ws: Workspace, name: str) -> None:
    with ws.write() as con:
        con.execute("DELETE FROM galleries WHERE name = ?", [name])
        con.execute("DELETE FROM gallery_items WHERE gallery = ?", [name])


# --------------------------------------------------------------------------- runs

@dataclass(frozen=True)
class RunRow:
    run_id: str
    index_name: str
    gallery: str
    encoder: str
    scope: str
    params: dict
    provenance: dict
    index_version: str | None
    gallery_fingerprint: str | None
    weights_checksum: str | None
    queries_file: str | None


_RUN_COLS = ("run_id, index_name, gallery, encoder, scope, params, provenance, index_version, gallery_fingerprint, "
             "weights_checksum, queries_file")


def run_exists(ws: Workspace, run_id: str) -> bool:
    if not ws.exists:
        return False
    with ws.read() as con:
        return con.execute("SELECT 1 FROM runs WHERE run_id = ?", [run_id]).fetchone() is not None


def get_run(ws: Workspace, run_id: str) -> RunRow:
    with ws.read() as con:
        r = con.execute(f"SELECT {_RUN_COLS} FROM runs WHERE run_id = ?", [run_id]).fetchone()
        if r is None:
            recent = [x[0] for x in con.execute("SELECT run_id FROM runs ORDER BY created_at DESC LIMIT 5")
                      .fetchall()]
            raise NotFoundError(f"no run named '{run_id}'", where=str(ws.root),
                                hint=f"recent runs: {', '.join(recent) or '(none)'}; 'fpr runs' lists all")
    return RunRow(r[0], r[1], r[2], r[3], r[4], json.loads(r[5]) if r[5] else {},
                  structured_provenance(json.loads(r[6]) if r[6] else {}), r[7], r[8], r[9], r[10])


def structured_provenance(provenance: dict) -> dict:
    """A stored run's provenance with every nested object as an object: runs stored before the result
    schema (``fpr.run-result/1``) kept the preprocessing protocol as its canonical JSON text."""
    out = dict(provenance)
    text = out.get("preprocessing")
    if isinstance(text, str) and text.startswith("{"):
        try:
            out["preprocessing"] = json.loads(text)
        except json.JSONDecodeError as e:  # a damaged record: one line naming the field, not a traceback
            raise InputError(f"run provenance has an unreadable preprocessing protocol ({e})",
                             hint="re-run the queries with --overwrite") from e
    return out


# A run made with several encoders (``fpr query --encoders a,b``) is stored as one ordinary run per
# encoder, named ``<run>@<encoder>``; ``<run>`` names the group.
ENCODER_SEP = "@"


def run_group(ws: Workspace, run_id: str) -> list[str]:
    """The stored runs a name stands for: the run itself, or its per-encoder runs ``<run>@<encoder>``."""
    with ws.read() as con:
        if con.execute("SELECT 1 FROM runs WHERE run_id = ?", [run_id]).fetchone():
            return [run_id]
        rows = con.execute("SELECT run_id FROM runs WHERE starts_with(run_id, ?) ORDER BY created_at, run_id",
                           [run_id + ENCODER_SEP]).fetchall()
    return [r[0] for r in rows]


def run_tables(ws: Workspace, run_id: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(query_results rows in query order, aux_scores rows) of a run."""
    with ws.read() as con:
        per_query = con.execute("SELECT * FROM query_results WHERE run_id = ? ORDER BY row_number",
                                [run_id]).df()
        aux = con.execute("SELECT query_id, scorer, metric, value, note FROM aux_scores WHERE run_id = ? "
                          "ORDER BY scorer, metric, query_id", [run_id]).df()
    return _with_paths(per_query, ws.located), aux


def _with_paths(query_results: pd.DataFrame, convert) -> pd.DataFrame:
    """``path`` and each of the ';'-joined ``reference_paths`` passed through ``convert`` (those present: a
    run that stores no references, such as a VISTAR run, leaves the column to the table's default)."""
    columns = {}
    if "path" in query_results:
        columns["path"] = [convert(p) for p in query_results["path"]]
    if "reference_paths" in query_results:
        columns["reference_paths"] = [";".join(convert(r) for r in str(v).split(";")) if isinstance(v, str) and v
                                      else v for v in query_results["reference_paths"]]
    return query_results.assign(**columns)


def run_rankings(ws: Workspace, run_id: str) -> pd.DataFrame:
    with ws.read() as con:
        return con.execute("SELECT query_id, rank, item_id, score, relevant FROM rankings WHERE run_id = ? "
                           "ORDER BY query_id, rank", [run_id]).df()


RUN_TABLES = ("runs", "query_results", "aux_scores", "rankings", "vistar_prompts")


def store_run(ws: Workspace, run: dict, query_results: pd.DataFrame, aux: pd.DataFrame, rankings: pd.DataFrame,
              *, overwrite: bool) -> None:
    """Write a run and all its rows in one transaction."""
    with ws.write() as con:
        if con.execute("SELECT 1 FROM runs WHERE run_id = ?", [run["run_id"]]).fetchone():
            if not overwrite:
                raise ConflictError(f"run '{run['run_id']}' already exists", where=str(ws.root),
                                    hint="choose another --run or pass --overwrite")
            for table in RUN_TABLES:
                con.execute(f"DELETE FROM {table} WHERE run_id = ?", [run["run_id"]])
        insert_df(con, "runs", _frame([run]))
        insert_df(con, "query_results", _with_paths(query_results, ws.portable))
        insert_df(con, "aux_scores", aux)
        insert_df(con, "rankings", rankings)


def replace_scores(ws: Workspace, run_id: str, scorers: Sequence[str], aux: pd.DataFrame, *,
                   overwrite: bool) -> None:
    with ws.write() as con:
        existing = {r[0] for r in con.execute("SELECT DISTINCT scorer FROM aux_scores WHERE run_id = ?",
                                              [run_id]).fetchall()}
        clash = sorted(existing & set(scorers))
        if clash and not overwrite:
            raise ConflictError(f"run '{run_id}' already has scores from {', '.join(clash)}",
                                hint="pass --overwrite to replace them")
        for name in clash:
            con.execute("DELETE FROM aux_scores WHERE run_id = ? AND scorer = ?", [run_id, name])
        insert_df(con, "aux_scores", aux)


def store_vistar_prompts(ws: Workspace, run_id: str, rows: pd.DataFrame) -> None:
    """Replace the VISTAR routing rows of a stored run (one per routed query)."""
    with ws.write() as con:
        if not con.execute("SELECT 1 FROM runs WHERE run_id = ?", [run_id]).fetchone():
            raise NotFoundError(f"no run named '{run_id}'", where=str(ws.root), hint="'fpr runs' lists them")
        con.execute("DELETE FROM vistar_prompts WHERE run_id = ?", [run_id])
        insert_df(con, "vistar_prompts", rows.assign(run_id=run_id))


def vistar_tensor(ws: Workspace, run_ids: Sequence[str]) -> pd.DataFrame:
    """The rows of the ``vistar_tensor`` view for these runs (empty when none was routed)."""
    with ws.read() as con:
        return con.execute("SELECT run_id, role, aspect, model, prompt_id, split, query_id, score, note "
                           "FROM vistar_tensor WHERE list_contains(?, run_id) "
                           "ORDER BY run_id, split, role, aspect, model, prompt_id", [list(run_ids)]).df()


def list_runs(ws: Workspace) -> list[dict]:
    if not ws.exists:
        return []
    with ws.read() as con:
        cur = con.execute("SELECT run_id, index_name AS index, encoder, scope, n_queries, n_evaluated, n_skipped, "
                          "CAST(created_at AS VARCHAR) AS created_at FROM runs ORDER BY created_at")
        return _records(cur)


def aux_score_digests(ws: Workspace, run_ids: Sequence[str]):
    """Per (run, scorer) of ``run_ids``: how many auxiliary scores and a hash of their content (a DataFrame;
    what a run's content version is made of, with its rows of :func:`list_runs`)."""
    with ws.read() as con:
        return con.execute("SELECT run_id, scorer, count(*) AS n, sum(hash(query_id || metric || coalesce(CAST(value "
                           "AS VARCHAR), 'null') || coalesce(note, ''))) AS h FROM aux_scores "
                           "WHERE list_contains(?, run_id) GROUP BY ALL ORDER BY ALL", [list(run_ids)]).df()


def delete_run(ws: Workspace, run_id: str) -> None:
    with ws.write() as con:
        if not con.execute("SELECT 1 FROM runs WHERE run_id = ?", [run_id]).fetchone():
            raise NotFoundError(f"no run named '{run_id}'", where=str(ws.root), hint="'fpr runs' lists them")
        for table in RUN_TABLES:
            con.execute(f"DELETE FROM {table} WHERE run_id = ?", [run_id])


# --------------------------------------------------------------------------- ablations

def ablation_exists(ws: Workspace, name: str) -> bool:
    if not ws.exists:
        return False
    with ws.read() as con:
        return con.execute("SELECT 1 FROM ablations WHERE ablation = ?", [name]).fetchone() is not None


def store_ablation(ws: Workspace, name: str, rows: pd.DataFrame, *, overwrite: bool) -> None:
    with ws.write() as con:
        if con.execute("SELECT 1 FROM ablations WHERE ablation = ?", [name]).fetchone():
            if not overwrite:
                raise ConflictError(f"ablation '{name}' already exists", where=str(ws.root),
                                    hint="choose another --name or pass --overwrite")
            con.execute("DELETE FROM ablations WHERE ablation = ?", [name])
        insert_df(con, "ablations", rows)


def ablation_rows(ws: Workspace, name: str, columns: Sequence[str]) -> pd.DataFrame:
    with ws.read() as con:
        cols = ", ".join(f'"{c}"' for c in columns)
        df = con.execute(f'SELECT {cols} FROM ablations WHERE ablation = ? ORDER BY variant, "repeat", method',
                         [name]).df()
    if df.empty:
        raise NotFoundError(f"no ablation named '{name}'", where=str(ws.root))
    return df


# --------------------------------------------------------------------------- users' SQL

def user_sql(ws: Workspace, query: str) -> pd.DataFrame:
    """Run a user's SQL on a connection that can neither write nor reach files or the network."""
    with ws.user_sql() as con:
        try:
            return con.execute(query).df()
        except duckdb.Error as exc:
            raise InputError(f"SQL error: {str(exc).splitlines()[0]}",
                             hint=f"tables: {TABLE_LIST}; the connection is read-only and cannot touch files, "
                                  "extensions or the network") from None
