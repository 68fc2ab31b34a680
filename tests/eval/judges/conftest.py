"""A judge server on loopback per test module, the environment pointing the judge client at it, query batches."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from fpr.eval.scorers import QueryBatch
from tests.eval.judges.server import API_KEY, MODELS, JudgeServer


@pytest.fixture(scope="module")
def server():
    with JudgeServer() as s:
        yield s


@pytest.fixture
def judge_env(server, monkeypatch):
    """OPENAI_BASE_URL/OPENAI_API_KEY/FPR_JUDGE_MODEL for the test server; faults and counts reset."""
    monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", API_KEY)
    monkeypatch.setenv("FPR_JUDGE_MODEL", MODELS[0])
    server.faults.clear()
    server.reset()
    return server


def flat_image(path: Path, value, size: int = 32) -> str:
    """A uniform RGB image (``value`` a grey level or an RGB triple)."""
    arr = np.zeros((size, size, 3), dtype=np.uint8) + np.asarray(value, dtype=np.uint8)
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(arr, "RGB").save(path)
    return str(path)


def make_batch(tmp_path: Path, prompts: list[str | None], query_values: list, ref_values: list, *,
               workspace: Path | None = None, options: dict | None = None) -> QueryBatch:
    """Queries i: a flat image of grey ``query_values[i]`` with one flat reference of ``ref_values[i]``."""
    n = len(prompts)
    paths = [flat_image(tmp_path / "q" / f"{i}.png", query_values[i]) for i in range(n)]
    refs = [[flat_image(tmp_path / "r" / f"{i}.png", ref_values[i])] if ref_values[i] is not None else []
            for i in range(n)]
    return QueryBatch([f"q{i}" for i in range(n)], paths, [f"id{i}" for i in range(n)], ["g"] * n, prompts, refs,
                      options=dict(options or {}), workspace=workspace if workspace is not None else tmp_path / "ws")


def metric(df, query_id: str, name: str):
    row = df[(df["query_id"] == query_id) & (df["metric"] == name)]
    assert len(row) == 1, (query_id, name, df)
    return float(row["value"].iloc[0]), row["note"].iloc[0]
