"""``refvnli``: RefVNLI (Slobodkin et al., 2025) -- textual alignment and subject preservation in one pass.

RefVNLI scores a (reference image, prompt, target image) triplet twice: *textual
alignment* (``ta``: does the prompt describe the target?) and *subject preservation*
(``sp``: is the reference's subject the target's?), each a probability of "yes". The
prompt marks the subject with ``<u>`` ... ``</u>``.

``refvnli.model`` picks the model:

- ``builtin`` (the default): ``fpr-refvnli-world-v1``, shipped inside fpr
  (``fpr/scorers/refvnli/weights/``): a small model trained by ``fpr refvnli train`` on
  triplets built from the world by the paper's rules (:mod:`fpr.scorers.refvnli.model`).
  It is a RefVNLI-*recipe* model for world-like images, **not** the authors' model.
- a folder written by ``fpr refvnli train`` (it holds ``fpr-refvnli.json``).
- a fine-tuned PaliGemma checkpoint (the authors' setup): a folder in the Hugging
  Face layout (``config.json``, ``*.safetensors``, tokenizer and processor files) or a
  repo id already in the local Hugging Face cache, loaded through ``transformers``'
  own classes from local files only, without remote code. The model generates two
  digits, ``ta`` then ``sp``, ``1`` = yes; each score is ``P('1') / (P('0') + P('1'))``
  of its token, ``sp`` conditioned on the first digit taken greedily among ``0``/``1``.

Per query: the target is the query image, the reference each of its references (the
values are the mean over them; ``note`` says how many). The subject markup: kept if the
prompt already has ``<u>``; else the query's ``subject`` column, if any, is wrapped; else
``[V]`` and the word after it (fpr's prompt convention); else no markup (``note`` says
so). Queries without a prompt or without references get NaN with the reason.
"""
from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pandas as pd

from fpr import keys, progress
from fpr.cache import load_once
from fpr.errors import InputError, NotFoundError
from fpr.images import load_rgb
from fpr.scorers import QueryBatch, Scorer, register_scorer
from fpr.scorers.options import Option

OPEN, CLOSE = "<u>", "</u>"


BUILTIN = "builtin"


def model_source(value: str | None) -> tuple[str, str]:
    """(kind, where) of a ``refvnli.model`` value: ``("fpr", folder)`` or ``("paligemma", folder or repo id)``.

    A folder that does not exist is a one-line error naming it and how to make one."""
    from fpr.scorers.refvnli import model as rm

    if value in (None, "", BUILTIN):
        return "fpr", str(rm.builtin_dir())
    where = Path(value).expanduser()
    if where.is_dir():
        return ("fpr" if rm.is_checkpoint(where) else "paligemma"), str(where)
    if "/" in value and not where.is_absolute() and not value.startswith((".", "~")) and value.count("/") == 1:
        return "paligemma", value  # a Hugging Face repo id, looked up in the local cache only
    raise NotFoundError(f"no RefVNLI checkpoint folder at {where}",
                        hint="train one with `fpr refvnli train --data DATA --out FOLDER`, pass a fine-tuned "
                             "PaliGemma folder, or use --scorer-option refvnli.model=builtin")


def mark_subject(prompt: str, subject: str | None = None) -> tuple[str, str]:
    """(prompt with the subject wrapped in <u>...</u>, how it was found)."""
    if OPEN in prompt:
        return prompt, "markup in the prompt"
    if subject and subject in prompt:
        return prompt.replace(subject, f"{OPEN}{subject}{CLOSE}", 1), "subject column"
    m = re.search(r"\[V\](\s+\w+)?", prompt)
    if m:
        return prompt[:m.start()] + OPEN + m.group(0) + CLOSE + prompt[m.end():], "[V] token"
    return prompt, "no subject markup (no <u>, subject column or [V] token)"


def load_refvnli(model: str, device: str = "auto"):
    """(processor, model, torch device, where) from local files only; a clear NotFoundError otherwise.
    One RefVNLI network is held per process (a PaliGemma is 3B parameters)."""
    return load_once("refvnli", ("paligemma", model, device), lambda: _load_paligemma(model, device), keep=1)


def _load_paligemma(model: str, device: str) -> tuple:
    try:
        import torch
        from transformers import AutoProcessor, PaliGemmaForConditionalGeneration
    except ImportError:
        raise NotFoundError("the refvnli scorer needs transformers", hint="pip install 'fpr[vistar]'") from None
    from fpr.encoders.registry import pick_device

    where = Path(model).expanduser()
    source = str(where) if where.is_dir() else model
    try:
        proc = AutoProcessor.from_pretrained(source, local_files_only=True, trust_remote_code=False)
        net = PaliGemmaForConditionalGeneration.from_pretrained(source, local_files_only=True,
                                                                trust_remote_code=False).eval()
    except OSError as exc:
        raise NotFoundError(f"cannot load the RefVNLI checkpoint '{model}' offline: {str(exc).splitlines()[0][:200]}",
                            hint="pass --scorer-option refvnli.model=FOLDER (a PaliGemma checkpoint folder or one "
                                 "written by `fpr refvnli train`), or refvnli.model=builtin") from None
    dev = pick_device(device)
    net = net.to(dev)
    ids = [proc.tokenizer.convert_tokens_to_ids(t) for t in ("0", "1")]
    if any(i is None or i == proc.tokenizer.unk_token_id for i in ids):
        raise InputError(f"the RefVNLI tokenizer at '{model}' has no '0'/'1' tokens", where=source)
    return proc, net, dev, source, ids


def score_triplet(loaded, reference, target, prompt: str) -> tuple[float, float]:
    """(ta, sp) for one (reference image, prompt, target image)."""
    import torch

    proc, net, dev, _, (id0, id1) = loaded
    inputs = proc(images=[[reference, target]], text=[f"{proc.image_token}{proc.image_token}{prompt}"],
                  return_tensors="pt")
    inputs.pop("labels", None)
    inputs = {k: v.to(dev) for k, v in inputs.items()}
    with torch.inference_mode():
        logits = net(**inputs).logits[0, -1].float()
        p = torch.softmax(logits, dim=-1)
        ta = float(p[id1] / (p[id0] + p[id1]))
        first = id1 if p[id1] >= p[id0] else id0
        ext = {"input_ids": torch.cat([inputs["input_ids"], inputs["input_ids"].new_tensor([[first]])], dim=1),
               "attention_mask": torch.cat([inputs["attention_mask"], inputs["attention_mask"].new_ones((1, 1))],
                                           dim=1),
               "pixel_values": inputs["pixel_values"]}
        if "token_type_ids" in inputs:  # the generated digit is suffix (causal) text
            ext["token_type_ids"] = torch.cat([inputs["token_type_ids"],
                                               inputs["token_type_ids"].new_ones((1, 1))], dim=1)
        p2 = torch.softmax(net(**ext).logits[0, -1].float(), dim=-1)
        sp = float(p2[id1] / (p2[id0] + p2[id1]))
    return ta, sp


def _fpr_scores(model: str, device: str):
    """A ``score(reference, target, prompt) -> (ta, sp)`` over a model written by ``fpr refvnli train``."""
    from fpr.scorers.refvnli import model as rm

    network = load_once("refvnli", ("fpr", model, device), lambda: rm.load_model(model, device), keep=1)

    def score(references: list, target, prompt: str) -> np.ndarray:
        probs, _ = network.score(references, [target] * len(references), [prompt] * len(references))
        return probs  # (n, 2): ta, sp
    return score, f"{network.card.get('id', '')} ({network.folder})"


def _paligemma_scores(model: str, device: str):
    loaded = load_refvnli(model, device)

    def score(references: list, target, prompt: str) -> np.ndarray:
        return np.array([score_triplet(loaded, r, target, prompt) for r in references])
    return score, loaded[3]


class RefVNLI(Scorer):
    name = "refvnli"
    description = "RefVNLI: subject preservation (sp) and textual alignment (ta) of (reference, prompt, image)"
    needs = frozenset({"image", "references", "prompt"})
    metrics = ("sp", "ta")
    primary_metric = "sp"
    options = (Option("model", str, BUILTIN, "builtin (fpr-refvnli-world-v1, shipped), a folder from "
                                             "`fpr refvnli train`, or a fine-tuned PaliGemma folder / cached repo id"),)

    def provenance(self, batch: QueryBatch) -> dict:
        """Which model made the values: its kind, place, and for fpr models the id and weights' SHA-256."""
        from fpr.scorers.refvnli import model as rm

        kind, model = model_source(self.option_values(batch.options)["model"])
        out = {"kind": kind, "model": model}
        if kind == "fpr" and rm.is_checkpoint(Path(model)):
            out["id"] = rm.read_card(Path(model)).get("id", "")
            out["weights_sha256"] = keys.sha256_hex((Path(model) / rm.WEIGHTS_NAME).read_bytes())
        return out

    def score(self, batch: QueryBatch) -> pd.DataFrame:
        kind, model = model_source(self.option_values(batch.options)["model"])
        extras = batch.extras or [{}] * len(batch)
        todo = [i for i in range(len(batch)) if batch.prompts[i] and batch.reference_paths[i]]
        scorer, label = (None, "") if not todo else (
            _fpr_scores(model, batch.device) if kind == "fpr" else _paligemma_scores(model, batch.device))
        rows = []
        for i in progress.bar(range(len(batch)), desc="refvnli", unit="query"):
            qid = batch.query_ids[i]
            if i not in todo:
                why = "no prompt" if not batch.prompts[i] else "no reference images"
                rows += [(qid, m, float("nan"), why) for m in self.metrics]
                continue
            subject = extras[i].get("subject")
            subject = None if subject is None or (isinstance(subject, float) and math.isnan(subject)) else str(subject)
            prompt, how = mark_subject(str(batch.prompts[i]), subject)
            scores = scorer([load_rgb(r) for r in batch.reference_paths[i]], load_rgb(batch.paths[i]), prompt)
            note = (f"model {label}; mean over {len(scores)} reference(s); subject: {how}; prompt: {prompt}")
            rows += [(qid, "sp", float(scores[:, 1].mean()), note), (qid, "ta", float(scores[:, 0].mean()), note)]
        return pd.DataFrame(rows, columns=["query_id", "metric", "value", "note"])


register_scorer(RefVNLI())
