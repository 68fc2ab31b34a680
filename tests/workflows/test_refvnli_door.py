"""`fpr refvnli train` checks its data folder at the door (issue #35, item 2): a damaged card, table, image or
setting is one line naming the file and field, and no model is written. Each case ended in an internal error, or
trained silently, before fpr/cards.py."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from fpr.errors import FprError
from fpr.workflows import refvnli as wr
from fpr.workflows import refvnli_train as rt
from tests.test_images import bomb_png

REPO = Path(__file__).resolve().parents[2]
CARD = "refvnli-data.json"


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("door") / "d"
    wr.build_refvnli_data(out, world=wr.WorldFrames(species=("zebra",), sets=1, size=64, seed=3))
    return out


def _first_frame(d: Path) -> Path:
    return sorted((d / "frames").iterdir())[0]


def _edit_card(d: Path, fn) -> None:
    (d / CARD).write_text(fn((d / CARD).read_text()))


def _edit_table(d: Path, column: str, first) -> None:
    t = pd.read_parquet(d / "triplets.parquet")
    t[column] = [first] + list(t[column][1:])
    t.to_parquet(d / "triplets.parquet", index=False)


def _link_outside(d: Path) -> None:
    frame = _first_frame(d)
    outside = d.parent / "outside.png"
    shutil.copy(frame, outside)
    frame.unlink()
    frame.symlink_to(outside)


# name -> (damage to the training folder, words the line must hold: the file and the field or cause)
CASES = {
    "truncated card": (lambda d: _edit_card(d, lambda t: t[:40]), (CARD, "not valid JSON")),
    "non-object card": (lambda d: _edit_card(d, lambda t: "[1, 2]"), (CARD, "must be a JSON object")),
    "manifest-less card": (lambda d: _edit_card(d, lambda t: json.dumps(
        {k: v for k, v in json.loads(t).items() if k != "manifest"})), (CARD, "lacks manifest")),
    "card naming a manifest outside": (lambda d: _edit_card(d, lambda t: json.dumps(
        {**json.loads(t), "manifest": "../elsewhere.parquet"})), (CARD, "'manifest' leads outside")),
    "text file named .png": (lambda d: _first_frame(d).write_text("not an image"), (".png", "not a readable image")),
    "empty file named .png": (lambda d: _first_frame(d).write_bytes(b""), (".png", "empty (0 bytes)")),
    "decompression bomb": (lambda d: _first_frame(d).write_bytes(bomb_png()), (".png", "decompression bomb")),
    "sp label of 2": (lambda d: _edit_table(d, "sp", 2), ("triplets.parquet", "'sp' labels must be 0 or 1")),
    "ta label of -1": (lambda d: _edit_table(d, "ta", -1), ("triplets.parquet", "'ta' labels must be 0 or 1")),
    "reference path escaping": (lambda d: _edit_table(d, "reference_path", "../../../../etc/hostname"),
                                ("triplets.parquet", "'reference_path' leads outside")),
    "absolute target path": (lambda d: _edit_table(d, "target_path", "/etc/hostname"),
                             ("triplets.parquet", "'target_path' must be relative")),
    "symlink leading outside": (_link_outside, ("triplets.parquet", "leads outside")),
}


def _settings(**kw) -> rt.TrainSettings:
    return rt.TrainSettings(**{"epochs": 1, "batch_size": 60, "device": "cpu", "threads": 1, **kw})


def _refused(train, words: tuple[str, ...], out: Path) -> str:
    with pytest.raises(FprError) as e:
        train()
    line = e.value.one_line()
    assert "\n" not in line and all(w in line for w in words), line
    assert not out.exists()  # nothing written
    return line


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_damaged_training_folder_is_one_line_and_writes_nothing(case, data, tmp_path):
    damage, words = CASES[case]
    folder = tmp_path / "d"
    shutil.copytree(data, folder, symlinks=True)
    damage(folder)
    out = tmp_path / "model"
    _refused(lambda: rt.train_refvnli(folder, out, settings=_settings()), words, out)


@pytest.mark.parametrize("case", ["truncated card", "sp label of 2", "text file named .png"])
def test_a_damaged_validation_folder_is_one_line_and_writes_nothing(case, data, tmp_path):
    damage, words = CASES[case]
    val = tmp_path / "val"
    shutil.copytree(data, val)
    damage(val)
    out = tmp_path / "model"
    line = _refused(lambda: rt.train_refvnli(data, out, settings=_settings(), val_data=val), words, out)
    assert str(val) in line


@pytest.mark.parametrize("field,value", [("lr", float("nan")), ("lr", float("inf")), ("lr", -1e-3),
                                         ("weight_decay", float("nan")), ("clip_weight", float("inf")),
                                         ("full_reference", float("nan"))])
def test_non_finite_or_out_of_range_settings_are_refused_before_reading(field, value, data, tmp_path):
    out = tmp_path / "model"
    line = _refused(lambda: rt.train_refvnli(data, out, settings=_settings(**{field: value})),
                    (field.replace("_", " ").replace("full reference", "full-reference"),), out)
    assert ("finite" in line) == (value != value or abs(value) == float("inf"))


def test_the_cli_refuses_a_nan_learning_rate_in_one_line(data, tmp_path):
    out = tmp_path / "model"
    proc = subprocess.run([sys.executable, "-m", "fpr", "refvnli", "train", "--data", str(data), "--out", str(out),
                           "--lr", "nan", "--device", "cpu"], capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()] and "lr must be a finite number" in proc.stderr
    assert not out.exists()


def test_a_sound_folder_still_reads_with_its_labels(data):
    files = rt.read_triplets(data)
    table = pd.read_parquet(data / "triplets.parquet")
    assert files.table["sp"].tolist() == table["sp"].tolist() and files.table["ta"].tolist() == table["ta"].tolist()
    assert all(p.is_file() and data.resolve() in p.parents for p in files.paths.values())
    # every reference crop, every target and every reference's whole frame, each once
    want = set(table.reference_path) | set(table.target_path) | {"frames/" + Path(p).name for p in table.reference_path}
    assert set(files.paths) == want


def _frames_folder(root: Path) -> Path:
    """``<root>/<identity>/*.png``: two identities (scenes) of two frames, seeded noise."""
    from tests.conftest import write_image

    for i, ident in enumerate(("a", "b")):
        for k in range(2):
            write_image(root / ident / f"{k}.png", seed=10 * i + k, size=32)
    return root


@pytest.mark.parametrize("case,damage,words", [
    ("text file named .png", lambda r: (r / "a" / "0.png").write_text("not an image"), "not a readable image"),
    ("empty file named .png", lambda r: (r / "a" / "0.png").write_bytes(b""), "empty (0 bytes)"),
    ("decompression bomb", lambda r: (r / "a" / "0.png").write_bytes(bomb_png()), "decompression bomb"),
    ("a name that is not UTF-8", lambda r: (r / "b").rename(Path(os.fsdecode(os.fsencode(str(r)) + b"/\xff"))),
     "frame file name is not UTF-8 text"),
])
def test_the_data_command_refuses_a_bad_frame_in_one_line_and_writes_nothing(case, damage, words, tmp_path):
    source = _frames_folder(tmp_path / "src")
    out = tmp_path / "out"
    wr.build_refvnli_data(tmp_path / "sound", source=str(source))  # the folder before the damage builds
    damage(source)
    _refused(lambda: wr.build_refvnli_data(out, source=str(source)), (words,), out)
