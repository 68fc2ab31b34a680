"""Synthetic-data filtering (paper section 5.4): keep the generated images that kept their identity.

    fpr filter --index leopards-miewid --queries generated.csv \\
        --keep "top1 and ap >= 0.5 and clip_t >= 0.25 and not copy_paste" \\
        --out kept.csv --rejected rejected.csv --copy-to kept-images/

Every query gets exactly the per-query values ``fpr query`` computes (the same
function, :func:`fpr.eval.pipeline.evaluate`) plus any auxiliary scorers; a keep-rule
(:mod:`fpr.metrics.rules`) splits the rows. Outputs keep every input column and add
the values, ``status`` and ``reason`` (the clause that failed; empty when kept).

Scale and safety:

- the queries file is read in chunks (CSV or Parquet) and processed chunk by
  chunk, so inputs larger than memory stream through;
- each finished chunk's kept and rejected rows and its counts are parts of the
  one resumable parts folder (:class:`fpr.engines.parts.PartsFolder`,
  ``.<out name>.fpr-filter/`` beside ``--out``), the same folder the Ray engine
  keeps its shards in: written atomically, marked done last. A killed run
  resumes at the first unfinished chunk (finished chunks are not redone;
  re-embedding is free anyway thanks to the embedding cache). A different command
  (rule, index, inputs, chunk size, ...) starts over;
- the outputs appear only when every chunk is done, each written to a temp file
  and renamed, so a reader never sees a half-written file; the parts folder is
  then renamed aside and removed (a kill at any point resumes);
- progress and throughput (images/s) go to stderr.
"""
from __future__ import annotations

import math
import re
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Mapping, Sequence

import numpy as np
import pandas as pd

from fpr import progress
from fpr.defaults import EMBED_BATCH_SIZE
from fpr.encoders.embed import embed_paths
from fpr.encoders.registry import load_encoder
from fpr.engines import ray as ray_engine
from fpr.engines import ray_runtime
from fpr.engines.parts import PartsFolder
from fpr.errors import ConflictError, InputError
from fpr.eval import inputs, pipeline, relevance
from fpr.metrics.rules import BASE_VARIABLES, INTEGER_RULE_NAMES, RULE_COLUMNS, parse_rule
from fpr.scorers import all_scorers, check_scorer_options, parse_scorer_list
from fpr.store.workspace import Workspace
from fpr.tables import iter_table_chunks, table_columns
from fpr.workflows.filter_outputs import _assemble, _copy_kept, _fmt_of, _remove_temporary_outputs, _write_part

REQUIRED = ("path", "identity", "group")
STATE_VERSION = 1
# rule variable -> per-query column (declared with the query_results table in fpr.store.schema)
BASE_COLUMNS = RULE_COLUMNS
INT_COLUMNS = INTEGER_RULE_NAMES


@dataclass
class FilterResult:
    out: str
    rejected: str | None
    n_rows: int
    n_kept: int
    n_rejected: int
    n_chunks: int
    n_chunks_resumed: int
    seconds: float
    images_per_s: float
    scorers: list[str]
    reasons: dict[str, int] = field(default_factory=dict)  # failed clause -> rows
    engine: dict = field(default_factory=dict)  # --engine ray: Ray version, actors, cache used or bypassed

    def as_row(self) -> dict:
        return {"out": self.out, "rejected": self.rejected, "rows": self.n_rows, "kept": self.n_kept,
                "rejected_rows": self.n_rejected, "kept_fraction": self.n_kept / self.n_rows if self.n_rows else
                float("nan"), "chunks": self.n_chunks, "resumed_chunks": self.n_chunks_resumed,
                "seconds": round(self.seconds, 3), "images_per_s": round(self.images_per_s, 2)}


def _alias(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]", "_", text)


def rule_variables(scorer_names: Sequence[str] | None = None) -> dict[str, tuple[str | None, str]]:
    """Rule name -> (scorer or None, output column). Every registered scorer's metrics are offered as
    ``<scorer>_<metric>`` (``-`` becomes ``_``) and its primary metric also as ``<scorer>``
    (``clip_t`` = ``clip-t.score``, ``copy_paste`` = ``copy-paste.flag``)."""
    out: dict[str, tuple[str | None, str]] = {k: (None, k) for k in BASE_COLUMNS}
    scorers = all_scorers()
    for name in scorer_names if scorer_names is not None else list(scorers):
        sc = scorers[name]
        for m in sc.metrics:
            out.setdefault(_alias(f"{name}_{m}"), (name, f"{name}.{m}"))
        primary = getattr(sc, "primary_metric", None) or (sc.metrics[0] if len(sc.metrics) == 1 else None)
        if primary:
            out.setdefault(_alias(name), (name, f"{name}.{primary}"))
    return out


def describe_variables() -> list[dict]:
    """Rows for ``fpr filter --list-names``: every name a keep-rule can use."""
    rows = [{"name": k, "column": k, "scorer": "", "description": v} for k, v in BASE_VARIABLES.items()]
    scorers = all_scorers()
    for name, (scorer, col) in rule_variables().items():
        if scorer:
            rows.append({"name": name, "column": col, "scorer": scorer, "description": scorers[scorer].description})
    return rows


# --------------------------------------------------------------------------- reading in chunks

def _iter_chunks(path: Path, chunk_size: int, columns: list[str] | None = None) -> Iterator[pd.DataFrame]:
    return iter_table_chunks(path, chunk_size, columns, what="queries file")


def _header(path: Path) -> list[str]:
    return table_columns(path, what="queries file")


def _prescan(path: Path, chunk_size: int, gallery_keys: set[str], skip_missing: bool) -> int:
    """Count rows and check identities and query ids before any embedding (cheap: three columns)."""
    header = _header(path)
    cols = [c for c in ("identity", "group", "query_id", "path") if c in header]
    n = 0
    missing: Counter = Counter()
    seen_ids: set[str] = set()
    for df in _iter_chunks(path, max(chunk_size, 10000), columns=cols):
        df = df.astype(object).where(df.notna(), "").astype(str)
        for col in REQUIRED:
            blank = np.flatnonzero(df[col].str.strip() == "")
            if len(blank):
                raise InputError(f"queries file has an empty '{col}' in row {n + int(blank[0]) + 2}", where=str(path))
        keys = df["group"].str.strip() + "\x1f" + df["identity"].str.strip()
        for k in keys[~keys.isin(gallery_keys)]:
            missing[k.replace("\x1f", "/")] += 1
        if "query_id" in df.columns:
            for q in df["query_id"]:
                if q and q in seen_ids:
                    raise InputError(f"query_id '{q}' appears more than once", where=str(path))
                seen_ids.add(q)
        n += len(df)
    if n == 0:
        raise InputError("queries file has no rows", where=str(path))
    if missing and not skip_missing:
        names = sorted(missing)
        total = sum(missing.values())
        raise InputError(f"{total} {'query has' if total == 1 else 'queries have'} no gallery image of "
                         f"{'its' if total == 1 else 'their'} identity: "
                         f"{', '.join(names[:8])}{' ...' if len(names) > 8 else ''}", where=str(path),
                         hint="fix the identity/group labels or pass --skip-missing-identities (they are rejected)")
    return n


# --------------------------------------------------------------------------- state and parts


# --------------------------------------------------------------------------- the filter

def _index_and_encoder(ws: Workspace, index: str, device: str):
    """The index and the encoder it was built with (the same weights, or a one-line refusal)."""
    opened = relevance.open_index(ws, index)
    enc = load_encoder(opened.index.card.encoder, device=device)
    if enc.weights.checksum != opened.index.card.weights_checksum:
        raise ConflictError(f"encoder '{enc.id}' weights differ from those index '{index}' was built with",
                            hint="rebuild the index")
    return opened, enc


def _output_formats(qpath: Path, out: Path, rej_path: Path | None) -> tuple[str, str | None]:
    """The outputs' formats, once they are known not to overwrite the queries file or each other."""
    if not qpath.exists():
        raise InputError("queries file not found", where=str(qpath))
    out_fmt = _fmt_of(out)
    rej_fmt = _fmt_of(rej_path) if rej_path else None
    if rej_path is not None and rej_path.resolve() == out.resolve():
        raise InputError("--out and --rejected must be different files")
    if out.resolve() == qpath.resolve() or (rej_path is not None and rej_path.resolve() == qpath.resolve()):
        raise InputError("outputs must not overwrite the queries file", where=str(qpath))
    return out_fmt, rej_fmt


def _scorers_of(rule, variables: dict, scorers: Sequence[str] | str | None) -> list[str]:
    """The scorers listed, plus those the keep-rule names (they run even when not listed)."""
    names = parse_scorer_list(scorers)
    for v in rule.names:
        sc = variables[v][0]
        if sc and sc not in names:
            names.append(sc)
    return names


def _output_columns(qpath: Path, names: list[str]) -> list[str]:
    """The input's columns (required ones checked) then this run's values, which replace same-named inputs."""
    header = _header(qpath)
    missing_cols = [c for c in REQUIRED if c not in header]
    if missing_cols:
        raise InputError(f"queries file lacks required column(s) {', '.join(missing_cols)}", where=str(qpath),
                         hint=f"required: {', '.join(REQUIRED)}; found: {', '.join(header) or '(none)'}")
    computed = list(BASE_COLUMNS) + [f"{s}.{m}" for s in names for m in all_scorers()[s].metrics] + \
        ["status", "reason"]
    clashing = [c for c in header if c in computed]
    if clashing:
        progress.log(f"input column(s) {', '.join(clashing)} are replaced by this run's values")
    return [c for c in header if c not in computed] + computed


@dataclass
class _ChunkParts:
    """A filter run's finished chunks in the parts folder: each chunk's kept and rejected rows and its counts."""

    parts: PartsFolder
    columns: list[str]
    out_fmt: str
    rej_fmt: str | None
    copy_dir: Path | None
    n_chunks_est: int
    after_chunk: Callable[[int], None] | None
    done: dict[int, dict] = field(default_factory=dict)
    processed: int = 0
    seconds: float = 0.0

    def __post_init__(self) -> None:
        self.kept_suffix = f".kept.{self.out_fmt}"
        self.rej_suffix = f".rejected.{self.rej_fmt}" if self.rej_fmt else None
        required = [self.kept_suffix, ".json"] + ([self.rej_suffix] if self.rej_suffix else [])
        self.done = {k: self.parts.read_json(k, ".json") for k in sorted(self.parts.done(required))}
        if self.done:
            progress.log(f"resuming: {len(self.done)} of {self.n_chunks_est} chunks already done ({self.parts.root})")

    def record(self, k: int, n: int, frame: pd.DataFrame, dt: float) -> None:
        """Write a finished chunk's parts and mark it done (durably, then ``after_chunk``)."""
        kept_mask = frame["__keep"].to_numpy(dtype=bool)
        kept, rej = frame[kept_mask], frame[~kept_mask]
        _write_part(kept[self.columns], self.parts.path(k, self.kept_suffix), self.out_fmt)
        if self.rej_suffix is not None:
            _write_part(rej[self.columns], self.parts.path(k, self.rej_suffix), self.rej_fmt)
        if self.copy_dir is not None and len(kept):
            _copy_kept(kept, self.copy_dir)
        stats = {"rows": n, "kept": int(kept_mask.sum()), "clauses": dict(Counter(c for c in frame["__clause"] if c))}
        self.parts.write_json(k, ".json", stats)
        self.parts.mark_done(k)  # last: a part is done only once all its files are whole
        self.done[k] = stats
        self.seconds += dt
        self.processed += n
        overall = self.processed / self.seconds if self.seconds > 0 else float("inf")
        progress.log(f"chunk {k + 1}/{self.n_chunks_est}: {n} images, kept {int(kept_mask.sum())}, "
                     f"{n / dt if dt > 0 else float('inf'):.1f} img/s; {len(self.done)}/{self.n_chunks_est} chunks "
                     f"done ({overall:.1f} img/s overall)")
        if self.after_chunk is not None:
            self.after_chunk(k)

    def assemble(self, n_chunks: int, out: Path, rej_path: Path | None, *, where: str) -> None:
        """The outputs from every chunk's parts, in order; then the parts folder goes."""
        if sorted(self.done) != list(range(n_chunks)):
            raise InputError(f"the queries file changed while filtering ({len(self.done)} of {n_chunks} chunks "
                             "recorded)", where=where, hint="rerun the command")
        _assemble([self.parts.path(k, self.kept_suffix) for k in range(n_chunks)], out, self.out_fmt, self.columns)
        if self.rej_suffix is not None:
            _assemble([self.parts.path(k, self.rej_suffix) for k in range(n_chunks)], rej_path, self.rej_fmt,
                      self.columns)
        self.parts.discard()


def filter_queries(index: str, queries: str | Path, keep: str, out: str | Path, *,
                   rejected: str | Path | None = None, copy_to: str | Path | None = None,
                   scorers: Sequence[str] | str | None = (), chunk_size: int = 1000,
                   workspace: str | Path | None = None, scope: str = "group",
                   skip_missing_identities: bool = False, device: str = "auto", batch_size: int = EMBED_BATCH_SIZE,
                   workers: int | None = None, scorer_options: Mapping[str, str] | None = None,
                   restart: bool = False, after_chunk: Callable[[int], None] | None = None,
                   engine: str = "local", ray=None) -> FilterResult:
    """Split generated images into kept and rejected by a keep-rule; streams and resumes (see module doc).

    ``after_chunk(k)`` is called after chunk ``k`` is durably recorded (progress hooks, tests).
    ``engine="ray"``: the chunks run on Ray (:mod:`fpr.engines.ray`, options ``ray``) and are
    recorded in the same state folder as they finish, so the resume rules are the same (and a run
    killed on one engine resumes on the other).
    """
    ray_opts = ray_runtime.ray_options(engine, ray)
    start = time.perf_counter()
    if chunk_size < 1:
        raise InputError(f"--chunk-size must be at least 1, got {chunk_size}")
    relevance.check_scope(scope)
    qpath, out, rej_path = Path(queries), Path(out), Path(rejected) if rejected else None
    out_fmt, rej_fmt = _output_formats(qpath, out, rej_path)
    variables = rule_variables()
    rule = parse_rule(keep, list(variables))
    names = _scorers_of(rule, variables, scorers)
    options = {str(k): str(v) for k, v in (scorer_options or {}).items()}
    check_scorer_options(names, options)

    ws = Workspace.open(workspace)
    opened, enc = _index_and_encoder(ws, index, "cpu" if ray_opts else device)  # Ray: the actors place it
    gi = opened.index
    columns = _output_columns(qpath, names)
    n_rows = _prescan(qpath, chunk_size, set(opened.labels.keys()), skip_missing_identities)
    n_chunks_est = math.ceil(n_rows / chunk_size)

    st = qpath.stat()
    work = {"v": STATE_VERSION, "queries": str(qpath.resolve()), "size": st.st_size, "mtime": st.st_mtime_ns,
            "index": index, "card": [gi.card.gallery_fingerprint, gi.card.encoder, gi.card.weights_checksum],
            "rule": rule.text, "scorers": names, "options": options, "scope": scope, "chunk": chunk_size,
            "skip_missing": skip_missing_identities, "outputs": [str(p.resolve()) if p else None for p in
                                                                 (out, rej_path, Path(copy_to) if copy_to else None)],
            "columns": columns}  # what decides the parts: a change starts over
    _remove_temporary_outputs(out, rej_path)
    chunks = _ChunkParts(PartsFolder(out.parent / f".{out.name}.fpr-filter", work, restart=restart), columns,
                         out_fmt, rej_fmt, Path(copy_to) if copy_to else None, n_chunks_est, after_chunk)
    progress.log(f"filtering {n_rows} queries against index '{index}' ({enc.id}) in chunks of {chunk_size}; "
                 f"keep: {rule.text}" + (f"; scorers: {', '.join(names)}" if names else ""))

    base = qpath.resolve().parent
    settings = pipeline.EvalSettings(scope, True, True, names, options, 0, device, batch_size, workers)
    tally = {"resumed": 0, "offset": 0}

    k = -1
    pending: list[tuple[int, dict]] = []
    for k, raw in enumerate(_iter_chunks(qpath, chunk_size)):
        n = len(raw)
        offset = tally["offset"]
        tally["offset"] += n
        if k in chunks.done:
            tally["resumed"] += 1
            continue
        if ray_opts is not None:  # queued for Ray: the paths are what the decode tasks read
            qdf = inputs.normalize_queries(raw.reset_index(drop=True), base=base, id_offset=offset,
                                             required=REQUIRED, where="queries chunk")
            pending.append((k, {"raw": raw, "offset": offset, "paths": qdf["path"].tolist()}))
            continue
        t0 = time.perf_counter()
        frame = _process_chunk(raw, offset, base, opened, enc, rule, variables, settings, ws.root)
        chunks.record(k, n, frame, time.perf_counter() - t0)
    n_chunks = k + 1
    engine_info: dict = {}
    if ray_opts is not None:
        job = FilterJob(ray_engine.portable_index(opened), rule.text, list(variables), settings, base, ws.root)
        engine_info = _run_on_ray(pending, job, enc, chunks, ray_opts, device=device, batch_size=batch_size,
                                  chunk_size=chunk_size)
        engine_info.update(chunks=n_chunks, chunks_resumed=tally["resumed"])
    chunks.assemble(n_chunks, out, rej_path, where=str(qpath))
    return _result(chunks, out, rej_path, n_rows, n_chunks, tally["resumed"], time.perf_counter() - start, names,
                   engine_info)


def _run_on_ray(pending: list, job: "FilterJob", enc, chunks: _ChunkParts, ray_opts, *, device: str, batch_size: int,
                chunk_size: int) -> dict:
    """The pending chunks on Ray's actors, each recorded as it finishes; returns the engine's report."""
    if chunk_size > 4 * ray_engine.default_shard_size(enc):
        progress.log(f"ray: a chunk ({chunk_size} images) is the unit of work on Ray and its decoded pixels "
                     f"cross the object store: --chunk-size {ray_engine.default_shard_size(enc)} keeps them "
                     "under 256 MB")
    return ray_engine.run_shards(
        pending, job, enc, options=ray_opts, device=device, batch_size=batch_size,
        cache_root=ray_engine.cache_root_for_workers(),
        on_result=lambda k, res: chunks.record(k, res["n"], res["frame"], res["seconds"]), what="filter")


def _result(chunks: _ChunkParts, out: Path, rej_path: Path | None, n_rows: int, n_chunks: int, n_resumed: int,
            seconds: float, names: list[str], engine_info: dict) -> FilterResult:
    n_kept = sum(int(d["kept"]) for d in chunks.done.values())
    reasons: Counter = Counter()
    for d in chunks.done.values():
        reasons.update(d.get("clauses", {}))
    ips = chunks.processed / chunks.seconds if chunks.seconds > 0 else float("nan")
    progress.log(f"kept {n_kept} of {n_rows} ({100.0 * n_kept / max(n_rows, 1):.1f}%) in {seconds:.1f}s"
                 + (f"; {ips:.1f} img/s" if chunks.processed else "") + f"; wrote {out}"
                 + (f" and {rej_path}" if rej_path else ""))
    return FilterResult(str(out), str(rej_path) if rej_path else None, n_rows, n_kept, n_rows - n_kept, n_chunks,
                        n_resumed, seconds, ips, names, dict(reasons.most_common()), engine_info)


class FilterJob:
    """One chunk on a Ray actor (:mod:`fpr.engines.ray`): :func:`_process_chunk` with the chunk's
    images embedded by the actor."""

    def __init__(self, opened: relevance.OpenIndex, rule_text: str, variable_names: list[str],
                 settings: pipeline.EvalSettings, base: Path, workspace_root: Path):
        self.opened, self.rule_text, self.variable_names = opened, rule_text, variable_names
        self.settings, self.base, self.workspace_root = settings, base, workspace_root

    def run(self, encoder, job_input: dict, embedded, embed) -> dict:
        t0 = time.perf_counter()
        variables = rule_variables()
        rule = parse_rule(self.rule_text, list(variables))
        frame = _process_chunk(job_input["raw"], job_input["offset"], self.base, self.opened, encoder, rule,
                               variables, self.settings, self.workspace_root, embed=embed)
        return {"n": len(frame), "frame": frame, "seconds": time.perf_counter() - t0 + embedded.seconds}


def _process_chunk(raw: pd.DataFrame, offset: int, base: Path, opened: relevance.OpenIndex, enc, rule, variables,
                   settings: pipeline.EvalSettings, workspace_root: Path, embed=None) -> pd.DataFrame:
    """Score one chunk exactly as ``run_query`` scores queries; return input + values + keep/reason.

    ``embed``: the embedding function (default: :func:`fpr.encoders.embed.embed_paths` with ``enc``)."""
    raw = raw.reset_index(drop=True)
    qdf = inputs.normalize_queries(raw, base=base, id_offset=offset, required=REQUIRED, where="queries chunk")

    def local_embed(paths, *, on_error="raise", desc="embedding"):
        return embed_paths(enc, paths, batch_size=settings.batch_size, workers=settings.workers, on_error=on_error,
                           desc=desc)

    ev = pipeline.evaluate(qdf, opened.labels, opened.index, embed or local_embed, settings, encoder_id=enc.id,
                           workspace=workspace_root, dim=enc.spec.dim)
    pq_ = ev.per_query
    values: dict[str, np.ndarray] = {v: pd.to_numeric(pq_[col], errors="coerce").to_numpy(dtype=np.float64)
                                     for v, col in BASE_COLUMNS.items()}
    aux_cols: dict[str, np.ndarray] = {}
    if settings.scorers:
        pos = {qid: i for i, qid in enumerate(qdf["query_id"])}
        scorers = all_scorers()
        for s in settings.scorers:
            for m in scorers[s].metrics:
                aux_cols[f"{s}.{m}"] = np.full(len(qdf), np.nan)
        for qid, s, m, v in ev.aux[["query_id", "scorer", "metric", "value"]].itertuples(index=False):
            col = f"{s}.{m}"
            if col in aux_cols:
                aux_cols[col][pos[qid]] = v
    for v, (_, col) in variables.items():
        if v not in values:
            values[v] = aux_cols.get(col, np.full(len(qdf), np.nan))
    res = rule.apply(values)
    keep = res.keep & (ev.status == "ok")
    reasons = list(res.reason)
    clauses = list(res.clause)
    for i in np.flatnonzero(ev.status != "ok"):
        msg = ev.reasons.get(qdf["query_id"].iloc[i], "")
        reasons[i] = f"{ev.status[i]}" + (f": {msg}" if msg else "")
        clauses[i] = str(ev.status[i])

    frame = raw.drop(columns=[c for c in raw.columns if c in BASE_COLUMNS or c in aux_cols or
                              c in ("status", "reason")])
    for v in BASE_COLUMNS:
        col = values[v]
        frame[v] = pd.array(np.where(np.isfinite(col), col, np.nan), dtype="Float64").astype("Int64") \
            if v in INT_COLUMNS else col
    for col, arr in aux_cols.items():
        frame[col] = arr
    frame["status"] = ev.status.astype(str)
    frame["reason"] = reasons
    frame["__keep"] = keep
    frame["__clause"] = clauses
    frame["__path"] = qdf["path"].to_numpy()
    frame["__group"] = qdf["group"].to_numpy()
    frame["__identity"] = qdf["identity"].to_numpy()
    frame["__query_id"] = qdf["query_id"].to_numpy()
    return frame
