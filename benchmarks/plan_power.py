"""``fpr plan`` checked against simulation on the built-in world: the planner's predicted power from a pilot
world against the share of fresh worlds in which ``fpr compare``'s test detects the difference.

    PYTHONPATH=. python benchmarks/plan_power.py              # pilot seed 0, simulated worlds seeds 1..60
    PYTHONPATH=. python benchmarks/plan_power.py --worlds 20  # fewer simulated worlds (coarser)

Each world (3 species x 8 identities, 6 gallery images and 1 reference per identity, 4 generations per identity
and method, 64 px; methods ``new-scene@0``, ``new-scene@0.1``, ``new-scene@0.25``) is rendered, imported, indexed
with ``fpr-world-v3`` and queried (``run_query``: the run ``fpr compare`` reads); its per-query rows are kept
under ``$FPR_CACHE_DIR/plan_power`` so a rerun only re-judges. The pilot is world seed 0; the planner
(:func:`fpr.metrics.power.power_at`, what ``fpr plan`` runs) predicts the power of each design (identities of
the gallery that get generations, generations per identity) for ``new-scene@0`` against ``@0.25`` and ``@0.1``
at level 0.05; a simulated world of seed s runs the design on a keyed random subset of its identities and
their first generations, and ``fpr compare``'s own :func:`~fpr.metrics.summary.paired_comparison` decides
(Wilcoxon p < 0.05 and the mean difference positive). Two predictions per design: from the pilot's own
difference (what a user gets), and with the true difference (the simulated worlds' pooled mean difference:
the planner's machinery without the pilot's sampling error). Writes benchmarks/results/plan_power.md.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
RESULTS = ROOT / "benchmarks" / "results"
PILOT_SEED = 0
A = "new-scene@0"
BS = ("new-scene@0.25", "new-scene@0.1")
WORLD = dict(identities=8, gallery=6, references=1, queries=4, size=64, methods=(A, "new-scene@0.1", "new-scene@0.25"))
DESIGNS = ((24, 4), (24, 2), (24, 1), (17, 4), (12, 4), (12, 2), (6, 4))  # (identities, generations per identity)
ALPHA = 0.05


def world_rows(seed: int, cache: Path) -> pd.DataFrame:
    """Per-query rows of world ``seed`` (rendered, imported, indexed and queried once; then read back)."""
    path = cache / f"world-s{seed}.csv"
    if path.exists():
        return pd.read_csv(path)
    import tempfile

    from fpr.galleries.curate import GallerySpec
    from fpr.galleries.world import World, WorldConfig
    from fpr.workflows.galleries import import_gallery
    from fpr.workflows.indices import build_index
    from fpr.workflows.runs import run_query

    with tempfile.TemporaryDirectory() as tmp:
        ws = Path(tmp) / "ws"
        build = World(WorldConfig(seed=seed, **WORLD)).write(Path(tmp) / "img", workers=0, cache=False)
        name = f"plan-s{seed}"
        import_gallery(name, build.records, GallerySpec(seed=seed), workspace=ws, source="world")
        idx = build_index(name, "fpr-world-v3", name=name, workspace=ws, device="cpu")
        res = run_query(idx.name, pd.DataFrame(build.queries), workspace=ws, seed=seed, device="cpu")
    rows = res.per_query[["query_id", "group", "identity", "prompt", "method", "status", "ap"]]
    cache.mkdir(parents=True, exist_ok=True)
    rows.to_csv(path, index=False)
    return rows


def design_rows(rows: pd.DataFrame, seed: int, identities: int, per_identity: int) -> pd.DataFrame:
    """A planned run inside a world: ``identities`` of its identities (keyed draw) with their first
    ``per_identity`` generations per method."""
    from fpr.keys import keyed_rng

    ids = sorted(rows["identity"].unique())
    keep = set(keyed_rng(seed, "plan-design", identities).choice(ids, size=identities, replace=False))
    part = rows[rows["identity"].isin(keep)].sort_values("query_id", kind="stable")
    rank = part.groupby(["identity", "method"]).cumcount()
    return part[rank < per_identity]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--worlds", type=int, default=60, help="simulated worlds (seeds 1..N)")
    args = ap.parse_args()
    from fpr.files import cache_root
    from fpr.metrics.power import pilot_from_frame, power_at
    from fpr.metrics.summary import paired_comparison

    cache = cache_root() / "plan_power"
    t0 = time.perf_counter()
    pilot_rows = world_rows(PILOT_SEED, cache)
    sims = {}
    for s in range(1, args.worlds + 1):
        sims[s] = world_rows(s, cache)
        print(f"world {s}/{args.worlds} ({time.perf_counter() - t0:.0f} s)", file=sys.stderr)
    t_worlds = time.perf_counter() - t0

    lines = []
    table = []
    for b in BS:
        pilot = pilot_from_frame(pilot_rows, A, b)
        true_diff = float(np.mean([paired_comparison(r, A, b)["mean_diff"] for r in sims.values()]))
        for n, m in DESIGNS:
            out = [paired_comparison(design_rows(r, s, n, m), A, b) for s, r in sims.items()]
            hit = np.array([(o["p_value"] < ALPHA) and o["mean_diff"] > 0 for o in out])
            width = np.array([o["ci_hi"] - o["ci_lo"] for o in out])
            own = power_at(pilot, n, m, alpha=ALPHA)
            told = power_at(pilot, n, m, difference=true_diff, alpha=ALPHA)
            sim_power = float(hit.mean())
            se = float(np.sqrt(sim_power * (1 - sim_power) / len(hit)))
            table.append(dict(b=b, n=n, m=m, pilot_diff=pilot.difference, true_diff=true_diff,
                              predicted_own=own["power"], predicted_true=told["power"], simulated=sim_power,
                              se=se, width_pred=told["interval_width"], width_sim=float(width.mean())))
    t_all = time.perf_counter() - t0

    lines += ["# fpr plan: predicted against simulated power on the built-in world", "",
              "`PYTHONPATH=. python benchmarks/plan_power.py --worlds " + str(args.worlds) + "`", "",
              f"Pilot: world seed {PILOT_SEED}; simulated: world seeds 1..{args.worlds} (each world: 3 species x 8 "
              "identities, 6 gallery images + 1 reference per identity, 4 generations per identity and method, 64 px, "
              "encoder `fpr-world-v3`, scope group). Comparison `new-scene@0` (a) against b, detected when "
              "`fpr compare`'s Wilcoxon p < 0.05 and the mean difference > 0. A design (n, m) is n identities "
              "of the world's 24 with generations, m generations per identity and method. Predicted power: the "
              "planner (`power_at`, 1000 simulated runs) from the pilot's own difference, and told the true "
              "difference (pooled mean over the simulated worlds). Simulated power: share of the worlds that "
              "detect, with its binomial standard error. Interval width: `fpr compare`'s 95% interval, predicted "
              "(told the true difference) and mean over the simulated worlds.", "",
              "| b | n | m | pilot diff | true diff | predicted (pilot diff) | predicted (true diff) | simulated "
              "(se) | width predicted | width simulated |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for r in table:
        lines.append(f"| {r['b']} | {r['n']} | {r['m']} | {r['pilot_diff']:.4f} | {r['true_diff']:.4f} | "
                     f"{r['predicted_own']:.3f} | {r['predicted_true']:.3f} | {r['simulated']:.3f} ({r['se']:.3f}) | "
                     f"{r['width_pred']:.4f} | {r['width_sim']:.4f} |")
    gap_true = [abs(r["predicted_true"] - r["simulated"]) for r in table]
    gap_own = [abs(r["predicted_own"] - r["simulated"]) for r in table]
    lines += ["", f"Predicted (true diff) minus simulated power: mean |gap| {np.mean(gap_true):.3f}, "
                  f"largest {np.max(gap_true):.3f}; from the pilot's own difference: mean |gap| {np.mean(gap_own):.3f}, "
                  f"largest {np.max(gap_own):.3f}.",
              f"Time: {t_worlds:.0f} s for the worlds (cached ones read back), {t_all:.0f} s in all."]
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "plan_power.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
