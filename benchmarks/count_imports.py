"""Run one ``fpr`` command in this process and print, at exit (stderr), how many fpr modules with a file it
imported, which scorer and encoder modules, and the total module count (issue #36's import census).

    FPR_SCORE_CACHE=0 python benchmarks/count_imports.py --workspace WS query --index IDX --queries Q.csv \\
        --scorers copy-paste
"""
import atexit
import sys


def _report() -> None:
    mods = sorted(m for m, v in sys.modules.items() if (m == "fpr" or m.startswith("fpr.")) and getattr(v, "__file__", None))
    print(f"fpr files: {len(mods)}; all modules: {len(sys.modules)}", file=sys.stderr)
    for family in ("fpr.scorers.", "fpr.encoders."):
        picked = [m for m in mods if m.startswith(family)]
        print(f"{family}*: {len(picked)}: {', '.join(picked)}", file=sys.stderr)


atexit.register(_report)

if __name__ == "__main__":
    from fpr.cli.main import main

    sys.argv = ["fpr", *sys.argv[1:]]
    main()
