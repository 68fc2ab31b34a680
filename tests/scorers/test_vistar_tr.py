"""vistar-tr: expected-text lookup, the similarities against hand computations, and the real OCR model on
text rendered with a real font: exact text > one-letter typo > wrong text > no text."""
from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image, ImageDraw, ImageFont

from fpr.errors import InputError
from fpr.scorers import QueryBatch, run_scorers
from fpr.scorers import vistar_tr as tr


def _font(size: int) -> ImageFont.FreeTypeFont:
    import matplotlib

    return ImageFont.truetype(os.path.join(os.path.dirname(matplotlib.__file__), "mpl-data", "fonts", "ttf",
                                           "DejaVuSans.ttf"), size)


def _sign(path: Path, text: str) -> str:
    img = Image.new("RGB", (320, 160), (235, 228, 210))
    d = ImageDraw.Draw(img)
    d.rectangle((10, 40, 310, 120), fill=(250, 250, 250), outline=(90, 60, 40), width=3)
    if text:
        d.text((24, 60), text, font=_font(34), fill=(20, 20, 20))
    img.save(path)
    return str(path)


def _batch(paths, prompts, extras=None, options=None) -> QueryBatch:
    n = len(paths)
    return QueryBatch([f"q{i}" for i in range(n)], list(paths), ["x"] * n, ["g"] * n, list(prompts), [[]] * n,
                      options=dict(options or {}), extras=extras)


def test_expected_text_from_column_else_quotes():
    assert tr.expected_text({"expected_text": "Hello"}, 'a sign "Bye"') == "Hello"
    assert tr.expected_text({}, 'a sign that says "OPEN" and "DAILY"') == "OPEN DAILY"
    assert tr.expected_text({"expected_text": float("nan")}, "a sign \u201cCaf\u00e9\u201d") == "Caf\u00e9"
    assert tr.expected_text(None, "no quotes here") is None


def _levenshtein(a: str, b: str) -> int:
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i]
        for j, cb in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb)))
        prev = cur
    return prev[-1]


def _hand_score(ocr: str, expected: str) -> float:
    a, b = "".join(ocr.lower().split()), "".join(expected.lower().split())
    cs = 1 - _levenshtein(a, b) / max(len(a), len(b), 1)
    ta, tb = set(ocr.lower().split()), set(expected.lower().split())
    return 0.5 * cs + 0.5 * (len(ta & tb) / len(ta | tb) if ta | tb else 1.0)


def test_similarities_match_hand_computations():
    # one substitution in 9 non-space characters; tokens {open, daily} vs {open, dailt}: 1 shared of 3
    assert tr.char_similarity("open daily", "open dailt") == pytest.approx(1 - 1 / 9)
    assert tr.char_similarity("opendaily", "open daily") == 1.0  # spacing is token_jaccard's business
    assert tr.token_jaccard("open daily", "open dailt") == pytest.approx(1 / 3)
    assert tr.char_similarity("", "abc") == 0.0 and tr.token_jaccard("", "abc") == 0.0
    assert tr.normalise("  Open\tDAILY ") == "open daily"
    assert tr.normalise("Open", case_sensitive=True) == "Open"


def test_tr_orders_exact_typo_wrong_none_with_the_real_ocr(tmp_path):
    pytest.importorskip("rapidocr_onnxruntime")
    paths = [_sign(tmp_path / f"{k}.png", t) for k, t in
             enumerate(["OPEN DAILY", "OPEN DAILT", "FRESH BREAD", ""])]
    batch = _batch(paths, ['a shop sign that says "OPEN DAILY"'] * 4)
    out = run_scorers(["vistar-tr"], batch)
    score = out[out["metric"] == "score"].set_index("query_id")["value"]
    assert score["q0"] == pytest.approx(1.0)
    notes = out.set_index(["query_id", "metric"])["note"]
    read = {q: notes[(q, "score")].split(": ", 1)[1] for q in score.index}
    for q in score.index:  # every value is the hand formula on what the OCR read
        assert score[q] == pytest.approx(_hand_score(read[q], "OPEN DAILY"))
    # the OCR reads the typo as written (it may drop the space between the words)
    assert "".join(read["q1"].upper().split()) == "OPENDAILT"
    assert score["q0"] > score["q1"] > score["q2"] > score["q3"]
    assert score["q3"] == 0.0
    assert notes[("q0", "score")].lower() == "ocr[rapidocr]: open daily"
    assert notes[("q3", "score")] == "ocr[rapidocr]: "


def test_missing_expected_text_is_nan_with_a_reason(tmp_path):
    out = run_scorers(["vistar-tr"], _batch([_sign(tmp_path / "a.png", "X")], ["a photo of a dog"]))
    assert len(out) == 3 and out["value"].map(math.isnan).all()
    assert out["note"].str.contains("no expected text").all()


def test_bad_options_are_one_line(tmp_path):
    b = _batch([_sign(tmp_path / "a.png", "X")], ['"X"'], options={"vistar-tr.backend": "paddle"})
    with pytest.raises(InputError, match="backend"):
        run_scorers(["vistar-tr"], b)
    b.options = {"vistar-tr.char_weight": "2"}
    with pytest.raises(InputError, match="char_weight"):
        run_scorers(["vistar-tr"], b)


def test_importing_the_cli_and_scorers_loads_no_heavy_optional_modules():
    code = ("import sys, fpr.cli.main, fpr.scorers as s; s.all_scorers(); "
            "print(sorted(m for m in ('cv2', 'onnxruntime', 'transformers', 'rapidocr_onnxruntime', 'skimage') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
    assert out.stdout.strip() == "[]"
