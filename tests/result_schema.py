"""Validate emitted documents against the package's result schema (fpr/schemas/run-result-v1.json)."""
from __future__ import annotations

import json

import jsonschema

from fpr.render.result import RUN_RESULT, RUN_RESULTS, SCHEMA_FILE

SCHEMA = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
_VALIDATOR = jsonschema.Draft202012Validator(SCHEMA, format_checker=jsonschema.FormatChecker())


def validate(doc: dict, kind: str) -> dict:
    """``doc`` is valid and of ``kind`` (``fpr.run-result/1`` or ``fpr.run-results/1``); returns it."""
    assert kind in (RUN_RESULT, RUN_RESULTS)
    errors = sorted(_VALIDATOR.iter_errors(doc), key=lambda e: list(e.absolute_path))
    assert not errors, "\n".join(f"{list(e.absolute_path)}: {e.message[:300]}" for e in errors[:5])
    assert doc["schema"] == kind
    return doc


def single_run(doc: dict) -> dict:
    """The one run document of a valid ``fpr.run-results/1`` collection of one run."""
    validate(doc, RUN_RESULTS)
    assert len(doc["runs"]) == 1
    return doc["runs"][0]
