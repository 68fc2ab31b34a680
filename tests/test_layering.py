"""Layers only point down (../shared/ARCHITECTURE.md, docs/architecture.md): checked on every import
statement of the package, including imports inside functions."""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "fpr"
BOTTOM = {"errors", "cards", "compiled", "images", "tables", "progress", "files", "keys", "plugins", "defaults", "settings",
          "cache", "registry"}
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


REAL = PACKAGE  # the installed tree: which names are modules, which are the facade's public names
MODULE_CALLS = ("import_module", "import_object", "__import__")
# Files that pass a module name computed at run time to MODULE_CALLS, with why that is checked elsewhere:
# the names they compute come from string constants that this checker reads as imports (below).
COMPUTED_OK = {
    "registry.py": "the mechanism: it imports the names the registries' declared tables give it",
    "api.py": "the facade: its _OWNERS table's module strings are read as imports",
    "workflows/demo.py": "_PRELOAD's module strings are read as imports",
    "scorers/cache.py": "a scorer's version_modules, strings in the scorer's own module, read as imports",
    "serve/workers.py": "WARM_IMPORTS: third-party libraries (timm, open_clip, faiss), no fpr module",
}


def _public() -> dict[str, str]:
    """fpr.api.PUBLIC, read from the source (name -> owner module): ``from fpr import NAME`` and ``fpr.NAME``
    import the facade and that owner."""
    tree = ast.parse((REAL / "api.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.AnnAssign) and getattr(node.target, "id", "") == "_OWNERS":
            owners = ast.literal_eval(node.value)
            return {name: module for module, names in owners.items() for name in names}
    raise AssertionError("fpr/api.py has no _OWNERS table")


PUBLIC = _public()


def _is_module(name: str) -> bool:
    rel = Path(*name.split(".")[1:])
    return (REAL / rel).with_suffix(".py").is_file() or (REAL / rel / "__init__.py").is_file()


def _fpr_name(name: str):
    """What ``fpr.A.B...`` (an import, an attribute chain, a string) imports: its longest module prefix, and
    for a facade name ``fpr.NAME`` the facade and the name's owner."""
    bits = name.split(".")
    if len(bits) > 1 and bits[1] in PUBLIC:
        return ["fpr.api", PUBLIC[bits[1]]]
    for n in range(len(bits), 1, -1):
        if _is_module(".".join(bits[:n])):
            return [".".join(bits[:n])]
    return [name] if len(bits) > 1 else []


def _dotted(node):
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return ".".join([node.id, *reversed(parts)]) if isinstance(node, ast.Name) else None


def _imports(path: Path):
    tree = ast.parse(path.read_text())
    chains = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.lineno, node.module
            if node.module == "fpr":
                for a in node.names:
                    for name in _fpr_name(f"fpr.{a.name}"):
                        yield node.lineno, name
        elif isinstance(node, ast.ImportFrom) and node.level > 0:
            yield node.lineno, "<relative>"
        elif isinstance(node, ast.Import):
            for a in node.names:
                yield node.lineno, a.name
        elif isinstance(node, ast.Attribute) and id(node) not in chains:
            name = _dotted(node)
            if name and name.startswith("fpr."):  # fpr.X.Y attribute chains: the outermost one only
                inner = node.value
                while isinstance(inner, ast.Attribute):
                    chains.add(id(inner))
                    inner = inner.value
                for mod in _fpr_name(name):
                    yield node.lineno, mod
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("fpr."):
            name = node.value.split(":")[0]  # a module named in a string: a registry table, "module:object"
            if re.fullmatch(r"fpr(\.[A-Za-z_][A-Za-z0-9_]*)+", name) and _is_module(name):
                yield node.lineno, name
        elif isinstance(node, ast.Call) and (getattr(node.func, "attr", None) or getattr(node.func, "id", "")
                                             ) in MODULE_CALLS and node.args:
            arg = node.args[0]
            if isinstance(arg, ast.Constant):
                continue  # a string constant: read above
            if isinstance(arg, ast.JoinedStr) and arg.values and isinstance(arg.values[0], ast.Constant) \
                    and str(arg.values[0].value).startswith("fpr."):
                prefix = str(arg.values[0].value).rsplit(".", 1)[0]  # f"fpr.cli.{name}": some module of fpr.cli
                yield node.lineno, prefix
            else:
                yield node.lineno, "<computed>"


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
            if name == "<computed>":
                if f.relative_to(PACKAGE).as_posix() not in COMPUTED_OK:
                    out.append(f"{f.relative_to(PACKAGE)}:{line} imports a module whose name it computes")
                continue
            bits = name.split(".")
            if bits[0] == "fpr" and len(bits) > 1 and bits[1] in FORBIDDEN.get(layer, set()):
                out.append(f"{f.relative_to(PACKAGE)}:{line} ({layer}) imports {name}")
    return sorted(set(out), key=lambda v: (v.split(":")[0], int(v.split(":")[1].split()[0]), v))


def test_layers_only_point_down():
    assert violations() == []


def _scorer_family_violations(scorers: Path, families: set[str]) -> list[str]:
    """Imports across scorer families: a family's modules may import each other and the framework (the
    package's top modules and the judge kit ``judges/``), never another family; the framework imports no
    family (its ``__init__`` only names their modules in ``BUILTIN``, as strings)."""
    bad = []
    for f in sorted(scorers.rglob("*.py")):
        rel = f.relative_to(scorers)
        if rel == Path("__init__.py"):
            continue
        own = rel.parts[0] if len(rel.parts) > 1 and rel.parts[0] in families else None
        for line, name in _imports(f):
            bits = name.split(".")
            if bits[:2] == ["fpr", "scorers"] and len(bits) > 2 and bits[2] in families - {own}:
                bad.append(f"{rel.as_posix()}:{line} ({own or 'framework'}) imports {name}")
    return bad


def _families() -> set[str]:
    """The scorer families: the packages under fpr/scorers/ holding a registered built-in scorer (found from
    the registry's table, not from a list kept here)."""
    from fpr.scorers import BUILTIN

    return {m.split(".")[2] for m in BUILTIN.values() if len(m.split(".")) > 3}


def test_no_scorer_family_imports_another():
    assert _scorer_family_violations(PACKAGE / "scorers", _families()) == []


def test_the_family_checker_catches_a_cross_family_import(tmp_path):
    scorers = tmp_path / "scorers"
    for d in ("alpha", "beta", "judges"):
        (scorers / d).mkdir(parents=True)
        (scorers / d / "__init__.py").write_text("")
    (scorers / "alpha" / "a.py").write_text("from fpr.scorers.alpha import b\nfrom fpr.scorers.judges import client\n")
    (scorers / "beta" / "b.py").write_text("def f():\n    import fpr.scorers.alpha.a\n")
    (scorers / "options.py").write_text("from fpr.scorers.beta import b\n")
    assert _scorer_family_violations(scorers, {"alpha", "beta"}) == [
        "beta/b.py:2 (beta) imports fpr.scorers.alpha.a", "options.py:1 (framework) imports fpr.scorers.beta"]


def test_the_checker_catches_a_lazy_upward_import(tmp_path, monkeypatch):
    fake = tmp_path / "fpr"
    (fake / "eval").mkdir(parents=True)
    (fake / "eval" / "x.py").write_text("def f():\n    from fpr import api\n    import fpr.cli.main\n")
    monkeypatch.setattr(__import__(__name__, fromlist=["x"]), "PACKAGE", fake)
    assert violations() == ["eval/x.py:2 (eval) imports fpr.api", "eval/x.py:3 (eval) imports fpr.cli.main"]


PROBE = """\
import fpr
from fpr import run_query
from fpr.registry import import_module


def f(name):
    fpr.workflows.runs.load_run("x")
    import_module(f"fpr.cli.{name}")
    import_module(name)
    return "fpr.serve.app:create_app"
"""


def test_the_checker_reads_facade_names_attribute_chains_and_computed_module_names(tmp_path, monkeypatch):
    """Issue #36: a probe using ``from fpr import NAME``, an ``fpr.X.Y`` chain, an f-string module name, a
    computed one and a "module:object" string, each pointing up, is reported once per use."""
    fake = tmp_path / "fpr"
    (fake / "eval").mkdir(parents=True)
    (fake / "eval" / "probe.py").write_text(PROBE)
    monkeypatch.setattr(__import__(__name__, fromlist=["x"]), "PACKAGE", fake)
    assert violations() == ["eval/probe.py:2 (eval) imports fpr.api", "eval/probe.py:2 (eval) imports fpr.workflows.runs",
                            "eval/probe.py:7 (eval) imports fpr.workflows.runs", "eval/probe.py:8 (eval) imports fpr.cli",
                            "eval/probe.py:9 imports a module whose name it computes",
                            "eval/probe.py:10 (eval) imports fpr.serve.app"]


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


# Private names one workflow module may take from another: a module split in two for size, and a helper still
# to move into fpr/workflows/common.py (indices.py is being reworked elsewhere; issue #36).
SHARED_PRIVATES = {("filter", "filter_outputs"): "filter_outputs is filter's own second half (fpr filter's outputs)",
                   ("runs", "indices"): "_card_numerics: to move into fpr/workflows/common.py"}


def test_workflows_share_helpers_through_common_not_each_others_privates():
    """Helpers several workflows use live in fpr/workflows/common.py (a declared module), not as another
    workflow's private names."""
    bad = []
    for f in sorted((PACKAGE / "workflows").glob("*.py")):
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("fpr.workflows."):
                owner = node.module.split(".")[2]
                for a in node.names:
                    if a.name.startswith("_") and (f.stem, owner) not in SHARED_PRIVATES:
                        bad.append(f"workflows/{f.name}:{node.lineno} imports {node.module}.{a.name}")
    assert bad == []
