"""The paper's 2x2 (general / specialist encoder x Sim / mAP) and the two claims' verdicts on the demo world.

    PYTHONPATH=. python benchmarks/general_standin.py --seed 0      # one full world seed (a few minutes)
    PYTHONPATH=. python benchmarks/general_standin.py --seed 1
    PYTHONPATH=. python benchmarks/general_standin.py --seed 2
    PYTHONPATH=. python benchmarks/general_standin.py --pool 0,1,2  # the tables and verdicts

``--seed S`` evaluates the full demo world's generations (``fpr.workflows.demo.DEMO_METHODS`` less the copies) and the
oracle of seed S with the specialist ``fpr-world-v3`` and the general-purpose stand-in
``fpr-general-v2`` (the demo's GENERAL_ENCODER) -- exactly what ``fpr demo`` does for its verdict seeds -- and stores the joined
per-query frame as ``benchmarks/results/general_standin_s<S>.csv`` (with the time and load).
``--pool`` writes, per seed, the 2x2 per method (the oracle row's general mAP is the stand-in's
oracle mAP, whose band [0.35, 0.6] is checked), the AP = 1 share and both verdicts, then the
verdicts pooled over the seeds (what ``fpr demo`` prints last), and re-computes every PPA by plain
loops over an identity's pairs (it fails if a value differs by more than 1e-12). The stand-in was
calibrated on the trainer's held-out identities (VAL_RANGE), never on these worlds' identities
(EVAL_RANGE). The markdown goes to --out (default benchmarks/results/general_standin.md) and stdout.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from itertools import combinations
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks/results"
TOL = 1e-12
BAND = (0.35, 0.6)


def loop_ppa(df: pd.DataFrame, col: str) -> tuple[int, float]:
    """Strict PPA of ``col`` against -drift over pairs of an identity's queries (a different context when the
    frame has one), by loops."""
    right = n = 0
    for _, g in df.groupby(["seed", "group", "identity"]):
        ctx = g["context"].tolist() if "context" in g else [None] * len(g)
        for (ma, da, ca), (mb, db, cb) in combinations(zip(g[col].astype(float), g["drift"].astype(float), ctx), 2):
            if da == db or (ca is not None and ca == cb):
                continue
            n += 1
            right += np.sign(ma - mb) * np.sign(db - da) > 0
    return n, right / n


def run_seed(seed: int) -> None:
    from fpr.workflows.demo import DEMO_ENCODER, FULL, GENERAL_ENCODER, _claims_seed
    from fpr.galleries.world import WorldConfig

    t0 = time.perf_counter()
    load0 = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        frame, _ = _claims_seed(Path(tmp), WorldConfig(seed=seed, **FULL), DEMO_ENCODER, GENERAL_ENCODER, "cpu")
    frame.to_csv(RESULTS / f"general_standin_s{seed}.csv", index=False)
    (RESULTS / f"general_standin_s{seed}.time").write_text(
        f"{time.perf_counter() - t0:.0f} s, load average {load0:.1f} at the start, {os.getloadavg()[0]:.1f} at the end, "
        f"{os.cpu_count()} CPUs\n")


def pool(seeds: list[int], out: Path, boot_seed: int = 0) -> int:
    from fpr.workflows.meta import encoder_claims

    frames = {s: pd.read_csv(RESULTS / f"general_standin_s{s}.csv") for s in seeds}
    res = encoder_claims(pd.concat(frames.values(), ignore_index=True), seed=boot_seed)
    judged = pd.concat(frames.values(), ignore_index=True)
    judged = judged[judged["drift"].notna()]
    failures = []
    for v in res.verdicts:
        for key, col in (("ppa_a", v["metric_a"]), ("ppa_b", v["metric_b"])):
            n, ppa = loop_ppa(judged, col)
            if n != v["n_pairs"] or abs(ppa - v[key]) > TOL:
                failures.append(f"{v['claim']} {col}: loops {n} pairs {ppa!r} vs fpr {v['n_pairs']} {v[key]!r}")
    lines = [f"# The paper's 2x2 and its two claims on the demo world (seeds {', '.join(map(str, seeds))})", "",
             "Specialist `fpr-world-v3`, general-purpose `fpr-general-v2` (a stand-in for CLIP/DINOv2, not them: an attribute network with declared layout and identity shares, docs/world.md); "
             "full demo world (10 identities per species, 10 gallery and 3 reference images, 3 queries per identity "
             "and method). Verdicts: strict PPA (VISTAR's) against -drift, paired 95% bootstrap over queries (1000). "
             f"Every PPA re-computed by loops: {'all equal' if not failures else 'MISMATCH'}.", "",
             "Commands: " + "; ".join(f"`PYTHONPATH=. python benchmarks/general_standin.py --seed {s}` "
                                      f"({(RESULTS / f'general_standin_s{s}.time').read_text().strip()})" for s in seeds)
             + f"; `PYTHONPATH=. python benchmarks/general_standin.py --pool {','.join(map(str, seeds))}`.", ""]
    band_ok = True
    for s, f in frames.items():
        r1 = encoder_claims(f, seed=boot_seed)
        oracle = next(r for r in r1.table if r["method"] == "oracle")
        inside = BAND[0] <= oracle["general_map"] <= BAND[1]
        band_ok &= inside
        lines += [f"## seed {s}: the stand-in's oracle mAP {oracle['general_map']:.3f} "
                  f"({'inside' if inside else 'OUTSIDE'} [{BAND[0]}, {BAND[1]}])", "",
                  "| method | general Sim | general mAP | specialist Sim | specialist mAP | specialist AP = 1 | n |",
                  "|---|---|---|---|---|---|---|"]
        lines += [f"| {r['method']} | {r['general_sim']:.3f} | {r['general_map']:.3f} | {r['specialist_sim']:.3f} | "
                  f"{r['specialist_map']:.3f} | {r['specialist_ap1_share']:.2f} | {r['n']} |" for r in r1.table]
        lines += [""] + _verdict_table(r1.verdicts) + [""]
    lines += [f"## pooled over seeds {', '.join(map(str, seeds))} (what `fpr demo` prints last)", "",
              f"pairs: {res.info['pairs']}", ""] + _verdict_table(res.verdicts)
    text = "\n".join(lines) + "\n"
    out.write_text(text)
    print(text)
    for f in failures:
        print("MISMATCH", f, file=sys.stderr)
    if not band_ok:
        print("the stand-in's oracle mAP is outside the band on some seed", file=sys.stderr)
    return 1 if failures or not band_ok else 0


def _verdict_table(verdicts: list[dict]) -> list[str]:
    return ["| claim | PPA A | PPA B | difference [95%] | pairs | verdict |", "|---|---|---|---|---|---|"] + [
        f"| {v['claim']} | {v['ppa_a']:.3f} | {v['ppa_b']:.3f} | {v['diff']:+.3f} [{v['diff_lo']:+.3f}, "
        f"{v['diff_hi']:+.3f}] | {v['n_pairs']} | {v['verdict']} |" for v in verdicts]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, default=None, help="evaluate one world seed and store its frame")
    ap.add_argument("--pool", default=None, help="comma-separated seeds whose stored frames to tabulate")
    ap.add_argument("--out", default=str(RESULTS / "general_standin.md"))
    args = ap.parse_args()
    if args.seed is not None:
        run_seed(args.seed)
    if args.pool:
        return pool([int(s) for s in args.pool.split(",")], Path(args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
