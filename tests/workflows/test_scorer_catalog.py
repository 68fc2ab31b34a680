"""``fpr scorers list``/``show`` read the built-in scorers' declarations from ``fpr/scorers/catalog.json``
(no scorer module, no torch imported); the file must say what the modules declare."""
from __future__ import annotations

import json

from fpr.scorers import BUILTIN, Scorer, register_scorer
from fpr.scorers.options import Option
from fpr.workflows import scorers as listing

REGENERATE = "python -c 'from fpr.workflows.scorers import write_catalog; write_catalog()'"


def test_the_catalog_is_what_the_modules_declare():
    stored = json.loads(listing.CATALOG.read_text(encoding="utf-8"))
    live = listing.catalog()  # imports every built-in scorer
    assert sorted(stored) == sorted(BUILTIN), f"scorers added or removed: run {REGENERATE}"
    for name in BUILTIN:
        assert stored[name] == live[name], f"{name}'s declarations changed: run {REGENERATE}"


def test_listing_reads_the_catalog_until_a_module_is_imported(monkeypatch, tmp_path):
    fake = {name: {"description": f"from the file {name}", "needs": ["image"], "metrics": ["m"],
                   "options": [{"option": "k", "type": "int", "default": "3", "choices": ["3", "4"], "help": "h"}]}
            for name in BUILTIN}
    path = tmp_path / "catalog.json"
    path.write_text(json.dumps(fake))
    monkeypatch.setattr(listing, "CATALOG", path)
    monkeypatch.setattr(listing.SCORERS, "items", {})  # nothing imported yet

    class Toy(Scorer):
        name = "toy-listed"
        description = "an object's own"
        needs = frozenset({"prompt"})
        metrics = ("a", "b")
        options = (Option("x", float, 0.5, "x help"),)

    register_scorer(Toy())
    rows = {r["name"]: r for r in listing.list_scorers()}
    assert rows["copy-paste"] == {"name": "copy-paste", "needs": "image", "metrics": "copy-paste.m",
                                  "options": "copy-paste.k", "description": "from the file copy-paste"}
    assert rows["toy-listed"] == {"name": "toy-listed", "needs": "prompt", "metrics": "toy-listed.a,toy-listed.b",
                                  "options": "toy-listed.x", "description": "an object's own"}
    assert listing.scorer_options("clip-t") == [{"option": "clip-t.k", "type": "int", "default": "3",
                                                 "choices": "3,4", "help": "h"}]
    assert listing.scorer_options("toy-listed") == [{"option": "toy-listed.x", "type": "float", "default": "0.5",
                                                     "choices": "", "help": "x help"}]
