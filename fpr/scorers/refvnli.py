"""``refvnli``: RefVNLI (Slobodkin et al., 2025) -- textual alignment and subject preservation in one pass.

RefVNLI is PaliGemma (3B, the multi-image variant) fine-tuned on (reference image,
prompt, target image) triplets to generate two digits: textual alignment, then subject
preservation, ``1`` = yes. The prompt marks the subject with ``<u>`` ... ``</u>``. At
inference each score is ``P('1') / (P('0') + P('1'))`` of its generated token: ``ta``
from the first, ``sp`` from the second (conditioned on the first, taken greedily
among ``0``/``1``).

The checkpoint loads through ``transformers``' own classes (``AutoProcessor``,
``PaliGemmaForConditionalGeneration``), from local files only and without remote code:
``refvnli.model`` is a folder in the Hugging Face layout (``config.json``,
``*.safetensors``, tokenizer and processor files) or a repo id already in the local
Hugging Face cache; by default the folder ``$FPR_WEIGHTS_DIR/refvnli``. Nothing is
downloaded.

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

from fpr import progress
from fpr.errors import InputError, NotFoundError
from fpr.images import load_rgb
from fpr.scorers import QueryBatch, Scorer, register_scorer
from fpr.scorers.options import Option

OPEN, CLOSE = "<u>", "</u>"
_MODELS: dict[tuple[str, str], tuple] = {}


def default_model_dir() -> Path:
    from fpr.encoders.weights import weights_dir

    return weights_dir() / "refvnli"


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
    """(processor, model, torch device, where) from local files only; a clear NotFoundError otherwise."""
    key = (model, device)
    if key in _MODELS:
        return _MODELS[key]
    try:
        import torch
        from transformers import AutoProcessor, PaliGemmaForConditionalGeneration
    except ImportError:
        raise NotFoundError("the refvnli scorer needs transformers", hint="pip install 'fpr[vistar]'") from None
    from fpr.encoders.registry import pick_device

    where = Path(model).expanduser()
    source = str(where) if where.is_dir() else model
    if not where.is_dir() and "/" not in model:
        raise NotFoundError(f"no RefVNLI checkpoint folder at {where}",
                            hint="put the published RefVNLI checkpoint (Hugging Face layout) there, or pass "
                                 "--scorer-option refvnli.model=FOLDER_OR_CACHED_REPO_ID")
    try:
        proc = AutoProcessor.from_pretrained(source, local_files_only=True, trust_remote_code=False)
        net = PaliGemmaForConditionalGeneration.from_pretrained(source, local_files_only=True,
                                                                trust_remote_code=False).eval()
    except OSError as exc:
        raise NotFoundError(f"cannot load the RefVNLI checkpoint '{model}' offline: {str(exc).splitlines()[0][:200]}",
                            hint="put the checkpoint folder at $FPR_WEIGHTS_DIR/refvnli or pass "
                                 "--scorer-option refvnli.model=FOLDER") from None
    dev = pick_device(device)
    net = net.to(dev)
    ids = [proc.tokenizer.convert_tokens_to_ids(t) for t in ("0", "1")]
    if any(i is None or i == proc.tokenizer.unk_token_id for i in ids):
        raise InputError(f"the RefVNLI tokenizer at '{model}' has no '0'/'1' tokens", where=source)
    if len(_MODELS) >= 1:
        _MODELS.clear()
    _MODELS[key] = (proc, net, dev, source, ids)
    return _MODELS[key]


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


class RefVNLI(Scorer):
    name = "refvnli"
    description = "RefVNLI: textual alignment (ta) and subject preservation (sp) of (reference, prompt, image)"
    needs = frozenset({"image", "references", "prompt"})
    metrics = ("sp", "ta")
    primary_metric = "sp"
    options = (Option("model", str, None, "checkpoint folder or cached HF repo id (none: $FPR_WEIGHTS_DIR/refvnli)"),)

    def score(self, batch: QueryBatch) -> pd.DataFrame:
        model = str(self.option_values(batch.options)["model"] or default_model_dir())
        extras = batch.extras or [{}] * len(batch)
        todo = [i for i in range(len(batch)) if batch.prompts[i] and batch.reference_paths[i]]
        loaded = load_refvnli(model, batch.device) if todo else None
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
            target = load_rgb(batch.paths[i])
            scores = np.array([score_triplet(loaded, load_rgb(r), target, prompt) for r in batch.reference_paths[i]])
            note = (f"model {loaded[3]}; mean over {len(scores)} reference(s); subject: {how}; prompt: {prompt}")
            rows += [(qid, "sp", float(scores[:, 1].mean()), note), (qid, "ta", float(scores[:, 0].mean()), note)]
        return pd.DataFrame(rows, columns=["query_id", "metric", "value", "note"])


register_scorer(RefVNLI())
