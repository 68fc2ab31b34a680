"""Files named after ids go through ``fpr.files.safe_stem`` (the workflows' own ``_safe`` helpers mapped two ids
to one file: ``a/b`` and ``a_b`` overwrote each other's overlay, and ``fpr filter --copy-to`` kept one of two
kept queries)."""
from __future__ import annotations

import pandas as pd

from fpr.files import safe_stem
from fpr.store.workspace import Workspace
from fpr.workflows.explain import _overlay_paths
from fpr.workflows.filter_outputs import _copy_kept
from tests.conftest import write_image


def test_explain_gives_every_query_its_own_overlay(tmp_path):
    ws = Workspace.open(tmp_path / "ws")
    ids = ["a/b", "a_b", "a b", "A_B"]
    paths = _overlay_paths(ws, "run/1", ids, None)
    assert len({str(p).lower() for p in paths.values()}) == len(ids)  # distinct, also case-insensitively
    assert {p.parent for p in paths.values()} == {ws.root / "explain" / safe_stem("run/1")}
    assert paths["a/b"].name == f"{safe_stem('a/b')}.png" and paths["a/b"].name.startswith("a_b-")


def test_copy_to_keeps_every_kept_query_and_the_labels_as_folders(tmp_path):
    src = write_image(tmp_path / "in" / "img.png", seed=1)
    other = write_image(tmp_path / "in2" / "img.png", seed=2)
    df = pd.DataFrame({"__path": [str(src), str(other)], "__group": ["cats", "cats"],
                       "__identity": ["cats-0", "cats-0"], "__query_id": ["x/1", "x_1"]})
    _copy_kept(df, tmp_path / "out")
    files = sorted((tmp_path / "out").rglob("*.png"))
    assert len(files) == 2 and {f.parent for f in files} == {tmp_path / "out" / "cats" / "cats-0"}
    assert sorted(f.name for f in files) == sorted(f"{safe_stem(q)}-img.png" for q in ("x/1", "x_1"))
