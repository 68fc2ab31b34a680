"""Reading judge replies strictly: a value is taken only from the stated format, never guessed.

Every function either returns what the reply states or raises
:class:`~fpr.scorers.judges.client.JudgeFailure` with the reason (a refusal, no
``Score:`` line, a number out of range, JSON that does not parse), which the
scorers store as a missing value.
"""
from __future__ import annotations

import json
import re

from fpr.scorers.judges.client import JudgeFailure, Reply, _short, refusal_reason


def _text(reply: Reply) -> str:
    reason = refusal_reason(reply)
    if reason:
        raise JudgeFailure(reason)
    if not reply.content or not reply.content.strip():
        cut = " (cut by the length limit)" if reply.finish_reason == "length" else ""
        raise JudgeFailure(f"unparsable reply: empty{cut}")
    return reply.content


def final_label(reply: Reply, label: str, pattern: str) -> str:
    """The value of a last-line ``<label>: <value>`` (markdown emphasis allowed), matched by ``pattern``."""
    text = _text(reply)
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    last = re.sub(r"[*_`]", "", lines[-1]) if lines else ""
    m = re.fullmatch(rf"{label}\s*[:=]\s*({pattern})\s*\.?", last, flags=re.IGNORECASE)
    if not m:
        why = " (cut by the length limit)" if reply.finish_reason == "length" else ""
        raise JudgeFailure(f"unparsable reply: no final '{label}: ...' line{why} (ends: '{_short(last, 60)}')")
    return m.group(1)


def final_score(reply: Reply, lo: int, hi: int, label: str = "Score") -> int:
    """The integer N of a last line ``Score: N``; N outside ``lo..hi`` is a failure, not clipped."""
    raw = final_label(reply, label, r"-?\d+(?:\.\d+)?")
    if not re.fullmatch(r"-?\d+", raw):
        raise JudgeFailure(f"unparsable reply: '{label}: {raw}' is not an integer {lo}-{hi}")
    n = int(raw)
    if not lo <= n <= hi:
        raise JudgeFailure(f"unparsable reply: '{label}: {n}' is outside {lo}-{hi}")
    return n


# DreamBench++'s released scorer reads a reply with this pattern and accepts it only when it occurs exactly once.
DREAMBENCH_SCORE = re.compile(r"(score|Score):\s*[a-zA-Z]*\s*(\d+)")
REPLY_FORMATS = ("last-line", "dreambench")


def dreambench_score(reply: Reply, lo: int, hi: int) -> int:
    """The one ``Score: N`` anywhere in the reply (DreamBench++'s rule); none or several is a failure."""
    found = [int(n) for _, n in DREAMBENCH_SCORE.findall(_text(reply))]
    if len(found) != 1:
        raise JudgeFailure(f"unparsable reply: {len(found)} 'Score: N' matches, DreamBench++ reads exactly one")
    if not lo <= found[0] <= hi:
        raise JudgeFailure(f"unparsable reply: 'Score: {found[0]}' is outside {lo}-{hi}")
    return found[0]


def sampled_score(reply: Reply, lo: int, hi: int, reply_format: str = "last-line") -> tuple[float, str | None]:
    """(score, note): one sample's score, or with several samples (n > 1) the mean of those that parse.

    No parsable sample is a failure (the first sample's reason)."""
    read = dreambench_score if reply_format == "dreambench" else final_score
    if not reply.samples:
        return float(read(reply, lo, hi)), None
    values, reasons = [], []
    for text in reply.samples:
        try:
            values.append(read(Reply(content=text, finish_reason=reply.finish_reason), lo, hi))
        except JudgeFailure as exc:
            reasons.append(exc.reason)
    if not values:
        raise JudgeFailure(reasons[0])
    note = f"mean of {len(values)} of {len(reply.samples)} samples: {', '.join(map(str, values))}"
    if reasons:
        note += f"; {len(reasons)} unparsable ({reasons[0]})"
    return sum(values) / len(values), note


def json_object(reply: Reply) -> dict:
    """The JSON object in a reply (a bare object or one fenced in ```json ... ```)."""
    text = _text(reply).strip()
    fenced = re.search(r"```(?:json)?\s*(.*?)```", text, flags=re.DOTALL)
    if fenced:
        text = fenced.group(1).strip()
    start, end = text.find("{"), text.rfind("}")
    if start >= 0 and end <= start:
        raise JudgeFailure("unparsable reply: the JSON object is cut off (no closing '}')")
    if start < 0:
        raise JudgeFailure(f"unparsable reply: no JSON object (begins: '{_short(text, 60)}')")
    try:
        obj = json.loads(text[start:end + 1])
    except json.JSONDecodeError as exc:
        raise JudgeFailure(f"unparsable reply: invalid JSON ({exc.msg} at char {exc.pos})") from None
    if not isinstance(obj, dict):
        raise JudgeFailure("unparsable reply: the JSON is not an object")
    return obj


def true_false(reply: Reply) -> bool:
    """A last line ``Answer: True`` / ``Answer: False`` (also yes/no)."""
    raw = final_label(reply, "Answer", r"true|false|yes|no").lower()
    return raw in ("true", "yes")
