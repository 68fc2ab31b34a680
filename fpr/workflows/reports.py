"""Report workflows: the per-query data of one or more runs, the paper's pivot, the HTML report, export,
paired comparisons.

Rendering is :mod:`fpr.render`; this module reads the store and, for drift diagnosis, the index.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

from fpr.errors import ConflictError, InputError, NotFoundError
from fpr.eval import relevance
from fpr.files import atomic_write
from fpr.metrics.summary import aux_columns, paired_comparison, with_aux
from fpr.render.cells import dumps
from fpr.render.result import collection_document, run_document, summary_frame
from fpr.store import records as db
from fpr.store import schema
from fpr.store.schema import TABLES
from fpr.store.workspace import Workspace
from fpr.tables import TABLE_SUFFIXES, write_table
from fpr.workflows.common import require_current_index
from fpr.workflows.runs import load_run, run_ids, sim_definition, skip_reasons


@dataclass
class ReportData:
    """Per-query rows of one or more runs (``run_id``, ``encoder`` and drift columns), their scores and
    top-k rankings, and summary rows per encoder."""

    runs: list[str]
    per_query: pd.DataFrame
    aux: pd.DataFrame
    rankings: pd.DataFrame
    summary: list[dict]
    items: dict  # run_id -> {item_id: GalleryItem}
    skipped: dict
    provenance: dict  # run_id -> provenance
    results: dict  # run_id -> its RunResult as stored (summary empty: ``summary`` above is the report's)

    @property
    def encoders(self) -> list[str]:
        return list(dict.fromkeys(self.per_query["encoder"].tolist()))

    @property
    def sim_definition(self) -> dict[str, int]:
        """As :attr:`RunResult.sim_definition`, counted over the first encoder's queries."""
        return sim_definition(self.per_query[self.per_query["encoder"] == self.encoders[0]])


def report_data(runs: Sequence[str] | str, *, workspace: str | Path | None = None, allow_stale: bool = False,
                drift: bool = True, device: str = "auto") -> ReportData:
    """Everything a report shows, for one run, a multi-encoder run, or several runs over the same queries."""
    from fpr.render import paper as rep

    ws = Workspace.open(workspace)
    ids = run_ids(runs, workspace=ws.root)
    parts, auxes, ranks, items, skipped, provenance, results = [], [], [], {}, {}, {}, {}
    seed = None
    owner: dict[tuple[str, str], str] = {}
    for rid in ids:
        row = db.get_run(ws, rid)
        if row.params.get("vistar"):  # fpr vistar run: no index, no retrieval metrics
            raise InputError(f"run '{rid}' is a VISTAR run (no index, no mAP)", where=str(ws.root),
                             hint=f"print it with 'fpr report --run {rid} --by role'")
        if not allow_stale:
            require_current_index(ws, row)
        res = load_run(rid, workspace=ws.root, summary=False)  # summarised below, over the merged runs
        seed = int(row.params.get("seed", 0)) if seed is None else seed
        pq = res.per_query.copy()
        pq["run_id"], pq["encoder"] = rid, row.encoder
        for m in pq["method"].unique():
            prev = owner.setdefault((row.encoder, m), rid)
            if prev != rid:
                raise ConflictError(f"runs '{prev}' and '{rid}' both have method '{m}' with encoder '{row.encoder}'",
                                    hint="merge runs that evaluate different methods or encoders")
        parts.append(pq)
        provenance[rid] = res.provenance
        results[rid] = res
        auxes.append(res.aux.assign(run_id=rid))
        ranks.append(db.run_rankings(ws, rid).assign(run_id=rid))
        items[rid] = {it.item_id: it for it in relevance.gallery_items(ws, row.gallery)} \
            if db.gallery_exists(ws, row.gallery) else {}
        skipped.update({f"{rid}:{k}" if len(ids) > 1 else k: v
                        for k, v in skip_reasons(pq, res.skipped_reasons).items()})
    per_query = pd.concat(parts, ignore_index=True)
    aux = pd.concat(auxes, ignore_index=True)
    rankings = pd.concat(ranks, ignore_index=True)
    if drift:
        per_query = _with_drift(ws, per_query, rankings, items, device)
    summary = rep.encoder_summaries(per_query, aux, seed=seed or 0)
    return ReportData(ids, per_query, aux, rankings, summary, items, skipped, provenance, results)


def report_document(data: ReportData, *, pivot: Sequence[dict] | None = None,
                    rows: pd.DataFrame | None = None) -> dict:
    """The ``fpr.run-results/1`` document of a report: one ``fpr.run-result/1`` per stored run, each with
    the report's summary rows of its encoder and methods, then the pivot (``fpr report``) or each run's
    exported rows (``rows`` with a ``run_id`` column: ``fpr export``)."""
    docs = []
    for rid in data.runs:
        res = data.results[rid]
        methods = set(res.per_query["method"])
        summary = [r for r in data.summary if r["encoder"] == res.encoder and r["method"] in methods]
        own = None if rows is None else rows[rows["run_id"] == rid]
        if own is not None and len(data.runs) == 1:  # one run: the export's columns, which omit run_id
            own = own.drop(columns="run_id")
        docs.append(run_document(res.meta, summary_frame(summary, encoder=res.encoder), res.per_query,
                                 res.provenance, skipped=skip_reasons(res.per_query, res.skipped_reasons),
                                 sim_definition=sim_definition(res.per_query), rows=own, aux=res.aux))
    return collection_document(docs, pivot=pivot)


def _with_drift(ws: Workspace, per_query: pd.DataFrame, rankings: pd.DataFrame, items: dict,
                device: str) -> pd.DataFrame:
    """Add top-1 and drifted-to identities; queries whose top-k holds no other identity are recomputed
    from the run's index when it is still current (``drift_source`` says which)."""
    from fpr.render import paper as rep

    ident = {(rid, int(i)): it.identity for rid, its in items.items() for i, it in its.items()}
    d = rep.drift_from_rankings(per_query, rankings, ident)
    per_query = per_query.drop(columns=[c for c in rep.DRIFT_COLUMNS if c in per_query.columns])
    per_query = per_query.merge(d, on=["run_id", "query_id"], how="left")
    todo = (per_query["status"] == "ok") & per_query["drift_identity"].isna()
    for rid in per_query.loc[todo, "run_id"].unique():
        rows = np.flatnonzero((todo & (per_query["run_id"] == rid)).to_numpy())
        run = db.get_run(ws, rid)
        if not items.get(rid):
            per_query.loc[rows, "drift_source"] = "unknown: gallery deleted"
            continue
        if relevance.index_change(run, db.find_index(ws, run.index_name)):
            per_query.loc[rows, "drift_source"] = "unknown: index changed"
            continue
        ids, vals, unreadable = _drift_from_index(ws, run, per_query.iloc[rows], device)
        per_query.loc[rows, "drift_identity"] = ids
        per_query.loc[rows, "drift_score"] = vals
        per_query.loc[rows, "drift_source"] = [
            f"unknown: query image unreadable ({unreadable[k]})" if k in unreadable
            else ("index" if i else "none: no other identity in scope") for k, i in enumerate(ids)]
    return per_query


def _drift_from_index(ws: Workspace, run: db.RunRow, qdf: pd.DataFrame, device: str
                      ) -> tuple[list, np.ndarray, dict[int, str]]:
    """Drifted-to identities of ``qdf`` ranked afresh against the run's (still current) index, and the
    rows whose image can no longer be read (moved or deleted since the run: their drift is unknown, the
    rest of the report is still made)."""
    from fpr.encoders.embed import embed_paths
    from fpr.encoders.registry import load_encoder
    from fpr.render import paper as rep

    opened = relevance.open_index(ws, run.index_name)
    enc = load_encoder(run.encoder, device=device)
    res = embed_paths(enc, qdf["path"].tolist(), desc="embedding queries for drift", on_error="skip")
    ok = np.array([k not in res.failed for k in range(len(qdf))], dtype=bool)
    ids: list = [None] * len(qdf)
    vals = np.full(len(qdf), np.nan)
    if ok.any():
        in_scope, relevant = opened.labels.relevance(qdf[ok], run.scope or "group")
        got, scores = rep.drift_from_scores(opened.index.all_scores(res.vectors[ok]), relevant, in_scope,
                                            opened.labels.identities)
        for k, i, v in zip(np.flatnonzero(ok), got, scores):
            ids[k], vals[k] = i, v
    return ids, vals, dict(res.failed)


def paper_report(runs: Sequence[str] | str, *, workspace: str | Path | None = None, allow_stale: bool = False,
                 metrics: Sequence[str] | None = None, method_order: Sequence[str] = (), all_scorers: bool = True):
    """(ReportData, Pivot): the paper's layout of one or more runs (see :mod:`fpr.render.paper`); ``metrics``
    may name scorers, ``all_scorers`` adds every scorer column."""
    from fpr.render import paper as rep

    data = report_data(runs, workspace=workspace, allow_stale=allow_stale, drift=False)
    p = rep.pivot(data.summary, metrics=metrics or rep.DEFAULT_METRICS,
                  methods=rep.method_order(data.per_query, method_order), encoders=data.encoders,
                  all_scorers=all_scorers)
    return data, p


def html_report(runs: Sequence[str] | str, out: str | Path, *, workspace: str | Path | None = None,
                allow_stale: bool = False, top_k: int = 10, thumb: int = 96, device: str = "auto",
                explain: bool = False) -> Path:
    """Write the self-contained HTML report (one file, images embedded, no network references).

    ``explain``: each scored query's card also shows ``fpr explain``'s evidence overlay (written to the
    workspace's ``explain/<run>/`` folder first; an occlusion map costs about a hundred embeddings a query)."""
    from fpr.render import html
    from fpr.render import paper as rep

    data = report_data(runs, workspace=workspace, allow_stale=allow_stale, device=device)
    order = rep.method_order(data.per_query)
    # the page opens on the paper's columns; every metric and scorer is one click below them
    p = rep.pivot(data.summary, metrics=rep.READABLE_METRICS, methods=order, encoders=data.encoders,
                  all_scorers=False)
    full = rep.pivot(data.summary, methods=order, encoders=data.encoders)
    overlays = None
    if explain:
        from fpr.workflows.explain import explain_queries

        overlays = {(e.run_id, e.query_id): e.overlay for rid in data.runs
                    for e in explain_queries(rid, all_queries=True, workspace=workspace, device=device, legend=False)}
    text = html.render(data.per_query, data.aux, data.rankings, data.items, data.summary, p, runs=data.runs,
                       top_k=top_k, thumb=thumb, full=full, overlays=overlays)
    out = Path(out)
    atomic_write(out, lambda fp: fp.write(text.encode("utf-8")))
    return out


def export_columns(per_query: pd.DataFrame, aux: pd.DataFrame) -> list[str]:
    """Declared exported columns of ``query_results``, the encoder and drift diagnosis, then the queries'
    extra columns, then scores."""
    from fpr.render.paper import DRIFT_COLUMNS

    declared = ["group" if c == "group_name" else c for c in schema.export_columns()]
    added = [c for c in ("run_id", "encoder", *DRIFT_COLUMNS) if c in per_query.columns]
    scores = aux_columns(aux)
    # ``per_query`` may already carry the scores joined on (see _wide): they are listed once, at the end
    taken = {*declared, *TABLES["query_results"].names, "group", *added, *scores}
    extras = [c for c in per_query.columns if c not in taken]
    return declared + added + extras + scores


def export_run(run_id: str, out: str | Path, *, workspace: str | Path | None = None,
               device: str = "auto") -> Path:
    """Write the per-query table (CSV or Parquet by suffix): status, metrics, encoder, drift diagnosis,
    the queries' extra columns, scores, and scorer notes as ``<scorer>.<metric>.note`` columns. A
    multi-encoder run gives one row per query and encoder. ``.json``: :func:`export_document`."""
    suffix = Path(out).suffix.lower()
    if suffix not in (*TABLE_SUFFIXES, ".json"):
        raise InputError("output must end in .csv, .tsv, .parquet or .json", where=str(out))
    data, rows = _export_rows(run_id, workspace=workspace, device=device)
    if suffix == ".json":
        text = dumps(report_document(data, rows=rows))
        return atomic_write(Path(out), lambda fp: fp.write(text.encode("utf-8")),
                            hint="choose an output path in a writable folder")
    if len(data.runs) == 1:
        rows = rows.drop(columns="run_id")
    return write_table(rows, out)


def export_document(run_id: str, *, workspace: str | Path | None = None, device: str = "auto") -> dict:
    """The ``fpr.run-results/1`` document (:func:`report_document`) with the exported rows as each run's
    ``per_query`` (``fpr export --run R --format json``, or ``--out F.json``)."""
    data, rows = _export_rows(run_id, workspace=workspace, device=device)
    return report_document(data, rows=rows)


def _export_rows(run_id: str, *, workspace: str | Path | None, device: str) -> tuple[ReportData, pd.DataFrame]:
    """The run's data and its exported rows, in export column order, with ``run_id``."""
    data = report_data(run_id, workspace=workspace, allow_stale=True, device=device)
    wide = _wide(data)
    cols = export_columns(wide, data.aux)  # has run_id: report_data sets it
    aux = data.aux
    noted = aux[aux["note"].notna()] if "note" in aux.columns else aux.iloc[:0]
    if len(noted):  # notes (judge trajectories, reasons for missing values)
        notes = noted.assign(col=noted["scorer"] + "." + noted["metric"] + ".note").pivot_table(
            index=["run_id", "query_id"], columns="col", values="note", aggfunc="first")
        wide = wide.merge(notes, left_on=["run_id", "query_id"], right_index=True, how="left")
        cols += sorted(notes.columns)
    return data, wide[cols]


def _wide(data: ReportData) -> pd.DataFrame:
    """Per-query rows with one column per ``scorer.metric`` (each run joined with its own scores)."""
    if data.aux.empty:
        return data.per_query
    return pd.concat([with_aux(data.per_query[data.per_query["run_id"] == r],
                               data.aux[data.aux["run_id"] == r].drop(columns="run_id")) for r in data.runs],
                     ignore_index=True)


def compare(run_id: str, method_a: str, method_b: str, *, metric: str = "ap",
            workspace: str | Path | None = None, seed: int = 0) -> dict:
    """Paired comparison of two methods, overall and per group (and per encoder for a multi-encoder run)."""
    data = report_data(run_id, workspace=workspace, allow_stale=True, drift=False)
    methods = list(dict.fromkeys(data.per_query["method"]))
    for m in (method_a, method_b):
        if m not in methods:
            raise NotFoundError(f"run '{run_id}' has no method '{m}'", hint=f"methods: {', '.join(methods)}")
    df = _wide(data)
    if metric not in df.columns:
        raise InputError(f"unknown metric '{metric}'", hint="e.g. ap, sim, cmc1, inp or an auxiliary 'scorer.metric'")
    rows = []
    for enc in data.encoders:
        de = df[df["encoder"] == enc]
        for g in ["*"] + sorted(de["group"].unique()):
            part = de if g == "*" else de[de["group"] == g]
            rows.append({"encoder": enc, "group": g,
                         **paired_comparison(part, method_a, method_b, metric=metric, seed=seed)})
    return {"method_a": method_a, "method_b": method_b, "metric": metric, "rows": rows,
            "tests": "Wilcoxon signed-rank test (two-sided, zero differences dropped) on the paired differences; "
                     "95% interval of the mean difference by paired bootstrap (1000 resamples of pairs)",
            "pairing": "a pair is one (group, identity, prompt) evaluated by both methods; repeated queries of a "
                       "method with the same key are averaged first (n_repeats counts the keys that had repeats)"}

