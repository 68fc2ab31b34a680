"""fpr/cards.py: the shared reader of cards and manifests (schema, types, ranges, confined paths)."""
from __future__ import annotations

import math

import pytest

from fpr.cards import Field, binary_labels, confined, finite, read_card
from fpr.errors import InputError

FIELDS = (Field("name", str), Field("dim", int), Field("lr", float), Field("tags", list, required=False))


def _card(tmp_path, text: str):
    p = tmp_path / "card.json"
    p.write_text(text)
    return p


def test_a_sound_card_is_returned_as_written(tmp_path):
    p = _card(tmp_path, '{"name": "x", "dim": 3, "lr": 1, "extra": null}')
    assert read_card(p, what="test card", fields=FIELDS) == {"name": "x", "dim": 3, "lr": 1, "extra": None}


@pytest.mark.parametrize("text,words", [
    ("", "is empty"),
    ('{"name": "x", "di', "not valid JSON"),
    ("[1, 2]", "must be a JSON object, found list"),
    ('"text"', "must be a JSON object, found str"),
    ('{"name": "x", "lr": 1.0}', "lacks dim"),
    ('{"name": "x", "dim": "3", "lr": 1.0}', "field 'dim' must be an integer"),
    ('{"name": "x", "dim": true, "lr": 1.0}', "field 'dim' must be an integer"),
    ('{"name": "x", "dim": 3, "lr": NaN}', "field 'lr' must be a finite number"),
    ('{"name": "x", "dim": 3, "lr": Infinity}', "field 'lr' must be a finite number"),
    ('{"name": "x", "dim": 3, "lr": 1.0, "tags": {}}', "field 'tags' must be a list"),
])
def test_each_damage_is_one_line_naming_file_and_field(tmp_path, text, words):
    p = _card(tmp_path, text)
    with pytest.raises(InputError) as e:
        read_card(p, what="test card", fields=FIELDS)
    line = e.value.one_line()
    assert words in line and str(p) in line and "\n" not in line


def test_a_missing_or_undecodable_card_is_one_line(tmp_path):
    with pytest.raises(InputError, match="test card not found"):
        read_card(tmp_path / "none.json", what="test card")
    p = tmp_path / "bad.json"
    p.write_bytes(b'{"name": "\xff"}')
    with pytest.raises(InputError, match="cannot read test card"):
        read_card(p, what="test card")


def test_finite_numbers_and_their_ranges():
    assert finite("0.5", name="x", low=0.0, high=1.0) == 0.5
    assert finite(1e-9, name="lr", low=0.0, low_open=True) == 1e-9
    assert finite(0.0, name="wd", low=0.0) == 0.0
    for bad, words in ((math.nan, "finite"), (math.inf, "finite"), (-math.inf, "finite"), ("x", "a number"),
                       (0.0, "within (0, inf]"), (-1.0, "within (0, inf]")):
        with pytest.raises(InputError, match=words.replace("(", r"\(").replace("[", r"\[").replace("]", r"\]")):
            finite(bad, name="lr", low=0.0, low_open=True)
    with pytest.raises(InputError, match=r"within \[0, 1\], got 1.5"):
        finite(1.5, name="share", low=0.0, high=1.0)


def test_binary_labels_accept_zero_and_one_only():
    assert binary_labels([0, 1, "1", "0", 1.0, True, "true"], name="sp", where="t.csv") == [0, 1, 1, 0, 1, 1, 1]
    for values, row in (([0, 2], 3), ([1, "nan"], 3), (["", 1], 2), ([-1], 2), ([0.5], 2)):
        with pytest.raises(InputError, match=f"'sp' labels must be 0 or 1, found .* in row {row}"):
            binary_labels(values, name="sp", where="t.csv")


def test_paths_stay_inside_their_folder(tmp_path):
    base = tmp_path / "data"
    (base / "frames").mkdir(parents=True)
    (base / "frames" / "a.png").write_bytes(b"x")
    (tmp_path / "secret.png").write_bytes(b"x")
    assert confined(base, "frames/a.png", name="p", where="t") == (base / "frames" / "a.png").resolve()
    assert confined(base, "frames/../frames/a.png", name="p", where="t") == (base / "frames" / "a.png").resolve()
    (base / "frames" / "inside.png").symlink_to(base / "frames" / "a.png")  # a link within the folder is fine
    assert confined(base, "frames/inside.png", name="p", where="t") == (base / "frames" / "a.png").resolve()
    (base / "frames" / "out.png").symlink_to(tmp_path / "secret.png")
    (base / "up").symlink_to(tmp_path)
    for value, words in (("../secret.png", "leads outside"), ("../../../../etc/hostname", "leads outside"),
                         ("/etc/hostname", "must be relative"), ("~/x.png", "must be relative"),
                         ("frames/out.png", "leads outside"), ("up/secret.png", "leads outside"), ("", "not a path")):
        with pytest.raises(InputError, match=words) as e:
            confined(base, value, name="reference_path", where="t.parquet")
        assert "t.parquet" in e.value.one_line()
