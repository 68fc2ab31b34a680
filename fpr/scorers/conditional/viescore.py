"""``viescore``: VIEScore for subject-driven generation, semantic consistency x perceptual quality, 0-10.

Two requests per query. SC (``prompts/viescore_sc.txt``): the judge sees the
query's first reference image, the query and its prompt, and rates prompt
following and subject resemblance 0-10; ``sc`` = the minimum of the two. PQ
(``prompts/viescore_pq.txt``): the judge sees the query alone and rates
naturalness and absence of artifacts 0-10; ``pq`` = their minimum. ``overall`` =
sqrt(sc x pq), as VIEScore defines it. The judge replies with JSON
``{"score": [a, b], "reasoning": "..."}``; a sub-score that is not a number in
0-10 is not clipped: the value is missing with the reason in ``note``. The four
sub-scores are exported too. Queries without a prompt or a reference get NaN
``sc`` and ``overall`` (``pq`` still). Options: the judge client's
(``viescore.model`` etc.; see :mod:`fpr.scorers.judges.client`).
"""
from __future__ import annotations

import math

import pandas as pd

from fpr.scorers import QueryBatch, Scorer, register_scorer
from fpr.scorers.judges import parse
from fpr.scorers.judges.client import ImageRef, JudgeClient, JudgeFailure, Reply, Tally, image_part, text_part
from fpr.scorers.judges.config import client_options, judge_config
from fpr.scorers.judges.prompts import load_template
from fpr.scorers.judges.scoring import COST_METRICS, score_with_judge

NAME = "viescore"
SCORES = ("sc", "pq", "overall", "sc_prompt", "sc_subject", "pq_naturalness", "pq_artifacts")


def two_scores(reply: Reply) -> tuple[float, float]:
    obj = parse.json_object(reply)
    s = obj.get("score")
    if not isinstance(s, list) or len(s) != 2:
        raise JudgeFailure(f"unparsable reply: 'score' must be a list of two numbers, got {str(s)[:40]}")
    out = []
    for v in s:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= 10:
            raise JudgeFailure(f"unparsable reply: sub-score {v!r} is not a number in 0-10")
        out.append(float(v))
    return out[0], out[1]


class VIEScore(Scorer):
    name = NAME
    description = "model judge: VIEScore semantic consistency and perceptual quality 0-10, overall sqrt(SC*PQ)"
    needs = frozenset({"image", "references"})  # prompts: queries without one get no sc
    metrics = SCORES + COST_METRICS
    primary_metric = "overall"
    options = client_options()

    def provenance(self, batch: QueryBatch) -> dict:
        return judge_config(NAME, batch.options).provenance(load_template("viescore_sc"), load_template("viescore_pq"))

    def score(self, batch: QueryBatch) -> pd.DataFrame:
        cfg = judge_config(NAME, batch.options)
        client = JudgeClient(cfg, batch.workspace)
        sc_t, pq_t = load_template("viescore_sc"), load_template("viescore_pq")

        def judge(i: int, tally: Tally) -> dict:
            out: dict = {}
            query = ImageRef.from_path(batch.paths[i], cfg.image_size)
            refs, prompt = batch.reference_paths[i], batch.prompts[i]
            if not refs or not prompt:
                why = "no reference image" if not refs else "no prompt"
                out.update({m: (math.nan, why) for m in ("sc", "sc_prompt", "sc_subject")})
            else:
                msgs = [{"role": "system", "content": sc_t.render("system")},
                        {"role": "user", "content": [text_part(sc_t.render("user", prompt=prompt)),
                                                     image_part(ImageRef.from_path(refs[0], cfg.image_size)),
                                                     image_part(query)]}]
                try:
                    a, b = two_scores(client.chat(msgs, template=sc_t, tally=tally))
                    out.update({"sc_prompt": a, "sc_subject": b, "sc": min(a, b)})
                except JudgeFailure as exc:
                    out.update({m: (math.nan, exc.reason) for m in ("sc", "sc_prompt", "sc_subject")})
            msgs = [{"role": "system", "content": pq_t.render("system")},
                    {"role": "user", "content": [text_part(pq_t.render("user")), image_part(query)]}]
            try:
                a, b = two_scores(client.chat(msgs, template=pq_t, tally=tally))
                out.update({"pq_naturalness": a, "pq_artifacts": b, "pq": min(a, b)})
            except JudgeFailure as exc:
                out.update({m: (math.nan, exc.reason) for m in ("pq", "pq_naturalness", "pq_artifacts")})
            sc, pq = out["sc"], out["pq"]
            if isinstance(sc, tuple) or isinstance(pq, tuple):
                out["overall"] = (math.nan, "needs both sc and pq: " + "; ".join(
                    v[1] for v in (sc, pq) if isinstance(v, tuple)))
            else:
                out["overall"] = math.sqrt(sc * pq)
            return {m: out[m] for m in SCORES}

        return score_with_judge(batch, NAME, client, SCORES, judge)


register_scorer(VIEScore())
