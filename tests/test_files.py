"""fpr/files.py: atomic writes that respect the umask and fail in one line on unwritable places.

The tests run as root on CI machines, where chmod does not stop a write: an unwritable
place is made real with a path that runs through a regular file (ENOTDIR for anyone), and
permission errors are injected where root cannot be stopped.
"""
from __future__ import annotations

import os
import stat

import numpy as np
import pandas as pd
import pytest

from fpr import files as F
from fpr.errors import InputError


@pytest.fixture
def umask():
    old = os.umask(0o022)
    yield lambda m: os.umask(m)
    os.umask(old)


def mode(p) -> int:
    return stat.S_IMODE(os.stat(p).st_mode)


@pytest.mark.parametrize("mask, fmode, dmode", [(0o022, 0o644, 0o755), (0o027, 0o640, 0o750), (0o077, 0o600, 0o700)])
def test_files_and_folders_respect_the_umask(tmp_path, umask, mask, fmode, dmode):
    umask(mask)
    assert F.current_umask() == mask
    assert mode(F.atomic_write_bytes(tmp_path / "a.bin", b"x")) == fmode
    assert mode(F.atomic_write_text(tmp_path / "b.txt", "y")) == fmode
    assert mode(F.atomic_write(tmp_path / "c.npy", lambda fp: np.save(fp, np.arange(3)))) == fmode
    assert np.load(tmp_path / "c.npy").tolist() == [0, 1, 2]
    from fpr.tables import write_table

    assert mode(write_table(pd.DataFrame({"a": [1]}), tmp_path / "t.parquet")) == fmode
    assert mode(write_table(pd.DataFrame({"a": [1]}), tmp_path / "t.csv")) == fmode
    d = F.atomic_write_dir(tmp_path / "dir", lambda tmp: (tmp / "f").write_bytes(b"z"))
    assert (mode(d), mode(d / "f")) == (dmode, fmode)
    assert mode(F.new_temp_dir(tmp_path / "other")) == dmode


@pytest.mark.parametrize("mask, fmode, dmode", [(0o022, 0o644, 0o755), (0o027, 0o640, 0o750)])
def test_cache_shards_and_index_folders_respect_the_umask(tmp_path, umask, mask, fmode, dmode):
    umask(mask)
    from fpr.encoders.cache import EmbeddingCache
    from fpr.index import faiss_index as FI

    cache = EmbeddingCache("k", 2, root=tmp_path / "c", meta={"a": 1})
    cache.add(["h"], np.ones((1, 2), np.float32))
    assert {mode(p) for p in cache.dir.iterdir()} == {fmode}
    card = FI.IndexCard(name="ix", gallery="g", gallery_fingerprint="f", encoder="e", weights_checksum="w",
                        preprocessing="{}", dim=2, n_items=0, n_references=0)
    gi = FI.build(np.eye(2, dtype=np.float32), np.arange(2), np.zeros((0, 2), np.float32), np.zeros(0, np.int64), card)
    FI.save(gi, tmp_path / "ix")
    assert mode(tmp_path / "ix") == dmode
    assert {mode(p) for p in (tmp_path / "ix").iterdir()} == {fmode}


def test_replace_is_atomic_and_a_failed_write_keeps_the_old_file(tmp_path):
    target = F.atomic_write_bytes(tmp_path / "f", b"old")

    def half(tmp):
        tmp.write_bytes(b"half")
        raise OSError(28, "No space left on device")

    with pytest.raises(InputError) as err:
        F.atomic_write_path(target, half)
    msg = err.value.one_line()
    assert "No space left on device" in msg and str(tmp_path) in msg and "\n" not in msg
    assert target.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f"]


def test_a_bug_in_the_writer_is_not_disguised(tmp_path):
    def bug(tmp):
        raise ZeroDivisionError

    with pytest.raises(ZeroDivisionError):
        F.atomic_write_path(tmp_path / "f", bug)
    assert list(tmp_path.iterdir()) == []


def test_a_folder_under_a_regular_file_is_one_line(tmp_path):
    (tmp_path / "plain").write_text("I am a file")
    for call in (lambda: F.atomic_write_bytes(tmp_path / "plain" / "sub" / "x", b"1"),
                 lambda: F.atomic_write_dir(tmp_path / "plain" / "d", lambda t: None),
                 lambda: F.ensure_dir(tmp_path / "plain" / "d", hint="set FPR_CACHE_DIR to a writable folder")):
        with pytest.raises(InputError) as err:
            call()
        msg = err.value.one_line()
        assert str(tmp_path / "plain") in msg and "a file is in the way" in msg and "\n" not in msg
    assert "FPR_CACHE_DIR" in err.value.one_line()


def test_permission_denied_is_one_line_naming_the_folder(tmp_path, monkeypatch):
    def denied(*a, **k):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(F.tempfile, "mkstemp", denied)
    with pytest.raises(InputError) as err:
        F.atomic_write_bytes(tmp_path / "x", b"1", hint="choose another --out")
    assert err.value.one_line() == f"cannot write to folder (Permission denied) ({tmp_path}); choose another --out"


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores folder permissions")
def test_read_only_folder_for_a_regular_user(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        with pytest.raises(InputError, match="Permission denied"):
            F.atomic_write_bytes(ro / "x", b"1")
    finally:
        ro.chmod(0o755)


def test_unwritable_cache_folder_is_one_warning_naming_fpr_cache_dir(tmp_path, monkeypatch, capfd):
    """fpr.cache's one policy (issue #36): an embedding cache that cannot be written warns once and the run
    goes on without it (it used to fail the run, while the score and world caches warned)."""
    from fpr.encoders.cache import EmbeddingCache

    (tmp_path / "file").write_text("x")
    monkeypatch.setenv("FPR_CACHE_DIR", str(tmp_path / "file" / "cache"))
    cache = EmbeddingCache("k", 2)
    assert len(cache) == 0  # reading an absent cache is fine
    capfd.readouterr()
    cache.add(["h"], np.ones((1, 2), np.float32))
    cache.add(["h2"], np.ones((1, 2), np.float32))  # bypassed: no second warning
    err = capfd.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "embedding cache" in err[0] and "FPR_CACHE_DIR" in err[0]
    assert str(tmp_path / "file") in err[0] and "embedding without it" in err[0]
    assert cache.get_many(["h"]) == {}


def test_unwritable_export_destination(tmp_path):
    from fpr.tables import write_table

    (tmp_path / "file").write_text("x")
    with pytest.raises(InputError) as err:
        write_table(pd.DataFrame({"a": [1]}), tmp_path / "file" / "out.csv")
    assert "a file is in the way" in err.value.one_line() and "writable folder" in err.value.one_line()
