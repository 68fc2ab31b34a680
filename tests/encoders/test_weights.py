"""Weights resolution order, HF cache layout, checksums, offline fetch and atomic import."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from fpr.encoders import weights as W
from fpr.errors import ConflictError, FprError, NotFoundError

SRC = W.WeightsSource(kind="hf", repo="org/model", files=("model.safetensors", "pytorch_model.bin"),
                      optional_files=("config.json",))
NEEDS_CFG = W.WeightsSource(kind="hf", repo="org/clip", files=("open_clip_model.safetensors",),
                            extra_files=("open_clip_config.json",))


def _hf_cache_file(repo: str, name: str, data: bytes, rev: str = "0123abcd") -> Path:
    """The Hugging Face hub cache layout: blobs/, snapshots/<rev>/<file> -> blob symlink, refs/main."""
    root = Path(os.environ["HF_HUB_CACHE"]) / f"models--{repo.replace('/', '--')}"
    (root / "blobs").mkdir(parents=True, exist_ok=True)
    (root / "refs").mkdir(exist_ok=True)
    (root / "refs" / "main").write_text(rev)
    blob = root / "blobs" / f"blob-{name}"
    blob.write_bytes(data)
    snap = root / "snapshots" / rev
    snap.mkdir(parents=True, exist_ok=True)
    (snap / name).symlink_to(os.path.relpath(blob, snap))
    return snap / name


def test_resolution_order_explicit_then_weights_dir_then_hf_cache(tmp_path):
    hub = _hf_cache_file("org/model", "model.safetensors", b"hub")
    r = W.resolve_weights("m", SRC)
    assert r.where == "hf-cache" and r.path == hub and r.checksum == W.file_checksum(hub)
    local = W.weights_dir() / "m"
    local.mkdir(parents=True)
    (local / "pytorch_model.bin").write_bytes(b"local")
    r = W.resolve_weights("m", SRC)
    assert r.where == "weights-dir" and r.path == local / "pytorch_model.bin"
    explicit = tmp_path / "x.safetensors"
    explicit.write_bytes(b"mine")
    r = W.resolve_weights("m", SRC, explicit=explicit)
    assert r.where == "explicit" and r.path == explicit


def test_explicit_folder_prefers_listed_names_and_accepts_repo_cache_folder(tmp_path):
    hub = _hf_cache_file("org/model", "pytorch_model.bin", b"bin")
    repo_folder = hub.parents[2]
    assert W.resolve_weights("m", SRC, explicit=repo_folder).path == hub
    folder = tmp_path / "f"
    folder.mkdir()
    (folder / "pytorch_model.bin").write_bytes(b"1")
    (folder / "model.safetensors").write_bytes(b"2")
    assert W.resolve_weights("m", SRC, explicit=folder).path.name == "model.safetensors"
    with pytest.raises(NotFoundError, match="not found"):
        W.resolve_weights("m", SRC, explicit=tmp_path / "nope")


def test_required_config_must_sit_beside_weights(tmp_path):
    folder = tmp_path / "snap"
    folder.mkdir()
    (folder / "open_clip_model.safetensors").write_bytes(b"w")
    with pytest.raises(NotFoundError, match="open_clip_config.json"):
        W.resolve_weights("c", NEEDS_CFG, explicit=folder)
    local = W.weights_dir() / "c"
    local.mkdir(parents=True)
    (local / "open_clip_model.safetensors").write_bytes(b"w")
    with pytest.raises(NotFoundError, match="incomplete"):
        W.resolve_weights("c", NEEDS_CFG)
    assert not W.resolve_weights("c", NEEDS_CFG, required=False).found


def test_checksum_covers_config_beside_weights(tmp_path):
    folder = tmp_path / "snap"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(b"w")
    bare = W.resolve_weights("m", SRC, explicit=folder / "model.safetensors").checksum
    assert bare == W.file_checksum(folder / "model.safetensors")
    (folder / "config.json").write_text('{"model_name": "a"}')
    with_cfg = W.resolve_weights("m", SRC, explicit=folder).checksum
    (folder / "config.json").write_text('{"model_name": "b"}')
    changed = W.resolve_weights("m", SRC, explicit=folder).checksum
    assert len({bare, with_cfg, changed}) == 3


def test_missing_message_names_encoder_places_and_commands():
    with pytest.raises(NotFoundError) as err:
        W.resolve_weights("m", SRC)
    msg = err.value.one_line()
    assert "encoder 'm'" in msg and str(W.weights_dir() / "m" / "model.safetensors") in msg
    assert "Hugging Face cache for org/model" in msg
    assert "fpr encoders fetch m" in msg and "fpr encoders import m PATH" in msg


def test_fetch_refuses_offline_in_one_line(monkeypatch):
    monkeypatch.setenv("FPR_OFFLINE", "1")
    with pytest.raises(FprError) as err:
        W.fetch_weights("m", SRC)
    msg = err.value.one_line()
    assert "FPR_OFFLINE" in msg and "fpr encoders import m PATH" in msg and "\n" not in msg
    assert not (W.weights_dir() / "m").exists()


def test_fetch_connection_failure_is_one_line(monkeypatch):
    monkeypatch.setenv("FPR_OFFLINE", "0")
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # discard port: connection refused at once
    for var in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(FprError) as err:
        W.fetch_weights("m", SRC)
    msg = err.value.one_line()
    assert "cannot fetch weights for encoder 'm'" in msg and "import" in msg


def test_import_is_atomic_and_refuses_to_overwrite(tmp_path):
    src = tmp_path / "dl"
    src.mkdir()
    (src / "model.safetensors").write_bytes(b"v1")
    (src / "config.json").write_text("{}")
    (src / "README.md").write_text("not copied")
    r = W.resolve_weights("m", SRC, explicit=src)
    dest = W.import_files("m", SRC, r)
    assert sorted(p.name for p in dest.iterdir()) == ["config.json", "model.safetensors"]
    again = W.resolve_weights("m", SRC)
    assert again.where == "weights-dir" and again.checksum == r.checksum
    (src / "model.safetensors").write_bytes(b"v2")
    r2 = W.resolve_weights("m", SRC, explicit=src)
    with pytest.raises(ConflictError, match="--overwrite"):
        W.import_files("m", SRC, r2)
    W.import_files("m", SRC, r2, overwrite=True)
    assert (dest / "model.safetensors").read_bytes() == b"v2"
    assert not [p for p in dest.parent.iterdir() if p.name.startswith((".tmp-", ".old-"))]


def test_import_follows_hf_cache_symlinks_and_renames_to_known_name(tmp_path):
    hub = _hf_cache_file("org/model", "model.safetensors", b"real-bytes")
    dest = W.import_files("m", SRC, W.resolve_weights("m", SRC, explicit=hub))
    assert not (dest / "model.safetensors").is_symlink()
    assert (dest / "model.safetensors").read_bytes() == b"real-bytes"
    odd = tmp_path / "weights-v3.safetensors"
    odd.write_bytes(b"x")
    dest = W.import_files("m", SRC, W.resolve_weights("m", SRC, explicit=odd), overwrite=True)
    assert [p.name for p in dest.iterdir()] == ["model.safetensors"]


def test_import_converts_a_pickle_to_the_safetensors_name_and_verifies_the_staged_copy(tmp_path):
    import torch
    from safetensors.torch import load_file

    torch.save({"model": {"w": torch.ones(2)}}, tmp_path / "ckpt.pth")
    seen = []
    dest = W.import_files("m", SRC, W.resolve_weights("m", SRC, explicit=tmp_path / "ckpt.pth"),
                          verify=lambda staged: seen.append((staged.path.name, staged.path.parent.name)))
    assert [p.name for p in dest.iterdir()] == ["model.safetensors"]
    assert load_file(str(dest / "model.safetensors"))["w"].tolist() == [1.0, 1.0]
    assert seen[0][0] == "model.safetensors" and seen[0][1].startswith(".tmp-m-")  # proven before the swap

    def refuse(staged):
        raise ConflictError("does not load")

    torch.save({"w": torch.zeros(2)}, tmp_path / "other.pth")
    with pytest.raises(ConflictError):
        W.import_files("m", SRC, W.resolve_weights("m", SRC, explicit=tmp_path / "other.pth"), overwrite=True,
                       verify=refuse)
    assert load_file(str(dest / "model.safetensors"))["w"].tolist() == [1.0, 1.0]  # the old weights stay
    assert not [p for p in dest.parent.iterdir() if p.name.startswith((".tmp-", ".old-"))]
