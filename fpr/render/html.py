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
from typing import Sequence

import numpy as np
import pandas as pd

from fpr.errors import FprError
from fpr.images import load_rgb
from fpr.render.cells import format_cell, interval_footnote
from fpr.render.paper import OVERALL, Pivot, confusion_matrices

EAGER_LIMIT = 200  # cards whose images load at once; beyond, images load as cards come into view
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

def pivot_html(p: Pivot) -> str:
    head = "".join(f"<th>{_e(c.label)}</th>" for c in p.columns)
    parts = []
    for g in p.groups:
        rows = [m for m in p.methods if (g, m) in p.n_queries]
        if not rows:
            continue
        body = "".join(
            f"<tr><td>{_e(m)}</td><td>{p.n_queries[(g, m)]}</td>"
            + "".join(f"<td>{_e(format_cell(*p.value(g, m, c.key)))}</td>" for c in p.columns) + "</tr>"
            for m in rows)
        title = "all groups" if g == OVERALL else g
        parts.append(f'<h3>{_e(title)}</h3><table class="pivot"><tr><th>method</th><th>n</th>{head}</tr>'
                     f"{body}</table>")
    return "".join(parts)


def plots_svg(summary: Sequence[dict], metrics: Sequence[tuple[str, str]] = (("map", "mAP"), ("sim", "Sim")),
              methods: Sequence[str] | None = None) -> str:
    """Per group and metric, horizontal bars (mean) with whiskers (95% interval), one colour per encoder."""
    encoders = list(dict.fromkeys(r.get("encoder", "") for r in summary))
    methods = list(methods or dict.fromkeys(r["method"] for r in summary))
    groups = sorted({r["group"] for r in summary if r["group"] != OVERALL}) + [OVERALL]
    cell = {(r.get("encoder", ""), r["method"], r["group"]): r for r in summary}
    legend = "".join(f'<span class="key" style="background:{PALETTE[k % len(PALETTE)]}"></span>{_e(e)} '
                     for k, e in enumerate(encoders))
    out = [f'<p class="legend">{legend}</p><div class="plots">']
    bar_h, label_w, plot_w = 10, 110, 260
    for g in groups:
        for metric, label in metrics:
            vals = [r.get(k) for r in summary if r["group"] == g for k in (metric, f"{metric}_lo", f"{metric}_hi")]
            finite = [float(v) for v in vals if v is not None and np.isfinite(float(v))]
            lo_axis = min(0.0, min(finite, default=0.0))
            span = max(1.0, max(finite, default=1.0)) - lo_axis
            x = lambda v: label_w + (float(v) - lo_axis) / span * plot_w  # noqa: E731
            row_h = bar_h * len(encoders) + 6
            height = 24 + row_h * len(methods) + 16
            items = [f'<text x="4" y="14" class="t">{_e("all groups" if g == OVERALL else g)} · {label}</text>',
                     f'<line x1="{x(0):.1f}" y1="18" x2="{x(0):.1f}" y2="{height - 14}" class="axis"/>',
                     f'<text x="{x(0):.1f}" y="{height - 2}" class="s">0</text>',
                     f'<text x="{x(lo_axis + span):.1f}" y="{height - 2}" class="s" text-anchor="end">'
                     f'{lo_axis + span:.1f}</text>']
            for mi, m in enumerate(methods):
                y0 = 22 + mi * row_h
                items.append(f'<text x="{label_w - 4}" y="{y0 + row_h / 2 + 3:.1f}" class="s" '
                             f'text-anchor="end">{_e(m)}</text>')
                for k, e in enumerate(encoders):
                    r = cell.get((e, m, g))
                    if r is None or r.get(metric) is None or not np.isfinite(float(r[metric])):
                        continue
                    v, y = float(r[metric]), y0 + k * bar_h
                    colour = PALETTE[k % len(PALETTE)]
                    items.append(f'<rect x="{x(min(0, v)):.1f}" y="{y + 1}" width="{abs(x(v) - x(0)):.1f}" '
                                 f'height="{bar_h - 2}" fill="{colour}"><title>{_e(m)} {_e(e)} {label} '
                                 f'{_e(format_cell(v, r.get(metric + "_lo", math.nan), r.get(metric + "_hi", math.nan)))}'
                                 f'</title></rect>')
                    lo, hi = r.get(f"{metric}_lo"), r.get(f"{metric}_hi")
                    if lo is not None and hi is not None and np.isfinite(lo) and np.isfinite(hi):
                        yc = y + bar_h / 2
                        items.append(f'<path d="M{x(lo):.1f} {yc:.1f}H{x(hi):.1f}M{x(lo):.1f} {yc - 3:.1f}V'
                                     f'{yc + 3:.1f}M{x(hi):.1f} {yc - 3:.1f}V{yc + 3:.1f}" class="ci"/>')
            out.append(f'<svg width="{label_w + plot_w + 20}" height="{height}" role="img">{"".join(items)}</svg>')
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
        parts.append(f'<div class="conf"><h4>{_e(g)} <small>encoder {_e(e)}</small></h4><table>'
                     f'<tr><th>intended \\ top-1</th>{head}</tr>{body}</table></div>')
    return "".join(parts) or "<p>No evaluated query has stored rankings.</p>"


def _references(row, refs_by_key: dict) -> list[str]:
    given = [p for p in str(row.get("reference_paths") or "").split(";") if p]
    return given or refs_by_key.get((row["run_id"], row["group"], row["identity"]), [])


def cards_html(per_query: pd.DataFrame, aux: pd.DataFrame, rankings: pd.DataFrame, items: dict, images: _Images,
               *, top_k: int = 10, max_refs: int = 4) -> tuple[str, int]:
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

CSS = """
body{font:13px system-ui,sans-serif;margin:16px;color:#222;background:#fafafa}
h1{font-size:20px}h2{font-size:16px;margin-top:24px;border-bottom:1px solid #ccc}h3{font-size:14px;margin:10px 0 4px}
table{border-collapse:collapse;margin-bottom:8px}td,th{border:1px solid #ddd;padding:2px 6px;text-align:right}
td:first-child,th:first-child{text-align:left}.pivot td{font-variant-numeric:tabular-nums}
.plots{display:flex;flex-wrap:wrap;gap:8px}.plots svg{background:#fff;border:1px solid #ddd}
.t{font-size:12px;font-weight:600}.s{font-size:10px}.axis{stroke:#999}.ci{stroke:#111;stroke-width:1.2;fill:none}
.key{display:inline-block;width:10px;height:10px;margin:0 3px 0 10px}
.confs{display:flex;flex-wrap:wrap;gap:12px}.conf td{min-width:18px}.diag{background:#cfe8d4}.off{background:#f6c9c4}
#filters{position:sticky;top:0;background:#fafafa;padding:6px 0;z-index:2;border-bottom:1px solid #ddd}
.card{background:#fff;border:1px solid #ddd;margin:6px 0;padding:6px;content-visibility:auto;
contain-intrinsic-size:auto 190px}.card[hidden]{display:none}
.head{margin-bottom:4px}.m{margin-left:10px}.flag{background:#b6443b;color:#fff;border-radius:3px;padding:0 4px;
margin-left:6px;font-size:11px}.imgs{display:flex;flex-wrap:wrap;gap:4px;align-items:flex-start}
figure{margin:0;width:84px;text-align:center;font-size:10px}figure img{width:84px;height:84px;object-fit:cover;
display:block;border:3px solid #ccc}figure.q img{border-color:#3b6fb6}figure.rel img{border-color:#3a9a5b}
figure.non img{border-color:#b6443b}.missing{width:84px;min-height:84px;background:#eee;padding-top:30px;box-sizing:border-box;overflow-wrap:anywhere}
.sep{width:12px}.drift{margin-top:3px;color:#8a3b00}
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
window.fprApply=apply;window.fprLoadAll=function(){cards.forEach(load);};
apply();
requestAnimationFrame(function(){window.fprReady=true;});
})();
"""


def _select(name: str, values: Sequence[str]) -> str:
    opts = "".join(f'<option value="{_e(v)}">{_e(v)}</option>' for v in values)
    return f'<label>{name} <select id="f-{name}"><option value="">all</option>{opts}</select></label> '


def _footnote(summary: list[dict]) -> str:
    note = interval_footnote(summary)
    return f'<p class="note">{_e(note)}</p>' if note else ""


def render(per_query: pd.DataFrame, aux: pd.DataFrame, rankings: pd.DataFrame, items: dict, summary: list[dict],
           p: Pivot, *, runs: Sequence[str], top_k: int = 10, thumb: int = 96) -> str:
    """The whole page as one string. ``per_query`` carries run_id, encoder and drift columns;
    ``items``: run_id -> {item_id: GalleryItem}."""
    images = _Images(thumb)
    cards, n_cards = cards_html(per_query, aux, rankings, items, images, top_k=top_k)
    methods = list(dict.fromkeys(per_query["method"]))
    groups = sorted(per_query["group"].unique())
    encoders = list(dict.fromkeys(per_query["encoder"]))
    imgs_json = json.dumps(images.urls, separators=(",", ":")).replace("</", "<\\/")
    n_ok = int((per_query["status"] == "ok").sum())
    csp = ("default-src 'none'; img-src data:; style-src 'unsafe-inline'; script-src 'unsafe-inline'")
    return (
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
        f'<meta http-equiv="Content-Security-Policy" content="{csp}">'
        f"<title>fpr report: {_e(', '.join(runs))}</title><style>{CSS}</style></head><body>"
        f"<h1>fpr report · {_e(', '.join(runs))}</h1>"
        f"<p>{n_cards} queries ({n_ok} evaluated) · encoders {_e(', '.join(encoders))} · "
        f"intervals: bootstrap 95% over queries</p>"
        f"<h2>Summary</h2>{pivot_html(p)}{_footnote(summary)}"
        f"<h2>Plots</h2>{plots_svg(summary, methods=p.methods)}"
        "<h2>Drift diagnosis</h2><p>Per group: intended identity (rows) x identity of the top-1 gallery item "
        "(columns). Off-diagonal cells are queries whose best match is another identity.</p>"
        f'<div class="confs">{confusion_html(per_query)}</div>'
        f'<h2>Queries <small>(worst AP first)</small></h2><div id="filters">'
        f'{_select("method", methods)}{_select("group", groups)}{_select("encoder", encoders)}'
        f'<span id="count"></span></div><div id="cards">{cards}</div>'
        f'<script type="application/json" id="imgs">{imgs_json}</script>'
        f"<script>{JS % {'eager': EAGER_LIMIT}}</script></body></html>")
