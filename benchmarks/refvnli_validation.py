"""RefVNLI-recipe model vs the paper's baselines on held-out world seeds (issue #25 item 3).

Per world seed (evaluation identities: never in the training triplets, which use training
identities only):

- subject preservation: AUROC of faithful over drift-0.5, generic, near-copy and ref-pose@1
  (the reference's layout on a new background, another individual: world version 3), for the
  model's ``sp`` (mean over the query's 3 references), Sim with the specialist encoder
  (fpr-world-v3) and Sim with a general-purpose encoder (``--general``, default the stand-in
  fpr-general-v2; pixels-16 is the floor);
- textual alignment: on a held-out ``fpr refvnli data`` build (data seed = 100 + world
  seed; scene-positive pairs, one row per (target, prompt)), AUROC of the matching prompt
  over the swapped and the one-detail-edited prompt, for the model's ``ta`` and for its
  dual-encoder cosine (the same towers scored CLIP-T style).

Intervals: 95% stratified bootstrap (1000 resamples). One seed per invocation (each stays
under the 8-minute limit on a loaded machine); ``--table`` merges the JSON files:

    PYTHONPATH=$PWD python benchmarks/refvnli_validation.py --seed 11 --json /tmp/rv-11.json
    PYTHONPATH=$PWD python benchmarks/refvnli_validation.py --seed 12 --json /tmp/rv-12.json
    PYTHONPATH=$PWD python benchmarks/refvnli_validation.py --table /tmp/rv-11.json /tmp/rv-12.json \\
        --out benchmarks/results/refvnli_validation.md

``--model`` takes what ``refvnli.model`` takes (default builtin); ``--label`` names it in the table.
"""
from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path


def run(seed: int, model: str, label: str, identities: int, queries: int, sets: int, n_boot: int,
        general: str = "fpr-general-v2") -> dict:
    import torch

    from fpr.workflows.refvnli import WorldFrames, build_refvnli_data
    from fpr.workflows.refvnli_validate import data_ta, world_sp

    torch.set_num_threads(1)  # a crowded 2-core machine: one thread each is the fastest and repeatable
    load = os.getloadavg()
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        sp, _ = world_sp(model, tmp, seed=seed, identities=identities, queries=queries, n_boot=n_boot,
                         general=general)
        build_refvnli_data(Path(tmp) / "ta", world=WorldFrames(sets=sets, seed=100 + seed))
        ta, _ = data_ta(model, Path(tmp) / "ta", n_boot=n_boot, seed=seed)
    return {"seed": seed, "model": label, "identities_per_species": identities, "queries_per_method": queries,
            "ta_data_sets_per_species": sets, "rows": [s.as_row() for s in sp + ta],
            "seconds": round(time.perf_counter() - start, 1), "load_at_start": [round(x, 2) for x in load],
            "load_at_end": [round(x, 2) for x in os.getloadavg()]}


HEADER = """# RefVNLI-recipe model vs Sim and the dual-encoder read-out on held-out world seeds

Written by `benchmarks/refvnli_validation.py` (one `--seed` per invocation, then `--table`).
sp: AUROC of the faithful query over each negative method (evaluation identities, never
trained on; 3 references per query). ta: AUROC of the matching prompt over the swapped and
the one-detail-edited prompt (a held-out `fpr refvnli data` build, data seed 100 + world
seed). 95% stratified bootstrap intervals, 1000 resamples. 2 shared CPU cores, 1 thread.

"""


def table(runs: list[dict]) -> str:
    lines = ["| seed | model | task | positive vs negative | scorer | n+ / n- | AUROC [95% CI] |",
             "|---|---|---|---|---|---|---|"]
    for r in runs:
        for row in r["rows"]:
            lines.append(f"| {r['seed']} | {r['model']} | {row['task']} | {row['positive']} vs {row['negative']} | "
                         f"{row['scorer']} | {row['n_pos']} / {row['n_neg']} | "
                         f"{row['auroc']:.3f} [{row['lo']:.3f}, {row['hi']:.3f}] |")
    meta = [f"- seed {r['seed']} ({r['model']}): {r['identities_per_species']} identities x 3 species, "
            f"{r['queries_per_method']} queries per identity and method; TA data {r['ta_data_sets_per_species']} "
            f"sets per species; {r['seconds']} s, load average {r['load_at_start']} -> {r['load_at_end']}"
            for r in runs]
    return "\n".join(lines) + "\n\n" + "\n".join(meta) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seed", type=int)
    ap.add_argument("--model", default="builtin")
    ap.add_argument("--label", default=None)
    ap.add_argument("--general", default="fpr-general-v2", help="the general-purpose encoder whose Sim is a baseline")
    ap.add_argument("--identities", type=int, default=8)
    ap.add_argument("--queries", type=int, default=3)
    ap.add_argument("--sets", type=int, default=8)
    ap.add_argument("--boot", type=int, default=1000)
    ap.add_argument("--json", help="write this seed's rows here")
    ap.add_argument("--table", nargs="+", help="merge these JSON files into a markdown table")
    ap.add_argument("--out", help="with --table: the markdown file (else stdout)")
    a = ap.parse_args()
    if a.table:
        runs = [r for p in a.table for r in (json.loads(Path(p).read_text()),)]
        text = HEADER + table(runs)
        if a.out:
            Path(a.out).write_text(text)
        print(text)
        return
    res = run(a.seed, a.model, a.label or a.model, a.identities, a.queries, a.sets, a.boot, a.general)
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=2) + "\n")
    print(table([res]))


if __name__ == "__main__":
    main()
