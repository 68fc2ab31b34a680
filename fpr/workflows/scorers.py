"""``fpr scorers list`` and ``fpr scorers show``: the registered scorers, their metrics and declared options.

Listing imports no scorer module: most import torch, which costs seconds to a minute before a name is
shown. The built-in scorers' declarations are read from ``fpr/scorers/catalog.json``, written from the
modules themselves by :func:`write_catalog` (``tests/workflows/test_scorer_catalog.py`` fails, naming this
command, when a module's declarations and the file differ). A scorer already imported, or a plugin's, is
described from its object.
"""
from __future__ import annotations

import json
from pathlib import Path

from fpr.files import atomic_write_text
from fpr.scorers import BUILTIN, SCORERS, Scorer, all_scorers, get_scorer

CATALOG = Path(__file__).resolve().parents[1] / "scorers" / "catalog.json"


def describe(sc: Scorer) -> dict:
    """A scorer's declarations as the catalog keeps them (plain JSON values)."""
    return {"description": sc.description, "needs": sorted(sc.needs), "metrics": list(sc.metrics),
            "options": [{"option": o.name, "type": o.type.__name__,
                         "default": "none" if o.default is None else str(o.default),
                         "choices": list(o.choices or ()), "help": o.help} for o in sc.options]}


def catalog() -> dict[str, dict]:
    """The built-in scorers' declarations from their modules (imports every one of them)."""
    scorers = all_scorers()
    return {name: describe(scorers[name]) for name in sorted(BUILTIN)}


def write_catalog(path: Path = CATALOG) -> Path:
    """Rewrite the catalog from the modules: ``python -c 'from fpr.workflows.scorers import write_catalog;
    write_catalog()'`` after changing a scorer's description, needs, metrics or options."""
    return atomic_write_text(path, json.dumps(catalog(), indent=1, ensure_ascii=False) + "\n")


def _stored() -> dict[str, dict]:
    return json.loads(CATALOG.read_text(encoding="utf-8"))


def _declared(name: str, stored: dict[str, dict]) -> dict:
    """One scorer's declarations: its object when imported (or a plugin's), else the catalog's entry."""
    if name in SCORERS.items or name not in stored:
        return describe(get_scorer(name))
    return stored[name]


def list_scorers() -> list[dict]:
    """One row per registered scorer: name, what it needs, its metrics and option names, a description."""
    stored = _stored()
    rows = []
    for name in SCORERS.known_names():
        d = _declared(name, stored)
        rows.append({"name": name, "needs": ",".join(d["needs"]),
                     "metrics": ",".join(f"{name}.{m}" for m in d["metrics"]),
                     "options": ",".join(f"{name}.{o['option']}" for o in d["options"]),
                     "description": d["description"]})
    return rows


def scorer_options(name: str) -> list[dict]:
    """The declared options of one scorer: ``<scorer>.<option>``, type, default, allowed values, help."""
    d = _declared(name, _stored())
    return [{**o, "option": f"{name}.{o['option']}", "choices": ",".join(o["choices"])} for o in d["options"]]
