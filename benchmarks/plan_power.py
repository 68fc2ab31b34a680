"""``fpr plan`` checked against simulation on the built-in world: the planner's predicted power from pilot worlds
against the share of fresh worlds in which ``fpr compare``'s test detects the difference.

    PYTHONPATH=. python benchmarks/plan_power.py              # pilots: world seeds 0..10; simulated: seeds 11..100
    PYTHONPATH=. python benchmarks/plan_power.py --worlds 30  # fewer simulated worlds (coarser)

Each world (3 species x 8 identities, 6 gallery images and 1 reference per identity, 4 generations per identity
and method, 64 px; methods ``new-scene@0``, ``new-scene@0.1``, ``new-scene@0.25``) is rendered, imported, indexed
with ``fpr-world-v3`` and queried (``run_query``: the run ``fpr compare`` reads); its per-query rows are kept
under ``$FPR_CACHE_DIR/plan_power`` so a rerun only re-judges (about 5 s a world on 2 busy cores). The planner
(:func:`fpr.metrics.power.power_at`, what ``fpr plan`` runs) predicts the power of each design (identities of
the gallery that get generations, generations per identity) for ``new-scene@0`` against ``@0.25`` and ``@0.1``
at level 0.05, from each one-world pilot (seeds 0..10), from them told the true difference, and from the 11
pilot worlds pooled; a simulated world of seed s runs the design on a keyed random subset of its identities and
their first generations, and ``fpr compare``'s own :func:`~fpr.metrics.summary.paired_comparison` decides
(Wilcoxon p < 0.05 and the mean difference positive). Writes benchmarks/results/plan_power.md.
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
PILOT_SEEDS = tuple(range(0, 11))
SIM_FIRST = 11
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


def pooled(frames: dict[int, pd.DataFrame]) -> pd.DataFrame:
    """Several worlds' rows as one pilot (identities named per world: the worlds are exchangeable)."""
    return pd.concat([f.assign(identity=f"s{s}-" + f["identity"]) for s, f in frames.items()], ignore_index=True)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--worlds", type=int, default=90, help=f"simulated worlds (seeds {SIM_FIRST}..)")
    args = ap.parse_args()
    from fpr.files import cache_root
    from fpr.metrics.power import pilot_from_frame, power_at
    from fpr.metrics.summary import paired_comparison

    cache = cache_root() / "plan_power"
    t0 = time.perf_counter()
    pilots = {s: world_rows(s, cache) for s in PILOT_SEEDS}
    sim_seeds = range(SIM_FIRST, SIM_FIRST + args.worlds)
    sims = {}
    for s in sim_seeds:
        sims[s] = world_rows(s, cache)
        print(f"world {s} ({time.perf_counter() - t0:.0f} s)", file=sys.stderr)
    t_worlds = time.perf_counter() - t0

    table = []
    for b in BS:
        true_diff = float(np.mean([paired_comparison(r, A, b)["mean_diff"] for r in sims.values()]))
        one = {s: pilot_from_frame(f, A, b) for s, f in pilots.items()}
        pool = pilot_from_frame(pooled(pilots), A, b)
        for n, m in DESIGNS:
            out = [paired_comparison(design_rows(r, s, n, m), A, b) for s, r in sims.items()]
            hit = np.array([(o["p_value"] < ALPHA) and o["mean_diff"] > 0 for o in out])
            width = np.array([o["ci_hi"] - o["ci_lo"] for o in out])
            own = {s: power_at(p, n, m, alpha=ALPHA) for s, p in one.items()}
            told = {s: power_at(p, n, m, difference=true_diff, alpha=ALPHA) for s, p in one.items()}
            pooled_own = power_at(pool, n, m, alpha=ALPHA)
            sim_power = float(hit.mean())
            table.append(dict(
                b=b, n=n, m=m, true_diff=true_diff, pilot0_diff=one[PILOT_SEEDS[0]].difference,
                pool_diff=pool.difference, p0_own=own[PILOT_SEEDS[0]]["power"],
                own_mean=float(np.mean([o["power"] for o in own.values()])),
                own_lo=float(min(o["power"] for o in own.values())), own_hi=float(max(o["power"] for o in own.values())),
                told_mean=float(np.mean([o["power"] for o in told.values()])), pooled=pooled_own["power"],
                simulated=sim_power, se=float(np.sqrt(sim_power * (1 - sim_power) / len(hit))),
                width_pooled=pooled_own["interval_width"], width_sim=float(width.mean())))
    t_all = time.perf_counter() - t0

    p0, pl = PILOT_SEEDS[0], PILOT_SEEDS[-1]
    lines = ["# fpr plan: predicted against simulated power on the built-in world", "",
             "`PYTHONPATH=. python benchmarks/plan_power.py --worlds " + str(args.worlds) + "`", "",
             f"Pilot worlds: seeds {p0}..{pl}; simulated worlds: seeds {SIM_FIRST}..{SIM_FIRST + args.worlds - 1} "
             "(each world: 3 species x 8 identities, 6 gallery images + 1 reference per identity, 4 generations per "
             "identity and method, 64 px, encoder `fpr-world-v3`, scope group). Comparison `new-scene@0` (a) against "
             "b, detected when `fpr compare`'s Wilcoxon p < 0.05 and the mean difference > 0. A design (n, m): n "
             "identities of a world's 24 with generations, m generations per identity and method. Simulated power: "
             "the share of the simulated worlds whose design run `fpr compare` (`paired_comparison`) detects, with "
             "its binomial standard error. Predicted power (`power_at`: what `fpr plan` computes, 1000 simulated "
             "runs): from the one-world pilot of seed " + str(p0) + " (its own difference); the mean and range over "
             f"the {len(PILOT_SEEDS)} one-world pilots; their mean when told the true difference (the simulated "
             f"worlds' pooled mean difference: the planner without the pilot's error in the difference); and from "
             f"the {len(PILOT_SEEDS)} pilot worlds pooled as one pilot ({len(PILOT_SEEDS) * 24} identities, its own "
             "difference). Interval width: `fpr compare`'s 95% interval, predicted from the pooled pilot and the "
             "mean over the simulated worlds.", "",
             "| b | n | m | true diff | pilot s0 diff | pooled diff | predicted: pilot s0 | one-world pilots: mean "
             "(range) | told true diff: mean | pooled pilot | simulated (se) | width predicted | width simulated |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in table:
        lines.append(f"| {r['b']} | {r['n']} | {r['m']} | {r['true_diff']:.4f} | {r['pilot0_diff']:.4f} | "
                     f"{r['pool_diff']:.4f} | {r['p0_own']:.3f} | {r['own_mean']:.3f} ({r['own_lo']:.2f}-"
                     f"{r['own_hi']:.2f}) | {r['told_mean']:.3f} | {r['pooled']:.3f} | {r['simulated']:.3f} "
                     f"({r['se']:.3f}) | {r['width_pooled']:.4f} | {r['width_sim']:.4f} |")

    def gaps(key):
        g = np.array([r[key] - r["simulated"] for r in table])
        return f"mean {g.mean():+.3f}, mean |gap| {np.abs(g).mean():.3f}, largest |gap| {np.abs(g).max():.3f}"

    wg = np.array([r["width_pooled"] / r["width_sim"] - 1 for r in table])
    lines += ["", "Predicted minus simulated power over the rows:",
              f"- pilot seed {p0} alone: {gaps('p0_own')}",
              f"- one-world pilots, mean: {gaps('own_mean')}",
              f"- told the true difference, mean: {gaps('told_mean')}",
              f"- pooled pilot: {gaps('pooled')}",
              f"- simulated power's own standard error: mean {np.mean([r['se'] for r in table]):.3f}",
              f"Interval width, pooled pilot against simulated: mean relative gap {wg.mean():+.3f}, largest "
              f"{np.abs(wg).max():.3f}.",
              f"Time: {t_worlds:.0f} s for the worlds (cached ones read back), {t_all:.0f} s in all."]
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "plan_power.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
