"""Names that are not UTF-8 (issue #35, item 3): a gallery folder, a query folder or a workspace path holding the
byte 0xff is refused in one line showing the bytes, and nothing is stored. On the base commit each ended in
``internal error`` (UnicodeEncodeError in a key's hash; DuckDB's ``std::bad_cast`` on the workspace path)."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pandas as pd
import pytest

from tests.cli.test_faults_cli import one_line_error
from tests.conftest import make_tree, run_cli, write_image

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="names of arbitrary bytes: Linux file systems")


def _bytes_name(parent: Path, name: bytes) -> Path:
    """``parent/name`` where ``name`` holds bytes that are not UTF-8 (Python carries them as surrogates)."""
    return Path(os.fsdecode(os.fsencode(str(parent)) + b"/" + name))


def _gallery_names(ws: Path) -> list[str]:
    return run_cli(ws, "gallery", "list", "--format", "json").output


@pytest.fixture
def indexed(tmp_path, tiny_tree):
    ws = tmp_path / "ws"
    run_cli(ws, "gallery", "import", "--name", "g", "--folder", str(tiny_tree), "--references", "1")
    run_cli(ws, "index", "build", "--gallery", "g", "--encoder", "pixels-16")
    return ws


def test_a_gallery_folder_with_a_non_utf8_name_is_one_line_and_stores_nothing(tmp_path, tiny_tree):
    ws = tmp_path / "ws"
    os.rename(os.fsencode(str(tiny_tree / "cats" / "cats-0")), os.fsencode(str(tiny_tree / "cats")) + b"/\xffcat")
    line = one_line_error(run_cli(ws, "gallery", "import", "--name", "g", "--folder", str(tiny_tree), ok=False),
                          "gallery image name is not UTF-8 text", "cats/\\xffcat/")
    assert "\udcff" not in line  # the byte shown as an escape, not as a lone surrogate
    assert not ws.exists() or '"g"' not in _gallery_names(ws)  # refused before the workspace was made, or empty


def test_a_query_folder_with_a_non_utf8_name_is_one_line_and_stores_no_run(tmp_path, indexed):
    qdir = _bytes_name(tmp_path, b"q\xff")
    rows = [{"path": write_image(qdir / f"{grp}{i}.png", seed=1000 * g + 10 * i + 3).name, "identity": f"{grp}-{i}",
             "group": grp, "method": "m"} for g, grp in enumerate(("cats", "dogs")) for i in range(3)]
    pd.DataFrame(rows).to_csv(str(qdir / "queries.csv"), index=False)
    one_line_error(run_cli(indexed, "query", "--index", "g-pixels-16", "--queries", str(qdir / "queries.csv"),
                           "--run", "r", ok=False), "listed file name is not UTF-8 text", "q\\xff/cats0.png")
    assert '"r"' not in run_cli(indexed, "runs", "--format", "json").output


@pytest.mark.parametrize("args", [
    ("gallery", "import", "--name", "g", "--folder", "TREE", "--references", "1"),
    ("index", "build", "--gallery", "g", "--encoder", "pixels-16"),
    ("query", "--index", "g-pixels-16", "--queries", "QUERIES"),
    ("gallery", "list"),
])
def test_a_non_utf8_workspace_path_is_one_line_and_creates_nothing(tmp_path, tiny_tree, args):
    parent = _bytes_name(tmp_path, b"home\xff")
    ws = parent / "ws"
    queries = tmp_path / "queries.csv"
    pd.DataFrame([{"path": str(write_image(tmp_path / "q.png", seed=3)), "identity": "cats-0", "group": "cats"}]
                 ).to_csv(queries, index=False)
    args = [{"TREE": str(tiny_tree), "QUERIES": str(queries)}.get(a, a) for a in args]
    one_line_error(run_cli(ws, *args, ok=False), "workspace path is not UTF-8 text", "home\\xff/ws")
    assert not os.path.exists(os.fsencode(str(parent)))


def test_a_utf8_name_beyond_ascii_still_works(tmp_path):
    tree = make_tree(tmp_path / "tree", identities=2, images=3)
    os.rename(tree / "cats" / "cats-0", tree / "cats" / "chat-été")
    ws = tmp_path / "wsé"
    run_cli(ws, "gallery", "import", "--name", "g", "--folder", str(tree), "--references", "1")
    assert '"g"' in _gallery_names(ws)
