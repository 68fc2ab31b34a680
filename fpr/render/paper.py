"""The paper's layout of a run's results, and where identity drifted to.

A *report* is built from per-query rows (one row per query and encoder, with an
``encoder`` column) and their summaries (:func:`fpr.metrics.summary.summarize`, run
per encoder). :func:`pivot` lays them out as the paper's tables: per group and
overall (``*``), rows = methods, columns = each metric per encoder (value with its
bootstrap 95% interval where the summary gives one) plus each scorer's mean.
:func:`render` writes it as an aligned table, Markdown, LaTeX, CSV or JSON.

Drift diagnosis (:func:`drift_from_rankings`, :func:`confusion`): the identity of
each query's top-1 gallery item, and the identity it drifted towards -- the
non-relevant identity whose gallery items score highest (the best-ranked
non-relevant item of the stored top-k; a caller fills the queries whose top-k
holds no non-relevant item from the full scores with :func:`drift_from_scores`).
"""
from __future__ import annotations

import csv
import io
import json
import math
import textwrap
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import pandas as pd

from fpr.defaults import READABLE_REPORT_METRICS
from fpr.metrics.specs import DEFAULT_REPORT_METRICS, summary_labels
from fpr.metrics.summary import aux_columns, summarize, with_aux
from fpr.render.cells import clip, fit_widths, fold_columns, format_cell
from fpr.render.cells import tex_escape as _tex

# Summary metric -> label in the paper's layout.
METRIC_LABELS = summary_labels()  # declared in fpr/metrics/specs.py
DEFAULT_METRICS = DEFAULT_REPORT_METRICS
READABLE_METRICS = READABLE_REPORT_METRICS  # the terminal's and the HTML page's default: the paper's columns
FORMATS = ("table", "markdown", "latex", "csv", "json")
OVERALL = "*"


@dataclass(frozen=True)
class PivotColumn:
    key: str  # unique: "<encoder> <metric>" or "<scorer.metric>"
    label: str
    metric: str
    encoder: str | None  # None for scorer columns (one value per query whatever the encoder)


@dataclass
class Pivot:
    """Cells ``(group, method, column key) -> (value, lo, hi)``; lo/hi NaN where there is no interval."""

    groups: list[str]  # in display order, ending with "*" (overall)
    methods: list[str]
    columns: list[PivotColumn]
    cells: dict[tuple[str, str, str], tuple[float, float, float]] = field(default_factory=dict)
    n_queries: dict[tuple[str, str], int] = field(default_factory=dict)

    def value(self, group: str, method: str, key: str) -> tuple[float, float, float]:
        return self.cells.get((group, method, key), (math.nan, math.nan, math.nan))

    def records(self) -> list[dict]:
        """Long format: one record per cell (CSV and JSON)."""
        out = []
        for g in self.groups:
            for m in self.methods:
                if (g, m) not in self.n_queries:
                    continue
                for c in self.columns:
                    v, lo, hi = self.value(g, m, c.key)
                    out.append({"group": g, "method": m, "n_queries": self.n_queries[(g, m)],
                                "encoder": c.encoder or "", "metric": c.metric, "value": _num(v),
                                "lo": _num(lo), "hi": _num(hi)})
        return out


def _num(v: float) -> float | None:
    return None if v is None or not np.isfinite(v) else float(v)


def method_order(per_query: pd.DataFrame, preferred: Sequence[str] = ()) -> list[str]:
    """``preferred`` methods first (those present), then the others in order of first appearance."""
    seen = list(dict.fromkeys(per_query["method"].tolist()))
    return [m for m in preferred if m in seen] + [m for m in seen if m not in preferred]


def encoder_summaries(per_query: pd.DataFrame, aux: pd.DataFrame | None, *, seed: int = 0) -> list[dict]:
    """Summary rows per encoder (each row carries ``encoder``); ``per_query`` has an ``encoder`` column."""
    rows: list[dict] = []
    for enc in list(dict.fromkeys(per_query["encoder"].tolist())):
        part = per_query[per_query["encoder"] == enc]
        a = None
        if aux is not None and not aux.empty:
            a = aux[aux["run_id"].isin(part["run_id"].unique())] if "run_id" in aux else aux
        wide = with_aux(part, a.drop(columns=["run_id"], errors="ignore") if a is not None else None)
        for r in summarize(wide, seed=seed, aux_cols=aux_columns(a)):
            rows.append({"encoder": enc, **r})
    return rows


def scorer_columns(summary: Sequence[dict]) -> list[str]:
    """The ``scorer.metric`` columns of summary rows, sorted."""
    return sorted({k for r in summary for k in r if "." in k})


def pivot(summary: Sequence[dict], *, metrics: Sequence[str] = DEFAULT_METRICS,
          methods: Sequence[str] | None = None, encoders: Sequence[str] | None = None,
          all_scorers: bool = True) -> Pivot:
    """The paper's layout of summary rows (each with ``encoder``, ``method``, ``group``).

    ``metrics`` are retrieval metrics (``sim``, ``map``, ...: a column per encoder) and scorer selectors
    (``clip-t`` for all its metrics, ``clip-t.score`` for one); ``all_scorers`` adds every scorer column
    (the machine formats' default; the readable one shows scorers only when named)."""
    summary = list(summary)
    encoders = list(encoders or dict.fromkeys(r.get("encoder", "") for r in summary))
    methods = list(methods or dict.fromkeys(r["method"] for r in summary))
    groups = sorted({r["group"] for r in summary if r["group"] != OVERALL}) + [OVERALL]
    available = scorer_columns(summary)
    chosen = {m: [s for s in available if s == m or s.startswith(m + ".")] for m in metrics if m not in METRIC_LABELS}
    unknown = [m for m, got in chosen.items() if not got]
    if unknown:
        from fpr.errors import InputError

        raise InputError(f"unknown report metric(s) {', '.join(unknown)}",
                         hint=f"valid: {', '.join([*METRIC_LABELS, *available])}")
    metrics = [m for m in metrics if m in METRIC_LABELS]
    columns = [PivotColumn(f"{e} {m}", f"{METRIC_LABELS[m]} {e}", m, e) for e in encoders for m in metrics]
    named = list(dict.fromkeys(s for got in chosen.values() for s in got))
    scorer_cols = named + [s for s in available if all_scorers and s not in named]
    columns += [PivotColumn(s, s, s, None) for s in scorer_cols]
    p = Pivot(groups, methods, columns)
    for r in summary:
        g, m, e = r["group"], r["method"], r.get("encoder", "")
        p.n_queries[(g, m)] = max(p.n_queries.get((g, m), 0), int(r["n_queries"]))
        for metric in metrics:
            p.cells[(g, m, f"{e} {metric}")] = (_f(r.get(metric)), _f(r.get(f"{metric}_lo")), _f(r.get(f"{metric}_hi")))
        for s in scorer_cols:
            v = _f(r.get(s))
            if np.isfinite(v) and not np.isfinite(p.value(g, m, s)[0]):
                p.cells[(g, m, s)] = (v, math.nan, math.nan)
    return p


def _f(v) -> float:
    try:
        return float(v)
    except (TypeError, ValueError):
        return math.nan


def _group_title(g: str) -> str:
    return "all groups" if g == OVERALL else g


def _rows(p: Pivot, g: str, *, latex: bool = False) -> list[list[str]]:
    return [[m, str(p.n_queries[(g, m)])] + [format_cell(*p.value(g, m, c.key), latex=latex) for c in p.columns]
            for m in p.methods if (g, m) in p.n_queries]


def hidden_note(summary: Sequence[dict], p: Pivot) -> str | None:
    """One line naming what a readable pivot left out, and how to show it (None when nothing was)."""
    shown = {c.metric for c in p.columns}
    metrics = [METRIC_LABELS[m] for m in METRIC_LABELS if m not in shown]
    scorers = [s for s in scorer_columns(summary) if s not in shown]
    if not metrics and not scorers:
        return None
    parts = metrics[:]
    by_scorer = list(dict.fromkeys(s.split(".", 1)[0] for s in scorers))
    counts = {sc: sum(1 for s in scorers if s.split(".", 1)[0] == sc) for sc in by_scorer}
    parts += [f"{sc} ({n} column{'s' if n > 1 else ''})" for sc, n in counts.items()]
    example = ",".join(["sim", "map", *by_scorer[:1]])
    return f"(not shown: {', '.join(parts)}; --all shows every column, --metrics {example} chooses)"


def render(p: Pivot, fmt: str = "table", *, width: int | None = None) -> str:
    """``width`` folds an aligned table into blocks of columns, each repeating the method column."""
    if fmt not in FORMATS:
        from fpr.errors import InputError

        raise InputError(f"unknown format '{fmt}'", hint=f"valid: {', '.join(FORMATS)}")
    if fmt == "json":
        return json.dumps(p.records(), indent=2)
    if fmt == "csv":
        buf = io.StringIO()
        w = csv.DictWriter(buf, ["group", "method", "n_queries", "encoder", "metric", "value", "lo", "hi"],
                           lineterminator="\n")
        w.writeheader()
        w.writerows(p.records())
        return buf.getvalue().rstrip("\n")
    header = ["method", "n"] + [c.label for c in p.columns]
    if fmt == "latex":
        return _latex(p, header)
    out: list[str] = []
    for g in p.groups:
        rows = _rows(p, g)
        if not rows:
            continue
        if fmt == "markdown":
            out.append(f"### {_group_title(g)}\n")
            out.append("| " + " | ".join(header) + " |")
            out.append("|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|")
            out += ["| " + " | ".join(r) + " |" for r in rows]
            out.append("")
        else:
            out += [_group_title(g), _aligned(header, rows, width), ""]
    return "\n".join(out).rstrip("\n")


def _aligned(header: list[str], rows: list[list[str]], width: int | None) -> str:
    """Method left, numbers right; folded to ``width`` (blocks of columns repeating the method) when given."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    blocks = fold_columns(widths, width) if width else [list(range(len(header)))]
    out = []
    for block in blocks:
        # a method name longer than the whole width is the only cell ever cut
        ws = dict(zip(block, fit_widths([widths[i] for i in block], [widths[i] if i else 8 for i in block],
                                        width))) if width else dict(enumerate(widths))
        line = lambda cells: "  ".join(clip(cells[i], ws[i]).ljust(ws[i]) if i == 0  # noqa: E731
                                      else cells[i].rjust(ws[i]) for i in block).rstrip()
        out += [line(header), line(["-" * ws.get(i, 0) for i in range(len(header))])] + [line(r) for r in rows]
        out.append("")
    return "\n".join(out).rstrip("\n")


def _latex(p: Pivot, header: list[str]) -> str:
    """A complete ``table`` float (paste it into a paper as is); needs ``booktabs`` and ``graphicx``."""
    n = len(header)
    lines = ["% needs \\usepackage{booktabs} (the rules) and \\usepackage{graphicx} (\\resizebox)",
             "\\begin{table}[t]", "\\centering", "\\caption{Sim and mAP per method and group, mean [95\\% interval]"
             " (fpr report).}", "\\label{tab:fpr}", "\\resizebox{\\linewidth}{!}{%",
             "\\begin{tabular}{l" + "r" * (n - 1) + "}", "\\toprule",
             " & ".join(_tex(h) for h in header) + " \\\\", "\\midrule"]
    first = True
    for g in p.groups:
        rows = _rows(p, g, latex=True)
        if not rows:
            continue
        if not first:
            lines.append("\\midrule")
        first = False
        lines.append(f"\\multicolumn{{{n}}}{{l}}{{\\textit{{{_tex(_group_title(g))}}}}} \\\\")
        lines += [" & ".join([_tex(r[0]), r[1], *r[2:]]) + " \\\\" for r in rows]
    lines += ["\\bottomrule", "\\end{tabular}}", "\\end{table}"]
    return "\n".join(lines)


# --------------------------------------------------------------------------- Sim vs mAP

MIN_BAR = 20  # characters a bar needs to be read beside its numbers
ORACLE = "oracle"  # the method `fpr query --oracle` adds: the reference images as queries (the ceiling)
CHART_METRICS = (("sim", "Sim"), ("map", "mAP"))


@dataclass(frozen=True)
class Axis:
    """A value scale ``[lo, hi]`` drawn over ``width`` characters."""

    lo: float
    hi: float
    width: int

    def position(self, v: float) -> float:
        """``v`` in characters from the left end (0 to ``width``)."""
        return (v - self.lo) / (self.hi - self.lo) * self.width

    def index(self, v: float) -> int:
        """The character that holds ``v`` (the last one holds ``hi``)."""
        return min(self.width - 1, max(0, int(self.position(v))))


def chart_axis(values: Sequence[float], width: int) -> Axis:
    """0 to 1 (mAP's range, and Sim's when no value is negative); down to the next tenth below a negative
    value (a cosine can be)."""
    finite = [v for v in values if np.isfinite(v)]
    lo = min(0.0, math.floor(min(finite, default=0.0) * 10) / 10)
    return Axis(lo, max(1.0, max(finite, default=1.0)), width)


def bar(v: float, lo: float, hi: float, ref: float, axis: Axis) -> str:
    """``#`` from 0 to the mean, ``[`` and ``]`` at the interval's ends, ``|`` at the reference (oracle)."""
    chars = [" "] * axis.width
    if np.isfinite(v):  # the characters whose middle lies between 0 and the mean
        a, b = sorted((axis.position(0.0), axis.position(v)))
        for k in range(axis.width):
            if a < k + 0.5 < b:
                chars[k] = "#"
    if np.isfinite(lo) and np.isfinite(hi):
        i, j = axis.index(lo), axis.index(hi)
        if i == j:  # an interval inside one character still shows both ends
            i, j = (i, i + 1) if i + 1 < axis.width else (i - 1, i)
        chars[i], chars[j] = "[", "]"
    if np.isfinite(ref):
        chars[axis.index(ref)] = "|"
    return "".join(chars).rstrip()


def sim_map_chart(summary: Sequence[dict], *, methods: Sequence[str] | None = None,
                  encoders: Sequence[str] | None = None, group: str = OVERALL, width: int = 100) -> str:
    """Sim and mAP per method as paired bars with their 95% intervals, the oracle as a reference mark, one
    chart per encoder (issue #23: does Sim tell the methods apart as mAP does?)."""
    summary = [r for r in summary if r["group"] == group]
    encoders = list(encoders or dict.fromkeys(r.get("encoder", "") for r in summary))
    methods = list(methods or dict.fromkeys(r["method"] for r in summary))
    cell = {(r.get("encoder", ""), r["method"]): r for r in summary}
    name_w = max(len(m) for m in methods) if methods else 6
    texts = {(e, m, key): f"{label} {format_cell(_f(r.get(key)), _f(r.get(f'{key}_lo')), _f(r.get(f'{key}_hi')))}"
             for (e, m), r in cell.items() for key, label in CHART_METRICS}
    text_w = max(map(len, texts.values()), default=0)
    blocks = []
    for e in encoders:
        rows = [(m, cell[(e, m)]) for m in methods if (e, m) in cell]
        if not rows:
            continue
        vals = [_f(r.get(k)) for _, r in rows for key, _ in CHART_METRICS for k in (key, f"{key}_lo", f"{key}_hi")]
        inline = width - name_w - text_w - 4 >= MIN_BAR  # else each bar on a line of its own, under its numbers
        axis = chart_axis(vals, width - name_w - text_w - 4 if inline else max(MIN_BAR, width - 4))
        oracle = cell.get((e, ORACLE), {})
        refs = {key: _f(oracle.get(key)) for key, _ in CHART_METRICS}
        ref_note = (f"| oracle ({', '.join(f'{lab} {format_cell(refs[k])}' for k, lab in CHART_METRICS)})"
                    if oracle else f"no '{ORACLE}' row to mark (fpr query --oracle adds it)")
        lines = textwrap.wrap(f"Sim vs mAP, {_group_title(group)}, encoder {e}: # mean, [ ] 95% interval, "
                              f"{ref_note}", width, subsequent_indent="  ", break_on_hyphens=False)
        pad = " " * (name_w + text_w + 4 if inline else 4)
        lines.append(pad + _ticks(axis))
        for m, r in rows:
            for k, (key, label) in enumerate(CHART_METRICS):
                v, lo, hi = _f(r.get(key)), _f(r.get(f"{key}_lo")), _f(r.get(f"{key}_hi"))
                drawn = bar(v, lo, hi, refs[key], axis)
                if inline:
                    lines.append(f"{(m if k == 0 else ''):<{name_w}}  {texts[(e, m, key)]:<{text_w}}  {drawn}".rstrip())
                else:
                    lines += [(f"{m} " if k == 0 else "  ") + texts[(e, m, key)], f"    {drawn}".rstrip()]
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def _ticks(axis: Axis) -> str:
    """The scale's ends and its quarter marks, each label starting at its own character."""
    chars = [" "] * (axis.width + 4)
    step = 0.25 if axis.hi - axis.lo <= 1.5 else 0.5
    t = math.ceil(axis.lo / step) * step
    while t <= axis.hi + 1e-9:
        label = f"{t:g}"
        k = axis.index(t) if t < axis.hi else axis.width - len(label)
        if all(c == " " for c in chars[max(0, k - 1):k + len(label)]):
            chars[k:k + len(label)] = label
        t += step
    return "".join(chars).rstrip()


# --------------------------------------------------------------------------- drift diagnosis

DRIFT_COLUMNS = ("top1_identity", "drift_identity", "drift_score", "drift_source")


def drift_from_rankings(per_query: pd.DataFrame, rankings: pd.DataFrame, item_identity: dict) -> pd.DataFrame:
    """Per (run_id, query_id): top-1 identity, drifted-to identity and its best score, from the stored top-k.

    ``rankings``: run_id, query_id, rank, item_id, score, relevant; ``item_identity``:
    (run_id, item_id) -> identity. ``drift_source`` is ``top-k`` when the top-k held a
    non-relevant item, else empty (the caller may fill it from the full scores).
    """
    keys = per_query[["run_id", "query_id"]].copy()
    out = keys.assign(top1_identity=None, drift_identity=None, drift_score=np.nan, drift_source=None)
    if rankings.empty:
        return out
    r = rankings.sort_values(["run_id", "query_id", "rank"])
    ident = [item_identity.get((run, int(i))) for run, i in zip(r["run_id"], r["item_id"])]
    r = r.assign(item_identity=ident)
    top1 = r.groupby(["run_id", "query_id"], sort=False).first()["item_identity"]
    nonrel = r[~r["relevant"].astype(bool)].groupby(["run_id", "query_id"], sort=False).first()
    idx = pd.MultiIndex.from_frame(keys)
    as_text = lambda s: np.array([v if isinstance(v, str) else None for v in s], dtype=object)  # noqa: E731
    out["top1_identity"] = as_text(top1.reindex(idx))
    out["drift_identity"] = as_text(nonrel["item_identity"].reindex(idx))
    out["drift_score"] = nonrel["score"].reindex(idx).to_numpy(dtype=np.float64)
    out["drift_source"] = np.array(["top-k" if isinstance(v, str) else None for v in out["drift_identity"]],
                                   dtype=object)
    return out


def drift_from_scores(scores: np.ndarray, relevant: np.ndarray, in_scope: np.ndarray,
                      identities: np.ndarray) -> tuple[list[str | None], np.ndarray]:
    """From full (Q, G) scores: per query the identity of the best-scoring non-relevant item in scope."""
    masked = np.where(in_scope & ~relevant, scores, -np.inf)
    best = masked.argmax(axis=1) if masked.shape[1] else np.zeros(len(masked), dtype=np.int64)
    vals = masked[np.arange(len(masked)), best] if masked.shape[1] else np.full(len(masked), -np.inf)
    ids = [str(identities[b]) if np.isfinite(v) else None for b, v in zip(best, vals)]
    return ids, np.where(np.isfinite(vals), vals, np.nan)


def confusion(per_query: pd.DataFrame) -> list[dict]:
    """Long confusion counts per (encoder, group): intended identity x identity of the top-1 item."""
    df = per_query[(per_query["status"] == "ok") & per_query["top1_identity"].notna()]
    counts = df.groupby(["encoder", "group", "identity", "top1_identity"], sort=True).size()
    return [{"encoder": e, "group": g, "identity": i, "top1_identity": t, "n": int(n)}
            for (e, g, i, t), n in counts.items()]


def confusion_matrices(per_query: pd.DataFrame) -> list[tuple[str, str, pd.DataFrame]]:
    """(encoder, group, matrix) with rows = intended identity, columns = top-1 identity, cells = counts."""
    out = []
    df = pd.DataFrame(confusion(per_query))
    if df.empty:
        return out
    for (e, g), part in df.groupby(["encoder", "group"], sort=True):
        idents = sorted(set(part["identity"]) | set(part["top1_identity"]))
        m = part.pivot_table(index="identity", columns="top1_identity", values="n", aggfunc="sum", fill_value=0)
        rows = sorted(part["identity"].unique())
        out.append((e, g, m.reindex(index=rows, columns=idents, fill_value=0).astype(int)))
    return out


def render_confusion(per_query: pd.DataFrame, fmt: str = "table") -> str:
    if fmt in ("json", "csv"):
        recs = confusion(per_query)
        if fmt == "json":
            return json.dumps(recs, indent=2)
        buf = io.StringIO()
        w = csv.DictWriter(buf, ["encoder", "group", "identity", "top1_identity", "n"], lineterminator="\n")
        w.writeheader()
        w.writerows(recs)
        return buf.getvalue().rstrip("\n")
    blocks = []
    for e, g, m in confusion_matrices(per_query):
        cols = [str(c) for c in m.columns]
        head = ["intended \\ top-1"] + cols
        rows = [[str(i)] + [str(v) if v else "." for v in m.loc[i]] for i in m.index]
        widths = [max(len(h), *(len(r[k]) for r in rows)) for k, h in enumerate(head)]
        fmt_row = lambda cells: "  ".join(c.ljust(w) if k == 0 else c.rjust(w)  # noqa: E731
                                          for k, (c, w) in enumerate(zip(cells, widths))).rstrip()
        blocks.append("\n".join([f"{g}  (encoder {e})", fmt_row(head), *(fmt_row(r) for r in rows)]))
    return "\n\n".join(blocks) if blocks else "(no evaluated queries with rankings)"
