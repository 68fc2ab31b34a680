"""The self-contained HTML report: one file that opens offline.

Every image is a small JPEG thumbnail embedded once as a base64 ``data:`` URL in a
JSON table; cards name images by number and a few lines of inline JavaScript set
the sources (eagerly for small reports, as cards scroll into view for large ones,
so a report of thousands of queries opens fast). A Content-Security-Policy allows
nothing but inline script, inline style and ``data:`` images: the page cannot reach
the network even by mistake.

Sections: the summary pivot (:mod:`fpr.render.paper`), plots per group (mean with
its 95% interval per method and encoder, inline SVG), the drift diagnosis
(per group a confusion matrix of intended identity x identity of the top-1 item),
and one card per query and encoder, worst AP first, filterable by method, group
and encoder.
"""
from __future__ import annotations

import base64
import html
import io
import json
import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pandas as pd

from fpr.errors import FprError
from fpr.galleries.world import COPY_METHODS
from fpr.images import load_rgb
from fpr.render.cells import format_cell, interval_footnote
from fpr.render.paper import CHART_METRICS, ORACLE, OVERALL, Pivot, confusion_matrices

EAGER_LIMIT = 200  # cards whose images load at once; beyond, images load as cards come into view
# Reference rows rather than methods under test: their cards come after, collapsed (the oracle, and the
# built-in world's generic individual and copy-like methods).
DEFAULT_CONTROLS = (ORACLE, "generic", *COPY_METHODS)
EVIDENCE_CAPTION = "evidence: green for, magenta against"  # fpr.render.overlay's two colours
PALETTE = ("#3b6fb6", "#d9822b", "#3a9a5b", "#b6443b", "#7a5cb0", "#8c6d46")


def thumbnail(path: str, size: int = 96, quality: int = 70) -> str | None:
    """A ``data:image/jpeg;base64`` URL of the image shrunk to fit ``size``; None when unreadable."""
    try:
        im = load_rgb(path)
    except (FprError, OSError):
        return None
    im.thumbnail((size, size))
    buf = io.BytesIO()
    im.save(buf, "JPEG", quality=quality, optimize=True)
    return "data:image/jpeg;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


class _Images:
    """Each distinct path embedded once; cards refer to it by number."""

    def __init__(self, size: int):
        self.size = size
        self.index: dict[str, int] = {}
        self.urls: list[str | None] = []

    def ref(self, path: str | None) -> int | None:
        if not path:
            return None
        if path not in self.index:
            self.index[path] = len(self.urls)
            self.urls.append(thumbnail(path, self.size))
        i = self.index[path]
        return i if self.urls[i] is not None else None


def _e(v) -> str:
    return html.escape("" if v is None else str(v), quote=True)


def _fmt(v, digits: int = 3) -> str:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return "-"
    return f"{f:.{digits}f}" if math.isfinite(f) else "-"


def _img(images: _Images, path: str | None, caption: str, cls: str = "") -> str:
    i = images.ref(path)
    if i is not None:
        pic = f'<img data-i="{i}" alt="{_e(caption)}">'
    else:  # the path says which file to restore (moved, deleted or unreadable since the run)
        pic = (f'<div class="missing" title="{_e(path)}">missing<br><code>{_e(path)}</code></div>' if path
               else '<div class="missing">missing</div>')
    return f'<figure class="{cls}">{pic}<figcaption>{caption}</figcaption></figure>'


# --------------------------------------------------------------------------- sections

def _words(label: str) -> str:
    """A header that may break between words, never inside one (``fpr-world-v3``, ``drift-0.25``)."""
    return " ".join(f'<span class="nw">{_e(w)}</span>' for w in label.split(" "))


def _number(v: float, lo: float, hi: float) -> str:
    """A pivot cell: the mean, then its interval (on a line of its own on a narrow screen)."""
    text = format_cell(v, lo, hi)
    mean, _, interval = text.partition(" ")
    return _e(mean) + (f'<span class="iv"> {_e(interval)}</span>' if interval else "")


def pivot_html(p: Pivot) -> str:
    """A table per group; each scrolls inside its own box on a narrow screen (the page never does)."""
    head = "".join(f"<th>{_words(c.label)}</th>" for c in p.columns)
    parts = []
    for g in p.groups:
        rows = [m for m in p.methods if (g, m) in p.n_queries]
        if not rows:
            continue
        body = "".join(
            f'<tr><td class="method">{_e(m)}</td><td>{p.n_queries[(g, m)]}</td>'
            + "".join(f"<td>{_number(*p.value(g, m, c.key))}</td>" for c in p.columns) + "</tr>"
            for m in rows)
        title = "all groups" if g == OVERALL else g
        parts.append(f'<h3>{_e(title)}</h3><div class="scroll"><table class="pivot"><tr><th>method</th><th>n</th>'
                     f"{head}</tr>{body}</table></div>")
    return "".join(parts)


@dataclass(frozen=True)
class Bar:
    """One bar of a chart: mean, 95% interval (NaN: none), colour and the series it belongs to."""

    value: float
    lo: float
    hi: float
    series: int
    tip: str


@dataclass(frozen=True)
class Reference:
    """A dashed vertical line across a chart (the oracle's value), in its series' colour."""

    value: float
    series: int
    label: str


TICK_STEP = 0.25  # 0, 0.25, 0.5, 0.75, 1: more than the two ends, few enough to read at 390 px
CHAR_PX = 6.2  # the mean width of a character of the 11 px labels (the legend's spacing)
_PX = {**dict.fromkeys("mwMW@%&", 10.0), **dict.fromkeys("ijlft.,:;|!'()[]I ", 4.0)}  # 11 px glyphs' widths, at most


def label_width(names: Sequence[str]) -> int:
    """The label column: its longest name at the glyphs' widest (at least 4 characters), + 8 px; sized by the mean
    width it cut first letters off (`ew-scene@0.25`). Labels start at the left edge: never off the chart."""
    return int(8 + max([28.0] + [sum(_PX.get(c, 8.0 if c.isupper() else 7.0) for c in n) for n in names]))


def bar_chart(title: str, axis_label: str, series: Sequence[str], rows: Sequence[tuple[str, Sequence[Bar]]],
              refs: Sequence[Reference] = ()) -> str:
    """Horizontal bars (mean) with whiskers (95% interval), one colour per series, dashed reference lines,
    a title, a legend, ticks every :data:`TICK_STEP` and a labelled value axis; scales to its box."""
    vals = [v for _, bars in rows for b in bars for v in (b.value, b.lo, b.hi)] + [r.value for r in refs]
    finite = [float(v) for v in vals if np.isfinite(v)]
    lo_axis = min(0.0, math.floor(min(finite, default=0.0) / TICK_STEP) * TICK_STEP)
    hi_axis = max(1.0, math.ceil(max(finite, default=1.0) / TICK_STEP) * TICK_STEP)
    bar_h = 9
    label_w = label_width([m for m, _ in rows])
    plot_w = 300
    top = 38  # title and legend
    row_h = bar_h * max(1, len(series)) + 6
    bottom = top + row_h * len(rows)
    width, height = label_w + plot_w + 16, bottom + 34

    def x(v: float) -> float:
        return label_w + (float(v) - lo_axis) / (hi_axis - lo_axis) * plot_w

    items = [f'<text x="4" y="14" class="t">{_e(title)}</text>']
    lx = 4.0
    for k, name in enumerate(series):
        items.append(f'<rect x="{lx:.1f}" y="21" width="9" height="9" fill="{PALETTE[k % len(PALETTE)]}"/>'
                     f'<text x="{lx + 12:.1f}" y="29" class="s">{_e(name)}</text>')
        lx += 12 + CHAR_PX * len(name) + 10
    for r in refs:
        if np.isfinite(r.value):
            items.append(f'<line x1="{x(r.value):.1f}" y1="{top - 4}" x2="{x(r.value):.1f}" y2="{bottom}" '
                         f'class="ref" stroke="{PALETTE[r.series % len(PALETTE)]}"><title>{_e(r.label)}</title>'
                         "</line>")
    k = 0
    while lo_axis + k * TICK_STEP <= hi_axis + 1e-9:
        t = lo_axis + k * TICK_STEP
        items.append(f'<line x1="{x(t):.1f}" y1="{top - 2}" x2="{x(t):.1f}" y2="{bottom + 3}" class="grid"/>'
                     f'<text x="{x(t):.1f}" y="{bottom + 14}" class="s" text-anchor="middle">{t:g}</text>')
        k += 1
    items.append(f'<text x="{label_w + plot_w / 2:.1f}" y="{height - 4}" class="s" text-anchor="middle">'
                 f"{_e(axis_label)}</text>")
    for mi, (method, bars) in enumerate(rows):
        y0 = top + mi * row_h
        items.append(f'<text x="4" y="{y0 + row_h / 2 + 3:.1f}" class="s">{_e(method)}</text>')
        for b in bars:
            if not np.isfinite(b.value):
                continue
            y = y0 + 3 + b.series * bar_h
            a, z = sorted((x(0), x(b.value)))
            items.append(f'<rect x="{a:.1f}" y="{y + 1}" width="{z - a:.1f}" height="{bar_h - 2}" '
                         f'fill="{PALETTE[b.series % len(PALETTE)]}"><title>{_e(b.tip)}</title></rect>')
            if np.isfinite(b.lo) and np.isfinite(b.hi):
                yc = y + bar_h / 2
                items.append(f'<path d="M{x(b.lo):.1f} {yc:.1f}H{x(b.hi):.1f}M{x(b.lo):.1f} {yc - 3:.1f}V'
                             f'{yc + 3:.1f}M{x(b.hi):.1f} {yc - 3:.1f}V{yc + 3:.1f}" class="ci"/>')
    return (f'<svg viewBox="0 0 {width} {height}" width="{width}" height="{height}" role="img" '
            f'aria-label="{_e(title)}"><title>{_e(title)}</title>{"".join(items)}</svg>')


def _stat(r: dict | None, metric: str) -> tuple[float, float, float]:
    r = r or {}
    return tuple(_num(r.get(k)) for k in (metric, f"{metric}_lo", f"{metric}_hi"))  # type: ignore[return-value]


def _num(v) -> float:
    try:
        return float(v)
    except (TypeError, ValueError):
        return math.nan


def plots_svg(summary: Sequence[dict], metrics: Sequence[tuple[str, str]] = (("map", "mAP"), ("sim", "Sim")),
              methods: Sequence[str] | None = None) -> str:
    """Per group and metric, a bar per method and encoder with its 95% interval; the oracle's value per
    encoder as a dashed line."""
    encoders = list(dict.fromkeys(r.get("encoder", "") for r in summary))
    methods = list(methods or dict.fromkeys(r["method"] for r in summary))
    groups = sorted({r["group"] for r in summary if r["group"] != OVERALL}) + [OVERALL]
    cell = {(r.get("encoder", ""), r["method"], r["group"]): r for r in summary}
    out = ['<div class="plots">']
    for g in groups:
        for metric, label in metrics:
            rows = []
            for m in methods:
                bars = []
                for k, e in enumerate(encoders):
                    v, lo, hi = _stat(cell.get((e, m, g)), metric)
                    bars.append(Bar(v, lo, hi, k, f"{m} · {e} · {label} {format_cell(v, lo, hi)}"))
                if any(np.isfinite(b.value) for b in bars):
                    rows.append((m, bars))
            refs = [Reference(_stat(cell.get((e, ORACLE, g)), metric)[0], k, f"oracle {label} ({e})")
                    for k, e in enumerate(encoders)]
            title = f"{label} per method · {'all groups' if g == OVERALL else g}"
            out.append(bar_chart(title, f"{label}: mean and 95% interval; dashed: oracle", encoders, rows, refs))
    out.append("</div>")
    return "".join(out)


def sim_map_svg(summary: Sequence[dict], methods: Sequence[str] | None = None, group: str = OVERALL) -> str:
    """Sim vs mAP per method, one chart per encoder: paired bars with 95% intervals, the oracle's Sim and
    mAP as dashed reference lines (issue #23: does Sim separate the methods as mAP does?)."""
    encoders = list(dict.fromkeys(r.get("encoder", "") for r in summary))
    methods = list(methods or dict.fromkeys(r["method"] for r in summary))
    cell = {(r.get("encoder", ""), r["method"]): r for r in summary if r["group"] == group}
    out = ['<div class="plots">']
    for e in encoders:
        rows = []
        for m in methods:
            if (e, m) not in cell:
                continue
            bars = []
            for k, (metric, label) in enumerate(CHART_METRICS):
                v, lo, hi = _stat(cell[(e, m)], metric)
                bars.append(Bar(v, lo, hi, k, f"{m} · {label} {format_cell(v, lo, hi)}"))
            rows.append((m, bars))
        oracle = cell.get((e, ORACLE))
        refs = [Reference(_stat(oracle, metric)[0], k, f"oracle {label}")
                for k, (metric, label) in enumerate(CHART_METRICS)] if oracle else []
        title = f"Sim vs mAP · {e} · {'all groups' if group == OVERALL else group}"
        note = "dashed: oracle" if oracle else "no oracle row (fpr query --oracle)"
        out.append(bar_chart(title, f"mean and 95% interval; {note}", [lab for _, lab in CHART_METRICS], rows,
                             refs))
    out.append("</div>")
    return "".join(out)


def confusion_html(per_query: pd.DataFrame) -> str:
    parts = []
    for e, g, m in confusion_matrices(per_query):
        head = "".join(f"<th>{_e(c)}</th>" for c in m.columns)
        body = "".join(
            f"<tr><th>{_e(i)}</th>" + "".join(
                f'<td class="{"diag" if c == i else ("off" if v else "")}">{v if v else ""}</td>'
                for c, v in zip(m.columns, m.loc[i])) + "</tr>" for i in m.index)
        parts.append(f'<div class="conf"><h4>{_e(g)} <small>encoder {_e(e)}</small></h4><div class="scroll"><table>'
                     f'<tr><th>intended \\ top-1</th>{head}</tr>{body}</table></div></div>')
    return "".join(parts) or "<p>No evaluated query has stored rankings.</p>"


def _references(row, refs_by_key: dict) -> list[str]:
    given = [p for p in str(row.get("reference_paths") or "").split(";") if p]
    return given or refs_by_key.get((row["run_id"], row["group"], row["identity"]), [])


def cards_html(per_query: pd.DataFrame, aux: pd.DataFrame, rankings: pd.DataFrame, items: dict, images: _Images,
               *, top_k: int = 10, max_refs: int = 4, overlays: dict | None = None) -> tuple[str, int]:
    """One card per row; ``overlays``: (run_id, query_id) -> the evidence overlay PNG (``fpr explain``), shown
    beside the query."""
    overlays = overlays or {}
    refs_by_key: dict = {}
    for rid, its in items.items():
        for it in its.values():
            if it.role == "reference":
                refs_by_key.setdefault((rid, it.group, it.identity), []).append(it.path)
    scores: dict = {}
    for r in aux.itertuples(index=False):
        scores.setdefault((r.run_id, r.query_id), []).append((f"{r.scorer}.{r.metric}", r.value, r.note))
    ranks = {k: g for k, g in rankings[rankings["rank"] <= top_k].groupby(["run_id", "query_id"], sort=False)}
    df = per_query.assign(_ap=pd.to_numeric(per_query["ap"], errors="coerce"))
    df = df.sort_values(["_ap", "run_id", "row_number"], na_position="last", kind="mergesort")
    out = []
    for row in df.to_dict("records"):
        rid, qid = row["run_id"], row["query_id"]
        flags = []
        if row["status"] != "ok":
            flags.append(row["status"])
        top1, drift = row.get("top1_identity"), row.get("drift_identity")
        if row["status"] == "ok" and isinstance(top1, str) and top1 != row["identity"]:
            flags.append(f"top-1 is {top1}")
        vals = [f'<span class="m">AP <b>{_fmt(row["ap"])}</b></span>', f'<span class="m">Sim <b>{_fmt(row["sim"])}</b></span>']
        for name, v, note in scores.get((rid, qid), []):
            vals.append(f'<span class="m" title="{_e(note or "")}">{_e(name)} <b>{_fmt(v)}</b></span>')
            if note and not (isinstance(v, float) and math.isfinite(v)):
                flags.append(f"{name}: {note}")
        figs = [_img(images, row["path"], "query", "q")]
        if (rid, qid) in overlays:  # fpr explain's map: green for the identity, magenta against
            figs.append(_img(images, str(overlays[(rid, qid)]), EVIDENCE_CAPTION, "ev"))
        figs += [_img(images, p, "reference", "ref") for p in _references(row, refs_by_key)[:max_refs]]
        retrieved = []
        g = ranks.get((rid, qid))
        if g is not None:
            its = items.get(rid, {})
            for r in g.itertuples(index=False):
                it = its.get(int(r.item_id))
                ident = it.identity if it else f"item {r.item_id}"
                mark = "rel" if r.relevant else "non"
                retrieved.append(_img(images, it.path if it else None,
                                      f'#{r.rank} {_e(ident)}{" ✓" if r.relevant else ""}<br>{r.score:.3f}', mark))
        drift_line = ""
        if isinstance(drift, str) and drift:
            drift_line = (f'<div class="drift">drifted towards <b>{_e(drift)}</b> (best other identity, score '
                          f'{_fmt(row.get("drift_score"))}, from {_e(row.get("drift_source"))})</div>')
        flag_html = "".join(f'<span class="flag">{_e(f)}</span>' for f in flags)
        out.append(
            f'<div class="card" data-method="{_e(row["method"])}" data-group="{_e(row["group"])}" '
            f'data-encoder="{_e(row["encoder"])}" data-ap="{_fmt(row["ap"], 6)}">'
            f'<div class="head"><b>{_e(qid)}</b> {_e(row["method"])} · {_e(row["group"])} · '
            f'<i>{_e(row["identity"])}</i> · {_e(row["encoder"])} {"".join(vals)} {flag_html}</div>'
            f'<div class="imgs">{"".join(figs)}<span class="sep"></span>{"".join(retrieved)}</div>{drift_line}</div>')
    return "".join(out), len(out)


# --------------------------------------------------------------------------- the page

CSS = """.warn{color:#a33;font-weight:600}

body{font:13px system-ui,sans-serif;margin:16px;color:#222;background:#fafafa;overflow-wrap:anywhere}
h1{font-size:20px}h2{font-size:16px;margin-top:24px;border-bottom:1px solid #ccc}h3{font-size:14px;margin:10px 0 4px}
nav a{margin-right:10px}.scroll{max-width:100%;overflow-x:auto}
table{border-collapse:collapse;margin-bottom:8px}td,th{border:1px solid #ddd;padding:2px 6px;text-align:right}
td:first-child,th:first-child{text-align:left}.pivot td{font-variant-numeric:tabular-nums;white-space:nowrap}
.method,.nw{white-space:nowrap;overflow-wrap:normal}
.plots{display:flex;flex-wrap:wrap;gap:8px}.plots svg{background:#fff;border:1px solid #ddd;max-width:100%;height:auto}
.t{font-size:12px;font-weight:600}.s{font-size:11px}.grid{stroke:#e3e3e3}.ref{stroke-width:1.5;stroke-dasharray:4 3}
.ci{stroke:#111;stroke-width:1.2;fill:none}
.confs{display:flex;flex-wrap:wrap;gap:12px}.conf{max-width:100%}.conf td{min-width:18px}.diag{background:#cfe8d4}
.off{background:#f6c9c4}
#filters{position:sticky;top:0;background:#fafafa;padding:6px 0;z-index:2;border-bottom:1px solid #ddd;display:flex;
flex-wrap:wrap;gap:4px 12px;align-items:center}
details.controls{margin-top:12px}details.controls>summary{cursor:pointer;font-weight:600;padding:4px 0}
.card{background:#fff;border:1px solid #ddd;margin:6px 0;padding:6px;content-visibility:auto;
contain-intrinsic-size:auto 190px}.card[hidden]{display:none}
.head{margin-bottom:4px}.m{margin-left:10px;white-space:nowrap}.flag{background:#b6443b;color:#fff;border-radius:3px;
padding:0 4px;margin-left:6px;font-size:11px}.imgs{display:flex;flex-wrap:wrap;gap:4px;align-items:flex-start}
figure{margin:0;width:84px;text-align:center;font-size:10px}figure img{width:84px;height:84px;object-fit:cover;
display:block;border:3px solid #ccc}figure.q img{border-color:#3b6fb6}figure.rel img{border-color:#3a9a5b}
figure.non img{border-color:#b6443b}.missing{width:84px;min-height:84px;background:#eee;padding-top:30px;box-sizing:border-box;overflow-wrap:anywhere}
figure.ev img{border-color:#888}.sep{width:12px}.drift{margin-top:3px;color:#8a3b00}
@media (max-width:600px){body{margin:8px}.iv{display:block;font-size:11px;color:#555}
figure,figure img,.missing{width:64px}figure img{height:64px}
.m{margin-left:6px}}
"""

JS = """
(function(){
const IMGS=JSON.parse(document.getElementById('imgs').textContent);
const cards=Array.from(document.querySelectorAll('.card'));
function load(card){card.querySelectorAll('img[data-i]').forEach(function(im){
  if(!im.src){im.src=IMGS[+im.dataset.i];}});}
if(cards.length<=%(eager)d){cards.forEach(load);}
else{const io=new IntersectionObserver(function(es){es.forEach(function(e){
  if(e.isIntersecting){load(e.target);io.unobserve(e.target);}});},{rootMargin:'800px'});
  cards.forEach(function(c){io.observe(c);});}
const sel={method:document.getElementById('f-method'),group:document.getElementById('f-group'),
  encoder:document.getElementById('f-encoder')};
const count=document.getElementById('count');
function apply(){let n=0;cards.forEach(function(c){
  const ok=Object.keys(sel).every(function(k){return !sel[k].value||c.dataset[k]===sel[k].value;});
  c.hidden=!ok;if(ok)n++;});count.textContent=n+' of '+cards.length+' queries shown';}
Object.values(sel).forEach(function(s){s.addEventListener('change',apply);});
// choosing a control method opens the collapsed controls, where its cards are
sel.method.addEventListener('change',function(){const d=document.getElementById('controls');
  if(d&&sel.method.value&&d.querySelector('.card[data-method="'+CSS.escape(sel.method.value)+'"]'))d.open=true;});
window.fprApply=apply;window.fprLoadAll=function(){cards.forEach(load);};
apply();
requestAnimationFrame(function(){window.fprReady=true;});
})();
"""


def _select(name: str, values: Sequence[str]) -> str:
    opts = "".join(f'<option value="{_e(v)}">{_e(v)}</option>' for v in values)
    return f'<label>{name} <select id="f-{name}"><option value="">all</option>{opts}</select></label> '


def headroom_html(per_query: pd.DataFrame) -> str:
    """A small table per encoder and method (AP = 1 share, AP tie share of within-identity pairs) and the
    warning line of each encoder whose methods leave no room at the top (:mod:`fpr.metrics.headroom`)."""
    from fpr.metrics.headroom import HEADROOM_NOTE, headroom, headroom_table, headroom_warnings

    rows = headroom(per_query)
    if not rows:
        return ""
    table = headroom_table(rows)
    cols = list(table[0])
    head = "".join(f"<th>{_e(c)}</th>" for c in cols)
    body = "".join("<tr>" + "".join(f"<td>{_e('-' if r[c] is None else r[c])}</td>" for c in cols) + "</tr>"
                   for r in table)
    warnings = "".join(f'<p class="warn">warning: {_e(w)}</p>' for w in headroom_warnings(rows))
    return (f'{warnings}<table class="headroom"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'
            f'<p class="note">{_e(HEADROOM_NOTE)}</p>')


def _footnote(summary: list[dict]) -> str:
    note = interval_footnote(summary)
    return f'<p class="note">{_e(note)}</p>' if note else ""


def control_methods(methods: Sequence[str]) -> list[str]:
    """The methods of a run that are controls, not methods under test: the oracle, the generic individual
    and the copy-like methods of the built-in world (:data:`DEFAULT_CONTROLS`)."""
    return [m for m in methods if m in DEFAULT_CONTROLS]


def render(per_query: pd.DataFrame, aux: pd.DataFrame, rankings: pd.DataFrame, items: dict, summary: list[dict],
           p: Pivot, *, runs: Sequence[str], top_k: int = 10, thumb: int = 96, full: Pivot | None = None,
           controls: Sequence[str] | None = None, overlays: dict | None = None) -> str:
    """The whole page as one string. ``per_query`` carries run_id, encoder and drift columns;
    ``items``: run_id -> {item_id: GalleryItem}; ``p`` the summary shown first, ``full`` (every metric and
    scorer) collapsed under it; the cards of ``controls`` (default :func:`control_methods`) come after the
    methods under test, collapsed; ``overlays`` ((run_id, query_id) -> PNG path): ``fpr explain``'s evidence
    overlays on the cards."""
    images = _Images(thumb)
    methods = list(dict.fromkeys(per_query["method"]))
    controls = control_methods(methods) if controls is None else [m for m in controls if m in methods]
    is_control = per_query["method"].isin(controls)
    if is_control.all():  # nothing else to show first: the controls are the report
        is_control = is_control & False
    cards, n_tested = cards_html(per_query[~is_control], aux, rankings, items, images, top_k=top_k,
                                 overlays=overlays)
    control_cards, n_controls = cards_html(per_query[is_control], aux, rankings, items, images, top_k=top_k,
                                           overlays=overlays)
    n_cards = n_tested + n_controls
    if n_controls:
        names = ", ".join(m for m in controls if (per_query["method"] == m).any())
        cards += (f'<details class="controls" id="controls"><summary>Controls: {_e(names)} ({n_controls} '
                  f"queries; the reference rows, not methods under test)</summary>{control_cards}</details>")
    groups = sorted(per_query["group"].unique())
    encoders = list(dict.fromkeys(per_query["encoder"]))
    imgs_json = json.dumps(images.urls, separators=(",", ":")).replace("</", "<\\/")
    n_ok = int((per_query["status"] == "ok").sum())
    csp = ("default-src 'none'; img-src data:; style-src 'unsafe-inline'; script-src 'unsafe-inline'")
    everything = (f"<details><summary>Every metric and scorer</summary>{pivot_html(full)}</details>"
                  if full is not None and [c.key for c in full.columns] != [c.key for c in p.columns] else "")
    nav = ('<nav><a href="#summary">Summary</a><a href="#headroom">Headroom</a><a href="#sim-map">Sim vs mAP</a><a href="#plots">Plots</a>'
           '<a href="#drift">Drift</a><a href="#queries">Queries</a></nav>')
    return (
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f'<meta http-equiv="Content-Security-Policy" content="{csp}">'
        f"<title>fpr report: {_e(', '.join(runs))}</title><style>{CSS}</style></head><body>"
        f"<h1>fpr report · {_e(', '.join(runs))}</h1>"
        f"<p>{n_cards} queries ({n_ok} evaluated) · encoders {_e(', '.join(encoders))} · "
        f"intervals: bootstrap 95% over queries</p>{nav}"
        f'<h2 id="summary">Summary</h2>{pivot_html(p)}{_footnote(summary)}{everything}'
        f'<h2 id="headroom">Headroom</h2>{headroom_html(per_query)}'
        f'<h2 id="sim-map">Sim vs mAP</h2>{sim_map_svg(summary, methods=p.methods)}'
        f'<h2 id="plots">Plots</h2>{plots_svg(summary, methods=p.methods)}'
        '<h2 id="drift">Drift diagnosis</h2><p>Per group: intended identity (rows) x identity of the top-1 gallery '
        "item (columns). Off-diagonal cells are queries whose best match is another identity.</p>"
        f'<div class="confs">{confusion_html(per_query)}</div>'
        f'<h2 id="queries">Queries <small>(worst AP first{", controls after" if n_controls else ""})</small></h2>'
        f'<div id="filters">{_select("method", methods)}{_select("group", groups)}{_select("encoder", encoders)}'
        f'<span id="count"></span></div><div id="cards">{cards}</div>'
        f'<script type="application/json" id="imgs">{imgs_json}</script>'
        f"<script>{JS % {'eager': EAGER_LIMIT}}</script></body></html>")
