"""The per-query loop every judge scorer shares: concurrency, missing values with reasons, costs.

A scorer supplies ``judge(i, tally) -> {metric: value or (value, note)}`` for query
row ``i``. A :class:`~fpr.scorers.judges.client.JudgeFailure` raised there makes all
of the scorer's score metrics NaN with the reason in ``note``; a value that is
NaN carries its own note. Each query also gets the rows ``cached`` (answers
served from the cache), ``calls`` (requests sent in this run), ``prompt_tokens``,
``completion_tokens`` (tokens of the answers used, cached or not) and
``missing`` (how many score metrics are missing), so the summary counts them. A
one-line account goes to stderr.
"""
from __future__ import annotations

import math
import re
from collections import Counter
from typing import Callable

import pandas as pd

from fpr import progress
from fpr.scorers.judges import parse
from fpr.scorers.judges.costs import COST_METRICS  # noqa: F401  (re-exported: the judge scorers' import)
from fpr.scorers.judges.client import ImageRef, JudgeClient, JudgeFailure, Tally, for_each, image_part, text_part
from fpr.scorers.judges.prompts import Template



def template_messages(t: Template, images: list[ImageRef], *, request: str | None = None, **values) -> list[dict]:
    """The chat messages of a template.

    Without an ``[assistant]`` section (fpr's templates): ``[system]`` as the system
    message, then one user message: the ``[user]`` text and the images. With one
    (DreamBench++'s layout: its instruction, the model's acknowledgement, then the
    inputs): ``[system]`` if any, the ``[user]`` text, the ``[assistant]`` text, then a user
    message with the ``[request]`` text (else ``request``, if given) and the images.
    """
    msgs = [{"role": "system", "content": t.render("system", **values)}] if t.section("system") is not None else []
    if t.section("assistant") is None:
        return msgs + [{"role": "user", "content": [text_part(t.render("user", **values))]
                        + [image_part(im) for im in images]}]
    text = t.render("request", **values) if t.section("request") is not None else request
    return msgs + [{"role": "user", "content": t.render("user", **values)},
                   {"role": "assistant", "content": t.render("assistant", **values)},
                   {"role": "user", "content": ([text_part(text)] if text else []) + [image_part(im) for im in images]}]


def zero_to_four(client: JudgeClient, msgs: list[dict], template: Template, tally: Tally, reply_format: str) -> dict:
    """DreamBench++'s 0-4 score of one request (the mean of its samples), as a 0-1 ``score`` with its note;
    NaN with the reason when the reply cannot be read."""
    try:
        value, note = parse.sampled_score(client.chat(msgs, template=template, tally=tally), 0, 4, reply_format)
    except JudgeFailure as exc:
        return {"score": (math.nan, exc.reason)}
    return {"score": (value / 4.0, note)}


def score_with_judge(batch, scorer: str, client: JudgeClient, score_metrics: tuple[str, ...],
                     judge: Callable[[int, Tally], dict], rows: list[int] | None = None) -> pd.DataFrame:
    rows = list(range(len(batch))) if rows is None else rows

    def one(i: int) -> list[tuple]:
        tally = Tally()
        try:
            got = judge(i, tally)
        except JudgeFailure as exc:
            got = {m: (math.nan, exc.reason) for m in score_metrics}
        out = []
        missing = 0
        for metric, v in got.items():
            value, note = v if isinstance(v, tuple) else (v, None)
            value = float(value)
            if metric in score_metrics and math.isnan(value):
                missing += 1
            out.append((batch.query_ids[i], metric, value, note))
        out += [(batch.query_ids[i], m, float(v), None) for m, v in tally.rows()]
        out.append((batch.query_ids[i], "missing", float(missing), None))
        return out

    results = for_each(rows, one, concurrency=client.config.concurrency, desc=f"{scorer}: judging")
    df = pd.DataFrame([r for rs in results for r in rs], columns=["query_id", "metric", "value", "note"])
    _log(scorer, df, score_metrics, len(rows))
    return df


def _log(scorer: str, df: pd.DataFrame, score_metrics: tuple[str, ...], n: int) -> None:
    if df.empty:
        return
    total = df.groupby("metric")["value"].sum()
    miss = df[df["metric"].isin(score_metrics) & df["value"].isna()]
    reasons = Counter(re.split(r"[:(;]", str(r))[0].strip() for r in miss["note"])
    why = f" ({', '.join(f'{k} {v}' for k, v in reasons.most_common())})" if reasons else ""
    progress.log(f"{scorer}: {n} queries, {len(miss)} missing value{'s' if len(miss) != 1 else ''}{why}; "
                 f"answers: {int(total.get('cached', 0))} from the cache, {int(total.get('calls', 0))} requested; "
                 f"tokens {int(total.get('prompt_tokens', 0))} in, {int(total.get('completion_tokens', 0))} out")
