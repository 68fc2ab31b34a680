"""The known-answer renderers of ``benchmarks/vistar_known_answers.py``, loaded once for the tests (one
implementation of the known answers: the benchmark table and the tests draw the same scenes)."""
from __future__ import annotations

import importlib.util
import sys
from functools import lru_cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


@lru_cache(maxsize=1)
def known_answers():
    spec = importlib.util.spec_from_file_location("vistar_known_answers", ROOT / "benchmarks" / "vistar_known_answers.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up while the class is built
    spec.loader.exec_module(mod)
    return mod
