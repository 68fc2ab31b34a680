"""The one JSON document of a run's results (``fpr.run-result/1``) and of several runs (``fpr.run-results/1``).

Every emitter builds it here: ``fpr query --format json``, ``fpr report --format json``, ``fpr export --out
F.json``, the service's run endpoints and :meth:`fpr.RunResult.to_dict`. The JSON Schema (draft 2020-12)
is the package file ``fpr/schemas/run-result-v1.json``; its version policy is in ``docs/results.md``
(adding a key keeps the version, removing or renaming one bumps it).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd

from fpr.metrics.reasons import NanCount, nan_counts

RUN_RESULT = "fpr.run-result/1"
RUN_RESULTS = "fpr.run-results/1"
SCHEMA_FILE = Path(__file__).resolve().parents[1] / "schemas" / "run-result-v1.json"


@dataclass(frozen=True)
class RunMeta:
    """What identifies a stored run: the ``run`` object of the document."""

    id: str
    gallery: str | None
    index: str | None
    index_version: str | None
    encoder: str
    scope: str | None
    queries: str | None  # the queries table the run read
    created: str | None
    settings: dict = field(default_factory=dict)  # seed, top_k, scorers, scorer_options, skip flags


def value(v: Any) -> Any:
    """A cell as JSON: NaN/NaT/None -> null, NumPy scalars -> Python, timestamps -> ISO 8601."""
    if v is None or v is pd.NaT:
        return None
    if isinstance(v, (pd.Timestamp, np.datetime64)):
        return pd.Timestamp(v).isoformat()
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, dict):
        return {str(k): value(x) for k, x in v.items()}
    if isinstance(v, (list, tuple, np.ndarray)):
        return [value(x) for x in v]
    return v


def records(df: pd.DataFrame) -> list[dict]:
    """A DataFrame's rows as JSON objects (missing values null)."""
    cols = [str(c) for c in df.columns]
    return [{c: value(v) for c, v in zip(cols, row)} for row in df.itertuples(index=False, name=None)]


def summary_frame(rows: Sequence[dict], encoder: str | None = None) -> pd.DataFrame:
    """Summary rows (:func:`fpr.metrics.summary.summarize`) as a DataFrame whose first column is ``encoder``."""
    df = pd.DataFrame(list(rows))
    if encoder is not None and "encoder" not in df.columns:
        df.insert(0, "encoder", encoder)
    if "encoder" in df.columns and df.columns[0] != "encoder":
        df = df[["encoder", *[c for c in df.columns if c != "encoder"]]]
    return df


def summary_records(summary: pd.DataFrame) -> list[dict]:
    """Summary rows as dicts, missing values None; ``map_group_mean`` only on the group ``*`` rows (as
    :func:`fpr.metrics.summary.summarize` gives it)."""
    out = records(summary)
    for r in out:
        if r.get("group") != "*":
            r.pop("map_group_mean", None)
    return out


def run_document(meta: RunMeta, summary: pd.DataFrame, per_query: pd.DataFrame, provenance: dict, *,
                 skipped: dict[str, str], sim_definition: dict[str, int],
                 rows: pd.DataFrame | None = None, aux: pd.DataFrame | None = None) -> dict:
    """The ``fpr.run-result/1`` document of one stored run. ``per_query`` gives the counts; ``rows``, when
    given, is listed as ``per_query`` (the rows ``fpr export`` writes); ``aux`` (the run's auxiliary scores),
    when given, is counted in ``nan_reasons``."""
    status = per_query["status"] if "status" in per_query else pd.Series([], dtype=object)
    n_ok = int((status == "ok").sum())
    doc = {"schema": RUN_RESULT,
           "run": {"id": meta.id, "created": meta.created, "gallery": meta.gallery, "index": meta.index,
                   "index_version": meta.index_version, "encoders": [meta.encoder], "scope": meta.scope,
                   "queries": meta.queries, "n_queries": int(len(per_query)), "n_evaluated": n_ok,
                   "n_skipped": int(len(per_query)) - n_ok, "settings": value(meta.settings)},
           "summary": summary_records(summary), "skipped": dict(skipped),
           "sim_definition": {str(k): int(v) for k, v in sim_definition.items()},
           "provenance": value(provenance), "headroom": headroom_section(per_query, meta.encoder)}
    if aux is not None:
        doc["nan_reasons"] = [c.record() for c in nan_reasons(aux)]
    if rows is not None:
        doc["per_query"] = records(rows)
    return doc


def nan_reasons(aux: pd.DataFrame | None) -> list[NanCount]:
    """Per scorer of a run's auxiliary scores: its primary metric's NaNs counted by reason phrase
    (:mod:`fpr.metrics.reasons`); a scorer this fpr does not have is counted on its ``score`` metric."""
    from fpr.scorers import SCORERS  # the scorers' primary metrics: imported when a run is summarised

    if aux is None or aux.empty:
        return []
    primary = {}
    for name in sorted(set(aux["scorer"].astype(str))):
        scorer = SCORERS.find(name)
        if scorer is not None and scorer.primary_metric:
            primary[name] = scorer.primary_metric
    return nan_counts(aux, primary)


def nan_reason_text(aux: pd.DataFrame | None) -> str | None:
    """The lines a run's summary prints for its scorers' NaNs (``copy-paste: 3 of 40 NaN (2 ...)``); None
    when no scorer has one."""
    return "\n".join(c.line() for c in nan_reasons(aux) if c.n_nan) or None


def headroom_section(per_query: pd.DataFrame, encoder: str | None) -> dict:
    """The run's ``headroom`` object: per method its AP = 1 share, the AP tie share of its within-identity pairs,
    the oracle's AP = 1 share (:func:`fpr.metrics.headroom.headroom`), the threshold and the warning lines."""
    from fpr.metrics.headroom import SATURATED, headroom, headroom_warnings

    if not {"method", "group", "identity", "ap"} <= set(per_query.columns):
        rows: list[dict] = []
    else:
        rows = headroom(per_query, encoder)
    return {"saturated_at": SATURATED, "methods": [value(r) for r in rows], "warnings": headroom_warnings(rows)}


def collection_document(runs: Sequence[dict], *, pivot: Sequence[dict] | None = None) -> dict:
    """The ``fpr.run-results/1`` document: run documents in order, their encoders, the pivot if given."""
    encoders = list(dict.fromkeys(e for d in runs for e in d["run"]["encoders"]))
    doc = {"schema": RUN_RESULTS, "runs": list(runs), "encoders": encoders}
    if pivot is not None:
        doc["pivot"] = [value(r) for r in pivot]
    return doc


__all__ = ["RUN_RESULT", "RUN_RESULTS", "RunMeta", "SCHEMA_FILE", "collection_document", "headroom_section",
           "nan_reason_text", "nan_reasons", "records", "run_document", "summary_frame", "summary_records", "value"]
