"""``cigeval``: the CIGEval agent, a judge that splits an evaluation into questions and calls tools.

For subject-driven generation the questions are *prompt following* (needs the
query's prompt) and *subject consistency* (needs a reference image: the query's
first). Each is answered in its own ReAct-style loop over the endpoint's
tool-calling API (``prompts/cigeval.txt``): the judge reasons, calls tools, reads
their results and ends with ``Score: N`` (0-10). Tools (:mod:`fpr.scorers.judges.tools`):

* ``grounding(image, text)``: boxes of an object, from an open-vocabulary
  detector (OWLv2; weights resolved offline, option ``cigeval.detector`` = folder);
* ``highlight(image, box)``: a new image with everything outside the box darkened
  to 1/4, shown to the judge;
* ``difference(image_a, image_b)``: boxes of the regions that differ;
* ``scene_graph(image)``: objects, attributes and relations, asked of the judge.

Metrics: ``prompt_following`` and ``subject_consistency`` (0-10), ``score`` = their
minimum (over the questions that apply; NaN with the reason when one of them is
missing), and ``trajectory``: value = number of tool calls, ``note`` = the whole
trajectory as JSON (every reply, tool call, argument and result). Options
(``cigeval.<name>``): ``tools`` (comma list, default all four), ``max_steps`` (judge
turns per question, 6), ``detector``, ``detector_threshold`` (0.1), plus the judge
client's (``model``, ``seed``, ``image_size``, ...).
"""
from __future__ import annotations

import json
import math

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
from fpr.scorers.judges.tools import DETECTOR_ID, Detector, difference, highlight
from fpr.scorers.options import Option

NAME = "cigeval"
TOOLS = ("grounding", "highlight", "difference", "scene_graph")
QUESTIONS = ("prompt_following", "subject_consistency")
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
                 detector: Detector | None, threshold: float):
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


def _array(path: str, size: int) -> np.ndarray:
    im = load_rgb(path)
    if max(im.size) > size:
        s = size / max(im.size)
        im = im.resize((max(1, round(im.width * s)), max(1, round(im.height * s))))
    return np.asarray(im, dtype=np.uint8).copy()


def ask(question: str, bench: _Bench, text: str, tools: list[dict], max_steps: int, trajectory: list) -> int:
    """One question's ReAct loop; returns the 0-10 score or raises JudgeFailure."""
    t, client = bench.t, bench.client
    content = [text_part(text)]
    for handle in ("generated", "reference"):
        if handle in bench.images:
            content += [text_part(f"Image '{handle}':"), image_part(bench.ref(handle))]
    messages = [{"role": "system", "content": t.render("system")}, {"role": "user", "content": content}]
    for step in range(max_steps):
        reply = client.chat(messages, template=t, tools=tools, params={"question": question}, tally=bench.tally)
        entry = {"question": question, "step": step, "content": reply.content, "cached": reply.cached}
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


class CIGEval(Scorer):
    name = NAME
    description = "model judge agent with tools (grounding, highlight, difference, scene graph): min of 0-10 sub-scores"
    needs = frozenset({"image", "references"})
    metrics = QUESTIONS + ("score", "trajectory") + COST_METRICS
    primary_metric = "score"
    options = (Option("tools", str, ",".join(TOOLS), "comma list of tools"),
               Option("max_steps", int, 6, "judge turns per question", minimum=1),
               Option("detector", str, None, "folder with the OWLv2 detector (config, weights, processor, tokenizer)"),
               Option("detector_threshold", float, 0.1, "grounding confidence threshold", minimum=0.0),
               *client_options())

    def provenance(self, batch: QueryBatch) -> dict:
        prov = judge_config(NAME, batch.options).provenance(load_template("cigeval"))
        values = self.option_values(batch.options)
        tools = values["tools"]
        prov["tools"] = tools
        if "grounding" in tools:
            det = Detector(values["detector"])
            prov["detector"] = {"id": DETECTOR_ID, "checksum": det.checksum, "threshold": values["detector_threshold"]}
        return prov

    def score(self, batch: QueryBatch) -> pd.DataFrame:
        opts = batch.options
        values = self.option_values(opts)
        names = [n.strip() for n in values["tools"].split(",") if n.strip()]
        bad = [n for n in names if n not in TOOLS]
        if bad:
            raise InputError(f"unknown {NAME} tool(s) {', '.join(bad)}", hint=f"valid: {', '.join(TOOLS)}")
        max_steps, threshold = values["max_steps"], values["detector_threshold"]
        cfg = judge_config(NAME, opts)
        client = JudgeClient(cfg, batch.workspace)
        detector = None
        if "grounding" in names:
            import torch

            dev = "cuda" if batch.device in ("auto", "cuda") and torch.cuda.is_available() else "cpu"
            detector = Detector(values["detector"], device=dev)
        t = load_template("cigeval")
        tools = [{"type": "function", "function": {"name": n, **TOOL_SPECS[n]}} for n in names]

        def judge(i: int, tally: Tally) -> dict:
            images = {"generated": _array(batch.paths[i], cfg.image_size)}
            refs, prompt = batch.reference_paths[i], batch.prompts[i]
            if refs:
                images["reference"] = _array(refs[0], cfg.image_size)
            trajectory: list = []
            out: dict = {}
            asked = [q for q, ok in (("prompt_following", bool(prompt)), ("subject_consistency", bool(refs))) if ok]
            for q in asked:  # a question that does not apply gets no row
                bench = _Bench({k: v for k, v in images.items() if q == "subject_consistency" or k == "generated"},
                               cfg.image_size, client, t, tally, detector, threshold)
                try:
                    out[q] = float(ask(q, bench, t.render(q, prompt=prompt or ""), tools, max_steps, trajectory))
                except JudgeFailure as exc:
                    out[q] = (math.nan, exc.reason)
                    trajectory.append({"question": q, "failure": exc.reason})
            failed = [f"{q}: {out[q][1]}" for q in asked if isinstance(out[q], tuple)]
            if not asked:
                out["score"] = (math.nan, "no question applies (no prompt and no reference)")
            elif failed:
                out["score"] = (math.nan, "; ".join(failed))
            else:
                out["score"] = min(out[q] for q in asked)
            n_calls = sum(len(e.get("tool_calls", [])) for e in trajectory)
            out["trajectory"] = (float(n_calls), json.dumps(trajectory, ensure_ascii=False))
            return out

        return score_with_judge(batch, NAME, client, QUESTIONS + ("score",), judge)


register_scorer(CIGEval())
