"""A sealed benchmark's leaderboard as text rows and as one self-contained HTML page (no script, no images).

Pure: the rows of :func:`fpr.workflows.benchmarks.leaderboard` in, text out; the workflow ranks them.
"""
from __future__ import annotations

import html
import math
from typing import Sequence

from fpr.render.cells import format_cell

COLUMNS = ("rank", "method", "mAP [95%]", "AP = 1", "copy-paste", "Sim", "queries", "submitted", "submission",
           "hash")


def _share(v) -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{100 * float(v):.0f}%"


def table_rows(rows: Sequence[dict], *, copy_paste: bool) -> list[dict]:
    """One display row per leaderboard row: mAP with its interval, AP = 1 share, copy-paste rate (when the
    benchmark runs the scorer), Sim, submission date, id and the first 16 hex of the submission hash."""
    out = []
    for r in rows:
        out.append({"rank": r.get("rank", ""), "method": r["method"],
                    "mAP [95%]": format_cell(r.get("map"), r.get("map_lo"), r.get("map_hi")),
                    "AP = 1": _share(r.get("ap_one_share")),
                    "copy-paste": _share(r.get("copy_paste_rate")) if copy_paste else "n/a",
                    "Sim": format_cell(r.get("sim")), "queries": r.get("n_queries"),
                    "submitted": (r.get("created_at") or "")[:10], "submission": r["submission_id"],
                    "hash": (r.get("submission_hash") or "")[:16]})
    return out


def leaderboard_html(board: dict) -> str:
    """The page: the benchmark's fingerprints, then a table of ranked methods with each card's link."""
    bench = board["benchmark"]
    copy_paste = "copy-paste" in (bench.get("scorers") or [])
    esc = html.escape
    head = "".join(f"<th>{esc(c)}</th>" for c in COLUMNS)
    body = []
    for row, shown in zip(board["rows"], table_rows(board["rows"], copy_paste=copy_paste)):
        cells = []
        for c in COLUMNS:
            text = esc(str(shown[c]))
            if c == "method" and row.get("link"):
                text = f'<a href="{esc(row["link"])}" rel="noopener noreferrer">{text}</a>'
            title = f' title="{esc(row.get("description") or "")}"' if c == "method" else ""
            cells.append(f"<td{title}>{text}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    rows = "\n".join(body) or f'<tr><td colspan="{len(COLUMNS)}">no submissions yet</td></tr>'
    return (f"<!doctype html><html><head><meta charset=\"utf-8\"><title>fpr leaderboard: {esc(bench['name'])}</title>"
            "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
            "td,th{border:1px solid #ccc;padding:4px 8px;text-align:right}td:nth-child(2){text-align:left}"
            "</style></head><body>"
            f"<h1>{esc(bench['name'])}</h1><p>encoder {esc(str(bench.get('encoder')))}, scope "
            f"{esc(str(bench.get('scope')))}; gallery fingerprint <code>{esc(str(bench.get('gallery_fingerprint')))}"
            f"</code>, encoder checksum <code>{esc(str(bench.get('weights_checksum')))}</code>. The gallery is sealed: "
            "submissions are scored on the server, ranked by mAP (95% bootstrap interval over queries).</p>"
            f"<table><thead><tr>{head}</tr></thead><tbody>\n{rows}\n</tbody></table></body></html>")
