"""``dinov2-vitb14``: DINOv2 ViT-B/14 (timm ``vit_base_patch14_dinov2.lvd142m``), CLS token, 768-d.

Weights: the timm checkpoint on the Hugging Face Hub, ``timm/vit_base_patch14_dinov2.lvd142m``
(``model.safetensors`` or ``pytorch_model.bin``; trained at 518 px). The network
is built at 224 px with ``num_classes=0`` (output: the final-norm CLS token), and
the checkpoint goes through timm's own ViT checkpoint filter (which resamples the
position embedding from 37x37 to 16x16 patches and converts the original
facebookresearch key layout) before a strict load. A ``config.json`` beside the
weights (timm's Hub layout) may carry ``model_args``; they are honoured, as
``timm.create_model('hf-hub:...')`` does.

Protocol (DINOv2's linear-eval transform): resize the shortest side to 256
(bicubic), centre-crop 224, ImageNet mean/std.
"""
from __future__ import annotations

import json

import torch

from fpr.encoders.preprocess import IMAGENET_MEAN, IMAGENET_STD, Preprocessing
from fpr.encoders.registry import EncoderSpec, register
from fpr.encoders.weights import ResolvedWeights, WeightsSource
from fpr.encoders.checkpoints import load_strict, read_state_dict
from fpr.errors import InputError

DINOV2_ID = "dinov2-vitb14"
TIMM_NAME = "vit_base_patch14_dinov2.lvd142m"
IMG_SIZE = 224
PREPROCESSING = Preprocessing(name="dinov2-shortest256-bicubic-crop224-imagenet", size=256, resize_mode="shortest",
                              crop=224, interpolation="bicubic", mean=IMAGENET_MEAN, std=IMAGENET_STD)
# model_args a config.json may override (architecture sizes); anything else is ignored.
_ALLOWED_ARGS = {"embed_dim", "depth", "num_heads", "mlp_ratio", "init_values", "patch_size", "reg_tokens",
                 "no_embed_class", "qkv_bias"}


def model_args_from_config(resolved: ResolvedWeights) -> dict:
    cfg_path = resolved.sibling("config.json")
    if cfg_path is None:
        return {}
    try:
        cfg = json.loads(cfg_path.read_text())
    except (OSError, ValueError) as exc:
        raise InputError(f"unreadable config.json for encoder '{DINOV2_ID}' ({exc})", where=str(cfg_path))
    arch = cfg.get("architecture")
    if arch and arch != TIMM_NAME.split(".")[0]:
        raise InputError(f"config.json describes '{arch}', not {TIMM_NAME.split('.')[0]}", where=str(cfg_path),
                         hint=f"weights for '{DINOV2_ID}' come from timm/{TIMM_NAME}")
    args = cfg.get("model_args") or {}
    return {k: v for k, v in args.items() if k in _ALLOWED_ARGS}


def build_dinov2(resolved: ResolvedWeights, **overrides) -> torch.nn.Module:
    import timm
    from timm.models.vision_transformer import checkpoint_filter_fn

    args = {**model_args_from_config(resolved), **overrides}
    model = timm.create_model(TIMM_NAME, pretrained=False, num_classes=0, img_size=IMG_SIZE, **args)
    state = read_state_dict(resolved.path, encoder_id=DINOV2_ID)
    try:
        state = checkpoint_filter_fn(state, model)
    except Exception as exc:  # a checkpoint of another architecture: say so by name below
        raise InputError(f"weights for encoder '{DINOV2_ID}' are not a ViT checkpoint ({type(exc).__name__}: {exc})",
                         where=str(resolved.path)) from None
    load_strict(model, state, encoder_id=DINOV2_ID, where=resolved.path)
    return model.eval()


register(EncoderSpec(
    id=DINOV2_ID,
    family="timm-vit",
    dim=768,
    preprocessing=PREPROCESSING,
    weights=WeightsSource(kind="hf", repo=f"timm/{TIMM_NAME}", files=("model.safetensors", "pytorch_model.bin"),
                          optional_files=("config.json",),
                          # the Hub snapshot a public project loads model.safetensors from (found with the code
                          # index: find_string "models--timm--vit_base_patch14_dinov2": DINOV2_CACHE =
                          # ".../models--timm--vit_base_patch14_dinov2.lvd142m/snapshots/4685c99d.../
                          # model.safetensors"); no citable SHA-256 of the file was found, so it stays unverified
                          revision="4685c99dabffe5affac90bd99dbffd25801ae58d"),
    build=build_dinov2,
    description="DINOv2 ViT-B/14 (LVD-142M), CLS token at 224 px; general-purpose",
    tags=("general",),
))
