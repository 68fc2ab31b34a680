"""The demo figures the docs quote, measured once and rendered into the docs from one file.

    PYTHONPATH=. python benchmarks/docs_figures.py            # runs fpr demo (full, then --quick), writes the
                                                              # JSON and re-renders the docs sections
    PYTHONPATH=. python benchmarks/docs_figures.py --render   # only re-renders the docs from the stored JSON
    PYTHONPATH=. python benchmarks/docs_figures.py --only quick   # one demo; the other's stored entry is kept

``fpr demo --format json`` (seed 0, the shipped encoder, copy-paste on) and ``fpr demo --quick`` run as
subprocesses in a temporary workspace; their JSON, wall times and the load average around them go to
benchmarks/results/demo_figures.json. Every demo figure in README.md, docs/reproduce-paper.md and
docs/world.md sits between ``<!-- figures: NAME -->`` and ``<!-- /figures -->`` and is rendered here from
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
    """The verdict lines ``fpr demo`` prints last (its own formatter), without the 2x2 table above them."""
    from fpr.cli.meta import claims_lines
    from fpr.workflows.meta import ClaimsResult

    c = demo["claims"]
    lines = claims_lines(ClaimsResult(c["table"], c["verdicts"], c["info"]))
    head = next(i for i, line in enumerate(lines) if line.lstrip("\n").startswith("verdicts:"))
    return [line.lstrip("\n") for line in lines[head:]]


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
        f"`fpr demo` took {full['wall_s']:.0f} s under a load average of {_load(full)} (rendering {t['render_s']:.0f} s, "
        f"the queries with copy-paste matching "
        f"{t['query_s']:.0f} s, the verdicts' seeds {t['claims_s']:.0f} s), `fpr demo --quick` {quick['wall_s']:.0f} s "
        f"(load {_load(quick)}).\n"
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
        f"pooled over world seeds {', '.join(map(str, info['seeds']))}, as `fpr demo` prints them:\n\n"
        "```text\n" + "\n".join(verdict_lines(d)) + "\n```\n")


def paper_demo(fig: dict) -> str:
    full = fig["full"]
    d, t = full["demo"], full["demo"]["timings"]
    w, v = d["world"], d["validity"]
    maps, sims = _overall(d, "map"), _overall(d, "sim")
    cell = lambda r, k: f"{r[k]:.3f} [{r[k + '_lo']:.2f},{r[k + '_hi']:.2f}]"
    rows = "".join(f"| {k} | {'-' if k == 'oracle' else format(METHOD_DRIFT[k], '.2f')} | {cell(maps[k], 'map')} | "
                   f"{cell(sims[k], 'sim')} |\n" for k in ("oracle", *generations(d), "paste"))
    return (f"{full['wall_s']:.0f} s under a load average of {_load(full)} on "
            f"{full['cores']} cores (the queries with copy-paste matching {t['query_s']:.0f} s of it, "
            f"`--no-copy-paste` skips that; `benchmarks/results/demo_figures.json`). With the shipped encoder "
            f"`{d['encoder']}`:\n\n| method | drift | mAP all | Sim all |\n|---|---|---|---|\n{rows}\n"
            f"({len(w['species'])} species x {w['identities_per_species']} identities x {w['gallery_per_identity']} "
            f"gallery images, {w['queries_per_identity_and_method']} queries per identity and method, seed "
            f"{w['seed']}; Spearman(mAP, drift) = {v['spearman_map_drift_methods']:.3f} across methods, "
            f"{v['spearman_ap_drift_queries']:.3f} per query.)\n")


def world_timing(fig: dict) -> str:
    full, quick = fig["full"], fig["quick"]
    return (f"Wall time (world version 3, `benchmarks/results/demo_figures.json`, the shared {full['cores']}-core "
            f"machine): `fpr demo` "
            f"{full['wall_s']:.0f} s under a load average of {_load(full)} "
            f"(the queries with the copy-paste scorer {full['demo']['timings']['query_s']:.0f} s of it), "
            f"`fpr demo --quick` {quick['wall_s']:.0f} s (load {_load(quick)}).\n")


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
