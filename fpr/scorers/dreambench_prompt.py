"""``dreambench-prompt``: a model judge's prompt-following score (DreamBench++ style), 0-4 scaled to 0-1.

The judge sees the query image and its prompt (``prompts/dreambench_prompt.txt``),
reasons, and ends with ``Score: N``, N an integer 0-4; metric ``score`` = N / 4.
Queries without a prompt get no rows. A refusal, an unparsable reply or a failed
request gives NaN with the reason in ``note``. Options: the judge client's
(``dreambench-prompt.model``, ``seed``, ``image_size``, ``concurrency``,
``timeout``, ``max_retries``, ``max_tokens``; see :mod:`fpr.scorers.judges.client`).
"""
from __future__ import annotations

import math

import pandas as pd

from fpr.scorers import QueryBatch, Scorer, register_scorer
from fpr.scorers.judges import parse
from fpr.scorers.judges.client import CLIENT_OPTIONS, ImageRef, JudgeClient, Tally, image_part, judge_config, text_part
from fpr.scorers.judges.prompts import load_template
from fpr.scorers.judges.scoring import COST_METRICS, score_with_judge

NAME = "dreambench-prompt"


class DreamBenchPrompt(Scorer):
    name = NAME
    description = "model judge: prompt following 0-4 (DreamBench++), scaled to 0-1"
    needs = frozenset({"image", "prompt"})
    metrics = ("score",) + COST_METRICS
    primary_metric = "score"
    options = CLIENT_OPTIONS

    def provenance(self, batch: QueryBatch) -> dict:
        return judge_config(NAME, batch.options).provenance(load_template("dreambench_prompt"))

    def score(self, batch: QueryBatch) -> pd.DataFrame:
        rows = [i for i, p in enumerate(batch.prompts) if p]
        if not rows:
            return pd.DataFrame(columns=["query_id", "metric", "value", "note"])
        cfg = judge_config(NAME, batch.options)
        client = JudgeClient(cfg, batch.workspace)
        t = load_template("dreambench_prompt")

        def judge(i: int, tally: Tally) -> dict:
            msgs = [{"role": "system", "content": t.render("system")},
                    {"role": "user", "content": [text_part(t.render("user", prompt=batch.prompts[i])),
                                                 image_part(ImageRef.from_path(batch.paths[i], cfg.image_size))]}]
            try:
                return {"score": parse.final_score(client.chat(msgs, template=t, tally=tally), 0, 4) / 4.0}
            except parse.JudgeFailure as exc:
                return {"score": (math.nan, exc.reason)}

        return score_with_judge(batch, NAME, client, ("score",), judge, rows)


register_scorer(DreamBenchPrompt())
