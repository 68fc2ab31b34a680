"""The world's contexts crossed with drift, its profiles and stress conditions, scored by the shipped specialist.

    PYTHONPATH=. python benchmarks/world_contexts.py measure --seeds 0 1 2   # per-query CSVs (1 min per seed under load 4, 7 under 15)
    PYTHONPATH=. python benchmarks/world_contexts.py measure --seeds 0 1 2 --configs shared-view --encoder fpr-world-v2
    PYTHONPATH=. python benchmarks/world_contexts.py table               # benchmarks/results/world_contexts.md

``measure`` renders, per seed, the full world (3 species x 10 identities, 10 gallery and 3 reference
images, 3 queries per identity and method) five times -- as it is (every method and profile), with the
``shared_view`` control, with ``siblings=0.5``, with ``home_background=1`` and with ``occlusion`` (graded
methods only) -- and scores every query with ``fpr-world-v3`` on the CPU; twice more with 5 gallery images
per identity, home backgrounds off and on, scoring ``ref-scene@1`` with a background-dominated 8x8
thumbnail (``THUMBNAIL``). Sim = cosine to the mean of the identity's reference vectors, AP against its species' gallery (``tests/galleries/world_probe.py``; the same definitions as
``fpr query``). One CSV per seed and configuration lands in ``benchmarks/results/world_contexts/``.
``table`` reads them and writes per configuration and seed the mean Sim and mAP per method and the Sim
and AP AUROCs the tests pin (``tests/galleries/test_world_specialist.py``).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
OUT_DIR = ROOT / "benchmarks" / "results" / "world_contexts"
SPECIALIST = "fpr-world-v3"
CONFIGS = {"as-is": {}, "shared-view": {"shared_view": True}, "siblings-0.5": {"siblings": 0.5},
           "home-background": {"home_background": 1.0}, "occlusion": {"occlusion": True},
           "thumbnail-g5": {"gallery": 5}, "thumbnail-g5-home": {"gallery": 5, "home_background": 1.0}}
# Configurations scored by a background-dominated 8x8 thumbnail instead of the specialist (what home backgrounds
# fool), on the one method whose scene is the reference's and whose animal is another: ref-scene@1.
THUMBNAIL = {"thumbnail-g5": ["ref-scene@1"], "thumbnail-g5-home": ["ref-scene@1"]}
PAIRS = (("new-scene@0.25", "new-scene@0.5"), ("ref-pose@0.25", "ref-pose@0.5"), ("ref-scene@0.25", "ref-scene@0.5"),
         ("new-scene@0", "new-scene@0.1"), ("new-scene@0", "new-scene@0.25"), ("new-scene@0", "ref-pose@1"),
         ("new-scene@0", "ref-scene@1"))


def csv_name(seed: int, config: str, encoder: str = SPECIALIST) -> str:
    """The per-query file of one seed and configuration; another encoder than the specialist adds ``@encoder``."""
    return f"seed{seed}-{config}" + ("" if encoder == SPECIALIST else f"@{encoder}") + ".csv.gz"


def measure(seeds: list[int], configs: list[str], encoder: str = SPECIALIST) -> None:
    import torch

    from fpr.galleries import world as W
    from tests.galleries.world_probe import embedder, probe, thumbnail

    torch.set_num_threads(1)
    embed = embedder(encoder)
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    for seed in seeds:
        for name in configs:
            t = time.perf_counter()
            methods = (list(W.METHODS) + list(W.PROFILES) if name == "as-is"
                       else THUMBNAIL.get(name, list(W.GRADED_METHODS)))
            rows = probe(W.World(W.WorldConfig(seed=seed, **CONFIGS[name])), methods,
                         thumbnail if name in THUMBNAIL else embed)
            df = pd.DataFrame([r.__dict__ for r in rows])
            df.round(6).to_csv(OUT_DIR / csv_name(seed, name, encoder), index=False)
            print(f"seed {seed} {name}: {len(df)} queries in {time.perf_counter() - t:.0f} s", flush=True)


def _one_or_mixed(values: pd.Series) -> str:
    """A method's context, or ``mixed`` for a profile that drew several."""
    return str(values.iloc[0]) if values.nunique() == 1 else "mixed"


def table(out: Path) -> str:
    from tests.galleries.world_probe import auroc

    parts = ["# The world's contexts x drift, profiles and stress conditions (fpr-world-v3, CPU)", "",
             "Written by `benchmarks/world_contexts.py table` from the per-query CSVs in "
             "`benchmarks/results/world_contexts/`. Full world per seed: 3 species x 10 identities, "
             "10 gallery + 3 reference images each, 3 queries per identity and method (90 per method). "
             "Sim = cosine to the mean reference vector; mAP over the species' gallery.", ""]
    files = sorted(OUT_DIR.glob("seed*-*.csv.gz"))
    by_cfg: dict[str, dict[int, pd.DataFrame]] = {}
    for f in files:
        seed, name = f.name.removesuffix(".csv.gz").split("-", 1)
        by_cfg.setdefault(name, {})[int(seed[4:])] = pd.read_csv(f)
    for key in [*CONFIGS, *sorted(k for k in by_cfg if "@" in k)]:  # config, or config@encoder
        seeds = by_cfg.get(key, {})
        if not seeds:
            continue
        name, _, encoder = key.partition("@")
        scorer = "8x8 thumbnail, not the specialist" if name in THUMBNAIL else (encoder or SPECIALIST)
        parts += [f"## {key} ({CONFIGS[name] or 'no stress condition'}; {scorer})", ""]
        per = {s: df.groupby("method", sort=False).agg(context=("context", _one_or_mixed), drift=("drift", "mean"),
                                                        sim=("sim", "mean"), map=("ap", "mean"))
               for s, df in sorted(seeds.items())}
        methods = list(next(iter(per.values())).index)
        head = "| method | context | drift | " + " | ".join(f"Sim s{s} | mAP s{s}" for s in per) + " |"
        parts += [head, "|" + "---|" * (3 + 2 * len(per))]
        for m in methods:
            first = per[min(per)].loc[m]
            cells = " | ".join(f"{p.loc[m, 'sim']:.3f} | {p.loc[m, 'map']:.3f}" for p in per.values())
            parts.append(f"| {m} | {first['context']} | {first['drift']:.3f} | {cells} |")
        parts += ["", "| AUROC (Sim; AP) | " + " | ".join(f"seed {s}" for s in per) + " |",
                  "|---|" + "---|" * len(per)]
        for a, b in [(a, b) for a, b in PAIRS if {a, b} <= set(methods)]:
            cells = []
            for df in seeds.values():
                x, y = df[df["method"] == a], df[df["method"] == b]
                cells.append(f"{auroc(x['sim'], y['sim']):.3f}; {auroc(x['ap'], y['ap']):.3f}")
            parts.append(f"| {a} over {b} | " + " | ".join(cells) + " |")
        parts.append("")
    text = "\n".join(parts)
    out.write_text(text + "\n")
    return text


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("measure")
    m.add_argument("--seeds", type=int, nargs="+", default=[0])
    m.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    m.add_argument("--encoder", default=SPECIALIST, help="a shipped encoder id (files of another one end in @id)")
    t = sub.add_parser("table")
    t.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "world_contexts.md")
    args = ap.parse_args(argv)
    if args.cmd == "measure":
        measure(args.seeds, args.configs, args.encoder)
    else:
        print(table(args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
