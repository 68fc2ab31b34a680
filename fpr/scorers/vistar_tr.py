"""``vistar-tr``: text rendering (VISTAR's TR) -- OCR the image and compare with the intended string.

The intended text is the query's ``expected_text`` column, else the text inside double
quotes in its prompt (``a sign that says "OPEN"``; several quoted strings are joined with
a space). Both strings are normalised (Unicode NFKC, lower case unless
``vistar-tr.case=sensitive``, runs of white space collapsed) and compared by

- ``char_similarity``: 1 - Levenshtein distance / the longer length (rapidfuzz's
  normalised Levenshtein similarity), in [0, 1], on the strings with white space removed
  (OCR engines drop or add the spaces between rendered words; spacing is left to
  ``token_jaccard``);
- ``token_jaccard``: |A & B| / |A | B| over the sets of words (punctuation stripped);
- ``score``: ``w * char_similarity + (1 - w) * token_jaccard`` with ``w`` =
  ``vistar-tr.char_weight`` (default 0.5).

The OCR text goes into ``note``. OCR backends: ``rapidocr`` (default; PP-OCR's ONNX
models ship inside the ``rapidocr_onnxruntime`` wheel, so it runs offline) and
``tesseract`` (the Debian ``tesseract-ocr`` binary, run as a subprocess). A query
without an intended text gets NaN with that reason; an image with no legible text is a
real measurement (the OCR text is empty, both similarities are 0 unless the intended
text is empty too).
"""
from __future__ import annotations

import re
import shutil
import subprocess
import unicodedata
from typing import Callable

import numpy as np
import pandas as pd

from fpr import progress
from fpr.errors import InputError, NotFoundError
from fpr.images import load_rgb
from fpr.scorers import QueryBatch, Scorer, register_scorer
from fpr.scorers.options import Option

BACKENDS = ("rapidocr", "tesseract")
QUOTED = re.compile(r'"([^"]+)"|\u201c([^\u201d]+)\u201d')
_ENGINES: dict[str, Callable] = {}


def expected_text(extras: dict | None, prompt: str | None) -> str | None:
    """``expected_text`` from the query's extra columns, else the double-quoted text of the prompt."""
    v = (extras or {}).get("expected_text")
    if v is not None and not (isinstance(v, float) and np.isnan(v)) and str(v).strip() != "":
        return str(v)
    found = [a or b for a, b in QUOTED.findall(prompt or "")]
    return " ".join(found) if found else None


def normalise(text: str, *, case_sensitive: bool = False) -> str:
    t = unicodedata.normalize("NFKC", text or "")
    t = " ".join(t.split())
    return t if case_sensitive else t.lower()


def tokens(text: str) -> set[str]:
    return {w for w in re.split(r"[^\w]+", text) if w}


def char_similarity(ocr: str, expected: str) -> float:
    from rapidfuzz.distance import Levenshtein

    a, b = "".join(ocr.split()), "".join(expected.split())
    if not a and not b:
        return 1.0
    return float(Levenshtein.normalized_similarity(a, b))


def token_jaccard(ocr: str, expected: str) -> float:
    a, b = tokens(ocr), tokens(expected)
    if not a and not b:
        return 1.0
    return len(a & b) / len(a | b)


# --------------------------------------------------------------------------- OCR backends

def _rapidocr() -> Callable[[np.ndarray], str]:
    try:
        from rapidocr_onnxruntime import RapidOCR
    except ImportError:
        raise NotFoundError("the rapidocr OCR backend needs the rapidocr_onnxruntime package",
                            hint="pip install 'fpr[vistar]' (or rapidocr_onnxruntime), "
                                 "or use --scorer-option vistar-tr.backend=tesseract") from None
    # Detection on the image's longer side capped at 960 px (the default 'min' limit upscales small
    # images a lot), no angle classifier (rendered text is upright), one thread per session.
    engine = RapidOCR(det_limit_side_len=960, det_limit_type="max", use_cls=False,
                      intra_op_num_threads=1, inter_op_num_threads=1)

    def run(img: np.ndarray) -> str:
        result, _ = engine(img, use_cls=False)
        if not result:
            return ""
        # reading order: top to bottom by line, then left to right
        boxes = sorted(result, key=lambda r: (round(min(p[1] for p in r[0]) / 16), min(p[0] for p in r[0])))
        return " ".join(str(r[1]) for r in boxes)

    return run


def _tesseract() -> Callable[[np.ndarray], str]:
    exe = shutil.which("tesseract")
    if exe is None:
        raise NotFoundError("the tesseract OCR backend needs the tesseract binary on PATH",
                            hint="apt-get install tesseract-ocr, or use the default vistar-tr.backend=rapidocr")

    def run(img: np.ndarray) -> str:
        import io

        from PIL import Image

        buf = io.BytesIO()
        Image.fromarray(img).save(buf, format="PNG")
        proc = subprocess.run([exe, "stdin", "stdout", "--psm", "6"], input=buf.getvalue(), capture_output=True,
                              timeout=120)
        if proc.returncode != 0:
            raise InputError(f"tesseract failed: {proc.stderr.decode(errors='replace').strip()[:200]}")
        return " ".join(proc.stdout.decode(errors="replace").split())

    return run


def ocr_engine(backend: str) -> Callable[[np.ndarray], str]:
    """The OCR function of a backend, loaded once per process."""
    if backend not in BACKENDS:
        raise InputError(f"unknown vistar-tr.backend '{backend}'", hint=f"backends: {', '.join(BACKENDS)}")
    if backend not in _ENGINES:
        _ENGINES[backend] = _rapidocr() if backend == "rapidocr" else _tesseract()
    return _ENGINES[backend]


class VistarTR(Scorer):
    name = "vistar-tr"
    description = "text rendering: OCR text vs the intended string (normalised Levenshtein and token Jaccard)"
    needs = frozenset({"image"})
    metrics = ("score", "char_similarity", "token_jaccard")
    primary_metric = "score"
    options = (Option("backend", str, "rapidocr", "OCR backend", choices=tuple(BACKENDS)),
               Option("char_weight", float, 0.5, "weight of char_similarity in score (0..1)", minimum=0.0),
               Option("case", str, "insensitive", "letter case in the comparison",
                      choices=("insensitive", "sensitive")))

    def score(self, batch: QueryBatch) -> pd.DataFrame:
        opts = self.option_values(batch.options)
        backend, w, case = opts["backend"], opts["char_weight"], opts["case"]
        if w > 1.0:
            raise InputError(f"vistar-tr.char_weight must be in [0, 1], got {w}")
        extras = batch.extras or [{}] * len(batch)
        targets = [expected_text(extras[i], batch.prompts[i]) for i in range(len(batch))]
        engine = ocr_engine(backend) if any(t is not None for t in targets) else None
        rows = []
        for i in progress.bar(range(len(batch)), desc="vistar-tr: OCR", unit="img"):
            qid, target = batch.query_ids[i], targets[i]
            if target is None:
                note = "no expected text: add an expected_text column or quote the text in the prompt"
                rows += [(qid, m, float("nan"), note) for m in self.metrics]
                continue
            text = engine(np.asarray(load_rgb(batch.paths[i])))
            a = normalise(text, case_sensitive=case == "sensitive")
            b = normalise(target, case_sensitive=case == "sensitive")
            cs, tj = char_similarity(a, b), token_jaccard(a, b)
            note = f"ocr[{backend}]: {text}"
            rows += [(qid, "score", w * cs + (1 - w) * tj, note), (qid, "char_similarity", cs, note),
                     (qid, "token_jaccard", tj, note)]
        return pd.DataFrame(rows, columns=["query_id", "metric", "value", "note"])


register_scorer(VistarTR())
