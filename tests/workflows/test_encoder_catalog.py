"""``fpr encoders list`` reads the built-in encoders' declarations from ``fpr/encoders/catalog.json`` (no encoder
module, no torch) while only built-in encoders exist; the file must say what the specs declare, and the rows
must be the ones the specs give."""
from __future__ import annotations

import json

from fpr.encoders import catalog
from fpr.workflows import encoders as listing

REGENERATE = "python -c 'from fpr.workflows.encoders import write_catalog; write_catalog()'"


def test_the_catalog_is_what_the_specs_declare():
    stored = catalog.stored_catalog()
    live = listing.encoder_catalog()  # imports every built-in encoder module
    assert sorted(stored) == sorted(catalog.BUILTIN), f"encoders added or removed: run {REGENERATE}"
    for name in catalog.BUILTIN:
        assert stored[name] == live[name], f"{name}'s declaration changed: run {REGENERATE}"
        assert catalog.weights_source(stored[name]["weights"]) == __import__(
            "fpr.encoders.registry").encoders.registry.get_spec(name).weights  # the JSON form reads back exactly


def test_listing_from_the_catalog_equals_listing_from_the_specs(monkeypatch, tmp_path):
    monkeypatch.setenv("FPR_WEIGHTS_DIR", str(tmp_path / "weights"))  # no trained encoder: the catalog path
    assert catalog.builtin_only()
    fast = listing.list_encoders()
    monkeypatch.setattr(catalog, "builtin_only", lambda: False)  # the path that imports every module
    assert fast == listing.list_encoders()
    assert {r["id"]: r["status"] for r in fast}["pixels-16"] == "available"


def test_a_trained_card_or_a_plugin_lists_through_the_specs(monkeypatch, tmp_path):
    weights = tmp_path / "weights"
    (weights / "mine").mkdir(parents=True)
    (weights / "mine" / catalog.CARD_NAME).write_text(json.dumps({"id": "mine"}))  # broken: listed with its reason
    monkeypatch.setenv("FPR_WEIGHTS_DIR", str(weights))
    assert not catalog.builtin_only() and "mine" in catalog.known_ids()
    rows = {r["id"]: r for r in listing.list_encoders()}
    assert rows["mine"]["status"] == "broken" and set(catalog.BUILTIN) < set(rows)
