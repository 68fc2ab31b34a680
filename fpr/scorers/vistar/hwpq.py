"""``hwpq``: VISTAR's Hierarchical Weighted P/N Questioning, a questionnaire per prompt answered by a judge.

1. For every distinct prompt the endpoint writes a questionnaire once
   (``prompts/hwpq_questionnaire.txt``): four levels, L1 core bearers, L2
   attributes, L3 interplay, L4 atmosphere; each a weight and 1-8 pairs of a
   positive question (True when the image is right) and a mutually exclusive
   negative one (True when it is wrong), each pair a weight. It must validate
   against ``schemas/hwpq_questionnaire.schema.json`` and: every level exactly
   once, level weights summing to 1 and question weights summing to 1 within
   each level (within 1e-3). An invalid one is sent back with the error for a
   corrected one, at most ``hwpq.max_attempts`` (3) replies, then the prompt's
   queries are missing with the last error. Valid questionnaires are stored in
   ``<workspace>/judge-cache/questionnaires/`` and reused by every run, sealed as the judge's replies
   (:func:`fpr.cache.seal`): a stored one that fails its checks (checksum, template, validation) is one
   warning, moved aside, and made again (from the cached replies where they hold).
2. The judge answers each question about the query image ``hwpq.votes`` (3)
   times (seeds seed, seed+1, ...; temperature 0), ``Answer: True/False``; the
   majority decides. A pair scores 1 when P is True and N is False, else 0 (so
   N is asked only when P came out True: its answer cannot change a 0).
3. ``L<k>`` = sum over the level's pairs of question weight x pair score;
   ``score`` = sum over levels of level weight x ``L<k>``. A pair with a failed
   vote (refusal, unparsable, request failed) is missing, and so are its level
   and the score, with the reason in ``note``: no vote is guessed.

Two models, as in VISTAR (an LLM writes, a VLM answers): ``hwpq.generator_model`` writes the
questionnaires and ``hwpq.answerer_model`` answers the questions, each with its own endpoint
(``*_base_url``, else ``OPENAI_BASE_URL``) and key (``*_api_key_env``, the name of the
environment variable holding it); unset, both are the judge's (``hwpq.model`` /
``FPR_JUDGE_MODEL``). The questionnaire is written at the judge's temperature (0); the votes
are sampled at ``hwpq.vote_temperature`` (1.0: VISTAR asks for k = 3 independent queries and
states no temperature; at 0 the three votes would be one answer asked three times), each with
its own seed.

Aspect: a query's ``aspect`` column (a VISTAR aspect code, which ``fpr vistar run`` fills from
the prompt's routing; else ``hwpq.aspect``) puts the aspect's name and focus
(:mod:`fpr.scorers.vistar.roles`) into the questionnaire request, so Style Fusion, Cultural
Fidelity and Material Accuracy get their own questionnaires for one prompt; the aspect is part
of the stored questionnaire's key.

Queries without a prompt get no rows. Options (``hwpq.<name>``): ``votes``,
``max_attempts``, the two models' settings above, plus the judge client's (``model``, ``seed``, ...).
"""
from __future__ import annotations

import json
import math
import threading
from dataclasses import replace
from importlib import resources

import pandas as pd

from fpr.cache import seal
from fpr.errors import InputError
from fpr.keys import fingerprint
from fpr.scorers import QueryBatch, Scorer, register_scorer
from fpr.scorers.judges import parse
from fpr.scorers.judges.cache import read_sealed, write_json_atomic
from fpr.scorers.judges.client import ImageRef, JudgeClient, JudgeFailure, Tally, image_part, text_part
from fpr.scorers.judges.config import JudgeConfig, checked_base_url, client_options, judge_config, key_from_env
from fpr.scorers.judges.prompts import load_template
from fpr.scorers.judges.scoring import COST_METRICS, score_with_judge
from fpr.scorers.options import Option, resolve
from fpr.scorers.vistar.roles import Aspect, aspect

NAME = "hwpq"
LEVELS = ("L1", "L2", "L3", "L4")
TOLERANCE = 1e-3


def _schema() -> dict:
    return json.loads(resources.files("fpr.scorers.judges").joinpath("schemas/hwpq_questionnaire.schema.json")
                      .read_text(encoding="utf-8"))


def validate_questionnaire(q) -> str | None:
    """None when ``q`` is a valid questionnaire, else the first problem in words."""
    import jsonschema

    try:
        jsonschema.validate(q, _schema())
    except jsonschema.ValidationError as exc:
        where = "/".join(str(p) for p in exc.absolute_path) or "top level"
        return f"{where}: {exc.message[:160]}"
    levels = [lv["level"] for lv in q["levels"]]
    if sorted(levels) != list(LEVELS):
        return f"levels must be L1, L2, L3, L4 once each, got {', '.join(levels)}"
    total = sum(lv["weight"] for lv in q["levels"])
    if abs(total - 1) > TOLERANCE:
        return f"level weights sum to {total:.4g}, not 1"
    for lv in q["levels"]:
        s = sum(x["weight"] for x in lv["questions"])
        if abs(s - 1) > TOLERANCE:
            return f"question weights of {lv['level']} sum to {s:.4g}, not 1"
        for x in lv["questions"]:
            if x["positive"].strip().lower() == x["negative"].strip().lower():
                return f"a pair of {lv['level']} repeats the same question as positive and negative"
    return None


def hwpq_score(questionnaire: dict, pairs: dict[tuple[str, int], float]) -> tuple[float, dict[str, float]]:
    """(score, per-level scores) from pair scores ``{(level, question index): 1.0, 0.0 or NaN}``.

    ``L = sum_q w_q * pair_q``, ``score = sum_l w_l * L_l``; a NaN pair makes its level and the score NaN.
    """
    levels: dict[str, float] = {}
    score = 0.0
    for lv in questionnaire["levels"]:
        s = 0.0
        for j, x in enumerate(lv["questions"]):
            s += x["weight"] * pairs[(lv["level"], j)]
        levels[lv["level"]] = s
        score += lv["weight"] * s
    return score, levels


class _Questionnaires:
    """One questionnaire per distinct prompt: from the workspace store, else generated once (thread-safe)."""

    def __init__(self, client: JudgeClient, max_attempts: int):
        self.client = client
        self.t = load_template("hwpq_questionnaire")
        self.root = client.cache.root / "questionnaires"
        self.max_attempts = max_attempts
        self._locks: dict[tuple, threading.Lock] = {}
        self._memo: dict[tuple, dict | JudgeFailure] = {}
        self._guard = threading.Lock()

    def path(self, prompt: str, asp: Aspect | None):
        key = fingerprint({"model": self.client.config.model, "template": self.t.tag, "digest": self.t.digest,
                           "seed": self.client.config.seed, "prompt": prompt,
                           **({"aspect": asp.code} if asp else {})})
        return self.root / f"{key}.json"

    def request_text(self, prompt: str, asp: Aspect | None) -> str:
        text = self.t.render("user", prompt=prompt)
        if asp is not None:
            text += "\n\n" + self.t.render("aspect", aspect=asp.name, focus=asp.focus)
        return text

    def get(self, prompt: str, asp: Aspect | None, tally: Tally) -> dict:
        memo_key = (prompt, asp.code if asp else None)
        with self._guard:
            lock = self._locks.setdefault(memo_key, threading.Lock())
        with lock:
            if memo_key not in self._memo:
                try:
                    self._memo[memo_key] = self._load_or_make(prompt, asp, tally)
                except JudgeFailure as exc:
                    self._memo[memo_key] = exc
            got = self._memo[memo_key]
        if isinstance(got, JudgeFailure):
            raise JudgeFailure(got.reason)
        return got

    def _load_or_make(self, prompt: str, asp: Aspect | None, tally: Tally) -> dict:
        path = self.path(prompt, asp)
        stored = read_sealed(path, path.stem, self.t.tag,
                             lambda e: validate_questionnaire(e.get("questionnaire")))
        if stored is not None:
            return stored["questionnaire"]
        msgs = [{"role": "system", "content": self.t.render("system")},
                {"role": "user", "content": self.request_text(prompt, asp)}]
        error = "no reply"
        for attempt in range(1, self.max_attempts + 1):
            reply = self.client.chat(msgs, template=self.t, tally=tally)
            try:
                q = parse.json_object(reply)
                error = validate_questionnaire(q)
            except JudgeFailure as exc:
                q, error = None, exc.reason
            if error is None:
                write_json_atomic(path, seal(path.stem, self.t.tag, {
                    "prompt": prompt, "aspect": asp.code if asp else None, "model": self.client.config.model,
                    "template": self.t.tag, "attempts": attempt, "questionnaire": q}))
                return q
            msgs = msgs + [{"role": "assistant", "content": reply.content or ""},
                           {"role": "user", "content": self.t.render("invalid", error=error)}]
        raise JudgeFailure(f"questionnaire invalid after {self.max_attempts} attempts: {error}")


class HWPQ(Scorer):
    name = NAME
    description = "model judge: VISTAR hierarchical weighted P/N questionnaire per prompt, k-vote answers, 0-1"
    needs = frozenset({"image", "prompt"})
    metrics = ("score",) + LEVELS + COST_METRICS
    primary_metric = "score"
    options = (Option("votes", int, 3, "votes per question, majority decides (odd)", minimum=1),
               Option("max_attempts", int, 3, "questionnaire replies asked per prompt before giving up", minimum=1),
               Option("vote_temperature", float, 1.0, "sampling temperature of the answer votes", minimum=0.0),
               Option("aspect", str, "", "VISTAR aspect code (SF, CUL, MA, ...) for queries without an aspect "
                                         "column (empty: none)"),
               *(o for role, does in (("generator", "writes the questionnaires"), ("answerer", "answers them"))
                 for o in (Option(f"{role}_model", str, None, f"model that {does} (else hwpq.model)"),
                           Option(f"{role}_base_url", str, None, f"endpoint of the model that {does} "
                                                                 "(else OPENAI_BASE_URL)"),
                           Option(f"{role}_api_key_env", str, "OPENAI_API_KEY",
                                  f"environment variable holding the key of the model that {does}"))),
               *client_options())

    def configs(self, options: dict) -> tuple[JudgeConfig, JudgeConfig]:
        """(generator, answerer) configurations: the judge's, with each role's model, endpoint and key over it;
        the answerer samples at ``vote_temperature``."""
        base = judge_config(NAME, options)
        opt = resolve(NAME, self.options, options)

        def role(name: str) -> JudgeConfig:
            url = opt[f"{name}_base_url"]
            return replace(base, model=(opt[f"{name}_model"] or base.model).strip(),
                           base_url=checked_base_url(url, f"{NAME}.{name}_base_url") if url else base.base_url,
                           api_key=key_from_env(opt[f"{name}_api_key_env"]))

        return role("generator"), replace(role("answerer"), temperature=opt["vote_temperature"])

    def provenance(self, batch: QueryBatch) -> dict:
        gen, ans = self.configs(batch.options)
        return {**ans.provenance(load_template("hwpq_answer")),
                "generator": gen.provenance(load_template("hwpq_questionnaire"))}

    def aspects(self, batch: QueryBatch) -> list[Aspect | None]:
        """Each query's aspect: its ``aspect`` column, else ``hwpq.aspect``, else none."""
        default = str(resolve(NAME, self.options, batch.options)["aspect"]).strip()
        extras = batch.extras or [{}] * len(batch)
        out = []
        for e in extras:
            code = str((e or {}).get("aspect") or default).strip()
            out.append(aspect(code) if code and code.lower() != "nan" else None)
        return out

    def score(self, batch: QueryBatch) -> pd.DataFrame:
        rows = [i for i, p in enumerate(batch.prompts) if p]
        if not rows:
            return pd.DataFrame(columns=["query_id", "metric", "value", "note"])
        values = self.option_values(batch.options)
        votes, attempts = values["votes"], values["max_attempts"]
        if votes % 2 == 0:
            raise InputError(f"{NAME}.votes must be odd, got {votes}")
        aspects = self.aspects(batch)
        gen_cfg, cfg = self.configs(batch.options)
        client = JudgeClient(cfg, batch.workspace)
        store = _Questionnaires(JudgeClient(gen_cfg, batch.workspace), attempts)
        answer_t = load_template("hwpq_answer")
        metrics = ("score",) + LEVELS

        def vote(image: ImageRef, question: str, tally: Tally) -> bool:
            yes = 0
            for v in range(votes):
                msgs = [{"role": "system", "content": answer_t.render("system")},
                        {"role": "user", "content": [text_part(answer_t.render("user", question=question)),
                                                     image_part(image)]}]
                reply = client.chat(msgs, template=answer_t, params={"vote": v, "seed": cfg.seed + v}, tally=tally)
                yes += parse.true_false(reply)
            return yes * 2 > votes

        def judge(i: int, tally: Tally) -> dict:
            q = store.get(batch.prompts[i], aspects[i], tally)
            image = ImageRef.from_path(batch.paths[i], cfg.image_size)
            pairs: dict = {}
            notes: dict[str, list[str]] = {}
            for lv in q["levels"]:
                for j, x in enumerate(lv["questions"]):
                    try:
                        pairs[(lv["level"], j)] = float(vote(image, x["positive"], tally)
                                                        and not vote(image, x["negative"], tally))
                    except JudgeFailure as exc:
                        pairs[(lv["level"], j)] = math.nan
                        notes.setdefault(lv["level"], []).append(f"pair {j + 1}: {exc.reason}")
            score, levels = hwpq_score(q, pairs)
            out: dict = {}
            for name, value in levels.items():
                out[name] = (value, "; ".join(notes[name])) if name in notes else value
            out["score"] = (score, "missing pairs in " + ", ".join(sorted(notes))) if notes else score
            return out

        return score_with_judge(batch, NAME, client, metrics, judge, rows)


register_scorer(HWPQ())
