"""Every data file the package reads at run time is declared as package data (a wheel without it would
fail only on a user's machine: the tests run from the source tree)."""
from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_every_data_file_under_fpr_is_package_data():
    globs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["fpr"]
    package = ROOT / "fpr"
    declared = {p for g in globs for p in package.glob(g)}
    data = {p for p in package.rglob("*") if p.is_file() and p.suffix not in (".py", ".pyc")
            and "__pycache__" not in p.parts}
    assert sorted(str(p.relative_to(package)) for p in data - declared) == []
