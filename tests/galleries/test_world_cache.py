"""The world cache (fpr.galleries.world.cache): the same bytes as rendering, misses where the code or config
differ, damage and killed stores detected and rendered again, an unusable cache never fails the world."""
from __future__ import annotations

import hashlib
import multiprocessing as mp
import os
import signal
import time
from pathlib import Path

import pytest

import fpr.galleries.world as W
from fpr.galleries.world import cache as wc

CFG = W.WorldConfig(seed=3, identities=2, gallery=2, references=2, queries=1, size=64,
                    methods=("new-scene@0", "new-scene@0.5", "paste"))


def files(root: Path) -> dict[str, str]:
    """Every file under ``root`` (the PNGs and both tables) by relative path: its sha256."""
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def entries() -> list[Path]:
    root = wc.WorldCache.default().root
    return sorted(p for p in root.iterdir() if not p.name.startswith(".")) if root.is_dir() else []


def no_render(monkeypatch) -> None:
    def refuse(self, job):
        raise AssertionError(f"rendered {job.path.name}: the cache should have served it")

    monkeypatch.setattr(W.World, "render_job", refuse)


def test_a_hit_gives_the_rendered_bytes_and_renders_nothing(tmp_path, monkeypatch):
    plain = W.World(CFG).write(tmp_path / "plain")
    cold = W.World(CFG).write(tmp_path / "cold", cache=True)
    assert len(entries()) == 1
    no_render(monkeypatch)
    warm = W.World(CFG).write(tmp_path / "warm", cache=True)
    # every PNG and both tables, byte for byte; the records and query rows too (their folder aside)
    assert files(tmp_path / "plain") == files(tmp_path / "cold") == files(tmp_path / "warm")
    assert len(files(tmp_path / "warm")) == plain.n_images + 2
    for build in (cold, warm):
        assert [r.path.replace(str(build.root), "") for r in build.records] == [
            r.path.replace(str(plain.root), "") for r in plain.records]
        assert [{k: str(v).replace(str(build.root), "") for k, v in q.items()} for q in build.queries] == [
            {k: str(v).replace(str(plain.root), "") for k, v in q.items()} for q in plain.queries]


def test_the_entry_holds_a_manifest_of_sizes_and_sha256(tmp_path):
    W.World(CFG).write(tmp_path / "w", cache=True)
    (entry,) = entries()
    assert entry.name == wc.entry_key(W.asdict(CFG))
    import json

    manifest = json.loads((entry / wc.MANIFEST).read_text())
    rendered = files(tmp_path / "w")
    assert {rel: sha for rel, (size, sha) in manifest["files"].items()} == {
        rel: sha for rel, sha in rendered.items() if rel.endswith(".png")}
    assert all(size == (tmp_path / "w" / rel).stat().st_size for rel, (size, _) in manifest["files"].items())
    assert manifest["material"]["config"]["seed"] == 3 and manifest["material"]["protocol"] == wc.PROTOCOL


@pytest.mark.parametrize("change", ["config", "source", "pillow"])
def test_another_config_code_or_library_is_a_miss(tmp_path, monkeypatch, change):
    W.World(CFG).write(tmp_path / "a", cache=True)
    cfg = CFG
    if change == "config":
        cfg = W.WorldConfig(**{**W.asdict(CFG), "home_background": 0.5})
    elif change == "source":
        monkeypatch.setattr(wc, "source_digest", lambda: "an edited world module")
    else:
        monkeypatch.setattr(wc.PIL, "__version__", "0.0-other")
    assert wc.entry_key(W.asdict(cfg)) != entries()[0].name
    calls = []
    original = W.World.render_job
    monkeypatch.setattr(W.World, "render_job", lambda self, job: calls.append(job) or original(self, job))
    W.World(cfg).write(tmp_path / "b", cache=True)
    assert len(calls) == len(list((tmp_path / "b").rglob("*.png"))) and len(entries()) == 2


def test_the_source_digest_covers_every_world_module_and_the_random_streams():
    package = Path(W.__file__).parent
    assert wc.source_digest() == wc.source_digest.__wrapped__()
    names = {p.name for p in package.glob("*.py")}
    assert {"__init__.py", "patterns.py", "render.py", "methods.py", "cache.py"} <= names


@pytest.mark.parametrize("damage", ["flipped byte", "truncated", "missing file", "no manifest", "bad manifest"])
def test_a_damaged_entry_is_reported_in_one_line_and_rendered_again(tmp_path, capfd, damage):
    W.World(CFG).write(tmp_path / "a", cache=True)
    want = files(tmp_path / "a")
    (entry,) = entries()
    victim = sorted((entry / wc.FILES).rglob("*.png"))[1]
    data = victim.read_bytes()
    victim.unlink()  # a new inode: the folder "a" keeps the good bytes of its hard link
    if damage == "flipped byte":
        victim.write_bytes(data[:-5] + bytes([data[-5] ^ 1]) + data[-4:])
    elif damage == "truncated":
        victim.write_bytes(data[: len(data) // 2])
    elif damage == "no manifest":
        victim.write_bytes(data)
        (entry / wc.MANIFEST).unlink()
    elif damage == "bad manifest":
        victim.write_bytes(data)
        (entry / wc.MANIFEST).write_text("{\"files\": [")
    capfd.readouterr()
    W.World(CFG).write(tmp_path / "b", cache=True)
    err = capfd.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("fpr: warning: damaged world-cache entry") and "rendering" in err[0]
    assert files(tmp_path / "b") == want
    # stored anew, whole: the next world is a hit
    W.World(CFG).write(tmp_path / "c", cache=True)
    assert capfd.readouterr().err == "" and files(tmp_path / "c") == want and len(entries()) == 1


def _store_slowly(root: str) -> None:
    """A store that lingers over each file, so that the test can kill it in the middle."""
    original = wc._place

    def slow(src, dest, linking):
        time.sleep(0.05)
        return original(src, dest, linking)

    wc._place = slow
    W.World(CFG).write(root, cache=True)


def test_a_store_killed_midway_leaves_no_entry_and_the_next_run_stores_one(tmp_path):
    proc = mp.get_context("fork").Process(target=_store_slowly, args=(str(tmp_path / "a"),))
    proc.start()
    root = wc.WorldCache.default().root
    deadline = time.monotonic() + 60
    while not any(p.name.startswith(".tmp-") and (p / wc.FILES).is_dir() for p in
                  (root.iterdir() if root.is_dir() else [])):
        assert time.monotonic() < deadline and proc.is_alive(), "the store never began"
        time.sleep(0.01)
    os.kill(proc.pid, signal.SIGKILL)
    proc.join()
    assert entries() == []  # only the killed store's hidden temporary folder
    (tmp,) = [p for p in root.iterdir() if p.name.startswith(".tmp-")]
    W.World(CFG).write(tmp_path / "b", cache=True)
    assert len(entries()) == 1 and tmp.exists()  # a running store's folder looks the same: kept for a day
    os.utime(tmp, (time.time() - wc.STALE_TMP_S - 60,) * 2)
    W.World(W.WorldConfig(**{**W.asdict(CFG), "seed": 4})).write(tmp_path / "c", cache=True)
    assert not tmp.exists() and len(entries()) == 2
    assert files(tmp_path / "b") == files(W.World(CFG).write(tmp_path / "plain").root)


def test_two_processes_storing_one_world_agree(tmp_path):
    ctx = mp.get_context("fork")
    procs = [ctx.Process(target=W.World(CFG).write, args=(str(tmp_path / f"w{i}"),), kwargs={"cache": True})
             for i in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    assert [p.exitcode for p in procs] == [0, 0] and len(entries()) == 1
    assert files(tmp_path / "w0") == files(tmp_path / "w1") == files(W.World(CFG).write(tmp_path / "w2",
                                                                                       cache=True).root)


def test_an_unwritable_cache_is_one_line_and_the_world_is_rendered(tmp_path, monkeypatch, capfd):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the cache folder should be")
    monkeypatch.setenv("FPR_CACHE_DIR", str(blocker))
    capfd.readouterr()
    W.World(CFG).write(tmp_path / "w", cache=True)
    err = capfd.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "world cache" in err[0] and "cannot be used" in err[0] and "FPR_CACHE_DIR" in err[0]
    assert files(tmp_path / "w") == files(W.World(CFG).write(tmp_path / "plain").root)


def test_fpr_world_cache_0_turns_it_off(tmp_path, monkeypatch):
    monkeypatch.setenv("FPR_WORLD_CACHE", "0")
    assert wc.WorldCache.default() is None
    W.World(CFG).write(tmp_path / "w", cache=True)
    monkeypatch.delenv("FPR_WORLD_CACHE")
    assert entries() == []


def test_a_world_on_another_filesystem_is_copied(tmp_path, monkeypatch):
    W.World(CFG).write(tmp_path / "a", cache=True)

    def no_links(src, dst):
        raise OSError(18, "Invalid cross-device link")

    monkeypatch.setattr(wc.os, "link", no_links)
    W.World(CFG).write(tmp_path / "b", cache=True)
    assert files(tmp_path / "b") == files(tmp_path / "a")
    png = next((tmp_path / "b").rglob("*.png"))
    assert png.stat().st_nlink == 1


def test_a_rerun_into_the_same_folder_leaves_nothing_behind(tmp_path, monkeypatch):
    """Writing a cached world again into its own folder (fpr demo twice in one workspace): its files are
    already links of the cache's; no temporary link may stay beside them (rename of a link onto another link
    of the same file does nothing)."""
    W.World(CFG).write(tmp_path / "w", cache=True)
    want = files(tmp_path / "w")
    no_render(monkeypatch)
    for _ in range(2):
        W.World(CFG).write(tmp_path / "w", cache=True)
    assert files(tmp_path / "w") == want
    assert [p.name for p in (tmp_path / "w").rglob(".*")] == []
