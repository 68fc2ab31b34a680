"""Wide listings fold to the terminal (issue #27 item 6, #33 item 5): ``--width``, ``COLUMNS``, 100 off a
terminal; a long cell wraps (nothing is cut) and ``--wide`` / ``--format csv`` show it whole on one line."""
from __future__ import annotations

import csv
import io
import re

import pytest

from tests.conftest import run_cli

LISTINGS = (["scorers", "list"], ["scorers", "show", "copy-paste"], ["encoders", "list"])


def widest(text: str) -> int:
    return max(len(line) for line in text.splitlines())


@pytest.mark.parametrize("args", LISTINGS, ids=" ".join)
def test_listings_fold_to_the_width_and_lose_nothing_silently(args, tmp_path, monkeypatch):
    ws = tmp_path / "ws"
    monkeypatch.delenv("COLUMNS", raising=False)
    whole = run_cli(ws, *args, "--wide").stdout
    assert widest(whole) > 100  # these rows were up to ~1,000 characters
    folded = run_cli(ws, *args).stdout  # click's runner is no terminal: 100
    assert widest(folded) <= 100 and "…" not in folded
    assert widest(run_cli(ws, *args, "--width", "60").stdout) <= 60
    monkeypatch.setenv("COLUMNS", "72")
    assert widest(run_cli(ws, *args).stdout) <= 72
    # nothing is lost: every name or word of every value (up to the longest a column keeps whole) is printed
    rows = list(csv.DictReader(io.StringIO(run_cli(ws, *args, "--format", "csv").stdout)))
    printed = set(re.split(r"[\s,;/]+", folded))
    shown = {c for block in folded.split("\n\n") for c in block.splitlines()[0].split()}  # the table's columns
    for row in rows:
        for value in (v for c, v in row.items() if c in shown):
            words = [w for w in re.split(r"[\s,;/]+", value) if 0 < len(w) <= 32 and not re.search(r"[0-9a-f]{40}", w)]
            assert set(words) <= printed, (row, set(words) - printed)


def test_an_empty_listing_says_so(tmp_path):
    from fpr.store.workspace import Workspace

    with Workspace.open(tmp_path / "ws").write():  # a workspace with nothing stored yet
        pass
    for args in (["runs"], ["gallery", "list"], ["index", "list"]):
        assert run_cli(tmp_path / "ws", *args, "--width", "50").stdout.strip() == "(no rows)"


@pytest.mark.parametrize("args", (["runs"], ["gallery", "list"], ["index", "list"]), ids=" ".join)
def test_a_misspelt_workspace_is_an_error_naming_the_path(args, tmp_path):
    """``fpr runs`` on a misspelt workspace printed "(no rows)" and exited 0 (issue #33)."""
    res = run_cli(tmp_path / "wokspace", *args, ok=False)
    assert res.exit_code == 2 and res.stdout == ""
    assert res.stderr.strip().splitlines() == [
        f"fpr: error: no fpr workspace here ({(tmp_path / 'wokspace').resolve()}); check --workspace (or "
        "FPR_WORKSPACE) for a typo; 'fpr gallery import' or 'fpr demo' creates one"]


def test_meta_notes_under_its_tables_wrap_to_the_width(tmp_path, tiny_tree, monkeypatch):
    """`fpr meta`'s lines under its tables (the judge, what ppa means, the AUROC levels) were printed whole:
    170 characters off a terminal (found by the #33 audit); they wrap as the tables fold, nothing lost."""
    import pandas as pd

    from tests.conftest import write_image

    ws = tmp_path / "ws"
    run_cli(ws, "gallery", "import", "--name", "g", "--folder", str(tiny_tree), "--references", "1")
    run_cli(ws, "index", "build", "--gallery", "g", "--encoder", "pixels-16")
    rows = [{"path": str(write_image(tmp_path / f"q{s}.png", seed=s)), "identity": f"cats-{s // 2}", "group": "cats",
             "method": "m", "drift": float(s % 2)} for s in range(6)]
    pd.DataFrame(rows).to_csv(tmp_path / "q.csv", index=False)
    run_cli(ws, "query", "--index", "g-pixels-16", "--queries", str(tmp_path / "q.csv"), "--run", "r1")
    monkeypatch.delenv("COLUMNS", raising=False)
    out = run_cli(ws, "meta", "--run", "r1", "--truth", "drift", "--n-boot", "5").stdout
    assert "AUROC per adjacent judge level" in out and "kendall_within: tau-b over the judged pairs" in " ".join(
        out.split())
    assert widest(out) <= 100
    monkeypatch.setenv("COLUMNS", "72")
    assert widest(run_cli(ws, "meta", "--run", "r1", "--truth", "drift", "--n-boot", "5").stdout) <= 72
