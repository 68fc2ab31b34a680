"""One owner per mechanism, enforced like the layers (docs/architecture.md, "Owners"): each of these
appears in its owner module only, checked on every statement of the package (imports and uses inside
functions included).

- ``sqlite3``: fpr/cache.py (the one store shape and failure policy of the caches);
- ``hashlib``, ``uuid``, ``datetime.now``: fpr/keys.py (hash recipes, random suffixes, ids, timestamps);
- ``os.environ`` / ``os.getenv``: fpr/settings.py (every variable declared with type, default and doc);
- ``os.replace``: fpr/files.py (the one writer);
- ``importlib.import_module`` / ``__import__``: fpr/registry.py (registries, the lazy facade, command modules);
- ``numba.njit`` / ``numba.jit``: fpr/compiled.py (kept in numba's cache where it can write, else compiled in memory);
- an in-process model cache (a module-level table named for models, encoders, engines, networks, ... or a
  memoised loader of one): fpr/cache.py (``load_once``: one keep-and-evict rule, one lock discipline).

Each rule is proven by a probe module that breaks it, written into a temporary package the checker reads.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "fpr"

# mechanism -> (its owner, relative to fpr/, and what to use instead)
OWNERS = {
    "sqlite3": ("cache.py", "fpr.cache.SqliteStore"),
    "hashlib": ("keys.py", "fpr.keys (sha256_hex, json_digest, hasher, file_sha256, fingerprint)"),
    "uuid": ("keys.py", "fpr.keys (random_hex, new_id)"),
    "datetime.now": ("keys.py", "fpr.keys (utc_now, utc_now_precise, utc_stamp, new_id)"),
    "os.environ": ("settings.py", "fpr.settings (get, flag, raw)"),
    "os.replace": ("files.py", "fpr.files (atomic_write*, replace_file)"),
    "importlib.import_module": ("registry.py", "fpr.registry (Registry, import_module, import_object)"),
    "numba.njit": ("compiled.py", "fpr.compiled.njit"),
    "model cache": ("cache.py", "fpr.cache.load_once"),
}
# dotted uses -> the mechanism they are
ATTRIBUTES = {"os.environ": "os.environ", "os.getenv": "os.environ", "os.putenv": "os.environ",
              "os.unsetenv": "os.environ", "os.replace": "os.replace", "datetime.now": "datetime.now",
              "datetime.utcnow": "datetime.now", "datetime.datetime.now": "datetime.now",
              "datetime.datetime.utcnow": "datetime.now", "importlib.import_module": "importlib.import_module",
              "numba.njit": "numba.njit", "numba.jit": "numba.njit"}
# `from X import Y` -> the mechanism
FROM_IMPORTS = {("os", "environ"): "os.environ", ("os", "getenv"): "os.environ", ("os", "replace"): "os.replace",
                ("importlib", "import_module"): "importlib.import_module", ("numba", "njit"): "numba.njit",
                ("numba", "jit"): "numba.njit"}
MODULES = {"sqlite3": "sqlite3", "hashlib": "hashlib", "uuid": "uuid"}
# A module-level table holding loaded models is an in-process model cache: named for what it holds.
MODEL_WORDS = re.compile(r"MODEL|ENCODER|ENGINE|DEPTH|DEEPLAB|NETWORK|PIPELINE|SESSION|PROCESSOR|SEGMENTER_NET|LOADED",
                         re.IGNORECASE)
EMPTY_TABLES = {"dict", "OrderedDict", "WeakValueDictionary"}
MEMOISERS = {"lru_cache", "cache", "functools.lru_cache", "functools.cache"}


def _dotted(node: ast.AST) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return ".".join([node.id, *reversed(parts)])
    return None


def _is_empty_table(value: ast.AST | None) -> bool:
    if isinstance(value, ast.Dict) and not value.keys:
        return True
    return (isinstance(value, ast.Call) and not value.args and not value.keywords
            and (_dotted(value.func) or "").split(".")[-1] in EMPTY_TABLES)


def _model_caches(tree: ast.Module):
    """(line, "model cache") for a module-level empty table named for models, and for a memoised function
    named for one (``@lru_cache`` on ``load_depth``, ``model``, ...)."""
    for node in tree.body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names = [t.id for t in targets if isinstance(t, ast.Name)]
            if _is_empty_table(node.value) and any(MODEL_WORDS.search(n) for n in names):
                yield node.lineno, "model cache"
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            memoised = any(_dotted(d.func if isinstance(d, ast.Call) else d) in MEMOISERS for d in node.decorator_list)
            if memoised and MODEL_WORDS.search(node.name):
                yield node.lineno, "model cache"


def _uses(tree: ast.AST):
    """(line, mechanism) for every use of an owned mechanism in ``tree``."""
    if isinstance(tree, ast.Module):
        yield from _model_caches(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                top = a.name.split(".")[0]
                if top in MODULES:
                    yield node.lineno, MODULES[top]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            top = node.module.split(".")[0]
            if top in MODULES:
                yield node.lineno, MODULES[top]
            for a in node.names:
                if (node.module, a.name) in FROM_IMPORTS:
                    yield node.lineno, FROM_IMPORTS[(node.module, a.name)]
        elif isinstance(node, ast.Attribute):
            name = _dotted(node)
            if name in ATTRIBUTES:
                yield node.lineno, ATTRIBUTES[name]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "__import__":
            yield node.lineno, "importlib.import_module"


def violations(package: Path = None) -> list[str]:
    package = package or PACKAGE
    out = []
    for f in sorted(package.rglob("*.py")):
        rel = f.relative_to(package).as_posix()
        seen = set()
        for line, mechanism in _uses(ast.parse(f.read_text())):
            owner, instead = OWNERS[mechanism]
            if rel != owner and (line, mechanism) not in seen:
                seen.add((line, mechanism))
                out.append(f"{rel}:{line} uses {mechanism} (owner: fpr/{owner}; use {instead})")
    return out


def test_every_mechanism_is_used_by_its_owner_only():
    assert violations() == []


def test_each_owner_exists_and_uses_its_mechanism():
    for mechanism, (owner, _) in OWNERS.items():
        tree = ast.parse((PACKAGE / owner).read_text())
        if mechanism == "model cache":  # the owner holds models in its class, not in a module-level table
            defined = {n.name for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef))}
            assert {"LoadedModels", "load_once"} <= defined, owner
            continue
        uses = {m for _, m in _uses(tree)}
        assert mechanism in uses, (mechanism, owner)


PROBES = {
    "sqlite3": "import sqlite3\n",
    "hashlib": "def f(b):\n    import hashlib\n    return hashlib.sha256(b).hexdigest()\n",
    "uuid": "from uuid import uuid4\n",
    "datetime.now": "from datetime import datetime\n\n\ndef f():\n    return datetime.now()\n",
    "os.environ": "import os\n\nX = os.environ.get('FPR_X')\n",
    "os.getenv": "import os\n\nX = os.getenv('FPR_X')\n",
    "from os import environ": "from os import environ\n",
    "os.replace": "import os\n\n\ndef f(a, b):\n    os.replace(a, b)\n",
    "importlib.import_module": "import importlib\n\nM = importlib.import_module('json')\n",
    "from importlib import import_module": "from importlib import import_module\n",
    "__import__": "M = __import__('json')\n",
    "numba.njit": "import numba\n\n\n@numba.njit(cache=True)\ndef f(x):\n    return x\n",
    "from numba import njit": "def f():\n    from numba import njit\n    return njit\n",
    "model table": "_MODELS: dict[str, object] = {}\n",
    "model OrderedDict": "from collections import OrderedDict\n\n_ENCODERS = OrderedDict()\n",
    "memoised loader": "from functools import lru_cache\n\n\n@lru_cache(maxsize=2)\ndef load_depth(name):\n    return name\n",
}
EXPECTED = {
    "sqlite3": "eval/probe.py:1 uses sqlite3 (owner: fpr/cache.py",
    "hashlib": "eval/probe.py:2 uses hashlib (owner: fpr/keys.py",
    "uuid": "eval/probe.py:1 uses uuid (owner: fpr/keys.py",
    "datetime.now": "eval/probe.py:5 uses datetime.now (owner: fpr/keys.py",
    "os.environ": "eval/probe.py:3 uses os.environ (owner: fpr/settings.py",
    "os.getenv": "eval/probe.py:3 uses os.environ (owner: fpr/settings.py",
    "from os import environ": "eval/probe.py:1 uses os.environ (owner: fpr/settings.py",
    "os.replace": "eval/probe.py:5 uses os.replace (owner: fpr/files.py",
    "importlib.import_module": "eval/probe.py:3 uses importlib.import_module (owner: fpr/registry.py",
    "from importlib import import_module": "eval/probe.py:1 uses importlib.import_module (owner: fpr/registry.py",
    "__import__": "eval/probe.py:1 uses importlib.import_module (owner: fpr/registry.py",
    "numba.njit": "eval/probe.py:4 uses numba.njit (owner: fpr/compiled.py",
    "from numba import njit": "eval/probe.py:2 uses numba.njit (owner: fpr/compiled.py",
    "model table": "eval/probe.py:1 uses model cache (owner: fpr/cache.py",
    "model OrderedDict": "eval/probe.py:3 uses model cache (owner: fpr/cache.py",
    "memoised loader": "eval/probe.py:5 uses model cache (owner: fpr/cache.py",
}


@pytest.mark.parametrize("rule", sorted(PROBES))
def test_a_probe_breaking_each_rule_is_reported(tmp_path, rule):
    fake = tmp_path / "fpr"
    (fake / "eval").mkdir(parents=True)
    (fake / "eval" / "probe.py").write_text(PROBES[rule])
    got = violations(fake)
    assert len(got) == 1 and got[0].startswith(EXPECTED[rule]), got


def test_the_owner_itself_may_use_its_mechanism(tmp_path):
    fake = tmp_path / "fpr"
    fake.mkdir()
    (fake / "keys.py").write_text(PROBES["hashlib"] + PROBES["uuid"])
    (fake / "settings.py").write_text(PROBES["os.environ"])
    assert violations(fake) == []
