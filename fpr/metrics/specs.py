"""The per-query metrics, declared once.

A per-query metric is one :class:`MetricSpec` in :data:`PER_QUERY_METRICS` (plus an
``AddColumn`` migration in ``fpr/store/schema.py`` for workspaces that predate it).
Everything else derives from the declaration: the ``query_results`` column and its
SQL type, the pipeline's per-block computation (``compute``), summary rows and which
of them carry a bootstrap interval, keep-rule names, agreement analyses (``fpr meta``
uses ``higher_is_better``), report and CLI headers (``label``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from fpr.defaults import DEFAULT_REPORT_METRICS  # re-exported: declared where the CLI reads it cheaply

if TYPE_CHECKING:  # declarations only: the store's schema reads them, and `fpr runs` starts without NumPy
    import numpy as np

    from fpr.metrics.ranking import RetrievalMetrics

# compute(metrics of a block, gallery items in the queries' scope) -> (Q,) values
ComputeFn = Callable[["RetrievalMetrics", int], "np.ndarray"]


@dataclass(frozen=True)
class MetricSpec:
    """One per-query value: where it is stored, how it is computed and how it is shown."""

    column: str  # column of ``query_results``
    description: str
    label: str  # header in tables and reports
    compute: ComputeFn | None  # from the ranking engine's output; None: computed by its own pipeline step
    summary: str | None = None  # name in summary rows (e.g. "map"); None: not averaged
    summary_label: str | None = None  # header of the summary in reports (e.g. "mAP"); None: ``label``
    rule: str | None = None  # name in a filter keep-rule (e.g. "top1"); None: not usable there
    integer: bool = False  # exported and filtered as an integer
    interval: bool = False  # summary rows carry a bootstrap 95% interval
    higher_is_better: bool = True  # the direction agreement statistics assume
    sql_type: str = "DOUBLE"
    # the workspace schema version that added its column: 1 for fpr 0.1.0's; a later one is appended to
    # ``query_results`` by an ``AddColumn`` migration, so it is declared after the table's other columns
    schema_version: int = 1


def _cmc(k: int) -> ComputeFn:
    return lambda m, n_scope: m.cmc(k)


def _n_scope(m: RetrievalMetrics, n_scope: int) -> np.ndarray:
    import numpy as np  # called per block by the pipeline, which has NumPy loaded already

    return np.full(len(m.ap), n_scope)


PER_QUERY_METRICS: tuple[MetricSpec, ...] = (
    MetricSpec("ap", "average precision of the query against the gallery (0..1)", "AP",
               lambda m, n_scope: m.ap, summary="map", summary_label="mAP", rule="ap", interval=True),
    MetricSpec("first_hit_rank", "rank of the first gallery image of the identity (1 = best)", "first hit",
               lambda m, n_scope: m.first_hit_rank, rule="first_hit_rank", integer=True, higher_is_better=False,
               sql_type="INTEGER"),
    MetricSpec("last_hit_rank", "rank of the last gallery image of the identity", "last hit",
               lambda m, n_scope: m.last_hit_rank, integer=True, higher_is_better=False, sql_type="INTEGER"),
    MetricSpec("n_relevant", "number of gallery images of the identity in scope", "relevant",
               lambda m, n_scope: m.n_relevant, rule="n_relevant", integer=True, sql_type="INTEGER"),
    MetricSpec("n_scope", "gallery images in the query's scope", "scope",
               _n_scope, integer=True, sql_type="INTEGER"),
    MetricSpec("cmc1", "1 if the first-ranked gallery image has the query's identity (CMC@1)", "CMC@1",
               _cmc(1), summary="cmc@1", rule="top1", integer=True),
    MetricSpec("cmc5", "1 if an image of the identity is within the top 5 (CMC@5)", "CMC@5",
               _cmc(5), summary="cmc@5", rule="top5", integer=True),
    MetricSpec("cmc10", "1 if an image of the identity is within the top 10 (CMC@10)", "CMC@10",
               _cmc(10), summary="cmc@10", rule="top10", integer=True),
    MetricSpec("inp", "inverse negative penalty: n_relevant / rank of the last relevant image", "INP",
               lambda m, n_scope: m.inp, summary="minp", summary_label="mINP", rule="inp"),
    MetricSpec("sim", "mean cosine similarity to the query's Sim references (see sim_source)", "Sim",
               None, summary="sim", rule="sim", interval=True),
    MetricSpec("top_margin", "top margin: mean score of the identity's gallery images minus the best impostor's "
                             "(fpr.metrics.top_margin; not AP)", "top margin",
               lambda m, n_scope: m.top_margin, summary="top_margin", summary_label="top margin",
               rule="top_margin", interval=True, schema_version=4),
    MetricSpec("ap10", "AP@10: mean precision at the ranks of the identity's gallery images within the top 10 "
                       "(torchmetrics' RetrievalMAP top_k=10; 0 when none is; fpr.metrics.ranking)", "AP@10",
               lambda m, n_scope: m.ap_at_k, summary="map@10", summary_label="MAP@10", rule="ap10", schema_version=5),
    MetricSpec("r_precision", "R-precision: share of the top R that has the identity, R = its gallery images in "
                              "scope (fpr.metrics.ranking)", "R-precision",
               lambda m, n_scope: m.r_precision, summary="r_precision", summary_label="R-precision",
               rule="r_precision", schema_version=5),
)


def ranking_metrics() -> tuple[MetricSpec, ...]:
    """The metrics the ranking engine computes per block of queries."""
    return tuple(m for m in PER_QUERY_METRICS if m.compute is not None)


def metric(column: str) -> MetricSpec:
    for m in PER_QUERY_METRICS:
        if m.column == column:
            return m
    raise KeyError(f"no per-query metric {column!r}; declared: {', '.join(m.column for m in PER_QUERY_METRICS)}")


def summary_columns() -> dict[str, str]:
    """Summary name -> per-query column."""
    return {m.summary: m.column for m in PER_QUERY_METRICS if m.summary}


def interval_summaries() -> tuple[str, ...]:
    """Summary names that carry a bootstrap 95% interval."""
    return tuple(m.summary for m in PER_QUERY_METRICS if m.summary and m.interval)


def summary_labels() -> dict[str, str]:
    """Summary name -> its header in reports (e.g. ``map`` -> ``mAP``)."""
    return {m.summary: m.summary_label or m.label for m in PER_QUERY_METRICS if m.summary}


def summary_row_columns() -> list[str]:
    """The metric columns of a summary row, with ``_lo``/``_hi`` after those that carry an interval."""
    out: list[str] = []
    for m in PER_QUERY_METRICS:
        if m.summary:
            out += [m.summary, f"{m.summary}_lo", f"{m.summary}_hi"] if m.interval else [m.summary]
    return out


def rule_columns() -> dict[str, str]:
    """Keep-rule name -> per-query column."""
    return {m.rule: m.column for m in PER_QUERY_METRICS if m.rule}


__all__ = ["DEFAULT_REPORT_METRICS", "MetricSpec", "PER_QUERY_METRICS", "interval_summaries", "metric",
           "ranking_metrics", "rule_columns", "summary_columns", "summary_labels", "summary_row_columns"]
