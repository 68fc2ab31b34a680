from __future__ import annotations

import json

import pytest

from fpr.encoders import registry
from fpr.encoders.registry import all_specs, broken_encoders, describe, get_spec, load_encoder
from fpr.encoders.weights import weights_dir
from fpr.errors import InputError, NotFoundError


def test_unknown_encoder_lists_valid_ids():
    with pytest.raises(NotFoundError) as exc:
        get_spec("no-such-encoder")
    msg = exc.value.one_line()
    assert "no-such-encoder" in msg and "pixels-16" in msg


def test_describe_is_honest_and_never_raises():
    for spec in all_specs().values():
        row = describe(spec)
        assert {"id", "dim", "status", "found_in"} <= set(row)
        assert row["status"] in ("available", "missing", "incomplete")
    assert describe(get_spec("pixels-16"))["status"] == "available"


def test_baseline_loads_without_weights():
    enc = load_encoder("pixels-16", device="cpu")
    assert enc.weights.checksum == "none" and enc.spec.dim == 768


@pytest.mark.parametrize("device", ["tpu", "CPU", "cuda:x", "gpu", "", "cuda:-1"])
def test_unknown_device_lists_valid_ones(device):
    with pytest.raises(InputError) as err:
        load_encoder("pixels-16", device=device)
    msg = err.value.one_line()
    assert f"unknown device '{device}'" in msg and "valid devices: auto, cpu, cuda, cuda:N, mps" in msg


def test_valid_devices_pass_the_check():
    for device in ("auto", "cpu", "cuda", "cuda:0", "cuda:12", "mps"):
        assert registry.check_device(device) == device


@pytest.mark.parametrize("kw, needle", [({"batch_size": 0}, "batch size must be a whole number >= 1, got 0"),
                                        ({"batch_size": -3}, "got -3"), ({"batch_size": 2.5}, "got 2.5"),
                                        ({"workers": -1}, "workers must be a whole number >= 0, got -1"),
                                        ({"on_error": "ignore"}, "on_error must be 'raise' or 'skip'")])
def test_bad_embedding_options_are_one_line(kw, needle, tmp_path):
    from fpr.encoders.embed import embed_paths

    enc = load_encoder("pixels-16", device="cpu")
    with pytest.raises(InputError, match=needle.replace("(", r"\(")):
        embed_paths(enc, [tmp_path / "never-read.png"], **kw)


def test_a_missing_builtin_module_is_an_error(monkeypatch):
    monkeypatch.setitem(registry.ENCODERS.builtin, "no-such-encoder", "fpr.encoders.no_such_encoder_module")
    monkeypatch.setattr(registry.ENCODERS, "_complete", False)
    with pytest.raises(ModuleNotFoundError, match="fpr.encoders.no_such_encoder_module"):
        all_specs()


def test_a_missing_scorer_module_is_an_error(monkeypatch):
    import fpr.scorers as S

    monkeypatch.setitem(S.SCORERS.builtin, "no-such-scorer", "fpr.scorers.no_such_scorer")
    monkeypatch.setattr(S.SCORERS, "_complete", False)
    with pytest.raises(ModuleNotFoundError, match="fpr.scorers.no_such_scorer"):
        S.all_scorers()


GOOD_CARD = {"id": "mine", "architecture": "fpr-cnn-s", "dim": 8,
             "preprocessing": {"name": "squash32", "size": 32, "mean": [0.5, 0.5, 0.5], "std": [0.5, 0.5, 0.5]}}


@pytest.mark.parametrize("text, reason", [
    ('{"id": "mine", "architecture": "fpr-cnn-s",, }', "encoder card is not valid JSON"),
    (json.dumps({k: v for k, v in GOOD_CARD.items() if k != "dim"}), "encoder card lacks dim"),
    (json.dumps({**GOOD_CARD, "dim": "eight"}), "encoder card field 'dim' must be an integer"),
    (json.dumps({**GOOD_CARD, "dim": 8.5}), "encoder card field 'dim' must be an integer"),
    (json.dumps({**GOOD_CARD, "preprocessing": {"name": "x", "size": 32, "resize_mode": "stretch",
                                                 "mean": [0.5] * 3, "std": [0.5] * 3}}), "resize_mode"),
    (json.dumps({**GOOD_CARD, "id": "other"}), "the card says id 'other' but sits in folder 'mine'"),
    ("[]", "must be a JSON object"),
])
def test_a_broken_trained_card_is_listed_as_broken_and_loading_says_why(text, reason):
    folder = weights_dir() / "mine"
    folder.mkdir(parents=True)
    (folder / "fpr-encoder.json").write_text(text)
    assert "mine" not in all_specs()
    broken = broken_encoders()["mine"]
    assert reason in broken.reason and broken.where == str(folder / "fpr-encoder.json")
    with pytest.raises(InputError) as err:
        load_encoder("mine", device="cpu")
    msg = err.value.one_line()
    assert msg.startswith("encoder 'mine' is broken: ") and reason in msg and "\n" not in msg
    (folder / "fpr-encoder.json").write_text(json.dumps(GOOD_CARD))  # fixed: usable again
    assert "mine" in all_specs() and "mine" not in broken_encoders()


def test_incomplete_weights_folder_is_described_as_incomplete():
    folder = weights_dir() / "bioclip-2"
    folder.mkdir(parents=True)
    (folder / "open_clip_model.safetensors").write_bytes(b"w")  # without its open_clip_config.json
    row = describe(get_spec("bioclip-2"))
    assert row["status"] == "incomplete" and "open_clip_config.json" in row["reason"]
    assert describe(get_spec("miewid-msv2"))["status"] == "missing"
