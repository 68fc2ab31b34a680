"""Scoring workflows: add auxiliary scores to a stored run (``fpr score``), by running scorers or from an
external table.
"""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

from fpr import keys, progress
from fpr.defaults import EMBED_BATCH_SIZE
from fpr.engines import ray as ray_engine
from fpr.engines import ray_runtime
from fpr.engines.parts import PartsFolder, discard_parts
from fpr.errors import InputError
from fpr.eval import inputs, pipeline, relevance, scoring
from fpr.scorers import check_scorer_options, parse_scorer_list, run_scorers, uses_gallery
from fpr.store import records as db
from fpr.store.records import check_name
from fpr.store.workspace import Workspace
from fpr.tables import read_table
from fpr.workflows.common import embedder, index_encoder, require_current_index
from fpr.workflows.runs import load_run, run_ids


def score_run(run_id: str, scorers: Sequence[str] | str, *, workspace: str | Path | None = None,
              device: str = "auto", scorer_options: dict | None = None, overwrite: bool = False,
              engine: str = "local", ray=None) -> pd.DataFrame:
    """Add auxiliary scores to an existing run (one transaction); refused if its index has changed.

    ``engine="ray"``: the run's queries are scored in shards on Ray's actors (:mod:`fpr.engines.ray`,
    options ``ray``), each shard's scores written as it finishes, so a rerun after a crash resumes; the
    scores are stored in one transaction at the end, as a local run stores them."""
    ray_opts = ray_runtime.ray_options(engine, ray)
    names = parse_scorer_list(scorers)
    if not names:
        raise InputError("no scorers given", hint="e.g. --scorers clip-t,copy-paste")
    check_scorer_options(names, scorer_options)
    ws = Workspace.open(workspace)
    ids = run_ids(run_id, workspace=ws.root)
    if ids != [run_id]:  # a multi-encoder run: score each encoder's run
        return pd.concat([score_run(rid, names, workspace=ws.root, device=device, scorer_options=scorer_options,
                                    overwrite=overwrite, engine=engine, ray=ray).assign(run_id=rid) for rid in ids],
                         ignore_index=True)
    run = db.get_run(ws, run_id)
    require_current_index(ws, run)
    res = load_run(run_id, workspace=ws.root, summary=False)  # the summary rows (bootstrap) are not used
    opened = relevance.open_index(ws, run.index_name)
    ok = res.per_query[res.per_query["status"] == "ok"].copy()
    qdf = inputs.normalize_queries(ok.drop(columns=[c for c in ("sim_source",) if c in ok.columns]),
                                     where=f"run {run_id}")
    gallery = uses_gallery(names, scorer_options)  # e.g. dreambench-concept.mode=choice: the run's encoder again
    if ray_opts is not None:  # the actors need the encoder for its protocol, and embed with it when asked
        enc = _run_encoder(run, opened, "cpu")
        job = ScoreJob(names, opened.labels, opened.index if gallery else None, res.encoder, device,
                       scorer_options, ws.root)
        key = {"what": "score", "run": run_id, "index_version": run.index_version,
               "weights": run.weights_checksum, "scorers": names,
               "options": dict(scorer_options or {}), "queries": ray_engine.frame_digest(qdf[["query_id", "path"]])}
        aux = score_on_ray(qdf, job, enc, ray_opts, shard_dir=ws.root / "shards" / keys.fingerprint(key, length=24),
                           fingerprint=key, device=device)
    else:
        qvecs = scores_fn = None
        if gallery:
            enc = _run_encoder(run, opened, device)
            qvecs = embedder(enc, EMBED_BATCH_SIZE, None)(qdf["path"].tolist(), desc="embedding queries").vectors
            scores_fn = scoring.whole_gallery_scores(opened.index, len(opened.labels.item_ids))
        batch = pipeline.query_batch(qdf, qvecs, opened.labels, res.encoder, device, scorer_options, ws.root,
                                     gallery_scores=scores_fn)
        aux = run_scorers(names, batch)
    db.replace_scores(ws, run_id, names, aux.assign(run_id=run_id), overwrite=overwrite)
    if ray_opts is not None:  # stored in the one transaction above: the shards are no longer needed
        discard_parts(aux.attrs["shard_dir"])
    return aux


def _run_encoder(run: db.RunRow, opened: relevance.OpenIndex, device: str):
    weights = (run.provenance or {}).get("weights_path")
    return index_encoder(opened, weights if weights and Path(weights).is_file() else None, device,
                         hint=f"the run's weights file ({weights}) must be where it was when the run was made"
                              if weights else "rebuild the index and rerun the query")


class ScoreJob:
    """One shard of a run's queries on a Ray actor (:mod:`fpr.engines.ray`): the scorers, as the local
    engine runs them; with ``gallery`` (scorers that read the run's query vectors) the actor's embeddings
    of the shard's queries and the whole gallery's scores."""

    def __init__(self, names: list[str], labels: relevance.GalleryLabels, gallery, encoder_id: str, device: str,
                 options: dict | None, workspace_root: Path):
        self.names, self.labels, self.gallery, self.encoder_id = names, labels, gallery, encoder_id
        self.device, self.options, self.workspace_root = device, options, workspace_root

    def run(self, encoder, job_input: dict, embedded, embed) -> dict:
        qvecs = scores_fn = None
        if self.gallery is not None:
            qvecs = embedded.vectors
            scores_fn = scoring.whole_gallery_scores(self.gallery, len(self.labels.item_ids))
        batch = pipeline.query_batch(job_input["qdf"], qvecs, self.labels, self.encoder_id, self.device,
                                     self.options, self.workspace_root, gallery_scores=scores_fn)
        return {"aux": run_scorers(self.names, batch)}


def score_on_ray(qdf: pd.DataFrame, job: ScoreJob, enc, options: ray_runtime.RayOptions, *, shard_dir: Path,
                 fingerprint: dict, device: str) -> pd.DataFrame:
    """The scores of ``qdf``'s queries, shard by shard on Ray, in the local engine's order (scorer, then query);
    finished shards are kept in ``shard_dir`` (``attrs["shard_dir"]``) until the caller has stored them."""
    size = options.shard_size or ray_engine.default_shard_size(enc)
    folder = PartsFolder(shard_dir, {**fingerprint, "shard": size})
    total = ray_engine.n_shards(len(qdf), size)
    done = folder.done([".parquet"])
    if done:
        progress.log(f"resuming: {len(done)} of {total} shards already done ({folder.root})")
    todo = []
    for k in range(total):
        if k not in done:
            part = qdf.iloc[k * size:(k + 1) * size].reset_index(drop=True)
            todo.append((k, {"qdf": part, "paths": part["path"].tolist() if job.gallery is not None else []}))

    def write(k: int, res: dict) -> None:
        folder.write_parquet(k, ".parquet", res["aux"])
        folder.mark_done(k)

    info = ray_engine.run_shards(todo, job, enc, options=options, device=device, batch_size=EMBED_BATCH_SIZE,
                                 cache_root=ray_engine.cache_root_for_workers(), on_result=write, what="score")
    parts = [folder.read_parquet(k, ".parquet") for k in range(total)]
    aux = pd.concat([p for p in parts if len(p)], ignore_index=True) if any(len(p) for p in parts) else \
        pd.DataFrame(columns=["query_id", "scorer", "metric", "value", "note"])
    order = {n: i for i, n in enumerate(job.names)}
    aux = aux.assign(__s=aux["scorer"].map(order)).sort_values("__s", kind="stable").drop(columns="__s")
    aux = aux.reset_index(drop=True)
    aux["note"] = aux["note"].astype(object).where(aux["note"].notna(), None)
    aux.attrs.update(shard_dir=str(folder.root), engine={**info, "shards": total, "shards_resumed": len(done)})
    return aux


def score_from_table(run_id: str, table: str | Path, scorer: str, *, workspace: str | Path | None = None,
                     overwrite: bool = False) -> pd.DataFrame:
    """Attach external per-query scores: a CSV/Parquet with ``query_id`` and numeric metric columns.

    Stored as scorer ``scorer`` (``scorer.metric`` in summaries and exports); empty cells are NaN with
    a note. Unknown query ids are an error listing them; a multi-encoder run gets them on every encoder.
    """
    check_name(scorer, "scorer")
    path = Path(table)
    df = read_table(path, required=("query_id",), what="scores file")
    df["query_id"] = df["query_id"].astype(str).str.strip()
    metrics = [c for c in df.columns if c != "query_id"]
    if not metrics:
        raise InputError("scores file has no metric column beside query_id", where=str(path),
                         hint="columns: query_id, then one numeric column per metric")
    values = {}
    for c in metrics:
        v = pd.to_numeric(df[c], errors="coerce")
        bad = df[c][v.isna() & df[c].notna() & (df[c].astype(str).str.strip() != "")]
        if len(bad):
            raise InputError(f"column '{c}' is not numeric (e.g. {bad.iloc[0]!r} for query "
                             f"{df['query_id'][bad.index[0]]})", where=str(path))
        values[c] = v
    dup = df["query_id"][df["query_id"].duplicated()]
    if len(dup):
        raise InputError(f"query_id '{dup.iloc[0]}' appears more than once", where=str(path))
    ws = Workspace.open(workspace)
    stored = []
    for rid in run_ids(run_id, workspace=ws.root):
        known = set(db.run_tables(ws, rid)[0]["query_id"])
        unknown = [q for q in df["query_id"] if q not in known]
        if unknown:
            raise InputError(f"{len(unknown)} query id(s) not in run '{rid}': {', '.join(unknown[:10])}"
                             + (" ..." if len(unknown) > 10 else ""), where=str(path),
                             hint="'fpr export --run RUN --out FILE.csv' lists the run's query ids")
        long = pd.concat([pd.DataFrame({"query_id": df["query_id"], "scorer": scorer, "metric": c,
                                        "value": values[c].astype(float),
                                        "note": np.where(values[c].isna(), f"empty in {path.name}", None)})
                          for c in metrics], ignore_index=True)
        stored.append(long.assign(run_id=rid))
    for part in stored:
        db.replace_scores(ws, part["run_id"].iloc[0], [scorer], part, overwrite=overwrite)
    return pd.concat(stored, ignore_index=True)

