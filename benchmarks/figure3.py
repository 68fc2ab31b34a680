"""The paper's Figure 3 whole on the demo world: the four cells, the protocol and encoder effects, claim (i)'s
decomposition, claim (ii)'s ties-half variant and the regime, per world seed and pooled, every number re-computed
by plain loops over the cross-context pairs.

    PYTHONPATH=. python benchmarks/figure3.py             # seeds 0, 1, 2 from benchmarks/results/general_standin_s*.csv

Reads the joined per-query frames ``benchmarks/general_standin.py --seed S`` stored (the full demo world's
generations and oracle under the specialist ``fpr-world-v3`` and the stand-in ``fpr-general-v2``: what ``fpr demo``
judges), runs :func:`fpr.workflows.meta.encoder_claims` (what the demo prints), and checks against loops written
here: each cell's pairs, right pairs, ties, strict and ties-half PPA; each effect's right-pair difference; claim
(i) = encoder effect under mAP + protocol effect under the general encoder in right pairs; the regime's oracle
mAP, AP = 1 share and AP tie share. The intervals are the library's cluster bootstrap (checked against loops over
resamples in tests/metrics/test_figure3.py). Writes benchmarks/results/figure3.md; exit 1 on any mismatch.
"""
from __future__ import annotations

import sys
import time
from itertools import combinations
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
RESULTS = ROOT / "benchmarks" / "results"
SEEDS = (0, 1, 2)
CELLS = ("general_sim", "general_map", "specialist_sim", "specialist_map")
TOL = 1e-12


def loop_cells(judged: pd.DataFrame) -> dict[str, dict]:
    """Per cell by loops: pairs (same seed, group, identity; other context; other drift; all four values
    finite), right (strictly ordered as the truth), ties (equal values)."""
    out = {c: {"n": 0, "right": 0, "ties": 0} for c in CELLS}
    for _, g in judged.groupby(["seed", "group", "identity"]):
        recs = g.to_dict("records")
        for r, s in combinations(recs, 2):
            if r["context"] == s["context"] or r["drift"] == s["drift"]:
                continue
            if not all(np.isfinite(float(r[c])) and np.isfinite(float(s[c])) for c in CELLS):
                continue
            better_r = r["drift"] < s["drift"]
            for c in CELLS:
                out[c]["n"] += 1
                out[c]["right"] += (r[c] > s[c]) if better_r else (s[c] > r[c])
                out[c]["ties"] += r[c] == s[c]
    return out


def check(frame: pd.DataFrame, res) -> list[str]:
    judged = frame[frame["drift"].notna()]
    loops = loop_cells(judged)
    bad = []
    for c in res.cells:
        lc = loops[c["metric"]]
        got = (c["n_pairs"], c["n_right"], c["n_ties"])
        if got != (lc["n"], lc["right"], lc["ties"]) or abs(c["ppa"] - lc["right"] / lc["n"]) > TOL or \
                abs(c["ppa_ties_half"] - (lc["right"] + 0.5 * lc["ties"]) / lc["n"]) > TOL:
            bad.append(f"cell {c['metric']}: {got} vs loops {lc}")
    for e in res.effects:
        want = loops[e["metric_a"]]["right"] - loops[e["metric_b"]]["right"]
        if e["n_right_diff"] != want or abs(e["diff"] - want / loops[e["metric_a"]]["n"]) > TOL:
            bad.append(f"effect {e['name']}: {e['n_right_diff']} vs loops {want}")
    d = res.decomposition
    if not d["exact"] or d["n_right_diff"] != loops["specialist_map"]["right"] - loops["general_sim"]["right"]:
        bad.append(f"decomposition {d}")
    oracle = frame[frame["method"] == "oracle"]
    for r in res.regime:
        col = f"{r['encoder']}_map"
        ap = judged[col].astype(float)
        ties = 0
        for _, g in judged.groupby(["seed", "group", "identity"]):
            for x, y in combinations(g.to_dict("records"), 2):
                if x["context"] != y["context"] and x["drift"] != y["drift"]:
                    ties += x[col] == y[col]
        want = (float(oracle[col].mean()), float((ap == 1.0).mean()), ties / loops[col]["n"])
        got = (r["oracle_map"], r["ap_one_share"], r["ap_tie_share"])
        if any(abs(a - b) > TOL for a, b in zip(got, want)):
            bad.append(f"regime {r['encoder']}: {got} vs loops {want}")
    return bad


def table(res, title: str) -> list[str]:
    cells = {c["metric"]: c for c in res.cells}
    eff = {(e["kind"], e["fixed"]): e for e in res.effects}
    iv = lambda x, lo, hi, f="{:+.3f}": f"{f.format(x)} [{f.format(lo)}, {f.format(hi)}]"  # noqa: E731
    lines = [f"## {title}", "", f"{cells['specialist_map']['n_pairs']} cross-context pairs.", "",
             "| encoder | Sim: strict PPA [95%] | mAP: strict PPA [95%] | mAP ties | mAP ties-half PPA |",
             "|---|---|---|---|---|"]
    for enc in ("general", "specialist"):
        s, m = cells[f"{enc}_sim"], cells[f"{enc}_map"]
        lines.append(f"| {enc} | {iv(s['ppa'], s['ppa_lo'], s['ppa_hi'], '{:.3f}')} | "
                     f"{iv(m['ppa'], m['ppa_lo'], m['ppa_hi'], '{:.3f}')} | {m['tie_share']:.3f} | "
                     f"{m['ppa_ties_half']:.3f} |")
    lines += ["", "| effect | difference [95%] | right pairs |", "|---|---|---|"]
    lines += [f"| {e['name']} | {iv(e['diff'], e['diff_lo'], e['diff_hi'])} | {e['n_right_diff']:+d} |"
              for e in eff.values()]
    lines += ["", "| claim | PPA A | PPA B | difference [95%] | verdict |", "|---|---|---|---|---|"]
    lines += [f"| {v['claim']} | {v['ppa_a']:.3f} | {v['ppa_b']:.3f} | {iv(v['diff'], v['diff_lo'], v['diff_hi'])} | "
              f"{v['verdict']} |" for v in [*res.verdicts, *res.variants]]
    d = res.decomposition
    lines += ["", f"claim (i) = encoder effect under mAP + protocol effect under the general encoder: "
              f"{d['n_right_diff']:+d} = {d['terms'][0]['n_right_diff']:+d} {d['terms'][1]['n_right_diff']:+d} right "
              f"pairs ({'exact' if d['exact'] else 'NOT EXACT'}); {d['diff']:+.3f} = {d['terms'][0]['diff']:+.3f} "
              f"{d['terms'][1]['diff']:+.3f}", "",
              "| regime | oracle mAP | AP = 1 share (judged queries) | AP tie share (judged pairs) | AP = 1 per method |",
              "|---|---|---|---|---|"]
    lines += [f"| {r['encoder']} | {r['oracle_map']:.3f} | {r['ap_one_share']:.3f} | {r['ap_tie_share']:.3f} | "
              + ", ".join(f"{m} {s:.2f}" for m, s in r["ap_one_share_by_method"].items()) + " |" for r in res.regime]
    return lines + [""]


def main() -> int:
    from fpr.workflows.meta import encoder_claims

    t0 = time.perf_counter()
    frames = {s: pd.read_csv(RESULTS / f"general_standin_s{s}.csv") for s in SEEDS}
    lines = ["# Figure 3 whole on the demo world (issue #32 item 4)", "",
             "Command: `PYTHONPATH=. python benchmarks/figure3.py` (frames: `benchmarks/general_standin.py --seed S`; "
             "specialist `fpr-world-v3`, general-purpose stand-in `fpr-general-v2`; strict PPA against -drift on "
             "cross-context pairs; paired cluster bootstrap over queries, 1000 resamples, seed 0).", ""]
    bad = []
    for title, frame in [*((f"seed {s}", f) for s, f in frames.items()),
                         (f"pooled over seeds {', '.join(map(str, SEEDS))} (what `fpr demo` prints)",
                          pd.concat(frames.values(), ignore_index=True))]:
        res = encoder_claims(frame, seed=0)
        bad += [f"{title}: {b}" for b in check(frame, res)]
        lines += table(res, title)
    lines.insert(4, f"Every cell, effect, decomposition and regime figure re-computed by loops: "
                    f"{'all equal' if not bad else 'MISMATCH'} ({time.perf_counter() - t0:.0f} s).")
    lines.insert(5, "")
    text = "\n".join(lines)
    (RESULTS / "figure3.md").write_text(text)
    print(text)
    for b in bad:
        print("MISMATCH", b, file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
