"""``fpr examples DIR``: the documents' inputs from the built-in world, in the layouts fpr evaluate reads; run
again it keeps identical files and refuses to replace different ones without --overwrite."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from fpr.workflows.examples import GENERATED_METHODS, SECOND_METHODS
from tests.conftest import run_cli


def test_examples_layouts_tables_and_rerun(tmp_path):
    out = tmp_path / "ex"
    first = run_cli(tmp_path / "ws", "examples", str(out)).output
    assert "120 gallery images" in first and "150 generations" in first
    animals = sorted(p.relative_to(out / "data" / "animals") for p in (out / "data" / "animals").rglob("*.png"))
    assert len(animals) == 3 * 5 * 8  # species x identities x (2 references + 6 gallery images)
    assert {len(p.parts) for p in animals} == {3}  # <group>/<identity>/<image>
    gens = sorted(p.relative_to(out / "generations") for p in (out / "generations").rglob("*.png"))
    assert len(gens) == 5 * 3 * 5 * 2 and {len(p.parts) for p in gens} == {4}
    assert {p.parts[0] for p in gens} == set(GENERATED_METHODS + SECOND_METHODS)
    gen = pd.read_csv(out / "generated.csv")
    assert set(gen["method"]) == set(GENERATED_METHODS) and len(gen) == 3 * 15 * 2
    for row in gen.head(5).itertuples():  # the table names the folder's own files, its identity in the path
        assert (out / row.path).is_file() and Path(row.path).parts[1:4] == (row.method, row.group, row.identity)
        assert all((out / r).is_file() for r in row.reference_paths.split(";"))
    assert set(pd.read_csv(out / "textual-inversion.csv")["method"]) == set(SECOND_METHODS)
    up = pd.read_csv(out / "queries.csv")
    assert list(up["path"]) == ["a.png", "b.png"] and up["identity"].nunique() == 2
    assert (out / "a.png").read_bytes() == (out / gen.loc[gen["identity"] == up["identity"][0], "path"].iloc[0]).read_bytes()
    # run again: the same bytes are kept
    run_cli(tmp_path / "ws", "examples", str(out))
    # a changed file is refused in one line, then replaced with --overwrite
    (out / "generated.csv").write_text("changed\n")
    res = run_cli(tmp_path / "ws", "examples", str(out), ok=False)
    assert res.exit_code == 2 and "generated.csv already exist(s) with other content" in res.output
    run_cli(tmp_path / "ws", "examples", str(out), "--overwrite")
    assert pd.read_csv(out / "generated.csv").equals(gen)
    assert not [p for p in out.iterdir() if p.name.startswith(".")]  # no staging folder left behind
