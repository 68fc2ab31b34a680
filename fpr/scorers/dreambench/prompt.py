"""``dreambench-prompt``: a model judge's prompt-following score (DreamBench++ style), 0-4 scaled to 0-1.

The judge sees the query image and its prompt (the template, by default the shipped
``prompts/dreambench_prompt.txt``; ``dreambench-prompt.template=PATH`` for another, e.g.
DreamBench++'s own, see ``docs/judges.md``), reasons, and ends with ``Score: N``, N an
integer 0-4; metric ``score`` = N / 4 (with ``n`` > 1 samples, the mean of the samples
that parse). ``reply_format``: ``last-line`` (fpr's rule: the last line is ``Score: N``)
or ``dreambench`` (DreamBench++'s: exactly one ``Score: N`` anywhere). Queries without
a prompt get no rows. A refusal, an unparsable reply or a failed request gives NaN with
the reason in ``note``. The judge client's options (sampling, image encoding) default to
DreamBench++'s released settings (:data:`~fpr.scorers.judges.client.DREAMBENCH_PLUS_DEFAULTS`).
"""
from __future__ import annotations


import pandas as pd

from fpr.scorers import QueryBatch, Scorer, register_scorer
from fpr.scorers.judges import parse
from fpr.scorers.judges.client import ImageRef, JudgeClient, Tally
from fpr.scorers.judges.config import DREAMBENCH_PLUS_DEFAULTS, client_options, judge_config
from fpr.scorers.judges.prompts import Template, load_template, load_template_file
from fpr.scorers.judges.scoring import COST_METRICS, score_with_judge, template_messages, zero_to_four
from fpr.scorers.options import Option, resolve

NAME = "dreambench-prompt"
PLACEHOLDERS = ("prompt",)


class DreamBenchPrompt(Scorer):
    name = NAME
    description = "model judge: prompt following 0-4 (DreamBench++), scaled to 0-1"
    needs = frozenset({"image", "prompt"})
    metrics = ("score",) + COST_METRICS
    primary_metric = "score"
    options: tuple[Option, ...] = client_options(DREAMBENCH_PLUS_DEFAULTS) + (
        Option("template", str, None, "prompt template file ($prompt is the query's prompt; default: the shipped "
                                      "dreambench_prompt.txt)"),
        Option("reply_format", str, "last-line", "how the score is read: last-line (a final 'Score: N' line) or "
                                                 "dreambench (exactly one 'Score: N' anywhere)",
               choices=parse.REPLY_FORMATS),
    )
    _fingerprints: list[str] | None = None  # system fingerprints of the last scoring, for its provenance

    def _template(self, values: dict) -> Template:
        path = values["template"]
        return load_template_file(path, PLACEHOLDERS) if path else load_template("dreambench_prompt")

    def provenance(self, batch: QueryBatch) -> dict:
        values = resolve(NAME, self.options, batch.options)
        out = judge_config(NAME, batch.options, DREAMBENCH_PLUS_DEFAULTS).provenance(
            self._template(values), fingerprints=self._fingerprints)
        return {**out, "template_path": values["template"], "reply_format": values["reply_format"]}

    def score(self, batch: QueryBatch) -> pd.DataFrame:
        values = resolve(NAME, self.options, batch.options)
        t = self._template(values)
        rows = [i for i, p in enumerate(batch.prompts) if p]
        if not rows:
            return pd.DataFrame(columns=["query_id", "metric", "value", "note"])
        cfg = judge_config(NAME, batch.options, DREAMBENCH_PLUS_DEFAULTS)
        client = JudgeClient(cfg, batch.workspace)

        def judge(i: int, tally: Tally) -> dict:
            image = ImageRef.from_path(batch.paths[i], cfg.encoding)
            msgs = template_messages(t, [image], request=str(batch.prompts[i]), prompt=batch.prompts[i])
            return zero_to_four(client, msgs, t, tally, values["reply_format"])

        out = score_with_judge(batch, NAME, client, ("score",), judge, rows)
        self._fingerprints = sorted(client.fingerprints)
        return out


register_scorer(DreamBenchPrompt())
