"""Real encoders load through their real code paths from files written here in the published layouts.

No download: random-initialised weights are written in each real layout (open_clip
``local-dir`` snapshot, timm Hub checkpoint, the MiewID Hub snapshot with the
published key names). Architectures are shrunk through the same config files the
real snapshots carry (open_clip_config.json, timm config.json model_args, MiewID
config.json model_name), except where a test enumerates the real architecture's
keys on the meta device.
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from safetensors.torch import save_file

from fpr.encoders.registry import Encoder, get_spec, load_encoder
from fpr.encoders.weights import resolve_weights
from fpr.errors import ConflictError, FprError, NotFoundError

TINY_OPEN_CLIP = {
    "model_cfg": {
        "embed_dim": 32, "quick_gelu": True,
        "vision_cfg": {"image_size": 224, "layers": 1, "width": 64, "head_width": 32, "patch_size": 32},
        "text_cfg": {"context_length": 77, "vocab_size": 49408, "width": 32, "heads": 2, "layers": 1},
    },
    "preprocess_cfg": {"mean": [0.48145466, 0.4578275, 0.40821073], "std": [0.26862954, 0.26130258, 0.27577711]},
}


def _images(spec, n=2):
    ims = [Image.fromarray(np.random.default_rng(i).integers(0, 255, (90, 120, 3), dtype=np.uint8)) for i in range(n)]
    return torch.stack([spec.preprocessing(im) for im in ims])


def _encoder(encoder_id: str, weights: Path, dim: int) -> Encoder:
    """The registered spec and build function, with the embedding size of the shrunk architecture."""
    spec = dataclasses.replace(get_spec(encoder_id), dim=dim)
    resolved = resolve_weights(spec.id, spec.weights, explicit=weights)
    return Encoder(spec, resolved, spec.build(resolved), torch.device("cpu"))


def _assert_unit_rows(x: np.ndarray, dim: int, n: int = 2):
    assert x.shape == (n, dim) and x.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(x, axis=1), 1.0, atol=1e-5)


@pytest.fixture(scope="module")
def open_clip_snapshot(tmp_path_factory) -> Path:
    import open_clip

    folder = tmp_path_factory.mktemp("oc") / "snapshot"
    folder.mkdir()
    (folder / "open_clip_config.json").write_text(json.dumps(TINY_OPEN_CLIP))
    torch.manual_seed(0)
    model = open_clip.create_model(f"local-dir:{folder}", load_weights=False)
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(folder / "open_clip_model.safetensors"))
    return folder


def test_clip_and_bioclip_load_local_dir_snapshot_with_text_tower(open_clip_snapshot):
    for encoder_id in ("clip-vit-b-32", "bioclip-2"):
        enc = _encoder(encoder_id, open_clip_snapshot, 32)
        assert enc.weights.where == "explicit" and enc.weights.checksum.startswith("sha256:")
        _assert_unit_rows(enc.embed_batch(_images(enc.spec)), 32)
        _assert_unit_rows(enc.embed_text(["a photo of a sparrow", "a tern"]), 32)


def _as_bin_layout(snapshot, folder, config: str, safetensors_name: str, bin_name: str):
    """The same weights re-saved as a pickled .bin beside a copy of the config (the older published layout)."""
    from safetensors.torch import load_file

    folder.mkdir()
    (folder / config).write_text((snapshot / config).read_text())
    torch.save(load_file(str(snapshot / safetensors_name)), folder / bin_name)
    return folder


def test_clip_loads_a_bare_weights_file_and_bin_layout(open_clip_snapshot, tmp_path):
    # open_clip_pytorch_model.bin (the .bin layout) in a folder of its own, with its config
    folder = _as_bin_layout(open_clip_snapshot, tmp_path / "bin", "open_clip_config.json",
                            "open_clip_model.safetensors", "open_clip_pytorch_model.bin")
    enc = _encoder("clip-vit-b-32", folder, 32)
    assert enc.weights.path.name == "open_clip_pytorch_model.bin"
    _assert_unit_rows(enc.embed_batch(_images(enc.spec)), 32)


def test_open_clip_strict_load_names_bad_keys(open_clip_snapshot, tmp_path):
    from safetensors.torch import load_file

    state = load_file(str(open_clip_snapshot / "open_clip_model.safetensors"))
    state.pop("visual.proj")
    state["visual.extra_head"] = torch.zeros(3)
    folder = tmp_path / "bad"
    folder.mkdir()
    (folder / "open_clip_config.json").write_text(json.dumps(TINY_OPEN_CLIP))
    save_file(state, str(folder / "open_clip_model.safetensors"))
    with pytest.raises(ConflictError) as err:
        _encoder("clip-vit-b-32", folder, 32)
    msg = err.value.one_line()
    assert "visual.proj" in msg and "visual.extra_head" in msg and "\n" not in msg


def test_bioclip_requires_its_config_and_matching_protocol(open_clip_snapshot, tmp_path):
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "open_clip_model.safetensors").write_bytes((open_clip_snapshot / "open_clip_model.safetensors").read_bytes())
    with pytest.raises(NotFoundError, match="open_clip_config.json"):
        _encoder("bioclip-2", bare, 32)
    other = tmp_path / "other"
    other.mkdir()
    cfg = json.loads(json.dumps(TINY_OPEN_CLIP))
    cfg["preprocess_cfg"].update(interpolation="bilinear", resize_mode="squash")
    (other / "open_clip_config.json").write_text(json.dumps(cfg))
    (other / "open_clip_model.safetensors").write_bytes((open_clip_snapshot / "open_clip_model.safetensors").read_bytes())
    with pytest.raises(ConflictError, match="preprocess_cfg differs"):
        _encoder("bioclip-2", other, 32)


def test_dinov2_timm_checkpoint_at_518_resampled_to_224(tmp_path):
    import timm

    args = {"embed_dim": 48, "depth": 1, "num_heads": 2}
    torch.manual_seed(0)
    src = timm.create_model("vit_base_patch14_dinov2", pretrained=False, num_classes=0, **args)  # 518 px, as published
    assert src.pos_embed.shape[1] == 37 * 37 + 1
    folder = tmp_path / "models--timm--vit_base_patch14_dinov2.lvd142m"
    snap = folder / "snapshots" / "abc123"
    snap.mkdir(parents=True)
    (folder / "refs").mkdir()
    (folder / "refs" / "main").write_text("abc123")
    save_file({k: v.contiguous() for k, v in src.state_dict().items()}, str(snap / "model.safetensors"))
    (snap / "config.json").write_text(json.dumps({"architecture": "vit_base_patch14_dinov2", "num_classes": 0,
                                                  "model_args": args}))
    enc = _encoder("dinov2-vitb14", folder, 48)  # a Hub cache folder given as --weights
    assert enc.model.pos_embed.shape[1] == 16 * 16 + 1
    x = _images(enc.spec)
    assert tuple(x.shape[-2:]) == (224, 224)
    _assert_unit_rows(enc.embed_batch(x), 48)
    # CLS token of the final norm, nothing else
    with torch.inference_mode():
        tokens = enc.model.forward_features(x)
        np.testing.assert_allclose(enc.model(x).numpy(), tokens[:, 0].numpy(), atol=1e-6)


# --------------------------------------------------------------------------- MiewID

def _published_state(native_state: dict) -> dict:
    """Rename a native state dict to the key names of the published MiewIdNet checkpoint (+ its head)."""
    out = {}
    for k, v in native_state.items():
        if k.startswith("gem."):
            out["pooling." + k[len("gem."):]] = v
        elif k.startswith("neck."):
            out["bn." + k[len("neck."):]] = v
        else:
            out[k] = v
    dim = native_state["neck.weight"].shape[0]
    out["final.weight"] = torch.zeros(10, dim)  # the softmax head (n_classes: 10), unused for embeddings
    out["final.bias"] = torch.zeros(10)
    return out


def test_miewid_published_key_layout_matches_real_efficientnetv2_rw_m():
    """Enumerate the real backbone's keys on the meta device (no memory, no forward)."""
    from fpr.encoders.miewid import MiewIdNative, map_published_keys

    with torch.device("meta"):
        native = MiewIdNative("efficientnetv2_rw_m")
        import timm

        published_backbone = timm.create_model("efficientnetv2_rw_m", pretrained=False)  # as MiewIdNet builds it
    assert native.dim == 2152
    # MiewIdNet replaces classifier and global_pool by Identity: the published backbone keys are timm's minus those
    published = {f"backbone.{k}": v for k, v in published_backbone.state_dict().items()
                 if not k.startswith("classifier.")}
    published.update({"pooling.p": torch.empty(1, device="meta"), "bn.weight": torch.empty(2152, device="meta"),
                      "bn.bias": torch.empty(2152, device="meta"), "bn.running_mean": torch.empty(2152, device="meta"),
                      "bn.running_var": torch.empty(2152, device="meta"),
                      "bn.num_batches_tracked": torch.empty((), dtype=torch.long, device="meta"),
                      "final.weight": torch.empty(10, 2152, device="meta"),
                      "final.bias": torch.empty(10, device="meta")})
    mapped, dropped = map_published_keys(published)
    own = native.state_dict()
    assert sorted(dropped) == ["final.bias", "final.weight"]
    assert set(mapped) == set(own)
    assert all(tuple(mapped[k].shape) == tuple(own[k].shape) for k in own)
    assert len(own) == 1202 + 6


@pytest.fixture(scope="module")
def miewid_snapshot(tmp_path_factory) -> Path:
    from fpr.encoders.miewid import MiewIdNative

    folder = tmp_path_factory.mktemp("miew") / "miewid-msv2"
    folder.mkdir()
    torch.manual_seed(0)
    native = MiewIdNative("efficientnetv2_rw_t").eval()
    with torch.no_grad():
        native.gem.p.fill_(3.0)
        native.neck.running_var.uniform_(0.5, 1.5)
    config = {"architectures": ["MiewIdNet"], "model_name": "efficientnetv2_rw_t", "use_fc": False, "fc_dim": 512,
              "loss_module": "softmax", "n_classes": 10, "model_type": "miewid"}
    (folder / "config.json").write_text(json.dumps(config))
    save_file({k: v.contiguous() for k, v in _published_state(native.state_dict()).items()},
              str(folder / "model.safetensors"))
    return folder


def test_miewid_hf_snapshot_loads_strict_and_embeds(miewid_snapshot):
    enc = _encoder("miewid-msv2", miewid_snapshot, 1024)
    assert enc.spec.preprocessing.output_size == 440
    x = torch.stack([enc.spec.preprocessing(Image.new("RGB", (60, 40), (i * 90, 40, 200))) for i in range(2)])
    x = torch.nn.functional.interpolate(x, size=96)  # the real protocol's tensor, shrunk to keep the test fast
    _assert_unit_rows(enc.embed_batch(x), 1024)


def test_miewid_pytorch_model_bin_layout(miewid_snapshot, tmp_path):
    folder = _as_bin_layout(miewid_snapshot, tmp_path / "bin", "config.json", "model.safetensors", "pytorch_model.bin")
    enc = _encoder("miewid-msv2", folder, 1024)
    assert enc.weights.path.name == "pytorch_model.bin"


def test_miewid_strict_load_reports_keys_by_name(miewid_snapshot, tmp_path):
    from safetensors.torch import load_file

    state = load_file(str(miewid_snapshot / "model.safetensors"))
    state.pop("pooling.p")
    state["backbone.mystery.weight"] = torch.zeros(1)
    folder = tmp_path / "bad"
    folder.mkdir()
    (folder / "config.json").write_text((miewid_snapshot / "config.json").read_text())
    save_file(state, str(folder / "model.safetensors"))
    with pytest.raises(FprError) as err:
        _encoder("miewid-msv2", folder, 1024)
    msg = err.value.one_line()
    assert "missing key(s): gem.p" in msg and "unexpected key(s): backbone.mystery.weight" in msg


@pytest.mark.filterwarnings("ignore:Detected pickle protocol")
def test_refuses_pickles_that_need_code(tmp_path, miewid_snapshot):
    import pickle

    folder = tmp_path / "evil"
    folder.mkdir()
    (folder / "config.json").write_text((miewid_snapshot / "config.json").read_text())

    class Boom:
        def __reduce__(self):
            return (print, ("pwned",))

    with open(folder / "pytorch_model.bin", "wb") as fh:
        pickle.dump({"x": Boom()}, fh)
    with pytest.raises(FprError, match="cannot read weights"):
        _encoder("miewid-msv2", folder, 1024)


def test_real_encoders_are_registered_with_protocols():
    rows = {eid: get_spec(eid) for eid in ("clip-vit-b-32", "dinov2-vitb14", "bioclip-2", "miewid-msv2")}
    assert {k: v.dim for k, v in rows.items()} == {"clip-vit-b-32": 512, "dinov2-vitb14": 768, "bioclip-2": 768,
                                                    "miewid-msv2": 2152}
    assert rows["clip-vit-b-32"].build_text is not None and rows["bioclip-2"].build_text is not None
    p = rows["dinov2-vitb14"].preprocessing
    assert (p.size, p.crop, p.resize_mode, p.interpolation) == (256, 224, "shortest", "bicubic")
    p = rows["miewid-msv2"].preprocessing
    assert (p.size, p.crop, p.resize_mode) == (440, None, "squash")
    p = rows["clip-vit-b-32"].preprocessing
    assert (p.size, p.crop, p.mean[0]) == (224, 224, 0.48145466)
    assert len({s.preprocessing.name for s in rows.values()}) == 4


def test_missing_weights_is_one_line_naming_fetch_and_import():
    with pytest.raises(NotFoundError) as err:
        load_encoder("miewid-msv2")
    msg = err.value.one_line()
    assert "miewid-msv2" in msg and "fpr encoders fetch miewid-msv2" in msg and "fpr encoders import" in msg
    assert "looked in" in msg and "\n" not in msg
