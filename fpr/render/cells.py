"""Rendering results for stdout: aligned table, JSON or CSV."""
from __future__ import annotations

import csv
import io
import json
import math
import re
from typing import Any, Sequence

from fpr.defaults import MIN_QUERIES_FOR_INTERVAL

FORMATS = ("table", "json", "csv")


def format_cell(v: float | None, lo: float | None = math.nan, hi: float | None = math.nan, *,
                latex: bool = False) -> str:
    """A number as fpr prints it everywhere: ``0.512``, with its interval ``0.512 [0.40,0.61]``; ``-`` when
    missing. The CLI, the paper tables, the HTML report and the demo all format through here."""
    if v is None or not math.isfinite(float(v)):
        return "-"
    if lo is None or hi is None or not (math.isfinite(float(lo)) and math.isfinite(float(hi))):
        return f"{v:.3f}"
    if latex:
        return f"{v:.3f} {{\\scriptsize[{lo:.2f}, {hi:.2f}]}}"
    return f"{v:.3f} [{lo:.2f},{hi:.2f}]"


def interval_footnote(summary: list[dict]) -> str | None:
    """One line under a table whose rows include some without an interval (None when every row has one)."""
    n = sum(1 for r in summary if r.get("no_interval"))
    if not n:
        return None
    return (f"({n} row{'s' if n > 1 else ''} without a 95% interval: fewer than {MIN_QUERIES_FOR_INTERVAL} "
            f"queries, too few for a bootstrap interval to cover the mean 95% of the time)")


_DIGEST = re.compile(r"(sha256:)?[0-9a-f]{40,}")


def _cell(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return format_cell(v)
    if isinstance(v, str) and _DIGEST.fullmatch(v):  # a checksum: 12 hex digits identify it in a table
        return v[:19] if v.startswith("sha256:") else v[:12]
    return str(v)


def table(rows: Sequence[dict], columns: Sequence[str] | None = None) -> str:
    if not rows:
        return "(no rows)"
    cols = list(columns or rows[0].keys())
    cells = [[_cell(r.get(c)) for c in cols] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(cols)]
    numeric = [all(_looks_numeric(row[i]) for row in cells) for i in range(len(cols))]

    def fmt(values: Sequence[str]) -> str:
        return "  ".join(v.rjust(w) if num else v.ljust(w) for v, w, num in zip(values, widths, numeric)).rstrip()

    lines = [fmt(cols), fmt(["-" * w for w in widths])]
    lines += [fmt(row) for row in cells]
    return "\n".join(lines)


def _looks_numeric(s: str) -> bool:
    try:
        float(s)
        return True
    except ValueError:
        return s == "-"


def to_jsonable(v: Any) -> Any:
    if isinstance(v, float) and (math.isnan(v) or math.isinf(v)):
        return None
    if hasattr(v, "item") and not isinstance(v, (list, dict, str)):
        return to_jsonable(v.item())
    if isinstance(v, dict):
        return {k: to_jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [to_jsonable(x) for x in v]
    return v


def dumps(obj: Any) -> str:
    return json.dumps(to_jsonable(obj), indent=2, sort_keys=False)


def csv_text(rows: Sequence[dict], columns: Sequence[str] | None = None) -> str:
    if not rows:
        return ""
    cols = list(columns or rows[0].keys())
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=cols, extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({c: to_jsonable(r.get(c)) for c in cols})
    return buf.getvalue().rstrip("\n")


def render_rows(rows: Sequence[dict], fmt: str, columns: Sequence[str] | None = None) -> str:
    if fmt == "json":
        return dumps(list(rows))
    if fmt == "csv":
        return csv_text(rows, columns)
    return table(rows, columns)
