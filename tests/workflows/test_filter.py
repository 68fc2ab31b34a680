"""``fpr filter``: same per-query values as ``fpr query``, rule split with reasons, streaming in chunks,
atomic outputs, and resuming after a kill with the same output as an uninterrupted run."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

import fpr.api as api
from fpr.cli.main import cli
from fpr.encoders.embed import EMBED_STATS
from fpr.errors import InputError
from fpr.galleries.curate import GallerySpec
from fpr.workflows.filter import filter_queries
from tests.conftest import make_tree, write_image

INDEX = "pets-pixels-16"


@pytest.fixture
def setup(tmp_path, workspace):
    """A 2-group x 3-identity gallery (2 references + 4 gallery images each) and 30 generated images."""
    tree = make_tree(tmp_path / "tree", identities=3, images=6)
    api.import_gallery("pets", api.read_folder(tree), GallerySpec(references_per_identity=2), workspace=workspace)
    api.build_index("pets", "pixels-16", workspace=workspace)
    rows = []
    for j in range(30):
        g, i = j % 2, (j // 2) % 3
        group = ("cats", "dogs")[g]
        # half the generations are near-copies of a gallery image of their identity (high AP), half noise
        seed = 1000 * g + 10 * i + (j % 6) if j % 3 else 5000 + j
        p = write_image(tmp_path / "gen" / f"{j:02d}.png", seed=seed)
        rows.append({"path": f"gen/{p.name}", "identity": f"{group}-{i}", "group": group,
                     "method": "m" + str(j % 2), "note": f"row {j}"})
    qfile = tmp_path / "generated.csv"
    pd.DataFrame(rows).to_csv(qfile, index=False)
    return tmp_path, workspace, qfile


def test_values_equal_run_query_and_rule_splits(setup):
    tmp, ws, qfile = setup
    res = filter_queries(INDEX, qfile, "top1 and ap >= 0.5", tmp / "kept.csv", rejected=tmp / "rejected.csv",
                         workspace=ws, chunk_size=7)
    kept = pd.read_csv(tmp / "kept.csv", keep_default_na=False)
    rej = pd.read_csv(tmp / "rejected.csv", keep_default_na=False)
    assert res.n_rows == 30 and res.n_kept == len(kept) and res.n_rejected == len(rej) and res.n_chunks == 5
    assert 0 < len(kept) < 30
    # every input column kept, in order, with the original (relative) values
    assert list(kept.columns[:5]) == ["path", "identity", "group", "method", "note"]
    assert kept["path"].str.startswith("gen/").all()
    assert (kept["reason"] == "").all() and (rej["reason"] != "").all()
    assert ((kept["top1"] == 1) & (kept["ap"] >= 0.5)).all()
    assert all(r.startswith(("top1 (top1=0)", "ap >= 0.5 (ap=")) for r in rej["reason"])
    assert set(res.reasons) <= {"top1", "ap >= 0.5"} and sum(res.reasons.values()) == len(rej)

    run = api.run_query(INDEX, qfile, workspace=ws, run="ref")
    both = pd.concat([kept, rej]).assign(row=lambda d: d["note"].str[4:].astype(int)).sort_values("row")
    pq_ = run.per_query.sort_values("row_number")
    np.testing.assert_allclose(both["ap"].to_numpy(float), pq_["ap"].to_numpy(float), rtol=0, atol=1e-12)
    np.testing.assert_allclose(both["sim"].to_numpy(float), pq_["sim"].to_numpy(float), rtol=0, atol=1e-12)
    assert both["first_hit_rank"].tolist() == pq_["first_hit_rank"].astype(int).tolist()
    assert both["top5"].tolist() == pq_["cmc5"].astype(int).tolist()


def test_scorers_named_in_the_rule_run_and_parquet_outputs(setup):
    tmp, ws, qfile = setup
    res = filter_queries(INDEX, qfile, "ap >= 0 and not copy_paste and copy_paste_pixel < 0.99",
                         tmp / "kept.parquet", rejected=tmp / "rej.parquet", workspace=ws, chunk_size=8)
    assert res.scorers == ["copy-paste"]
    kept = pd.read_parquet(tmp / "kept.parquet")
    assert {"copy-paste.flag", "copy-paste.pixel", "copy-paste.appearance", "status", "reason"} <= set(kept.columns)
    assert len(kept) + len(pd.read_parquet(tmp / "rej.parquet")) == 30
    assert (kept["copy-paste.flag"] == 0).all()
    assert not list(tmp.glob(".kept.parquet.fpr-filter"))  # state folder removed when done


def test_copy_to_builds_an_importable_tree(setup):
    tmp, ws, qfile = setup
    res = filter_queries(INDEX, qfile, "top1", tmp / "kept.csv", copy_to=tmp / "synthetic", workspace=ws,
                         chunk_size=10)
    files = sorted((tmp / "synthetic").rglob("*.png"))
    assert len(files) == res.n_kept > 0
    assert all(f.parent.parent.parent == tmp / "synthetic" for f in files)  # <dir>/<group>/<identity>/<file>
    assert len(api.read_folder(tmp / "synthetic")) == res.n_kept


def test_errors_are_one_line_before_any_embedding(setup):
    tmp, ws, qfile = setup
    before = EMBED_STATS["images_embedded"]
    with pytest.raises(InputError, match="unknown name 'clipt'.*available: ap"):
        filter_queries(INDEX, qfile, "clipt > 0.2", tmp / "k.csv", workspace=ws)
    with pytest.raises(InputError, match="function call"):
        filter_queries(INDEX, qfile, "__import__('os').system('true')", tmp / "k.csv", workspace=ws)
    bad = pd.read_csv(qfile)
    bad.loc[3, "identity"] = "cats-9"
    bad.to_csv(tmp / "bad.csv", index=False)
    with pytest.raises(InputError, match="1 query has no gallery image of its identity: dogs/cats-9"):
        filter_queries(INDEX, tmp / "bad.csv", "top1", tmp / "k.csv", workspace=ws)
    assert EMBED_STATS["images_embedded"] == before
    res = filter_queries(INDEX, tmp / "bad.csv", "ap >= 0", tmp / "k.csv", rejected=tmp / "r.csv", workspace=ws,
                         skip_missing_identities=True)
    rej = pd.read_csv(tmp / "r.csv")
    assert res.n_rejected == 1 and rej["reason"].iloc[0] == "skipped:no-relevant"


def _done_chunks(folder: Path) -> list[int]:
    """Chunks a parts folder records as done (their ``part-NNNNNN.done`` markers)."""
    return sorted(int(p.name[5:11]) for p in folder.glob("part-*.done"))


def test_interrupted_run_resumes_without_redoing_chunks(setup):
    tmp, ws, qfile = setup
    calls: list[int] = []

    def boom(k: int) -> None:
        calls.append(k)
        if k == 1:
            raise KeyboardInterrupt

    kw = dict(rejected=tmp / "rej.csv", workspace=ws, chunk_size=7)
    with pytest.raises(KeyboardInterrupt):
        filter_queries(INDEX, qfile, "top1 and ap >= 0.5", tmp / "kept.csv", after_chunk=boom, **kw)
    assert not (tmp / "kept.csv").exists() and not (tmp / "rej.csv").exists()  # no half outputs
    assert _done_chunks(tmp / ".kept.csv.fpr-filter") == [0, 1]
    before = EMBED_STATS["images_embedded"]
    calls.clear()
    res = filter_queries(INDEX, qfile, "top1 and ap >= 0.5", tmp / "kept.csv", after_chunk=calls.append, **kw)
    assert calls == [2, 3, 4] and res.n_chunks_resumed == 2
    # only the unfinished chunks' images that no earlier step embedded (the near-copies of gallery images
    # were embedded with the index; rows 0-13 with chunks 0 and 1)
    assert EMBED_STATS["images_embedded"] - before == sum(1 for j in range(14, 30) if j % 3 == 0)
    filter_queries(INDEX, qfile, "top1 and ap >= 0.5", tmp / "kept2.csv", rejected=tmp / "rej2.csv",
                   workspace=ws, chunk_size=7)
    assert (tmp / "kept.csv").read_bytes() == (tmp / "kept2.csv").read_bytes()
    assert (tmp / "rej.csv").read_bytes() == (tmp / "rej2.csv").read_bytes()


@pytest.mark.slow
def test_killed_process_resumes_to_the_same_output(setup):
    tmp, ws, qfile = setup
    script = textwrap.dedent(f"""
        import os, signal
        from fpr.workflows.filter import filter_queries
        def kill(k):
            if k == 1:
                os.kill(os.getpid(), signal.SIGKILL)
        filter_queries({INDEX!r}, {str(qfile)!r}, "top5 and ap >= 0.3", {str(tmp / 'kept.parquet')!r},
                       rejected={str(tmp / 'rej.csv')!r}, workspace={str(ws)!r}, chunk_size=6, after_chunk=kill)
    """)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, timeout=120)
    assert proc.returncode == -9, proc.stderr.decode()[-2000:]
    assert not (tmp / "kept.parquet").exists()
    assert _done_chunks(tmp / ".kept.parquet.fpr-filter") == [0, 1]

    runner = CliRunner()
    args = ["--workspace", str(ws), "filter", "--index", INDEX, "--queries", str(qfile), "--keep",
            "top5 and ap >= 0.3", "--chunk-size", "6", "--format", "json"]
    r = runner.invoke(cli, args + ["--out", str(tmp / "kept.parquet"), "--rejected", str(tmp / "rej.csv")])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output[r.output.index("{"):])["resumed_chunks"] == 2
    r = runner.invoke(cli, args + ["--out", str(tmp / "full.parquet"), "--rejected", str(tmp / "full.csv")])
    assert r.exit_code == 0, r.output
    pd.testing.assert_frame_equal(pd.read_parquet(tmp / "kept.parquet"), pd.read_parquet(tmp / "full.parquet"))
    assert (tmp / "rej.csv").read_bytes() == (tmp / "full.csv").read_bytes()


def test_changed_command_starts_over(setup):
    tmp, ws, qfile = setup

    def stop(k: int) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        filter_queries(INDEX, qfile, "top1", tmp / "kept.csv", workspace=ws, chunk_size=10, after_chunk=stop)
    res = filter_queries(INDEX, qfile, "top5", tmp / "kept.csv", workspace=ws, chunk_size=10)
    assert res.n_chunks_resumed == 0
    assert (pd.read_csv(tmp / "kept.csv")["top5"] == 1).all()


def test_cli_filter_and_list_names(setup):
    tmp, ws, qfile = setup
    runner = CliRunner()
    r = runner.invoke(cli, ["filter", "--list-names", "--format", "csv"])
    assert r.exit_code == 0 and "clip_t,clip-t.score" in r.output and "copy_paste,copy-paste.flag" in r.output
    r = runner.invoke(cli, ["--workspace", str(ws), "filter", "--index", INDEX, "--queries", str(qfile),
                            "--keep", "top1", "--out", str(tmp / "k.csv")])
    assert r.exit_code == 0, r.output
    assert "kept" in r.output and "top1" in r.output
    r = runner.invoke(cli, ["--workspace", str(ws), "filter", "--index", INDEX, "--queries", str(qfile),
                            "--keep", "ap.__class__", "--out", str(tmp / "k.csv")])
    assert r.exit_code == 2 and r.output.count("\n") == 1 and "attribute access" in r.output
    r = runner.invoke(cli, ["--workspace", str(ws), "filter", "--index", INDEX, "--queries", str(qfile)])
    assert r.exit_code == 2 and "missing option(s) --keep, --out" in r.output


def test_killed_during_final_cleanup_resumes(setup, monkeypatch):
    """#26: a run killed while removing its state folder (after the outputs were written) resumes without
    --restart, to the same outputs; a 0-byte temporary output left by a kill is removed by the next run."""
    import shutil as real_shutil


    tmp, ws, qfile = setup
    kw = dict(rejected=tmp / "rej.csv", workspace=ws, chunk_size=7)
    real_rmtree = real_shutil.rmtree

    def killed_rmtree(path, *a, **k):
        parts = sorted(Path(path).glob("*.kept.csv"))
        if not parts:
            return real_rmtree(path, *a, **k)
        parts[0].unlink()  # the kill lands after the first file is gone, state.json still there
        raise KeyboardInterrupt

    monkeypatch.setattr(real_shutil, "rmtree", killed_rmtree)
    with pytest.raises(KeyboardInterrupt):
        filter_queries(INDEX, qfile, "top1 and ap >= 0.5", tmp / "kept.csv", **kw)
    monkeypatch.setattr(real_shutil, "rmtree", real_rmtree)
    (tmp / ".tmp-kept.csv.k1ll3d00").write_bytes(b"")  # what a kill inside the output's atomic write leaves
    filter_queries(INDEX, qfile, "top1 and ap >= 0.5", tmp / "kept.csv", **kw)
    filter_queries(INDEX, qfile, "top1 and ap >= 0.5", tmp / "kept2.csv", rejected=tmp / "rej2.csv",
                   workspace=ws, chunk_size=7)
    assert (tmp / "kept.csv").read_bytes() == (tmp / "kept2.csv").read_bytes()
    assert (tmp / "rej.csv").read_bytes() == (tmp / "rej2.csv").read_bytes()
    assert sorted(p.name for p in tmp.glob(".*kept*")) == []  # no state, no trash, no temporary files
