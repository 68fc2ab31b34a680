"""``fpr benchmark``: register, submit, leaderboard, history, withdraw and verify on the operator's workspace."""
from __future__ import annotations

import json
import shutil

import pandas as pd
import pytest

from tests.conftest import run_cli, write_image


@pytest.fixture
def sealed(tmp_path, tiny_tree):
    """A pixels-16 index over the tiny tree, registered as a benchmark, and a folder of generations."""
    ws = tmp_path / "ws"
    run_cli(ws, "gallery", "import", "--name", "g", "--folder", str(tiny_tree), "--references", "1")
    run_cli(ws, "index", "build", "--gallery", "g", "--encoder", "pixels-16", "--name", "gi", "--no-difficulty")
    out = run_cli(ws, "benchmark", "register", "tiny", "--index", "gi", "--by", "ops", "--format", "json")
    assert json.loads(out.output)["name"] == "tiny"
    gen = tmp_path / "gen"
    rows = []
    for g, group in enumerate(("cats", "dogs")):
        for i in range(3):
            name = f"{group}/{i}.png"
            if i == 0:  # a copy of a gallery image of its identity, so AP = 1 is reachable
                (gen / group).mkdir(parents=True, exist_ok=True)
                shutil.copy(sorted((tiny_tree / group / f"{group}-0").iterdir())[-1], gen / name)
            else:
                write_image(gen / name, seed=100 * g + i)
            rows.append({"path": name, "identity": f"{group}-{i}", "group": group})
    pd.DataFrame(rows).to_csv(gen / "queries.csv", index=False)
    return ws, gen


def test_submit_ranks_verifies_and_withdraws(sealed, tmp_path):
    ws, gen = sealed
    out = run_cli(ws, "benchmark", "submit", "tiny", "--queries", str(gen / "queries.csv"), "--method", "mine",
                  "--description", "a test method", "--link", "https://example.org", "--device", "cpu",
                  "--format", "json")
    sub = json.loads(out.output)
    pd.read_csv(gen / "queries.csv").assign(method="mine").to_csv(tmp_path / "cli.csv", index=False)
    for p in gen.rglob("*.png"):  # the CLI run reads the same images beside its own table
        (tmp_path / p.relative_to(gen)).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(p, tmp_path / p.relative_to(gen))
    doc = json.loads(run_cli(ws, "query", "--index", "gi", "--queries", str(tmp_path / "cli.csv"), "--run", "ref",
                             "--device", "cpu", "--format", "json").output)
    ref = next(r for r in doc["summary"] if r["group"] == "*")
    board = json.loads(run_cli(ws, "benchmark", "leaderboard", "tiny", "--format", "json").output)
    row = board["rows"][0]
    assert (row["map"], row["map_lo"], row["map_hi"], row["sim"]) == (ref["map"], ref["map_lo"], ref["map_hi"],
                                                                      ref["sim"])
    assert row["submission_hash"] == sub["submission_hash"] and row["n_images"] == 6
    text = run_cli(ws, "benchmark", "leaderboard", "tiny").output
    assert "mine" in text and sub["submission_id"] in text

    ok = run_cli(ws, "benchmark", "verify", sub["submission_id"], str(gen))
    assert "matches" in ok.output
    (gen / "cats" / "1.png").write_bytes((gen / "cats" / "1.png").read_bytes() + b"\0")
    bad = run_cli(ws, "benchmark", "verify", sub["submission_id"], str(gen), ok=False)
    assert bad.exit_code == 1 and "DIFFERS" in bad.output and "differs: cats/1.png" in bad.output

    run_cli(ws, "benchmark", "withdraw", sub["submission_id"], "--reason", "a mistake")
    assert json.loads(run_cli(ws, "benchmark", "leaderboard", "tiny", "--format", "json").output)["rows"] == []
    history = json.loads(run_cli(ws, "benchmark", "history", "tiny", "--format", "json").output)
    assert [(h["withdrawn_by"], h["withdrawn_reason"]) for h in history] == [("operator", "a mistake")]


def test_unknown_benchmark_is_one_line(sealed):
    ws, gen = sealed
    res = run_cli(ws, "benchmark", "leaderboard", "nope", ok=False)
    assert res.exit_code == 2 and res.output.strip().count("\n") == 0 and "no benchmark named 'nope'" in res.output
