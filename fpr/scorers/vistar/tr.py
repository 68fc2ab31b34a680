"""``vistar-tr``: text rendering (VISTAR's TR) -- OCR the image and compare with the intended string.

The intended text is the query's ``expected_text`` column, else the text inside double
quotes in its prompt (``a sign that says "OPEN"``; several quoted strings are joined with
a space). Both strings are normalised (Unicode NFKC, lower case unless
``vistar-tr.case=sensitive``, runs of white space collapsed) and compared by

- ``char_similarity`` (VISTAR's): 1 - Levenshtein distance / the longer length
  (rapidfuzz's normalised Levenshtein similarity), in [0, 1], spaces included;
- ``token_jaccard`` (VISTAR's): |A & B| / |A | B| over the sets of words (punctuation stripped);
- ``score`` (VISTAR's TR): ``w * char_similarity + (1 - w) * token_jaccard`` with ``w`` =
  ``vistar-tr.char_weight`` (default 0.5);
- ``char_similarity_nospace``, ``token_jaccard_aligned`` and ``score_robust`` (fpr's
  variant, the same combination): the same measures blind to the OCR's spacing -- OCR
  engines drop or add the spaces between rendered words ("HARBORLIGHTS CAFE"), which
  VISTAR's Jaccard counts as wrong words. See :func:`aligned_ocr_tokens`.

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
from dataclasses import dataclass
from typing import Callable

import numpy as np
import pandas as pd

from fpr import progress
from fpr.cache import load_once
from fpr.errors import InputError, NotFoundError
from fpr.images import load_rgb, shape_reason
from fpr.scorers import QueryBatch, Scorer, register_scorer
from fpr.scorers.options import Option, resolve

BACKENDS = ("rapidocr", "tesseract")
DEFAULT_UNCLIP = 1.45  # RapidOCR's is 1.6; calibrated in benchmarks/vistar_known_answers.py
QUOTED = re.compile(r'"([^"]+)"|\u201c([^\u201d]+)\u201d')


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
    """VISTAR's character-level similarity: 1 - Levenshtein / longer length, spaces included."""
    from rapidfuzz.distance import Levenshtein

    if not ocr and not expected:
        return 1.0
    return float(Levenshtein.normalized_similarity(ocr, expected))


def char_similarity_nospace(ocr: str, expected: str) -> float:
    """fpr's variant: :func:`char_similarity` on the strings with white space removed."""
    return char_similarity("".join(ocr.split()), "".join(expected.split()))


def token_jaccard(ocr: str, expected: str) -> float:
    """VISTAR's token-level similarity: Jaccard of the two sets of words."""
    a, b = tokens(ocr), tokens(expected)
    if not a and not b:
        return 1.0
    return len(a & b) / len(a | b)


def _word_list(text: str) -> list[str]:
    return [w for w in re.split(r"[^\w]+", text) if w]


def aligned_ocr_tokens(ocr: str, expected: str) -> list[str]:
    """The OCR text cut into words at the expected text's word boundaries.

    Both strings lose their spaces and punctuation and are aligned by Levenshtein; each OCR
    character belongs to the expected word its aligned character is in. OCR characters
    with no counterpart (extra text) belong to the word they fall inside, or, when they
    fall between two expected words (or before the first, after the last), form words of
    their own, cut at the OCR's own spaces.
    """
    from rapidfuzz.distance import Levenshtein

    o_words, e_words = _word_list(ocr), _word_list(expected)
    a, b = "".join(o_words), "".join(e_words)
    word_of = [k for k, w in enumerate(e_words) for _ in w]  # expected position -> word index
    starts = {0}
    for w in e_words:
        starts.add(max(starts) + len(w))
    o_space_after = set()  # OCR positions after which the OCR had a space
    pos = 0
    for w in o_words[:-1]:
        pos += len(w)
        o_space_after.add(pos)
    owner: list[tuple] = []
    for op in Levenshtein.opcodes(a, b):
        if op.tag in ("equal", "replace"):
            owner += [("word", word_of[op.dest_start + k]) for k in range(op.src_end - op.src_start)]
        elif op.tag == "delete":
            j = op.dest_start
            if j in starts:  # extra text between words: its own words, cut at the OCR's spaces
                part = 0
                for i in range(op.src_start, op.src_end):
                    if i in o_space_after and i > op.src_start:
                        part += 1
                    owner.append(("extra", j, op.src_start, part))
            else:
                owner += [("word", word_of[j])] * (op.src_end - op.src_start)
    out: list[str] = []
    prev = None
    for ch, who in zip(a, owner):
        if who != prev:
            out.append("")
            prev = who
        out[-1] += ch
    return out


def token_jaccard_aligned(ocr: str, expected: str) -> float:
    """fpr's variant: Jaccard of the word sets, the OCR's words re-cut by :func:`aligned_ocr_tokens`."""
    a, b = set(aligned_ocr_tokens(ocr, expected)), set(_word_list(expected))
    if not a and not b:
        return 1.0
    return len(a & b) / len(a | b)


# --------------------------------------------------------------------------- OCR backends

def _rapidocr(unclip: float) -> Callable[[np.ndarray], str]:
    try:
        from rapidocr_onnxruntime import RapidOCR
    except ImportError:
        raise NotFoundError("the rapidocr OCR backend needs the rapidocr_onnxruntime package",
                            hint="pip install 'fpr[vistar]' (or rapidocr_onnxruntime), "
                                 "or use --scorer-option vistar-tr.backend=tesseract") from None
    # Detection on the image's longer side capped at 960 px (the default 'min' limit upscales small
    # images a lot), no angle classifier (rendered text is upright), one thread per session.
    # The detector's box expansion (det_unclip_ratio) is calibrated on rendered signs: RapidOCR's 1.6
    # lets a word's box reach into its neighbour, read as an extra letter ('PARKING GANY').
    engine = RapidOCR(det_limit_side_len=960, det_limit_type="max", use_cls=False, det_unclip_ratio=unclip,
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


def ocr_engine(backend: str, unclip: float = DEFAULT_UNCLIP) -> Callable[[np.ndarray], str]:
    """The OCR function of a backend, loaded once per process (per detector box expansion for rapidocr)."""
    key = f"{backend}:{unclip}" if backend == "rapidocr" else backend
    return load_once("vistar-tr ocr", key, lambda: _rapidocr(unclip) if backend == "rapidocr" else _tesseract())


@dataclass(frozen=True)
class TRValues:
    """One query's similarities (VISTAR's, then fpr's spacing-robust variants)."""

    char_similarity: float
    token_jaccard: float
    char_similarity_nospace: float
    token_jaccard_aligned: float

    def score(self, w: float) -> float:
        return w * self.char_similarity + (1 - w) * self.token_jaccard

    def score_robust(self, w: float) -> float:
        return w * self.char_similarity_nospace + (1 - w) * self.token_jaccard_aligned


def tr_values(ocr: str, expected: str, *, case_sensitive: bool = False) -> TRValues:
    a = normalise(ocr, case_sensitive=case_sensitive)
    b = normalise(expected, case_sensitive=case_sensitive)
    return TRValues(char_similarity(a, b), token_jaccard(a, b), char_similarity_nospace(a, b),
                    token_jaccard_aligned(a, b))


class VistarTR(Scorer):
    name = "vistar-tr"
    description = ("text rendering: OCR text vs the intended string (normalised Levenshtein and token Jaccard; "
                   "score_robust ignores the OCR's spacing)")
    needs = frozenset({"image"})
    metrics = ("score", "char_similarity", "token_jaccard", "score_robust", "char_similarity_nospace",
               "token_jaccard_aligned")
    primary_metric = "score_robust"
    options = (
        Option("backend", str, "rapidocr", "OCR backend", choices=BACKENDS),
        Option("char_weight", float, 0.5, "weight w of the character similarity in score and score_robust, "
                                          "in [0, 1]", minimum=0.0),
        Option("case", str, "insensitive", "letter case counts or not", choices=("insensitive", "sensitive")),
        Option("unclip", float, DEFAULT_UNCLIP, "rapidocr detector box expansion (calibrated in "
                                                "benchmarks/vistar_known_answers.py)", minimum=1.0),
    )

    def score(self, batch: QueryBatch) -> pd.DataFrame:
        opt = resolve(self.name, self.options, batch.options)
        w = opt["char_weight"]
        if w > 1.0:
            raise InputError(f"scorer option vistar-tr.char_weight must be in [0, 1], got {w:g}")
        extras = batch.extras or [{}] * len(batch)
        targets = [expected_text(extras[i], batch.prompts[i]) for i in range(len(batch))]
        engine = ocr_engine(opt["backend"], opt["unclip"]) if any(t is not None for t in targets) else None
        rows = []
        for i in progress.bar(range(len(batch)), desc="vistar-tr: OCR", unit="img"):
            qid, target = batch.query_ids[i], targets[i]
            if target is None:
                note = "no expected text: add an expected_text column or quote the text in the prompt"
                rows += [(qid, m, float("nan"), note) for m in self.metrics]
                continue
            image = load_rgb(batch.paths[i])
            why = shape_reason(image.size)  # the OCR detector's resize would round a side to 0 px
            if why:
                rows += [(qid, m, float("nan"), why) for m in self.metrics]
                continue
            text = engine(np.asarray(image))
            v = tr_values(text, target, case_sensitive=opt["case"] == "sensitive")
            note = f"ocr[{opt['backend']}]: {text}"
            rows += [(qid, m, val, note) for m, val in (
                ("score", v.score(w)), ("char_similarity", v.char_similarity), ("token_jaccard", v.token_jaccard),
                ("score_robust", v.score_robust(w)), ("char_similarity_nospace", v.char_similarity_nospace),
                ("token_jaccard_aligned", v.token_jaccard_aligned))]
        return pd.DataFrame(rows, columns=["query_id", "metric", "value", "note"])


register_scorer(VistarTR())
