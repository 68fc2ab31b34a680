"""``fpr evaluate GENERATIONS GALLERY`` and ``fpr.Evaluator``: two folders in one command, the same numbers in
memory, content-addressed reuse, layouts refused naming the path."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from fpr import api
from fpr.errors import ConflictError, InputError
from tests.conftest import make_tree, run_cli, write_image

ENC = "pixels-16"


def _generations(root: Path, gallery: Path, methods=("close", "far")) -> Path:
    """<method>/<group>/<identity>/k.png: 'close' is a gallery image with light noise (high AP), 'far' fresh
    noise of another seed (chance)."""
    rng = np.random.default_rng(7)
    for group_dir in sorted(p for p in gallery.iterdir() if p.is_dir()):
        for ident in sorted(p for p in group_dir.iterdir() if p.is_dir()):
            src = np.asarray(Image.open(sorted(ident.iterdir())[0]).convert("RGB")).astype(np.int16)
            for m in methods:
                out = root / m / group_dir.name / ident.name / "0.png"
                out.parent.mkdir(parents=True, exist_ok=True)
                if m == "far":
                    write_image(out, seed=int(rng.integers(1 << 30)))
                else:
                    noisy = np.clip(src + rng.integers(-6, 7, src.shape), 0, 255).astype("uint8")
                    Image.fromarray(noisy).save(out)
    return root


@pytest.fixture
def folders(tmp_path):
    gallery = make_tree(tmp_path / "gallery", identities=3, images=4)
    return _generations(tmp_path / "gen", gallery), gallery


def test_two_folders_one_command_and_reuse_by_content(folders, workspace):
    gen, gallery = folders
    first = run_cli(workspace, "evaluate", str(gen), str(gallery), "--encoder", ENC, "--oracle", "--format", "json")
    doc = json.loads(first.output[first.output.index("{"):])
    run_id = doc["runs"][0]["run"]["id"]
    assert run_id.startswith("eval-")
    stored = api.load_run(run_id, workspace=workspace)
    methods = set(stored.per_query["method"])
    assert methods == {"close", "far", "oracle"}
    assert len(stored.per_query) == 2 * 2 * 3 + 2 * 3  # 2 methods x 2 groups x 3 identities + one reference each
    qid = "close/cats/cats-0/0.png"
    assert qid in set(stored.per_query["query_id"])
    # the same run as fpr query on the stored index with the same queries
    again = api.evaluate_folders(gen, gallery, ENC, workspace=workspace, oracle=True)
    assert again.reused == {"gallery": True, "index": True, "run": True}
    assert again.result.run_id == run_id
    assert "gallery " + again.gallery + ": reused (same content)" in again.notes()
    # one changed gallery file: a new gallery, index and run
    write_image(gallery / "dogs" / "dogs-2" / "3.png", seed=99999)
    changed = api.evaluate_folders(gen, gallery, ENC, workspace=workspace, oracle=True)
    assert changed.reused == {"gallery": False, "index": False, "run": False}
    assert changed.gallery != again.gallery and changed.result.run_id != run_id


def test_report_is_printed_as_fpr_report_prints_it(folders, workspace):
    gen, gallery = folders
    out = run_cli(workspace, "evaluate", str(gen), str(gallery), "--encoder", ENC, "--width", "200").output
    run_id = api.list_runs(workspace=workspace)[0]["run_id"]
    report = run_cli(workspace, "report", "--run", run_id, "--width", "200").output
    assert out.endswith(report)


def test_close_copies_rank_above_fresh_noise(folders, workspace):
    gen, gallery = folders
    res = api.evaluate_folders(gen, gallery, ENC, workspace=workspace, references=0).result
    close = res.per_query[res.per_query["method"] == "close"]
    # every gallery image is kept (no references): a lightly noised copy of one finds that image first
    assert (close["first_hit_rank"] == 1).all() and (close["cmc1"] == 1).all()
    assert (close["n_relevant"] == 4).all() and (close["n_scope"] == 12).all()


def test_layout_without_group_uses_the_gallerys_only_group(tmp_path, workspace):
    gallery = make_tree(tmp_path / "gallery", identities=3, images=4, groups=("cats",))
    gen = tmp_path / "gen"
    for i in range(3):
        shutil.copyfile(gallery / "cats" / f"cats-{i}" / "0.png", gen / "copy" / f"cats-{i}" / "a.png"
                        if (gen / "copy" / f"cats-{i}").mkdir(parents=True) is None else None)
    res = api.evaluate_folders(gen, gallery, ENC, workspace=workspace, references=0).result
    assert set(res.per_query["group"]) == {"cats"}
    assert set(res.per_query["query_id"]) == {f"copy/cats-{i}/a.png" for i in range(3)}


def test_wrong_layouts_are_refused_naming_the_path(folders, tmp_path, workspace):
    gen, gallery = folders
    stray = write_image(gen / "close" / "stray.png", seed=1)
    with pytest.raises(InputError) as e:
        api.evaluate_folders(gen, gallery, ENC, workspace=workspace)
    assert str(stray) in str(e.value) and "<method>/<group>/<identity>/<image>" in str(e.value)
    stray.unlink()
    flat = tmp_path / "flat" / "copy" / "cats-0" / "0.png"  # no group, but the gallery has two
    write_image(flat, seed=2)
    with pytest.raises(InputError, match="gallery has 2 groups"):
        api.evaluate_folders(tmp_path / "flat", gallery, ENC, workspace=workspace)
    with pytest.raises(InputError, match="generations folder not found"):
        api.evaluate_folders(tmp_path / "nope", gallery, ENC, workspace=workspace)
    res = run_cli(workspace, "evaluate", str(gen), str(gallery), "--encoder", "no-such-encoder", ok=False)
    assert res.exit_code == 2 and "unknown encoder" in res.output and len(res.output.strip().splitlines()) == 1
    res = run_cli(workspace, "evaluate", str(gen), str(gallery), "--encoder", "miewid-msv2", ok=False)
    assert res.exit_code == 2 and "fpr encoders fetch miewid-msv2" in res.output  # weights absent here (offline)
    assert not (workspace / "fpr.duckdb").exists()  # refused before anything was stored


def test_named_run_is_refused_when_it_exists(folders, workspace):
    gen, gallery = folders
    api.evaluate_folders(gen, gallery, ENC, workspace=workspace, run="mine")
    with pytest.raises(ConflictError, match="--overwrite"):
        api.evaluate_folders(gen, gallery, ENC, workspace=workspace, run="mine")
    assert api.evaluate_folders(gen, gallery, ENC, workspace=workspace, run="mine", overwrite=True).result.run_id \
        == "mine"


def _images(gen: Path) -> list[Path]:
    return sorted(gen.rglob("*.png"))


def test_evaluator_in_memory_equals_the_cli_and_writes_nothing(folders, workspace, tmp_path):
    torch = pytest.importorskip("torch")
    gen, gallery = folders
    cli = api.evaluate_folders(gen, gallery, ENC, workspace=workspace, oracle=True).result.per_query
    paths = _images(gen)
    parts = [p.relative_to(gen).parts for p in paths]
    ids = [p.relative_to(gen).as_posix() for p in paths]
    arrays = [np.asarray(Image.open(p).convert("RGB")) for p in paths]
    # every input kind: a path, a PIL image, a uint8 array, a float tensor in 0..1 (exact for uint8 pixels / 255)
    images = [str(paths[0]), Image.open(paths[1]), arrays[2],
              *[torch.from_numpy(a.astype(np.float32) / 255.0).permute(2, 0, 1) for a in arrays[3:]]]
    ev = api.Evaluator(gallery, ENC, workspace=tmp_path / "never")
    out = ev.score(images, [p[2] for p in parts], method=[p[0] for p in parts], groups=[p[1] for p in parts],
                   query_ids=ids, oracle=True)
    cols = ["ap", "sim", "top_margin", "first_hit_rank", "cmc1", "inp"]
    mem = out.per_query.set_index("query_id")[cols].sort_index()
    ref = cli.set_index("query_id")[cols].sort_index()
    pd.testing.assert_frame_equal(mem, ref)
    assert not (tmp_path / "never").exists()
    # the same cell again: the same numbers, still nothing written
    again = ev.score(images, [p[2] for p in parts], method=[p[0] for p in parts], groups=[p[1] for p in parts],
                     query_ids=ids, oracle=True)
    pd.testing.assert_frame_equal(again.summary, out.summary)
    assert not (tmp_path / "never").exists()
    stored = api.evaluate_folders(gen, gallery, ENC, workspace=workspace, oracle=True).result.summary
    key = ["method", "group"]
    pd.testing.assert_frame_equal(out.summary.sort_values(key).reset_index(drop=True)[["map", "map_lo", "map_hi"]],
                                  stored.sort_values(key).reset_index(drop=True)[["map", "map_lo", "map_hi"]])


def test_evaluator_saves_only_when_asked_and_speaks_python(folders, tmp_path):
    gen, gallery = folders
    ev = api.Evaluator(gallery, ENC)
    path = str(_images(gen)[0])
    out = ev.score([path], "cats-0", groups="cats", save_to=tmp_path / "ws", run="nb")
    assert out.run is not None and out.run.run_id == "nb"
    assert api.load_run("nb", workspace=tmp_path / "ws").per_query["ap"].tolist() == out.per_query["ap"].tolist()
    with pytest.raises(ConflictError) as e:
        ev.score([path], "cats-0", groups="cats", save_to=tmp_path / "ws", run="nb")
    assert "overwrite=True" in str(e.value) and "--" not in str(e.value)
    ev.score([path], "cats-0", groups="cats", save_to=tmp_path / "ws", run="nb", overwrite=True)
    # unnamed: named by content, so the same cell again returns the stored run instead of failing
    arr = np.asarray(Image.open(path).convert("RGB"))
    a = ev.score([arr], "cats-0", groups="cats", save_to=tmp_path / "ws")
    b = ev.score([arr], "cats-0", groups="cats", save_to=tmp_path / "ws")
    assert a.run.run_id == b.run.run_id and a.run.run_id.startswith("eval-")
    assert b.per_query["ap"].tolist() == a.per_query["ap"].tolist() == out.per_query["ap"].tolist()
    assert len(api.list_runs(workspace=tmp_path / "ws")) == 2


def test_evaluator_refuses_what_it_cannot_use(folders):
    _, gallery = folders
    ev = api.Evaluator(gallery, ENC)
    with pytest.raises(InputError, match="gallery has 2 groups"):
        ev.score([np.zeros((8, 8, 3), np.uint8)], "cats-0")
    with pytest.raises(InputError, match="must be uint8"):
        ev.score([np.zeros((8, 8, 3), np.float32)], "cats-0", groups="cats")
    with pytest.raises(InputError, match=r"\(H, W\) or \(H, W, 3\|4\)"):
        ev.score([np.zeros((3, 8, 8), np.uint8)], "cats-0", groups="cats")
    with pytest.raises(InputError, match="identities has 2 values for 1 images"):
        ev.score([np.zeros((8, 8, 3), np.uint8)], ["cats-0", "cats-1"], groups="cats")
    with pytest.raises(InputError, match="scorers read image files"):
        ev.score([np.zeros((8, 8, 3), np.uint8)], "cats-0", groups="cats", scorers="brightness")
    with pytest.raises(InputError) as e:  # the pipeline's hint, in Python
        ev.score([np.zeros((8, 8, 3), np.uint8)], "cats-9", groups="cats")
    assert "skip_missing_identities=True" in str(e.value) and "--" not in str(e.value)
    with pytest.raises(InputError, match="neither a folder nor a stored gallery"):
        api.Evaluator("no-such-gallery", ENC)
