"""Layers only point down (../shared/ARCHITECTURE.md, docs/architecture.md): checked on every import
statement of the package, including imports inside functions."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "fpr"
BOTTOM = {"errors", "images", "tables", "progress", "files", "keys", "plugins", "defaults", "settings", "cache", "registry"}
# From the ground up; a layer may import the layers before it in this list, never one after it.
# Siblings on one floor (galleries / encoders) may not import each other either.
FLOORS = [
    ["metrics"],                      # pure numbers: AP/CMC/mINP, summaries, keep-rules, agreement
    ["store"],                        # the workspace; its metric columns come from metrics.specs
    ["galleries", "encoders"],        # image sources and curation | models and embedding
    ["index"],                        # FAISS files, cards, exact scores
    ["scorers"],                      # per-query auxiliary scorers and model judges
    ["eval"],                         # the one evaluation pipeline
    ["engines"],                      # where the pipeline runs: local, Ray; resumable parts
    ["render"],                       # cells, tables, the paper pivot, HTML
    ["workflows"],                    # one module per user operation
    ["api"],                          # the public list (re-exports)
    ["serve"],                        # the HTTP service over the same functions
    ["cli"],                          # the command line (its `serve` command starts the service)
]
ALL = [name for floor in FLOORS for name in floor]


def _forbidden() -> dict[str, set[str]]:
    out = {b: set(ALL) for b in BOTTOM}
    for i, floor in enumerate(FLOORS):
        above = {n for f in FLOORS[i + 1:] for n in f}
        for name in floor:
            out[name] = above | (set(floor) - {name})
    return out


# layer -> the parts of fpr it must never import
FORBIDDEN = _forbidden()


def _imports(path: Path):
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.lineno, node.module
            if node.module == "fpr":
                for a in node.names:
                    yield node.lineno, f"fpr.{a.name}"
        elif isinstance(node, ast.ImportFrom) and node.level > 0:
            yield node.lineno, "<relative>"
        elif isinstance(node, ast.Import):
            for a in node.names:
                yield node.lineno, a.name
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) in (
                "import_module", "__import__") and node.args and isinstance(node.args[0], ast.Constant):
            yield node.lineno, str(node.args[0].value)


def _layer(path: Path) -> str:
    parts = path.relative_to(PACKAGE).with_suffix("").parts
    return parts[0]


def violations() -> list[str]:
    out = []
    for f in sorted(PACKAGE.rglob("*.py")):
        layer = _layer(f)
        for line, name in _imports(f):
            if name == "<relative>":
                out.append(f"{f.relative_to(PACKAGE)}:{line} uses a relative import")
                continue
            bits = name.split(".")
            if bits[0] == "fpr" and len(bits) > 1 and bits[1] in FORBIDDEN.get(layer, set()):
                out.append(f"{f.relative_to(PACKAGE)}:{line} ({layer}) imports {name}")
    return out


def test_layers_only_point_down():
    assert violations() == []


def test_no_scorer_imports_another_scorer():
    scorers = PACKAGE / "scorers"
    from fpr.scorers import SCORER_MODULES

    names = set(SCORER_MODULES)  # the rest of the package is shared by scorers (options, encoding, data rules)
    bad = []
    for f in scorers.glob("*.py"):
        for line, name in _imports(f):
            bits = name.split(".")
            if bits[:2] == ["fpr", "scorers"] and len(bits) > 2 and bits[2] in names - {f.stem}:
                bad.append(f"{f.name}:{line} imports {name}")
    assert bad == []


def test_the_checker_catches_a_lazy_upward_import(tmp_path, monkeypatch):
    fake = tmp_path / "fpr"
    (fake / "eval").mkdir(parents=True)
    (fake / "eval" / "x.py").write_text("def f():\n    from fpr import api\n    import fpr.cli.main\n")
    monkeypatch.setattr(__import__(__name__, fromlist=["x"]), "PACKAGE", fake)
    assert violations() == ["eval/x.py:2 (eval) imports fpr.api", "eval/x.py:3 (eval) imports fpr.cli.main"]


@pytest.mark.parametrize("module", ["fpr.store", "fpr.eval.pipeline", "fpr.api"])
def test_modules_import(module):
    __import__(module)


def test_every_cli_module_is_listed_and_every_listed_one_exists():
    """A command module left out of COMMAND_MODULES would silently drop its commands; a listed one that is
    missing fails the import (no silent skip)."""
    from fpr.cli.main import COMMAND_MODULES

    files = {p.stem for p in (PACKAGE / "cli").glob("*.py")} - {"__init__", "main"}
    assert set(COMMAND_MODULES) == files


PROBE_REGISTRATIONS = """
import importlib, inspect, json, pkgutil, sys
from fpr.registry import Registry
folder, package = sys.argv[1], sys.argv[2]
origin, register = {}, Registry.register
def recorded(self, item, **kw):  # the module whose top-level code registers the item (innermost import)
    for frame in inspect.stack()[1:]:
        name = frame.frame.f_globals.get("__name__", "")
        if frame.function == "<module>" and name.startswith(package + "."):
            origin[self.name_of(item)] = name
            break
    return register(self, item, **kw)
Registry.register = recorded
for info in sorted(pkgutil.walk_packages([folder], prefix=package + "."), key=lambda i: i.name):
    importlib.import_module(info.name)
print(json.dumps(origin))
"""


def _registered_by_module(package: str) -> dict[str, str]:
    """In a fresh interpreter, import every module of ``package`` in name order and record the module whose
    import registered each name: a scorer or encoder is found by its registration, not by a list kept here."""
    import json
    import subprocess
    import sys

    folder = PACKAGE / package.split(".", 1)[1].replace(".", "/")
    res = subprocess.run([sys.executable, "-c", PROBE_REGISTRATIONS, str(folder), package], capture_output=True, text=True,
                         cwd=PACKAGE.parent, timeout=300)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout.strip().splitlines()[-1])


def test_every_builtin_scorer_is_declared_where_it_registers():
    """``fpr.scorers.BUILTIN`` (what finding one scorer imports) is what the modules register."""
    from fpr.scorers import BUILTIN

    assert _registered_by_module("fpr.scorers") == BUILTIN


def test_every_builtin_encoder_is_declared_where_it_registers():
    from fpr.encoders.registry import BUILTIN

    assert _registered_by_module("fpr.encoders") == BUILTIN
