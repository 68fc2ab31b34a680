"""Headroom at the top of AP (no IO): can this gallery still tell a run's best methods apart?

AP is exactly 1 when every image of the query's identity ranks above every impostor. A query at AP = 1
cannot get better, and two such queries tie: when most of a method's queries sit there, a method that kept
more identity cannot score higher on them, and mAP stops ranking methods at the top. From a run's per-query
rows (columns ``method``, ``group``, ``identity``, ``ap``, optionally ``encoder`` and ``status``) this module
gives, per encoder and method (:func:`headroom`):

- ``n_queries``: the method's evaluated queries (``status`` ok, AP a number);
- ``ap_one_share``: the share of them whose AP is exactly 1 (exact: AP = (1/R) sum_t c_t H_t / N_t is a
  ratio of integers that equals 1 exactly when the relevant items lead, so ``== 1.0`` is the right test);
- ``n_pairs`` and ``ap_tie_share``: the *AP tie share of its within-identity pairs*: over every unordered
  pair of two of the method's evaluated queries with the same ``group`` and ``identity`` (and the same
  ``seed`` where the rows carry one, i.e. the same world), the share whose two APs are equal (``==``, no
  tolerance: AP is computed exactly, so equal APs are the same ratio). NaN when the method has no such pair.
  These are the pairs an identity-level comparison (VISTAR's strict PPA within identity) can judge; a tie
  there is a pair the metric cannot order;
- ``oracle_ap_one_share``: the ``oracle`` row's AP = 1 share under the same encoder (the gallery's real
  reference images as queries: its ceiling), None when the run has no oracle row.

:func:`headroom_warnings` turns the rows into one line per encoder naming every method (the oracle aside)
whose AP = 1 share is at least :data:`SATURATED`, and what to do.
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import pandas as pd

ORACLE = "oracle"
# A method is saturated when at least half its queries have AP exactly 1. Why a half: (a) a better method
# can raise mAP only on the other queries, so from a half up most of the method's queries carry no
# information on which of two methods above it kept more identity; (b) two of its queries both at 1 tie, so
# about SATURATED**2 = a quarter of its within-identity pairs (more with an identity's queries alike) are
# ties that strict PPA counts wrong; (c) measured: on the built-in world the specialist's new-scene@0 and
# new-scene@0.1 sit at 0.63 and 0.59 (seed 0: benchmarks/results/truth_agreement.md) and claim (ii)'s
# difference moves with the tie rule (pooled seeds 0-2: -0.038 strict, +0.014 ties-half,
# benchmarks/results/figure3.md); issue #32 reports that on galleries of 30 identities x 20 images the tie
# share falls to 4-6% and the strict difference turns positive.
SATURATED = 0.5
HARDER_GALLERY = ("use a harder gallery: more identities per group, more images per identity, look-alike "
                  "identities or each identity's nearest impostors (fpr gallery import --per-identity K --impostors N "
                  "--impostor-encoder E; fpr demo --world paper; "
                  "docs/reports.md, 'Headroom')")


def _evaluated(per_query: pd.DataFrame) -> pd.DataFrame:
    df = per_query[per_query["status"] == "ok"] if "status" in per_query else per_query
    df = df.assign(ap=pd.to_numeric(df["ap"], errors="coerce"))
    return df[df["ap"].notna()]


def method_order(methods: Sequence[str]) -> list[str]:
    """The oracle first, then the methods in order of first appearance."""
    seen = list(dict.fromkeys(str(m) for m in methods))
    return ([ORACLE] if ORACLE in seen else []) + [m for m in seen if m != ORACLE]


def ap_one_share(per_query: pd.DataFrame, order: Sequence[str] | None = None) -> dict[str, float]:
    """Per method (``order``, default :func:`method_order`): the share of evaluated queries whose AP is exactly 1.

    Every such query ties with every other at the top, so the share bounds how many pairs AP can order.
    """
    df = _evaluated(per_query)
    methods = list(order) if order is not None else method_order(df["method"])
    methods = [m for m in methods if (df["method"] == m).any()]
    return {m: float((df.loc[df["method"] == m, "ap"] == 1.0).mean()) for m in methods}


def tie_pairs(per_query: pd.DataFrame) -> tuple[int, int]:
    """(within-identity pairs, pairs whose APs are equal) over the evaluated rows given (one method's).

    Pairs: unordered pairs of rows sharing ``group`` and ``identity`` (and ``seed`` where present)."""
    df = _evaluated(per_query)
    keys = [k for k in ("seed", "group", "identity") if k in df.columns]
    n_pairs = n_ties = 0
    for ap in df.groupby(keys, sort=False, dropna=False)["ap"]:
        values = ap[1].value_counts().to_numpy(np.int64)
        n = int(values.sum())
        n_pairs += n * (n - 1) // 2
        n_ties += int((values * (values - 1) // 2).sum())
    return n_pairs, n_ties


def headroom(per_query: pd.DataFrame, encoder: str | None = None) -> list[dict]:
    """Per encoder (the ``encoder`` column, else ``encoder``) and method: n_queries, ap_one_share, n_pairs,
    ap_tie_share and oracle_ap_one_share (see the module doc)."""
    df = _evaluated(per_query)
    if "encoder" not in df.columns:
        df = df.assign(encoder=encoder)
    rows = []
    for enc in dict.fromkeys(df["encoder"].tolist()):
        part = df[df["encoder"] == enc] if enc is not None else df[df["encoder"].isna()]
        shares = ap_one_share(part)
        oracle = shares.get(ORACLE)
        for m, share in shares.items():
            n_pairs, n_ties = tie_pairs(part[part["method"] == m])
            rows.append({"encoder": enc, "method": m, "n_queries": int((part["method"] == m).sum()),
                         "ap_one_share": share, "n_pairs": n_pairs,
                         "ap_tie_share": n_ties / n_pairs if n_pairs else math.nan,
                         "oracle_ap_one_share": oracle})
    return rows


def _missing(x) -> bool:
    return x is None or x != x


def headroom_table(rows: Sequence[dict]) -> list[dict]:
    """The rows as a printed table: shares rounded to 3 decimals, the encoder column only if it names one."""
    out = []
    for r in rows:
        row = {} if r["encoder"] is None else {"encoder": r["encoder"]}
        row.update({"method": r["method"], "queries": r["n_queries"], "ap_one_share": round(r["ap_one_share"], 3),
                    "pairs": r["n_pairs"],
                    "ap_tie_share": None if _missing(r["ap_tie_share"]) else round(r["ap_tie_share"], 3)})
        out.append(row)
    return out


HEADROOM_NOTE = ("ap_one_share: queries whose AP is exactly 1 (no room above them); ap_tie_share: pairs of the "
                 "method's queries of one identity whose APs are equal (an order mAP cannot give)")


def saturated(rows: Sequence[dict], threshold: float = SATURATED) -> list[dict]:
    """The rows of methods under test (the oracle aside) whose AP = 1 share is at least ``threshold``."""
    return [r for r in rows if r["method"] != ORACLE and r["ap_one_share"] >= threshold]


def headroom_warnings(rows: Sequence[dict], threshold: float = SATURATED) -> list[str]:
    """One line per encoder with saturated methods (:func:`saturated`), saying what to do; none if none. The
    lines carry no "warning:" prefix: stderr adds ``fpr: warning:`` (:func:`fpr.progress.warn`), the JSON lists
    them as they are, the HTML report and the demo label them."""
    lines = []
    hit = saturated(rows, threshold)
    for enc in dict.fromkeys(r["encoder"] for r in hit):
        mine = [r for r in hit if r["encoder"] == enc]
        where = f" under {enc}" if enc is not None else ""
        oracle = mine[0]["oracle_ap_one_share"]
        lines.append(f"headroom{where}: AP is exactly 1 for at least {threshold:.0%} of the queries of "
                     + ", ".join(f"{r['method']} ({r['ap_one_share']:.0%})" for r in mine)
                     + (f" (oracle {oracle:.0%})" if oracle is not None else "")
                     + f": this gallery cannot tell apart methods at or above {'them' if len(mine) > 1 else 'it'}; "
                     + HARDER_GALLERY)
    return lines


__all__ = ["HARDER_GALLERY", "HEADROOM_NOTE", "ORACLE", "SATURATED", "ap_one_share", "headroom", "headroom_table",
           "headroom_warnings", "method_order",
           "saturated", "tie_pairs"]
