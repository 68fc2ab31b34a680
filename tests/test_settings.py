"""fpr.settings: every environment variable declared once, one rule for booleans, the docs table generated."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from fpr import settings
from fpr.errors import InputError

ROOT = Path(__file__).resolve().parents[1]


def test_the_docs_table_is_the_generated_one():
    text = (ROOT / "docs" / "settings.md").read_text()
    table = text.split("<!-- settings-table: begin -->\n")[1].split("\n<!-- settings-table: end -->")[0]
    assert table == settings.table_markdown()


def test_every_fpr_variable_named_in_the_code_is_declared():
    named = set()
    for f in (ROOT / "fpr").rglob("*.py"):
        named |= set(re.findall(r"\bFPR_[A-Z][A-Z0-9_]*[A-Z0-9]\b", f.read_text()))
    assert named - set(settings.SETTINGS) == set()
    assert set(settings.SETTINGS) - named == set()  # and none is declared that nothing reads


@pytest.mark.parametrize("text, expected", [("", True), ("  ", True), ("0", False), ("false", False),
                                            ("False", False), (" NO ", False), ("off", False), ("1", True),
                                            ("yes", True), ("on", True), ("anything", True)])
def test_one_rule_for_booleans(monkeypatch, text, expected):
    monkeypatch.setenv("FPR_SCORE_CACHE", text)  # default on
    assert settings.flag("FPR_SCORE_CACHE") is expected
    monkeypatch.setenv("FPR_OFFLINE", text)  # default off: blank is off, the rest as above
    assert settings.flag("FPR_OFFLINE") is (expected and bool(text.strip()))


def test_typed_values_and_defaults(monkeypatch, tmp_path):
    monkeypatch.delenv("FPR_EVAL_BLOCK_MB", raising=False)
    assert settings.get("FPR_EVAL_BLOCK_MB") == 256.0
    monkeypatch.setenv("FPR_EVAL_BLOCK_MB", "64")
    assert settings.get("FPR_EVAL_BLOCK_MB") == 64.0
    monkeypatch.setenv("FPR_SERVE_ORIGINS", " http://a.test , https://b.test:8443,,")
    assert settings.get("FPR_SERVE_ORIGINS") == ("http://a.test", "https://b.test:8443")
    monkeypatch.setenv("FPR_CACHE_DIR", str(tmp_path))
    assert settings.get("FPR_CACHE_DIR") == tmp_path
    monkeypatch.delenv("FPR_CACHE_DIR")
    assert settings.get("FPR_CACHE_DIR") == Path.home() / ".cache" / "fpr"


def test_a_bad_number_is_one_line_naming_the_variable(monkeypatch):
    monkeypatch.setenv("FPR_SERVE_QUEUE", "many")
    with pytest.raises(InputError, match="^FPR_SERVE_QUEUE must be an integer, got 'many'; unset it"):
        settings.get("FPR_SERVE_QUEUE")
    monkeypatch.setenv("FPR_SERVE_QUEUE", "0")
    with pytest.raises(InputError, match="^FPR_SERVE_QUEUE must be at least 1, got 0"):
        settings.get("FPR_SERVE_QUEUE")


def test_an_undeclared_name_is_a_programming_error():
    with pytest.raises(KeyError, match="FPR_NOPE is not declared"):
        settings.raw("FPR_NOPE")
