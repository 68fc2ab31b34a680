"""The demo figures the docs quote, measured once and rendered into the docs from one file.

    PYTHONPATH=. python benchmarks/docs_figures.py            # runs fpr demo --full, then fpr demo (the quick
                                                              # default), writes the JSON, re-renders the docs
    PYTHONPATH=. python benchmarks/docs_figures.py --render   # only re-renders the docs from the stored JSON
    PYTHONPATH=. python benchmarks/docs_figures.py --only quick   # one demo; the other's stored entry is kept

``fpr demo --full --format json`` (seed 0, the shipped encoder, copy-paste on) and ``fpr demo`` (the quick
demo, the default) run as subprocesses, each twice with one fresh pair of cache folders (``FPR_CACHE_DIR`` and
``NUMBA_CACHE_DIR``: a first run as on a new machine, kernels compiled too, then a second from the caches), in
temporary workspaces; the first run's JSON, both wall times and the load average around them go to
benchmarks/results/demo_figures.json. Every demo figure in README.md, docs/reproduce-paper.md and
docs/world.md (and docs/world.md's table of world version 2's paired queries, rendered from the per-query CSVs of
benchmarks/world_contexts.py in benchmarks/results/world_contexts/) sits between ``<!-- figures: NAME -->`` and ``<!-- /figures -->`` and is rendered here from
that file; tests/docs/test_docs_static.py renders the sections again and fails if a document differs, so a
figure cannot be edited by hand or go stale against the file. The figures themselves are fpr demo's
output, whose values tests/test_demo.py checks against independent computations; the agreement figures and
the two verdicts are also checked against benchmarks/truth_agreement.py and benchmarks/general_standin.py.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from fpr.galleries.world import COPY_METHODS, DRIFT_LEVELS, METHOD_DRIFT, method_name

RESULTS = ROOT / "benchmarks" / "results" / "demo_figures.json"
LADDER = tuple(method_name("new-scene", d) for d in DRIFT_LEVELS)  # one context, drift 0 -> 1 (another animal)
KEPT, DRIFTED = LADDER[0], LADDER[1:-1]  # KEPT: the identity kept in a new scene (version 2's "faithful")
POSE, SCENE = "ref-pose@1", "ref-scene@0.25"  # the reference's layout / whole scene (the demo's other contexts)
SECTION = re.compile(r"(<!-- figures: (?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- /figures -->)", re.DOTALL)


def _timed_demo(cmd: list[str], cache: Path) -> tuple[subprocess.CompletedProcess, float, float, float]:
    load0, t0 = os.getloadavg()[0], time.perf_counter()
    r = subprocess.run(cmd, check=False, capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": str(ROOT), "FPR_CACHE_DIR": str(cache),
                            "NUMBA_CACHE_DIR": str(cache / "numba")})
    return r, time.perf_counter() - t0, load0, os.getloadavg()[0]


def measure(quick: bool) -> dict:
    """``fpr demo`` twice with one fresh cache folder, each in a fresh workspace: a first run (empty
    ``FPR_CACHE_DIR`` and ``NUMBA_CACHE_DIR``: worlds rendered, images embedded, copy-paste matched, kernels
    compiled, as on a new machine) and a second (worlds, embeddings, copy-paste scores and kernels from the
    caches). The JSON is the first run's (the second's equals
    it: tests/test_demo_speed.py); wall seconds and the 1-minute load before and after of both."""
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in (1, 2):
            cmd = [sys.executable, "-m", "fpr", "--workspace", str(Path(tmp) / f"ws{n}"), "demo", "--format", "json"]
            r, wall, load0, load1 = _timed_demo(cmd + ([] if quick else ["--full"]), Path(tmp) / "cache")
            if r.returncode != 0:
                sys.exit(f"fpr demo{'' if quick else ' --full'} failed: {r.stderr.strip().splitlines()[-1:]}")
            runs.append((json.loads(r.stdout), wall, load0, load1))
    (out, wall, load0, load1), (_, warm, warm0, warm1) = runs
    out.pop("images", None)  # a temporary folder
    return {"command": "fpr demo --format json" + ("" if quick else " --full"), "wall_s": round(wall, 1),
            "load_before": round(load0, 1), "load_after": round(load1, 1), "cores": os.cpu_count(), "demo": out,
            "warm_wall_s": round(warm, 1), "warm_load_before": round(warm0, 1), "warm_load_after": round(warm1, 1)}


def _warm(run: dict) -> str:
    """The second run's wall time and load, or nothing for an entry measured before there was one."""
    if "warm_wall_s" not in run:
        return ""
    load = _span([run["warm_load_before"], run["warm_load_after"]], lambda x: f"{x:.0f}")
    return f"; a second run, from the caches, {run['warm_wall_s']:.0f} s (load {load})"


def _overall(demo: dict, metric: str) -> dict[str, dict]:
    return {r["method"]: r for r in demo["summary"] if r["group"] == "*" and metric in r}


def _pct(x: float) -> str:
    return f"{100 * x:.0f}%"


def _load(run: dict) -> str:
    """The 1-minute load average around a run, low-high (it may fall while the run goes)."""
    return _span([run["load_before"], run["load_after"]], lambda x: f"{x:.0f}")


def _span(values: list[float], fmt) -> str:
    lo, hi = fmt(min(values)), fmt(max(values))
    return lo if lo == hi else f"{lo}-{hi}"


def _agreement(demo: dict, methods: str, metric: str) -> dict:
    return next(r for r in demo["validity"]["agreement"] if r["methods"] == methods and r["metric"] == metric)


def generations(demo: dict) -> list[str]:
    """The demo's graded methods in its own order (the copies are not generations)."""
    return [m for m in demo["world"]["methods"] if m not in COPY_METHODS]


def _chain(m: dict[str, float], methods: tuple[str, ...]) -> str:
    """'a 0.9 > b 0.8 ...' with the comparison each pair really has (a ladder need not be ordered)."""
    out = f"{methods[0]} {m[methods[0]]:.3f}"
    for a, b in zip(methods, methods[1:]):
        out += f" {'>' if m[a] > m[b] else '<='} {b} {m[b]:.3f}"
    return out


def verdict_lines(demo: dict) -> list[str]:
    """The verdict lines ``fpr demo`` prints last (its own formatter), without the 2x2 tables above them: one block
    per world the demo judges (labelled by world when there are several), a blank line between blocks."""
    from fpr.cli.demo import world_claims_lines

    worlds = demo.get("claims_worlds") or [{"world": None, "claims": demo["claims"]}]
    out: list[str] = []
    for entry in worlds:
        lines = world_claims_lines(entry["claims"], world=entry["world"] if len(worlds) > 1 else None)
        head = next(i for i, line in enumerate(lines) if line.lstrip("\n").startswith("verdicts"))
        out += [line.lstrip("\n") for line in lines[head:]] + [""]
    return out[:-1]


def _worlds_phrase(demo: dict) -> str:
    worlds = demo.get("claims_worlds") or []
    if len(worlds) < 2:
        return ""
    return " on each world it judges (" + ", ".join(
        f"{w['world']}: {w['config']['identities']} identities x {w['config']['gallery']} gallery images per species"
        + (f", look-alike families of {w['config']['family_size']} sharing {w['config']['lookalikes']:g} of their "
           f"markings" if w["config"].get("lookalikes") else "") for w in worlds) + ")"


def readme_demo(fig: dict) -> str:
    full, quick = fig["full"], fig["quick"]
    d, v = full["demo"], full["demo"]["validity"]
    m = {k: r["map"] for k, r in _overall(d, "map").items()}
    copies = [k for k in COPY_METHODS if k in v["copy_paste_flag_rate"]]
    pct = lambda x: f"{100 * x:.0f}"
    gen_map, gen_sim = _agreement(d, "generations", "mAP"), _agreement(d, "generations", "Sim")
    t, info = d["timings"], d["claims"]["info"]
    return (
        f"Measured by `benchmarks/docs_figures.py` (results: `benchmarks/results/demo_figures.json`) on the shared "
        f"{full['cores']}-core development machine, world version 3, seed 0, shipped encoder `{d['encoder']}`: "
        f"`fpr demo --full` took {full['wall_s']:.0f} s on a first run (both caches empty: worlds, embeddings, "
        f"copy-paste scores and numba's compiled kernels) under a load average of {_load(full)} "
        f"(rendering {t['render_s']:.0f} s, the queries with copy-paste matching "
        f"{t['query_s']:.0f} s, the verdicts' seeds {t['claims_s']:.0f} s){_warm(full)}; `fpr demo` (the quick demo, "
        f"the default) "
        f"{quick['wall_s']:.0f} s (load {_load(quick)}){_warm(quick)}.\n"
        f"oracle {m['oracle']:.3f}; mAP {_chain(m, LADDER)} (chance); {POSE} (another animal in the reference's "
        f"pose) {m[POSE]:.3f}; the reference's whole scene with a quarter of the markings redrawn ({SCENE}) scores "
        f"{m[SCENE]:.3f}, {'above' if m[SCENE] > m[KEPT] else 'not above'} {KEPT}, and `copy-paste` flags "
        f"{_pct(v['copy_paste_flag_rate'][SCENE])} of it. Spearman(mAP, drift) "
        f"{v['spearman_map_drift_methods']:.2f} across methods and {v['spearman_ap_drift_queries']:.2f} per query. "
        f"The copy-like methods score {_span([m[k] for k in copies], lambda x: f'{x:.2f}')}: retrieval rewards "
        f"copying. `copy-paste` flags {_pct(v['copy_paste_flag_rate'][KEPT])} of {KEPT} and "
        f"{_span([v['copy_paste_flag_rate'][k] for k in copies], pct)}% of the copies, so the keep-rule keeps "
        f"{_pct(v['kept_share'][KEPT])} of {KEPT}, " + "/".join(pct(v["kept_share"][k]) for k in DRIFTED)
        + "% of " + "/".join(DRIFTED) + f", {_pct(v['kept_share'][SCENE])} of {SCENE} and "
        f"{_span([v['kept_share'][k] for k in copies], pct)}% of the copies. Within an identity, VISTAR's strict "
        f"pairwise prediction accuracy of mAP against the drift is {gen_map['ppa']:.2f} on the generations "
        f"({gen_map['ppa_ties_half']:.2f} if an AP tie counted 1/2: AP is exactly 1 for "
        f"{_pct(v['ap_one_share'][KEPT])} of {KEPT} and {_pct(v['ap_one_share'][DRIFTED[0]])} of {DRIFTED[0]} "
        f"queries), Sim's {gen_sim['ppa']:.2f}; with the copies at their declared drift mAP's is "
        f"{_agreement(d, 'with copies', 'mAP')['ppa']:.2f}.\n"
        f"Last, the paper's two claims with the general-purpose stand-in `{info['general']}` (not CLIP or DINOv2), "
        f"pooled over world seeds {', '.join(map(str, info['seeds']))}{_worlds_phrase(d)}, as `fpr demo --full` prints "
        "them:\n\n"
        "```text\n" + "\n".join(verdict_lines(d)) + "\n```\n")


def paper_demo(fig: dict) -> str:
    full = fig["full"]
    d, t = full["demo"], full["demo"]["timings"]
    w, v = d["world"], d["validity"]
    maps, sims = _overall(d, "map"), _overall(d, "sim")
    cell = lambda r, k: f"{r[k]:.3f} [{r[k + '_lo']:.2f},{r[k + '_hi']:.2f}]"
    rows = "".join(f"| {k} | {'-' if k == 'oracle' else format(METHOD_DRIFT[k], '.2f')} | {cell(maps[k], 'map')} | "
                   f"{cell(sims[k], 'sim')} |\n" for k in ("oracle", *generations(d), "paste"))
    return (f"{full['wall_s']:.0f} s on a first run (both caches empty) under a load average of {_load(full)} on "
            f"{full['cores']} cores (the queries with copy-paste matching {t['query_s']:.0f} s of it, "
            f"`--no-copy-paste` skips that){_warm(full)} (`benchmarks/results/demo_figures.json`). "
            f"With the shipped encoder "
            f"`{d['encoder']}`:\n\n| method | drift | mAP all | Sim all |\n|---|---|---|---|\n{rows}\n"
            f"({len(w['species'])} species x {w['identities_per_species']} identities x {w['gallery_per_identity']} "
            f"gallery images, {w['queries_per_identity_and_method']} queries per identity and method, seed "
            f"{w['seed']}; Spearman(mAP, drift) = {v['spearman_map_drift_methods']:.3f} across methods, "
            f"{v['spearman_ap_drift_queries']:.3f} per query.)\n")


def world_timing(fig: dict) -> str:
    full, quick = fig["full"], fig["quick"]
    return (f"Wall time (world version 3, `benchmarks/results/demo_figures.json`, the shared {full['cores']}-core "
            f"machine): `fpr demo --full` "
            f"{full['wall_s']:.0f} s on a first run (both caches empty) under a load average of {_load(full)} "
            f"(the queries with the copy-paste scorer {full['demo']['timings']['query_s']:.0f} s of it){_warm(full)}, "
            f"`fpr demo` (the quick default) {quick['wall_s']:.0f} s (load {_load(quick)}){_warm(quick)}.\n")


def world_demo(fig: dict) -> str:
    """docs/world.md, world version 3: the full demo's per-method table, its validity line and agreement table."""
    d = fig["full"]["demo"]
    w, v = d["world"], d["validity"]
    over = {k: r for k, r in _overall(d, "map").items()}
    rates, scores, kept, ones = (v[k] for k in ("copy_paste_flag_rate", "copy_paste_mean_score", "kept_share",
                                                 "ap_one_share"))
    n_methods = len(w["methods"])
    rows = "".join(f"| {k} | {over[k]['map']:.3f} | {over[k]['sim']:.3f} | {rates[k]:.3f} ({scores[k]:.3f}) | "
                   f"{kept[k]:.3f} | {ones[k]:.3f} |\n" for k in ("oracle", *w["methods"]))
    per_method = over[KEPT]["n_queries"]
    agreement = "".join(
        f"| {r['metric']}, {r['methods']} | {r['n_pairs']} | {r['spearman']:.3f} | {r['ppa']:.3f} "
        f"[{r['ppa_lo']:.2f},{r['ppa_hi']:.2f}] | {r['ppa_ties_half']:.3f} | {r['metric_tie_share']:.3f} | "
        f"{r['kendall_within']:.3f} |\n" for r in sorted(v["agreement"], key=lambda r: (r["methods"] != "generations",
                                                                                   r["metric"] != "mAP")))
    above = lambda a, b: "above" if a > b else "not above"  # noqa: E731
    return (
        f"{len(w['species'])} species x {w['identities_per_species']} identities, {w['gallery_per_identity']} "
        f"gallery + {w['references_per_identity']} reference images each, {w['queries_per_identity_and_method']} "
        f"queries per identity and method, the {n_methods} methods of `DEMO_METHODS` ({w['n_images']:,} images, "
        f"{n_methods * per_method:,} queries plus the {over['oracle']['n_queries']} oracle queries; "
        f"`benchmarks/results/demo_figures.json`):\n\n"
        f"| method | mAP | Sim | copy-paste flag rate (mean score) | kept by `{v['keep_rule']}` | AP = 1 share |\n"
        f"|---|---|---|---|---|---|\n{rows}\n"
        f"The new-scene ladder {'holds' if v['ordering_holds'] else 'does NOT hold'}; Spearman(mAP, drift) per "
        f"query is {v['spearman_ap_drift_queries']:.3f} (Sim {v['spearman_sim_drift_queries']:.3f}), across "
        f"methods {v['spearman_map_drift_methods']:.2f} (Sim {v['spearman_sim_drift_methods']:.2f}). "
        f"`{SCENE}` (the reference's scene with a quarter of the markings redrawn) scores "
        f"{above(over[SCENE]['map'], over[KEPT]['map'])} `{KEPT}` on mAP ({over[SCENE]['map']:.3f} vs "
        f"{over[KEPT]['map']:.3f}) and {above(over[SCENE]['sim'], over[KEPT]['sim'])} it on Sim "
        f"({over[SCENE]['sim']:.3f} vs {over[KEPT]['sim']:.3f}); `copy-paste` flags {_pct(rates[SCENE])} of it "
        f"and the keep-rule keeps {_pct(kept[SCENE])}.\n\n"
        f"| seed {w['seed']} | pairs | Spearman (vs -drift) | PPA (VISTAR, strict) | PPA, ties 1/2 | metric tie share "
        f"| tau-b within identity |\n|---|---|---|---|---|---|---|\n{agreement}")


# The per-query CSVs of benchmarks/world_contexts.py (fpr-world-v3 outside the pipeline): as-is and the
# shared_view control, which renders world version 2's faithful/drift-*/generic queries bit for bit.
CONTEXTS_DIR = ROOT / "benchmarks" / "results" / "world_contexts"
V2_NAMES = {"new-scene@0": "faithful", "new-scene@0.1": "drift-0.1", "new-scene@0.25": "drift-0.25",
            "new-scene@0.5": "drift-0.5", "new-scene@1": "generic"}


def contexts_rows(seed: int, config: str, encoder: str = "fpr-world-v3"):
    import pandas as pd

    return pd.read_csv(CONTEXTS_DIR / (f"seed{seed}-{config}" + ("" if encoder == "fpr-world-v3" else f"@{encoder}")
                                       + ".csv.gz"))


def _ladder_spearman(rows) -> float:
    """Spearman of AP with drift over the queries of the new-scene ladder (one context, as world version 2)."""
    from scipy.stats import spearmanr

    lad = rows[rows["method"].isin(LADDER)]
    return float(spearmanr(lad["ap"], lad["drift"]).statistic)


def world_shared_view(fig: dict) -> str:
    """docs/world.md, world version 2's paired queries (the shared_view control) beside version 3's, per seed,
    from benchmarks/world_contexts.py's per-query CSVs (``fig`` is not used: these are not demo runs)."""
    seeds = (0, 1, 2)
    data = {(s, c): contexts_rows(s, c) for s in seeds for c in ("shared-view", "as-is")}
    mean = {k: df.groupby("method")["ap"].mean() for k, df in data.items()}
    cell = lambda m, c: " / ".join(f"{mean[(s, c)][m]:.3f}" for s in seeds)  # noqa: E731
    rows = "".join(f"| {m} (`{V2_NAMES[m]}`) | {cell(m, 'shared-view')} | {cell(m, 'as-is')} |\n" for m in LADDER)
    rho = lambda c: " / ".join(f"{_ladder_spearman(data[(s, c)]):.3f}" for s in seeds)  # noqa: E731
    return ("| method (version 2 name) | mAP, shared view (version 2), seeds 0 / 1 / 2 | mAP, a view per method "
            "(version 3) |\n|---|---|---|\n" + rows
            + f"| Spearman(AP, drift) per query, this ladder | {rho('shared-view')} | {rho('as-is')} |\n")


def _auroc(pos, neg) -> float:
    """P(a positive scores above a negative), ties 1/2 (Mann-Whitney), as tests/galleries/world_probe.py."""
    import numpy as np

    p, n = np.asarray(pos, float)[:, None], np.asarray(neg, float)[None, :]
    return float(((p > n).sum() + 0.5 * (p == n).sum()) / (p.size * n.size))


def world_encoders(fig: dict) -> str:
    """docs/world.md, the encoders section: per-query Spearman(AP, drift) of the shipped world encoders on world
    version 2's paired queries (the shared_view control), from benchmarks/world_contexts.py's files."""
    seeds = (0, 1, 2)
    rows = ""
    for encoder, what in (("fpr-world-v2", "300 ids, 30 epochs, CPU"), ("fpr-world-v3", "800 ids, `--twins 0.25`")):
        data = [contexts_rows(s, "shared-view", encoder) for s in seeds]
        kept = data[0].loc[data[0]["method"] == KEPT, "ap"].mean()
        rows += (f"| `{encoder}` ({what}) | " + " | ".join(f"{_ladder_spearman(d):.3f}" for d in data)
                 + f" | {kept:.3f} |\n")
    half = contexts_rows(0, "shared-view").query("method == 'new-scene@0.5'")["ap"]
    return ("| encoder | seed 0 | seed 1 | seed 2 | faithful mAP, seed 0 |\n|---|---|---|---|---|\n" + rows
            + f"\nWith `fpr-world-v3` the AP of `drift-0.5` (`new-scene@0.5`) still ranges from {half.min():.2f} to "
            f"{half.max():.2f} within the method (seed 0).\n")


def world_contexts(fig: dict) -> str:
    """docs/world.md, contexts x drift and the profiles on seed 0 (and two AUROCs per seed), from
    benchmarks/world_contexts.py's per-query CSVs."""
    from fpr.galleries.world import PROFILES

    seeds = (0, 1, 2)
    data = {s: contexts_rows(s, "as-is") for s in seeds}
    means = data[0].groupby("method")[["sim", "ap"]].mean()
    levels = ("0", "0.25", "0.5", "1")
    groups = [[f"{c}@{d}" for d in levels] for c in ("new-scene", "ref-pose", "ref-scene")] + [list(PROFILES)]
    name = lambda g: " / ".join([g[0], *(f"@{m.split('@')[1]}" for m in g[1:])]) if "@" in g[0] else " / ".join(g)  # noqa: E731
    joined = lambda g, col: " / ".join(f"{means.loc[m, col]:.3f}" for m in g)  # noqa: E731
    rows = "".join(f"| {name(g)} | {joined(g, 'sim')} | {joined(g, 'ap')} |\n" for g in groups)

    def sep(a: str, b: str) -> str:
        sims = [[data[s].loc[data[s]["method"] == k, "sim"] for k in (a, b)] for s in seeds]
        return " / ".join(f"{_auroc(*pair):.3f}" for pair in sims)

    rs, ns = means.loc["ref-scene@0.5"], means.loc["new-scene@0.25"]
    return ("| method | Sim | mAP |\n|---|---|---|\n" + rows + "\n"
            f"The specialist's Sim AUROC of `new-scene@0.25` over `new-scene@0.5` is {sep('new-scene@0.25', 'new-scene@0.5')}"
            f" (seeds 0 / 1 / 2; `tests/galleries/test_world_specialist.py` pins them); of `new-scene@0` over "
            f"`ref-pose@1` {sep('new-scene@0', 'ref-pose@1')} (a generic animal in the reference's layout). "
            f"Context moves the specialist's *Sim*: `ref-scene@0.5` scores {rs['sim']:.3f} against `new-scene@0.25`'s "
            f"{ns['sim']:.3f}, the reference's own background, light and pose adding to the cosine; on mAP "
            f"{rs['ap']:.3f} against {ns['ap']:.3f}, since the gallery's other identities share no scene with the "
            "query.\n")


def world_stress(fig: dict) -> str:
    """docs/world.md, the stress conditions measured by benchmarks/world_contexts.py (per-query CSVs), per seed."""
    seeds = (0, 1, 2)

    def per_seed(config: str, value) -> str:
        return " / ".join(f"{value(contexts_rows(s, config)):.3f}" for s in seeds)

    def mean(method: str, col: str):
        return lambda df: df.loc[df["method"] == method, col].mean()

    def separation(a: str, b: str):
        return lambda df: _auroc(df.loc[df["method"] == a, "sim"], df.loc[df["method"] == b, "sim"])

    rows = [("siblings 0.5", "`fpr-world-v3` Sim of `new-scene@1` (a generic animal)", "as-is", "siblings-0.5",
             mean("new-scene@1", "sim")),
            ("home background 1", "8x8 thumbnail mAP of `ref-scene@1`, 5 gallery images per identity", "thumbnail-g5",
             "thumbnail-g5-home", mean("ref-scene@1", "ap")),
            ("home background 1", "`fpr-world-v3` mAP of `ref-scene@1`, 10 gallery images per identity", "as-is",
             "home-background", mean("ref-scene@1", "ap")),
            ("occlusion", "`fpr-world-v3` Sim AUROC of `new-scene@0` over `new-scene@0.25`", "as-is", "occlusion",
             separation("new-scene@0", "new-scene@0.25"))]
    return ("| stress condition | measured | off, seeds 0 / 1 / 2 | on, seeds 0 / 1 / 2 |\n|---|---|---|---|\n"
            + "".join(f"| {name} | {what} | {per_seed(off, f)} | {per_seed(on, f)} |\n"
                      for name, what, off, on, f in rows))


RENDER = {"demo-readme": readme_demo, "demo-paper": paper_demo, "demo-world-timing": world_timing,
          "world-demo": world_demo, "world-shared-view": world_shared_view, "world-stress": world_stress,
          "world-contexts": world_contexts, "world-encoders": world_encoders}


def render(text: str, fig: dict) -> str:
    """``text`` with each figures section replaced by its rendering from ``fig``."""
    def one(m: re.Match) -> str:
        if m.group("name") not in RENDER:
            raise KeyError(f"unknown figures section {m.group('name')!r}: known {sorted(RENDER)}")
        return m.group(1) + RENDER[m.group("name")](fig) + m.group(4)
    return SECTION.sub(one, text)


def documents() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--render", action="store_true", help="only re-render the docs from the stored JSON")
    ap.add_argument("--only", choices=("full", "quick"), default=None,
                    help="measure one of the two demos and keep the other's stored entry (each run stays short)")
    args = ap.parse_args()
    if not args.render:
        if args.only:
            fig = json.loads(RESULTS.read_text())
            fig[args.only] = measure(quick=args.only == "quick")
        else:
            fig = {"full": measure(quick=False), "quick": measure(quick=True)}
        RESULTS.write_text(json.dumps(fig, indent=1, sort_keys=True) + "\n")
    fig = json.loads(RESULTS.read_text())
    for doc in documents():
        text = doc.read_text(encoding="utf-8")
        if SECTION.search(text):
            doc.write_text(render(text, fig), encoding="utf-8")
            print(f"rendered {doc.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
