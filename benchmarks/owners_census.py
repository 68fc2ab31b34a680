"""Issue #36's census of a source tree: uses of each owned mechanism outside its owner (the checker of
tests/test_ownership.py), private names workflows take from each other, the largest modules and functions.

    python benchmarks/owners_census.py [FPR_PACKAGE_FOLDER]      # default: this checkout's fpr/

Run it on an older tree (``git archive <commit> | tar -x -C /tmp/old``; ``/tmp/old/fpr``) for a before/after
table. The files one ``fpr query --scorers copy-paste`` imports are counted separately (results file).
"""
from __future__ import annotations

import ast
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests import test_ownership as ownership  # noqa: E402  (the one checker: the census counts what it enforces)


def census(package: Path) -> dict:
    found = ownership.violations(package)
    uses = Counter(v.split(" uses ")[1].split(" (")[0] for v in found)
    files: dict[str, set] = {}
    for v in found:
        files.setdefault(v.split(" uses ")[1].split(" (")[0], set()).add(v.split(":")[0])
    privates = 0
    modules, functions = [], []
    for p in package.rglob("*.py"):
        tree = ast.parse(p.read_text())
        rel = p.relative_to(package).as_posix()
        modules.append((len(p.read_text().splitlines()), rel))
        for n in ast.walk(tree):
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
                functions.append((n.end_lineno - n.lineno + 1, f"{rel}:{n.name}"))
            if isinstance(n, ast.ImportFrom) and (n.module or "").startswith("fpr.workflows.") and \
                    rel.startswith("workflows/"):
                privates += sum(a.name.startswith("_") for a in n.names)
    modules.sort(reverse=True)
    functions.sort(reverse=True)
    return {"outside_owner": {m: (uses.get(m, 0), len(files.get(m, ()))) for m in ownership.OWNERS},
            "workflow_privates": privates, "largest_module": modules[0], "modules_over_500": sum(n > 500 for n, _ in modules),
            "largest_function": functions[0], "functions_over_80": sum(n > 80 for n, _ in functions),
            "lines": sum(n for n, _ in modules)}


def main() -> None:
    package = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "fpr"
    c = census(package)
    print(f"tree: {package}")
    print("| mechanism | uses outside its owner | files |\n|---|---|---|")
    for m, (n, f) in c["outside_owner"].items():
        print(f"| `{m}` | {n} | {f} |")
    print(f"\nprivate names a workflow module imports from another: {c['workflow_privates']}")
    print(f"largest module: {c['largest_module'][1]} ({c['largest_module'][0]} lines); over 500 lines: "
          f"{c['modules_over_500']}")
    print(f"largest function: {c['largest_function'][1]} ({c['largest_function'][0]} lines); over 80 lines: "
          f"{c['functions_over_80']}")
    print(f"lines: {c['lines']}")


if __name__ == "__main__":
    main()
