"""``clip-vit-b-32``: OpenAI CLIP ViT-B/32 through open_clip, image and text towers.

Weights: the open_clip checkpoint of OpenAI's ViT-B/32, published on the Hugging
Face Hub as ``timm/vit_base_patch32_clip_224.openai`` (``open_clip_model.safetensors``,
or ``open_clip_pytorch_model.bin``) -- the same files
``open_clip.create_model('ViT-B-32', pretrained='openai')`` downloads. OpenAI
trained with QuickGELU, so the network is built with ``force_quick_gelu``.

Protocol (open_clip's eval transform for these weights): resize the shortest side
to 224 (bicubic), centre-crop 224, OpenAI mean/std.

The loader below is shared with ``bioclip-2``: when an ``open_clip_config.json``
sits beside the weights (a Hugging Face snapshot or a ``local-dir`` folder), the
network is built from it (open_clip's ``local-dir:`` schema); otherwise from the
built-in open_clip config. Either way the checkpoint is loaded with a strict key
match and ``weights_only=True``, and nothing touches the network. open_clip is
imported inside the build functions so that importing this module is cheap.
"""
from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Callable

import torch

from fpr.cache import load_once
from fpr.encoders.preprocess import OPENAI_MEAN, OPENAI_STD, Preprocessing, differences, from_open_clip_cfg
from fpr.encoders.registry import EncoderSpec, register
from fpr.encoders.weights import ResolvedWeights, WeightsSource
from fpr.errors import ConflictError, InputError, NotFoundError

OPEN_CLIP_CONFIG = "open_clip_config.json"
CLIP_REVISION = "a6f597a30f7b82c51704746581f9a4e41421e878"
CLIP_SHA256 = "e6d1bd7789aa45192b3bf90570a789b478bae1b74ebcce7eddd908e83a2b7c31"
OPEN_CLIP_FILES = ("open_clip_model.safetensors", "open_clip_pytorch_model.bin")



class OpenClipImage(torch.nn.Module):
    """The image tower of an open_clip model: (B,3,H,W) -> (B,embed_dim), unnormalised."""

    def __init__(self, clip_model: torch.nn.Module):
        super().__init__()
        self.clip = clip_model

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.clip.encode_image(x)


def read_open_clip_config(path: Path, encoder_id: str) -> dict:
    try:
        cfg = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise InputError(f"unreadable {OPEN_CLIP_CONFIG} for encoder '{encoder_id}' ({exc})", where=str(path))
    if not isinstance(cfg, dict) or "model_cfg" not in cfg:
        raise InputError(f"{OPEN_CLIP_CONFIG} for encoder '{encoder_id}' has no 'model_cfg'", where=str(path))
    return cfg


def load_open_clip(resolved: ResolvedWeights, *, encoder_id: str, default_model: str | None,
                   force_quick_gelu: bool = False, require_config: bool = False) -> tuple[torch.nn.Module, str]:
    """Build an open_clip model and load ``resolved`` strictly; returns (model in eval mode, tokenizer name).

    Loaded models are memoised per weights file so the image and text towers of
    one encoder share one network.
    """
    if resolved.path is None:
        raise NotFoundError(f"weights for encoder '{encoder_id}' are missing")
    cfg_path = resolved.sibling(OPEN_CLIP_CONFIG)
    if require_config and cfg_path is None:
        raise NotFoundError(f"encoder '{encoder_id}' needs {OPEN_CLIP_CONFIG} beside its weights",
                            where=str(resolved.folder),
                            hint="import the whole Hugging Face snapshot folder, not only the weights file")
    model_name = f"local-dir:{resolved.folder}" if cfg_path is not None else default_model
    if model_name is None:
        raise NotFoundError(f"encoder '{encoder_id}' needs {OPEN_CLIP_CONFIG} beside its weights",
                            where=str(resolved.folder))
    key = (str(resolved.path), resolved.checksum, model_name, force_quick_gelu)
    return load_once("open_clip models", key,
                     lambda: _build_open_clip(resolved, encoder_id, cfg_path, default_model, model_name,
                                              force_quick_gelu))


def _build_open_clip(resolved: ResolvedWeights, encoder_id: str, cfg_path: Path | None, default_model: str | None,
                     model_name: str, force_quick_gelu: bool) -> tuple[torch.nn.Module, str]:
    if cfg_path is not None:
        read_open_clip_config(cfg_path, encoder_id)  # a clear error before open_clip's own
    import open_clip

    previous = logging.root.manager.disable
    logging.disable(logging.WARNING)  # open_clip warns "initialized randomly": the weights load just below
    try:
        model = open_clip.create_model(model_name, pretrained=None, load_weights=False,
                                       force_quick_gelu=force_quick_gelu, device="cpu")
    except (ValueError, RuntimeError, KeyError, TypeError) as exc:
        raise InputError(f"cannot build encoder '{encoder_id}' from its open_clip config "
                         f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})",
                         where=str(cfg_path or default_model)) from None
    finally:
        logging.disable(previous)
    _load_checkpoint(model, resolved.path, encoder_id)
    model.eval()
    return model, model_name


def _load_checkpoint(model: torch.nn.Module, path: Path, encoder_id: str) -> None:
    """open_clip's checkpoint loader (format conversions included), strict, reported as one line."""
    import open_clip

    from fpr.encoders.checkpoints import key_mismatch_error

    if Path(path).suffix not in (".safetensors", ".bin", ".pt", ".pth"):
        raise InputError(f"unsupported weights file type for encoder '{encoder_id}'", where=str(path),
                         hint="use open_clip_model.safetensors or open_clip_pytorch_model.bin")
    try:
        incompatible = open_clip.load_checkpoint(model, str(path), strict=False, weights_only=True, device="cpu")
    except RuntimeError as exc:  # shape mismatches raise even when not strict
        lines = [ln.strip() for ln in str(exc).splitlines() if "size mismatch" in ln]
        if not lines:
            raise _unreadable(path, encoder_id, exc) from None
        raise ConflictError(f"weights do not match encoder '{encoder_id}': {'; '.join(lines[:3])}", where=str(path),
                            hint="check that the weights and open_clip_config.json belong together") from None
    except Exception as exc:  # not a checkpoint, truncated, or a pickle that needs code (weights_only refuses it)
        raise _unreadable(path, encoder_id, exc) from None
    missing = sorted(getattr(incompatible, "missing_keys", []) or [])
    unexpected = sorted(getattr(incompatible, "unexpected_keys", []) or [])
    if missing or unexpected:
        raise key_mismatch_error(encoder_id, path, missing, unexpected,
                                 hint="check that the weights and open_clip_config.json belong together")


def _unreadable(path: Path, encoder_id: str, exc: Exception) -> InputError:
    first = (str(exc).splitlines() or [type(exc).__name__])[0][:160]
    return InputError(f"cannot read weights for encoder '{encoder_id}' ({type(exc).__name__}: {first})",
                      where=str(path), hint="re-download the file; pickles that need code to load are refused")


def check_open_clip_protocol(resolved: ResolvedWeights, expected: Preprocessing, encoder_id: str) -> None:
    """The spec's protocol must be what the snapshot's own ``preprocess_cfg`` asks for."""
    cfg_path = resolved.sibling(OPEN_CLIP_CONFIG)
    if cfg_path is None:
        return
    cfg = read_open_clip_config(cfg_path, encoder_id)
    image_size = cfg["model_cfg"].get("vision_cfg", {}).get("image_size")
    try:
        actual = from_open_clip_cfg(expected.name, cfg.get("preprocess_cfg", {}), image_size)
    except ValueError as exc:
        raise ConflictError(f"encoder '{encoder_id}': {exc}", where=str(cfg_path)) from None
    diff = differences(actual, expected)
    if diff:
        raise ConflictError(f"encoder '{encoder_id}': the weights' preprocess_cfg differs from fpr's protocol "
                            f"'{expected.name}' ({'; '.join(diff)})", where=str(cfg_path),
                            hint="these weights need their own encoder id and protocol")


def text_encoder(resolved: ResolvedWeights, *, encoder_id: str, default_model: str | None,
                 force_quick_gelu: bool = False, require_config: bool = False
                 ) -> Callable[[list[str]], torch.Tensor]:
    """A callable mapping prompts to (B,embed_dim) text features in the image space (CLIP-T)."""
    model, name = load_open_clip(resolved, encoder_id=encoder_id, default_model=default_model,
                                 force_quick_gelu=force_quick_gelu, require_config=require_config)
    import open_clip

    tokenizer = open_clip.get_tokenizer(name)  # SimpleTokenizer: its BPE vocabulary ships with open_clip

    def encode(texts: list[str]) -> torch.Tensor:
        tokens = tokenizer([str(t) for t in texts])
        device = next(model.parameters()).device
        with torch.inference_mode():
            return model.encode_text(tokens.to(device))

    return encode


# --------------------------------------------------------------------------- clip-vit-b-32

CLIP_ID = "clip-vit-b-32"
CLIP_MODEL = "ViT-B-32"
CLIP_PREPROCESSING = Preprocessing(name="openai-clip-shortest224-bicubic-crop224", size=224, resize_mode="shortest",
                                   crop=224, interpolation="bicubic", mean=OPENAI_MEAN, std=OPENAI_STD)


def _build_clip(resolved: ResolvedWeights) -> torch.nn.Module:
    check_open_clip_protocol(resolved, CLIP_PREPROCESSING, CLIP_ID)
    model, _ = load_open_clip(resolved, encoder_id=CLIP_ID, default_model=CLIP_MODEL, force_quick_gelu=True)
    return OpenClipImage(model)


def _build_clip_text(resolved: ResolvedWeights) -> Callable[[list[str]], torch.Tensor]:
    return text_encoder(resolved, encoder_id=CLIP_ID, default_model=CLIP_MODEL, force_quick_gelu=True)


register(EncoderSpec(
    id=CLIP_ID,
    family="open_clip",
    dim=512,
    preprocessing=CLIP_PREPROCESSING,
    weights=WeightsSource(kind="hf", repo="timm/vit_base_patch32_clip_224.openai", files=OPEN_CLIP_FILES,
                          optional_files=(OPEN_CLIP_CONFIG,),
                          # Hub snapshot a6f597a3... and the SHA-256 of its open_clip_model.safetensors (605,143,284
                          # bytes): the same pair is pinned independently by several public projects (found with
                          # the code index: find_string "models--timm--vit_base_patch32_clip_224.openai/sn", e.g. a
                          # snapshot path .../snapshots/a6f597a30f7b82c51704746581f9a4e41421e878/
                          # open_clip_model.safetensors beside CLIP_SHA256 = "e6d1bd77...", and a model registry
                          # entry weights_sha256 = "e6d1bd77..." for openclip-vitb32-openai)
                          revision=CLIP_REVISION, published_sha256=(("open_clip_model.safetensors", CLIP_SHA256),),
                          published_from=f"timm/vit_base_patch32_clip_224.openai at {CLIP_REVISION[:12]}, as "
                                         "pinned by public projects (see fpr/encoders/clip.py)"),
    build=_build_clip,
    build_text=_build_clip_text,
    description="OpenAI CLIP ViT-B/32 (open_clip, QuickGELU); general-purpose; text tower for CLIP-T",
    tags=("general", "text"),
))
