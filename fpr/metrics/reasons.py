"""Why values are missing, counted: a stored note's short stable phrase, and per scorer its NaNs by phrase.

A scorer stores a missing value as NaN with a note saying why. The note may carry details (a file, a
threshold, a model id) after its phrase; a summary groups by the phrase only, so one reason is one count
however its details vary. The phrase is the note's text before its first ``:``, ``;`` or `` (`` (e.g.
``"image too small: 1x1 px"`` -> ``image too small``); a JSON note (a scorer's structured trajectory) gives
its ``reason`` field's phrase, or ``missing`` and the names of the parts it lacks.
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Mapping

import pandas as pd

NO_REASON = "no reason given"  # a NaN stored without a note: a scorer bug the contract test catches
_CUT = re.compile(r":|;| \(")
MAX_PHRASE = 60  # characters; a longer free text is cut at a word boundary


@dataclass(frozen=True)
class NanCount:
    """One scorer's NaNs on its primary metric in a run, by reason phrase (most frequent first)."""

    scorer: str
    metric: str
    n: int  # queries with a row of this metric
    n_nan: int
    reasons: tuple[tuple[str, int], ...]

    def line(self) -> str:
        """``copy-paste: 3 of 40 NaN (2 textureless image, 1 image too small)``."""
        why = ", ".join(f"{k} {phrase}" for phrase, k in self.reasons)
        return f"{self.scorer}: {self.n_nan} of {self.n} NaN" + (f" ({why})" if why else "")

    def record(self) -> dict:
        return {"scorer": self.scorer, "metric": self.metric, "n": self.n, "n_nan": self.n_nan,
                "reasons": {phrase: k for phrase, k in self.reasons}}


def reason_phrase(note: object) -> str:
    """The short stable phrase of a stored note (see the module's docstring)."""
    if note is None or (isinstance(note, float) and math.isnan(note)):
        return NO_REASON
    text = str(note).strip()
    if not text:
        return NO_REASON
    if text.startswith("{"):
        phrase = _json_phrase(text)
        if phrase:
            return phrase
    head = _CUT.split(text, maxsplit=1)[0].strip()
    if len(head) > MAX_PHRASE:
        head = head[:MAX_PHRASE].rsplit(" ", 1)[0] + "..."
    return head or NO_REASON


def _json_phrase(text: str) -> str | None:
    try:
        doc = json.loads(text)
    except ValueError:
        return None  # not JSON after all: the text's own phrase
    if not isinstance(doc, dict):
        return None
    for key in ("reason", "why", "error"):
        if isinstance(doc.get(key), str) and doc[key].strip():
            return reason_phrase(doc[key])
    missing = doc.get("missing")
    if isinstance(missing, dict) and missing:
        return "missing " + ", ".join(sorted(map(str, missing)))
    return None


def nan_counts(aux: pd.DataFrame, primary: Mapping[str, str]) -> list[NanCount]:
    """Per scorer of ``aux`` (columns scorer, metric, value, note): its primary metric's rows (``primary``:
    scorer -> metric; a scorer not in it is counted on ``score`` if it has one, else its first metric in
    name order), how many are NaN and why. Scorers in name order."""
    out = []
    if aux is None or aux.empty:
        return out
    for scorer, rows in aux.groupby("scorer", sort=True):
        metrics = sorted(set(rows["metric"].astype(str)))
        metric = primary.get(scorer) or ("score" if "score" in metrics else metrics[0])
        own = rows[rows["metric"] == metric]
        values = pd.to_numeric(own["value"], errors="coerce")
        nan = own[values.isna()]
        notes = nan["note"] if "note" in nan.columns else pd.Series([None] * len(nan))
        counts = pd.Series([reason_phrase(n) for n in notes], dtype=object).value_counts(sort=False)
        reasons = tuple(sorted(((str(p), int(k)) for p, k in counts.items()), key=lambda pk: (-pk[1], pk[0])))
        out.append(NanCount(str(scorer), metric, int(len(own)), int(len(nan)), reasons))
    return out

