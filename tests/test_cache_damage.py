"""Issue #35 item 1 (its item-6 cases): every cache damaged in place, every way the issue's cases did, gives
values equal to an uncached run with exactly one warning; a subclass whose code changed never hits the rows
of its old code; rows of the format before the checksums are quiet misses.

Each case fails on the code before issue #35 (f0e3f4c^): the reason is in each test's docstring."""
from __future__ import annotations

import importlib
import json
import sqlite3
import sys

import numpy as np
import pytest

from fpr import progress
from fpr.encoders import embed as E
from fpr.encoders.cache import EmbeddingCache
from fpr.galleries import world as W
from fpr.galleries.world import cache as wc
from fpr.scorers import cache as sc
from fpr.scorers.judges.cache import JudgeCache
from tests.encoders.test_embed_cache import images, tiny_encoder  # noqa: F401 (fixtures)
from tests.galleries.test_world_cache import CFG, entries, files
from tests.scorers.test_score_cache import Toy, batch_of, bits


@pytest.fixture
def warnings_on():
    progress.set_enabled(True)
    yield
    progress.set_enabled(False)


def warned(capfd) -> list[str]:
    return [line for line in capfd.readouterr().err.splitlines() if "warning" in line]


# ---------------------------------------------------------------------------------------------- score cache

def _flip_digit(text: str) -> str:
    """The stored JSON with one digit of its first number changed: still valid rows, another value."""
    i = next(i for i, ch in enumerate(text) if ch.isdigit())
    return text[:i] + str((int(text[i]) + 1) % 10) + text[i + 1:]


SCORE_DAMAGE = {
    "a JSON number": lambda text: "5",
    "an object": lambda text: json.dumps({"ratio": 1.0}),
    "a row of the wrong length": lambda text: json.dumps([r[:2] for r in json.loads(text)]),
    "a row missing": lambda text: json.dumps(json.loads(text)[:-1]),
    "flipped bytes": _flip_digit,
}


@pytest.mark.parametrize("damage", sorted(SCORE_DAMAGE))
def test_a_score_row_damaged_in_place_is_one_warning_and_scored_again(tmp_path, capfd, damage):
    """Before #35: a JSON number raised TypeError mid-run, an object was iterated as rows (its keys as
    metrics), a short row or a row missing was served as values, a flipped digit was served as the value:
    the values differed from an uncached run, with no warning."""
    toy, batch = Toy(), batch_of(tmp_path, n=3)
    uncached = toy.score(batch)
    sc.score_with_cache(toy, batch)
    con = sqlite3.connect(sc.ScoreCache.default().path)
    key, text = con.execute("SELECT key, rows FROM results ORDER BY key LIMIT 1").fetchone()
    con.execute("UPDATE results SET rows = ? WHERE key = ?", (SCORE_DAMAGE[damage](text), key))
    con.commit()
    con.close()
    capfd.readouterr()
    toy.scored.clear()
    out = sc.score_with_cache(toy, batch)
    err = warned(capfd)
    assert len(err) == 1 and "damaged score-cache entry" in err[0], err
    assert len(toy.scored) == 1 and len(toy.scored[0]) == 1  # only the damaged query is scored again
    assert bits(out) == bits(uncached)
    toy.scored.clear()
    assert bits(sc.score_with_cache(toy, batch)) == bits(uncached) and toy.scored == []  # replaced: a hit


def test_a_score_row_of_other_code_is_one_warning_and_scored_again(tmp_path, capfd):
    """A row whose code key is not the scorer's version (a row of other code under this key). Before #35 rows
    had no code key: it was served."""
    toy, batch = Toy(), batch_of(tmp_path, n=2)
    uncached = toy.score(batch)
    sc.score_with_cache(toy, batch)
    con = sqlite3.connect(sc.ScoreCache.default().path)
    con.execute("UPDATE results SET code = 'stale', rows = '[[\"ratio\", 1.0, null]]' WHERE key = "
                "(SELECT min(key) FROM results)")
    con.commit()
    con.close()
    capfd.readouterr()
    out = sc.score_with_cache(toy, batch)
    err = warned(capfd)
    assert len(err) == 1 and "made by other code" in err[0] and bits(out) == bits(uncached)


SUBCLASS = '''
from tests.test_cache_damage import Declared


class Sub(Declared):
    name = "toy-sub"
    factor = {factor}

    def score(self, batch):
        df = super().score(batch)
        df["value"] = df["value"] * self.factor
        return df
'''


class Declared(Toy):
    """A scorer that declares the modules its values depend on (as the built-in copy-paste scorer does): a
    subclass inherits ``version_modules`` and, before #35, only these modules were in its version."""

    version_modules = ("tests.scorers.test_score_cache",)


def test_a_subclass_whose_code_changed_never_hits_its_old_rows(tmp_path, monkeypatch, capfd):
    """A third-party subclass (a module outside fpr, here written to a temporary folder) of a scorer that
    declares ``version_modules``: its code edited, its rows are of another version (a plain miss, no
    warning: nothing is damaged) and its values are the new code's. Before #35 the version covered only the
    inherited ``version_modules``: the edit hit the old rows and served the old code's values."""
    monkeypatch.syspath_prepend(str(tmp_path))
    mod = tmp_path / "third_party_scorer.py"
    mod.write_text(SUBCLASS.format(factor=1.0))
    sys.modules.pop("third_party_scorer", None)
    import third_party_scorer

    batch = batch_of(tmp_path, n=2)
    sc.score_with_cache(third_party_scorer.Sub(), batch)
    mod.write_text(SUBCLASS.format(factor=3.0))
    importlib.invalidate_caches()
    importlib.reload(third_party_scorer)
    sc._module_digest.cache_clear()
    try:
        edited = third_party_scorer.Sub()
        uncached = edited.score(batch)
        edited.scored.clear()
        capfd.readouterr()
        out = sc.score_with_cache(edited, batch)
        assert warned(capfd) == [] and len(edited.scored) == 1 and bits(out) == bits(uncached)
        assert "third_party_scorer" in sc.version_modules(edited)
    finally:
        sc._module_digest.cache_clear()
        sys.modules.pop("third_party_scorer", None)


def test_score_rows_of_the_previous_format_are_quiet_misses(tmp_path, capfd):
    """A row without a checksum (written before #35, or by an older fpr sharing the file) is not served: it
    cannot be told from a row damaged in place. It is scored again, silently, and replaced."""
    toy, batch = Toy(), batch_of(tmp_path, n=2)
    uncached = toy.score(batch)
    sc.score_with_cache(toy, batch)
    con = sqlite3.connect(sc.ScoreCache.default().path)
    con.execute("UPDATE results SET code = NULL, checksum = NULL, rows = '[[\"ratio\", 1.0, null]]'")
    con.commit()
    con.close()
    capfd.readouterr()
    toy.scored.clear()
    out = sc.score_with_cache(toy, batch)
    assert warned(capfd) == [] and len(toy.scored) == 1 and len(toy.scored[0]) == 2 and bits(out) == bits(uncached)
    toy.scored.clear()
    sc.score_with_cache(toy, batch)
    assert toy.scored == []


def test_a_table_of_the_previous_shape_gains_the_check_columns(tmp_path):
    """A database written before #35 (two columns) is opened, extended and used; its old rows are misses."""
    path = tmp_path / "old.sqlite"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE results (key TEXT PRIMARY KEY, rows TEXT NOT NULL) WITHOUT ROWID")
    con.execute("INSERT INTO results VALUES ('k', '[[\"m\", 1.0, null]]')")
    con.commit()
    con.close()
    cache = sc.ScoreCache(path)
    assert cache.get_many(["k"], "v") == {}
    cache.put_many({"k": [["m", 2.0, None]]}, "v")
    assert sc.ScoreCache(path).get_many(["k"], "v") == {"k": [["m", 2.0, None]]}


# ---------------------------------------------------------------------------------------------- embeddings

EMBED_DAMAGE = {
    "a JSON number": ("vec", 5),
    "an object": ("vec", '{"a": 1}'),
    "a row of the wrong length": ("vec", b"\0" * 60),
    "flipped bytes": ("vec", None),  # the stored vector with one byte changed
    "a stale code key": ("code", "an older encoder key"),
}


@pytest.mark.parametrize("damage", sorted(EMBED_DAMAGE))
def test_an_embedding_damaged_in_place_is_one_warning_and_recomputed(
        tiny_encoder, images, tmp_path, capfd, warnings_on, damage):  # noqa: F811 (the imported fixtures)
    """Before #35: a flipped byte (a vector of the right size) and a row of another code key were served
    as the vector; a number or text where the bytes belong was removed but the warning did not say why
    (these two already gave the uncached values)."""
    uncached = E.embed_paths(tiny_encoder, images[:4], cache=None, workers=0).vectors
    cache = E.cache_for(tiny_encoder, root=tmp_path / "c")
    E.embed_paths(tiny_encoder, images[:4], cache=cache, workers=0)
    cache.close()
    column, value = EMBED_DAMAGE[damage]
    con = sqlite3.connect(cache.dir / "vectors.sqlite")
    h, vec = con.execute("SELECT hash, vec FROM vectors ORDER BY hash LIMIT 1").fetchone()
    if value is None:
        value = vec[:9] + bytes([vec[9] ^ 0x40]) + vec[10:]
    con.execute(f"UPDATE vectors SET {column} = ? WHERE hash = ?", (value, h))
    con.commit()
    con.close()
    capfd.readouterr()
    again = E.embed_paths(tiny_encoder, images[:4], cache=E.cache_for(tiny_encoder, root=tmp_path / "c"), workers=0)
    err = warned(capfd)
    assert len(err) == 1 and "damaged embedding-cache entry" in err[0], err
    assert again.n_computed == 1 and again.vectors.tobytes() == uncached.tobytes()
    third = E.embed_paths(tiny_encoder, images[:4], cache=E.cache_for(tiny_encoder, root=tmp_path / "c"), workers=0)
    assert third.n_computed == 0 and third.vectors.tobytes() == uncached.tobytes()


def test_embeddings_of_the_previous_format_are_quiet_misses(tmp_path, capfd, warnings_on):
    cache = EmbeddingCache("k", 4, root=tmp_path)
    cache.add(["h0"], np.ones((1, 4), np.float32))
    cache.close()
    with sqlite3.connect(cache.dir / "vectors.sqlite") as con:
        con.execute("UPDATE vectors SET checksum = NULL, vec = ?", (np.zeros(4, np.float32).tobytes(),))
    capfd.readouterr()
    assert EmbeddingCache("k", 4, root=tmp_path).get_many(["h0"]) == {} and warned(capfd) == []
    assert len(EmbeddingCache("k", 4, root=tmp_path)) == 0


# ---------------------------------------------------------------------------------------------- worlds

WORLD_DAMAGE = {
    "a JSON number": lambda m: 5,
    "an object without files": lambda m: {"key": m["key"]},
    "a file entry that is a number": lambda m: {**m, "files": {k: 7 for k in m["files"]}},
    "a file entry of the wrong length": lambda m: {**m, "files": {k: v[:1] for k, v in m["files"].items()}},
    "a stale code key": lambda m: {**m, "material": {**m["material"], "source": "0" * 64}},
}


@pytest.mark.parametrize("damage", sorted(WORLD_DAMAGE))
def test_a_damaged_world_manifest_is_one_warning_and_rendered_again(tmp_path, capfd, damage):
    """Before #35: a file entry that is a number or of the wrong length ended the run in TypeError or
    IndexError; a manifest of other code was served (its files happened to be right; the number and the
    object were already one warning). Flipped and truncated files: tests/galleries/test_world_cache.py."""
    W.World(CFG).write(tmp_path / "a", cache=True)
    want = files(tmp_path / "a")
    (entry,) = entries()
    manifest = json.loads((entry / wc.MANIFEST).read_text())
    (entry / wc.MANIFEST).write_text(json.dumps(WORLD_DAMAGE[damage](manifest)))
    capfd.readouterr()
    W.World(CFG).write(tmp_path / "b", cache=True)
    err = warned(capfd)
    assert len(err) == 1 and "damaged world-cache entry" in err[0], err
    assert files(tmp_path / "b") == want
    W.World(CFG).write(tmp_path / "c", cache=True)
    assert warned(capfd) == [] and files(tmp_path / "c") == want and len(entries()) == 1


# ---------------------------------------------------------------------------------------------- judge replies

def _ask(cache: JudgeCache, key: str, asked: list) -> dict:
    """The client's loop in small: the cached reply, or a request (counted) whose reply is stored."""
    hit = cache.get(key, "tpl@1")
    if hit is not None:
        return hit["reply"]
    asked.append(key)
    reply = {"content": "Score: 4", "prompt_tokens": 12}
    cache.put(key, {"key": key, "reply": reply}, "tpl@1")
    return reply


JUDGE_DAMAGE = {
    "a JSON number": lambda e: "5",
    "an object without a reply": lambda e: json.dumps({"key": e["key"]}),
    "a reply of another request": lambda e: json.dumps({**e, "key": "0" * 64}),
    "flipped bytes": lambda e: json.dumps(e).replace("Score: 4", "Score: 1"),
    "a stale code key": lambda e: json.dumps({**e, "code": "tpl@0"}),
    "not JSON": lambda e: json.dumps(e)[:-3],
}


@pytest.mark.parametrize("damage", sorted(JUDGE_DAMAGE))
def test_a_damaged_judge_reply_is_one_warning_and_asked_again(tmp_path, capfd, damage):
    """Before #35 (run with the old ``get(key)``/``put(key, entry)``): a number failed (TypeError), an object
    without a reply failed (KeyError; the client asked again silently), flipped bytes, another request's
    entry and another code's entry were served as the reply, not-JSON failed the run (InputError)."""
    cache, asked, key = JudgeCache(tmp_path / "jc"), [], "ab" + "c" * 62
    uncached = _ask(cache, key, asked)
    path = cache.path(key)
    path.write_text(JUDGE_DAMAGE[damage](json.loads(path.read_text())))
    capfd.readouterr()
    assert _ask(cache, key, asked) == uncached and len(asked) == 2
    err = warned(capfd)
    assert len(err) == 1 and "damaged judge-cache entry" in err[0], err
    assert path.with_name(path.name + ".damaged").exists()
    assert _ask(cache, key, asked) == uncached and len(asked) == 2  # replaced: a hit


def test_judge_replies_of_the_previous_format_are_read(tmp_path, capfd):
    """An entry without a checksum is the record of a sampled reply that cannot be made again: read as
    before when its key and shape hold."""
    cache, key = JudgeCache(tmp_path / "jc"), "ab" + "d" * 62
    cache.path(key).parent.mkdir(parents=True)
    cache.path(key).write_text(json.dumps({"key": key, "reply": {"content": "old"}}))
    assert cache.get(key, "tpl@1")["reply"] == {"content": "old"} and warned(capfd) == []
