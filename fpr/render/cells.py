"""Rendering results for stdout: aligned table, JSON or CSV."""
from __future__ import annotations

import csv
import io
import json
import math
import re
import shutil
from typing import Any, Sequence

from fpr import settings
from fpr.defaults import MIN_QUERIES_FOR_INTERVAL

FORMATS = ("table", "json", "csv")
FALLBACK_WIDTH = 100  # off a terminal (a pipe, a file, a test) and no COLUMNS: fold to this many characters
MIN_WIDTH = 40  # narrower requests fold to this: below it a table of numbers cannot be read anyway
ELLIPSIS = "…"  # ends a cut name (clip): a cell is cut only where it cannot wrap


def format_cell(v: float | None, lo: float | None = math.nan, hi: float | None = math.nan, *,
                latex: bool = False) -> str:
    """A number as fpr prints it everywhere: ``0.512``, with its interval ``0.512 [0.401,0.615]`` (the ends at
    the value's precision: ``0.999 [1.00,1.00]`` read as an interval the value lies outside); ``-`` when
    missing. The CLI, the paper tables, the HTML report and the demo all format through here."""
    if v is None or not math.isfinite(float(v)):
        return "-"
    if lo is None or hi is None or not (math.isfinite(float(lo)) and math.isfinite(float(hi))):
        return f"{v:.3f}"
    if latex:
        return f"{v:.3f} {{\\scriptsize[{lo:.3f}, {hi:.3f}]}}"
    return f"{v:.3f} [{lo:.3f},{hi:.3f}]"


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


def terminal_width(width: int | None = None) -> int:
    """Characters a table may use: ``width`` (``--width``), else ``COLUMNS``, else the terminal's width,
    else :data:`FALLBACK_WIDTH`; never less than :data:`MIN_WIDTH`."""
    if width is None:
        env = settings.raw("COLUMNS") or ""
        width = int(env) if env.isdigit() and int(env) > 0 else shutil.get_terminal_size((FALLBACK_WIDTH, 24)).columns
    return max(MIN_WIDTH, int(width))


def wrap_text(text: str, width: int | None = None) -> str:
    """Prose (a note, a line under a table) at the tables' width (None: :func:`terminal_width`; :data:`WHOLE`: one
    line), continued lines indented; names such as ``fpr-world-v3`` never split at their hyphens."""
    import textwrap

    if width == WHOLE:
        return text
    return textwrap.fill(text, terminal_width(width), subsequent_indent="  ", break_on_hyphens=False)


def clip(text: str, width: int) -> str:
    """``text`` cut to ``width`` characters, the last one an ellipsis when anything was cut."""
    return text if len(text) <= width else text[:max(0, width - 1)] + ELLIPSIS


def fit_widths(natural: Sequence[int], floors: Sequence[int], width: int, gap: int = 2) -> list[int]:
    """Column widths whose line fits ``width``: the widest shrinkable column gives one character at a time,
    none below its floor (a table that still does not fit stays as narrow as the floors allow)."""
    widths = list(natural)
    excess = sum(widths) + gap * (len(widths) - 1) - width
    while excess > 0:
        k = max(range(len(widths)), key=lambda i: (widths[i] - floors[i], widths[i]))
        if widths[k] <= floors[k]:
            break
        widths[k] -= 1
        excess -= 1
    return widths


def table(rows: Sequence[dict], columns: Sequence[str] | None = None, *, width: int | None = None,
          keys: int = 1) -> str:
    """Aligned columns folded to ``width`` (None: :func:`terminal_width`; :data:`WHOLE`: every cell on one line).

    The one rule of every table fpr prints: a text cell longer than its column wraps onto more lines (at a
    space, comma, semicolon or slash where it can; a text column keeps at least :data:`TEXT_FLOOR` characters),
    nothing is cut; if the table still does not fit, its columns fold into blocks, each repeating the first
    ``keys`` columns (which name the row, and never wrap). Numbers never wrap."""
    if not rows:
        return "(no rows)"
    cols = list(columns or rows[0].keys())
    cells = [[_cell(r.get(c)) for c in cols] for r in rows]
    natural = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(cols)]
    numeric = [all(_looks_numeric(row[i]) for row in cells) for i in range(len(cols))]
    if width == WHOLE:
        return _block(cols, cells, dict(enumerate(natural)), numeric, range(len(cols)))
    width = terminal_width(width)
    floors = [w if (num or i < keys) else min(w, max(TEXT_FLOOR, len(c), _longest_word(cells, i)))
              for i, (c, w, num) in enumerate(zip(cols, natural, numeric))]
    blocks = fold_columns(floors, width, keys=keys)
    out = []
    for block in blocks:
        widths = fit_widths([natural[i] for i in block], [floors[i] for i in block], width)
        out.append(_block(cols, cells, dict(zip(block, widths)), numeric, block))
    return "\n\n".join(out)


WHOLE = 0  # the ``width`` of a table printed whole (``--wide``): no wrapping, no folding
TEXT_FLOOR = 16  # a long text column keeps at least this many characters, its header and its longest word
#                  (to WORD_CAP): wrap only what is long, fold the rest
_BREAKS = re.compile(r"(?<=[\s,;/])")  # where a wrapped cell may break: after a blank, comma, semicolon or slash


WORD_CAP = 32  # a column is widened to its longest word (a name in a list) up to this many characters


def _longest_word(cells: Sequence[Sequence[str]], i: int) -> int:
    """The longest unbreakable piece of column ``i`` (at most :data:`WORD_CAP`): a name in a comma list is not
    split when the table can afford it."""
    return min(WORD_CAP, max((len(w.rstrip()) for row in cells for w in _BREAKS.split(row[i])), default=0))


def wrap_cell(text: str, width: int) -> list[str]:
    """``text`` as lines of at most ``width`` characters, broken after a blank, comma, semicolon or slash where
    it can, else within a word; no character but the blanks at a break is dropped."""
    if len(text) <= width:
        return [text]
    lines: list[str] = []
    line = ""
    for piece in filter(None, _BREAKS.split(text)):
        if line and len(line) + len(piece.rstrip()) > width:
            lines.append(line.rstrip())
            line = ""
        if not line:
            piece = piece.lstrip()
        while len(piece.rstrip()) > width:  # one word longer than the column
            lines.append(piece[:width])
            piece = piece[width:]
        line += piece
    if line.strip():
        lines.append(line.rstrip())
    return lines or [""]


def fold_columns(widths: Sequence[int], width: int, gap: int = 2, keys: int = 1) -> list[list[int]]:
    """Column indices in blocks that each fit ``width`` at the given widths; every block starts with the
    first ``keys`` columns, and a column too wide for any block gets one of its own."""
    keys = min(keys, len(widths))
    start = list(range(keys))
    key_w = sum(widths[:keys]) + gap * (keys - 1)
    blocks: list[list[int]] = [start[:]]
    used = key_w
    for i in range(keys, len(widths)):
        if used + gap + widths[i] > width and len(blocks[-1]) > keys:
            blocks.append(start[:])
            used = key_w
        blocks[-1].append(i)
        used += gap + widths[i]
    return blocks


def _block(cols: Sequence[str], cells: Sequence[Sequence[str]], widths: dict[int, int], numeric: Sequence[bool],
           which: Sequence[int]) -> str:
    """The columns ``which`` of the table, column ``i`` padded to ``widths[i]``, a longer text cell wrapped onto
    as many lines as it needs (the row's other cells blank on them)."""
    def fmt(values: Sequence[str]) -> list[str]:
        parts = {i: [values[i]] if numeric[i] else wrap_cell(values[i], widths[i]) for i in which}
        height = max(len(p) for p in parts.values())
        return ["  ".join((parts[i][k] if k < len(parts[i]) else "").rjust(widths[i]) if numeric[i]
                          else (parts[i][k] if k < len(parts[i]) else "").ljust(widths[i]) for i in which).rstrip()
                for k in range(height)]

    lines = fmt(cols) + fmt(["-" * widths.get(i, 0) for i in range(len(cols))])
    for row in cells:
        lines += fmt(row)
    return "\n".join(lines)


_INTERVAL = re.compile(r"-?\d+\.\d+ \[-?\d+\.\d+,-?\d+\.\d+\]")  # format_cell's value with its interval


def _looks_numeric(s: str) -> bool:
    """A number, ``-`` (missing) or a number with its interval: right-aligned, never wrapped."""
    try:
        float(s)
        return True
    except ValueError:
        return s == "-" or bool(_INTERVAL.fullmatch(s))


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


def render_rows(rows: Sequence[dict], fmt: str, columns: Sequence[str] | None = None, *,
                width: int | None = None, keys: int = 1) -> str:
    """A table folds to ``width`` (None: the terminal's, :data:`WHOLE`: not at all), repeating its first
    ``keys`` columns (see :func:`table`); JSON and CSV are always whole."""
    if fmt == "json":
        return dumps(list(rows))
    if fmt == "csv":
        return csv_text(rows, columns)
    return table(rows, columns, width=width, keys=keys)


def tex_escape(s: str) -> str:
    for a in ("&", "%", "_", "#", "$"):
        s = s.replace(a, "\\" + a)
    return s


def rows_latex(rows: Sequence[dict], columns: Sequence[str], *, caption: str) -> str:
    """Rows as a complete ``table`` float (needs ``booktabs``); cells as :func:`render_rows` shows them."""
    lines = ["\\begin{table}[t]", "\\centering", f"\\caption{{{tex_escape(caption)}}}",
             "\\begin{tabular}{l" + "r" * (len(columns) - 1) + "}", "\\toprule",
             " & ".join(tex_escape(c) for c in columns) + " \\\\", "\\midrule"]
    lines += [" & ".join(tex_escape(_cell(r.get(c))) for c in columns) + " \\\\" for r in rows]
    return "\n".join(lines + ["\\bottomrule", "\\end{tabular}", "\\end{table}"])
