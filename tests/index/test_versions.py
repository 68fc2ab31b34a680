"""Index replacement is atomic for readers and writers; nothing is lost silently; stale folders go."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from fpr import api
from fpr.cli.main import cli
from fpr.errors import ConflictError
from fpr.index import faiss_index, versions
from fpr.store import records as db
from fpr.store.workspace import Workspace


@pytest.fixture
def gallery(workspace, tiny_tree):
    api.import_gallery("g", api.read_folder(tiny_tree), api.GallerySpec(references_per_identity=1),
                       workspace=workspace)
    return workspace


def _queries(tiny_tree) -> pd.DataFrame:
    return pd.DataFrame([{"path": str(p), "identity": p.parent.name, "group": p.parent.parent.name, "method": "m"}
                         for p in sorted(tiny_tree.glob("*/*/0.png"))])


def test_build_writes_a_version_folder_behind_a_relative_pointer(gallery):
    info = api.build_index("g", "pixels-16", workspace=gallery)
    row = db.get_index(Workspace.open(gallery), "g-pixels-16")
    assert row.version == info.version and row.path == f"indices/g-pixels-16/{info.version}"
    assert sorted(p.name for p in (gallery / "indices" / "g-pixels-16").iterdir()) == [info.version]


def test_rebuild_moves_the_pointer_and_old_versions_are_collected(gallery, monkeypatch):
    a = api.build_index("g", "pixels-16", workspace=gallery)
    b = api.build_index("g", "pixels-16", workspace=gallery, overwrite=True)
    root = gallery / "indices" / "g-pixels-16"
    assert a.version != b.version
    # the old version stays for the grace period (a reader may be loading it) ...
    assert sorted(p.name for p in root.iterdir()) == sorted([a.version, b.version])
    monkeypatch.setattr(versions, "GRACE_S", 0.0)
    c = api.build_index("g", "pixels-16", workspace=gallery, overwrite=True)
    # ... and is removed by a later build once it is past it
    assert sorted(p.name for p in root.iterdir()) == [c.version]


def test_a_build_that_loses_a_race_is_refused_not_lost(gallery, monkeypatch):
    """Another process commits the same new name while this build runs: this one fails in one line."""
    real_save = faiss_index.save
    state = {"raced": False}

    def save_then_race(gi, folder):
        real_save(gi, folder)
        if not state["raced"]:
            state["raced"] = True
            api.build_index("g", "pixels-16", workspace=gallery)  # the "other process" finishes first
    monkeypatch.setattr(faiss_index, "save", save_then_race)
    with pytest.raises(ConflictError, match="created by another process while this build ran"):
        api.build_index("g", "pixels-16", workspace=gallery)
    row = db.get_index(Workspace.open(gallery), "g-pixels-16")
    # the winner is intact and loads; the loser's folder is gone
    assert [p.name for p in (gallery / "indices" / "g-pixels-16").iterdir()] == [row.version]
    api.load_index("g-pixels-16", workspace=gallery)


@pytest.mark.slow
def test_two_concurrent_cli_builds_of_one_name(gallery):
    cmd = [sys.executable, "-m", "fpr", "--workspace", str(gallery), "-q", "index", "build", "--gallery", "g",
           "--encoder", "pixels-16"]
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=300) + (p.returncode,) for p in procs]
    codes = sorted(o[2] for o in outs)
    assert codes == [0, 2], outs
    loser = [o for o in outs if o[2] == 2][0]
    assert loser[1].startswith("fpr: error: index 'g-pixels-16'") and loser[1].count("\n") == 1
    assert "pass --overwrite" in loser[1]
    api.load_index("g-pixels-16", workspace=gallery)


READER = """
import sys
from fpr import api
ok = bad = 0
for _ in range(int(sys.argv[2])):
    try:
        gi, _ = api.load_index("g-pixels-16", workspace=sys.argv[1])
        assert gi.ntotal == 18
        ok += 1
    except Exception as exc:
        bad += 1
        print(type(exc).__name__, exc, file=sys.stderr)
print(ok, bad)
"""


@pytest.mark.slow
def test_readers_never_fail_while_the_index_is_replaced(gallery):
    api.build_index("g", "pixels-16", workspace=gallery)
    reader = subprocess.Popen([sys.executable, "-c", READER, str(gallery), "40"], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    for _ in range(3):
        api.build_index("g", "pixels-16", workspace=gallery, overwrite=True)
    out, err = reader.communicate(timeout=300)
    ok, bad = map(int, out.split())
    assert (ok, bad) == (40, 0), err


def test_a_crash_between_writing_and_the_pointer_leaves_the_old_index(gallery, tiny_tree, monkeypatch):
    old = api.build_index("g", "pixels-16", workspace=gallery)
    before = api.run_query("g-pixels-16", _queries(tiny_tree), run="before", workspace=gallery)

    def crash(*a, **k):
        raise KeyboardInterrupt  # the process dies after the new folder is written, before the pointer moves
    monkeypatch.setattr(db, "commit_index", crash)
    with pytest.raises(KeyboardInterrupt):
        api.build_index("g", "pixels-16", workspace=gallery, overwrite=True)
    monkeypatch.undo()
    assert db.get_index(Workspace.open(gallery), "g-pixels-16").version == old.version
    after = api.run_query("g-pixels-16", _queries(tiny_tree), run="after", workspace=gallery)
    np.testing.assert_array_equal(after.per_query["ap"], before.per_query["ap"])


def test_orphans_and_stale_temp_folders_are_cleaned(gallery, monkeypatch):
    info = api.build_index("g", "pixels-16", workspace=gallery)
    root = gallery / "indices" / "g-pixels-16"
    orphan, tmp = root / "v20000101T000000-deadbeef", root / ".tmp-v-crashed"
    for d in (orphan, tmp):
        d.mkdir()
        (d / "index.faiss").write_bytes(b"half")
        os.utime(d, (time.time() - 3600, time.time() - 3600))
    fresh = root / "v29990101T000000-cafebabe"  # another build in progress: too young to collect
    fresh.mkdir()
    info2 = api.build_index("g", "pixels-16", workspace=gallery, overwrite=True)
    assert not orphan.exists() and not tmp.exists() and fresh.exists()
    assert (root / info2.version).exists() and (root / info.version).exists()


def test_changed_gallery_file_is_named(gallery, tiny_tree):
    victim = sorted(tiny_tree.glob("cats/cats-1/*.png"))[-1]
    arr = np.asarray(__import__("PIL.Image", fromlist=["x"]).open(victim)).copy()
    arr[0, 0] = 255 - arr[0, 0]
    __import__("PIL.Image", fromlist=["x"]).fromarray(arr).save(victim)
    res = CliRunner().invoke(cli, ["--workspace", str(gallery), "index", "build", "--gallery", "g",
                                   "--encoder", "pixels-16"])
    assert res.exit_code == 2
    assert "1 gallery image(s) changed on disk" in res.stderr and str(victim) in res.stderr
    assert db.find_index(Workspace.open(gallery), "g-pixels-16") is None


def test_stale_run_is_refused_by_report_and_score(gallery, tiny_tree):
    api.build_index("g", "pixels-16", workspace=gallery)
    api.run_query("g-pixels-16", _queries(tiny_tree), run="r", workspace=gallery)
    assert api.report("r", workspace=gallery).run_id == "r"
    api.build_index("g", "pixels-16", workspace=gallery, overwrite=True)
    for args in (["report", "--run", "r"], ["score", "--run", "r", "--scorers", "copy-paste"]):
        res = CliRunner().invoke(cli, ["--workspace", str(gallery), *args])
        assert res.exit_code == 2 and "has been rebuilt since" in res.stderr and "--allow-stale" in res.stderr
    res = CliRunner().invoke(cli, ["--workspace", str(gallery), "report", "--run", "r", "--allow-stale"])
    assert res.exit_code == 0 and "run r" in res.stdout
    # exports of stored results keep working
    assert api.export_run("r", Path(gallery) / "r.csv", workspace=gallery).exists()


def test_delete_index_refuses_while_runs_use_it(gallery, tiny_tree):
    api.build_index("g", "pixels-16", workspace=gallery)
    api.run_query("g-pixels-16", _queries(tiny_tree), run="r", workspace=gallery)
    res = CliRunner().invoke(cli, ["--workspace", str(gallery), "index", "delete", "g-pixels-16"])
    assert res.exit_code == 2 and "used by 1 run(s): r" in res.stderr
    res = CliRunner().invoke(cli, ["--workspace", str(gallery), "runs", "delete", "r"])
    assert res.exit_code == 0
    res = CliRunner().invoke(cli, ["--workspace", str(gallery), "index", "delete", "g-pixels-16"])
    assert res.exit_code == 0 and not (gallery / "indices" / "g-pixels-16").exists()
    assert api.list_runs(workspace=gallery) == [] and api.list_indices(workspace=gallery) == []
