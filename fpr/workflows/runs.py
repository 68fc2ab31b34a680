"""Run workflows: evaluate queries against an index and store the run; load, list, delete runs; multi-encoder runs.

The evaluation itself is :mod:`fpr.eval.pipeline`; every SQL statement is in :mod:`fpr.store.records`.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Mapping, Sequence

import pandas as pd

from fpr import progress
from fpr.defaults import EMBED_BATCH_SIZE
from fpr.engines import ray as ray_engine
from fpr.engines import ray_runtime
from fpr.encoders.catalog import check_batch_size, check_device, check_encoder_id, check_workers
from fpr.engines.parts import discard_parts
from fpr.errors import ConflictError, FprError, InputError
from fpr.eval import frames, inputs, pipeline, relevance, sanity
from fpr.eval.oracle import ORACLE_METHOD, append_oracle
from fpr.eval.pipeline import SKIP_UNREADABLE, EvalSettings
from fpr.eval.relevance import SKIP_NO_RELEVANT
from fpr.index import faiss_index
from fpr.keys import fingerprint, new_id, utc_now
from fpr.metrics.summary import aux_columns, summarize, with_aux
from fpr.render.result import RunMeta, collection_document, run_document, summary_frame, summary_records
from fpr.scorers import check_scorer_options, parse_scorer_list
from fpr.store import records as db
from fpr.store.records import check_name
from fpr.store.workspace import Workspace
from fpr.workflows.common import embedder, index_encoder, require_current_index
from fpr.workflows.indices import _card_numerics, build_index

if TYPE_CHECKING:
    from fpr.encoders.registry import Encoder


@dataclass
class RunResult:
    """One stored run: ``summary`` (a row per encoder, method and group, each with ``encoder``) and
    ``per_query`` are DataFrames; :meth:`to_dict` is the ``fpr.run-result/1`` document."""

    run_id: str
    index: str
    encoder: str
    summary: pd.DataFrame
    per_query: pd.DataFrame
    aux: pd.DataFrame
    provenance: dict
    n_skipped: int = 0
    skipped_reasons: dict = field(default_factory=dict)
    meta: RunMeta | None = None

    @property
    def sim_definition(self) -> dict[str, int]:
        """Which references Sim used (see ``fpr.eval.similarity.SIM_SOURCES``) -> number of queries."""
        return sim_definition(self.per_query)

    def summary_records(self) -> list[dict]:
        """The summary rows as dicts (missing values None)."""
        return summary_records(self.summary)

    def to_dict(self, *, per_query: bool = False) -> dict:
        """The ``fpr.run-result/1`` document (``fpr/schemas/run-result-v1.json``); ``per_query=True`` also
        lists the per-query rows."""
        meta = self.meta or RunMeta(self.run_id, None, self.index, None, self.encoder, None, None, None)
        return run_document(meta, self.summary, self.per_query, self.provenance,
                            skipped=skip_reasons(self.per_query, self.skipped_reasons),
                            sim_definition=self.sim_definition, rows=self.per_query if per_query else None,
                            aux=self.aux)


def sim_definition(per_query: pd.DataFrame) -> dict[str, int]:
    """Which references Sim used (see ``fpr.eval.similarity.SIM_SOURCES``) -> number of queries."""
    if "sim_source" not in per_query:
        return {}
    counts = per_query["sim_source"].dropna().value_counts()
    return {str(k): int(v) for k, v in counts.sort_index().items()}


def skip_reasons(per_query: pd.DataFrame, reasons: dict) -> dict[str, str]:
    """Every skipped query id -> its status and reason (unreadable: the decoder's message)."""
    out: dict[str, str] = {}
    for qid, status, g, ident in zip(per_query["query_id"], per_query["status"], per_query["group"],
                                     per_query["identity"]):
        if status == SKIP_NO_RELEVANT:
            out[qid] = f"{status}: no gallery image of identity '{ident}' in group '{g}' in scope"
        elif status != "ok":
            out[qid] = f"{status}: {reasons.get(qid, 'no reason stored')}"
    return out


def read_queries(queries: str | Path | pd.DataFrame) -> pd.DataFrame:
    """Load and normalise a queries table (see :func:`fpr.eval.inputs.normalize_queries`)."""
    return inputs.normalize_queries(queries)


def _provenance(enc: Encoder, opened: "relevance.OpenIndex", seed: int, device: str) -> dict:
    card = opened.index.card
    return {"encoder": enc.id, "weights_checksum": enc.weights.checksum, "weights_path": str(enc.weights.path),
            "weights_status": _weights_status(enc),
            # an object, not the protocol's canonical text (fpr.run-result/1)
            "preprocessing": json.loads(enc.preprocessing.key()), "device": str(enc.device),
            "device_requested": device,
            **{(k if k.startswith("embedding_") else f"embedding_{k}"): v for k, v in _card_numerics(enc).items()},
            "seed": seed, "index_card": card.name, "index_version": opened.row.version,
            "gallery_fingerprint": card.gallery_fingerprint, "versions": faiss_index.library_versions(),
            "created_at": utc_now()}


def _weights_status(enc: Encoder) -> str:
    """verified, unverified or mismatch; ``not-checked`` when there is nothing published to check against."""
    from fpr.encoders.weights import NO_WEIGHTS

    status = enc.verification.status
    return "not-checked" if status == NO_WEIGHTS else status


def _weights_verification(enc: Encoder) -> dict:
    """``{"weights_verification": ...}`` and one stderr line when the weights are not the published ones."""
    from fpr.encoders.weights import MISMATCH, UNVERIFIED

    check = enc.verification
    if check.status not in (UNVERIFIED, MISMATCH):
        return {}
    progress.warn(f"encoder '{enc.id}' weights {check.status}: {check.detail}")
    return {"weights_verification": check.provenance()}


def _degenerate_run(ev: "pipeline.Evaluation", qdf: pd.DataFrame, opened: "relevance.OpenIndex", scope: str,
                    enc: Encoder) -> list[str]:
    """Warnings (printed, one line each) when the run measured nothing: see :mod:`fpr.eval.sanity`.

    The encoder checks (constant embeddings, oracle at chance) skip weightless encoders: a fixed
    function (pixels-16) is a baseline meant to be weak, and has no weights to be a placeholder.
    """
    ok, encoder_id = ev.ok, enc.id
    found = sanity.constant_scorers(ev.aux)
    has_weights = enc.spec.weights.kind != "none"
    if has_weights:
        found.append(sanity.constant_embeddings(ev.qvecs[ok], encoder_id))
    oracle = ok[(qdf["method"].to_numpy()[ok] == ORACLE_METHOD)]
    if has_weights and len(oracle):
        rows = ev.per_query.iloc[oracle]
        found.append(sanity.oracle_at_chance(rows["ap"].to_numpy(), rows["n_relevant"].to_numpy(),
                                             opened.labels.candidates(qdf.iloc[oracle], scope), encoder_id))
    warnings = [w for w in found if w]
    for w in warnings:
        progress.warn(w)
    return warnings


def _settings(scope, scorer_names, scorer_options, skip_missing_identities, skip_unreadable, top_k_store, device,
              batch_size, workers) -> EvalSettings:
    relevance.check_scope(scope)
    check_device(device)
    check_batch_size(batch_size)
    check_workers(workers)
    if top_k_store < 0:
        raise InputError(f"--top-k must be 0 or more, got {top_k_store}")
    check_scorer_options(scorer_names, scorer_options)  # before any image is embedded
    return EvalSettings(scope, skip_missing_identities, skip_unreadable, scorer_names, dict(scorer_options or {}),
                        top_k_store, device, batch_size, workers)


def run_query(index: str, queries: str | Path | pd.DataFrame, *, run: str | None = None,
              workspace: str | Path | None = None, encoder: str | None = None, weights: str | None = None,
              scope: str = "group", scorers: Sequence[str] | str | None = (),
              skip_missing_identities: bool = False, skip_unreadable: bool = False, top_k_store: int = 10,
              seed: int = 0, device: str = "auto", batch_size: int = EMBED_BATCH_SIZE, workers: int | None = None,
              overwrite: bool = False, scorer_options: dict | None = None, oracle: bool = False,
              engine: str = "local", ray: "ray_runtime.RayOptions | dict | None" = None,
              images: Mapping[str, bytes] | None = None) -> RunResult:
    """Evaluate generated images (queries) against an index; store and return the run.

    ``images``: encoded bytes of query images held in memory, by the ``path`` that stands for them
    (:class:`fpr.workflows.memory.Evaluator` with ``save_to``); local engine only.

    ``oracle``: also query with the gallery's reference images (method ``oracle``, see
    :mod:`fpr.eval.oracle`), the paper's real-images row. ``engine="ray"``: embed and score
    on Ray (:mod:`fpr.engines.ray`, options ``ray``); the shards are ingested into the
    store in one transaction like a local run's rows."""
    ray_opts = ray_runtime.ray_options(engine, ray)
    if images and ray_opts is not None:
        raise InputError("images held in memory are evaluated locally only", hint="use engine='local'")
    if encoder is not None:
        check_encoder_id(encoder)  # a typo is refused before the index or any model is opened
    scorer_names = parse_scorer_list(scorers)
    settings = _settings(scope, scorer_names, scorer_options, skip_missing_identities, skip_unreadable, top_k_store,
                         device, batch_size, workers)
    run_id = db.check_run_id(run) if run else new_id("run")
    ws = Workspace.open(workspace)
    if not overwrite and db.run_exists(ws, run_id):
        raise ConflictError(f"run '{run_id}' already exists", hint="choose another --run or pass --overwrite")
    where = str(queries) if not isinstance(queries, pd.DataFrame) else "queries"
    qdf = inputs.normalize_queries(queries)
    opened = relevance.open_index(ws, index, encoder=encoder)
    if oracle:
        qdf = append_oracle(qdf, opened.items)
    # Missing identities and missing image files are errors before any model is loaded.
    relevance.missing_identities(qdf, opened.labels.has_relevant(qdf),
                                skip=skip_missing_identities, where=where)
    if not skip_unreadable:
        inputs.check_query_files(qdf, queries, images)
    # on Ray the model is shipped to the actors from here, which place it on their own device
    enc = index_encoder(opened, weights, "cpu" if ray_opts else device)
    engine_info = None
    if ray_opts is None:
        ev = pipeline.evaluate(qdf, opened.labels, opened.index, embedder(enc, batch_size, workers, images),
                               settings, where=where, encoder_id=enc.id, workspace=ws.root, dim=enc.spec.dim)
    else:
        key = {"index": index, "version": opened.row.version, "weights": enc.weights.checksum,
               "protocol": enc.preprocessing.key(), "settings": repr(settings)}
        ev, engine_info = ray_engine.evaluate_ray(qdf, opened, enc, settings, options=ray_opts,
                                                  shard_dir=ws.root / "shards" / fingerprint(key, length=24),
                                                  fingerprint=key, where=where, workspace=ws.root)
    _require_some_evaluated(ev, len(qdf), where)
    provenance = _provenance(enc, opened, seed, device)
    provenance.update(_weights_verification(enc))
    warnings = _degenerate_run(ev, qdf, opened, scope, enc)
    if warnings:
        provenance["warnings"] = warnings
    if engine_info is not None:
        provenance["engine"] = engine_info
        for key, actor_key in (("device", "actor_device"), ("embedding_device", "actor_device"),
                               ("embedding_precision", "actor_precision"),
                               ("embedding_key", "actor_embedding_key")):
            if key in provenance and actor_key in engine_info:  # the vectors were computed by the actors
                provenance[key] = engine_info[actor_key]
    if ev.aux.attrs.get("provenance"):  # model judges: model, endpoint, seed, prompt template versions
        provenance["scorers"] = ev.aux.attrs["provenance"]
    params = {"scope": scope, "scorers": scorer_names, "top_k": top_k_store, "seed": seed,
              "skip_missing_identities": skip_missing_identities, "skip_unreadable": skip_unreadable,
              "scorer_options": dict(scorer_options or {}), "skipped": ev.reasons}
    n_ok = len(ev.ok)
    run_row = {"run_id": run_id, "index_name": index, "gallery": opened.index.card.gallery, "encoder": enc.id,
               "scope": scope, "n_queries": len(qdf), "n_evaluated": n_ok, "n_skipped": len(qdf) - n_ok,
               "queries_file": where, "params": json.dumps(params), "provenance": json.dumps(provenance),
               "index_version": opened.row.version, "gallery_fingerprint": opened.index.card.gallery_fingerprint,
               "weights_checksum": enc.weights.checksum}
    db.store_run(ws, run_row, frames.stored_columns(ev.per_query, run_id), ev.aux.assign(run_id=run_id),
                 ev.rankings.assign(run_id=run_id), overwrite=overwrite)
    if engine_info is not None:  # ingested in the one transaction above: the shards are no longer needed
        discard_parts(engine_info["shard_dir"])
    per_query = ev.per_query.copy()
    per_query.insert(0, "run_id", run_id)
    summary = summary_frame(summarize(with_aux(per_query, ev.aux), seed=seed, aux_cols=aux_columns(ev.aux)),
                            encoder=enc.id)
    n_skipped = len(qdf) - n_ok
    if n_skipped:
        progress.log(f"skipped {n_skipped} of {len(qdf)} queries "
                     f"({int((ev.status == SKIP_NO_RELEVANT).sum())} without relevant gallery images, "
                     f"{int((ev.status == SKIP_UNREADABLE).sum())} unreadable); '--format json' lists them with "
                     f"reasons, 'fpr export --run {run_id} --out FILE.csv' has their status")
    meta = RunMeta(run_id, opened.index.card.gallery, index, opened.row.version, enc.id, scope, where,
                   provenance["created_at"], _settings_record(params))
    return RunResult(run_id, index, enc.id, summary, per_query, ev.aux, provenance, n_skipped, ev.reasons, meta)


def _settings_record(params: dict) -> dict:
    """The stored run parameters a reader needs (the skip reasons are listed separately)."""
    return {k: v for k, v in params.items() if k != "skipped"}


def _require_some_evaluated(ev: "pipeline.Evaluation", n: int, where: str) -> None:
    """A run whose every query was skipped has no number to give: an error, and nothing is stored."""
    if n == 0 or len(ev.ok):
        return
    missing, unreadable = int((ev.status == SKIP_NO_RELEVANT).sum()), int((ev.status == SKIP_UNREADABLE).sum())
    first = next(iter(ev.reasons.values()), None)
    raise InputError(f"all {n} queries were skipped ({missing} without relevant gallery images, {unreadable} "
                     f"unreadable{'; first: ' + str(first) if first else ''}); no run was stored", where=where,
                     hint="check the queries' identity, group and path columns against the gallery (fpr gallery "
                          "list) and the files")


def load_run(run_id: str, *, workspace: str | Path | None = None, summary: bool = True) -> RunResult:
    """A stored run, with per-query rows and auxiliary scores, summarised exactly as when it ran.

    ``summary=False``: ``summary`` is empty; for callers that summarise the rows themselves (the report
    merges runs and computes its own bootstrap intervals, the slow part, once)."""
    ws = Workspace.open(workspace)
    row = db.get_run(ws, run_id)
    stored, aux = db.run_tables(ws, run_id)
    per_query = frames.expand_extras(stored)
    rows = summarize(with_aux(per_query, aux), seed=int(row.params.get("seed", 0)),
                     aux_cols=aux_columns(aux)) if summary else []
    n_skipped = int((per_query["status"] != "ok").sum())
    meta = RunMeta(run_id, row.gallery, row.index_name, row.index_version, row.encoder, row.scope,
                   row.queries_file, row.provenance.get("created_at") or row.provenance.get("created"),
                   _settings_record(row.params))
    return RunResult(run_id, row.index_name, row.encoder, summary_frame(rows, encoder=row.encoder), per_query, aux,
                     row.provenance, n_skipped, row.params.get("skipped", {}), meta)


def report(run_id: str, *, workspace: str | Path | None = None, allow_stale: bool = False) -> RunResult:
    """A stored run's results; refused (one line) when its index has changed since, unless ``allow_stale``."""
    ws = Workspace.open(workspace)
    if not allow_stale:
        require_current_index(ws, db.get_run(ws, run_id))
    return load_run(run_id, workspace=ws.root)


def delete_run(run_id: str, *, workspace: str | Path | None = None) -> dict:
    """Delete a run with its per-query rows, scores and rankings (one transaction per stored run); the
    name of a multi-encoder run deletes all its per-encoder runs."""
    ws = Workspace.open(workspace)
    ids = run_ids(run_id, workspace=ws.root)
    for rid in ids:
        db.delete_run(ws, rid)
    return {"deleted": run_id, "runs": ids}


def run_query_encoders(gallery: str, encoders: Sequence[str] | str, queries: str | Path | pd.DataFrame, *,
                       run: str | None = None, workspace: str | Path | None = None, overwrite: bool = False,
                       device: str = "auto", batch_size: int = EMBED_BATCH_SIZE, workers: int | None = None,
                       **kwargs) -> list[RunResult]:
    """Evaluate the same queries under several encoders: one stored run ``<run>@<encoder>`` per encoder.

    The index ``<gallery>-<encoder>`` is built first where it is missing. ``fpr report --run <run>``,
    ``fpr export --run <run>`` and the HTML report read the group as one run with an ``encoder`` column.
    """
    names = [e.strip() for e in (encoders.split(",") if isinstance(encoders, str) else encoders) if e.strip()]
    if not names:
        raise InputError("no encoders given", hint="e.g. --encoders pixels-16,fpr-world-v1")
    if len(set(names)) != len(names):
        raise InputError(f"an encoder is listed twice: {', '.join(names)}")
    for name in names:  # every name before the first index is built
        check_encoder_id(name)
    run_id = check_name(run, "run") if run else new_id("run")
    ws = Workspace.open(workspace)
    db.get_gallery(ws, gallery)
    if db.run_exists(ws, run_id):
        raise ConflictError(f"run '{run_id}' already exists as a single run",
                            hint="choose another --run, or delete it first (fpr runs delete)")
    qdf = inputs.normalize_queries(queries)  # one read and check, before any index is built
    results = []
    for enc in names:
        index = f"{gallery}-{enc}"
        if db.find_index(ws, index) is None:
            progress.log(f"building missing index {index}")
            build_index(gallery, enc, name=index, workspace=ws.root, device=device, batch_size=batch_size,
                        workers=workers)
        results.append(run_query(index, qdf, run=f"{run_id}{db.ENCODER_SEP}{enc}", workspace=ws.root, encoder=enc,
                                 overwrite=overwrite, device=device, batch_size=batch_size, workers=workers,
                                 **kwargs))
    return results


def runs_document(results: Sequence[RunResult]) -> dict:
    """The ``fpr.run-results/1`` document of several runs (a multi-encoder query), in order."""
    return collection_document([r.to_dict() for r in results])


def run_ids(runs: Sequence[str] | str, *, workspace: str | Path | None = None) -> list[str]:
    """The stored runs the given names stand for (a multi-encoder name stands for its per-encoder runs)."""
    ws = Workspace.open(workspace)
    out: list[str] = []
    for name in [runs] if isinstance(runs, str) else list(runs):
        ids = db.run_group(ws, name)
        if not ids:
            db.get_run(ws, name)  # raises, naming recent runs
        out += [i for i in ids if i not in out]
    return out


def ensure_ok(result: RunResult) -> RunResult:  # pragma: no cover - convenience for notebooks
    if result.n_skipped:
        raise FprError(f"{result.n_skipped} queries were skipped")
    return result

