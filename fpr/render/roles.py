"""Text of a VISTAR report: per-aspect scores, Core/Hard and the drop, role scores with ranks."""
from __future__ import annotations

from typing import Sequence

import pandas as pd

from fpr.metrics.reasons import NanCount
from fpr.render.cells import dumps, render_rows


def _records(df: pd.DataFrame) -> list[dict]:
    return df.astype(object).where(df.notna(), None).to_dict("records")


def role_report_text(aspects: pd.DataFrame, splits: pd.DataFrame, roles: pd.DataFrame, fmt: str,
                     nan: Sequence[NanCount] = ()) -> str:
    """``aspects`` rows model, aspect, score (Core); ``splits`` model, core, hard, drop; ``roles`` per (role, model);
    ``nan``: each scorer's NaNs by reason (the table's last lines, the JSON's ``nan_reasons``)."""
    if fmt == "json":
        return dumps({"aspects": _records(aspects), "splits": _records(splits), "roles": _records(roles),
                      "nan_reasons": [c.record() for c in nan]})
    wide = aspects.pivot(index="model", columns="aspect", values="score").reset_index() if len(aspects) else aspects
    sections = (("aspect scores (Core split; mean over the prompts of each aspect, 0-1)", wide),
                ("Core / Hard (mean over the aspects measured on both) and drop = (Core - Hard) / Core", splits),
                ("role scores (Core split; role_score needs every relevant aspect, role_score_measured uses the "
                 "measured ones; rank 1 = best; core_rank = the model's rank by Core)", roles))
    out = []
    for k, (title, df) in enumerate(sections):
        out.append(("\n" if k and fmt == "table" else "") + (title if fmt == "table" else f"# {title}"))
        out.append(render_rows(_records(df), "csv" if fmt == "csv" else "table", list(df.columns)))
    missing = [c.line() for c in nan if c.n_nan]
    if missing and fmt == "table":
        out.append("\nmissing values (NaN, by reason; each in its note):\n" + "\n".join(missing))
    return "\n".join(out)
