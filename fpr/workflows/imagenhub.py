"""ImagenHub's human ratings (the CIGEval paper's agreement benchmark): reading them, Spearman per task.

Layout (ImagenHub's human-evaluation release, as CIGEval's ``spear.py`` reads it): one folder per
task, ``ImagenHub_<Task>/`` (``Text-Guided_IG``, ``Text-Guided_IE``, ``Mask-Guided_IE``,
``Subject-Driven_IG``, ``Subject-Driven_IE``, ``Multi-Concept_IC``, ``Control-Guided_IG``),
holding one tab-separated file per rater, ``<Task>_rater<k>.tsv``: a ``uid`` column (the sample's
file name) and one column per model whose cells are ``[SC, PQ]`` (semantic consistency and
perceptual quality, each 0, 0.5 or 1). The human score of a sample is the mean SC over its raters
(0-1); CIGEval correlates it with its own score (the minimum of its 0-10 sub-scores, /10).

A run's queries are matched to samples by task (the queries column ``task``, fpr's task names:
``text-guided-ig``, ...), model (the query's ``method``) and ``uid`` (a queries column ``uid``,
else the query id).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from fpr.errors import InputError, NotFoundError
from fpr.metrics.correlation import spearman

FOLDER = re.compile(r"^ImagenHub_([A-Za-z]+-[A-Za-z]+_(?:IG|IE|IC))$")
RATER = re.compile(r"^(.+)_rater(\d+)\.tsv$")
LEVELS = (0.0, 0.5, 1.0)  # ImagenHub's rating scale for SC and PQ


def task_name(folder: str) -> str:
    """``ImagenHub_Subject-Driven_IG`` -> ``subject-driven-ig`` (the ``cigeval.task`` names)."""
    m = FOLDER.match(folder)
    if not m:
        raise InputError(f"'{folder}' is not an ImagenHub task folder", hint="names look like ImagenHub_Text-Guided_IG")
    return m.group(1).replace("_", "-").lower()


def _cell(text: str, where: str) -> tuple[float, float]:
    """A ``[SC, PQ]`` cell -> (sc, pq), each one of 0, 0.5, 1."""
    parts = str(text).strip().removeprefix("[").removesuffix("]").split(",")
    try:
        sc, pq = (float(p) for p in parts)
    except ValueError:
        raise InputError(f"rating '{text}' is not [SC, PQ]", where=where, hint="cells look like [1, 0.5]") from None
    if sc not in LEVELS or pq not in LEVELS:
        raise InputError(f"rating '{text}' is off ImagenHub's scale", where=where, hint="SC and PQ are 0, 0.5 or 1")
    return sc, pq


def read_rater_file(path: Path, task: str) -> pd.DataFrame:
    """One rater's file -> rows (task, model, uid, rater, sc, pq)."""
    m = RATER.match(path.name)
    if not m:
        raise InputError(f"'{path.name}' is not a rater file", where=str(path), hint="names look like <Task>_rater1.tsv")
    df = pd.read_csv(path, sep="\t", dtype=str, keep_default_na=False)
    if "uid" not in df.columns or len(df.columns) < 2:
        raise InputError("a rater file needs a 'uid' column and one column per model", where=str(path),
                         hint=f"its columns: {', '.join(df.columns)}")
    rows = []
    for i, rec in enumerate(df.to_dict("records")):
        for model in df.columns:
            if model == "uid" or rec[model] == "":
                continue
            sc, pq = _cell(rec[model], f"{path} row {i + 2} column {model}")
            rows.append((task, model, rec["uid"], int(m.group(2)), sc, pq))
    return pd.DataFrame(rows, columns=["task", "model", "uid", "rater", "sc", "pq"])


def read_imagenhub(root: str | Path) -> pd.DataFrame:
    """Every rating under ``root``: rows (task, model, uid, rater, sc, pq), sorted."""
    root = Path(root).expanduser()
    if not root.is_dir():
        raise NotFoundError("ImagenHub ratings folder not found", where=str(root))
    frames = [read_rater_file(f, task_name(d.name)) for d in sorted(root.iterdir()) if d.is_dir()
              and FOLDER.match(d.name) for f in sorted(d.glob("*_rater*.tsv"))]
    if not frames:
        raise InputError("no ImagenHub rater files found", where=str(root),
                         hint="expected ImagenHub_<Task>/<Task>_rater<k>.tsv files")
    return pd.concat(frames, ignore_index=True).sort_values(["task", "model", "uid", "rater"], ignore_index=True)


def human_scores(ratings: pd.DataFrame) -> pd.DataFrame:
    """Mean SC over raters per sample: rows (task, model, uid, human, n_raters)."""
    g = ratings.groupby(["task", "model", "uid"], sort=True)["sc"]
    return pd.DataFrame({"human": g.mean(), "n_raters": g.size()}).reset_index()


POOLED = "(pooled)"  # all of a task's models' samples in one correlation
FISHER = "(fisher-z mean)"  # the per-model correlations averaged through Fisher's z, as CIGEval's spear.py


@dataclass
class TaskCorrelation:
    task: str
    model: str  # a model, POOLED or FISHER
    metric: str
    n: int  # samples with both a value and a human score
    spearman: float

    def as_row(self) -> dict:
        return {"task": self.task, "model": self.model, "metric": self.metric, "n": self.n,
                "spearman": self.spearman}


def match_run(per_query: pd.DataFrame, humans: pd.DataFrame, where: str) -> pd.DataFrame:
    """The run's rows joined with their sample's human score (on task, model = method, uid)."""
    df = per_query.copy()
    if "task" not in df.columns:
        tasks = humans["task"].unique()
        if len(tasks) != 1:
            raise InputError(f"run {where} has no 'task' column and the ratings cover {len(tasks)} tasks",
                             hint="add a 'task' column (e.g. subject-driven-ig) to the queries table")
        df["task"] = tasks[0]
    uid = df["uid"] if "uid" in df.columns else df["query_id"]
    df["uid"] = uid.where(uid.notna() & (uid.astype(str) != ""), df["query_id"]).astype(str)
    df["task"], df["model"] = df["task"].astype(str), df["method"].astype(str)
    out = df.merge(humans, on=["task", "model", "uid"], how="inner")
    if out.empty:
        raise InputError(f"no query of run {where} matches an ImagenHub rating",
                         hint="queries match on task, method (= the model column) and uid (else the query id)")
    return out


def _rho(g: pd.DataFrame, metric: str) -> tuple[int, float]:
    v = pd.to_numeric(g[metric], errors="coerce").to_numpy(float)
    ok = np.isfinite(v)
    return int(ok.sum()), (spearman(v[ok], g["human"].to_numpy(float)[ok]) if ok.sum() >= 3 else float("nan"))


def fisher_mean(rhos: list[float]) -> float:
    """tanh of the mean Fisher z (atanh) of the finite correlations (NaN when none)."""
    r = np.asarray([x for x in rhos if np.isfinite(x)], dtype=float)
    return float(np.tanh(np.mean(np.arctanh(r)))) if len(r) else float("nan")


def per_task_spearman(joined: pd.DataFrame, metrics: list[str]) -> list[TaskCorrelation]:
    """Per task and metric: Spearman with the human score per model, over all models' samples (POOLED), and
    the per-model values' Fisher-z mean (FISHER). Samples without a finite value are left out."""
    out = []
    for task, g in joined.groupby("task", sort=True):
        for m in metrics:
            per_model = [TaskCorrelation(str(task), str(model), m, *_rho(gm, m))
                         for model, gm in g.groupby("model", sort=True)]
            out.append(TaskCorrelation(str(task), POOLED, m, *_rho(g, m)))
            out.append(TaskCorrelation(str(task), FISHER, m, sum(r.n for r in per_model),
                                       fisher_mean([r.spearman for r in per_model])))
            out += per_model
    return out


def mean_over_tasks(rows: list[TaskCorrelation]) -> list[TaskCorrelation]:
    """Per metric and way of pooling (POOLED, FISHER), the plain mean of the per-task correlations."""
    out = []
    for m in dict.fromkeys(r.metric for r in rows):
        for how in (POOLED, FISHER):
            rs = [r for r in rows if r.metric == m and r.model == how and np.isfinite(r.spearman)]
            out.append(TaskCorrelation("(mean)", how, m, sum(r.n for r in rs),
                                       float(np.mean([r.spearman for r in rs])) if rs else float("nan")))
    return out
