"""``fpr encoders import`` of pickled checkpoints (.pth/.bin/.pt) for each real encoder's layout.

The checkpoint is converted to safetensors, the stored copy is proven to load (strict keys)
before anything is stored, and the imported encoder embeds exactly like the original weights.
Random weights in the real layouts come from the fixtures of test_real_encoders.py.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from safetensors.torch import load_file, save_file

from fpr.cli.main import cli
from fpr.encoders import weights as W
from fpr.encoders.checkpoints import convert_to_safetensors
from fpr.encoders.weights import weights_dir
from tests.encoders.test_real_encoders import _encoder, _images, _published_state, open_clip_snapshot  # noqa: F401


@pytest.fixture(scope="module")
def miewid_snapshot(tmp_path_factory) -> Path:
    """The published MiewID snapshot layout (config.json + published key names) on timm's tiny test EfficientNet."""
    from fpr.encoders.miewid import MiewIdNative

    folder = tmp_path_factory.mktemp("miew") / "miewid-msv2"
    folder.mkdir()
    torch.manual_seed(0)
    native = MiewIdNative("test_efficientnet").eval()
    config = {"architectures": ["MiewIdNet"], "model_name": "test_efficientnet", "use_fc": False,
              "loss_module": "softmax", "n_classes": 10, "model_type": "miewid"}
    (folder / "config.json").write_text(json.dumps(config))
    save_file({k: v.contiguous() for k, v in _published_state(native.state_dict()).items()},
              str(folder / "model.safetensors"))
    return folder


def _cli(*args):
    return CliRunner().invoke(cli, list(args), obj={})


def _pickled(folder: Path, name: str, state: dict, wrap: str | None, config: tuple[str, str] | None) -> Path:
    folder.mkdir()
    if config:
        (folder / config[0]).write_text(config[1])
    torch.save({wrap: state, "epoch": 3} if wrap else state, folder / name)
    return folder / name


def _dinov2_snapshot(folder: Path) -> Path:
    import timm

    args = {"embed_dim": 48, "depth": 1, "num_heads": 2}
    torch.manual_seed(0)
    src = timm.create_model("vit_base_patch14_dinov2", pretrained=False, num_classes=0, **args)
    folder.mkdir()
    save_file({k: v.contiguous() for k, v in src.state_dict().items()}, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps({"architecture": "vit_base_patch14_dinov2", "model_args": args}))
    return folder


CASES = {  # encoder id -> (fixture, safetensors name in the snapshot, config name, dim, pickle name, wrapper)
    "clip-vit-b-32": ("open_clip_snapshot", "open_clip_model.safetensors", "open_clip_config.json", 32,
                      "clip-weights.pth", None),
    "bioclip-2": ("open_clip_snapshot", "open_clip_model.safetensors", "open_clip_config.json", 32,
                  "bioclip.pt", "state_dict"),
    "dinov2-vitb14": ("dinov2", "model.safetensors", "config.json", 48, "weights.pth", "model"),
    "miewid-msv2": ("miewid_snapshot", "model.safetensors", "config.json", 256, "miewid.bin", "module"),
}


@pytest.mark.parametrize("encoder_id", list(CASES))
def test_pth_import_converts_proves_and_embeds_like_the_original(encoder_id, request, tmp_path):
    fixture, st_name, cfg_name, dim, pkl_name, wrap = CASES[encoder_id]
    snap = _dinov2_snapshot(tmp_path / "dino") if fixture == "dinov2" else request.getfixturevalue(fixture)
    state = load_file(str(snap / st_name))
    if encoder_id == "miewid-msv2":  # a DataParallel checkpoint: every key under "module."
        state = {f"module.{k}": v for k, v in state.items()}
    pth = _pickled(tmp_path / "dl", pkl_name, state, wrap, (cfg_name, (snap / cfg_name).read_text()))

    res = _cli("encoders", "import", encoder_id, str(pth), "--format", "json")
    assert res.exit_code == 0, res.output
    row = json.loads(res.stdout)
    assert row["status"] == "available" and row["found_in"] == "weights-dir"
    stored = weights_dir() / encoder_id
    assert sorted(p.name for p in stored.iterdir()) == sorted([st_name, cfg_name])
    assert (stored / st_name).read_bytes()[:8] != b"PK\x03\x04"  # not the pickle (a zip) under a safetensors name
    assert set(load_file(str(stored / st_name))) == {k.removeprefix("module.") for k in state}

    imported = _encoder(encoder_id, stored / st_name, dim)
    original = _encoder(encoder_id, snap, dim)
    x = _images(original.spec)
    if encoder_id == "miewid-msv2":
        x = torch.nn.functional.interpolate(x, size=64)  # keep the test fast (the real protocol is 440 px)
    a, b = imported.embed_batch(x), original.embed_batch(x)
    assert a.tobytes() == b.tobytes() and np.isfinite(a).all()


def test_a_checkpoint_that_does_not_load_stores_nothing(open_clip_snapshot, tmp_path):
    state = load_file(str(open_clip_snapshot / "open_clip_model.safetensors"))
    state.pop("visual.proj")
    pth = _pickled(tmp_path / "dl", "w.pth", state, None,
                   ("open_clip_config.json", (open_clip_snapshot / "open_clip_config.json").read_text()))
    res = _cli("encoders", "import", "clip-vit-b-32", str(pth))
    assert res.exit_code == 2 and "Traceback" not in res.output and "internal error" not in res.output
    assert len(res.output.strip().splitlines()) == 1 and "visual.proj" in res.output
    assert not weights_dir().exists() or not any(weights_dir().iterdir())


@pytest.mark.parametrize("content", [b"not a pickle at all", "tensor_values"])
def test_unreadable_or_non_tensor_checkpoints_are_one_line(tmp_path, content):
    (tmp_path / "config.json").write_text(json.dumps({"model_name": "efficientnetv2_rw_t"}))
    pth = tmp_path / "w.pth"
    if content == "tensor_values":
        torch.save({"backbone.x": torch.zeros(1), "steps": 3}, pth)
    else:
        pth.write_bytes(content)
    res = _cli("encoders", "import", "miewid-msv2", str(pth))
    assert res.exit_code == 2 and len(res.output.strip().splitlines()) == 1, res.output
    assert "Traceback" not in res.output and "internal error" not in res.output
    assert not (weights_dir() / "miewid-msv2").exists()
    assert not weights_dir().exists() or not [p for p in weights_dir().iterdir() if p.name.startswith(".tmp-")]


def test_convert_to_safetensors_unwraps_and_unties(tmp_path):
    shared = torch.arange(6.0)
    torch.save({"state_dict": {"module.a": shared, "module.b": shared[:3]}}, tmp_path / "w.pt")
    out = convert_to_safetensors(tmp_path / "w.pt", tmp_path / "w.safetensors")
    got = load_file(str(out))
    assert got.keys() == {"a", "b"} and got["a"].tolist() == list(range(6)) and got["b"].tolist() == [0, 1, 2]
