"""VISTAR's ontology: user roles, evaluation aspects, and the role x aspect relevance mask.

The paper (004, sec. 3.1) has seven roles and nine aspects, and a binary relevance mask
M in {0,1}^(|R| x |A|) with 28 relevant pairs from an expert survey. It names three
roles (Graphic Designer, Storyboard Artist, Marketing Specialist), the nine aspects
(Table 3: TR LI CSE CPA PSC GC SF CUL MA; sec. 3.1 also writes CUL as "CC") and none of
the mask beyond what its examples imply. The other four roles and 25 of the 28 pairs
are fpr's assumption; every row of the packaged mask says where it comes from
(``fpr/scorers/vistar/data/vistar_relevance.csv``) and users replace the file with their own.

This module imports no scorer: an aspect names the scorer and metric that measure it.
"""
from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import pandas as pd

from fpr.errors import InputError


@dataclass(frozen=True)
class Role:
    code: str
    name: str
    source: str  # "paper" (named in the paper) or "fpr" (fpr's assumption)


@dataclass(frozen=True)
class Aspect:
    code: str
    name: str
    scorer: str  # the fpr scorer that measures it
    metric: str  # its metric read as the aspect score
    focus: str = ""  # what the aspect looks at, in words (hwpq's questionnaires are conditioned on it)


ROLES: tuple[Role, ...] = (
    Role("GD", "Graphic Designer", "paper"),
    Role("SA", "Storyboard Artist", "paper"),
    Role("MS", "Marketing Specialist", "paper"),
    Role("PD", "Product Designer", "fpr"),
    Role("AR", "Architectural Visualiser", "fpr"),
    Role("GA", "Game Concept Artist", "fpr"),
    Role("CH", "Cultural Heritage Educator", "fpr"),
)

ASPECTS: tuple[Aspect, ...] = (
    # fpr's spacing-robust TR (vistar-tr's primary metric): the paper's `score` gives a perfect render of
    # "FRESH BREAD" 0.455 when the OCR reads "FRESHBREAD" (docs/evaluators.md, vistar-tr).
    Aspect("TR", "Text Rendering", "vistar-tr", "score_robust",
           "whether the text the prompt asks for is written exactly, legibly and in the right place"),
    Aspect("LI", "Lighting Integrity", "vistar-li", "score",
           "whether light direction, shadows and highlights agree with one another and with the prompt"),
    Aspect("CSE", "Compositional Scene Evaluation", "vistar-cse", "score",
           "whether every requested panel or sub-scene is present and the subject stays the same across them"),
    Aspect("CPA", "Character Portrayal Accuracy", "vistar-cpa", "score",
           "whether the number of people, their postures and their facial expressions match the prompt"),
    Aspect("PSC", "Physical-Spatial Consistency", "vistar-psc", "score",
           "whether objects keep physically possible places: no solid passes through another, occlusion is right"),
    Aspect("GC", "Geometric Coherence", "vistar-gc", "score",
           "whether shapes, contours, perspective and surfaces are geometrically coherent, without distortions"),
    # The three HWPQ aspects share one scorer; its questionnaire is conditioned on the aspect (the query's
    # ``aspect`` column, which ``fpr vistar run`` fills from the routing), so they read different scores.
    Aspect("SF", "Style Fusion", "hwpq", "score",
           "how the requested styles are blended into one coherent image, each still recognisable"),
    Aspect("CUL", "Cultural-Historical Fidelity", "hwpq", "score",
           "whether dress, architecture, symbols and customs are faithful to the named culture and period"),
    Aspect("MA", "Material Accuracy", "hwpq", "score",
           "whether materials look physically right: texture, reflectance, transparency, weight and wear"),
)

ASPECT_ALIASES = {"CC": "CUL"}  # sec. 3.1 writes Cultural Consistency (CC) for Table 3's CUL

MASK_FILE = "data/vistar_relevance.csv"
MASK_COLUMNS = ("role", "aspect", "relevant")


def aspect(code: str) -> Aspect:
    """The aspect of a routing code (upper case; aliases resolved), or one line naming the valid codes."""
    c = ASPECT_ALIASES.get(code.upper(), code.upper())
    for a in ASPECTS:
        if a.code == c:
            return a
    raise InputError(f"unknown aspect '{code}'", hint="valid aspects: " + ", ".join(a.code for a in ASPECTS))


def read_mask(path: str | Path | None = None) -> pd.DataFrame:
    """The relevance mask as rows ``role, aspect, relevant (0/1), source``: the packaged file or ``path``.

    A mask must list every aspect for each of its roles exactly once (an absent pair is not
    silently irrelevant); its roles may be the user's own codes.
    """
    where = str(path) if path is not None else f"fpr/scorers/{MASK_FILE}"
    if path is None:
        with resources.files("fpr.scorers.vistar").joinpath(MASK_FILE).open("r", encoding="utf-8") as fh:
            df = pd.read_csv(fh, dtype=str, keep_default_na=False)
    else:
        try:
            df = pd.read_csv(path, dtype=str, keep_default_na=False)
        except (OSError, pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as e:
            raise InputError(f"cannot read the relevance mask: {e}", where=where,
                             hint="give a CSV with columns role,aspect,relevant[,source]") from e
    return check_mask(df, where)


def check_mask(df: pd.DataFrame, where: str) -> pd.DataFrame:
    missing = [c for c in MASK_COLUMNS if c not in df.columns]
    if missing:
        raise InputError(f"the relevance mask lacks column(s) {', '.join(missing)}", where=where,
                         hint="columns: role,aspect,relevant[,source]")
    out = df.copy()
    if "source" not in out.columns:
        out["source"] = ""
    out["role"] = out["role"].str.strip().str.upper()
    for i, raw in enumerate(out["aspect"]):
        try:
            out.loc[out.index[i], "aspect"] = aspect(raw.strip()).code
        except InputError as e:
            raise InputError(f"{e.what} in row {i + 2}", where=where, hint=e.hint) from None
    bad = ~out["relevant"].str.strip().isin(["0", "1"])
    if bad.any():
        i = int(bad.to_numpy().argmax())
        raise InputError(f"relevant must be 0 or 1, not '{out['relevant'].iloc[i]}' in row {i + 2}", where=where,
                         hint="the mask is binary, as in VISTAR")
    out["relevant"] = out["relevant"].str.strip().astype(int)
    dup = out.duplicated(["role", "aspect"])
    if dup.any():
        r = out[dup].iloc[0]
        raise InputError(f"pair ({r['role']}, {r['aspect']}) is listed twice", where=where,
                         hint="list each role x aspect pair once")
    codes = [a.code for a in ASPECTS]
    for role, rows in out.groupby("role", sort=False):
        lacking = [c for c in codes if c not in set(rows["aspect"])]
        if lacking:
            raise InputError(f"role '{role}' has no row for aspect(s) {', '.join(lacking)}", where=where,
                             hint="give every role a 0/1 row for each of the nine aspects")
        if not rows["relevant"].any():
            raise InputError(f"role '{role}' has no relevant aspect", where=where,
                             hint="mark at least one aspect relevant (1) or drop the role")
    return out[["role", "aspect", "relevant", "source"]].reset_index(drop=True)


def role_names() -> dict[str, str]:
    return {r.code: r.name for r in ROLES}
