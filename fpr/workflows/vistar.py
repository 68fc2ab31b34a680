"""``fpr vistar run`` and ``fpr report --by role``: VISTAR's role-centric evaluation of a folder of generations.

Inputs: a prompts file (CSV/TSV/Parquet) with ``prompt_id``, ``prompt`` (the structured
language, :mod:`fpr.scorers.vistar.prompts`) and optionally ``split`` (``core``, the
default, or ``hard``) and ``reference_paths`` (real images of the prompt's subject, ';'-joined,
relative to the prompts file: GC fits its PaDiM cue on them, without them that cue and GC's
six-cue score are NaN with the reason); a folder ``<generations>/<model>/<prompt_id>.<ext>``
(any image fpr reads: PNG, JPEG, WebP, GIF, BMP, TIFF).
Each image is routed by its prompt's ``[role|aspect]`` to the aspect's scorer, with the
prompt's control parameters as the scorer's expected values. The run is stored like any
other (``query_results`` with ``method`` = model, ``aux_scores``) plus its routing
(``vistar_prompts``), so ``vistar_tensor`` in ``fpr sql`` is the paper's S[R x A x G x N]. A scorer whose
model is missing (its weights not here, e.g. CLIP for CSE offline) gives NaN for its images, the reason
in the note and the run's provenance (``scorers.<name>.not_scored``), with one warning line; every other
aspect is scored and the run is stored. The report counts each scorer's NaNs by reason.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from fpr import progress
from fpr.errors import ConflictError, InputError, NotFoundError
from fpr.images import IMAGE_SUFFIXES, check_image
from fpr.keys import utc_now
from fpr.metrics.reasons import NanCount
from fpr.metrics.roles import SPLITS, aspect_scores, role_scores, split_scores
from fpr.render.result import nan_reasons
from fpr.scorers import QueryBatch, all_scorers, check_scorer_options, run_scorers
from fpr.scorers.vistar.cpa import canonical
from fpr.scorers.vistar.li import parse_direction
from fpr.scorers.vistar.prompts import StructuredPrompt, parse_prompt
from fpr.scorers.vistar.roles import aspect, read_mask, role_names
from fpr.store import records as db
from fpr.store.workspace import Workspace
from fpr.tables import read_table, split_paths


@dataclass(frozen=True)
class RoutedPrompt:
    prompt_id: str
    split: str
    prompt: StructuredPrompt
    row: int  # line of the prompts file (header = 1)
    references: tuple[str, ...] = ()  # real images of the subject (the prompts file's reference_paths), resolved


@dataclass
class VistarReport:
    """What ``fpr report --by role`` prints: per-aspect, Core/Hard and per-role scores of each model."""

    runs: list[str]
    aspects: pd.DataFrame  # model, aspect, score, n, n_missing (Core split)
    splits: pd.DataFrame  # model, core, hard, drop, n_aspects
    roles: pd.DataFrame  # role, role_name, model, role_score, role_score_measured, n_relevant, n_measured, ranks
    nan_reasons: list[NanCount] = field(default_factory=list)  # per scorer: its NaNs by reason phrase


def read_prompts(path: str | Path, mask: pd.DataFrame) -> list[RoutedPrompt]:
    """Parse every prompt; a syntax error, an unknown role or aspect, or a pair the mask marks
    irrelevant is one line naming the file, row (and column)."""
    p = Path(path)
    df = read_table(p, required=("prompt_id", "prompt"), what="prompts file")
    roles = set(mask["role"])
    relevant = set(zip(mask.loc[mask["relevant"] == 1, "role"], mask.loc[mask["relevant"] == 1, "aspect"]))
    out: list[RoutedPrompt] = []
    seen: set[str] = set()
    for i, r in enumerate(df.itertuples(index=False)):
        row = i + 2
        where = f"{p.name} row {row}"
        sp = parse_prompt(r.prompt, where=where)
        try:
            a = aspect(sp.aspect).code
        except InputError as e:
            raise InputError(f"{where}: {e.what}", where=str(p), hint=e.hint) from None
        if sp.role not in roles:
            raise InputError(f"{where}: unknown role '{sp.role}'", where=str(p),
                             hint="roles of the relevance mask: " + ", ".join(sorted(roles)))
        if (sp.role, a) not in relevant:
            raise InputError(f"{where}: the relevance mask marks [{sp.role}|{a}] irrelevant", where=str(p),
                             hint="route the prompt to a relevant pair, or pass --relevance with your own mask")
        _check_expected_values(sp, where, p)
        split = (getattr(r, "split", "") or "core").lower()
        if split not in SPLITS:
            raise InputError(f"{where}: split must be core or hard, not '{split}'", where=str(p))
        if r.prompt_id in seen:
            raise InputError(f"{where}: prompt_id '{r.prompt_id}' is used twice", where=str(p))
        seen.add(r.prompt_id)
        refs = tuple(split_paths(_cell(getattr(r, "reference_paths", "")), p.resolve().parent))
        out.append(RoutedPrompt(r.prompt_id, split, StructuredPrompt(sp.role, a, sp.core, sp.params), row, refs))
    return out


def _cell(v) -> str:
    """A table cell as text: an empty CSV cell (NaN) is ''."""
    return "" if v is None or (isinstance(v, float) and v != v) else str(v)


def _check_expected_values(sp: StructuredPrompt, where: str, path: Path) -> None:
    """Values fpr can check before any image is read (so the error names the prompts file's row)."""
    values = sp.expected_values()
    if "light_direction" in values:
        try:
            parse_direction(values["light_direction"])
        except InputError as e:
            raise InputError(f"{where}: {e.what}", where=str(path), hint=e.hint) from None
    if "expected_count" in values and not values["expected_count"].strip().isdigit():
        raise InputError(f"{where}: count must be a whole number >= 0, not '{values['expected_count']}'",
                         where=str(path))
    for column, kind in (("expected_posture", "postures"), ("expected_expression", "expressions")):
        if column in values:
            try:
                canonical(values[column], kind)
            except InputError as e:
                raise InputError(f"{where}: {e.what}", where=str(path), hint=e.hint) from None


def find_generations(folder: str | Path, prompts: list[RoutedPrompt]) -> dict[str, dict[str, Path]]:
    """{model: {prompt_id: image}} from ``<folder>/<model>/<prompt_id>.<ext>``; every model must have every prompt."""
    root = Path(folder)
    if not root.is_dir():
        raise InputError("generations folder not found", where=str(root),
                         hint="give a folder with one sub-folder of images per model")
    models = sorted(d for d in root.iterdir() if d.is_dir() and not d.name.startswith("."))
    if not models:
        raise InputError("the generations folder has no model sub-folders", where=str(root),
                         hint="lay images out as <folder>/<model>/<prompt_id>.png")
    out: dict[str, dict[str, Path]] = {}
    for d in models:
        files = {f.stem: f for f in sorted(d.iterdir()) if f.suffix.lower() in IMAGE_SUFFIXES}
        lacking = [p.prompt_id for p in prompts if p.prompt_id not in files]
        if lacking:
            raise InputError(f"model '{d.name}' has no image for prompt(s) {', '.join(lacking[:5])}"
                             + (f" and {len(lacking) - 5} more" if len(lacking) > 5 else ""), where=str(d),
                             hint="every model needs <prompt_id>.png (or .jpg/.webp) for every prompt")
        out[d.name] = {p.prompt_id: files[p.prompt_id] for p in prompts}
    return out


def _check_scorers(prompts: list[RoutedPrompt]) -> None:
    have = all_scorers()
    for p in prompts:
        a = aspect(p.prompt.aspect)
        if a.scorer not in have:
            raise InputError(f"row {p.row}: aspect {a.code} needs scorer '{a.scorer}', which this fpr does not have",
                             hint="drop the prompts of that aspect, or install a plugin that registers it")


def vistar_run(generations: str | Path, prompts_file: str | Path, run_id: str, *,
               workspace: str | Path | None = None, relevance: str | Path | None = None,
               options: dict | None = None, device: str = "auto", overwrite: bool = False) -> VistarReport:
    """Score every model's image of every prompt with its aspect's scorer; store the run and its routing."""
    db.check_run_id(run_id)
    ws = Workspace.open(workspace)
    if not overwrite and db.run_exists(ws, run_id):  # before any image is scored
        raise ConflictError(f"run '{run_id}' already exists", where=str(ws.root),
                            hint="choose another --run or pass --overwrite")
    mask = read_mask(relevance)
    prompts = read_prompts(prompts_file, mask)
    _check_scorers(prompts)
    # every option names a scorer the routing uses, before any image is read; each scorer then gets its own
    check_scorer_options(sorted({aspect(p.prompt.aspect).scorer for p in prompts}), options)
    images = find_generations(generations, prompts)
    for ref in sorted({r for p in prompts for r in p.references}):  # before any image is scored
        check_image(ref)
    rows = []
    for model, by_prompt in images.items():
        for p in prompts:
            path = by_prompt[p.prompt_id]
            check_image(path)
            rows.append({"query_id": f"{model}/{p.prompt_id}", "model": model, "p": p, "path": str(path.resolve())})
    frames = []
    missing: dict[str, str] = {}  # scorer -> why it could not run (a model it needs is missing)
    by_scorer: dict[str, list[dict]] = {}
    for r in rows:
        by_scorer.setdefault(aspect(r["p"].prompt.aspect).scorer, []).append(r)
    for name, group in by_scorer.items():
        own = {k: v for k, v in (options or {}).items() if str(k).split(".", 1)[0] == name}
        progress.log(f"vistar: {name} on {len(group)} images")
        batch = QueryBatch(query_ids=[r["query_id"] for r in group], paths=[r["path"] for r in group],
                           identities=[r["p"].prompt_id for r in group], groups=[r["p"].split for r in group],
                           prompts=[r["p"].prompt.core for r in group],
                           reference_paths=[list(r["p"].references) for r in group],
                           device=device, options=own, workspace=ws.root,
                           extras=[{**r["p"].prompt.expected_values(), "aspect": r["p"].prompt.aspect}
                                   for r in group])
        try:
            frames.append(run_scorers([name], batch))
        except NotFoundError as exc:  # a model it needs is not here (offline): NaN with the reason, the rest stored
            frames.append(_missing_model_rows(name, batch, exc))
            missing[name] = frames[-1]["note"].iloc[0]
    aux = pd.concat(frames, ignore_index=True)
    provenance = {k: v for f in frames for k, v in f.attrs.get("provenance", {}).items()}
    provenance.update({name: {"not_scored": why} for name, why in missing.items()})
    aux.insert(0, "run_id", run_id)
    query_results = pd.DataFrame([{
        "run_id": run_id, "query_id": r["query_id"], "row_number": k, "path": r["path"], "method": r["model"],
        "identity": r["p"].prompt_id, "group_name": r["p"].split, "prompt": r["p"].prompt.core,
        "reference_paths": ";".join(r["p"].references), "status": "ok",
        "extra": json.dumps(r["p"].prompt.params)} for k, r in enumerate(rows)])
    routing = pd.DataFrame([{
        "query_id": r["query_id"], "prompt_id": r["p"].prompt_id, "role": r["p"].prompt.role,
        "aspect": r["p"].prompt.aspect, "split": r["p"].split, "core": r["p"].prompt.core,
        "params": json.dumps(r["p"].prompt.params), "scorer": aspect(r["p"].prompt.aspect).scorer,
        "metric": aspect(r["p"].prompt.aspect).metric} for r in rows])
    run = {"run_id": run_id, "n_queries": len(rows), "n_evaluated": len(rows), "n_skipped": 0,
           "queries_file": str(Path(prompts_file).resolve()),
           "params": json.dumps({"vistar": True, "generations": str(Path(generations).resolve()),
                                 "relevance": str(relevance) if relevance else None, "options": options or {}}),
           "provenance": json.dumps({"scorers": provenance, "created": utc_now()})}
    db.store_run(ws, run, query_results, aux, pd.DataFrame(), overwrite=overwrite)
    db.store_vistar_prompts(ws, run_id, routing)
    return role_report([run_id], workspace=ws.root, relevance=relevance)


def _missing_model_rows(name: str, batch: QueryBatch, exc: NotFoundError) -> pd.DataFrame:
    """NaN for every metric of scorer ``name`` on every query of its batch, the reason in the note; one warning."""
    from fpr.scorers import get_scorer

    reason = f"model missing: {exc.one_line()}"
    progress.warn(f"vistar: {name} could not run ({exc.what}): its {len(batch)} image(s) are NaN with that reason "
                  f"in the note; every other aspect is scored and the run is stored")
    metrics = get_scorer(name).metrics
    return pd.DataFrame([{"query_id": q, "scorer": name, "metric": m, "value": float("nan"), "note": reason}
                         for q in batch.query_ids for m in metrics],
                        columns=["query_id", "scorer", "metric", "value", "note"])


def role_report(runs: list[str] | tuple[str, ...] | str, *, workspace: str | Path | None = None,
                relevance: str | Path | None = None) -> VistarReport:
    """Per-aspect scores (Core), Core/Hard scores and drop, and role-weighted scores with ranks."""
    runs = [runs] if isinstance(runs, str) else list(runs)
    ws = Workspace.open(workspace)
    ids = [r for name in runs for r in (db.run_group(ws, name) or [name])]
    tensor = db.vistar_tensor(ws, ids)
    if tensor.empty:
        raise NotFoundError(f"run(s) {', '.join(runs)} have no VISTAR routing", where=str(ws.root),
                            hint="evaluate with 'fpr vistar run' (a prompts file in the structured language)")
    tensor["score"] = pd.to_numeric(tensor["score"], errors="coerce").astype(float)
    mask = read_mask(relevance)
    models = sorted(set(tensor["model"]))
    asp = aspect_scores(tensor)
    splits = split_scores(asp)
    core_aspects = asp[asp["split"] == "core"].drop(columns="split").reset_index(drop=True)
    roles = role_scores(core_aspects, mask, models)
    core_rank = splits.set_index("model")["core"].rank(method="min", ascending=False).astype("Int64")
    roles.insert(1, "role_name", roles["role"].map(role_names()).fillna(""))
    roles["core_rank"] = roles["model"].map(core_rank).astype("Int64")
    aux = pd.concat([db.run_tables(ws, r)[1] for r in ids], ignore_index=True)
    return VistarReport(runs=ids, aspects=core_aspects, splits=splits, roles=roles, nan_reasons=nan_reasons(aux))
