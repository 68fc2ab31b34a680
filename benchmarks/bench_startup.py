"""Start-up: whole-command wall time and CPU time of ``fpr --version``, ``--help``, ``runs`` and ``report``, this tree
against an anchor tree (e.g. the previous commit), interleaved.

Each round runs every command once per tree, the order rotated round by round (benchmarks/_timing.py), so
load drift hits both alike; the figures are median [min - max] over the rounds, and the ratio is taken round
by round.
``python -c pass`` and ``python -c "import click"`` are the floors (an interpreter, and the one library
``--version`` needs). ``runs`` and ``report`` read a real workspace the script builds first (a gallery,
a pixels-16 index and one run of ``--queries`` queries, made with each tree's own CLI, as the store schema
may differ between the trees). The load average is printed before and after.

    git archive HEAD~1 | tar -x -C /tmp/fpr-anchor
    python benchmarks/bench_startup.py --anchor /tmp/fpr-anchor [--rounds 11] [--queries 400]
"""
from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
import _timing as T  # noqa: E402


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


def build_workspace(tmp: Path, n_queries: int, code: Path) -> Path:
    """2 groups x 5 identities x 6 images; ``n_queries`` queries over 4 methods (seeded noise images), built
    with the CLI of the tree ``code`` (each tree reads a workspace in its own store schema)."""
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
        subprocess.run(_fpr("-q", "--workspace", str(ws), *args), env=_env(code), cwd=code, check=True,
                       stdout=subprocess.DEVNULL)
    return ws


def once(cmd: list[str], env: dict, cwd: Path) -> float:
    """Runs ``cmd``; returns its CPU seconds (user + system, the kernel's accounting of the finished child):
    unlike wall time, that barely moves with other processes' load on this shared machine."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(cmd, env=env, cwd=cwd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=11)
    ap.add_argument("--queries", type=int, default=400, help="queries of the run `runs` and `report` read")
    ap.add_argument("--anchor", default=None, help="a tree of the code to compare with (e.g. the previous commit)")
    args = ap.parse_args()
    print(f"load average before: {T.load()}; {os.cpu_count()} cores; python {sys.version.split()[0]}")
    trees = [("this tree", ROOT)] + ([("anchor", Path(args.anchor).resolve())] if args.anchor else [])
    tmp = Path(tempfile.mkdtemp(prefix="fpr-start-"))
    spaces = {label: str(build_workspace(tmp / f"t{k}", args.queries, code)) for k, (label, code) in enumerate(trees)}
    commands = {"--version": lambda ws: ["--version"], "--help": lambda ws: ["--help"],
                "runs": lambda ws: ["--workspace", ws, "runs"],
                "report": lambda ws: ["--workspace", ws, "report", "--run", "r1"]}
    floors = {"python -c pass": [sys.executable, "-c", "pass"],
              "python -c 'import click'": [sys.executable, "-c", "import click"]}
    contenders = {("floor", name): (lambda cmd=cmd: once(cmd, _env(ROOT), ROOT)) for name, cmd in floors.items()}
    for name, cmd in commands.items():
        for label, code in trees:
            argv = cmd(spaces[label])
            contenders[(label, name)] = lambda argv=argv, code=code: once(_fpr(*argv), _env(code), code)
    cpu: dict = {k: [] for k in contenders}
    times = T.interleaved(contenders, args.rounds, check=lambda k, c: cpu[k].append(c))
    for unit, table in (("wall", times), ("CPU (user + system)", cpu)):
        print(f"{unit} seconds, median [min - max] of {args.rounds} interleaved rounds; run r1: {args.queries} "
              f"queries, 4 methods x 2 groups")
        for name in floors:
            print(f"  {name:28s} {T.spread(table[('floor', name)])}")
        for name in commands:
            line = f"  fpr {name:24s} " + "   ".join(f"{label}: {T.spread(table[(label, name)])}"
                                                     for label, _ in trees)
            if args.anchor:
                line += f"   this/anchor per round: {T.ratios(table[('this tree', name)], table[('anchor', name)])}"
            print(line)
    print(f"load average after: {T.load()}")


if __name__ == "__main__":
    main()
