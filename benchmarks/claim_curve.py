"""The two claims' strict-PPA differences as a curve over gallery difficulty (issue #32 item 4).

    PYTHONPATH=. python benchmarks/claim_curve.py measure --seeds 0 1    # benchmarks/results/claim_curve.jsonl
    PYTHONPATH=. python benchmarks/claim_curve.py table                  # claim_curve.md and claim_curve.png

``measure`` renders, per grid point (identities per species, gallery images per identity, look-alike share
in pairs) and world seed, the demo's generations (the new-scene drift ladder, ``ref-pose@1``,
``ref-scene@0.25``; 3 references and 3 queries per identity and method), and runs them with the oracle
under the specialist ``fpr-world-v3`` and the general-purpose stand-in ``fpr-general-v2`` (the demo's
verdict path: :func:`fpr.workflows.meta.claims_frame`). The seeds of a point are pooled and judged by
:func:`fpr.workflows.meta.encoder_claims` (strict PPA, cross-context pairs, paired 95% bootstrap).
Each point carries its regime: the specialist's oracle mAP and AP = 1 share (the gallery's difficulty),
the AP = 1 share of the judged queries and the specialist-AP tie share of the judged pairs
(:func:`fpr.metrics.claims.judged_pairs`). Whatever comes out is printed, not tuned.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
OUT = ROOT / "benchmarks" / "results" / "claim_curve.jsonl"
TABLE = ROOT / "benchmarks" / "results" / "claim_curve.md"
PNG = ROOT / "benchmarks" / "results" / "claim_curve.png"
SPECIALIST, GENERAL = "fpr-world-v3", "fpr-general-v2"
METHODS = ("new-scene@0", "new-scene@0.1", "new-scene@0.25", "new-scene@0.5", "new-scene@1", "ref-pose@1",
           "ref-scene@0.25")
# A coarse grid: each axis moved alone from the easy world (10 x 10, no look-alikes), then both together.
GRID = [(5, 5, 0.0), (10, 10, 0.0), (20, 10, 0.0), (10, 20, 0.0), (10, 10, 0.5), (10, 10, 0.7), (10, 10, 0.9),
        (20, 10, 0.9)]


def measure(seeds: list[int], points: list[tuple]) -> None:
    import pandas as pd
    import torch

    from fpr.galleries.world import World, WorldConfig
    from fpr.metrics.claims import judged_pairs
    from fpr.workflows.galleries import import_gallery
    from fpr.workflows.indices import build_index
    from fpr.workflows.meta import claims_frame, encoder_claims
    from fpr.workflows.runs import run_query

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory(prefix="claim-curve-") as tmp:
        ws = Path(tmp) / "ws"
        for identities, gallery, lookalikes in points:
            t = time.perf_counter()
            frames, oracle = [], []
            for seed in seeds:
                cfg = WorldConfig(seed=seed, identities=identities, gallery=gallery, references=3, queries=3,
                                  methods=METHODS, lookalikes=lookalikes)
                build = World(cfg).write(Path(tmp) / f"w{seed}", workers=1)
                import_gallery("g", build.records, workspace=ws, source="world", overwrite=True)
                queries = pd.DataFrame(build.queries)
                runs = {}
                for enc in (SPECIALIST, GENERAL):
                    build_index("g", enc, name=enc, workspace=ws, device="cpu", overwrite=True)
                    runs[enc] = run_query(enc, queries, workspace=ws, device="cpu", oracle=True, scorers=[],
                                          run=f"r-{enc}", overwrite=True, seed=seed)
                spec = runs[SPECIALIST].per_query
                oracle.append(spec[spec["method"] == "oracle"]["ap"].to_numpy(float))
                frames.append(claims_frame(spec, runs[GENERAL].per_query, seed=seed))
            frame = pd.concat(frames, ignore_index=True)
            res = encoder_claims(frame, seed=0)
            judged = frame[pd.to_numeric(frame["drift"], errors="coerce").notna()].reset_index(drop=True)
            pairs = judged_pairs(judged, "drift")
            ap = pd.to_numeric(judged["specialist_map"]).to_numpy(float)
            import numpy as np

            orc = np.concatenate(oracle)
            row = {"identities": identities, "gallery": gallery, "lookalikes": lookalikes, "seeds": seeds,
                   "oracle_map": float(orc.mean()), "oracle_ap_one": float((orc == 1.0).mean()),
                   "ap_one_share": float((ap == 1.0).mean()),
                   "tie_share": float((ap[pairs.a] == ap[pairs.b]).mean()) if len(pairs.a) else float("nan"),
                   "verdicts": res.verdicts, "seconds": round(time.perf_counter() - t, 1)}
            print(json.dumps(row), flush=True)
            with OUT.open("a") as f:
                f.write(json.dumps(row) + "\n")


def _cell(v: dict) -> str:
    return f"{v['diff']:+.3f} [{v['diff_lo']:+.3f}, {v['diff_hi']:+.3f}] {v['verdict']}"


def table() -> None:
    rows = [json.loads(line) for line in OUT.read_text().splitlines() if line.strip()]
    rows.sort(key=lambda r: -r["oracle_map"])
    lines = ["# The two claims over gallery difficulty", "",
             f"Specialist `{SPECIALIST}`, general-purpose stand-in `{GENERAL}`, CPU; per point the world seeds "
             f"{rows[0]['seeds'] if rows else []} pooled; strict PPA (VISTAR's: a tie is wrong) on cross-context "
             "pairs, paired 95% bootstrap over queries (1000 resamples). Claim (i): specialist mAP vs general Sim; "
             "claim (ii): specialist mAP vs specialist Sim. Regime: the specialist's oracle mAP and AP = 1 share "
             "(the reference images as queries), the AP = 1 share of the judged queries and the specialist-AP tie "
             "share of the judged pairs. Rows from the easiest gallery (highest oracle mAP) to the hardest. "
             "Printed as measured, not tuned.", "",
             "Generated by `PYTHONPATH=. python benchmarks/claim_curve.py measure --seeds 0 1` then `... table`.", "",
             "| identities | gallery | look-alikes | oracle mAP | oracle AP=1 | judged AP=1 | AP tie share | "
             "claim (i) diff [95%] | claim (ii) diff [95%] | s |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        v = {x["claim"]: x for x in r["verdicts"]}
        lines.append(f"| {r['identities']} | {r['gallery']} | {r['lookalikes']:g} | {r['oracle_map']:.3f} | "
                     f"{r['oracle_ap_one']:.3f} | {r['ap_one_share']:.3f} | {r['tie_share']:.3f} | "
                     f"{_cell(v['specialist mAP vs general Sim'])} | {_cell(v['specialist mAP vs specialist Sim'])} | "
                     f"{r['seconds']:.0f} |")
    lines += ["", "![both claims over the oracle mAP and the AP tie share](claim_curve.png)", ""]
    TABLE.write_text("\n".join(lines) + "\n")
    print(TABLE.read_text())
    _plot(rows)


def _plot(rows: list[dict]) -> None:
    """Both differences against the gallery's difficulty: the oracle mAP (left) and the judged pairs' AP tie
    share (right); harder galleries to the right in both."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8), dpi=110, sharey=True)
    for ax, key, xlabel in ((axes[0], "oracle_map", "specialist oracle mAP"),
                            (axes[1], "tie_share", "specialist AP tie share of the judged pairs")):
        for claim, colour, label in (("specialist mAP vs specialist Sim", "C0", "claim (ii): spec. mAP - spec. Sim"),
                                     ("specialist mAP vs general Sim", "C1", "claim (i): spec. mAP - gen. Sim")):
            pts = sorted(((r[key], next(v for v in r["verdicts"] if v["claim"] == claim)) for r in rows),
                         key=lambda p: p[0])
            x = [p[0] for p in pts]
            y = [p[1]["diff"] for p in pts]
            err = [[p[1]["diff"] - p[1]["diff_lo"] for p in pts], [p[1]["diff_hi"] - p[1]["diff"] for p in pts]]
            ax.errorbar(x, y, yerr=err, fmt="o-", color=colour, capsize=3, label=label)
        ax.axhline(0, color="grey", lw=0.8)
        ax.invert_xaxis()
        ax.set_xlabel(xlabel + " (harder to the right)")
    axes[0].axvspan(0.75, 0.85, color="grey", alpha=0.15, label="paper's oracle range (MiewID 0.803)")
    axes[0].set_ylabel("strict-PPA difference [95%]")
    axes[0].legend(fontsize=7, loc="center left")
    fig.tight_layout()
    fig.savefig(PNG)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("measure")
    m.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    m.add_argument("--points", type=int, nargs="*", default=None, help="indices into GRID (default all)")
    sub.add_parser("table")
    args = ap.parse_args()
    if args.cmd == "measure":
        measure(args.seeds, [GRID[i] for i in (args.points if args.points is not None else range(len(GRID)))])
    else:
        table()


if __name__ == "__main__":
    main()
