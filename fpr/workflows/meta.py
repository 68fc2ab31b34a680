"""``fpr meta``: a run's per-query values against human judgments or a truth column.

Reads the judgment files and the run; the statistics are :mod:`fpr.metrics.agreement`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

from fpr.errors import InputError
from fpr.metrics.agreement import (WINNERS, Judgments, MetaResult, _empty_pairs, _empty_ratings, agreement,
                                   metric_columns, pairs_from_scores, truth_judgments)
from fpr.metrics.summary import aux_columns, with_aux
from fpr.tables import read_table
from fpr.workflows.runs import load_run


def _aggregate_pairs(raw: pd.DataFrame, where: str) -> pd.DataFrame:
    df = raw.copy()
    df["winner"] = df["winner"].astype(str).str.strip().str.lower()
    bad = sorted(set(df["winner"]) - set(WINNERS))
    if bad:
        raise InputError(f"pair judgments have winner value(s) {', '.join(bad[:5])}", where=where,
                         hint="winner must be a, b or tie")
    a, b = df["query_id_a"].astype(str), df["query_id_b"].astype(str)
    vote = df["winner"].map({"a": 1, "b": -1, "tie": 0}).astype(int)
    swap = a > b
    lo, hi = np.where(swap, b, a), np.where(swap, a, b)
    if np.any(lo == hi):
        raise InputError("a pair judgment compares a query with itself", where=where)
    agg = pd.DataFrame({"query_id_a": lo, "query_id_b": hi, "vote": np.where(swap, -vote, vote)})
    agg = agg.groupby(["query_id_a", "query_id_b"], sort=True).agg(vote=("vote", "sum"), n_votes=("vote", "size"))
    agg = agg.reset_index()
    agg["winner"] = np.select([agg["vote"] > 0, agg["vote"] < 0], ["a", "b"], "tie")
    return agg[["query_id_a", "query_id_b", "winner", "n_votes"]]


def read_judgments(paths: Sequence[str | Path]) -> Judgments:
    """Read human files: each holds pairs (query_id_a,query_id_b,winner) or ratings (query_id,rating[,rater])."""
    pair_frames, rating_frames = [], []
    for p in paths:
        head = read_table(p, required=(), what="human judgments")
        cols = set(head.columns)
        if {"query_id_a", "query_id_b", "winner"} <= cols:
            pair_frames.append(head)
        elif {"query_id", "rating"} <= cols:
            r = head.copy()
            if "rater" not in r:
                r["rater"] = f"{Path(p).stem}"
            rating_frames.append(r)
        else:
            raise InputError("a human judgments file needs columns query_id_a,query_id_b,winner (pairs) or "
                             "query_id,rating[,rater] (ratings)", where=str(p),
                             hint=f"its columns: {', '.join(map(str, head.columns))}")
    pairs = _aggregate_pairs(pd.concat(pair_frames, ignore_index=True), ", ".join(map(str, paths))) \
        if pair_frames else None
    ratings = None
    if rating_frames:
        r = pd.concat(rating_frames, ignore_index=True)
        rating = pd.to_numeric(r["rating"], errors="coerce")
        if rating.isna().any():
            raise InputError(f"{int(rating.isna().sum())} rating(s) are not numbers",
                             where=", ".join(map(str, paths)), hint="ratings must be numeric (e.g. 1-5)")
        ratings = pd.DataFrame({"query_id": r["query_id"].astype(str), "rater": r["rater"].astype(str),
                                "rating": rating.astype(float)})
    return Judgments(pairs if pairs is not None else _empty_pairs(),
                     ratings if ratings is not None else _empty_ratings())


def meta(run_id: str, human: str | Path | Sequence[str | Path] | None = None, truth: str | None = None, *,
         workspace: str | Path | None = None, seed: int = 0, metrics: Sequence[str] | None = None,
         lower_better: Sequence[str] = (), compare: tuple[str, str] | None = None,
         truth_lower_better: bool = True, pair_within: Sequence[str] = ("group", "identity"),
         n_boot: int = 1000, methods: Sequence[str] | None = None):
    """Agreement of a run's per-query values with human judgments (files) or a truth column.

    ``methods``: only the queries of these methods (every statistic then sees the same method set).
    The statistics are :mod:`fpr.metrics.agreement`.
    """
    if (human is None or human == [] or human == ()) == (truth is None):
        raise InputError("give exactly one of --human FILE or --truth COLUMN",
                         hint="e.g. --human judgments.csv, or --truth drift on a demo world run")
    res = load_run(run_id, workspace=workspace, summary=False)  # the summary rows (bootstrap) are not used
    df = with_aux(res.per_query, res.aux)
    df = df[df["status"] == "ok"].reset_index(drop=True)
    if methods:
        df = _only_methods(df, methods, run_id)
    available = metric_columns(df, aux_columns(res.aux))
    if metrics:
        unknown = [m for m in metrics if m not in available]
        if unknown:
            raise InputError(f"run '{run_id}' has no per-query value(s) {', '.join(unknown)}",
                             hint=f"values: {', '.join(available)}")
        available = list(metrics)
    if truth is not None:
        judg = truth_judgments(df, truth, lower_better=truth_lower_better, within=tuple(pair_within))
        where = f"run {run_id} column {truth}"
    else:
        paths = [human] if isinstance(human, (str, Path)) else list(human)
        judg = read_judgments(paths)
        where = ", ".join(map(str, paths))
        if judg.pairs.empty and not judg.ratings.empty:
            mean = judg.ratings.groupby("query_id")["rating"].mean()
            score = df["query_id"].astype(str).map(mean).astype(float)
            judg.pairs = pairs_from_scores(df, score, tuple(pair_within))
    judg.within = tuple(pair_within)
    out = agreement(df, available, judg, lower_better=lower_better, compare=compare, seed=seed,
                    n_boot=n_boot, where=where)
    out.info["run"] = run_id
    if methods:
        out.info["methods"] = list(methods)
    return out


def _only_methods(df: pd.DataFrame, methods: Sequence[str], run_id: str) -> pd.DataFrame:
    unknown = sorted(set(methods) - set(df["method"].astype(str)))
    if unknown:
        raise InputError(f"run '{run_id}' has no evaluated queries of method(s) {', '.join(unknown)}",
                         hint=f"methods: {', '.join(sorted(df['method'].astype(str).unique()))}")
    return df[df["method"].astype(str).isin(list(methods))].reset_index(drop=True)


def plot(result: MetaResult, out: str | Path) -> Path:
    """PPA and Spearman per metric with their 95% intervals (PNG/PDF/SVG by suffix)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in result.rows if r["metric"] != "(raters)"]
    names = [r["metric"] for r in rows]
    fig, axes = plt.subplots(1, 2, figsize=(max(6.0, 0.9 * len(names) + 3), 3.6), sharey=False)
    for ax, key, title, ref in ((axes[0], "ppa", "PPA (VISTAR: S(A) > S(B))", 0.75),
                                (axes[1], "spearman", "Spearman vs mean rating", 0.0)):
        v = np.array([r.get(key, np.nan) for r in rows], dtype=float)
        lo = np.array([r.get(f"{key}_lo", np.nan) for r in rows], dtype=float)
        hi = np.array([r.get(f"{key}_hi", np.nan) for r in rows], dtype=float)
        x = np.arange(len(names))
        ax.bar(x, np.nan_to_num(v), color="#4c72b0")
        ax.errorbar(x, v, yerr=[np.nan_to_num(v - lo), np.nan_to_num(hi - v)], fmt="none", ecolor="k", capsize=3)
        ax.axhline(ref, color="grey", lw=0.8, ls="--")
        ax.set_xticks(x, names, rotation=45, ha="right", fontsize=8)
        ax.set_title(title, fontsize=9)
    fig.suptitle(f"agreement with {result.info.get('source', 'judgments')}", fontsize=10)
    fig.tight_layout()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out


def meta_imagenhub(run_id: str, ratings: str | Path, *, workspace: str | Path | None = None,
                   metrics: Sequence[str] | None = None) -> list[dict]:
    """Spearman per ImagenHub task of a run's per-query values with the mean human SC (CIGEval's benchmark).

    ``ratings``: an ImagenHub human-ratings folder (:mod:`fpr.workflows.imagenhub`). Default metrics:
    the run's ``cigeval.*`` values, else every per-query value. Rows: task, model, metric, n, spearman: per
    task the pooled value, the Fisher-z mean of the per-model values, each model's; then per metric the
    plain mean over tasks (task ``(mean)``) of the pooled and of the Fisher-z values.
    """
    from fpr.workflows import imagenhub

    humans = imagenhub.human_scores(imagenhub.read_imagenhub(ratings))
    res = load_run(run_id, workspace=workspace, summary=False)
    df = with_aux(res.per_query, res.aux)
    df = df[df["status"] == "ok"].reset_index(drop=True)
    available = metric_columns(df, aux_columns(res.aux))
    unknown = [m for m in metrics or () if m not in available]
    if unknown:
        raise InputError(f"run '{run_id}' has no per-query value(s) {', '.join(unknown)}",
                         hint=f"values: {', '.join(available)}")
    chosen = list(metrics) if metrics else ([m for m in available if m.startswith("cigeval.")] or available)
    rows = imagenhub.per_task_spearman(imagenhub.match_run(df, humans, run_id), chosen)
    return [r.as_row() for r in rows + imagenhub.mean_over_tasks(rows)]


# --------------------------------------------------------------------------- the paper's two claims (Figure 3)

@dataclass
class ClaimsResult:
    """One world's Figure 3 judged against a truth (:mod:`fpr.metrics.claims`): the 2x2 of means per (seed,
    method) (``table``), a verdict per claim, the four cells' strict PPA on the judged pairs (``cells``), the
    protocol and encoder effects (``effects``), claim (i)'s decomposition into them (``decomposition``), claim
    (ii)'s ties-half variant (``variants``) and the gallery's regime per encoder (``regime``: oracle mAP, AP = 1
    share and AP tie share of the judged pairs). A result stored before these keys existed reads back with them
    empty (:meth:`from_json`)."""

    table: list[dict]
    verdicts: list[dict]
    info: dict = field(default_factory=dict)
    cells: list[dict] = field(default_factory=list)
    effects: list[dict] = field(default_factory=list)
    decomposition: dict = field(default_factory=dict)
    variants: list[dict] = field(default_factory=list)
    regime: list[dict] = field(default_factory=list)

    def as_json(self) -> dict:
        return {"info": self.info, "table": self.table, "verdicts": self.verdicts, "cells": self.cells,
                "effects": self.effects, "decomposition": self.decomposition, "variants": self.variants,
                "regime": self.regime}

    @classmethod
    def from_json(cls, doc: dict) -> "ClaimsResult":
        return cls(doc["table"], doc["verdicts"], doc.get("info", {}), doc.get("cells", []), doc.get("effects", []),
                   doc.get("decomposition", {}), doc.get("variants", []), doc.get("regime", []))


def claims_frame(specialist: pd.DataFrame, general: pd.DataFrame, *, seed: int = 0, truth: str = "drift"
                 ) -> pd.DataFrame:
    """One row per query both runs evaluated: the specialist's and the general encoder's AP and Sim, the truth,
    group, identity, method, ``seed`` (world seed; query ids are prefixed with it) and ``context`` if present."""
    keep = ["query_id", "method", "group", "identity", truth] + (["context"] if "context" in specialist else [])
    missing = [c for c in keep if c not in specialist.columns]
    if missing:
        raise InputError(f"the specialist run's queries have no '{missing[0]}' column",
                         hint="the claims need the world's truth column, e.g. a demo run's drift")

    def ok(df: pd.DataFrame) -> pd.DataFrame:
        return df[df["status"] == "ok"] if "status" in df else df

    s = ok(specialist)[keep + ["ap", "sim"]].rename(columns={"ap": "specialist_map", "sim": "specialist_sim"})
    g = ok(general)[["query_id", "ap", "sim"]].rename(columns={"ap": "general_map", "sim": "general_sim"})
    out = s.merge(g, on="query_id", how="inner")
    out.insert(0, "seed", seed)
    out["query_id"] = f"{seed}:" + out["query_id"].astype(str)
    return out


def encoder_claims(frame: pd.DataFrame, *, truth: str = "drift", seed: int = 0, n_boot: int = 1000,
                   lower_better: bool = True) -> ClaimsResult:
    """The 2x2 per (seed, method) over every query of ``frame`` (:func:`claims_frame`, several seeds concatenated)
    and both verdicts over the queries with a truth value."""
    from fpr.metrics.claims import figure3, regime, two_by_two

    if frame.empty:
        raise InputError("no query was evaluated by both encoders", hint="run the same queries file with both")
    judged = frame[pd.to_numeric(frame[truth], errors="coerce").notna()]
    fig = figure3(judged, truth, seed=seed, n_boot=n_boot, lower_better=lower_better)
    table = two_by_two(frame).to_dict("records")
    info = {"seeds": sorted(int(s) for s in frame["seed"].unique()), "n_queries": int(len(judged)),
            "truth": truth, "n_boot": n_boot, "bootstrap_seed": seed, "statistic": "strict PPA (VISTAR's)",
            "pairs": fig.basis}
    return ClaimsResult(table, [v.as_row() for v in fig.verdicts], info, [c.as_row() for c in fig.cells],
                        [e.as_row() for e in fig.effects], fig.decomposition(), [v.as_row() for v in fig.variants],
                        regime(frame, truth, lower_better=lower_better))


def meta_claims(run_id: str, general_run: str, *, truth: str = "drift", workspace: str | Path | None = None,
                seed: int = 0, n_boot: int = 1000, methods: Sequence[str] | None = None,
                truth_lower_better: bool = True) -> ClaimsResult:
    """``fpr meta --run R --truth drift --general G``: the claims on two stored runs of the same queries, R with the
    specialist encoder and G with a general-purpose one (e.g. the demo's ``fpr-general-v2`` run)."""
    spec_res = load_run(run_id, workspace=workspace, summary=False)
    gen_res = load_run(general_run, workspace=workspace, summary=False)
    spec, gen = spec_res.per_query, gen_res.per_query
    if methods:
        spec = _only_methods(spec, methods, run_id)
    out = encoder_claims(claims_frame(spec, gen, truth=truth), truth=truth, seed=seed, n_boot=n_boot,
                         lower_better=truth_lower_better)
    out.info.update({"run": run_id, "general_run": general_run, "specialist": spec_res.encoder,
                     "general": gen_res.encoder})
    return out
