"""``dreambench-concept``: a model judge's concept-preservation score (DreamBench++ style), and a gallery-aware variant.

``mode=pair`` (default), the "DB++" column of the paper's tables: the judge sees
the query's first reference image and the query, reasons, and ends with
``Score: N`` (N an integer 0-4); metric ``score`` = N / 4 (with ``n`` > 1 samples, the
mean of those that parse). Prompt: ``prompts/dreambench_concept.txt``, or any file in
the same format with ``dreambench-concept.template=PATH`` (e.g. DreamBench++'s own, see
``docs/judges.md``); ``reply_format`` ``last-line`` or ``dreambench`` as in
:mod:`fpr.scorers.dreambench.prompt`. Sampling and image encoding default to
DreamBench++'s released settings (:data:`~fpr.scorers.judges.client.DREAMBENCH_PLUS_DEFAULTS`).

``mode=choice``, beyond the paper: the judge is shown the query and one image of
each of the ``k`` gallery identities nearest to it under the run's encoder (in
the query's group; for each identity its gallery image most similar to the
query), in a seeded shuffled order with letters, and names the one it shows
(``Answer: X`` or ``Answer: none``). Metrics: ``choice_correct`` (1 when it names
the query's identity), ``choice_in_options`` (1 when that identity is among the
options) and ``retrieval_correct`` (1 when the nearest identity is the query's:
the retrieval's answer to the same question). ``mode=both`` does both.

Options (``dreambench-concept.<name>``, declared in :attr:`DreamBenchConcept.options`):
``mode``, ``k`` (4, at most 26), ``choice_scope`` (``group`` or ``all``), ``template``,
``reply_format``, plus the judge client's options (see
:func:`fpr.scorers.judges.client.client_options`). Refusals, unparsable replies and
failed requests give NaN with the reason in ``note``.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from fpr.errors import InputError
from fpr.keys import fingerprint
from fpr.scorers import QueryBatch, Scorer, register_scorer
from fpr.scorers.judges import parse
from fpr.scorers.judges.client import ImageRef, JudgeClient, Tally, image_part, text_part
from fpr.scorers.judges.config import DREAMBENCH_PLUS_DEFAULTS, client_options, judge_config
from fpr.scorers.judges.prompts import Template, load_template, load_template_file
from fpr.scorers.judges.scoring import COST_METRICS, score_with_judge, template_messages, zero_to_four
from fpr.scorers.options import Option, resolve

NAME = "dreambench-concept"
MODES = ("pair", "choice", "both")
LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
CHOICE_METRICS = ("choice_correct", "choice_in_options", "retrieval_correct")


class GalleryIdentities:
    """The run's gallery grouped by identity, to find the identities nearest to a query (vectorised)."""

    def __init__(self, batch: QueryBatch, scope: str):
        ids = np.asarray(batch.gallery_identities, dtype=object)
        groups = np.asarray(batch.gallery_groups, dtype=object)
        keys = ids if scope == "group" else np.asarray([f"{g}/{i}" for g, i in zip(groups, ids)], dtype=object)
        self.order = np.argsort(keys.astype(str), kind="stable")
        sk = keys[self.order]
        self.scope = scope
        self.starts = np.flatnonzero(np.r_[True, sk[1:] != sk[:-1]]) if len(sk) else np.zeros(0, dtype=np.int64)
        self.ends = np.r_[self.starts[1:], len(sk)]
        self.names = sk[self.starts]  # sorted, so an index is also the name's rank
        self.groups = groups[self.order]
        self.paths = np.asarray(batch.gallery_paths, dtype=object)[self.order]

    def nearest(self, sims: np.ndarray, group: str, k: int) -> list[tuple[str, str, float]]:
        """The ``k`` identities nearest to a query given its similarities to the gallery rows:
        (identity, its gallery path most similar to the query, similarity)."""
        if not len(self.starts):
            return []
        s = np.asarray(sims, dtype=np.float64)[self.order]
        if self.scope == "group":
            s = np.where(self.groups == group, s, -np.inf)
        best = np.maximum.reduceat(s, self.starts)
        cand = np.flatnonzero(np.isfinite(best))
        chosen = cand[np.lexsort((cand, -best[cand]))][:k]  # by similarity, ties by name
        out = []
        for j in chosen:
            item = self.starts[j] + int(np.argmax(s[self.starts[j]:self.ends[j]]))
            out.append((str(self.names[j]), str(self.paths[item]), float(best[j])))
        return out


def shuffled(options: list, seed: int, query_id: str) -> list:
    """A deterministic order that does not reveal the similarity ranking."""
    rng = np.random.default_rng(int(fingerprint({"q": query_id, "seed": seed})[:15], 16))
    return [options[j] for j in rng.permutation(len(options))]


class DreamBenchConcept(Scorer):
    name = NAME
    description = "model judge: concept preservation 0-4 vs the reference (DreamBench++), /4; or multiple choice"
    needs = frozenset({"image", "references"})
    metrics = ("score",) + CHOICE_METRICS + COST_METRICS
    primary_metric = "score"
    options: tuple[Option, ...] = (
        Option("mode", str, "pair", "pair (the paper's DB++), choice (multiple choice over the gallery) or both",
               choices=MODES),
        Option("k", int, 4, "choice: number of nearest gallery identities offered (2-26)", minimum=2),
        Option("choice_scope", str, "group", "choice: the query's group or all groups", choices=("group", "all")),
        Option("template", str, None, "pair: prompt template file (default: the shipped dreambench_concept.txt)"),
        Option("reply_format", str, "last-line", "how the score is read: last-line (a final 'Score: N' line) or "
                                                 "dreambench (exactly one 'Score: N' anywhere)",
               choices=parse.REPLY_FORMATS),
    ) + client_options(DREAMBENCH_PLUS_DEFAULTS)
    _fingerprints: list[str] | None = None  # system fingerprints of the last scoring, for its provenance

    def _template(self, values: dict) -> Template:
        path = values["template"]
        return load_template_file(path) if path else load_template("dreambench_concept")

    def provenance(self, batch: QueryBatch) -> dict:
        values = resolve(NAME, self.options, batch.options)
        out = judge_config(NAME, batch.options, DREAMBENCH_PLUS_DEFAULTS).provenance(
            self._template(values), load_template("dreambench_choice"), fingerprints=self._fingerprints)
        return {**out, "template_path": values["template"], "reply_format": values["reply_format"]}

    def uses_gallery(self, options: dict) -> bool:
        return resolve(NAME, self.options, options)["mode"] != "pair"

    def score(self, batch: QueryBatch) -> pd.DataFrame:
        values = resolve(NAME, self.options, batch.options)
        mode, k, scope = values["mode"], values["k"], values["choice_scope"]
        if mode != "pair":
            if batch.query_vectors is None or batch.gallery_scores is None or batch.gallery_paths is None:
                raise InputError(f"{NAME}.mode={mode} needs the run's query vectors and its gallery",
                                 hint=f"run it through 'fpr query' or 'fpr score', which provide them")
            if k > len(LETTERS):
                raise InputError(f"scorer option {NAME}.k must be 2-26, got {k}")
        cfg = judge_config(NAME, batch.options, DREAMBENCH_PLUS_DEFAULTS)
        client = JudgeClient(cfg, batch.workspace)
        pair_t, choice_t = self._template(values), load_template("dreambench_choice")
        metrics = (("score",) if mode != "choice" else ()) + (CHOICE_METRICS if mode != "pair" else ())

        def pair(i: int, tally: Tally) -> dict:
            refs = batch.reference_paths[i]
            if not refs:
                return {"score": (math.nan, "no reference image for this query")}
            msgs = template_messages(pair_t, [ImageRef.from_path(refs[0], cfg.encoding),
                                              ImageRef.from_path(batch.paths[i], cfg.encoding)])
            return zero_to_four(client, msgs, pair_t, tally, values["reply_format"])

        gallery = GalleryIdentities(batch, scope) if mode != "pair" else None

        def choice(i: int, tally: Tally) -> dict:
            sims = np.asarray(batch.gallery_scores(batch.query_vectors[i:i + 1]))[0]
            opts_i = gallery.nearest(sims, batch.groups[i], k)
            truth = batch.identities[i] if scope == "group" else f"{batch.groups[i]}/{batch.identities[i]}"
            out = {"choice_in_options": float(any(o[0] == truth for o in opts_i)),
                   "retrieval_correct": float(bool(opts_i) and opts_i[0][0] == truth)}
            order = shuffled(opts_i, cfg.seed, batch.query_ids[i])
            letters = LETTERS[:len(order)]
            content = [text_part(choice_t.render("user", letters=", ".join(letters))),
                       image_part(ImageRef.from_path(batch.paths[i], cfg.encoding))]
            for letter, (_, path, _) in zip(letters, order):
                content += [text_part(f"Candidate {letter}:"), image_part(ImageRef.from_path(path, cfg.encoding))]
            msgs = [{"role": "system", "content": choice_t.render("system")}, {"role": "user", "content": content}]
            try:
                ans = parse.final_label(client.chat(msgs, template=choice_t, tally=tally), "Answer",
                                        r"[A-Za-z]|none").upper()
            except parse.JudgeFailure as exc:
                return {**out, "choice_correct": (math.nan, exc.reason)}
            if ans != "NONE" and ans not in letters:
                return {**out, "choice_correct": (math.nan, f"unparsable reply: answer '{ans}' is not one of "
                                                            f"{', '.join(letters)}")}
            picked = None if ans == "NONE" else order[letters.index(ans)][0]
            return {**out, "choice_correct": (float(picked == truth), f"picked {picked or 'none'}")}

        def judge(i: int, tally: Tally) -> dict:
            out: dict = {}
            if mode != "choice":
                out.update(pair(i, tally))
            if mode != "pair":
                out.update(choice(i, tally))
            return out

        out = score_with_judge(batch, NAME, client, metrics, judge)
        self._fingerprints = sorted(client.fingerprints)
        return out


register_scorer(DreamBenchConcept())
