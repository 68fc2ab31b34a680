"""The paper-difficulty world: the specialist's oracle mAP over look-alikes and gallery size (issue #32 item 2).

    PYTHONPATH=. python benchmarks/paper_world.py measure --seeds 100 101 --grid coarse   # calibration seeds
    PYTHONPATH=. python benchmarks/paper_world.py measure --seeds 0 1 2 7 --grid preset    # held out
    PYTHONPATH=. python benchmarks/paper_world.py table     # benchmarks/results/paper_world.md

``measure`` renders, per seed and grid point, the world's real images only (3 species x ``identities``
identities, ``gallery`` gallery and 3 reference images each; look-alike families of ``family_size`` sharing
``lookalikes`` of their markings: :class:`fpr.galleries.world.WorldConfig`), imports it, builds the
``fpr-world-v3`` index on the CPU and measures the gallery's difficulty with
:func:`fpr.workflows.difficulty.gallery_difficulty` (the reference images as queries, the pipeline of
``fpr query --oracle``): oracle mAP and AP = 1 share, per species and overall. One JSON line per
(seed, point) is appended to ``benchmarks/results/paper_world.jsonl``. The paper's target: MiewID's oracle
mAP 0.803 on its Re-ID gallery (Table 1), so the range 0.75-0.85.
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
OUT = ROOT / "benchmarks" / "results" / "paper_world.jsonl"
TABLE = ROOT / "benchmarks" / "results" / "paper_world.md"
ENCODER = "fpr-world-v3"
GRIDS = {
    # identities, gallery, lookalikes, family_size
    "coarse": [(10, 10, 0.0, 2), (10, 10, 0.5, 2), (10, 10, 0.7, 2), (10, 10, 0.85, 2),
               (10, 10, 0.7, 3), (10, 10, 0.85, 3), (20, 10, 0.7, 2), (20, 10, 0.85, 2)],
    "fine": [(10, 10, 0.8, 2), (15, 10, 0.85, 2), (10, 20, 0.85, 2), (20, 10, 0.8, 2), (20, 10, 0.9, 2)],
    "fine2": [(10, 10, 0.875, 2), (10, 10, 0.9, 2), (15, 10, 0.875, 2)],
    "preset": [],  # filled from fpr.workflows.demo.PAPER (the preset as shipped)
}


def point_config(point) -> dict:
    identities, gallery, lookalikes, family_size = point
    return dict(identities=identities, gallery=gallery, references=3, queries=1, methods=("new-scene@0",),
                lookalikes=lookalikes, family_size=family_size)


def measure(seeds: list[int], grid: str) -> None:
    import pandas as pd
    import torch

    from fpr.galleries.world import World, WorldConfig
    from fpr.workflows.difficulty import gallery_difficulty
    from fpr.workflows.galleries import import_gallery
    from fpr.workflows.indices import build_index
    from fpr.workflows.runs import run_query

    torch.set_num_threads(1)
    points = GRIDS[grid]
    if grid == "preset":
        from fpr.workflows.demo import PAPER

        points = [(PAPER["identities"], PAPER["gallery"], PAPER["lookalikes"], PAPER["family_size"])]
    with tempfile.TemporaryDirectory(prefix="paper-world-") as tmp:
        ws = Path(tmp) / "ws"
        for seed in seeds:
            for point in points:
                t = time.perf_counter()
                cfg = WorldConfig(seed=seed, **point_config(point))
                build = World(cfg).write(Path(tmp) / "world", workers=1)
                import_gallery("g", build.records, workspace=ws, source="world", overwrite=True)
                build_index("g", ENCODER, name="i", workspace=ws, device="cpu", overwrite=True)
                d = gallery_difficulty("i", workspace=ws, device="cpu")
                # per species: the stored oracle run of the same pipeline (its overall equals d's)
                run = run_query("i", pd.DataFrame(build.queries[:1]), workspace=ws, device="cpu", oracle=True,
                                run="r", overwrite=True)
                o = run.per_query[run.per_query["method"] == "oracle"]
                per_species = {g: {"map": float(x["ap"].mean()), "ap_one": float((x["ap"] == 1.0).mean())}
                               for g, x in o.groupby("group")}
                row = {"seed": seed, "grid": grid, "identities": point[0], "gallery": point[1],
                       "lookalikes": point[2], "family_size": point[3], "oracle_map": d.oracle_map,
                       "ap_one_share": d.ap_one_share, "n_queries": d.n_queries,
                       "run_oracle_map": float(o["ap"].mean()), "per_species": per_species,
                       "seconds": round(time.perf_counter() - t, 1)}
                print(json.dumps(row), flush=True)
                with OUT.open("a") as f:
                    f.write(json.dumps(row) + "\n")


def table() -> None:
    import pandas as pd

    rows = [json.loads(line) for line in OUT.read_text().splitlines() if line.strip()]
    df = pd.DataFrame(rows)
    lines = ["# The paper-difficulty world: specialist oracle mAP over look-alikes and gallery size", "",
             f"`{ENCODER}` on the CPU; oracle = the 3 reference images of each identity as queries against its "
             "species' gallery (`fpr.workflows.difficulty.gallery_difficulty`, the pipeline of "
             "`fpr query --oracle`; `run_oracle_map` is a stored oracle run's mean, equal by construction). "
             "Target: the paper's MiewID, oracle mAP 0.803 on its Re-ID gallery (Table 1), range 0.75-0.85.",
             "", "Generated by `PYTHONPATH=. python benchmarks/paper_world.py table` from `paper_world.jsonl`.", "",
             "**Choice** (`fpr.workflows.demo.PAPER`, `fpr demo --world paper`): calibrated on seeds 100 and 101 "
             "(grids `coarse`, `fine`, `fine2`), the smallest gallery that reaches the range: the easy world's size "
             "(10 identities x 10 gallery images per species) with look-alike pairs sharing 0.9 of their markings, "
             "mean oracle mAP 0.800 there. Gallery size alone does not get there (no look-alikes: 0.996-0.999 at "
             "10 x 10; the issue measured >= 0.98 up to 30 x 20), and doubling the identities moves the share "
             "needed only from 0.9 to about 0.85 at twice the cost. Checked on held-out seeds 0, 1, 2 (the demo's "
             "verdict seeds) and 7 (grid `preset`).", ""]
    for grid, g in df.groupby("grid", sort=False):
        lines += [f"## grid `{grid}`", "",
                  "| seed | identities | gallery | lookalikes | family | oracle mAP | AP = 1 share | zebra mAP | "
                  "leopard mAP | giraffe mAP | run oracle mAP | s |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in g.itertuples():
            ps = r.per_species
            lines.append(f"| {r.seed} | {r.identities} | {r.gallery} | {r.lookalikes:g} | {r.family_size} | "
                         f"{r.oracle_map:.3f} | {r.ap_one_share:.3f} | "
                         + " | ".join(f"{ps.get(s, {}).get('map', float('nan')):.3f}"
                                      for s in ("zebra", "leopard", "giraffe"))
                         + f" | {r.run_oracle_map:.3f} | {r.seconds:.0f} |")
        mean = g.groupby(["identities", "gallery", "lookalikes", "family_size"], sort=False)[
            ["oracle_map", "ap_one_share"]].agg(["mean", "min", "max"])
        lines += ["", f"Mean [min, max] over the grid's seeds ({', '.join(map(str, sorted(g['seed'].unique())))}):",
                  "", "| identities | gallery | lookalikes | family | oracle mAP | AP = 1 share |", "|---|---|---|---|---|---|"]
        for key, r in mean.iterrows():
            lines.append(f"| {key[0]} | {key[1]} | {key[2]:g} | {key[3]} | {r[('oracle_map', 'mean')]:.3f} "
                         f"[{r[('oracle_map', 'min')]:.3f}, {r[('oracle_map', 'max')]:.3f}] | "
                         f"{r[('ap_one_share', 'mean')]:.3f} [{r[('ap_one_share', 'min')]:.3f}, "
                         f"{r[('ap_one_share', 'max')]:.3f}] |")
        lines.append("")
    TABLE.write_text("\n".join(lines) + "\n")
    print(TABLE.read_text())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("measure")
    m.add_argument("--seeds", type=int, nargs="+", default=[100, 101])
    m.add_argument("--grid", choices=sorted(GRIDS), default="coarse")
    sub.add_parser("table")
    args = ap.parse_args()
    if args.cmd == "measure":
        measure(args.seeds, args.grid)
    else:
        table()


if __name__ == "__main__":
    main()
