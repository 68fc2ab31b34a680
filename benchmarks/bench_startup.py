"""Start-up: whole-command wall time of ``fpr --version``, ``--help``, ``runs`` and ``report``, this tree
against an anchor tree (e.g. the previous commit), interleaved.

Each round runs every command once per tree, alternating which tree goes first, so load drift hits both
alike; the figures are median [min - max] over the rounds, and the ratio is taken round by round.
``python -c pass`` and ``python -c "import click"`` are the floors (an interpreter, and the one library
``--version`` needs). ``runs`` and ``report`` read a real workspace the script builds first (a gallery,
a pixels-16 index and one run of ``--queries`` queries, made with this tree's CLI); the two trees share
its schema. The load average is printed before and after.

    git archive HEAD~1 | tar -x -C /tmp/fpr-anchor
    python benchmarks/bench_startup.py --anchor /tmp/fpr-anchor [--rounds 11] [--queries 400]
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]


def _write_image(path: Path, seed: int, size: int = 32) -> str:
    rng = np.random.default_rng(seed)
    arr = np.clip(rng.integers(0, 256, size=3) + rng.normal(0, 40, size=(size, size, 3)), 0, 255).astype("uint8")
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(arr, "RGB").save(path)
    return str(path)


def _fpr(*args: str) -> list[str]:
    return [sys.executable, "-m", "fpr", *args]  # run with cwd and PYTHONPATH = the tree: its fpr is imported


def _env(code: Path) -> dict:
    return {**os.environ, "PYTHONPATH": str(code), "FPR_QUIET": "1"}


def build_workspace(tmp: Path, n_queries: int) -> Path:
    """2 groups x 5 identities x 6 images; ``n_queries`` queries over 4 methods (seeded noise images)."""
    tree = tmp / "tree"
    for g, group in enumerate(("cats", "dogs")):
        for i in range(5):
            for k in range(6):
                _write_image(tree / group / f"{group}-{i}" / f"{k}.png", 1000 * g + 10 * i + k)
    rows = [{"path": _write_image(tmp / "q" / f"{s}.png", 10_000 + s), "identity": f"{('cats', 'dogs')[s % 2]}-{s % 5}",
             "group": ("cats", "dogs")[s % 2], "method": f"m{s % 4}"} for s in range(n_queries)]
    pd.DataFrame(rows).to_csv(tmp / "q.csv", index=False)
    ws = tmp / "ws"
    for args in (("gallery", "import", "--name", "g", "--folder", str(tree), "--references", "1"),
                 ("index", "build", "--gallery", "g", "--encoder", "pixels-16"),
                 ("query", "--index", "g-pixels-16", "--queries", str(tmp / "q.csv"), "--run", "r1")):
        subprocess.run(_fpr("-q", "--workspace", str(ws), *args), env=_env(ROOT), cwd=ROOT, check=True,
                       stdout=subprocess.DEVNULL)
    return ws


def once(cmd: list[str], env: dict, cwd: Path) -> float:
    t = time.perf_counter()
    subprocess.run(cmd, env=env, cwd=cwd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t


def spread(xs: list[float]) -> str:
    return f"{statistics.median(xs):.3f} [{min(xs):.3f} - {max(xs):.3f}]"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=11)
    ap.add_argument("--queries", type=int, default=400, help="queries of the run `runs` and `report` read")
    ap.add_argument("--anchor", default=None, help="a tree of the code to compare with (e.g. the previous commit)")
    args = ap.parse_args()
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; {os.cpu_count()} cores; "
          f"python {sys.version.split()[0]}")
    ws = build_workspace(Path(tempfile.mkdtemp(prefix="fpr-start-")), args.queries)
    commands = {"--version": ["--version"], "--help": ["--help"], "runs": ["--workspace", str(ws), "runs"],
                "report": ["--workspace", str(ws), "report", "--run", "r1"]}
    trees = [("this tree", ROOT)] + ([("anchor", Path(args.anchor).resolve())] if args.anchor else [])
    floors = {"python -c pass": [sys.executable, "-c", "pass"],
              "python -c 'import click'": [sys.executable, "-c", "import click"]}
    times: dict[tuple[str, str], list[float]] = {}
    for r in range(args.rounds):
        for name, cmd in floors.items():
            times.setdefault(("floor", name), []).append(once(cmd, _env(ROOT), ROOT))
        for name, cmd in commands.items():
            for label, code in (trees if r % 2 == 0 else trees[::-1]):  # alternate who goes first
                times.setdefault((label, name), []).append(once(_fpr(*cmd), _env(code), code))
    print(f"wall seconds, median [min - max] of {args.rounds} interleaved rounds; run r1: {args.queries} queries, "
          f"4 methods x 2 groups")
    for name in floors:
        print(f"  {name:28s} {spread(times[('floor', name)])}")
    for name in commands:
        line = f"  fpr {name:24s} " + "   ".join(f"{label}: {spread(times[(label, name)])}" for label, _ in trees)
        if args.anchor:
            ratio = [a / b for a, b in zip(times[("this tree", name)], times[("anchor", name)])]
            line += f"   this/anchor per round: {spread(ratio)}"
        print(line)
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
