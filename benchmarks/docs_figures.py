"""The demo figures the docs quote, measured once and rendered into the docs from one file.

    PYTHONPATH=. python benchmarks/docs_figures.py            # runs fpr demo (full, then --quick), writes the
                                                              # JSON and re-renders the docs sections
    PYTHONPATH=. python benchmarks/docs_figures.py --render   # only re-renders the docs from the stored JSON

``fpr demo --format json`` (seed 0, the shipped encoder, copy-paste on) and ``fpr demo --quick`` run as
subprocesses in a temporary workspace; their JSON, wall times and the load average around them go to
benchmarks/results/demo_figures.json. Every demo figure in README.md and docs/reproduce-paper.md sits
between ``<!-- figures: NAME -->`` and ``<!-- /figures -->`` and is rendered here from that file;
tests/docs/test_docs_examples.py renders the sections again and fails if a document differs, so a
figure cannot be edited by hand or go stale against the file. The figures themselves are fpr demo's
output, whose values tests/test_demo.py checks against independent computations.
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
from fpr.galleries.world import METHOD_DRIFT

RESULTS = ROOT / "benchmarks" / "results" / "demo_figures.json"
GENERATIONS = ("faithful", "drift-0.1", "drift-0.25", "drift-0.5", "generic")
DRIFTED = ("drift-0.1", "drift-0.25", "drift-0.5")
SECTION = re.compile(r"(<!-- figures: (?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- /figures -->)", re.DOTALL)


def measure(quick: bool) -> dict:
    """One ``fpr demo`` in a fresh workspace: its JSON, wall seconds and the 1-minute load before and after."""
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "fpr", "--workspace", str(Path(tmp) / "ws"), "demo", "--format", "json"]
        load0, t0 = os.getloadavg()[0], time.perf_counter()
        r = subprocess.run(cmd + (["--quick"] if quick else []), check=False, capture_output=True, text=True,
                           env={**os.environ, "PYTHONPATH": str(ROOT)})
        wall, load1 = time.perf_counter() - t0, os.getloadavg()[0]
    if r.returncode != 0:
        sys.exit(f"fpr demo{' --quick' if quick else ''} failed: {r.stderr.strip().splitlines()[-1:]}")
    out = json.loads(r.stdout)
    out.pop("images", None)  # a temporary folder
    return {"command": "fpr demo --format json" + (" --quick" if quick else ""), "wall_s": round(wall, 1),
            "load_before": round(load0, 1), "load_after": round(load1, 1), "cores": os.cpu_count(), "demo": out}


def _overall(demo: dict, metric: str) -> dict[str, dict]:
    return {r["method"]: r for r in demo["summary"] if r["group"] == "*" and metric in r}


def _pct(x: float) -> str:
    return f"{100 * x:.0f}%"


def _span(values: list[float], fmt) -> str:
    lo, hi = fmt(min(values)), fmt(max(values))
    return lo if lo == hi else f"{lo}-{hi}"


def _agreement(demo: dict, methods: str, metric: str) -> dict:
    return next(r for r in demo["validity"]["agreement"] if r["methods"] == methods and r["metric"] == metric)


def readme_demo(fig: dict) -> str:
    full, quick = fig["full"], fig["quick"]
    d, v = full["demo"], full["demo"]["validity"]
    m = {k: r["map"] for k, r in _overall(d, "map").items()}
    copies = [k for k in v["copy_paste_flag_rate"] if k not in GENERATIONS and k != "oracle"]
    pct = lambda x: f"{100 * x:.0f}"
    gen_map, gen_sim = _agreement(d, "generations", "mAP"), _agreement(d, "generations", "Sim")
    t = d["timings"]
    return (
        f"Measured by `benchmarks/docs_figures.py` (results: `benchmarks/results/demo_figures.json`) on the shared "
        f"{full['cores']}-core development machine, seed 0, shipped encoder `{d['encoder']}`: `fpr demo` took "
        f"{full['wall_s']:.0f} s under a load average of {full['load_before']:.0f}-{full['load_after']:.0f} "
        f"(rendering {t['render_s']:.0f} s, the queries with copy-paste matching {t['query_s']:.0f} s), "
        f"`fpr demo --quick` {quick['wall_s']:.0f} s (load {quick['load_before']:.0f}-{quick['load_after']:.0f}).\n"
        f"oracle {m['oracle']:.3f}; mAP " + " > ".join(f"{k} {m[k]:.3f}" for k in GENERATIONS) + " (chance); "
        f"Spearman(mAP, drift) {v['spearman_map_drift_methods']:.2f} across methods and "
        f"{v['spearman_ap_drift_queries']:.2f} per query. The copy-like methods score "
        f"{_span([m[k] for k in copies], lambda x: f'{x:.2f}')}: retrieval rewards copying. `copy-paste` flags "
        f"{_pct(v['copy_paste_flag_rate']['faithful'])} of faithful generations and "
        f"{_span([v['copy_paste_flag_rate'][k] for k in copies], pct)}% of the copies, so the keep-rule keeps "
        f"{_pct(v['kept_share']['faithful'])} of faithful, "
        + "/".join(pct(v["kept_share"][k]) for k in DRIFTED) + "% of the drift levels and "
        f"{_span([v['kept_share'][k] for k in copies], pct)}% of the copies. Within an identity, VISTAR's strict "
        f"pairwise prediction accuracy of mAP against the drift is {gen_map['ppa']:.2f} on the generations "
        f"({gen_map['ppa_ties_half']:.2f} if an AP tie counted 1/2: AP is exactly 1 for "
        f"{_pct(v['ap_one_share']['faithful'])} of faithful and {_pct(v['ap_one_share']['drift-0.1'])} of drift-0.1 "
        f"queries), Sim's {gen_sim['ppa']:.2f}; with the copies at their declared drift mAP's is "
        f"{_agreement(d, 'with copies', 'mAP')['ppa']:.2f}.\n")


def paper_demo(fig: dict) -> str:
    full = fig["full"]
    d, t = full["demo"], full["demo"]["timings"]
    w, v = d["world"], d["validity"]
    maps, sims = _overall(d, "map"), _overall(d, "sim")
    cell = lambda r, k: f"{r[k]:.3f} [{r[k + '_lo']:.2f},{r[k + '_hi']:.2f}]"
    rows = "".join(f"| {k} | {'-' if k == 'oracle' else format(METHOD_DRIFT[k], '.2f')} | {cell(maps[k], 'map')} | "
                   f"{cell(sims[k], 'sim')} |\n" for k in ("oracle", *GENERATIONS, "paste"))
    return (f"{full['wall_s']:.0f} s under a load average of {full['load_before']:.0f}-{full['load_after']:.0f} on "
            f"{full['cores']} cores (the queries with copy-paste matching {t['query_s']:.0f} s of it, "
            f"`--no-copy-paste` skips that; `benchmarks/results/demo_figures.json`). With the shipped encoder "
            f"`{d['encoder']}`:\n\n| method | drift | mAP all | Sim all |\n|---|---|---|---|\n{rows}\n"
            f"({len(w['species'])} species x {w['identities_per_species']} identities x {w['gallery_per_identity']} "
            f"gallery images, {w['queries_per_identity_and_method']} queries per identity and method, seed "
            f"{w['seed']}; Spearman(mAP, drift) = {v['spearman_map_drift_methods']:.3f} across methods, "
            f"{v['spearman_ap_drift_queries']:.3f} per query.)\n")


def world_timing(fig: dict) -> str:
    full, quick = fig["full"], fig["quick"]
    return (f"Wall time (`benchmarks/results/demo_figures.json`, the shared {full['cores']}-core machine): `fpr demo` "
            f"{full['wall_s']:.0f} s under a load average of {full['load_before']:.0f}-{full['load_after']:.0f} "
            f"(the queries with the copy-paste scorer {full['demo']['timings']['query_s']:.0f} s of it), "
            f"`fpr demo --quick` {quick['wall_s']:.0f} s (load {quick['load_before']:.0f}-{quick['load_after']:.0f}).\n")


RENDER = {"demo-readme": readme_demo, "demo-paper": paper_demo, "demo-world-timing": world_timing}


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
    args = ap.parse_args()
    if not args.render:
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
