"""Layers only point down (../shared/ARCHITECTURE.md, docs/architecture.md): checked on every import
statement of the package, including imports inside functions."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "fpr"
BOTTOM = {"store", "errors", "images", "tables", "progress", "files"}
ABOVE = ["galleries", "encoders", "index", "eval", "api", "demo", "cli", "serve"]
# layer -> the parts of fpr it must never import
FORBIDDEN = {
    **{b: set(ABOVE) for b in BOTTOM},
    "galleries": {"encoders", "index", "eval", "api", "demo", "cli", "serve"},
    "encoders": {"galleries", "index", "eval", "api", "demo", "cli", "serve"},
    "index": {"galleries", "eval", "api", "demo", "cli", "serve"},
    "eval": {"api", "demo", "cli", "serve"},
    "api": {"cli", "serve"},
    "demo": {"cli", "serve"},
}


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
    scorers = PACKAGE / "eval" / "scorers"
    names = {p.stem for p in scorers.glob("*.py") if p.stem != "__init__"}
    bad = []
    for f in scorers.glob("*.py"):
        for line, name in _imports(f):
            bits = name.split(".")
            if bits[:3] == ["fpr", "eval", "scorers"] and len(bits) > 3 and bits[3] in names - {f.stem}:
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
