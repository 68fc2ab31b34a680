"""VISTAR known answers: images whose right answer is known by construction.

TR (``vistar-tr``): signs rendered with PIL (three DejaVu faces shipped with matplotlib, three
text sizes) saying the intended string exactly, with a one-letter typo, something else, or
nothing, read by the real OCR (RapidOCR, its models ship in the wheel: offline). Seed 0's strings
calibrate the detector's box expansion (``vistar-tr.unclip``); seed 1's strings, disjoint from
seed 0's, check it.

LI (``vistar-li``): procedurally rendered ground planes with boxes and cylinders lit from a known
direction, their shadows cast by that direction; the geometric core
(:func:`fpr.scorers.vistar_li.light_direction`) gets the object and shadow masks (``truth``) or
finds them itself (``segmented``), and the table reports the angular error. Seed 0 calibrates,
seed 1 checks.

    python benchmarks/vistar_known_answers.py [--part tr|li|all] [--out benchmarks/results/vistar_known_answers.md]

Tests import the renderers from here (one implementation of the known answers).
"""
from __future__ import annotations

import argparse
import os
import time
from dataclasses import dataclass

import numpy as np
from PIL import Image, ImageDraw, ImageFont

FONTS = ("DejaVuSans.ttf", "DejaVuSerif-Bold.ttf", "DejaVuSansMono.ttf")
SIZES = (24, 40, 64)
CONDITIONS = ("exact", "typo", "wrong", "none")
# Sign vocabulary; a seed draws its strings from its own half so calibration and check never share a word.
# The tests' held-out strings (tests/scorers/test_vistar_tr.py) use none of these words.
WORDS = ("OPEN", "DAILY", "PIZZA", "BREAD", "CINEMA", "TOWER", "BEACH", "PALACE", "THEATER", "SCHOOL", "HOTEL",
         "GARDEN", "MARKET", "STATION", "BAKERY", "SALE", "NORTH", "BRIDGE", "MUSEUM", "LIBRARY", "FERRY",
         "TICKETS", "RIVER", "SQUARE", "PHARMACY", "BOOKS", "SUMMER", "FESTIVAL", "WELCOME", "HOME", "SILVER",
         "MOON", "GOLDEN", "CROWN", "OCEAN", "VIEW", "GREEN", "VALLEY", "FARM", "STORE")


def font_path(name: str) -> str:
    import matplotlib

    return os.path.join(os.path.dirname(matplotlib.__file__), "mpl-data", "fonts", "ttf", name)


def render_sign(text: str, font: str = "DejaVuSans.ttf", size: int = 40) -> np.ndarray:
    """A light sign with a dark border and ``text`` (may be empty) in dark letters, margins 60 px."""
    f = ImageFont.truetype(font_path(font), size)
    probe = text or "X"
    left, top, right, bottom = ImageDraw.Draw(Image.new("RGB", (1, 1))).textbbox((0, 0), probe, font=f)
    w, h = right - left + 80, bottom - top + 80
    img = Image.new("RGB", (w + 40, h + 40), (235, 228, 210))
    d = ImageDraw.Draw(img)
    d.rectangle((20, 20, w + 20, h + 20), fill=(250, 250, 250), outline=(90, 60, 40), width=3)
    if text:
        d.text((60 - left, 60 - top), text, font=f, fill=(20, 20, 20))
    return np.asarray(img)


def sign_strings(seed: int, n: int) -> list[str]:
    """``n`` strings of 2-3 words from the seed's half of the vocabulary; every other one in title case."""
    rng = np.random.default_rng(seed)
    half = WORDS[seed % 2::2]
    out = []
    for k in range(n):
        words = rng.choice(half, size=int(rng.integers(2, 4)), replace=False)
        s = " ".join(words)
        out.append(s if k % 2 == 0 else s.title())
    return out


def typo(text: str, rng: np.random.Generator) -> str:
    """One letter replaced by a different letter of the same case."""
    idx = [i for i, c in enumerate(text) if c.isalpha()]
    i = int(rng.choice(idx))
    pool = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
    c = text[i]
    new = str(rng.choice([p for p in pool if p != c.upper()]))
    return text[:i] + (new if c.isupper() else new.lower()) + text[i + 1:]


def unrelated(text: str, pool: list[str]) -> str:
    """The first string of ``pool`` sharing no word with ``text`` (the 'wrong' sign)."""
    words = set(text.upper().split())
    return next(p for p in pool if not words & set(p.upper().split()))


def tr_condition_text(text: str, condition: str, rng: np.random.Generator, other: str) -> str:
    return {"exact": text, "typo": typo(text, rng), "wrong": other, "none": ""}[condition]


@dataclass(frozen=True)
class TRRow:
    seed: int
    string: str
    font: str
    size: int
    condition: str
    ocr: str
    score: float
    score_robust: float


def run_tr(seed: int, n_strings: int, unclip: float, conditions=CONDITIONS) -> list[TRRow]:
    from fpr.scorers import vistar_tr as tr

    engine = tr.ocr_engine("rapidocr", unclip)
    strings = sign_strings(seed, n_strings)
    rng = np.random.default_rng(1000 + seed)
    rows = []
    for k, s in enumerate(strings):
        other = unrelated(s, strings[k + 1:] + strings[:k])
        for font in FONTS:
            for size in SIZES:
                for cond in conditions:
                    shown = tr_condition_text(s, cond, rng, other)
                    read = engine(render_sign(shown, font, size))
                    v = tr.tr_values(read, s)
                    rows.append(TRRow(seed, s, font, size, cond, read, v.score(0.5), v.score_robust(0.5)))
    return rows


def tr_table(rows: list[TRRow]) -> list[str]:
    out = ["| seed | condition | n | score (VISTAR) mean / min | score_robust mean / min / max | "
           "share score_robust >= 0.95 |", "|---|---|---|---|---|---|"]
    for seed in sorted({r.seed for r in rows}):
        for cond in CONDITIONS:
            sel = [r for r in rows if r.seed == seed and r.condition == cond]
            if not sel:
                continue
            a = np.array([r.score for r in sel])
            b = np.array([r.score_robust for r in sel])
            out.append(f"| {seed} | {cond} | {len(sel)} | {a.mean():.3f} / {a.min():.3f} | "
                       f"{b.mean():.3f} / {b.min():.3f} / {b.max():.3f} | {(b >= 0.95).mean():.3f} |")
    for name in ("score", "score_robust"):
        ordered = []
        for key in {(r.seed, r.string, r.font, r.size) for r in rows}:
            got = {r.condition: getattr(r, name) for r in rows if (r.seed, r.string, r.font, r.size) == key}
            if len(got) == len(CONDITIONS):
                ordered.append(got["exact"] > got["typo"] > got["wrong"] >= got["none"])
        if ordered:
            out.append(f"\n{name}: exact > typo > wrong >= none on {sum(ordered)} of {len(ordered)} signs.")
    return out


def calibrate_unclip(seed: int, n_strings: int, candidates=(1.3, 1.45, 1.6)) -> tuple[float, list[str]]:
    """The box expansion whose exact renders most often reach score_robust >= 0.95, then the higher mean, then
    the tighter box: a box expanded into the next word is read as an extra letter ('PARKING GANY' was seen
    at RapidOCR's default 1.6 while exploring, on a string that is now one of the tests' held-out strings)."""
    lines = ["| unclip | exact renders | mean score_robust | min | share >= 0.95 |", "|---|---|---|---|---|"]
    best = None
    for u in candidates:
        b = np.array([r.score_robust for r in run_tr(seed, n_strings, u, conditions=("exact",))])
        lines.append(f"| {u} | {len(b)} | {b.mean():.4f} | {b.min():.3f} | {(b >= 0.95).mean():.3f} |")
        key = ((b >= 0.95).mean(), b.mean())
        if best is None or key > best[0]:
            best = (key, u)
    return best[1], lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--part", choices=("tr", "all"), default="all")
    ap.add_argument("--strings", type=int, default=6)
    ap.add_argument("--calibration-strings", type=int, default=12)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    lines = ["# VISTAR known answers", "",
             f"`python benchmarks/vistar_known_answers.py --part {args.part}` "
             f"({time.strftime('%Y-%m-%d')}, 2 shared CPU cores).", ""]
    if args.part in ("tr", "all"):
        t0 = time.time()
        unclip, cal = calibrate_unclip(0, args.calibration_strings)
        rows = run_tr(1, args.strings, unclip)
        lines += ["## TR: rendered signs read by RapidOCR", "",
                  f"Fonts {', '.join(FONTS)}; sizes {', '.join(map(str, SIZES))} px; {args.calibration_strings} "
                  f"strings on seed 0 ({'; '.join(sign_strings(0, args.calibration_strings))}), {args.strings} on "
                  f"seed 1 ("
                  f"{'; '.join(sign_strings(1, args.strings))}).", "",
                  "Calibration (seed 0, exact renders only): the detector's box expansion", ""] + cal + [
                  "", f"Chosen: `vistar-tr.unclip={unclip}`. Check (seed 1, held-out strings, all conditions):", ""]
        lines += tr_table(rows)
        bad = [r for r in rows if r.condition == "exact" and r.score_robust < 0.95]
        lines += ["", "Exact renders under 0.95 on seed 1: " + (
            "none." if not bad else "; ".join(f"'{r.string}' {r.font} {r.size}px read '{r.ocr}' "
                                              f"({r.score_robust:.3f})" for r in bad)),
                  f"", f"({time.time() - t0:.0f} s)", ""]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        with open(args.out, "w") as fh:
            fh.write(text)


if __name__ == "__main__":
    main()
