"""``cigeval``: the CIGEval agent, a judge that splits an evaluation into questions and calls tools.

The judge answers a subset of five sub-questions (ImagenHub's rating conditions),
chosen by the task (option ``cigeval.task``, or a queries column ``task``), and
``score`` is the minimum of their 0-10 scores (CIGEval's min aggregation):

====================  ===================================================  =========================
task                  sub-questions (in the released evaluation's order)   the query's references
====================  ===================================================  =========================
text-guided-ig        prompt_following                                     (none)
text-guided-ie        edit_following, minimal_edit                         1: source image
mask-guided-ie        edit_following, minimal_edit                         1: source image
subject-driven-ig     subject_consistency, prompt_following                1: subject
subject-driven-ie     subject_consistency, minimal_edit                    1: source, 2: subject
multi-concept-ic      subject_consistency (per subject), prompt_following  1, 2: the two subjects
control-guided-ig     control_following, prompt_following                 1: control image
====================  ===================================================  =========================

For the editing tasks the query's prompt is the editing instruction. ``auto``
(the default; fpr's variant, not one of the paper's tasks) asks prompt following
when the query has a prompt and subject consistency when it has a reference.
Each is answered in its own ReAct-style loop over the endpoint's
tool-calling API (``prompts/cigeval.txt``): the judge reasons, calls tools, reads
their results and ends with ``Score: N`` (0-10). Tools (:mod:`fpr.scorers.judges.tools`):

* ``grounding(image, text)``: boxes of an object, from an open-vocabulary
  detector (GroundingDINO as in the paper, or OWLv2 with ``cigeval.detector_model=owlv2``;
  weights resolved offline, option ``cigeval.detector`` = folder);
* ``highlight(image, box)``: a new image with everything outside the box darkened
  to 1/4, shown to the judge;
* ``difference(image_a, image_b)``: boxes of the regions that differ;
* ``scene_graph(image)``: objects, attributes and relations, asked of the judge.

Metrics: one per sub-question asked (0-10; multi-concept's ``subject_consistency`` is
the minimum over the two subjects, each in the note), ``score`` = the minimum of
the sub-scores (NaN with the reason when one is missing, e.g. a reference the task
needs), and ``trajectory``: value = number of tool calls, ``note`` = the whole
trajectory as JSON (every reply, tool call, argument and result). Options
(``cigeval.<name>``): ``task`` (above), ``tools`` (comma list, default all four), ``max_steps`` (judge
turns per question, 6), ``detector_model`` (``grounding-dino``), ``detector``,
``detector_threshold`` (the model's: 0.2 for GroundingDINO as released, 0.1 for OWLv2), plus the judge
client's (``model``, ``seed``, ``image_size``, ...).
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from fpr.errors import InputError
from fpr.images import load_rgb
from fpr.scorers import QueryBatch, Scorer, register_scorer
from fpr.scorers.judges import parse
from fpr.scorers.judges.client import ImageRef, JudgeClient, JudgeFailure, Tally, image_part, text_part
from fpr.scorers.judges.config import client_options, judge_config
from fpr.scorers.judges.prompts import load_template
from fpr.scorers.judges.scoring import COST_METRICS, score_with_judge
from fpr.scorers.judges.tools import DETECTORS, difference, highlight, load_detector
from fpr.scorers.options import Option

NAME = "cigeval"
TOOLS = ("grounding", "highlight", "difference", "scene_graph")
# The five sub-questions (ImagenHub's human-rating conditions A-E, which CIGEval's tasks are split into).
QUESTIONS = ("prompt_following", "edit_following", "minimal_edit", "subject_consistency", "control_following")
NEEDS_PROMPT = frozenset({"prompt_following", "edit_following"})


@dataclass(frozen=True)
class Ask:
    """One sub-question of a task: the question id and the condition image it is shown (handle, reference index)."""

    question: str
    image: tuple[str, int] | None = None  # e.g. ("source", 0): the query's first reference, shown as 'source'
    label: str | None = None  # the trajectory's name for a repeated question (multi-concept: one per subject)


# Per ImagenHub task, the sub-questions CIGEval asks, in the released evaluation's order; ``score`` is their
# minimum. The query's references play the roles given (reference k = the query's k-th reference image).
TASKS: dict[str, tuple[Ask, ...]] = {
    "text-guided-ig": (Ask("prompt_following"),),
    "text-guided-ie": (Ask("edit_following", ("source", 0)), Ask("minimal_edit", ("source", 0))),
    "mask-guided-ie": (Ask("edit_following", ("source", 0)), Ask("minimal_edit", ("source", 0))),
    "subject-driven-ig": (Ask("subject_consistency", ("reference", 0)), Ask("prompt_following")),
    "subject-driven-ie": (Ask("subject_consistency", ("reference", 1)), Ask("minimal_edit", ("source", 0))),
    "multi-concept-ic": (Ask("subject_consistency", ("reference", 0), "subject_consistency_1"),
                         Ask("subject_consistency", ("reference", 1), "subject_consistency_2"),
                         Ask("prompt_following")),
    "control-guided-ig": (Ask("control_following", ("control", 0)), Ask("prompt_following")),
}
ROLES = {"text-guided-ie": "reference 1 = the source image; prompt = the editing instruction",
         "mask-guided-ie": "reference 1 = the source image; prompt = the editing instruction",
         "subject-driven-ig": "reference 1 = the subject image",
         "subject-driven-ie": "reference 1 = the source image, reference 2 = the subject image",
         "multi-concept-ic": "references 1 and 2 = the two subject images",
         "control-guided-ig": "reference 1 = the control image"}
AUTO = "auto"  # fpr's variant: subject consistency when the query has a reference, prompt following when a prompt


def task_asks(task: str, has_prompt: bool, n_refs: int) -> tuple[Ask, ...]:
    """The sub-questions of ``task`` (``auto``: only those the query's inputs allow)."""
    if task == AUTO:
        return tuple(a for a, ok in ((Ask("prompt_following"), has_prompt),
                                     (Ask("subject_consistency", ("reference", 0)), n_refs > 0)) if ok)
    return TASKS[task]


def combine(scores: dict[str, float]) -> float:
    """CIGEval's score: the minimum of the sub-scores asked (labels as in :func:`task_asks`)."""
    return min(scores.values())


def missing_input(ask: Ask, has_prompt: bool, n_refs: int) -> str | None:
    """Why ``ask`` cannot be put for this query (None: it can)."""
    if ask.question in NEEDS_PROMPT and not has_prompt:
        return "needs the query's prompt"
    if ask.image is not None and ask.image[1] >= n_refs:
        return f"needs reference {ask.image[1] + 1} (the {ask.image[0]} image)"
    return None
_IMAGE = {"type": "string", "description": "image handle, e.g. generated or reference"}
TOOL_SPECS = {
    "grounding": {"description": "Find an object described in words; returns boxes [x0, y0, x1, y1] as fractions "
                                 "of the image size, with confidences.",
                  "parameters": {"type": "object", "properties": {"image": _IMAGE, "text": {"type": "string"}},
                                 "required": ["image", "text"]}},
    "highlight": {"description": "Darken everything outside a box [x0, y0, x1, y1] (fractions); returns a new "
                                 "image handle and shows the image.",
                  "parameters": {"type": "object", "properties": {
                      "image": _IMAGE, "box": {"type": "array", "items": {"type": "number"}}},
                      "required": ["image", "box"]}},
    "difference": {"description": "Boxes of the regions where two images differ (the second resized to the first).",
                   "parameters": {"type": "object", "properties": {"image_a": _IMAGE, "image_b": _IMAGE},
                                  "required": ["image_a", "image_b"]}},
    "scene_graph": {"description": "Objects, attributes and relations in an image.",
                    "parameters": {"type": "object", "properties": {"image": _IMAGE}, "required": ["image"]}},
}


class _Bench:
    """The images of one question, by handle, and the tools that act on them."""

    def __init__(self, images: dict[str, np.ndarray], size: int, client: JudgeClient, template, tally: Tally,
                 detector, threshold: float):
        self.images = dict(images)
        self.size, self.client, self.t, self.tally = size, client, template, tally
        self.detector, self.threshold = detector, threshold
        self.n = 0

    def ref(self, handle: str) -> ImageRef:
        return ImageRef.from_array(self.images[handle], label=handle)

    def _get(self, args: dict, key: str) -> np.ndarray:
        h = args.get(key)
        if h not in self.images:
            raise InputError(f"unknown image handle {h!r}; known: {', '.join(self.images)}")
        return self.images[h]

    def run(self, name: str, args: dict) -> tuple[dict, str | None]:
        """(result for the judge, handle of a new image to show or None)."""
        if name == "grounding":
            if self.detector is None:
                raise InputError("grounding is not enabled")
            im = self._get(args, "image")
            return {"boxes": self.detector.detect(_pil(im), str(args.get("text", "")),
                                                  threshold=self.threshold)}, None
        if name == "highlight":
            out = highlight(self._get(args, "image"), args.get("box"))
            self.n += 1
            handle = f"highlight-{self.n}"
            self.images[handle] = out
            return {"image": handle}, handle
        if name == "difference":
            return {"regions": difference(self._get(args, "image_a"), self._get(args, "image_b"))}, None
        if name == "scene_graph":
            im = self._get(args, "image")
            msgs = [{"role": "user", "content": [text_part(self.t.render("scene_graph")),
                                                 image_part(ImageRef.from_array(im))]}]
            reply = self.client.chat(msgs, template=self.t, params={"tool": "scene_graph"}, tally=self.tally)
            if parse.refusal_reason(reply) or not reply.content:
                raise InputError(parse.refusal_reason(reply) or "empty scene graph reply")
            return {"scene_graph": reply.content}, None
        raise InputError(f"unknown tool {name!r}")


def _pil(arr: np.ndarray):
    from PIL import Image

    return Image.fromarray(arr, "RGB")


def judge_array(path: str, size: int) -> np.ndarray:
    """The RGB array the tools work on: the image, its longer side shrunk to ``size`` (never enlarged)."""
    im = load_rgb(path)
    if max(im.size) > size:
        s = size / max(im.size)
        im = im.resize((max(1, round(im.width * s)), max(1, round(im.height * s))))
    return np.asarray(im, dtype=np.uint8).copy()


def ask(question: str, bench: _Bench, text: str, tools: list[dict], max_steps: int, trajectory: list,
        paths: dict[str, str] | None = None) -> int:
    """One question's ReAct loop; returns the 0-10 score or raises JudgeFailure.

    ``paths``: the files behind the image handles, kept in the trajectory for its export."""
    t, client = bench.t, bench.client
    content = [text_part(text)]
    for handle in bench.images:  # the generated image, then the question's condition image
        content += [text_part(f"Image '{handle}':"), image_part(bench.ref(handle))]
    messages = [{"role": "system", "content": t.render("system")}, {"role": "user", "content": content}]
    for step in range(max_steps):
        reply = client.chat(messages, template=t, tools=tools, params={"question": question}, tally=bench.tally)
        entry = {"question": question, "step": step, "content": reply.content, "cached": reply.cached}
        if step == 0:  # the first observation, so a trajectory can be replayed for agent tuning
            entry["prompt"] = text
            entry["images"] = {h: (paths or {}).get(h) for h in bench.images}
        trajectory.append(entry)
        if not reply.tool_calls:
            score = parse.final_score(reply, 0, 10)
            entry["score"] = score
            return score
        messages.append({"role": "assistant", "content": reply.content,
                         "tool_calls": [{"id": c["id"], "type": "function",
                                         "function": {"name": c["name"], "arguments": c["arguments"]}}
                                        for c in reply.tool_calls]})
        shown = []
        entry["tool_calls"] = []
        for c in reply.tool_calls:
            try:
                args = json.loads(c["arguments"] or "{}")
                if not isinstance(args, dict):
                    raise InputError("tool arguments must be a JSON object")
                result, new = bench.run(c["name"], args)
            except (json.JSONDecodeError, InputError) as exc:
                result, new = {"error": exc.what if isinstance(exc, InputError) else f"invalid JSON: {exc.msg}"}, None
                args = c["arguments"]
            entry["tool_calls"].append({"tool": c["name"], "arguments": args, "result": result})
            messages.append({"role": "tool", "tool_call_id": c["id"], "content": json.dumps(result)})
            if new:
                shown.append(new)
        if shown:
            parts = []
            for h in shown:
                parts += [text_part(f"Image '{h}':"), image_part(bench.ref(h))]
            messages.append({"role": "user", "content": parts})
    raise JudgeFailure(f"no final score after {max_steps} judge turns")


def agent_turns(trajectory: list[dict], system: str) -> dict[str, list[dict]]:
    """Per question, its ReAct trajectory as agent-tuning turns <o_0, t_1, a_1, o_1, ..., t_n, a_n, o_n>.

    Each turn is ``{"role": "observation" | "thought" | "action", "content", "loss"}``; ``loss`` is True
    only on thoughts and actions (the paper trains on those and masks the preceding context). o_0 is the
    system text, the question and its images; an action is a tool call (``{"tool", "arguments"}``) or the
    final answer (``{"answer": score}``); o_i is the tool's result (a new image's handle for highlight);
    o_n records the score. Questions that failed (no final score) are left out.
    """
    out: dict[str, list[dict]] = {}
    failed = {e["question"] for e in trajectory if "failure" in e}
    for e in trajectory:
        q = e.get("question")
        if q is None or "step" not in e or q in failed:
            continue
        turns = out.setdefault(q, [])
        if e["step"] == 0:
            turns.append({"role": "observation", "loss": False,
                          "content": {"system": system, "text": e.get("prompt"), "images": e.get("images")}})
        turns.append({"role": "thought", "content": e.get("content") or "", "loss": True})
        calls = e.get("tool_calls") or []
        for c in calls:
            turns.append({"role": "action", "content": {"tool": c["tool"], "arguments": c["arguments"]}, "loss": True})
        for c in calls:
            turns.append({"role": "observation", "content": {"tool": c["tool"], "result": c["result"]}, "loss": False})
        if "score" in e:
            turns += [{"role": "action", "content": {"answer": e["score"]}, "loss": True},
                      {"role": "observation", "content": {"score": e["score"]}, "loss": False}]
    return out


def query_task(batch: QueryBatch, i: int, default: str) -> str:
    """The query's task: its ``task`` column (queries table) if set, else the ``cigeval.task`` option."""
    extra = (batch.extras[i] if batch.extras else None) or {}
    task = extra.get("task")
    task = default if task is None or (isinstance(task, float) and math.isnan(task)) or task == "" else str(task)
    if task != AUTO and task not in TASKS:
        raise InputError(f"unknown {NAME} task '{task}' for query {batch.query_ids[i]}",
                         hint=f"valid: {AUTO}, {', '.join(TASKS)} (queries column 'task' or option {NAME}.task)")
    return task


class CIGEval(Scorer):
    name = NAME
    description = "model judge agent with tools (grounding, highlight, difference, scene graph): min of 0-10 sub-scores"
    needs = frozenset({"image", "references"})
    metrics = QUESTIONS + ("score", "trajectory") + COST_METRICS
    primary_metric = "score"
    options = (Option("task", str, AUTO, f"ImagenHub task whose sub-questions are asked ({', '.join(TASKS)}) or "
                                         f"{AUTO} (prompt following if a prompt, subject consistency if a reference); "
                                         "a queries column 'task' overrides it per query"),
               Option("tools", str, ",".join(TOOLS), "comma list of tools"),
               Option("max_steps", int, 6, "judge turns per question", minimum=1),
               Option("detector_model", str, "grounding-dino", f"grounding model: {', '.join(DETECTORS)}"),
               Option("detector", str, None, "folder with the grounding model (config, weights, processor, tokenizer)"),
               Option("detector_threshold", float, None, "grounding confidence threshold (default: the model's, "
                                                         "GroundingDINO 0.2 as CIGEval, OWLv2 0.1)", minimum=0.0),
               *client_options())

    def provenance(self, batch: QueryBatch) -> dict:
        prov = judge_config(NAME, batch.options).provenance(load_template("cigeval"))
        values = self.option_values(batch.options)
        tools = values["tools"]
        prov["tools"] = tools
        prov["task"] = values["task"]
        if "grounding" in tools:
            det = load_detector(values["detector_model"], values["detector"])
            threshold = values["detector_threshold"]
            prov["detector"] = {"id": det.model_id, "checksum": det.checksum,
                                "threshold": det.default_threshold if threshold is None else threshold}
        return prov

    def score(self, batch: QueryBatch) -> pd.DataFrame:
        opts = batch.options
        values = self.option_values(opts)
        names = [n.strip() for n in values["tools"].split(",") if n.strip()]
        bad = [n for n in names if n not in TOOLS]
        if bad:
            raise InputError(f"unknown {NAME} tool(s) {', '.join(bad)}", hint=f"valid: {', '.join(TOOLS)}")
        tasks = [query_task(batch, i, values["task"]) for i in range(len(batch))]  # all checked before any call
        max_steps, threshold = values["max_steps"], values["detector_threshold"]
        if values["detector_model"] not in DETECTORS:
            raise InputError(f"unknown grounding detector '{values['detector_model']}'",
                             hint=f"valid: {', '.join(DETECTORS)} (option {NAME}.detector_model)")
        cfg = judge_config(NAME, opts)
        client = JudgeClient(cfg, batch.workspace)
        detector = None
        if "grounding" in names:
            import torch

            dev = "cuda" if batch.device in ("auto", "cuda") and torch.cuda.is_available() else "cpu"
            detector = load_detector(values["detector_model"], values["detector"], device=dev)
            threshold = detector.default_threshold if threshold is None else threshold
        t = load_template("cigeval")
        tools = [{"type": "function", "function": {"name": n, **TOOL_SPECS[n]}} for n in names]

        def judge(i: int, tally: Tally) -> dict:
            refs, prompt, task = batch.reference_paths[i], batch.prompts[i], tasks[i]
            generated = judge_array(batch.paths[i], cfg.image_size)
            asks = task_asks(task, bool(prompt), len(refs))
            trajectory: list = [{"task": task, "questions": [a.label or a.question for a in asks]}]
            got: dict[str, float | tuple] = {}
            for a in asks:
                label = a.label or a.question
                why = missing_input(a, bool(prompt), len(refs))
                if why:
                    got[label] = (math.nan, why)
                    continue
                images, paths = {"generated": generated}, {"generated": batch.paths[i]}
                if a.image is not None:
                    images[a.image[0]] = judge_array(refs[a.image[1]], cfg.image_size)
                    paths[a.image[0]] = refs[a.image[1]]
                bench = _Bench(images, cfg.image_size, client, t, tally, detector, threshold)
                try:
                    got[label] = float(ask(label, bench, t.render(a.question, prompt=prompt or ""), tools,
                                           max_steps, trajectory, paths))
                except JudgeFailure as exc:
                    got[label] = (math.nan, exc.reason)
                    trajectory.append({"question": label, "failure": exc.reason})
            out = _question_rows(asks, got)
            failed = [f"{k}: {v[1]}" for k, v in got.items() if isinstance(v, tuple)]
            if not asks:
                out["score"] = (math.nan, "no question applies (no prompt and no reference)")
            elif failed:
                out["score"] = (math.nan, "; ".join(failed))
            else:
                out["score"] = combine(got)
            n_calls = sum(len(e.get("tool_calls", [])) for e in trajectory)
            out["trajectory"] = (float(n_calls), json.dumps(trajectory, ensure_ascii=False))
            return out

        return score_with_judge(batch, NAME, client, QUESTIONS + ("score",), judge)


def _question_rows(asks: tuple[Ask, ...], got: dict) -> dict:
    """One row per question asked; a question asked once per subject is their minimum, each named in the note."""
    out: dict = {}
    for q in dict.fromkeys(a.question for a in asks):
        labels = [a.label or a.question for a in asks if a.question == q]
        vals = [got[k] for k in labels]
        if len(labels) == 1:
            out[q] = vals[0]
            continue
        note = ", ".join(f"{k}: {v[0] if isinstance(v, tuple) else v:g}" for k, v in zip(labels, vals))
        bad = [f"{k}: {v[1]}" for k, v in zip(labels, vals) if isinstance(v, tuple)]
        out[q] = (math.nan, "; ".join(bad)) if bad else (min(vals), note)
    return out


register_scorer(CIGEval())
