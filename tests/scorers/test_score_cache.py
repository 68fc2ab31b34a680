"""The score cache (fpr.scorers.cache): a hit returns the computed values bit for bit and scores nothing; an
option, image, reference or code version changed is a miss for exactly the queries it touches; a killed
writer leaves it readable; damage and an unwritable folder are one line each, never a failure."""
from __future__ import annotations

import multiprocessing as mp
import os
import signal
import sqlite3
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fpr.scorers import QueryBatch, Scorer, run_scorers
from fpr.scorers import cache as sc
from fpr.scorers.options import Option
from tests.conftest import write_image


class Toy(Scorer):
    """Per query: the mean byte of its image over the mean byte of its references (a value no batch-mate
    changes), that times the option ``scale``, a NaN with its reason and 0.1 + 0.2 (not 0.3: bits matter)."""

    name = "toy-cached"
    needs = frozenset({"image", "references"})
    metrics = ("ratio", "scaled", "missing", "sum")
    options = (Option("scale", float, 2.0, "a factor"),)
    deterministic = True

    def __init__(self):
        self.scored: list[list[str]] = []

    def score(self, batch: QueryBatch) -> pd.DataFrame:
        self.scored.append(list(batch.query_ids))
        scale = self.option_values(batch.options)["scale"]
        rows = []
        for qid, path, refs in zip(batch.query_ids, batch.paths, batch.reference_paths):
            ratio = np.frombuffer(Path(path).read_bytes(), np.uint8).mean() / np.mean(
                [np.frombuffer(Path(r).read_bytes(), np.uint8).mean() for r in refs])
            rows += [(qid, "ratio", ratio, None), (qid, "scaled", ratio * scale, f"x{scale:g}"),
                     (qid, "missing", float("nan"), "no such signal"), (qid, "sum", 0.1 + 0.2, None)]
        return pd.DataFrame(rows, columns=["query_id", "metric", "value", "note"])


def batch_of(tmp_path: Path, n: int = 4, options: dict | None = None) -> QueryBatch:
    refs = [str(write_image(tmp_path / f"ref{k}.png", 100 + k)) for k in range(2)]
    paths = [str(p) if (p := tmp_path / f"q{i}.png").exists() else str(write_image(p, i)) for i in range(n)]
    return QueryBatch([f"q{i}" for i in range(n)], paths, ["a"] * n, ["g"] * n, [None] * n, [refs] * n,
                      options=options or {})


def bits(df: pd.DataFrame) -> list[tuple]:
    """Every row with its value as float64 bits (NaN equals NaN, 0.30000000000000004 is not 0.3)."""
    return [(q, m, np.float64(v).tobytes(), n) for q, m, v, n in df[["query_id", "metric", "value", "note"]]
            .itertuples(index=False)]


def test_a_hit_returns_the_values_bit_for_bit_and_scores_nothing(tmp_path):
    toy, batch = Toy(), batch_of(tmp_path)
    first = sc.score_with_cache(toy, batch)
    second = sc.score_with_cache(toy, batch)
    assert toy.scored == [["q0", "q1", "q2", "q3"]]
    assert bits(second) == bits(first) == bits(toy.score(batch))
    assert second.loc[second["metric"] == "sum", "value"].iloc[0] == 0.1 + 0.2 != 0.3


def test_only_the_queries_a_change_touches_are_scored_again(tmp_path):
    toy, batch = Toy(), batch_of(tmp_path)
    sc.score_with_cache(toy, batch)
    write_image(tmp_path / "q2.png", 999)  # a new image under the same name
    again = sc.score_with_cache(toy, batch)
    assert toy.scored[1:] == [["q2"]]
    assert bits(again) == bits(toy.score(batch))  # order and values as if scored whole
    calls = len(toy.scored)
    renamed = QueryBatch(["r0", "r1"], batch.paths[:2], ["a"] * 2, ["g"] * 2, [None] * 2, batch.reference_paths[:2])
    out = sc.score_with_cache(toy, renamed)  # the same queries under other ids: hits
    assert len(toy.scored) == calls and list(out["query_id"].unique()) == ["r0", "r1"]


def test_paths_and_undeclared_columns_are_not_in_the_key_declared_fields_are(tmp_path, monkeypatch):
    """The same images copied to another folder (another workspace) hit, whatever the queries table's other
    columns say (a path, say); a column the scorer declares in query_fields is part of the key."""
    import shutil

    toy, batch = Toy(), batch_of(tmp_path / "a")
    batch.extras = [{"source_reference": str(tmp_path / "a" / "ref0.png"), "level": 1}] * len(batch)
    sc.score_with_cache(toy, batch)
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    moved = batch_of(tmp_path / "b")
    moved.extras = [{"source_reference": str(tmp_path / "b" / "ref0.png"), "level": 1}] * len(moved)
    moved.identities = ["renamed"] * len(moved)
    assert bits(sc.score_with_cache(toy, moved)) == bits(toy.score(moved)) and len(toy.scored) == 2
    monkeypatch.setattr(Toy, "query_fields", ("level", "identity"))
    sc.score_with_cache(toy, moved)  # a new key: the declared fields join it
    assert len(toy.scored) == 3
    moved.extras = [{"level": 2}] * len(moved)
    sc.score_with_cache(toy, moved)
    assert len(toy.scored) == 4 and toy.scored[-1] == ["q0", "q1", "q2", "q3"]


@pytest.mark.parametrize("change", ["option", "reference", "reference order", "version", "prompt", "model"])
def test_a_changed_option_reference_or_version_misses(tmp_path, monkeypatch, change):
    toy, batch = Toy(), batch_of(tmp_path)
    sc.score_with_cache(toy, batch)
    if change == "option":
        batch = batch_of(tmp_path, options={"toy-cached.scale": 3.0})
    elif change == "reference":
        write_image(tmp_path / "ref1.png", 555)
    elif change == "reference order":
        batch.reference_paths = [refs[::-1] for refs in batch.reference_paths]
    elif change == "version":
        monkeypatch.setattr(Toy, "version_modules", ("fpr.scorers.cache",))
    elif change == "model":  # what the scorer declares beyond its code and files (a model's embedding key)
        monkeypatch.setattr(Toy, "cache_inputs", lambda self, batch: {"appearance": "another model"})
    else:
        batch.prompts = ["a photo"] * len(batch)
    out = sc.score_with_cache(toy, batch)
    assert toy.scored[1:] == [["q0", "q1", "q2", "q3"]] and bits(out) == bits(toy.score(batch))


def test_an_edit_of_the_scorer_module_is_a_new_version(tmp_path, monkeypatch):
    mod = tmp_path / "edited_scorer.py"
    mod.write_text("X = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(Toy, "version_modules", ("edited_scorer",))
    before = sc.scorer_version(Toy())
    sc._module_digest.cache_clear()
    mod.write_text("X = 2\n")
    assert sc.scorer_version(Toy()) != before
    sc._module_digest.cache_clear()


def test_undeclared_gallery_reading_or_switched_off_is_not_cached(tmp_path, monkeypatch):
    batch = batch_of(tmp_path, n=2)
    plain = Toy()
    plain.deterministic = False
    gallery = Toy()
    gallery.uses_gallery = lambda options: True
    for scorer in (plain, gallery):
        sc.score_with_cache(scorer, batch)
        sc.score_with_cache(scorer, batch)
        assert len(scorer.scored) == 2
    monkeypatch.setenv("FPR_SCORE_CACHE", "0")
    off = Toy()
    sc.score_with_cache(off, batch)
    sc.score_with_cache(off, batch)
    assert len(off.scored) == 2 and not sc.ScoreCache.default().path.exists()


def test_run_scorers_gives_the_same_table_from_the_cache(tmp_path, monkeypatch):
    from fpr import scorers as S

    toy = Toy()
    monkeypatch.setitem(S._SCORERS, toy.name, toy)
    batch = batch_of(tmp_path)
    first = run_scorers([toy.name], batch)
    second = run_scorers([toy.name], batch)
    pd.testing.assert_frame_equal(first, second)
    assert len(toy.scored) == 1


def _write_forever(path: str) -> None:
    cache = sc.ScoreCache(Path(path))
    k = 0
    while True:
        cache.put_many({f"key-{k}-{j}": [["m", float(k), "note"] for _ in range(20)] for j in range(200)})
        k += 1


def test_a_writer_killed_mid_write_leaves_the_cache_readable(tmp_path):
    path = tmp_path / "results.sqlite"
    proc = mp.get_context("fork").Process(target=_write_forever, args=(str(path),))
    proc.start()
    deadline = time.monotonic() + 60
    while not (path.exists() and sc.ScoreCache(path).get_many(["key-3-0"])):
        assert time.monotonic() < deadline and proc.is_alive()
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.join()
    cache = sc.ScoreCache(path)
    got = cache.get_many([f"key-{k}-{j}" for k in range(200) for j in range(200)])
    done = {int(key.split("-")[1]) for key in got}
    # whole transactions only: every batch present has all its 200 keys, each with its 20 rows
    assert done >= {0, 1, 2, 3} and len(got) == 200 * len(done)
    assert all(rows == [["m", float(key.split("-")[1]), "note"]] * 20 for key, rows in got.items())
    cache.put_many({"after": [["m", 1.0, None]]})
    assert cache.get_many(["after"]) == {"after": [["m", 1.0, None]]}


def test_a_damaged_database_is_set_aside_in_one_line(tmp_path, capfd):
    toy, batch = Toy(), batch_of(tmp_path, n=2)
    path = sc.ScoreCache.default().path
    path.parent.mkdir(parents=True)
    path.write_bytes(b"not a database" * 100)
    capfd.readouterr()
    out = sc.score_with_cache(toy, batch)
    err = capfd.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "damaged score-cache database" in err[0] and bits(out) == bits(toy.score(batch))
    assert path.with_name(path.name + ".damaged").exists()
    sc.score_with_cache(toy, batch)
    assert len(toy.scored) == 2  # stored in the fresh database: the third call is a hit


def test_a_damaged_row_is_scored_again(tmp_path, capfd):
    toy, batch = Toy(), batch_of(tmp_path, n=2)
    sc.score_with_cache(toy, batch)
    con = sqlite3.connect(sc.ScoreCache.default().path)
    con.execute("UPDATE results SET rows = '[[' WHERE key = (SELECT min(key) FROM results)")
    con.commit()
    con.close()
    capfd.readouterr()
    out = sc.score_with_cache(toy, batch)
    err = capfd.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "damaged score-cache entry" in err[0]
    assert len(toy.scored[-1]) == 1 and bits(out) == bits(toy.score(batch))


def test_an_unwritable_cache_is_one_line_and_the_values_are_computed(tmp_path, monkeypatch, capfd):
    blocker = tmp_path / "file"
    blocker.write_text("in the way")
    monkeypatch.setenv("FPR_CACHE_DIR", str(blocker))
    toy, batch = Toy(), batch_of(tmp_path, n=2)
    capfd.readouterr()
    out = sc.score_with_cache(toy, batch)
    err = capfd.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "score cache" in err[0] and "FPR_CACHE_DIR" in err[0]
    assert bits(out) == bits(toy.score(batch))


def test_copy_paste_gives_its_values_from_the_cache_and_per_query(tmp_path, monkeypatch):
    """Copy-paste declares itself deterministic: its cached values, and those of a batch scored in two
    parts, equal its values on the whole batch: no value depends on a batch-mate."""
    from fpr.galleries.world import World, WorldConfig
    from fpr.scorers import get_scorer

    build = World(WorldConfig(seed=5, identities=2, gallery=1, references=2, queries=1, size=64,
                              methods=("new-scene@0", "paste", "paste-mirror"))).write(tmp_path / "w")
    q = pd.DataFrame(build.queries)
    batch = QueryBatch(list(q["query_id"]), list(q["path"]), list(q["identity"]), list(q["group"]),
                       [None] * len(q), [r.split(";") for r in q["reference_paths"]], device="cpu")
    cp = get_scorer("copy-paste")
    whole = cp.score(batch)
    assert cp.deterministic
    half = sc.subset(batch, list(range(0, len(batch), 2)))
    sc.score_with_cache(cp, half)  # half of the queries cached, from a batch of their own
    mixed = sc.score_with_cache(cp, batch)  # the other half scored now, the first half from the cache
    cached = sc.score_with_cache(cp, batch)
    assert bits(mixed) == bits(cached) == bits(whole)


def test_copy_paste_version_covers_its_kernels_and_its_warning_survives_a_full_hit(tmp_path, monkeypatch, capfd):
    """An edit of any module that computes copy-paste's values is a new version; the warning about queries
    checked only against their identity's references is printed by check(), so a rerun served wholly from the
    cache still prints it."""
    from fpr.galleries.world import World, WorldConfig
    from fpr.scorers import get_scorer, run_scorers

    cp = get_scorer("copy-paste")
    import fpr.scorers

    family = Path(fpr.scorers.__file__).parent / "copy_paste"
    own = {f"fpr.scorers.copy_paste.{p.stem}" for p in family.glob("*.py") if p.stem != "__init__"}
    assert len(own) >= 6 and set(cp.version_modules) == own  # a new module of the family must join the version
    before = sc.scorer_version(cp)
    real = sc._module_digest.__wrapped__
    sc._module_digest.cache_clear()
    monkeypatch.setattr(sc, "_module_digest", lambda m: real(m) + ("edited" if m.endswith("kernels") else ""))
    assert sc.scorer_version(cp) != before
    monkeypatch.undo()
    monkeypatch.setenv("FPR_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("FPR_QUIET", raising=False)

    build = World(WorldConfig(seed=5, identities=2, gallery=1, references=2, queries=1, size=64,
                              methods=("paste",))).write(tmp_path / "w")
    q = pd.DataFrame(build.queries)
    batch = QueryBatch(list(q["query_id"]), list(q["path"]), list(q["identity"]), list(q["group"]),
                       [None] * len(q), [r.split(";") for r in q["reference_paths"]], device="cpu",
                       explicit_references=[False] * len(q))
    first = run_scorers(["copy-paste"], batch)
    capfd.readouterr()
    monkeypatch.setattr(type(cp), "score", lambda self, b: pytest.fail("a full hit must not score"))
    again = run_scorers(["copy-paste"], batch)
    assert bits(again) == bits(first)
    assert "only with their identity's reference images" in capfd.readouterr().err
