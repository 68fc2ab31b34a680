"""Wide listings fold to the terminal (issue #27 item 6): ``--width``, ``COLUMNS``, 100 off a terminal; a cut
cell ends with an ellipsis and ``--wide`` / ``--format csv`` show it whole."""
from __future__ import annotations

import csv
import io

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
    assert widest(folded) <= 100 and "…" in folded
    assert widest(run_cli(ws, *args, "--width", "60").stdout) <= 60
    monkeypatch.setenv("COLUMNS", "72")
    assert widest(run_cli(ws, *args).stdout) <= 72
    # every cut cell is a prefix of the whole value, which CSV keeps
    rows = list(csv.DictReader(io.StringIO(run_cli(ws, *args, "--format", "csv").stdout)))
    key = next(iter(rows[0]))
    values = {r[key]: r for r in rows}
    lines = folded.split("\n\n")[0].splitlines()
    header = lines[0].split()
    for line in lines[2:]:
        name = line.split()[0]
        assert name in values, name  # the key column is never cut
        for cell in (c.strip() for c in line.split("  ") if c.strip()):
            if cell.endswith("…"):
                assert any(str(v).startswith(cell[:-1]) for v in values[name].values()), (name, cell, header)


def test_an_empty_listing_says_so(tmp_path):
    assert run_cli(tmp_path / "ws", "runs", "--width", "50").stdout.strip() == "(no rows)"
