"""``miewid-msv2``: MiewID multi-species v2, implemented natively (no remote code).

The published model (Hugging Face ``conservationxlabs/miewid-msv2``) is a
transformers ``MiewIdNet`` with custom code; fpr never runs that code. Its
``config.json`` says ``model_name: efficientnetv2_rw_m``, ``use_fc: false``,
``loss_module: softmax``, ``n_classes: 10``; the network is

    backbone  timm efficientnetv2_rw_m, classifier and global pool removed -> (B,2152,h,w)
    pooling   GeM with a *learnable* exponent ``p`` (initialised at 3, stored in the checkpoint), eps 1e-6
    bn        BatchNorm1d(2152)  -> the embedding (2152-d)

plus a training-only classification head (``final``) that embeddings never use.
Here the same network is ``timm.create_model(name, num_classes=0, global_pool='')``
+ :class:`GeM` + a BatchNorm1d ``neck``, and the published state dict is mapped
onto it with an explicit table (:data:`KEY_MAP`): ``backbone.*`` -> ``backbone.*``,
``pooling.p`` -> ``gem.p``, ``bn.*`` -> ``neck.*``; keys of the training head
(:data:`DROPPED_PREFIXES`) are dropped by name. Everything else must match
exactly: a strict load reports missing/unexpected keys by name.

Protocol (the model card's): squash-resize to 440x440, ImageNet mean/std.
"""
from __future__ import annotations

import json

import torch
from torch import nn

from fpr.encoders.preprocess import IMAGENET_MEAN, IMAGENET_STD, Preprocessing
from fpr.encoders.registry import EncoderSpec, register
from fpr.encoders.weights import ResolvedWeights, WeightsSource
from fpr.encoders.checkpoints import load_strict, read_state_dict
from fpr.errors import InputError

MIEWID_ID = "miewid-msv2"
MIEWID_REPO = "conservationxlabs/miewid-msv2"
DEFAULT_BACKBONE = "efficientnetv2_rw_m"
PREPROCESSING = Preprocessing(name="miewid-squash440-bilinear-imagenet", size=440, resize_mode="squash",
                              interpolation="bilinear", mean=IMAGENET_MEAN, std=IMAGENET_STD)

# published prefix -> native prefix (first match wins)
KEY_MAP = (("backbone.", "backbone."), ("pooling.p", "gem.p"), ("bn.", "neck."))
# training-only parts of the published MiewIdNet: classification head, optional fc, temperature
DROPPED_PREFIXES = ("final.", "fc.", "temperature")


class GeM(nn.Module):
    """Generalised-mean pooling with a learnable exponent: (mean(clamp(x, eps)^p))^(1/p) over h, w."""

    def __init__(self, p: float = 3.0, eps: float = 1e-6):
        super().__init__()
        self.p = nn.Parameter(torch.ones(1) * p)
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.clamp(min=self.eps).pow(self.p).mean(dim=(-2, -1)).pow(1.0 / self.p)


class MiewIdNative(nn.Module):
    """timm backbone (feature map) -> GeM -> BatchNorm1d; eval mode gives the published embedding."""

    def __init__(self, backbone_name: str = DEFAULT_BACKBONE, **timm_kwargs):
        super().__init__()
        import timm

        self.backbone = timm.create_model(backbone_name, pretrained=False, num_classes=0, global_pool="",
                                          **timm_kwargs)
        self.gem = GeM()
        self.neck = nn.BatchNorm1d(self.backbone.num_features)

    @property
    def dim(self) -> int:
        return self.neck.num_features

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        feats = self.backbone(x)  # (B, C, h, w): no pooling, no classifier
        return self.neck(self.gem(feats).flatten(1))


def map_published_keys(state: dict) -> tuple[dict, list[str]]:
    """Published MiewIdNet key names -> native names; returns (mapped state, dropped key names)."""
    mapped, dropped = {}, []
    for key, value in state.items():
        if key.startswith(DROPPED_PREFIXES):
            dropped.append(key)
            continue
        for src, dst in KEY_MAP:
            if key.startswith(src):
                mapped[dst + key[len(src):]] = value
                break
        else:
            mapped[key] = value  # unknown: the strict load names it
    return mapped, dropped


def read_config(resolved: ResolvedWeights) -> dict:
    """The published config.json beside the weights (optional: defaults are msv2's)."""
    cfg_path = resolved.sibling("config.json")
    if cfg_path is None:
        return {"model_name": DEFAULT_BACKBONE, "use_fc": False}
    try:
        cfg = json.loads(cfg_path.read_text())
    except (OSError, ValueError) as exc:
        raise InputError(f"unreadable config.json for encoder '{MIEWID_ID}' ({exc})", where=str(cfg_path))
    if cfg.get("use_fc"):
        raise InputError(f"config.json sets use_fc: true; encoder '{MIEWID_ID}' supports the published "
                         "use_fc: false network only", where=str(cfg_path))
    if not isinstance(cfg.get("model_name", DEFAULT_BACKBONE), str):
        raise InputError("config.json 'model_name' must be a timm model name", where=str(cfg_path))
    return cfg


def build_miewid(resolved: ResolvedWeights) -> torch.nn.Module:
    cfg = read_config(resolved)
    name = cfg.get("model_name", DEFAULT_BACKBONE)
    try:
        model = MiewIdNative(name)
    except RuntimeError as exc:  # unknown timm model
        raise InputError(f"config.json names an unknown timm backbone '{name}' ({exc})",
                         where=str(resolved.sibling("config.json") or resolved.path)) from None
    state = read_state_dict(resolved.path, encoder_id=MIEWID_ID)
    state, _dropped = map_published_keys(state)
    load_strict(model, state, encoder_id=MIEWID_ID, where=resolved.path)
    return model.eval()


register(EncoderSpec(
    id=MIEWID_ID,
    family="miewid",
    dim=2152,
    preprocessing=PREPROCESSING,
    weights=WeightsSource(kind="hf", repo=MIEWID_REPO, files=("model.safetensors", "pytorch_model.bin"),
                          optional_files=("config.json",)),
    build=build_miewid,
    description="MiewID msv2 (EfficientNetV2-M + GeM + BN, native, no remote code); the paper's Re-ID specialist",
    tags=("specialist", "reid"),
))
