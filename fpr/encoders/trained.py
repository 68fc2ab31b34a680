"""Encoders made by ``fpr encoders train``: their networks, cards and discovery.

A trained encoder is a folder ``<weights_dir>/<id>/`` holding ``model.safetensors``
and ``fpr-encoder.json`` (the *card*: architecture, preprocessing, dimension,
training data fingerprint, seed, metrics, command, library versions). The
discoverer registered here turns every such card into an :class:`EncoderSpec`,
so a freshly trained encoder is usable by id with no code change. Weights load
with safetensors and a strict key match: a card that does not describe its
weights is an error, never a silently half-loaded network.

Architectures: ``fpr-cnn`` / ``fpr-cnn-s`` (small VGG-style CNNs defined here,
fast on a CPU) or any timm model name (backbone with ``num_classes=0``), each
followed by a BatchNorm + linear neck to ``dim``.
"""
from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from fpr.encoders.catalog import CARD_NAME
from fpr.encoders.preprocess import Preprocessing
from fpr.encoders.registry import BrokenEncoder, EncoderSpec, register_discoverer
from fpr.encoders.weights import ResolvedWeights, WeightsSource, weights_dir
from fpr.errors import ConflictError, FprError, InputError, NotFoundError

WEIGHTS_NAME = "model.safetensors"
CARD_FORMAT = 1

# Built-in small CNNs: name -> (stage widths, pooling). Each stage after the stem halves
# the resolution. Pooling "gem" is orderless (generalised mean); "grid4" keeps a 4x4 layout
# of the last feature map (markings are a spatial arrangement on a roughly aligned body).
CNN_ARCHS = {
    "fpr-cnn": ((32, 64, 128, 256), "gem"),
    "fpr-cnn-s": ((16, 32, 64, 128), "gem"),
    "fpr-cnn-grid": ((16, 32, 64, 128), "grid4"),
}


def _conv(cin: int, cout: int, stride: int = 1) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout),
                         nn.ReLU(inplace=True))


class GeM(nn.Module):
    """Generalised-mean pooling with a fixed exponent (p=3)."""

    def __init__(self, p: float = 3.0):
        super().__init__()
        self.p = p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.clamp(min=1e-6).pow(self.p).mean(dim=(2, 3)).pow(1.0 / self.p)


class SmallCNN(nn.Module):
    """stem conv, then per stage: conv(stride 2) + conv; GeM or 4x4-grid pooling."""

    def __init__(self, widths: tuple[int, ...], pool: str = "gem"):
        super().__init__()
        layers = [_conv(3, widths[0])]
        cin = widths[0]
        for w in widths[1:]:
            layers += [_conv(cin, w, 2), _conv(w, w)]
            cin = w
        self.features = nn.Sequential(*layers)
        if pool == "gem":
            self.pool = GeM()
            self.num_features = cin
        elif pool == "grid4":
            self.pool = nn.Sequential(nn.AdaptiveAvgPool2d(4), nn.Flatten())
            self.num_features = cin * 16
        else:  # pragma: no cover - CNN_ARCHS is fixed
            raise ValueError(pool)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(self.features(x))


class EmbeddingNet(nn.Module):
    """backbone -> BatchNorm1d -> Linear(dim). fpr L2-normalises the output."""

    def __init__(self, backbone: nn.Module, in_features: int, dim: int):
        super().__init__()
        self.backbone = backbone
        self.neck = nn.Sequential(nn.BatchNorm1d(in_features), nn.Linear(in_features, dim, bias=False))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.neck(self.backbone(x))


def valid_archs() -> list[str]:
    return list(CNN_ARCHS) + ["<any timm model, e.g. efficientnetv2_rw_t, resnet18, efficientnetv2_rw_m>"]


def check_arch(arch: str) -> str:
    if arch in CNN_ARCHS:
        return arch
    import timm

    if timm.is_model(arch):
        return arch
    close = timm.list_models(f"*{arch.split('.')[0][:12]}*")[:8]
    raise InputError(f"unknown architecture '{arch}'",
                     hint="valid: " + ", ".join(list(CNN_ARCHS) + (close or ["any timm model name"]))
                     + "; 'python -c \"import timm; print(timm.list_models())\"' lists timm's")


def build_network(arch: str, dim: int, *, pretrained: bool = False) -> EmbeddingNet:
    """A fresh network (random init unless ``pretrained`` for timm models, which may download)."""
    check_arch(arch)
    if arch in CNN_ARCHS:
        widths, pool = CNN_ARCHS[arch]
        backbone = SmallCNN(widths, pool)
        return EmbeddingNet(backbone, backbone.num_features, dim)
    import timm

    try:
        backbone = timm.create_model(arch, pretrained=pretrained, num_classes=0)
    except Exception as exc:  # timm raises RuntimeError/OSError when pretrained weights are unreachable
        raise NotFoundError(f"cannot create timm model '{arch}' (pretrained={pretrained}): "
                            f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}",
                            hint="train without --pretrained, or fetch the timm weights on a machine with a network"
                            ) from None
    return EmbeddingNet(backbone, backbone.num_features, dim)


# ----------------------------------------------------------------------------- cards

def preprocessing_from_card(card: dict) -> Preprocessing:
    p = dict(card["preprocessing"])
    p["mean"], p["std"] = tuple(p["mean"]), tuple(p["std"])
    return Preprocessing(**p)


def load_card(path: str | Path) -> dict:
    from fpr.cards import Field, read_card

    p = Path(path)
    if not p.is_file():
        raise NotFoundError("encoder card not found", where=str(p))
    return read_card(p, what="encoder card", hint="fix or retrain it (`fpr encoders train`)", fields=(
        Field("id", str), Field("architecture", str), Field("dim", int), Field("preprocessing", dict)))


def load_network(card: dict, weights_path: str | Path) -> EmbeddingNet:
    """Build the card's network and load its safetensors weights with a strict key match."""
    from safetensors.torch import load_file

    try:
        state = load_file(str(weights_path))
    except Exception as exc:
        raise InputError(f"cannot read weights of encoder '{card['id']}' ({type(exc).__name__}: {exc})",
                         where=str(weights_path)) from None
    if "blend" in card:
        return _load_blend(card, state, str(weights_path))
    return _strict_load(build_network(card["architecture"], int(card["dim"])), card, state, weights_path)


def _load_blend(card: dict, state: dict, where: str) -> nn.Module:
    """A blend card (:mod:`fpr.encoders.blend`): its general network from ``state``, the partner by id."""
    from fpr.encoders import blend

    rest, share, layout_share = blend.split_state(state, where)
    if (layout_share > 0) != ("layout_share" in card["blend"]):
        raise ConflictError("blend weights and card disagree on the layout share", where=where,
                            hint="the card and weights file are from different runs: retrain with --blend")
    general = _strict_load(build_network(card["architecture"], int(card["blend"]["general_dim"])), card, rest, where)
    partner, _, checksum = blend.partner_network(card["blend"]["partner"])
    if checksum != card["blend"]["partner_checksum"]:
        raise ConflictError(f"blend partner '{card['blend']['partner']}' has other weights than the blend was "
                            f"calibrated with ({checksum[:12]} vs {card['blend']['partner_checksum'][:12]})", where=where)
    pre = card["preprocessing"]
    layout = blend.Layout(pre["mean"], pre["std"]) if layout_share > 0 else None
    return blend.BlendNet(general, partner, share, layout_share, layout).eval()


def _strict_load(net: EmbeddingNet, card: dict, state: dict, weights_path) -> EmbeddingNet:
    own = net.state_dict()
    missing = sorted(set(own) - set(state))
    unexpected = sorted(set(state) - set(own))
    if missing or unexpected:
        raise ConflictError(f"weights do not match the card's architecture '{card['architecture']}' "
                            f"({len(missing)} missing, {len(unexpected)} unexpected keys, e.g. "
                            f"{(missing or unexpected)[0]})", where=str(weights_path))
    wrong = [k for k, v in state.items() if tuple(v.shape) != tuple(own[k].shape)]
    if wrong:
        raise ConflictError(f"weights do not match the card's architecture '{card['architecture']}' "
                            f"({len(wrong)} tensors of another shape, e.g. {wrong[0]} "
                            f"{tuple(state[wrong[0]].shape)} vs {tuple(own[wrong[0]].shape)})", where=str(weights_path))
    state = {k: v.to(own[k].dtype) for k, v in state.items()}
    net.load_state_dict(state, strict=True)
    return net.eval()


def spec_from_card(card: dict, weights: WeightsSource, *, tags: tuple[str, ...] = ("trained",)) -> EncoderSpec:
    """The spec of a card; a card with values fpr cannot use is one InputError saying which."""
    try:
        return _spec_from_card(card, weights, tags)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise InputError(f"encoder card has a missing or invalid value ({type(exc).__name__}: {exc})") from None


def _spec_from_card(card: dict, weights: WeightsSource, tags: tuple[str, ...]) -> EncoderSpec:
    def build(resolved: ResolvedWeights) -> nn.Module:
        return load_network(card, resolved.path)

    metrics = card.get("metrics", {})
    score = metrics.get("val_map")
    desc = card.get("description") or (f"{card['architecture']} trained by fpr on {card.get('training_data', {}).get('name', '?')}"
                                       + (f"; val mAP {score:.3f}" if isinstance(score, (int, float)) else ""))
    return EncoderSpec(
        id=card["id"], family=card.get("family", "trained"), dim=int(card["dim"]),
        preprocessing=preprocessing_from_card(card), weights=weights, build=build, description=desc, tags=tags)


def discover() -> list[EncoderSpec | BrokenEncoder]:
    """One spec per ``<weights_dir>/<id>/fpr-encoder.json``; a card that cannot be used is a BrokenEncoder.

    A broken card (invalid JSON, a missing key, a bad value, an id that is not its folder's
    name) is listed by ``fpr encoders list`` with status ``broken`` and the reason, and using
    it raises that reason: a typo never makes an encoder silently vanish.
    """
    root = weights_dir()
    specs: list[EncoderSpec | BrokenEncoder] = []
    if not root.is_dir():
        return specs
    for card_path in sorted(root.glob(f"*/{CARD_NAME}")):
        folder_id = card_path.parent.name
        try:
            card = load_card(card_path)
            if card["id"] != folder_id:
                raise InputError(f"the card says id '{card['id']}' but sits in folder '{folder_id}' "
                                 "(a card must sit in the folder named after its id)")
            spec = spec_from_card(card, WeightsSource(kind="local", files=(WEIGHTS_NAME,), folder_name=folder_id))
        except FprError as exc:
            specs.append(BrokenEncoder(folder_id, exc.what, str(card_path)))
            continue
        specs.append(spec)
    return specs


register_discoverer(discover)
